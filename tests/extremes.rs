//! The public API driven with extreme values: costs, counts and weights of
//! 0, 1 and `u64::MAX`, waits of `Duration::MAX`, clocks at the end of
//! their range and set back. Every call answers (a value or a typed error),
//! none panics, and no sequence of them admits more than the envelope of the
//! quota since the last trusted refund or reset.
//!
//! The shared budgets (`LocalAllowance`, the stores) have their own extreme
//! value tests beside the rest of their tests.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

mod common;
use common::{Envelope, admitted_at_first_poll};
use tollgate::concurrency::ConcurrencyLimiter;
use tollgate::{
    Clock, Counted, InitialCredit, KeyedLimiter, Limit, ManualClock, Quota, QuotaError, Receipt,
    StripedBucket, TokenBucket, try_acquire_all,
};

fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(2),
        Just(u64::MAX / 2),
        Just(u64::MAX - 1),
        Just(u64::MAX),
        1u64..100,
    ]
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::from_nanos(u64::MAX)),
        Just(Duration::from_secs(u64::MAX)),
        Just(Duration::MAX),
        (0u64..5_000_000_000).prop_map(Duration::from_nanos),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Acquire(u64),
    Reserve(u64, Duration),
    RetryAfter(u64),
    Take(u64, bool),
    Wait(u64, Duration),
    Refund(u64),
    Reset,
    Chain(u64, u64),
    Keyed(u64, u64),
    KeyedReserve(u64, u64, Duration),
    Sweep,
    InFlight(u64, u64),
    Advance(Duration),
    Set(Duration),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        number().prop_map(Op::Acquire),
        (number(), duration()).prop_map(|(c, d)| Op::Reserve(c, d)),
        number().prop_map(Op::RetryAfter),
        (number(), any::<bool>()).prop_map(|(c, undo)| Op::Take(c, undo)),
        (number(), duration()).prop_map(|(c, d)| Op::Wait(c, d)),
        number().prop_map(Op::Refund),
        Just(Op::Reset),
        (number(), number()).prop_map(|(a, b)| Op::Chain(a, b)),
        (number(), number()).prop_map(|(k, c)| Op::Keyed(k, c)),
        (number(), number(), duration()).prop_map(|(k, c, d)| Op::KeyedReserve(k, c, d)),
        Just(Op::Sweep),
        (number(), number()).prop_map(|(w, s)| Op::InFlight(w, s)),
        duration().prop_map(Op::Advance),
        duration().prop_map(Op::Set),
    ]
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Any quota built from extreme values is valid or a typed error; its
    /// envelope saturates instead of overflowing, and a bucket on it
    /// answers every call: its whole capacity at once from full, then
    /// refusals with a wait, at creation and at the end of its range.
    #[test]
    fn quotas_of_extreme_values_are_built_or_refused(
        capacity in number(), tokens in number(), period in duration(), elapsed in duration(),
        late in duration(),
    ) {
        if let Ok(quota) = Quota::new(capacity, tokens, period) {
            prop_assert!(quota.envelope(elapsed) >= quota.capacity());
            let credit = quota.with_initial_credit(InitialCredit::Tokens(tokens));
            prop_assert_eq!(credit.is_ok(), tokens <= capacity);
            let clock = ManualClock::new();
            let bucket = TokenBucket::with_clock(quota, clock.clone());
            prop_assert_eq!(bucket.available(), capacity);
            prop_assert_eq!(bucket.try_acquire(capacity), Ok(()));
            prop_assert_eq!(bucket.available(), 0);
            prop_assert!(bucket.try_acquire(1).unwrap_err().retry_after().is_some());
            // Behind a whole capacity, never sooner than it refills.
            let wait = bucket.reserve(capacity, Duration::MAX).unwrap();
            let refill = u128::from(capacity) * period.as_nanos();
            prop_assert!(wait.as_nanos() * u128::from(tokens) >= refill);
            prop_assert!(bucket.retry_after(capacity).unwrap() >= wait);
            clock.set(late);
            prop_assert!(bucket.available() <= capacity);
            if let Ok(receipt) = Receipt::take(&bucket, capacity) {
                receipt.undo();
            }
            bucket.refund(u64::MAX);
            prop_assert!(bucket.available() <= capacity);
            bucket.reset();
            prop_assert!(bucket.try_acquire(u64::MAX).is_err() || capacity == u64::MAX);
        }
        match Quota::per_second(tokens) {
            Ok(quota) => prop_assert_eq!(quota.capacity(), tokens),
            Err(error) => prop_assert_eq!(tokens == 0, error == QuotaError::ZeroCapacity),
        }
    }

    /// Every entry point, fed extreme values in any order: no panic, and
    /// the bucket admits within its envelope since its last refund or reset.
    #[test]
    fn the_api_survives_extreme_values_without_minting(
        capacity in 1u64..5,
        // One a second; and bytes, charged per request.
        tokens in prop_oneof![Just(1), Just(64 << 20), Just(1 << 33)],
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let clock = ManualClock::new();
        let quota = Quota::new(capacity, tokens, Duration::from_secs(1)).unwrap();
        let bucket = TokenBucket::with_clock(quota, clock.clone());
        let counted = Counted::new(TokenBucket::with_clock(quota, clock.clone()));
        let keyed = KeyedLimiter::builder(quota)
            .clock(clock.clone())
            .max_keys(4.try_into().unwrap())
            .build::<u64>();
        let in_flight = Arc::new(ConcurrencyLimiter::new(capacity).unwrap());
        // Kept admissions since the last trusted refund or reset, at their
        // readings (due times for reservations).
        let mut since: Vec<(u64, u64)> = Vec::new();
        let now = |clock: &ManualClock| clock.now_nanos();
        for op in ops {
            match op {
                Op::Acquire(cost) => {
                    if bucket.try_acquire(cost).is_ok() {
                        since.push((now(&clock), cost));
                    }
                    let _ = counted.try_acquire(cost);
                }
                Op::Reserve(cost, max_wait) => {
                    if let Ok(wait) = bucket.reserve(cost, max_wait) {
                        let due = now(&clock).saturating_add(wait.as_nanos() as u64);
                        since.push((due, cost));
                    }
                    let _ = counted.reserve(cost, max_wait);
                }
                Op::RetryAfter(cost) => {
                    let _ = bucket.retry_after(cost);
                    let _ = keyed.retry_after(&cost, cost);
                }
                Op::Take(cost, undo) => {
                    if let Ok(receipt) = Receipt::take(&bucket, cost) {
                        if undo {
                            receipt.undo();
                        } else {
                            since.push((now(&clock), cost));
                            receipt.keep();
                        }
                    }
                }
                Op::Wait(cost, max_wait) => {
                    if admitted_at_first_poll(bucket.acquire(cost, max_wait)) {
                        since.push((now(&clock), cost));
                    }
                    let _ = admitted_at_first_poll(in_flight.acquire(cost, max_wait));
                }
                Op::Refund(cost) => {
                    bucket.refund(cost);
                    keyed.refund(&cost, cost);
                    since.clear();
                }
                Op::Reset => {
                    bucket.reset();
                    since.clear();
                }
                Op::Chain(first, second) => {
                    let key = keyed.key(&first);
                    if try_acquire_all(&[key.cost(first), bucket.cost(second)]).is_ok() {
                        since.push((now(&clock), second));
                    }
                }
                Op::Keyed(key, cost) => {
                    let _ = keyed.try_acquire(&key, cost);
                    let _ = keyed.available(&key);
                }
                Op::KeyedReserve(key, cost, max_wait) => {
                    let _ = keyed.reserve(&key, cost, max_wait);
                    let _ = admitted_at_first_poll(keyed.acquire(&key, cost, max_wait));
                }
                Op::Sweep => {
                    keyed.sweep();
                }
                Op::InFlight(weight, split) => {
                    if let Ok(mut permit) = in_flight.try_acquire_owned(weight) {
                        let part = permit.split(split);
                        prop_assert!(in_flight.in_flight() <= capacity);
                        drop(part);
                    }
                    prop_assert_eq!(in_flight.in_flight(), 0);
                }
                Op::Advance(by) => clock.advance(by),
                // A clock set back shows less credit, never more: the
                // window is measured over the readings seen.
                Op::Set(to) => clock.set(to),
            }
            prop_assert!(bucket.available() <= capacity);
        }
        let envelope = Envelope { capacity, tokens, period_ns: 1_000_000_000 };
        envelope.assert_holds_over(&since, 1);
    }

    /// A striped bucket on rates charged per request (a request's charge is
    /// not its tokens times a per-token interval): its pools lease, spend,
    /// expire and give back by the charges, so the envelope holds over the
    /// readings and, at every reading, the bucket's credit and the pooled
    /// tokens together stay within the capacity.
    #[test]
    fn a_striped_bucket_charged_per_request_stays_within_its_envelope(
        capacity in prop_oneof![1u64..=8, Just(1500u64), Just(1u64 << 20)],
        tokens in prop_oneof![Just(64u64 << 20), Just(1 << 33), Just(3_000_000_007)],
        lease in 1u64..=64,
        ops in prop::collection::vec((0u64..=80, 0u64..=2_000, any::<bool>()), 1..60),
    ) {
        let clock = ManualClock::new();
        let quota = Quota::new(capacity, tokens, Duration::from_secs(1)).unwrap();
        let striped = StripedBucket::with_clock(quota, clock.clone(), 1, lease.min(capacity));
        let mut admitted = Vec::new();
        for (share, gap_ns, flush) in ops {
            clock.advance(Duration::from_nanos(gap_ns));
            let cost = (capacity * share / 64).max(1);
            if striped.try_acquire(cost).is_ok() {
                admitted.push((clock.now_nanos(), cost));
            }
            if flush {
                striped.flush();
            }
            prop_assert!(striped.bucket().available() + striped.pooled() <= capacity);
        }
        let envelope = Envelope { capacity, tokens, period_ns: 1_000_000_000 };
        envelope.assert_holds_over(&admitted, 0);
    }
}
