//! A quota in the Redis store's integer time: ticks of `1/d` microsecond.
//!
//! The same construction as `crate::gcra::Gcra::new` (see [`docs/proofs.md`](crate::guide::proofs),
//! "Exact time: ticks of 1/d nanosecond" and "Rounding per request"), with
//! two differences that come from where the arithmetic runs:
//!
//! - the unit is the microsecond, because that is what Redis' `TIME`
//!   returns;
//! - every value the Lua scripts compute must stay at or below `2^53`, the
//!   largest range in which a Lua number (an IEEE double) holds every
//!   integer exactly, instead of within a `u64`.
//!
//! The interval itself comes from `crate::gcra::Interval`, shared with the
//! in-process bucket; what differs is the unit and the range checks. A rate
//! too fast and irregular for a whole number of ticks per token (64 MiB/s,
//! 2^33 tokens a second) is charged per request instead, with the
//! fraction `T / D` ticks per token written out for the scripts, which
//! multiply by it exactly (`muldiv` in `lua.rs`).

use std::time::{Duration, SystemTime};

use super::error::RedisStoreError;
use crate::gcra::Interval;
use crate::quota::Quota;

/// Unix seconds of the store's epoch, 2025-01-01T00:00:00Z. Server time is
/// counted from here; every store sharing a Redis keyspace uses the same
/// epoch, so it is a constant and never configuration.
pub(super) const EPOCH_UNIX_SECS: u64 = 1_735_689_600;

/// Lua numbers hold every integer up to this one exactly.
pub(super) const EXACT_LIMIT: u64 = 1 << 53;

/// Thirty years of 365.25 days, in microseconds: how long after the epoch
/// (that is, until 2055) every quota the store accepts must stay exact.
const MIN_RANGE_MICROS: u128 = 30 * 36_525 * 86_400 * 1_000_000 / 100;

/// Ticks per microsecond of a quota charged per request: the finest tick
/// the scripts accept (`sane` in `lua.rs`), as in-process.
const FINEST: u64 = 8;

/// A quota charged per request has `T < 2^52`, `D <= 2^51` and `B < 2^51`:
/// the scripts' `muldiv` divides by `T` or `D` and needs divisors below
/// `2^52`, and these bounds keep each quotient it forms below `2^53` (the
/// scripts check the same bounds on every quota they are sent or read).
const MAX_TOKEN_PARTS: u32 = 51;
const MAX_PER_REQUEST_CAPACITY: u64 = 1 << 51;

/// A quota converted to integer ticks of `1/ticks_per_micro` µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Scale {
    /// `d`: ticks per microsecond, `1..=8`.
    pub(super) ticks_per_micro: u64,
    /// `T`: with `D`, the ticks one token refills in, `T / D`.
    pub(super) token_ticks: u64,
    /// `D`: 1 when a token is charged a whole number of ticks `T`, never
    /// shorter than the exact interval; otherwise a power of two, `T / D`
    /// is at most the exact interval, and each request is charged at once
    /// ([`charge`](Self::charge)).
    pub(super) token_parts: u64,
    /// `L`: a full bucket's ticks. `B * T` when charged per token; `B`
    /// tokens' exact refill rounded up to a tick when charged per request.
    pub(super) tolerance: u64,
    /// `B`.
    pub(super) capacity: u64,
    /// The latest server time (ticks since the epoch) at which a script
    /// still runs: `2^53 - L - c(1)`, so that `now + L + c(1)`, the
    /// largest value any script computes, stays exact.
    pub(super) last_tick: u64,
    /// Whether `T` is the exact interval (otherwise it was rounded up, or
    /// requests are charged per request).
    pub(super) exact: bool,
}

