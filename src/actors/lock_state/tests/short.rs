//! The differential test of the short path (`short.rs`): random event sequences (the property
//! test's, answered by the same model of Redis) run once with the short path and once with the
//! general rules alone give the same effects, in the same order, on the same virtual clock; and
//! an uncontended pair does take it, at each of its four steps.

use std::time::Instant;

use proptest::prelude::*;

use super::super::*;
use super::property::{recorded, step};
use super::{acquired, req, state};
use crate::protocol::{HandedOff, Released};

proptest! {
    // PCASES=20000 for a long run.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PCASES").ok().and_then(|n| n.parse().ok()).unwrap_or(400),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_short_path_gives_the_general_rules_effects(
        family in 0u8..7,
        steps in proptest::collection::vec(step(), 1..120),
    ) {
        let start = Instant::now();
        let general = recorded(family, steps.clone(), false, start)?;
        let short = recorded(family, steps, true, start)?;
        for (n, (g, s)) in general.iter().zip(&short).enumerate() {
            prop_assert_eq!(g, s, "effect {} differs", n);
        }
        prop_assert_eq!(general.len(), short.len(), "as many effects");
    }
}

/// An uncontended pair, short path on and off: the same effects, and the short path taken at
/// each of its four steps (the request, its grant, the release, its outcome).
#[test]
fn an_uncontended_pair_takes_the_short_path_at_each_step() {
    let now = Instant::now();
    // Without its epoch (process-wide: each run's differs).
    let shown = |e: &Effect| match e {
        Effect::Answer(id, Answer::Granted { key, confirmed, .. }) => {
            format!("Granted({id}, {key:?}, {confirmed:?})")
        }
        Effect::Ended(_) => "Ended".to_string(),
        other => format!("{other:?}"),
    };
    let pair = |short: bool| {
        let mut s = state(LockKind::Reentrant);
        s.general_only = !short;
        let mut fx = Vec::new();
        let id = s.request(req("a", Wait::Up(super::SECOND)), now);
        fx.extend(s.drain());
        s.ran(acquired(), now);
        fx.extend(s.drain());
        let Some(Effect::Answer(_, Answer::Granted { key, epoch, .. })) = fx
            .iter()
            .find(|e| matches!(e, Effect::Answer(i, _) if *i == id))
        else {
            panic!("not granted: {fx:?}");
        };
        let (key, epoch) = (key.clone(), *epoch);
        s.release(key, epoch, Some(1), now);
        fx.extend(s.drain());
        s.ran(Outcome::Release(Ok(HandedOff::No(Released::Unlocked))), now);
        fx.extend(s.drain());
        assert!(
            fx.iter()
                .any(|e| matches!(e, Effect::Ended(x) if *x == epoch))
        );
        let fx: Vec<String> = fx.iter().map(shown).collect();
        (fx, s.shorts)
    };
    let (general, none) = pair(false);
    let (short, taken) = pair(true);
    assert_eq!(general, short);
    assert_eq!((none, taken), (0, 4), "{short:?}");
}
