//! A clock read as ticks of a quota since a fixed origin, and what a reading
//! before that origin does to the waits a limiter reports.

use std::time::Duration;

use crate::clock::Clock;
use crate::error::AcquireError;
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

    /// The current time in nanoseconds since the origin, the unit every
    /// quota's ticks divide (a quota change's instant), clamped at the
    /// origin as [`Self::now`] is.
    #[inline]
    pub(crate) fn nanos(&self) -> u64 {
        self.clock.now_nanos().saturating_sub(self.origin)
    }

    /// One reading, for a decision made at it (clamped at the origin) and
    /// the waits it reports, measured from the reading itself.
    #[inline]
    pub(crate) fn read(&self) -> Reading {
        Reading {
            raw: self.clock.now_nanos(),
            origin: self.origin,
        }
    }

    pub(crate) fn clock(&self) -> &C {
        &self.clock
    }
}

/// A clock reading and the origin of the timeline it was read on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reading {
    raw: u64,
    origin: u64,
}

impl Reading {
    /// Nanoseconds since the origin, a reading before it counting as the
    /// origin: it can only see less credit.
    #[inline]
    pub(crate) fn nanos(self) -> u64 {
        self.raw.saturating_sub(self.origin)
    }

    /// How far before the origin the reading lay, if it did.
    #[inline]
    pub(crate) fn behind(self) -> Option<Behind> {
        (self.raw < self.origin).then(|| Behind(self.origin - self.raw))
    }
}

/// How many nanoseconds a clock reading lay before a limiter's origin
/// ([`docs/clocks.md`](crate::guide::clocks), "Readings before a limiter's
/// creation").
///
/// The decision is made at the origin (less credit than any later reading
/// sees: safe), but its caller reads the clock again from where it was, so
/// every wait the decision reports is measured from the reading: the gap,
/// then the wait at the origin. The one rule for every limiter that clamps
/// its readings: a bucket's, a window's, a keyed limiter's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Behind(u64);

impl Behind {
    /// How far `reading` lies before `origin` (zero if it does not).
    #[inline]
    pub(crate) fn of(reading: u64, origin: u64) -> Behind {
        Behind(origin.saturating_sub(reading))
    }

    /// The gap in nanoseconds.
    #[inline]
    pub(crate) fn nanos(self) -> u64 {
        self.0
    }

    /// The budget a reservation of up to `max_wait` from the reading keeps
    /// for its wait at the origin: the gap is spent first.
    #[inline]
    pub(crate) fn budget(self, max_wait: Duration) -> Duration {
        // Said first, so that a constant zero budget folds away.
        if max_wait.is_zero() {
            return max_wait;
        }
        max_wait.saturating_sub(Duration::from_nanos(self.0))
    }

    /// A wait reported at the origin, measured from the reading: zero
    /// stays zero (the credit is there now), any other wait starts after
    /// the gap.
    #[inline]
    pub(crate) fn wait(self, at_origin: Duration) -> Duration {
        if at_origin.is_zero() {
            at_origin
        } else {
            at_origin.saturating_add(Duration::from_nanos(self.0))
        }
    }

    /// A refusal decided at the origin with the [`budget`](Self::budget) of
    /// `max_wait`, measured from the reading. Its wait at the origin runs
    /// until the wait there fits the budget; from the reading, until the
    /// gap plus the wait fits `max_wait`, which is the part of the gap the
    /// budget could not absorb later. (Waiting `x` of it, a caller still
    /// behind has `gap - x` left to spend; one past the origin has the
    /// whole `max_wait` for what the refill has not yet covered.)
    #[inline]
    pub(crate) fn refusal(self, error: AcquireError, max_wait: Duration) -> AcquireError {
        match error {
            AcquireError::Insufficient { retry_after } => AcquireError::Insufficient {
                retry_after: retry_after
                    .saturating_add(Duration::from_nanos(self.0).saturating_sub(max_wait)),
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn a_reading_before_the_origin_says_how_far_before() {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(10));
        let timeline = Timeline::new(&clock);
        clock.set(Duration::from_secs(4));
        assert_eq!(timeline.read().behind(), Some(Behind(6_000_000_000)));
        assert_eq!(timeline.read().nanos(), 0);
        assert_eq!(timeline.nanos(), 0);
        clock.set(Duration::from_secs(10));
        assert_eq!(timeline.read().behind(), None);
        assert_eq!(timeline.read().nanos(), 0);
        clock.set(Duration::from_secs(11));
        assert_eq!(timeline.read().nanos(), 1_000_000_000);
        assert_eq!(timeline.read().behind(), None);
    }

    #[test]
    fn the_gap_is_spent_before_the_budget_and_added_to_every_wait() {
        let second = Duration::from_secs(1);
        let gap = Behind(6_000_000_000);
        assert_eq!(gap.budget(10 * second), 4 * second);
        assert_eq!(gap.budget(3 * second), Duration::ZERO);
        assert_eq!(gap.wait(Duration::ZERO), Duration::ZERO);
        assert_eq!(gap.wait(second), 7 * second);
        let refused = |wait| AcquireError::Insufficient { retry_after: wait };
        // Budget 3 s: all of it went to the gap, 3 s of the gap remain.
        assert_eq!(
            gap.refusal(refused(second), 3 * second),
            refused(4 * second)
        );
        // Budget 10 s: the gap fitted, the refusal at the origin is exact.
        assert_eq!(gap.refusal(refused(second), 10 * second), refused(second));
        let other = AcquireError::ZeroCost;
        assert_eq!(gap.refusal(other, second), other);
        assert_eq!(Behind(0).wait(second), second);
    }
}
