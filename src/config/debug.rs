//! `Config`'s `Debug`: every setting, no password.

use super::redact::redacted;
use super::*;

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            deployment,
            password,
            tls,
            sync_replicas,
            watchdog_timeout,
            connect_timeout,
            response_timeout,
            fair_lock_wait_timeout,
            fair_lock_place_timeout,
            idle_linger,
            unavailable_after,
            max_lingering,
            arbiters,
            client_name,
            contention_top_k,
            name_prefix,
            refuse_evicting_server,
            deadlocks,
            watch_holds,
            lock_delay,
            spin_backoff,
        } = self;
        let mut d = f.debug_struct("Config");
        match deployment {
            Deployment::Server { url } => d.field("url", &redacted(url)),
            Deployment::Cluster { subscription, .. } => d
                .field("cluster", &deployment.label())
                .field("sharded_subscription", subscription),
            Deployment::Sentinel(s) => d
                .field("sentinel", &deployment.label())
                .field("master_user", &s.master_user)
                .field(
                    "master_password",
                    &s.master_password.as_ref().map(|_| "***"),
                )
                .field("master_db", &s.master_db)
                .field("master_tls", &s.master_tls()),
        };
        d.field("password", &password.as_ref().map(|_| "***"))
            .field("tls_ca_pem", &tls.ca_pem.as_ref().map(|_| "<set>"))
            .field(
                "tls_client_identity",
                &tls.client_identity.as_ref().map(|_| "<set>"),
            )
            .field("sync_replicas", sync_replicas)
            .field("watchdog_timeout", watchdog_timeout)
            .field("connect_timeout", connect_timeout)
            .field("response_timeout", response_timeout)
            .field("fair_lock_wait_timeout", fair_lock_wait_timeout)
            .field("fair_lock_place_timeout", fair_lock_place_timeout)
            .field("idle_linger", idle_linger)
            .field("unavailable_after", unavailable_after)
            .field("max_lingering", max_lingering)
            .field("arbiters", arbiters)
            .field("client_name", client_name)
            .field("contention_top_k", contention_top_k)
            .field("name_prefix", name_prefix)
            .field("refuse_evicting_server", refuse_evicting_server)
            .field("deadlocks", deadlocks)
            .field("watch_holds", watch_holds)
            .field("lock_delay", lock_delay)
            .field("spin_backoff", spin_backoff)
            .finish()
    }
}
