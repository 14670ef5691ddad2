//! What the seeded simulations of both families share (tests only): a small seedable generator,
//! and the driver that runs schedules by seed, replays one with its trace, or runs more of them,
//! as environment variables say (`<PREFIX>_SEED`, `<PREFIX>_BASE`, `<PREFIX>_SCHEDULES`).

/// A small, fast, seedable generator (splitmix64): the whole schedule follows from the seed.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// Runs `schedules` schedules (or `<prefix>_SCHEDULES`, from seed `<prefix>_BASE`), or only
/// seed `<prefix>_SEED` with its trace. `run(seed, trace)` runs one and returns its failure; a
/// failing seed is run again with its trace for the panic message.
pub(crate) fn run_schedules(
    prefix: &str,
    schedules: u64,
    run: impl Fn(u64, bool) -> Result<(), String>,
) {
    if let Some(seed) = env(&format!("{prefix}_SEED")) {
        if let Err(failure) = run(seed, true) {
            panic!("{failure}");
        }
        return;
    }
    let base = env(&format!("{prefix}_BASE")).unwrap_or(0);
    let schedules = env(&format!("{prefix}_SCHEDULES")).unwrap_or(schedules);
    for seed in base..base + schedules {
        if let Err(failure) = run(seed, false) {
            let traced = run(seed, true).err().unwrap_or(failure);
            panic!("{traced}");
        }
    }
}
