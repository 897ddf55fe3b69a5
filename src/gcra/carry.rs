//! Carrying a state across a change of quota: the continuity rule of
//! [`docs/semantics.md`](crate::guide::semantics), "Changing a quota", for
//! every in-process limiter, and the same rule the Redis script applies
//! (`shared/redis/lua.rs`, `convert`).
//!
//! A child of `gcra` because the rule is the quotas' arithmetic: it reads
//! both quotas' tick units, tolerances and charges.

use super::{Gcra, LAST};

impl Gcra {
    // The limiters' `set_quota` call it; until they land, only the tests do.
    #[allow(dead_code)]
    /// The state, in `to`'s ticks, that continues `tat` (a state in this
    /// quota's ticks) under `to` from the change instant `nanos`
    /// (nanoseconds since the timeline's origin).
    ///
    /// - No debt (`tat <= now + L`): the whole tokens available at the
    ///   change ([`Gcra::available`], so the fraction of the next token is
    ///   dropped) carry over, clipped to `to`'s capacity `B'`; the new state
    ///   is that of a full bucket from which the missing `B' - carried`
    ///   tokens were just admitted, charged by `to`'s own rule (rounded
    ///   towards less credit for a quota charged per request).
    /// - Debt (`tat > now + L`, reservations promised beyond what is
    ///   available): the instant the debt is paid, `tat - L`, is kept,
    ///   rounded up to `to`'s tick, and the new state is that instant plus
    ///   `L'`. Every promised start time stays valid.
    ///
    /// So the result never holds more tokens at the change than the state
    /// did, nor more than `B'`; changing back and forth never gains (the
    /// carried tokens can only shrink, and a debt's instant only moves
    /// later). Saturates at the end of the range (at [`LAST`]), where the
    /// bucket only denies; never panics.
    pub(crate) fn carry(&self, tat: u64, nanos: u64, to: &Gcra) -> u64 {
        let now = self.ticks(nanos);
        match tat.checked_sub(self.tolerance) {
            Some(paid) if paid > now => {
                let paid = rescale_up(paid, self.ticks_per_nano, to.ticks_per_nano);
                paid.saturating_add(to.tolerance).min(LAST)
            }
            _ => {
                let carried = self.available(tat, now).min(to.capacity);
                let missing = to.capacity - carried;
                // A full bucket is any state at or before now. Charging
                // nothing through `charge` would not do: per request, it is
                // the capacity's rounding, a tick or two short of full.
                let debt = if missing == 0 { 0 } else { to.charge(missing) };
                to.ticks(nanos).saturating_add(debt).min(LAST)
            }
        }
    }
}

