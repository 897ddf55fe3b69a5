//! A quota in the Redis store's integer time: ticks of `1/d` microsecond.
//!
//! The same construction as `crate::gcra::Gcra::new` (see [`docs/design.md`](crate::guide::design),
//! "Exact time: ticks of 1/d nanosecond"), with two differences that come
//! from where the arithmetic runs:
//!
//! - the unit is the microsecond, because that is what Redis' `TIME`
//!   returns;
//! - every value the Lua scripts compute must stay at or below `2^53`, the
//!   largest range in which a Lua number (an IEEE double) holds every
//!   integer exactly, instead of within a `u64`.
//!
//! The interval itself comes from `crate::gcra::Interval`, shared with the
//! in-process bucket; what differs is the unit and the range checks.

use std::time::{Duration, SystemTime};

use super::RedisStoreError;
use crate::gcra::Interval;

/// Unix seconds of the store's epoch, 2025-01-01T00:00:00Z. Server time is
/// counted from here; every store sharing a Redis keyspace uses the same
/// epoch, so it is a constant and never configuration.
pub(super) const EPOCH_UNIX_SECS: u64 = 1_735_689_600;

/// Lua numbers hold every integer up to this one exactly.
pub(super) const EXACT_LIMIT: u64 = 1 << 53;

/// Thirty years of 365.25 days, in microseconds: how long after the epoch
/// (that is, until 2055) every quota the store accepts must stay exact.
const MIN_RANGE_MICROS: u128 = 30 * 36_525 * 86_400 * 1_000_000 / 100;

/// A quota converted to integer ticks of `1/ticks_per_micro` µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Scale {
    /// `d`: ticks per microsecond, `1..=8`.
    pub(super) ticks_per_micro: u64,
    /// `T`: ticks per token, never shorter than the exact interval.
    pub(super) token_ticks: u64,
    /// `B * T`: a full refill, in ticks.
    pub(super) tolerance: u64,
    /// `B`.
    pub(super) capacity: u64,
    /// The latest server time (ticks since the epoch) at which a script
    /// still runs: `2^53 - (B + 1) * T`, so that `now + B*T + T`, the
    /// largest value any script computes, stays exact.
    pub(super) last_tick: u64,
    /// Whether `T` is the exact interval (otherwise it was rounded up).
    pub(super) exact: bool,
}

impl Scale {
    /// Converts a quota given as its capacity and refill (`tokens` per
    /// `period`). Never panics: every arithmetic step is in `u128` on
    /// operands below `2^64`, or checked.
    pub(super) fn new(
        capacity: u64,
        tokens: u64,
        period: Duration,
    ) -> Result<Self, RedisStoreError> {
        // A `Quota` guarantees these; checked again so that no input panics.
        let period_nanos = period.as_nanos();
        if period_nanos > u128::from(u64::MAX) {
            return Err(RedisStoreError::RefillTooLong { capacity });
        }
        if capacity == 0 || tokens == 0 || period_nanos == 0 {
            return Err(RedisStoreError::RateTooFine);
        }
        // The interval is period_ns / (1000 * tokens) µs: the in-process
        // bucket's construction, in microseconds.
        let Interval {
            ticks_per_unit: d,
            token_ticks: t,
            exact,
        } = Interval::of(period_nanos, 1000 * u128::from(tokens))
            .ok_or(RedisStoreError::RateTooFine)?;
        // `(B + 1) * T` plus thirty years of ticks must stay exact in Lua.
        let refill = (u128::from(capacity) + 1).checked_mul(t);
        let needed = refill.and_then(|r| r.checked_add(MIN_RANGE_MICROS * d));
        let (Some(refill), Some(needed)) = (refill, needed) else {
            return Err(RedisStoreError::RefillTooLong { capacity });
        };
        if needed > u128::from(EXACT_LIMIT) {
            return Err(RedisStoreError::RefillTooLong { capacity });
        }
        // All below 2^53 now, so these conversions are lossless.
        let narrow =
            |v: u128| u64::try_from(v).map_err(|_| RedisStoreError::RefillTooLong { capacity });
        Ok(Scale {
            ticks_per_micro: narrow(d)?,
            token_ticks: narrow(t)?,
            tolerance: narrow(refill - t)?,
            capacity,
            last_tick: narrow(u128::from(EXACT_LIMIT) - refill)?,
            exact,
        })
    }

