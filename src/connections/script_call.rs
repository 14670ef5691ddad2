//! One EVALSHA of a script, built in place as a single presized command, in a command buffer
//! this thread used before when it has one to spare.

use std::cell::RefCell;

use redis::{Cmd, RedisWrite, Script};

/// One EVALSHA of a script, built in place as a single presized command: redis-rs's
/// `ScriptInvocation` keeps each key and argument in a buffer of its own and copies them all
/// into a new command at every send (about 25 allocations per acquire+release, BENCHMARKS.md).
/// The keys come first, as many as announced; then the arguments.
///
/// Its command's two buffers are taken from this thread's spares and given back when the call
/// is dropped (cleared): a lock request's call is made and dropped on its actor's thread, so an
/// uncontended pair allocates and frees no `Cmd` buffer (four allocations per pair fewer,
/// BENCHMARKS.md; the packed bytes redis-rs makes from the command at each send are its own). Only small commands are kept ([`SPARE_BYTES`], [`SPARE_ARGS`]), at most
/// [`SPARES`] per thread: a renewal batch's command is freed as before.
pub(crate) struct ScriptCall<'s> {
    script: &'s Script,
    cmd: Cmd,
    keys_left: usize,
    /// The arguments it was made room for, when small enough to be kept afterwards: kept only
    /// if it holds no more (a caller that appends more than it announced, a group's members,
    /// may have grown it past what a spare may hold). 0: not kept.
    kept_upto: usize,
}

/// The most commands a thread keeps to spare: as many as 64 names busy at once on one thread
/// have under way (the throughput bench's load; 16 left three of the four allocations there):
/// about 64 KiB of buffers per thread at most, while callers count their bytes in the room they
/// ask for. Beyond that, commands are allocated and freed as before.
const SPARES: usize = 64;

/// The most bytes (with `EVALSHA`, the hash and the key count) a command kept to spare may have
/// been made room for: what a lock request with a name and holder of ordinary lengths needs,
/// several times over. Callers count the bytes of their keys and arguments in that room.
const SPARE_BYTES: usize = 1024;

/// The most arguments (with `EVALSHA`, the hash and the key count) a command kept to spare may
/// have held.
const SPARE_ARGS: usize = 32;

thread_local! {
    /// This thread's command buffers to spare, cleared.
    static SPARE: RefCell<Vec<Cmd>> = const { RefCell::new(Vec::new()) };
}

/// A command with room for `args` arguments and `bytes` bytes: one of this thread's spares
/// when it has one, else a new one.
fn command(args: usize, bytes: usize) -> Cmd {
    let spare = SPARE
        .try_with(|spares| spares.try_borrow_mut().ok()?.pop())
        .ok()
        .flatten();
    match spare {
        Some(mut cmd) => {
            // Room for its bytes. Its arguments' list grows if this call has more than the
            // spare's last (once: a spare's room only ever grows).
            cmd.reserve_space_for_args([bytes]);
            cmd
        }
        None => Cmd::with_capacity(args, bytes),
    }
}

impl<'s> ScriptCall<'s> {
    /// A call of `script` with `keys` keys; `args` arguments and `bytes` bytes of keys and
    /// arguments in all are what to make room for (more still fit).
    pub(crate) fn new(script: &'s Script, keys: usize, args: usize, bytes: usize) -> Self {
        let (args, bytes) = (3 + keys + args, 7 + 40 + 4 + bytes);
        let kept = args <= SPARE_ARGS && bytes <= SPARE_BYTES;
        let mut cmd = match kept {
            true => command(args, bytes),
            false => Cmd::with_capacity(args, bytes),
        };
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
        Self {
            script,
            cmd,
            keys_left: keys,
            kept_upto: if kept { args } else { 0 },
        }
    }

    /// The next key (`KEYS[i]`).
    pub(crate) fn key(&mut self, key: impl redis::ToRedisArgs) -> &mut Self {
        debug_assert!(self.keys_left > 0, "more keys than announced");
        self.keys_left = self.keys_left.saturating_sub(1);
        self.cmd.arg(key);
        self
    }

