//! A clock read as ticks of a quota since a fixed origin.

use crate::Clock;
use crate::gcra::Gcra;

/// A clock and the reading a limiter was created at.
///
/// Counting ticks from the limiter's creation rather than from the clock's
/// epoch gives every limiter the whole tick range, whatever the epoch (a clock
/// counting from 1970 included).
#[derive(Debug)]
pub(crate) struct Timeline<C> {
    clock: C,
    origin: u64,
}

impl<C: Clock> Timeline<C> {
    pub(crate) fn new(clock: C) -> Self {
        Timeline {
            origin: clock.now_nanos(),
            clock,
        }
    }

    /// The current time in `gcra`'s ticks since the origin. A reading before
    /// the origin (a clock gone backwards) counts as the origin: it can only
    /// see less credit.
    #[inline]
    pub(crate) fn now(&self, gcra: &Gcra) -> u64 {
        gcra.ticks(self.nanos())
    }

    /// The current time in nanoseconds since the origin, for a limiter
    /// whose quotas (and so tick units) differ between its buckets.
    #[inline]
    pub(crate) fn nanos(&self) -> u64 {
        self.clock.now_nanos().saturating_sub(self.origin)
    }

    pub(crate) fn clock(&self) -> &C {
        &self.clock
    }
}
