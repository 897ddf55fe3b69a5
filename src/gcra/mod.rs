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
//! number of ticks and every decision is exact. Rates too fast and irregular
//! for that are charged per request instead, rounded up; see
//! [`docs/proofs.md`](crate::guide::proofs), "Exact time" and "Rounding per
//! request".

use std::time::Duration;

use crate::clock::saturating_nanos;
use crate::error::{AcquireError, QuotaError};
use crate::quota::InitialCredit;

mod carry;
#[cfg(feature = "keyed")]
mod words;
#[cfg(feature = "keyed")]
pub(crate) use words::WORDS;

/// The finest subdivision of a time unit (a nanosecond in-process, a
/// microsecond in the Redis store) a bucket uses. `u64::MAX` ticks of
/// `1/8` ns are 73 years after a bucket's creation, longer than any bucket
/// lives, while denominators up to eight (3/s, 6/s, 7/s) stay exact.
const MAX_TICKS_PER_UNIT: u64 = 8;

/// Relative error tolerated when an emission interval is rounded up per
/// token; past it, a quota is charged per request instead.
const MAX_ROUNDING_ERROR_DENOMINATOR: u128 = 1000;

/// The longest full refill, `B * T`, in ticks: half the range.
const MAX_TOLERANCE: u64 = u64::MAX / 2;

