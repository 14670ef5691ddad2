//! The start-time permission probe: loads every script, runs one, and checks PUBLISH and
//! SUBSCRIBE on each lock channel family, so that a missing permission (or a replica behind the
//! URL) fails the start, naming what is missing, instead of the first lock.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::Script;

use crate::connections::command::{Conn, Link, ScriptCall};
use crate::connections::failure::connect_error;
use crate::error::LockError;
use crate::protocol::keys;

/// The probe script (`acl_probe.lua`).
pub(super) static ACL_PROBE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("acl_probe.lua")));

/// One channel of each lock channel family, for the start-time permission check.
const PROBE: &str = "lockman:acl-check";

/// The key the start-time probe deletes (it never exists): a replica refuses even that.
const PROBE_KEY: &str = PROBE;

fn probe_channels() -> [String; 2] {
    [keys::unlock_channel(PROBE), keys::rwlock_channel(PROBE)]
}

/// Checks at start that the server is writable and the user may do what lockman does: load
/// scripts, run them, publish and subscribe on the lock channels. Fails with
/// [`LockError::ReadOnly`] for a replica, [`LockError::NoPermission`] naming what is missing,
/// or [`LockError::Auth`].
pub(crate) async fn check_access(conn: &Conn, scripts: &[&Script]) -> Result<(), LockError> {
    let mut link = conn.main_link();
    for script in scripts {
        let loaded = conn
            .bounded("load scripts", script.load_async(&mut link))
            .await;
        if let Ok(Err(e)) = &loaded
            && scripting_absent(e)
        {
            return Err(LockError::NoScripting {
                url: conn.endpoint().label().to_owned(),
                detail: e.to_string(),
            });
        }
        denied("run SCRIPT LOAD", loaded)?;
    }
    // Loaded above with the others (on every node of a cluster). The probe declares no key,
    // so in a cluster redis-rs would send it to any node, a replica included, whose READONLY
    // says nothing of where locks go: a master runs it.
    let channels = probe_channels();
    let mut probe = ScriptCall::new(&ACL_PROBE, 0, 3, 3 * PROBE.len() + 64);
    probe.arg(PROBE_KEY).arg(&channels);
    let call = async {
        match &mut link {
            Link::Server(server) => probe.cmd().query_async::<Vec<String>>(server).await,
            Link::Cluster(cluster) => {
                use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
                let master = RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary);
                let reply = cluster.route_command(probe.cmd().clone(), master).await?;
                redis::from_redis_value(reply).map_err(Into::into)
            }
        }
    };
    let reply = conn.bounded("check permissions", call).await;
    // SCRIPT loaded the scripts, but EVALSHA alone may be renamed away (`rename-command`):
    // no lock could run either.
    if let Ok(Err(e)) = &reply
        && scripting_absent(e)
    {
        return Err(LockError::NoScripting {
            url: conn.endpoint().label().to_owned(),
            detail: e.to_string(),
        });
    }
    let missing = denied("run EVALSHA", reply)?;
    if missing.first().map(String::as_str) == Some("READONLY") {
        // A cluster's client routes to the masters of its slot map, which a URL cannot name:
        // one of them answering as a replica is a failover under way (the map not yet
        // refreshed), an outage to retry, not a wrong URL.
        if matches!(link, Link::Cluster(_)) {
            return Err(failover_under_way(
                "a master of the cluster's slot map answered as a replica (a failover under way)",
            ));
        }
        return Err(LockError::ReadOnly {
            url: conn.endpoint().label().to_owned(),
        });
    }
    if let Some(first) = missing.first() {
        return Err(LockError::NoPermission {
            what: first.clone(),
            detail: format!("the ACL of this user refuses: {}", missing.join("; ")),
        });
    }
    check_subscribe(conn, &probe_channels()).await
}

/// A primary answered as a replica at start: a failover under way, an outage to retry
/// ([`LockError::is_retryable`]), not a URL that names a replica.
fn failover_under_way(detail: &'static str) -> LockError {
    LockError::Redis {
        op: "check permissions",
        source: redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
            detail,
        )),
    }
}

