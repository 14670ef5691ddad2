//! Config's checks and defaults.

use super::*;
use crate::error::LockError;

#[test]
fn defaults_match_redisson() {
    let c = Config::new("redis://127.0.0.1/");
    assert_eq!(c.get_watchdog_timeout(), Duration::from_secs(30));
    assert_eq!(c.renewal_interval(), Duration::from_secs(10));
    assert_eq!(c.get_connect_timeout(), Duration::from_secs(5));
    assert_eq!(c.get_response_timeout(), Duration::from_secs(3));
}

#[test]
fn rejects_bad_settings() {
    let bad = [
        Config::new("redis://127.0.0.1/").sync_replicas(0, Duration::from_millis(10)),
        Config::new("redis://127.0.0.1/").sync_replicas(1, Duration::from_secs(3)),
        Config::new("redis://127.0.0.1/").watchdog_timeout(Duration::ZERO),
        Config::new("redis://127.0.0.1/").connect_timeout(Duration::ZERO),
        Config::new("redis://127.0.0.1/").response_timeout(Duration::ZERO),
    ];
    for c in bad {
        let err = c.validate().unwrap_err();
        assert!(
            matches!(err, LockError::InvalidArgument { .. }),
            "{c:?}: {err:?}"
        );
    }
    assert!(Config::new("redis://127.0.0.1:1/3").validate().is_ok());
}

/// The fair place timeout has a floor: a place refreshed every third of it must outlive a
/// refresh period plus its round trip (3 ms was accepted before).
#[test]
fn the_fair_place_timeout_has_a_floor() {
    let with = |t| Config::new("redis://127.0.0.1/").fair_lock_place_timeout(t);
    for t in [
        Duration::from_millis(3),
        MIN_FAIR_LOCK_PLACE_TIMEOUT - Duration::from_millis(1),
        MAX_EXPIRY + Duration::from_millis(1),
    ] {
        let err = with(t).validate().unwrap_err();
        assert!(
            matches!(
                err,
                LockError::InvalidArgument {
                    what: "fair lock place timeout",
                    ..
                }
            ),
            "{t:?}: {err:?}"
        );
    }
    assert!(with(MIN_FAIR_LOCK_PLACE_TIMEOUT).validate().is_ok());
    assert!(with(DEFAULT_FAIR_LOCK_PLACE_TIMEOUT).validate().is_ok());
}

#[test]
fn debug_never_shows_a_password() {
    let c = Config::new("redis://app:hunter2@host:1/0");
    let shown = format!("{c:?}");
    assert!(shown.contains("redis://app:***@host:1/0"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
    let s = Config::sentinel("m", ["redis://sen:pw1@h:26379"]).master_auth(Some("u"), "pw2");
    let shown = format!("{s:?}");
    assert!(!shown.contains("pw1") && !shown.contains("pw2"), "{shown}");
    assert!(shown.contains("sen:***@h:26379"), "{shown}");
}

/// A spin back-off under 1 ms, a longest sleep below the first, a multiplier of 0 or a sleep
/// above the longest expiry is refused, naming the setting; Redisson's defaults and a constant
/// back-off pass.
#[test]
fn a_bad_spin_backoff_is_refused() {
    let ms = Duration::from_millis;
    let with = |b| Config::new("redis://127.0.0.1/").spin_backoff(b);
    for b in [
        SpinBackOff::exponential(Duration::ZERO, ms(128), 2),
        SpinBackOff::exponential(ms(1), Duration::from_micros(500), 2),
        SpinBackOff::exponential(ms(10), ms(5), 2),
        SpinBackOff::exponential(ms(1), ms(128), 0),
        SpinBackOff::exponential(ms(1), MAX_EXPIRY + ms(1), 2),
        SpinBackOff::constant(Duration::ZERO),
        SpinBackOff::constant(MAX_EXPIRY + ms(1)),
    ] {
        let err = with(b).validate().unwrap_err();
        assert!(
            matches!(
                err,
                LockError::InvalidArgument {
                    what: "spin backoff",
                    ..
                }
            ),
            "{b:?}: {err:?}"
        );
    }
    assert_eq!(
        Config::new("redis://127.0.0.1/").get_spin_backoff(),
        SpinBackOff::exponential(ms(1), ms(128), 2)
    );
    assert!(with(SpinBackOff::default()).validate().is_ok());
    assert!(with(SpinBackOff::constant(ms(64))).validate().is_ok());
}
