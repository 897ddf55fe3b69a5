//! The bucket's arithmetic, free of atomics and clocks.
//!
//! The state is the *theoretical arrival time* (TAT) of the generic cell rate
//! algorithm: the instant at which the bucket would be full again. With
//! capacity `B` and emission interval `T` (the time one token takes to
//! refill), the credit at `now` is `B - max(0, tat - now) / T`. Keeping the
//! state as one instant instead of a (credit, timestamp) pair is what lets a
//! whole decision be a single compare-and-swap on one `u64`.
//!
//! Time is counted in *ticks* of `1/d` nanosecond, where `d` is the reduced
//! denominator of the emission interval in nanoseconds, so that `T` is a whole
//! number of ticks and every decision is exact (see [`docs/design.md`](crate::guide::design)).

use std::time::Duration;

use crate::clock::saturating_nanos;
use crate::{AcquireError, InitialCredit, QuotaError};

/// The finest subdivision of a time unit (a nanosecond in-process, a
/// microsecond in the Redis store) a bucket uses. `u64::MAX` ticks of
/// `1/8` ns are 73 years after a bucket's creation, longer than any bucket
/// lives, while denominators up to eight (3/s, 6/s, 7/s) stay exact.
const MAX_TICKS_PER_UNIT: u64 = 8;

/// Relative error tolerated when an emission interval must be rounded up.
const MAX_ROUNDING_ERROR_DENOMINATOR: u128 = 1000;

/// The longest full refill, `B * T`, in ticks: half the range.
const MAX_TOLERANCE: u64 = u64::MAX / 2;

/// A validated quota in tick units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Gcra {
    /// `d`: ticks per nanosecond.
    ticks_per_nano: u64,
    /// `T`: ticks per token, never smaller than the exact interval.
    token_ticks: u64,
    /// `B * T`: how far the TAT may lie beyond `now` after an admission.
    tolerance: u64,
    capacity: u64,
    exact: bool,
}