    /// The next argument (`ARGV[i]`), after every key.
    pub(crate) fn arg(&mut self, arg: impl redis::ToRedisArgs) -> &mut Self {
        debug_assert_eq!(self.keys_left, 0, "an argument before the last key");
        self.cmd.arg(arg);
        self
    }

    /// The EVALSHA command: what is sent.
    pub(crate) fn cmd(&self) -> &Cmd {
        &self.cmd
    }

    /// The script, to load on a connection that does not know it.
    pub(crate) fn script(&self) -> &Script {
        self.script
    }
}

impl Drop for ScriptCall<'_> {
    /// Gives a small command's buffers back to this thread's spares, cleared. One that holds
    /// more arguments than it was made room for is freed: what its caller appended (a group's
    /// members) is not counted in its room, and may be long. (Counting its bytes here would
    /// cost a walk over every argument at every call.)
    fn drop(&mut self) {
        if self.kept_upto == 0 || self.cmd.args_iter().len() > self.kept_upto {
            return;
        }
        let mut cmd = std::mem::take(&mut self.cmd);
        cmd.clear();
        // Nothing is kept once the thread's spares are gone (the thread is ending).
        let _ = SPARE.try_with(|spares| {
            if let Ok(mut spares) = spares.try_borrow_mut()
                && spares.len() < SPARES
            {
                spares.push(cmd);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many commands this thread keeps to spare now.
    fn spares() -> usize {
        SPARE.with(|spares| spares.borrow().len())
    }

    fn call<'s>(script: &'s Script, key: &str, args: &[&str]) -> ScriptCall<'s> {
        let mut call = ScriptCall::new(script, 1, args.len(), key.len() + 16);
        call.key(key);
        for arg in args {
            call.arg(*arg);
        }
        call
    }

    /// Catches a spare reused without being cleared (the previous call's keys and arguments
    /// sent again in front of the new ones, or a longer argument's bytes left in its buffer).
    #[test]
    fn a_call_in_a_spare_command_sends_what_a_new_command_does() {
        let script = Script::new("return 1");
        drop(call(
            &script,
            "first",
            &["a longer argument than the next call's", "1"],
        ));
        assert!(spares() >= 1, "a small call's command is kept");
        let reused = call(
            &script,
            "k",
            &["30000", "holder:1", "x".repeat(600).as_str()],
        );
        let mut fresh = Cmd::new();
        fresh
            .arg("EVALSHA")
            .arg(script.get_hash())
            .arg(1)
            .arg("k")
            .arg("30000")
            .arg("holder:1")
            .arg("x".repeat(600));
        assert_eq!(
            reused.cmd().get_packed_command(),
            fresh.get_packed_command()
        );
    }

    /// Catches an unbounded spare: a command made room for much kept (a renewal batch's), one
    /// grown past its announced arguments kept (a group's, with members of any length), or
    /// more than [`SPARES`] commands kept by one thread.
    #[test]
    fn only_small_commands_are_kept_and_only_so_many() {
        let script = Script::new("return 1");
        drop(call(&script, "k", &["1"]));
        let before = spares();
        assert!(before >= 1);
        let mut large = ScriptCall::new(&script, 1, 1, 2 * SPARE_BYTES);
        large.key("k").arg("y".repeat(2 * SPARE_BYTES));
        drop(large);
        assert_eq!(spares(), before, "a command made room for much is freed");
        let mut grown = call(&script, "k", &["1"]);
        grown.arg("a member").arg("another member");
        drop(grown);
        assert_eq!(
            spares(),
            before - 1,
            "a command grown past its arguments is freed"
        );
        let calls: Vec<_> = (0..2 * SPARES)
            .map(|_| call(&script, "k", &["1"]))
            .collect();
        drop(calls);
        assert_eq!(spares(), SPARES);
    }
}