/// A validated quota in tick units.
///
/// The interval is the fixed-point number `interval / 2^shift` ticks per
/// token. With `shift == 0` it is `T` itself, exact or rounded up per token,
/// and a cost of `k` is charged `k * T`. Otherwise (fast irregular rates) it
/// is at most the exact `T`, and a cost of `k` is charged
/// `L - floor((B - k) * interval / 2^shift)`: the capacity's ticks less
/// what the tokens left behind are worth, rounded down. See
/// [`docs/proofs.md`](crate::guide::proofs), "Rounding per request".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Gcra {
    /// `d`: ticks per nanosecond.
    ticks_per_nano: u64,
    /// `T` in fixed point, `interval / 2^shift` ticks per token.
    interval: u64,
    shift: u32,
    /// `L`, a full bucket's ticks: how far the TAT may lie beyond `now`
    /// after an admission. `B * T`, or `ceil(B * T)` when charged per
    /// request.
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
        let gcra = match Interval::of(u128::from(period), u128::from(tokens)) {
            // Lossless: d <= 8, and T <= period (exact: T divides it;
            // rounded: tokens > 8, so 8 * period / tokens < period).
            Some(interval) => Gcra {
                ticks_per_nano: interval.ticks_per_unit as u64,
                interval: interval.token_ticks as u64,
                shift: 0,
                tolerance: u128::from(capacity)
                    .checked_mul(interval.token_ticks)
                    .and_then(|t| u64::try_from(t).ok())
                    .unwrap_or(u64::MAX),
                capacity,
                exact: interval.exact,
            },
            None => Gcra::per_request(capacity, tokens, period),
        };
        // Bounding a full refill by half the tick range leaves the other half,
        // at least 2^63 ticks after a bucket's creation, in which every
        // decision is exact: `max(tat, now) + cost*T` cannot overflow there.
        if gcra.tolerance > MAX_TOLERANCE {
            return Err(QuotaError::Overflow { capacity });
        }
        Ok(gcra)
    }

    /// A quota whose interval, rounded up to eighths of a nanosecond per
    /// token, would be more than 0.1 % slow: `T = 8 * period / tokens < 1000`
    /// ticks, so `T` fits in ten integer bits and the fixed point keeps at
    /// least 54 fractional ones. The tolerance may exceed the range; the
    /// caller refuses it.
    fn per_request(capacity: u64, tokens: u64, period: u64) -> Gcra {
        let numerator = u128::from(MAX_TICKS_PER_UNIT) * u128::from(period);
        let tokens = u128::from(tokens);
        let (whole, part) = (numerator / tokens, numerator % tokens);
        // The largest shift that keeps `floor(T * 2^shift)` below 2^64.
        let shift = 64 - (u128::BITS - whole.leading_zeros());
        // Below 2^64: `T < 2^(64 - shift)`; `part < tokens < 2^64`.
        let interval = (whole << shift) + (part << shift) / tokens;
        // `ceil(B * T)`, each product below 2^128.
        let tolerance =
            u128::from(capacity) * whole + (u128::from(capacity) * part).div_ceil(tokens);
        Gcra {
            ticks_per_nano: MAX_TICKS_PER_UNIT,
            interval: interval as u64,
            shift,
            tolerance: u64::try_from(tolerance).unwrap_or(u64::MAX),
            capacity,
            exact: false,
        }
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
        // Whole-nanosecond quotas skip the `div` on every refusal (a `match`
        // with a constant divisor per scale measured slower:
        // `docs/benchmarks.md`, "Measured design choices").
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

    /// Validates a cost and converts it to the ticks it is charged.
    #[inline]
    pub(crate) fn cost_ticks(&self, cost: u64) -> Result<u64, AcquireError> {
        AcquireError::check_cost(cost, self.capacity)?;
        Ok(self.charge(cost))
    }

    /// The ticks a cost of at most the capacity is charged: `cost * T`, or,
    /// per request, `L - floor((B - cost) * T)`, which is at least
    /// `cost * T + (L - B * T)` (what keeps the rounding on the side of
    /// admitting less) and exactly `L` for the whole capacity (so that a
    /// full bucket admits it).
    #[inline]
    fn charge(&self, cost: u64) -> u64 {
        if self.shift == 0 {
            // cost <= capacity and capacity * T was checked to fit.
            cost * self.interval
        } else {
            // Kept off the straight line of the exact quotas' decision: laid
            // out inline, it slowed their refusals (`docs/benchmarks.md`,
            // "Measured design choices").
            std::hint::cold_path();
            self.tolerance - self.scaled(self.capacity - cost)
        }
    }

    /// `floor(tokens * T)` in the fixed point, saturating: the ticks in
    /// which `tokens` refill, never more.
    #[inline]
    fn scaled(&self, tokens: u64) -> u64 {
        let ticks = (u128::from(tokens) * u128::from(self.interval)) >> self.shift;
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// The ticks to give back when `returned` of `taken` admitted tokens
    /// come back: the whole charge when all of them do, otherwise what
    /// charging only the rest would have saved. Never more than the charge,
    /// and never more than `returned` tokens refill in.
    pub(crate) fn returned_ticks(&self, taken: u64, returned: u64) -> u64 {
        let taken = taken.min(self.capacity);
        if returned >= taken {
            self.charge(taken)
        } else {
            self.charge(taken) - self.charge(taken - returned)
        }
    }

    /// The ticks `tokens` are charged as debt (a settled cost's excess over
    /// its estimate, which may exceed the capacity): `tokens * T` rounded
    /// up, saturating, so that a debt is never smaller than its tokens.
    pub(crate) fn debt_ticks(&self, tokens: u64) -> u64 {
        let one = (1u128 << self.shift) - 1;
        let ticks = (u128::from(tokens) * u128::from(self.interval) + one) >> self.shift;
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// A whole token's ticks, rounded up: the slot a pooled token occupies
    /// on the bucket's timeline (giving back tokens so counted returns at
    /// most their slots).
    pub(crate) fn slot_ticks(&self) -> u64 {
        let one = 1u128 << self.shift;
        ((u128::from(self.interval) + one - 1) >> self.shift) as u64
    }

    /// The core decision: admits `cost_ticks` at `now`, allowing the caller
    /// to start up to `slack` ticks in the future.
    ///
    /// Returns the new TAT, or the number of ticks by which the request is
    /// too early. Credit is `B - max(0, tat - now)/T`, so "cost fits" is
    /// `max(tat, now) + cost*T <= now + B*T`. Taking `max(tat, now)` is what
    /// makes a stale or backward `now` harmless: it can only see less credit.
    #[inline]
    pub(crate) fn decide(
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
        // One past the latest state allowed, saturating: a strict `<`
        // against it admits exactly up to `now + B·T + slack`, and never
        // writes `u64::MAX`, the value no state holds (see [`LAST`]), at no
        // cost to the path (a cap of the limit at `LAST` cost a compare and
        // a move on every admission: `docs/benchmarks.md`, "Changing a
        // quota").
        let bound = now.saturating_add(self.tolerance + 1).saturating_add(slack);
        if new_tat < bound {
            Ok(new_tat)
        } else {
            // Without the hint the compiler merges both outcomes into one
            // branchless value, putting this comparison on the path to the
            // compare-and-swap of every admission.
            std::hint::cold_path();
            // Past the end of the range (a bound saturated at `u64::MAX`)
            // it never fits.
            Err(new_tat.checked_add(1).map_or(u64::MAX, |past| past - bound))
        }
    }

    /// How long the caller of an admission that produced `new_tat` at `now`
    /// must wait before its tokens exist (zero when credit covered it).
    #[inline]
    pub(crate) fn wait(&self, new_tat: u64, now: u64) -> u64 {
        new_tat.saturating_sub(now.saturating_add(self.tolerance))
    }

    /// Whole tokens available at `now`: the largest cost [`decide`] would
    /// admit, zero while reservations hold the bucket in debt, and no more
    /// than the rest of the clock range can still record, so that it agrees
    /// with [`decide`] even at the end of the range.
    ///
    /// [`decide`]: Gcra::decide
    #[inline]
    pub(crate) fn available(&self, tat: u64, now: u64) -> u64 {
        let debt = tat.saturating_sub(now);
        let room = LAST.saturating_sub(tat.max(now));
        // The most ticks one more admission may be charged.
        let span = self.tolerance.saturating_sub(debt).min(room);
        if self.shift == 0 {
            // span <= B * T, so at most B.
            span / self.interval
        } else {
            // charge(k) <= span  <=>  (B - k) * interval >= (L - span) << shift.
            let kept = (u128::from(self.tolerance - span) << self.shift)
                .div_ceil(u128::from(self.interval));
            self.capacity
                .saturating_sub(u64::try_from(kept).unwrap_or(u64::MAX))
        }
    }

    /// The TAT after returning `cost` tokens. It needs no clock: moving the
    /// TAT back adds at most `cost` of credit, and credit above `B` is
    /// clipped by the `max(tat, now)` of every later decision.
    #[inline]
    pub(crate) fn refunded(&self, tat: u64, cost: u64) -> u64 {
        tat.saturating_sub(self.scaled(cost))
    }

    /// The TAT of a new bucket, whose own time starts at tick zero, holding
    /// the given credit: as if the missing tokens had just been admitted
    /// from a full bucket.
    pub(crate) fn initial_tat(&self, initial: InitialCredit) -> u64 {
        let missing = match initial {
            InitialCredit::Full => 0,
            InitialCredit::Empty => self.capacity,
            // Quota validation guarantees k <= capacity.
            InitialCredit::Tokens(k) => self.capacity - k,
        };
        if missing == 0 {
            FULL
        } else {
            self.charge(missing)
        }
    }
}

/// A TAT at or before every `now`: a full bucket.
pub(crate) const FULL: u64 = 0;

/// The latest TAT any decision, give-back or quota change writes: one short
/// of the range, so that `u64::MAX` is left free for the state word to mean
/// "this state has moved to another quota" (`state::SEALED`), a value no
/// decision can write over or mistake for credit.
pub(crate) const LAST: u64 = u64::MAX - 1;

/// An emission interval of `period / tokens` time units as a whole number
/// of ticks of `1 / ticks_per_unit` unit, `ticks_per_unit <= 8`. One
/// construction for every clock unit: nanoseconds in-process, microseconds
/// in the Redis store ([`docs/proofs.md`](crate::guide::proofs), "Exact time").
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

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn reduced_denominators_scale_time_exactly() {
        let seven = gcra(1, 7, SECOND);
        assert_eq!(
            (seven.ticks_per_nano, seven.interval, seven.shift),
            (7, 1_000_000_000, 0)
        );
        assert!(seven.is_exact());
        let thousand_per_seven = gcra(1, 1000, Duration::from_secs(7));
        assert_eq!(
            (
                thousand_per_seven.ticks_per_nano,
                thousand_per_seven.interval
            ),
            (1, 7_000_000)
        );
    }

    #[test]
    fn irregular_intervals_round_towards_admitting_less() {
        // 1e9/11 ns = 90_909_090.9..., in eighths: 727_272_727.27 -> 727_272_728.
        let eleven = gcra(1, 11, SECOND);
        assert!(!eleven.is_exact());
        assert_eq!(
            (eleven.ticks_per_nano, eleven.interval, eleven.shift),
            (8, 727_272_728, 0)
        );
        assert!(u128::from(eleven.interval) * 11 >= 8 * 1_000_000_000);
    }

    /// 64 MiB/s: `T = 8e9 / 2^26 = 119.2...` eighths of a nanosecond, a
    /// dyadic fraction, so the fixed point holds it exactly and each charge
    /// is the exact one rounded up to a tick.
    #[test]
    fn fast_irregular_rates_are_charged_per_request() {
        let (capacity, tokens) = (64 << 20, 64 << 20);
        let g = gcra(capacity, tokens, SECOND);
        assert!(!g.is_exact());
        assert_eq!((g.ticks_per_nano, g.shift), (8, 57));
        // B * T = 8e9 ticks exactly: a full bucket refills in one second.
        assert_eq!(g.tolerance, 8_000_000_000);
        for cost in [1, 2, 1000, 1500, capacity - 1, capacity] {
            let exact = u128::from(cost) * 8_000_000_000;
            let charged = u128::from(g.cost_ticks(cost).unwrap()) * u128::from(tokens);
            // At least the exact charge, and within one tick of it.
            assert!(charged >= exact, "cost {cost}");
            assert!(charged < exact + u128::from(tokens), "cost {cost}");
        }
        assert_eq!(g.cost_ticks(capacity), Ok(g.tolerance));
    }

    /// `3e9 + 7` tokens per second: `T = 2.67` eighths of a nanosecond, no
    /// power of two divides it, and the charge carries the tolerance's own
    /// rounding (`L - B*T`).
    #[test]
    fn per_request_charges_never_undercut_the_exact_cost() {
        let tokens = 3_000_000_007;
        for capacity in [1, 3, 1_000, tokens, 1 << 40] {
            let g = gcra(capacity, tokens, SECOND);
            assert_ne!(g.shift, 0);
            // L = ceil(B * 8e9 / tokens).
            let exact_l = u128::from(capacity) * 8_000_000_000;
            let l = u128::from(g.tolerance) * u128::from(tokens);
            assert!(l >= exact_l && l < exact_l + u128::from(tokens));
            let slack = l - exact_l;
            for cost in [1, 2, capacity / 2, capacity - 1, capacity] {
                let Ok(charged) = g.cost_ticks(cost) else {
                    continue;
                };
                let exact = u128::from(cost) * 8_000_000_000;
                let charged = u128::from(charged) * u128::from(tokens);
                assert!(charged >= exact + slack, "B {capacity}, cost {cost}");
                assert!(
                    charged < exact + slack + 3 * u128::from(tokens),
                    "B {capacity}, cost {cost}"
                );
            }
            assert_eq!(g.cost_ticks(capacity), Ok(g.tolerance));
        }
    }

    #[test]
    fn available_agrees_with_the_decision_per_request() {
        let g = gcra(1000, 3_000_000_007, SECOND);
        for debt in [
            0,
            1,
            7,
            8,
            100,
            g.tolerance / 2,
            g.tolerance - 1,
            g.tolerance,
        ] {
            let now = 1 << 40;
            let tat = now + debt;
            let k = g.available(tat, now);
            if k > 0 {
                assert!(g.decide(tat, now, g.cost_ticks(k).unwrap(), 0).is_ok());
            }
            if k < g.capacity {
                assert!(
                    g.decide(tat, now, g.charge(k + 1), 0).is_err(),
                    "debt {debt}"
                );
            }
        }
    }

    #[test]
    fn give_backs_are_exact_differences_of_charges() {
        let g = gcra(1000, 3_000_000_007, SECOND);
        let taken = g.charge(10);
        assert_eq!(g.returned_ticks(10, 10), taken);
        assert_eq!(g.returned_ticks(10, u64::MAX), taken);
        assert_eq!(g.returned_ticks(10, 0), 0);
        assert_eq!(g.returned_ticks(10, 4), taken - g.charge(6));
        // Never more than the tokens refill in.
        let returned = u128::from(g.returned_ticks(10, 4)) * 3_000_000_007;
        assert!(returned <= 4 * 8_000_000_000 + 3_000_000_007);
        // A pooled token's slot is a whole token, rounded up.
        assert_eq!(g.slot_ticks(), 3);
    }

    #[test]
    fn the_fastest_rates_charge_at_least_a_tick() {
        let g = gcra(u64::MAX, u64::MAX, SECOND);
        assert_eq!(g.shift, 64);
        assert_eq!(g.cost_ticks(1), Ok(1));
        assert_eq!(g.cost_ticks(u64::MAX), Ok(g.tolerance));
        assert_eq!(g.available(FULL, 0), u64::MAX);
        assert_eq!(g.slot_ticks(), 1);
    }

    #[test]
    fn no_decision_writes_the_last_value_of_the_range() {
        // `u64::MAX` is the state word's seal: even a reservation with an
        // unbounded wait stops one short of it.
        let g = gcra(3, 2, SECOND);
        let one = g.cost_ticks(1).unwrap();
        assert_eq!(g.decide(LAST - one, 0, one, u64::MAX), Ok(LAST));
        assert!(g.decide(LAST - one + 1, 0, one, u64::MAX).is_err());
        assert!(g.decide(LAST, u64::MAX, one, u64::MAX).is_err());
        assert_eq!(g.available(LAST - one, 0), 0);
    }

    #[test]
    fn end_of_clock_range_denies_forever_and_says_so() {
        let g = gcra(3, 2, SECOND);
        let end = g.ticks(u64::MAX);
        assert_eq!(
            g.decide(FULL, end, g.cost_ticks(1).unwrap(), 0),
            Err(u64::MAX)
        );
        assert_eq!(g.available(FULL, end), 0);
        // One and a half tokens before the end, one whole token still fits.
        let near = end - 3 * g.interval / 2;
        assert_eq!(g.available(FULL, near), 1);
        assert!(g.decide(FULL, near, g.cost_ticks(1).unwrap(), 0).is_ok());
        assert!(g.decide(FULL, near, g.cost_ticks(2).unwrap(), 0).is_err());
    }
}