/// `ticks` of `1/from` ns as ticks of `1/to` ns, rounded up (a later
/// instant: less credit), saturating at the end of the range.
fn rescale_up(ticks: u64, from: u64, to: u64) -> u64 {
    if from == to {
        return ticks;
    }
    let scaled = (u128::from(ticks) * u128::from(to)).div_ceil(u128::from(from));
    u64::try_from(scaled).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use num_rational::Ratio;
    use proptest::prelude::*;

    use super::*;
    use crate::gcra::FULL;

    fn gcra(capacity: u64, tokens: u64, period: Duration) -> Gcra {
        Gcra::new(capacity, tokens, period).unwrap()
    }

    /// An instant in nanoseconds from ticks of `1/d` ns, exactly.
    fn nanos_of(ticks: u64, d: u64) -> Ratio<i128> {
        Ratio::new(i128::from(ticks), i128::from(d))
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn whole_tokens_carry_over_and_the_fraction_is_dropped() {
        // 10 per second, 4.5 tokens missing at the change: 5 carry over.
        let old = gcra(10, 10, SECOND);
        let new = gcra(20, 20, SECOND);
        let nanos = 5_000_000_000;
        let tat = old.ticks(nanos) + 450_000_000;
        let carried = old.carry(tat, nanos, &new);
        assert_eq!(new.available(carried, new.ticks(nanos)), 5);
        // The new quota refills from there at its own rate: 15 missing.
        assert_eq!(carried, nanos + 15 * 50_000_000);
    }

    #[test]
    fn tokens_are_clipped_to_the_new_capacity() {
        let old = gcra(100, 100, SECOND);
        let new = gcra(3, 1, SECOND);
        let carried = old.carry(FULL, 7, &new);
        assert_eq!(new.available(carried, new.ticks(7)), 3);
    }

    #[test]
    fn a_debt_keeps_the_instant_it_is_paid_in_the_new_ticks() {
        // 3 per second (ticks of 1/3 ns), 2 tokens reserved beyond an empty
        // bucket of 3 at nanos 0: paid at 2/3 s.
        let old = gcra(3, 3, SECOND);
        let tat = old.tolerance + 2 * old.interval;
        let new = gcra(7, 7, SECOND);
        let carried = old.carry(tat, 0, &new);
        // 2/3 s is 4_666_666_666.67 sevenths of a nanosecond: rounded up.
        assert_eq!(carried - new.tolerance, 4_666_666_667);
        assert_eq!(new.available(carried, 0), 0);
    }

    #[test]
    fn a_change_to_a_per_request_quota_never_carries_more() {
        let old = gcra(1_000_000, 1_000_000, SECOND);
        let new = gcra(64 << 20, 3_000_000_007, SECOND);
        let nanos = 1 << 40;
        for missing in [0, 1, 999, 500_000, 1_000_000] {
            let tat = old.ticks(nanos) + missing * old.interval;
            let before = old.available(tat, old.ticks(nanos));
            let carried = old.carry(tat, nanos, &new);
            let after = new.available(carried, new.ticks(nanos));
            assert!(after <= before, "{missing}: {after} > {before}");
            // The charge of the missing tokens rounds against a token at
            // most, so all but one carry over.
            assert!(after + 1 >= before, "{missing}: {after} << {before}");
        }
    }

    #[test]
    fn a_full_bucket_stays_full_when_the_capacity_shrinks() {
        for new in [
            gcra(5, 5, SECOND),
            gcra(5, 7, SECOND),
            gcra(5, 11, SECOND),
            gcra(64 << 20, 64 << 20, SECOND),
        ] {
            let carried = gcra(1 << 30, 9, SECOND).carry(FULL, 1000, &new);
            assert_eq!(
                new.available(carried, new.ticks(1000)),
                new.capacity,
                "{new:?}"
            );
        }
    }

    #[test]
    fn the_end_of_the_range_saturates_below_the_seal() {
        let old = gcra(3, 3, SECOND);
        let new = gcra(8, 8, Duration::from_nanos(1));
        // A debt paid past the new range, and a change at the last instant.
        assert_eq!(old.carry(LAST, 5, &new), LAST);
        assert_eq!(old.carry(LAST, u64::MAX, &new), LAST);
        assert_eq!(old.carry(FULL, u64::MAX, &new), LAST);
        assert_eq!(new.available(LAST, new.ticks(u64::MAX)), 0);
    }

    /// A quota of every kind: whole nanoseconds per token, a tick of `1/d`
    /// ns (`d` up to 8), rounded up per token, charged per request.
    fn quota() -> impl Strategy<Value = Gcra> {
        let capacity = prop_oneof![1..20u64, 1..5000u64, Just(1 << 30)];
        let rate = prop_oneof![
            (1..20u64, 1..5u64).prop_map(|(n, s)| (n, Duration::from_secs(s))),
            (1..1000u64).prop_map(|n| (n, Duration::from_millis(7))),
            (1u64..9).prop_map(|n| (n, Duration::from_nanos(1))),
            Just((64 << 20, SECOND)),
            Just((3_000_000_007, SECOND)),
        ];
        (capacity, rate).prop_filter_map("the quota fits the range", |(b, (n, period))| {
            Gcra::new(b, n, period).ok()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The rule against its statement in exact rationals, away from the
        /// end of the range.
        #[test]
        fn carry_follows_the_rule(
            old in quota(),
            new in quota(),
            nanos in 0..(1u64 << 50),
            // The state relative to now: full, partly refilled, in debt.
            offset in prop_oneof![
                Just(0.0f64), 0.0f64..1.0, 1.0f64..3.0, Just(1.0f64)
            ],
        ) {
            let now = old.ticks(nanos);
            let tat = now.saturating_add((old.tolerance as f64 * offset) as u64).min(LAST);
            let before = old.available(tat, now);
            if old.shift == 0 {
                // Whole tokens refilled: (now + B·T - max(tat, now)) / T.
                let credit = Ratio::new(
                    i128::from(now) + i128::from(old.tolerance) - i128::from(tat.max(now)),
                    i128::from(old.interval),
                );
                prop_assert_eq!(i128::from(before), credit.floor().to_integer().max(0));
            }
            let carried = old.carry(tat, nanos, &new);
            // The end of the range is the other property's.
            prop_assume!(carried < LAST);
            let new_now = new.ticks(nanos);
            let after = new.available(carried, new_now);
            prop_assert!(after <= before.min(new.capacity));
            if tat <= now + old.tolerance {
                if new.shift == 0 {
                    // Charged per token (exact or rounded up per token):
                    // exactly the whole tokens, clipped.
                    prop_assert_eq!(after, before.min(new.capacity));
                }
            } else {
                // The instant the debt is paid, in nanoseconds, is kept to
                // within one new tick, never earlier.
                let paid = nanos_of(tat - old.tolerance, old.ticks_per_nano);
                let kept = nanos_of(carried - new.tolerance, new.ticks_per_nano);
                prop_assert!(kept >= paid);
                prop_assert!(kept - paid < nanos_of(1, new.ticks_per_nano));
                prop_assert_eq!(after, 0);
            }
            // Back again: never a token more, at the change or after it
            // (the state is no earlier than the original's effective one).
            let back = new.carry(carried, nanos, &old);
            prop_assert!(back >= tat.max(now), "back {back} < {}", tat.max(now));
            prop_assert!(old.available(back, now) <= before);
        }

        /// Never a panic and never the seal, anywhere in the range.
        #[test]
        fn carry_saturates_without_panicking(
            old in quota(),
            new in quota(),
            tat in prop_oneof![any::<u64>().prop_map(|t| t.min(LAST)), Just(LAST)],
            nanos in prop_oneof![any::<u64>(), Just(u64::MAX)],
        ) {
            let carried = old.carry(tat, nanos, &new);
            prop_assert!(carried <= LAST);
            let before = old.available(tat, old.ticks(nanos));
            prop_assert!(new.available(carried, new.ticks(nanos)) <= before.min(new.capacity));
        }
    }
}
