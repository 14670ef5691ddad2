//! The state's timers: every one but a waiter's deadline (which the shell's crowd serves with
//! its caller's watch), in one table of instants ([`TimerTable`]), as a lock state's are: the
//! retry timer (one for every parked waiter due a retry), a lease's end, a request's resend and
//! the outage's bound. The state sets and stops entries; the shell keeps one timer for the
//! table's next instant, and when it fires the state handles every entry due
//! ([`NameState::timeout`](crate::actors::name::state::NameState::timeout)). The retry timer and the outage's bound
//! wake whoever is due by then, so arming either for later than it fires already changes
//! nothing ([`TimerTable::set_sooner`]).

use super::Timer;
use crate::actors::name::timers::TimerTable;

/// The timers armed: all but [`Timer::Deadline`], each with its instant.
pub(super) type Timers = TimerTable<Timer>;