    /// The last instant at which the scripts still run (`last_tick` as a
    /// wall-clock time on the server's clock).
    pub(super) fn valid_until(&self) -> SystemTime {
        let micros = self.last_tick / self.ticks_per_micro;
        SystemTime::UNIX_EPOCH
            + Duration::from_secs(EPOCH_UNIX_SECS)
            + Duration::from_micros(micros)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scale(capacity: u64, tokens: u64, period: Duration) -> Scale {
        Scale::new(capacity, tokens, period).unwrap()
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn whole_microsecond_intervals_use_microsecond_ticks() {
        let s = scale(10, 1000, Duration::from_secs(7));
        assert_eq!(
            (s.ticks_per_micro, s.token_ticks, s.tolerance),
            (1, 7000, 70_000)
        );
        assert!(s.exact);
        let s = scale(5, 5, Duration::from_secs(3600));
        assert_eq!((s.ticks_per_micro, s.token_ticks), (1, 720_000_000));
    }

    #[test]
    fn reduced_denominators_up_to_eight_are_exact() {
        let three = scale(1, 3, SECOND);
        assert_eq!((three.ticks_per_micro, three.token_ticks), (3, 1_000_000));
        let seven = scale(1, 7, SECOND);
        assert_eq!((seven.ticks_per_micro, seven.token_ticks), (7, 1_000_000));
        // 8 000 000/s: one token per eighth of a microsecond.
        let fastest = scale(1, 8_000_000, SECOND);
        assert_eq!((fastest.ticks_per_micro, fastest.token_ticks), (8, 1));
        assert!(three.exact && seven.exact && fastest.exact);
        // 7 per 2 ms = 2000/7 µs.
        let s = scale(1, 7, Duration::from_millis(2));
        assert_eq!((s.ticks_per_micro, s.token_ticks), (7, 2000));
        // Sub-microsecond periods: 1 per 500 ns = 1/2 µs.
        let s = scale(1, 1, Duration::from_nanos(500));
        assert_eq!((s.ticks_per_micro, s.token_ticks), (2, 1));
    }

    #[test]
    fn other_intervals_round_up_to_eighths() {
        // 1e6/11 µs = 90909.09..., in eighths 727272.7 -> 727273.
        let eleven = scale(1, 11, SECOND);
        assert!(!eleven.exact);
        assert_eq!((eleven.ticks_per_micro, eleven.token_ticks), (8, 727_273));
        assert!(u128::from(eleven.token_ticks) * 11 >= 8 * 1_000_000);
        // 1000/11 µs = 90.9 µs: in eighths 727.27 -> 728, 0.1 % exactly: accepted.
        let s = scale(1, 11_000, SECOND);
        assert_eq!((s.ticks_per_micro, s.token_ticks), (8, 728));
    }

    #[test]
    fn nanosecond_exact_rates_can_be_too_fine_in_microseconds() {
        // Exact in the in-process bucket (1 ns), rounded 8-fold here.
        assert!(matches!(
            Scale::new(1, 1, Duration::from_nanos(1)),
            Err(RedisStoreError::RateTooFine)
        ));
        // 1.001 µs: in eighths 8.008 -> 9, 12 % slower.
        assert!(matches!(
            Scale::new(1, 1, Duration::from_nanos(1001)),
            Err(RedisStoreError::RateTooFine)
        ));
        // 9 000/s = 111.1 µs, in eighths 888.9 -> 889: 0.0125 %, accepted.
        assert!(!Scale::new(1, 9_000, SECOND).unwrap().exact);
        // 110 000/s = 9.09 µs, in eighths 72.7 -> 73: 0.375 %, refused.
        assert!(matches!(
            Scale::new(1, 110_000, SECOND),
            Err(RedisStoreError::RateTooFine)
        ));
    }

    #[test]
    fn the_range_lasts_thirty_years_or_the_quota_is_refused() {
        for &(capacity, tokens, period) in &[
            (1, 1, SECOND),
            (1_000_000, 7, SECOND),
            (1, 1, Duration::from_secs(86_400 * 365)),
            (1, 8_000_000, SECOND),
        ] {
            let s = scale(capacity, tokens, period);
            let range_micros = u128::from(s.last_tick / s.ticks_per_micro);
            assert!(
                range_micros >= MIN_RANGE_MICROS,
                "{capacity} {tokens} {period:?}"
            );
            let largest =
                u128::from(s.last_tick) + u128::from(s.tolerance) + u128::from(s.token_ticks);
            assert!(largest <= u128::from(EXACT_LIMIT));
        }
        // At 7/s (ticks of 1/7 µs, T = 10^6), 2^53 ticks are 40.8 years;
        // thirty of them leave 2 380 103 254.7 tokens of refill for `B + 1`.
        let largest = 2_380_103_253;
        assert!(Scale::new(largest, 7, SECOND).is_ok());
        assert!(matches!(
            Scale::new(largest + 1, 7, SECOND),
            Err(RedisStoreError::RefillTooLong { capacity }) if capacity == largest + 1
        ));
        // A day per token (whole microseconds: 2^53 ticks are 285 years):
        // up to about 255 years of full refill.
        assert!(Scale::new(93_000, 1, Duration::from_secs(86_400)).is_ok());
        assert!(Scale::new(94_000, 1, Duration::from_secs(86_400)).is_err());
    }

    #[test]
    fn extreme_inputs_are_errors_not_panics() {
        for &(capacity, tokens, period) in &[
            (u64::MAX, 1, SECOND),
            (u64::MAX, u64::MAX, Duration::from_nanos(u64::MAX)),
            (1, u64::MAX, Duration::from_nanos(u64::MAX)),
            (1, 1, Duration::from_nanos(u64::MAX)),
            (1, u64::MAX, Duration::from_nanos(1)),
            (0, 1, SECOND),
            (1, 0, SECOND),
            (1, 1, Duration::ZERO),
            (1, 1, Duration::MAX),
        ] {
            assert!(
                Scale::new(capacity, tokens, period).is_err(),
                "{capacity} {tokens} {period:?}"
            );
        }
    }

    #[test]
    fn the_epoch_is_2025() {
        // 55 years of 365 days and 14 leap days (1972..=2024).
        assert_eq!(EPOCH_UNIX_SECS, (55 * 365 + 14) * 86_400);
        let s = scale(1, 1, SECOND);
        assert!(
            s.valid_until()
                > SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_UNIX_SECS + 30 * 365 * 86_400)
        );
    }
}
