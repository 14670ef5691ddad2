//! An actix-web server whose account balances must not lose updates: each deposit reads the
//! balance, takes a moment, and writes it back, which two concurrent deposits would get wrong. A
//! `lockman::web::RequestGuard` serializes deposits per account across every process that runs
//! this server; a deposit that cannot have the account's lock within the wait is answered `409`
//! with `Retry-After`, and never runs. Exports are limited to two at a time per tenant across
//! every process by a `lockman::web::RequestPermit` (a permit semaphore per tenant); an export
//! that finds none free within the wait is answered `429` with `Retry-After`. lockman's metrics
//! are served at `/metrics`.
//!
//! Run: `cargo run --example web --features actix-web,metrics -- [--port 8080] [--wait-ms 200]`
//!
//! ```text
//! curl -X POST localhost:8080/accounts/alice/deposit/5   # 200: the new balance
//! curl localhost:8080/accounts/alice                      # the balance
//! curl -X POST localhost:8080/tenants/acme/export          # 200, or 429 when two run already
//! curl -X POST localhost:8080/tenants/nobody/export        # 404: not a tenant, nothing written
//! curl localhost:8080/tenants/acme/most                   # the most exports seen at once
//! curl localhost:8080/metrics                             # lockman_* in Prometheus format
//! ```
//!
//! Redis: `REDIS_URL` when set, else 127.0.0.1:6379, else a private redis-server for the run.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use lockman::LockManager;
use lockman::web::{RequestGuard, RequestLock, RequestPermit, RequestPermits};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use redis::AsyncCommands;
use redis::aio::ConnectionManager;

/// How long a deposit takes between reading and writing the balance: long enough that two
/// unserialized deposits would overlap.
const WORK: Duration = Duration::from_millis(10);

fn balance_key(account: &str) -> String {
    format!("balance:{account}")
}

/// `POST /accounts/{account}/deposit/{amount}`: runs only while this request holds the
/// account's lock.
async fn deposit(
    _lock: RequestGuard,
    path: web::Path<(String, i64)>,
    redis: web::Data<ConnectionManager>,
) -> HttpResponse {
    let (account, amount) = path.into_inner();
    let mut redis = redis.get_ref().clone();
    let key = balance_key(&account);
    // Read, work, write: correct only because no other deposit on this account runs meanwhile.
    let balance: Option<i64> = match redis.get(&key).await {
        Ok(b) => b,
        Err(e) => return HttpResponse::ServiceUnavailable().body(e.to_string()),
    };
    tokio::time::sleep(WORK).await;
    let balance = balance.unwrap_or(0) + amount;
    match redis.set::<_, _, ()>(&key, balance).await {
        Ok(()) => HttpResponse::Ok().body(balance.to_string()),
        Err(e) => HttpResponse::ServiceUnavailable().body(e.to_string()),
    }
}

/// Exports of one tenant that may run at once, across every process.
const EXPORTS_PER_TENANT: u32 = 2;

/// The tenants that exist. Each tenant's permit semaphore is a Redis key that stays, so exports
/// take permits only for these: any other tenant is answered `404` and writes nothing.
const TENANTS: [&str; 2] = ["acme", "globex"];

/// `POST /tenants/{tenant}/export`: runs only while this request holds one of the tenant's
/// permits. It counts how many exports of the tenant run at once, in Redis (so across
/// processes), and keeps the most it saw.
async fn export(
    _permit: RequestPermit,
    path: web::Path<String>,
    redis: web::Data<ConnectionManager>,
) -> HttpResponse {
    let tenant = path.into_inner();
    let mut redis = redis.get_ref().clone();
    let enter = redis::Script::new(
        "local n = redis.call('incr', KEYS[1]); \
         if n > tonumber(redis.call('get', KEYS[2]) or '0') then redis.call('set', KEYS[2], n) end; \
         return n",
    );
    let inside = format!("exports:inside:{tenant}");
    let most = format!("exports:most:{tenant}");
    if let Err(e) = enter
        .key(&inside)
        .key(&most)
        .invoke_async::<i64>(&mut redis)
        .await
    {
        return HttpResponse::ServiceUnavailable().body(e.to_string());
    }
    tokio::time::sleep(WORK * 5).await;
    match redis.decr::<_, _, i64>(&inside, 1).await {
        Ok(_) => HttpResponse::Ok().finish(),
        Err(e) => HttpResponse::ServiceUnavailable().body(e.to_string()),
    }
}

