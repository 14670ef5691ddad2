//! The account server of `examples/web.rs`, on axum through `lockman::tower`: each deposit reads
//! the balance, takes a moment, and writes it back, which two concurrent deposits would get
//! wrong. A `LockLayer` serializes deposits per account across every process that runs this
//! server; a deposit that cannot have the account's lock within the wait is answered `409` with
//! `Retry-After`, and never runs. A `PermitLayer` lets at most two exports per tenant run at once
//! across every process; the others are answered `429` with `Retry-After`.
//!
//! Run: `cargo run --example axum --features tower -- [--port 8080] [--wait-ms 200]`
//!
//! ```text
//! curl -X POST localhost:8080/accounts/alice/deposit/5   # 200: the new balance
//! curl localhost:8080/accounts/alice                      # the balance
//! curl -X POST localhost:8080/tenants/acme/export          # 200, or 429 when two run already
//! curl -X POST localhost:8080/tenants/nobody/export        # 404: not a tenant, nothing written
//! ```
//!
//! Redis: `REDIS_URL` when set, else 127.0.0.1:6379, else a private redis-server for the run.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use lockman::LockManager;
use lockman::tower::{LockLayer, PermitLayer};
use redis::AsyncCommands;
use redis::aio::ConnectionManager;

/// How long a deposit takes between reading and writing the balance: long enough that two
/// unserialized deposits would overlap.
const WORK: Duration = Duration::from_millis(10);

/// Exports of one tenant that may run at once, across every process.
const EXPORTS_PER_TENANT: u32 = 2;

/// The tenants that exist. Each tenant's permit semaphore is a Redis key that stays, so the
/// layer takes permits only for these: any other tenant is answered `404` and writes nothing.
const TENANTS: [&str; 2] = ["acme", "globex"];

fn balance_key(account: &str) -> String {
    format!("balance:{account}")
}

type Answer = (StatusCode, String);

fn unavailable(e: redis::RedisError) -> Answer {
    (StatusCode::SERVICE_UNAVAILABLE, e.to_string())
}

/// `POST /accounts/{account}/deposit/{amount}`: runs only while this request holds the
/// account's lock (the layer took it before calling this handler).
async fn deposit(
    State(mut redis): State<ConnectionManager>,
    Path((account, amount)): Path<(String, i64)>,
) -> Result<String, Answer> {
    let key = balance_key(&account);
    // Read, work, write: correct only because no other deposit on this account runs meanwhile.
    let balance: Option<i64> = redis.get(&key).await.map_err(unavailable)?;
    tokio::time::sleep(WORK).await;
    let balance = balance.unwrap_or(0) + amount;
    redis
        .set::<_, _, ()>(&key, balance)
        .await
        .map_err(unavailable)?;
    Ok(balance.to_string())
}

/// `GET /accounts/{account}`.
async fn balance(
    State(mut redis): State<ConnectionManager>,
    Path(account): Path<String>,
) -> Result<String, Answer> {
    let b: Option<i64> = redis
        .get(balance_key(&account))
        .await
        .map_err(unavailable)?;
    Ok(b.unwrap_or(0).to_string())
}

/// `POST /tenants/{tenant}/export`: runs only while this request holds one of the tenant's
/// permits.
async fn export(Path(tenant): Path<String>) -> String {
    tokio::time::sleep(WORK * 5).await;
    format!("exported {tenant}")
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let (port, wait) = (
        arg("--port", 8080),
        Duration::from_millis(arg("--wait-ms", 200)),
    );
    let (url, _server) = support::example::or_exit(support::example::redis_for_example());
    let manager = LockManager::connect(&url)
        .await
        .map_err(std::io::Error::other)?;
    let redis = redis::Client::open(url.as_str())
        .map_err(std::io::Error::other)?
        .get_connection_manager()
        .await
        .map_err(std::io::Error::other)?;
    let port = u16::try_from(port).map_err(std::io::Error::other)?;

    // `route_layer`: only matched routes take a lock (an unknown path is a plain 404). Segment 1
    // of `/accounts/alice/deposit/5` is `alice`, decoded as `Path` decodes it for `deposit`
    // (`/accounts/%61lice/deposit/5` takes the same lock). The prefix keeps client-chosen names
    // apart from every other key.
    let accounts = Router::new()
        .route("/accounts/{account}/deposit/{amount}", post(deposit))
        .route_layer(
            LockLayer::segment(manager.clone(), 1)
                .prefix("account:")
                .wait(wait),
        )
        .route("/accounts/{account}", get(balance));
    let tenants = Router::new()
        .route("/tenants/{tenant}/export", post(export))
        .route_layer(
            PermitLayer::segment(manager.clone(), 1, EXPORTS_PER_TENANT)
                .prefix("exports:")
                .known(|tenant| TENANTS.contains(&tenant))
                .wait(wait),
        );
    let app = accounts.merge(tenants).with_state(redis);

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    eprintln!("listening on 127.0.0.1:{port}; deposits wait up to {wait:?} for their account");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    manager.shutdown().await;
    Ok(())
}
