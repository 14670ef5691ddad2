//! The Redis an example talks to: `REDIS_URL` (or `REDIS_URLS`), a server on 127.0.0.1:6379, or
//! private servers started for the run; and how an example says what it is missing.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::RedisServer;

/// Ok when the redis-server binary runs; else its name.
fn redis_server_installed() -> Result<(), std::ffi::OsString> {
    let bin = std::env::var_os("REDIS_SERVER_BIN").unwrap_or_else(|| "redis-server".into());
    // Not `server()`: an example says how to install a missing server, without a panic hook.
    let runs = Command::new(&bin)
        .arg("--version")
        .stdout(Stdio::null())
        .status();
    if runs.is_ok_and(|s| s.success()) {
        Ok(())
    } else {
        Err(bin)
    }
}

/// The value of `found`, or its message on stderr and exit code 1: for examples' `main`.
pub fn or_exit<T>(found: Result<T, String>) -> T {
    found.unwrap_or_else(|how| {
        eprintln!("{how}");
        std::process::exit(1)
    })
}

/// The Redis an example talks to: `REDIS_URL` when set; else the one answering on
/// 127.0.0.1:6379; else a private redis-server started for this run (said on stderr). `Err` says
/// how to get a redis-server when none is installed.
pub fn redis_for_example() -> Result<(String, Option<RedisServer>), String> {
    if let Some(url) = std::env::var("REDIS_URL").ok().filter(|u| !u.is_empty()) {
        return Ok((url, None));
    }
    let local = "redis://127.0.0.1:6379/0";
    if redis::Client::open(local).is_ok_and(|c| ping(&c, Duration::from_millis(300))) {
        eprintln!("using the Redis on 127.0.0.1:6379 (set REDIS_URL to use another)");
        return Ok((local.to_owned(), None));
    }
    redis_server_installed().map_err(|bin| {
        format!(
            "no Redis: REDIS_URL is unset, nothing answers on 127.0.0.1:6379, and {bin:?} is not \
             installed.\nInstall one (Debian/Ubuntu: apt-get install redis-server; macOS: brew \
             install redis), or set REDIS_URL=redis://host:port/db"
        )
    })?;
    let server = RedisServer::start();
    eprintln!(
        "started a private redis-server on {} for this run (stopped at exit)",
        server.url()
    );
    Ok((server.url(), Some(server)))
}

/// `n` Redis servers for an example: the comma-separated `REDIS_URLS` when set (at least `n`
/// of them), else `n` private redis-servers started for this run (said on stderr).
pub fn servers_for_example(n: usize) -> Result<(Vec<String>, Vec<RedisServer>), String> {
    if let Some(urls) = std::env::var("REDIS_URLS").ok().filter(|u| !u.is_empty()) {
        let urls: Vec<String> = urls.split(',').map(|u| u.trim().to_owned()).collect();
        if urls.len() < n {
            return Err(format!(
                "REDIS_URLS names {} servers; this example needs {n}",
                urls.len()
            ));
        }
        return Ok((urls, Vec::new()));
    }
    redis_server_installed().map_err(|bin| {
        format!(
            "REDIS_URLS is unset and {bin:?} is not installed: install one (Debian/Ubuntu: \
             apt-get install redis-server) or set REDIS_URLS=redis://a:6379,redis://b:6379,…"
        )
    })?;
    let servers: Vec<RedisServer> = (0..n).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    eprintln!(
        "started {n} private redis-servers for this run: {}",
        urls.join(", ")
    );
    Ok((urls, servers))
}

/// Whether a server answers PING within `limit`.
fn ping(client: &redis::Client, limit: Duration) -> bool {
    client
        .get_connection_with_timeout(limit)
        .is_ok_and(|mut conn| redis::cmd("PING").query::<String>(&mut conn).is_ok())
}