impl Scale {
    /// Converts a quota. Never panics: every arithmetic step is in `u128` on
    /// operands below `2^72`, or checked.
    pub(super) fn new(quota: &Quota) -> Result<Self, RedisStoreError> {
        let capacity = quota.capacity();
        let too_long = || RedisStoreError::RefillTooLong { capacity };
        let (tokens, period) = quota.refill();
        let period = period.as_nanos();
        // A `Quota` guarantees these; checked again so that no input panics.
        if capacity == 0 || tokens == 0 || period == 0 || period > u128::from(u64::MAX) {
            return Err(too_long());
        }
        // The interval is period_ns / (1000 * tokens) µs: the in-process
        // bucket's construction, in microseconds.
        let scale = match Interval::of(period, 1000 * u128::from(tokens)) {
            Some(Interval {
                ticks_per_unit: d,
                token_ticks: t,
                exact,
            }) => {
                let full = (u128::from(capacity) * t).min(u128::from(EXACT_LIMIT));
                Scale {
                    ticks_per_micro: narrow(d),
                    token_ticks: narrow(t),
                    token_parts: 1,
                    tolerance: narrow(full),
                    capacity,
                    last_tick: 0,
                    exact,
                }
            }
            None => Scale::per_request(capacity, tokens, period).ok_or_else(too_long)?,
        };
        // `L + c(1)` plus thirty years of ticks must stay exact in Lua.
        let largest = u128::from(scale.tolerance) + u128::from(scale.charge(1));
        let needed = largest + MIN_RANGE_MICROS * u128::from(scale.ticks_per_micro);
        if needed > u128::from(EXACT_LIMIT) {
            return Err(too_long());
        }
        Ok(Scale {
            last_tick: narrow(u128::from(EXACT_LIMIT) - largest),
            ..scale
        })
    }

    /// A rate whose interval, rounded up to an eighth of a microsecond per
    /// token, would be more than 0.1 % slow, so below 1000 ticks: `T / D`
    /// is `P = period_ns / (125 * tokens)` ticks rounded down to `T < 2^52`
    /// with the largest power of two `D <= 2^51` that allows, so `T >=
    /// 2^51` or `D = 2^51`, and with `B < 2^51`, `B * (P - T / D) < 1`
    /// tick. `None` past that capacity; the range is checked by the caller.
    fn per_request(capacity: u64, tokens: u64, period: u128) -> Option<Scale> {
        if capacity >= MAX_PER_REQUEST_CAPACITY {
            return None;
        }
        let per_token = 125 * u128::from(tokens);
        let whole = period / per_token;
        // `P < whole + 1 <= 2^bits`, so `P * 2^(52 - bits) < 2^52`.
        let bits = u128::BITS - whole.leading_zeros();
        let shift = 52u32.saturating_sub(bits).min(MAX_TOKEN_PARTS);
        let token_ticks = (period << shift) / per_token;
        // `ceil(B * P)`: below 2^51 * 2^64.
        let full = (u128::from(capacity) * period).div_ceil(per_token);
        Some(Scale {
            ticks_per_micro: FINEST,
            token_ticks: narrow(token_ticks),
            token_parts: 1 << shift,
            tolerance: narrow(full.min(u128::from(EXACT_LIMIT))),
            capacity,
            last_tick: 0,
            exact: false,
        })
    }