/// [`check_access`], but with Sentinel a primary that answers as a replica is not the user's
/// mistake (no URL names it): Sentinel named it, and redis-rs saw it answer `ROLE` as the master
/// just before, so it was demoted since, a failover under way. Sentinel is asked again (after a
/// pause, up to `limit` in all; while it still names the demoted server redis-rs finds no valid
/// master) and the primary it names then is probed; at `limit`, the failover's retryable
/// `READONLY` ([`failover_under_way`]).
pub(crate) async fn check_access_following(
    conn: &Conn,
    scripts: &[&Script],
    limit: Duration,
) -> Result<(), LockError> {
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(20);
    loop {
        match check_access(conn, scripts).await {
            Err(LockError::ReadOnly { .. }) if conn.endpoint().follows_failover() => {}
            done => return done,
        }
        tracing::warn!(deployment = %conn.endpoint().label(), "Sentinel's primary answered as a replica at start; asking Sentinel again");
        loop {
            let now = Instant::now();
            if now + pause >= deadline {
                return Err(failover_under_way(
                    "the primary Sentinel named answered as a replica (a failover under way)",
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
            let left = deadline.saturating_duration_since(Instant::now());
            if conn.endpoint().locate(left).await.is_ok() {
                break;
            }
        }
        conn.switch().await?;
    }
}

/// Whether `SCRIPT LOAD`'s (or `EVALSHA`'s) error says the server runs no scripts at all: a Valkey without
/// its Lua engine answers `Could not find scripting engine 'lua'`, a server whose `SCRIPT`
/// command was renamed away (`rename-command`) answers `unknown command`. An ACL refusal is
/// `NOPERM` instead, and stays [`LockError::NoPermission`].
pub(crate) fn scripting_absent(e: &redis::RedisError) -> bool {
    let said = e.to_string();
    said.contains("scripting engine") || said.contains("unknown command")
}

/// SUBSCRIBE and UNSUBSCRIBE once on each of `channels` (in a cluster, SSUBSCRIBE and
/// SUNSUBSCRIBE on the node of each channel's slot, when unlock messages are sharded): at start
/// one channel of each lock channel family, in the diagnosis the synchronizers' too.
pub(crate) async fn check_subscribe(conn: &Conn, channels: &[String]) -> Result<(), LockError> {
    use crate::connections::subscription::Sink;
    let endpoint = conn.endpoint();
    let limit = conn.connect_timeout();
    // The receiving half is kept until the end: dropping it closes the connection.
    let (mut sink, _heard): (Sink, Box<dyn std::any::Any + Send>) = match endpoint.cluster() {
        Some(_) => {
            let (sink, heard) = crate::connections::subscription::open(endpoint, &[], limit)
                .await
                .map_err(|detail| LockError::unexpected_reply("connect pub/sub", detail))?;
            (sink, Box::new(heard))
        }
        // One server: opened here, for the typed error of a refused connection.
        None => match tokio::time::timeout(limit, endpoint.client().get_async_pubsub()).await {
            Ok(Ok(pubsub)) => {
                let (sink, heard) = pubsub.split();
                (Sink::Server(sink), Box::new(heard))
            }
            Ok(Err(source)) => return Err(connect_error(endpoint.label(), source)),
            Err(_) => {
                return Err(LockError::Timeout {
                    op: "connect pub/sub",
                    after: limit,
                });
            }
        },
    };
    for channel in channels {
        let what = format!("subscribe to {channel}");
        let done = conn
            .bounded(
                "check permissions",
                sink.subscribe(std::slice::from_ref(channel)),
            )
            .await;
        denied(&what, done)?;
        let done = conn
            .bounded("check permissions", sink.unsubscribe(channel))
            .await;
        denied(&what, done)?;
    }
    Ok(())
}

/// A step of the probe's reply: a refusal as [`LockError::NoPermission`] for `what`.
fn denied<T>(what: &str, reply: Result<redis::RedisResult<T>, LockError>) -> Result<T, LockError> {
    reply?.map_err(|source| {
        LockError::no_permission(|| what.to_owned(), &source).unwrap_or(LockError::Redis {
            op: "check permissions",
            source,
        })
    })
}