impl Gcra {
    pub(crate) fn new(capacity: u64, tokens: u64, period: Duration) -> Result<Self, QuotaError> {
        if capacity == 0 {
            return Err(QuotaError::ZeroCapacity);
        }
        if tokens == 0 {
            return Err(QuotaError::ZeroTokens);
        }
        let period = u64::try_from(period.as_nanos()).map_err(|_| QuotaError::PeriodTooLong)?;
        if period == 0 {
            return Err(QuotaError::ZeroPeriod);
        }
        let interval = Interval::of(u128::from(period), u128::from(tokens))
            .ok_or(QuotaError::Unrepresentable)?;
        // Lossless: d <= 8, and T <= period (exact: T divides it; rounded:
        // tokens > 8, so 8 * period / tokens < period).
        let (ticks_per_nano, token_ticks, exact) = (
            interval.ticks_per_unit as u64,
            interval.token_ticks as u64,
            interval.exact,
        );
        // Bounding a full refill by half the tick range leaves the other half,
        // at least 2^63 ticks after a bucket's creation, in which every
        // decision is exact: `max(tat, now) + cost*T` cannot overflow there.
        let tolerance = capacity
            .checked_mul(token_ticks)
            .filter(|&t| t <= MAX_TOLERANCE)
            .ok_or(QuotaError::Overflow { capacity })?;
        Ok(Gcra {
            ticks_per_nano,
            token_ticks,
            tolerance,
            capacity,
            exact,
        })
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    pub(crate) fn is_exact(&self) -> bool {
        self.exact
    }

    /// Converts a clock reading to ticks. Saturation freezes time at the end
    /// of the range, where refill stops: the bucket then only denies.
    #[inline]
    pub(crate) fn ticks(&self, nanos: u64) -> u64 {
        // Most quotas have whole-nanosecond intervals; skipping the multiply
        // for them takes it off the path from the clock read to the CAS.
        if self.ticks_per_nano == 1 {
            nanos
        } else {
            nanos.saturating_mul(self.ticks_per_nano)
        }
    }

    /// Converts a span of ticks to a duration, rounding up so that a caller
    /// who waits that long is never early.
    #[inline]
    pub(crate) fn duration(&self, ticks: u64) -> Duration {
        // Whole-nanosecond quotas skip the `div` on every refusal. (A `match`
        // with one constant divisor per scale measured slower: 11.6 ns against
        // 3.2 ns per refusal on the coarse clock.)
        let nanos = if self.ticks_per_nano == 1 {
            ticks
        } else {
            ticks.div_ceil(self.ticks_per_nano)
        };
        Duration::from_nanos(nanos)
    }

    /// Converts a caller's wait budget to ticks: exact, since a whole
    /// nanosecond is a whole number of ticks (saturating past 584 years).
    #[inline]
    pub(crate) fn ticks_of(&self, wait: Duration) -> u64 {
        self.ticks(saturating_nanos(wait))
    }

    /// Validates a cost and converts it to ticks.
    #[inline]
    pub(crate) fn cost_ticks(&self, cost: u64) -> Result<u64, AcquireError> {
        AcquireError::check_cost(cost, self.capacity)?;
        // cost <= capacity and capacity * token_ticks was checked to fit.
        Ok(cost * self.token_ticks)
    }

    /// Decides an admission of `cost_ticks` at `now`, allowing the caller to
    /// start up to `slack` ticks in the future.
    ///
    /// Returns the new TAT, or the number of ticks by which the request is
    /// too early. Credit is `B - max(0, tat - now)/T`, so "cost fits" is
    /// `max(tat, now) + cost*T <= now + B*T`. Taking `max(tat, now)` is what
    /// makes a stale or backward `now` harmless: it can only see less credit.
    /// `tokens` as ticks, saturating (for returns, which the callers bound
    /// by what was granted).
    #[inline]
    pub(crate) fn token_ticks(&self, tokens: u64) -> u64 {
        tokens.saturating_mul(self.token_ticks)
    }

    #[inline]
    pub(crate) fn admit(
        &self,
        tat: u64,
        now: u64,
        cost_ticks: u64,
        slack: u64,
    ) -> Result<u64, u64> {
        // An overflow here means the clock reached the end of its range:
        // nothing more can ever be admitted.
        let Some(new_tat) = tat.max(now).checked_add(cost_ticks) else {
            return Err(u64::MAX);
        };
        let limit = now.saturating_add(self.tolerance).saturating_add(slack);
        if new_tat <= limit {
            Ok(new_tat)
        } else {
            // Without the hint the compiler merges both outcomes into one
            // branchless value, putting this comparison on the path to the
            // compare-and-swap of every admission.
            std::hint::cold_path();
            Err(new_tat - limit)
        }
    }

    /// How long the caller of an admission that produced `new_tat` at `now`
    /// must wait before its tokens exist (zero when credit covered it).
    #[inline]
    pub(crate) fn wait(&self, new_tat: u64, now: u64) -> u64 {
        new_tat.saturating_sub(now.saturating_add(self.tolerance))
    }

    /// Whole tokens available at `now`: `floor(B - debt/T)`, clamped at zero
    /// while reservations hold the bucket in debt, and at what the rest of
    /// the clock range can still record, so that it agrees with [`admit`]
    /// even at the end of the range.
    ///
    /// [`admit`]: Gcra::admit
    #[inline]
    pub(crate) fn available(&self, tat: u64, now: u64) -> u64 {
        let debt = tat.saturating_sub(now);
        let credit = if debt >= self.tolerance {
            0
        } else {
            self.capacity - debt.div_ceil(self.token_ticks)
        };
        let recordable = (u64::MAX - tat.max(now)) / self.token_ticks;
        credit.min(recordable)
    }

    /// The TAT after returning `cost` tokens. It needs no clock: moving the
    /// TAT back adds exactly `cost` of credit, and credit above `B` is clipped
    /// by the `max(tat, now)` of every later decision.
    #[inline]
    pub(crate) fn refunded(&self, tat: u64, cost: u64) -> u64 {
        tat.saturating_sub(self.token_ticks(cost))
    }

    /// The TAT of a new bucket, whose own time starts at tick zero, holding
    /// the given credit: it is full again once the missing tokens refill.
    pub(crate) fn initial_tat(&self, initial: InitialCredit) -> u64 {
        let missing = match initial {
            InitialCredit::Full => 0,
            InitialCredit::Empty => self.capacity,
            // Quota validation guarantees k <= capacity.
            InitialCredit::Tokens(k) => self.capacity - k,
        };
        // missing <= capacity, and capacity * token_ticks was checked to fit.
        missing * self.token_ticks
    }
}

/// A TAT at or before every `now`: a full bucket.
pub(crate) const FULL: u64 = 0;

/// An emission interval of `period / tokens` time units as a whole number
/// of ticks of `1 / ticks_per_unit` unit, `ticks_per_unit <= 8`. One
/// construction for every clock unit: nanoseconds in-process, microseconds
/// in the Redis store ([`docs/design.md`](crate::guide::design), "Exact time").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Interval {
    /// `d`: ticks per time unit.
    pub(crate) ticks_per_unit: u128,
    /// `T`: ticks per token, never shorter than the exact interval.
    pub(crate) token_ticks: u128,
    /// Whether `T` is the exact interval.
    pub(crate) exact: bool,
}