    /// The ticks charged for `tokens <= B`: `k * T` per token, or, per
    /// request, `c(k) = L - floor((B - k) * T / D)`: what a full bucket
    /// holds less what the tokens left behind are worth, rounded down, as
    /// in-process ([`docs/proofs.md`](crate::guide::proofs), "Rounding per
    /// request"). `c(k)` is at least `k` tokens' exact refill plus
    /// `L - B * P`, so the rounding only ever admits less, and `c(B) = L`.
    pub(super) fn charge(&self, tokens: u64) -> u64 {
        let tokens = u128::from(tokens.min(self.capacity));
        if self.token_parts == 1 {
            narrow(tokens * u128::from(self.token_ticks))
        } else {
            let left = (u128::from(self.capacity) - tokens) * u128::from(self.token_ticks)
                / u128::from(self.token_parts);
            // `left <= B * P <= L`; saturating only for a tolerance
            // clamped at 2^53, which the range check then refuses.
            self.tolerance.saturating_sub(narrow(left))
        }
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

/// A value already bounded by `2^53` (or checked to be before use) as a
/// `u64`; saturating, so a value past the range fails its range check
/// instead of wrapping.
fn narrow(value: u128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// What the scripts compute besides the charge, mirrored in Rust for the
/// tests: the parity tests run the Lua against these on a real server,
/// and the property tests below run these against the rational model.
#[cfg(test)]
impl Scale {
    /// The most tokens, at most `B`, whose charge fits in `room <= L`
    /// ticks: the scripts' `fit`, `B - ceil((L - room) * D / T)` per
    /// request.
    pub(super) fn fit(&self, room: u64) -> u64 {
        if self.token_parts == 1 {
            return room / self.token_ticks;
        }
        if self.token_ticks == 0 {
            return if room >= self.tolerance {
                self.capacity
            } else {
                0
            };
        }
        let kept = (u128::from(self.tolerance - room) * u128::from(self.token_parts))
            .div_ceil(u128::from(self.token_ticks));
        self.capacity.saturating_sub(narrow(kept))
    }

    /// The ticks a release of `unused` of `granted` tokens gives back after
    /// holding them `held` ticks, before clipping to the state: the one
    /// rule, at most what charging only the rest would have saved (the
    /// whole charge for all of them) and at most the charge less the time
    /// held.
    pub(super) fn owed(&self, granted: u64, unused: u64, held: u64) -> u64 {
        let granted = granted.min(self.capacity);
        let unused = unused.min(granted);
        let cost = self.charge(granted);
        let saved = if unused == granted {
            cost
        } else {
            cost - self.charge(granted - unused)
        };
        saved.min(cost.saturating_sub(held))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn scale(capacity: u64, tokens: u64, period: Duration) -> Result<Scale, RedisStoreError> {
        Scale::new(&Quota::new(capacity, tokens, period).unwrap())
    }

    fn ok(capacity: u64, tokens: u64, period: Duration) -> Scale {
        scale(capacity, tokens, period).unwrap()
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn whole_microsecond_intervals_use_microsecond_ticks() {
        let s = ok(10, 1000, Duration::from_secs(7));
        assert_eq!(
            (s.ticks_per_micro, s.token_ticks, s.token_parts, s.tolerance),
            (1, 7000, 1, 70_000)
        );
        assert!(s.exact);
        let s = ok(5, 5, Duration::from_secs(3600));
        assert_eq!((s.ticks_per_micro, s.token_ticks), (1, 720_000_000));
        // One token a year: whole microseconds, and centuries of range.
        let year = ok(1, 1, Duration::from_secs(365 * 86_400));
        assert_eq!(year.token_ticks, 365 * 86_400 * 1_000_000);
        assert_eq!(year.charge(1), year.token_ticks);
    }

    #[test]
    fn reduced_denominators_up_to_eight_are_exact() {
        let three = ok(1, 3, SECOND);
        assert_eq!((three.ticks_per_micro, three.token_ticks), (3, 1_000_000));
        let seven = ok(1, 7, SECOND);
        assert_eq!((seven.ticks_per_micro, seven.token_ticks), (7, 1_000_000));
        // 8 000 000/s: one token per eighth of a microsecond.
        let fastest = ok(1, 8_000_000, SECOND);
        assert_eq!((fastest.ticks_per_micro, fastest.token_ticks), (8, 1));
        assert!(three.exact && seven.exact && fastest.exact);
        // 7 per 2 ms = 2000/7 µs.
        let s = ok(1, 7, Duration::from_millis(2));
        assert_eq!((s.ticks_per_micro, s.token_ticks), (7, 2000));
        // Sub-microsecond periods: 1 per 500 ns = 1/2 µs.
        let s = ok(1, 1, Duration::from_nanos(500));
        assert_eq!((s.ticks_per_micro, s.token_ticks), (2, 1));
    }

    #[test]
    fn other_intervals_round_up_to_eighths() {
        // 1e6/11 µs = 90909.09..., in eighths 727272.7 -> 727273.
        let eleven = ok(1, 11, SECOND);
        assert!(!eleven.exact);
        assert_eq!(
            (
                eleven.ticks_per_micro,
                eleven.token_ticks,
                eleven.token_parts
            ),
            (8, 727_273, 1)
        );
        assert!(u128::from(eleven.token_ticks) * 11 >= 8 * 1_000_000);
        // 1000/11 µs = 90.9 µs: in eighths 727.27 -> 728, 0.1 % exactly: accepted.
        let s = ok(1, 11_000, SECOND);
        assert_eq!(
            (s.ticks_per_micro, s.token_ticks, s.token_parts),
            (8, 728, 1)
        );
        // 9 000/s = 111.1 µs, in eighths 888.9 -> 889: 0.0125 %, per token.
        assert_eq!(ok(1, 9_000, SECOND).token_parts, 1);
    }

    /// 64 MiB/s and 1 GiB/s: `P = 10^9 / (125 * 2^26)` and `/ 2^30` ticks
    /// of 1/8 µs a byte, dyadic fractions, so `T / D` holds them exactly
    /// and a full bucket refills in exactly one second.
    #[test]
    fn fast_irregular_rates_are_charged_per_request() {
        for (bytes, shift) in [(64u64 << 20, 17), (1 << 30, 21), (1 << 33, 24)] {
            let s = ok(bytes, bytes, SECOND);
            assert!(!s.exact);
            assert_eq!(s.ticks_per_micro, 8);
            assert_eq!(s.token_parts, 1 << 51);
            // P = 15625 / 2^shift exactly.
            assert_eq!(u128::from(s.token_ticks), 15_625u128 << (51 - shift));
            assert_eq!(s.tolerance, 8_000_000, "one second of ticks");
            assert_eq!(s.charge(bytes), s.tolerance);
            for k in [1, 2, 1500, 4096, bytes / 3, bytes - 1] {
                // Exact rational charge k * 15625 / 2^shift, rounded up.
                let exact = (u128::from(k) * 15_625).div_ceil(1 << shift);
                assert_eq!(u128::from(s.charge(k)), exact, "{bytes}/s, {k}");
            }
        }
        // Refused before, now charged per request: a nanosecond per token
        // (1e9/s), 1.001 µs (12 % slow in eighths), 110 000/s.
        for (tokens, period) in [
            (1, Duration::from_nanos(1)),
            (1, Duration::from_nanos(1001)),
            (110_000, SECOND),
            (3_000_000_007, SECOND),
        ] {
            let s = ok(1000, tokens, period);
            assert!(s.token_parts > 1, "{tokens} per {period:?}");
            assert!(s.token_ticks < 1 << 52 && s.token_parts <= 1 << 51);
        }
    }

    #[test]
    fn the_fastest_rates_charge_a_tick_per_request() {
        // 2^64 tokens a nanosecond: less than 2^-51 ticks a token, T = 0.
        let s = ok(1000, u64::MAX, Duration::from_nanos(1));
        assert_eq!((s.token_ticks, s.tolerance), (0, 1));
        assert_eq!((s.charge(1), s.charge(1000)), (1, 1));
        assert_eq!((s.fit(0), s.fit(1)), (0, 1000));
        // A whole give-back returns the whole charge, though charging none
        // of the tokens would still cost the tick: `c(0) = 1`.
        assert_eq!((s.owed(10, 10, 0), s.owed(10, 9, 0)), (1, 0));
        // The most a per-request quota holds: below 2^51 tokens.
        assert!(scale((1 << 51) - 1, 1 << 40, SECOND).is_ok());
        assert!(matches!(
            scale(1 << 51, 1 << 40, SECOND),
            Err(RedisStoreError::RefillTooLong { capacity }) if capacity == 1 << 51
        ));
    }

    #[test]
    fn the_range_lasts_thirty_years_or_the_quota_is_refused() {
        for &(capacity, tokens, period) in &[
            (1, 1, SECOND),
            (1_000_000, 7, SECOND),
            (1, 1, Duration::from_secs(86_400 * 365)),
            (1, 8_000_000, SECOND),
            (64 << 20, 64 << 20, SECOND),
            (1 << 40, 1 << 33, SECOND),
        ] {
            let s = ok(capacity, tokens, period);
            let range_micros = u128::from(s.last_tick / s.ticks_per_micro);
            assert!(
                range_micros >= MIN_RANGE_MICROS,
                "{capacity} {tokens} {period:?}"
            );
            let largest =
                u128::from(s.last_tick) + u128::from(s.tolerance) + u128::from(s.charge(1));
            assert_eq!(largest, u128::from(EXACT_LIMIT));
        }
        // At 7/s (ticks of 1/7 µs, T = 10^6), 2^53 ticks are 40.8 years;
        // thirty of them leave 2 380 103 254.7 tokens of refill for `B + 1`.
        let largest = 2_380_103_253;
        assert!(scale(largest, 7, SECOND).is_ok());
        assert!(matches!(
            scale(largest + 1, 7, SECOND),
            Err(RedisStoreError::RefillTooLong { capacity }) if capacity == largest + 1
        ));
        // A day per token (whole microseconds: 2^53 ticks are 285 years):
        // up to about 255 years of full refill.
        assert!(scale(93_000, 1, Duration::from_secs(86_400)).is_ok());
        assert!(scale(94_000, 1, Duration::from_secs(86_400)).is_err());
        // Per request, at 110 000 a second: 2^53 eighths of a µs are 35.7
        // years, so a full bucket may take 5.7 of them to refill.
        let years = |n: u64| n * 365 * 86_400 * 110_000;
        assert!(scale(years(5), 110_000, SECOND).is_ok());
        assert!(matches!(
            scale(years(6), 110_000, SECOND),
            Err(RedisStoreError::RefillTooLong { .. })
        ));
    }

    #[test]
    fn extreme_quotas_are_errors_not_panics() {
        for &(capacity, tokens, period, accepted) in &[
            (u64::MAX, 1, SECOND, false),
            (u64::MAX, u64::MAX, Duration::from_nanos(u64::MAX), false),
            (1, u64::MAX, Duration::from_nanos(u64::MAX), true),
            (1, 1, Duration::from_nanos(u64::MAX), false),
            (1, u64::MAX, Duration::from_nanos(1), true),
            ((1 << 51) - 1, u64::MAX, Duration::from_nanos(1), true),
        ] {
            let Ok(quota) = Quota::new(capacity, tokens, period) else {
                continue;
            };
            assert_eq!(
                Scale::new(&quota).is_ok(),
                accepted,
                "{capacity} {tokens} {period:?}"
            );
        }
    }

    #[test]
    fn the_epoch_is_2025() {
        // 55 years of 365 days and 14 leap days (1972..=2024).
        assert_eq!(EPOCH_UNIX_SECS, (55 * 365 + 14) * 86_400);
        let s = ok(1, 1, SECOND);
        assert!(
            s.valid_until()
                > SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_UNIX_SECS + 30 * 365 * 86_400)
        );
    }

    /// Rates charged per request: byte rates, primes, sub-nanosecond
    /// tokens. `(tokens, period_ns)`, all `P` below 1000 ticks.
    fn fast_rate() -> impl Strategy<Value = (u64, u64)> {
        prop_oneof![
            Just((64 << 20, 1_000_000_000)),
            Just((1 << 30, 1_000_000_000)),
            Just((1 << 33, 1_000_000_000)),
            Just((3_000_000_007, 1_000_000_000)),
            Just((1, 1)),
            (110_000u64..1 << 40, 1_000_000_000u64..=1_000_000_000),
            (1u64..1 << 20, 1u64..1 << 20),
        ]
        .prop_filter("charged per request", |&(tokens, period)| {
            Interval::of(u128::from(period), 1000 * u128::from(tokens)).is_none()
        })
    }

    /// A per-request scale of `capacity` drawn against the rate.
    fn per_request() -> impl Strategy<Value = (Scale, u64, u64)> {
        (fast_rate(), 1u64..1 << 40).prop_filter_map("in range", |((tokens, period), capacity)| {
            let quota = Quota::new(capacity, tokens, Duration::from_nanos(period)).ok()?;
            let scale = Scale::new(&quota).ok()?;
            Some((scale, tokens, period))
        })
    }

    proptest! {
        /// Every charge is at least the exact refill of its tokens plus the
        /// tolerance's own rounding `L - B * P` (what keeps the envelope),
        /// less than three ticks above the exact refill (the bound
        /// `docs/semantics.md` states), and within what the scripts' sanity
        /// check allows: `L <= ceil(B * T / D) + 1`.
        #[test]
        fn per_request_charges_stay_within_three_ticks_above_the_exact_cost(
            (s, tokens, period) in per_request(),
            picks in proptest::collection::vec(any::<u64>(), 8),
        ) {
            // In units of 1 / (125 * tokens) tick: P is `period` of them.
            let unit = 125 * u128::from(tokens);
            let (b, period) = (u128::from(s.capacity), u128::from(period));
            let delta = u128::from(s.tolerance) * unit - b * period;
            prop_assert!(delta < unit);
            let base = (b * u128::from(s.token_ticks)).div_ceil(u128::from(s.token_parts));
            prop_assert!(u128::from(s.tolerance) <= base + 1);
            prop_assert!(s.token_ticks < 1 << 52 && s.token_parts <= 1 << 51);
            for k in picks.iter().map(|p| 1 + p % s.capacity).chain([1, s.capacity]) {
                let charged = u128::from(s.charge(k)) * unit;
                let exact = u128::from(k) * period;
                prop_assert!(charged >= exact + delta, "k {}", k);
                prop_assert!(charged < exact + 3 * unit, "k {}", k);
                // `fit` is the largest count whose charge fits (below a
                // tick a token, several counts share one charge).
                let fits = s.fit(s.charge(k));
                prop_assert!(fits >= k && s.charge(fits) == s.charge(k));
                prop_assert!(fits == s.capacity || s.charge(fits + 1) > s.charge(k));
                prop_assert!(s.fit(s.charge(k) - 1) < k);
            }
            prop_assert_eq!(s.charge(s.capacity), s.tolerance);
        }

        /// The rational model fed the store's own decisions never finds it
        /// granting what an exact bucket could not afford. Each step waits
        /// some ticks, then asks for some tokens and takes what `fit`
        /// grants, as the acquire script does.
        #[test]
        fn per_request_grants_never_exceed_the_rational_model(
            (s, tokens, period) in per_request(),
            steps in proptest::collection::vec((any::<u64>(), any::<u64>()), 1..60),
        ) {
            let unit = 125 * u128::from(tokens);
            let p = u128::from(period);
            let full = u128::from(s.capacity) * p;
            // The store's state in ticks, the model's in units.
            let (mut now, mut tat, mut model) = (1u64 << 20, 0u64, 0u128);
            for (wait, pick) in steps {
                now += wait % (s.tolerance / 2 + 2);
                let at = u128::from(now) * unit;
                let want = 1 + pick % s.capacity;
                let room = now + s.tolerance - tat.max(now);
                let granted = want.min(s.fit(room));
                if granted == 0 {
                    prop_assert!(room < s.charge(1));
                    continue;
                }
                tat = tat.max(now) + s.charge(granted);
                let after = model.max(at) + u128::from(granted) * p;
                prop_assert!(after <= at + full, "granted {} the model cannot afford", granted);
                model = after;
            }
        }

        /// A give-back returns the whole charge for a whole return held no
        /// time, never more than the charge less the time held, and never
        /// more than the unused tokens refill in, plus a tick.
        #[test]
        fn give_backs_follow_the_charges(
            (s, tokens, period) in per_request(),
            picks in (any::<u64>(), any::<u64>(), 0u64..1000),
        ) {
            let (pick_granted, pick_unused, held) = picks;
            let granted = 1 + pick_granted % s.capacity;
            let unused = 1 + pick_unused % granted;
            prop_assert_eq!(s.owed(granted, granted, 0), s.charge(granted));
            let owed = s.owed(granted, unused, held);
            prop_assert!(owed <= s.charge(granted).saturating_sub(held));
            // Short of the whole grant, never more than the unused tokens
            // refill in plus a tick (the whole grant gives back its charge).
            let unit = 125 * u128::from(tokens);
            if unused < granted {
                prop_assert!(u128::from(owed) * unit < u128::from(unused) * u128::from(period) + unit);
            }
        }
    }
}