/// `GET /tenants/{tenant}/most`: the most exports of the tenant seen running at once.
async fn most(path: web::Path<String>, redis: web::Data<ConnectionManager>) -> HttpResponse {
    let mut redis = redis.get_ref().clone();
    match redis
        .get::<_, Option<i64>>(format!("exports:most:{path}"))
        .await
    {
        Ok(n) => HttpResponse::Ok().body(n.unwrap_or(0).to_string()),
        Err(e) => HttpResponse::ServiceUnavailable().body(e.to_string()),
    }
}

/// `GET /accounts/{account}`.
async fn balance(path: web::Path<String>, redis: web::Data<ConnectionManager>) -> HttpResponse {
    let mut redis = redis.get_ref().clone();
    match redis.get::<_, Option<i64>>(balance_key(&path)).await {
        Ok(b) => HttpResponse::Ok().body(b.unwrap_or(0).to_string()),
        Err(e) => HttpResponse::ServiceUnavailable().body(e.to_string()),
    }
}

/// `GET /metrics`.
async fn metrics(handle: web::Data<PrometheusHandle>, _: HttpRequest) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(handle.render())
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[actix_rt::main]
async fn main() -> std::io::Result<()> {
    let (port, wait) = (
        arg("--port", 8080),
        Duration::from_millis(arg("--wait-ms", 200)),
    );
    let (url, _server) = support::example::or_exit(support::example::redis_for_example());
    // lockman's histograms as histograms (`_bucket` series, which the Grafana dashboard's
    // quantile panels read), not the summaries the exporter renders by default. The README's
    // Metrics section gives these buckets; tests/dashboard.rs checks they agree.
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Prefix("lockman_".into()),
            &[
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ],
        )
        .map_err(std::io::Error::other)?
        .install_recorder()
        .map_err(std::io::Error::other)?;
    let manager = LockManager::connect(&url)
        .await
        .map_err(std::io::Error::other)?;
    let redis = redis::Client::open(url.as_str())
        .map_err(std::io::Error::other)?
        .get_connection_manager()
        .await
        .map_err(std::io::Error::other)?;
    let port = u16::try_from(port).map_err(std::io::Error::other)?;
    eprintln!("listening on 127.0.0.1:{port}; deposits wait up to {wait:?} for their account");
    HttpServer::new(move || {
        App::new()
            .app_data(web::Data::new(redis.clone()))
            .app_data(web::Data::new(prometheus.clone()))
            // The lock of `/accounts/alice/deposit/5` is `account:alice`, the account `deposit`
            // sees in its `web::Path` (`/accounts/%61lice/deposit/5` takes the same lock). The
            // prefix keeps client-chosen names apart from every other key.
            .app_data(
                RequestLock::path(manager.clone(), "account")
                    .prefix("account:")
                    .wait(wait),
            )
            .route(
                "/accounts/{account}/deposit/{amount}",
                web::post().to(deposit),
            )
            .route("/accounts/{account}", web::get().to(balance))
            .service(
                web::scope("/tenants")
                    .app_data(
                        RequestPermits::path(manager.clone(), "tenant", EXPORTS_PER_TENANT)
                            .prefix("exports:")
                            .known(|tenant| TENANTS.contains(&tenant))
                            .wait(wait),
                    )
                    .route("/{tenant}/export", web::post().to(export))
                    .route("/{tenant}/most", web::get().to(most)),
            )
            .route("/metrics", web::get().to(metrics))
    })
    .workers(2)
    .bind(("127.0.0.1", port))?
    .run()
    .await
}