impl Interval {
    /// Exact when the reduced denominator of `period / tokens` is at most 8;
    /// otherwise rounded *up* to eighths of a unit (a slower refill can only
    /// admit less), or `None` if that slows it by more than 0.1 %. Both
    /// arguments non-zero and below 2^64 * 1000.
    pub(crate) fn of(period: u128, tokens: u128) -> Option<Interval> {
        let g = gcd(period, tokens);
        let (denominator, numerator) = (tokens / g, period / g);
        let max = u128::from(MAX_TICKS_PER_UNIT);
        if denominator <= max {
            return Some(Interval {
                ticks_per_unit: denominator,
                token_ticks: numerator,
                exact: true,
            });
        }
        let scaled = period * max;
        let ticks = scaled.div_ceil(tokens);
        let excess = ticks * tokens - scaled;
        (excess * MAX_ROUNDING_ERROR_DENOMINATOR <= scaled).then_some(Interval {
            ticks_per_unit: max,
            token_ticks: ticks,
            exact: false,
        })
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gcra(capacity: u64, tokens: u64, period: Duration) -> Gcra {
        Gcra::new(capacity, tokens, period).unwrap()
    }

    #[test]
    fn reduced_denominators_scale_time_exactly() {
        let seven = gcra(1, 7, Duration::from_secs(1));
        assert_eq!(
            (seven.ticks_per_nano, seven.token_ticks),
            (7, 1_000_000_000)
        );
        assert!(seven.is_exact());
        let thousand_per_seven = gcra(1, 1000, Duration::from_secs(7));
        assert_eq!(
            (
                thousand_per_seven.ticks_per_nano,
                thousand_per_seven.token_ticks
            ),
            (1, 7_000_000)
        );
    }

    #[test]
    fn irregular_intervals_round_towards_admitting_less() {
        // 1e9/11 ns = 90_909_090.9..., in eighths: 727_272_727.27 -> 727_272_728.
        let eleven = gcra(1, 11, Duration::from_secs(1));
        assert!(!eleven.is_exact());
        assert_eq!(
            (eleven.ticks_per_nano, eleven.token_ticks),
            (8, 727_272_728)
        );
        assert!(u128::from(eleven.token_ticks) * 11 >= 8 * 1_000_000_000);
    }

    #[test]
    fn unrepresentable_rates_are_errors() {
        let err = Gcra::new(1, 3_000_000_000_001, Duration::from_secs(1));
        assert_eq!(err, Err(QuotaError::Unrepresentable));
    }

    #[test]
    fn end_of_clock_range_denies_forever_and_says_so() {
        let g = gcra(3, 2, Duration::from_secs(1));
        let end = g.ticks(u64::MAX);
        assert_eq!(
            g.admit(FULL, end, g.cost_ticks(1).unwrap(), 0),
            Err(u64::MAX)
        );
        assert_eq!(g.available(FULL, end), 0);
        // One and a half tokens before the end, one whole token still fits.
        let near = end - 3 * g.token_ticks / 2;
        assert_eq!(g.available(FULL, near), 1);
        assert!(g.admit(FULL, near, g.cost_ticks(1).unwrap(), 0).is_ok());
        assert!(g.admit(FULL, near, g.cost_ticks(2).unwrap(), 0).is_err());
    }
}
