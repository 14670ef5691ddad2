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

/// One schedule of a simulation.
pub(crate) trait Schedule {
    /// Runs it to its end, or to the first rule it breaks.
    fn run(&mut self) -> Result<(), String>;
    /// Its trace (when it keeps one) and the step it reached.
    fn report(&mut self) -> (String, usize);
}

/// Runs `sim`, schedule `seed`; its failure with the seed, the step, the trace it kept and the
/// command (`replay`, with `{seed}` in it) that replays it.
pub(crate) fn run_one(mut sim: impl Schedule, seed: u64, replay: &str) -> Result<(), String> {
    sim.run().map_err(|why| {
        let (trace, step) = sim.report();
        let replay = replay.replace("{seed}", &seed.to_string());
        format!("{trace}\nseed {seed}, step {step}: {why}\nreplay: {replay}")
    })
}

/// For a test that breaks the system on purpose: one of `schedules` schedules (made by `make`
/// from their seed) must see it break a rule.
pub(crate) fn must_catch<S: Schedule>(schedules: u64, make: impl Fn(u64) -> S) {
    let caught = (0..schedules).find_map(|seed| make(seed).run().err().map(|why| (seed, why)));
    let Some((seed, why)) = caught else {
        panic!("no schedule of {schedules} caught it");
    };
    eprintln!("caught at seed {seed}: {why}");
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
