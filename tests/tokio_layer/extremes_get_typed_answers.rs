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

use common::{Envelope, RefusedBy, admitted_at_first_poll};
use tollgate::concurrency::{ConcurrencyLimiter, KeyedConcurrencyLimiter, LimitError};
use tollgate::{
    AcquireError, Clock, Counted, FixedWindow, InitialCredit, KeyedFixedWindow, KeyedLimiter,
    KeyedSlidingWindow, Limit, ManualClock, Pacer, Quota, QuotaError, Receipt, SlidingWindow,
    StripedBucket, TokenBucket, WindowQuota, try_acquire_all,
};
use tollgate_test_support::common;

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

/// Sizes and counts of `usize`: 1, 2 and `usize::MAX`.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![Just(1), Just(2), Just(usize::MAX)]
}

proptest! {
    #![proptest_config(config())]

    /// A pacer of any rate and wait is built exactly when its rate makes a
    /// quota of one token, and then answers: the first start at once, and
    /// as many starts queued at one instant as `max_queue` says (fewer only
    /// where the interval is rounded up or the queue would reach the end of
    /// the bucket's range), `max_queue` saturating rather than overflowing.
    #[test]
    fn pacers_of_extreme_values_are_built_or_refused(
        starts in number(), period in duration(), max_wait in duration(), late in duration(),
    ) {
        let clock = ManualClock::new();
        let quota = Quota::new(1, starts, period);
        match Pacer::with_clock(starts, period, max_wait, clock.clone()) {
            Ok(pacer) => {
                let quota = quota.unwrap();
                prop_assert_eq!(pacer.rate(), quota.refill());
                prop_assert_eq!(pacer.max_wait(), max_wait);
                let most = pacer.max_queue();
                prop_assert!(most >= 1);
                let queued = (0..64).take_while(|_| pacer.reserve().is_ok()).count() as u64;
                prop_assert!(queued >= 1 && queued <= most, "{queued} queued of {most}");
                // Exact but for the end of the bucket's range, where a
                // reservation past it is refused (fails closed).
                if most < 64 && quota.is_exact() && max_wait.as_nanos() < 1 << 62 {
                    prop_assert_eq!(queued, most);
                }
                clock.set(late);
                let _ = pacer.reserve();
            }
            Err(error) => prop_assert_eq!(quota, Err(error)),
        }
    }

    /// A window quota of any limit and window is valid or a typed error,
    /// with any offset; a counter on it is built or refused with
    /// `LimitTooLarge`, keyed or not alike, and answers every cost and
    /// wait with a decision or a typed error, at creation and late.
    #[test]
    fn window_counters_of_extreme_values_are_built_or_refused(
        limit in number(), window in duration(), offset in duration(),
        cost in number(), max_wait in duration(), late in duration(),
    ) {
        let quota = WindowQuota::new(limit, window);
        let invalid = limit == 0 || window.is_zero() || window.as_nanos() > u128::from(u64::MAX);
        prop_assert_eq!(quota.is_err(), invalid);
        let Ok(quota) = quota else { return Ok(()) };
        let quota = quota.with_offset(offset);
        prop_assert_eq!((quota.limit(), quota.window()), (limit, window));
        let clock = ManualClock::new();
        let fixed = FixedWindow::with_clock(quota, clock.clone());
        let keyed_fixed = KeyedFixedWindow::builder(quota).clock(clock.clone()).build_fixed::<u64>();
        prop_assert_eq!(fixed.as_ref().err(), keyed_fixed.as_ref().err());
        let sliding = SlidingWindow::with_clock(quota.calendar(), clock.clone());
        let keyed_sliding =
            KeyedSlidingWindow::builder(quota.calendar()).clock(clock.clone()).build_sliding::<u64>();
        prop_assert_eq!(sliding.as_ref().err(), keyed_sliding.as_ref().err());
        for error in [fixed.as_ref().err(), sliding.as_ref().err()].into_iter().flatten() {
            let too_large = matches!(error, QuotaError::LimitTooLarge { limit: l, .. } if *l == limit);
            prop_assert!(too_large, "{:?}", error);
        }
        let mut limits: Vec<Box<dyn Limit + '_>> = Vec::new();
        if let (Ok(fixed), Ok(keyed)) = (&fixed, &keyed_fixed) {
            limits.push(Box::new(fixed));
            limits.push(Box::new(keyed.key(&cost)));
        }
        if let (Ok(sliding), Ok(keyed)) = (&sliding, &keyed_sliding) {
            limits.push(Box::new(sliding));
            limits.push(Box::new(keyed.key(&cost)));
        }
        for limit_of in &limits {
            let first = limit_of.try_acquire(cost);
            match cost {
                0 => prop_assert_eq!(first, Err(AcquireError::ZeroCost)),
                c if c > limit => prop_assert_eq!(
                    first,
                    Err(AcquireError::ExceedsCapacity { cost, capacity: limit })
                ),
                _ => prop_assert_eq!(first, Ok(())),
            }
            prop_assert!(limit_of.available() <= limit);
            let _ = limit_of.reserve(cost, max_wait);
            let _ = limit_of.retry_after(cost);
        }
        clock.set(late);
        for limit_of in &limits {
            let _ = limit_of.try_acquire(cost);
            let _ = limit_of.reserve(cost, max_wait);
            prop_assert!(limit_of.available() <= limit);
        }
    }

    /// A keyed limiter takes any key cap, key-size bound and sweep
    /// interval, reports them as given, and decides every cost on a new
    /// key with its quota's outcome, whether the key is kept exactly or as
    /// a fingerprint.
    #[test]
    fn keyed_limiters_take_any_bound(
        max_keys in size(), exact_bytes in prop_oneof![Just(0usize), size()],
        sweep in prop_oneof![Just(None), duration().prop_map(Some)], cost in number(),
    ) {
        let clock = ManualClock::new();
        let limiter = KeyedLimiter::builder(Quota::per_second(5).unwrap())
            .clock(clock.clone())
            .max_keys(max_keys.try_into().unwrap())
            .max_exact_key_bytes(exact_bytes)
            .sweep_interval(sweep)
            .build::<String>();
        prop_assert_eq!((limiter.max_keys(), limiter.max_exact_key_bytes()), (max_keys, exact_bytes));
        let outcome = TokenBucket::with_clock(Quota::per_second(5).unwrap(), clock.clone()).try_acquire(cost);
        prop_assert_eq!(limiter.try_acquire("a key", cost), outcome);
        let another = limiter.key("another").reserve(cost, Duration::MAX).map(drop);
        if max_keys == 1 && outcome.is_ok() {
            prop_assert_eq!(another, Err(AcquireError::TooManyKeys { max_keys: 1 }));
        } else {
            prop_assert_eq!(another, outcome);
        }
        prop_assert!(limiter.len() <= max_keys);
        clock.advance(Duration::MAX);
        limiter.sweep();
    }

    /// A keyed concurrency limiter takes any key cap, refuses a zero limit
    /// as the unkeyed one does, and answers every weight.
    #[test]
    fn keyed_concurrency_limiters_take_any_cap(max in number(), max_keys in size(), weight in number()) {
        let keyed = KeyedConcurrencyLimiter::<u64>::with_max_keys(max, max_keys.try_into().unwrap());
        let single = ConcurrencyLimiter::new(max);
        prop_assert_eq!(keyed.as_ref().err(), single.as_ref().err());
        if max == 0 {
            prop_assert_eq!(single.err(), Some(LimitError::ZeroLimit));
            return Ok(());
        }
        let (keyed, single) = (keyed.unwrap(), single.unwrap());
        let permit = keyed.try_acquire(&weight, weight);
        prop_assert_eq!(permit.is_ok(), single.try_acquire(weight).is_ok());
        if let Ok(permit) = permit {
            prop_assert_eq!(keyed.in_flight(&weight), permit.weight());
        }
        prop_assert_eq!(keyed.in_flight(&weight), 0);
    }
}

/// A chain whose costs on one limit sum past `u64::MAX` exceeds every
/// capacity, the largest included, rather than wrapping round to a cost
/// that fits.
#[test]
fn a_chain_whose_costs_sum_past_u64_max_exceeds_every_capacity() {
    let largest = Quota::new(u64::MAX, u64::MAX, Duration::from_secs(1)).unwrap();
    let bucket = TokenBucket::with_clock(largest, ManualClock::new());
    for tail in [1, u64::MAX] {
        let refused = try_acquire_all(&[bucket.cost(u64::MAX), bucket.cost(tail)]).refused_by();
        assert_eq!(
            refused.error,
            AcquireError::ExceedsCapacity {
                cost: u64::MAX,
                capacity: u64::MAX
            }
        );
    }
    assert_eq!(bucket.available(), u64::MAX);
}

/// A keyed allowance takes any demand thresholds with a gap between them,
/// any sampling interval but zero, and any bound on keys, bytes and hot
/// keys, zero and `usize::MAX` included, and answers every cost from its
/// store: the configurations without a gap or with a zero interval are
/// the typed errors.
#[tokio::test(start_paused = true)]
async fn keyed_allowances_of_extreme_configurations_are_built_or_refused() {
    use tollgate::shared::{
        AllowanceError, BudgetError, FailurePolicy, KeyedAllowance, KeyedAllowanceConfig,
        LocalStore,
    };

    let store = Arc::new(LocalStore::new(Quota::per_second(10).unwrap()));
    let base = KeyedAllowanceConfig::new(FailurePolicy::Closed);
    for bound in [0, 1, usize::MAX] {
        for (cold_below, hot_at) in [(0, 1), (0, u32::MAX), (u32::MAX - 1, u32::MAX)] {
            for wait in [Duration::from_nanos(1), Duration::MAX] {
                let config = KeyedAllowanceConfig {
                    hot_at,
                    cold_below,
                    sample_every: wait,
                    forget_after: wait,
                    // A key bound of zero is no bound: `MaxKeysError`.
                    max_keys: tollgate::MaxKeys::new(bound.max(1)).unwrap(),
                    max_bytes: bound,
                    max_hot_keys: bound,
                    ..base
                };
                let store = Arc::new(LocalStore::new(Quota::per_second(10).unwrap()));
                let node = KeyedAllowance::new(store, config).unwrap();
                assert_eq!(node.try_acquire("k", 0), Err(AcquireError::ZeroCost.into()));
                let far = node.acquire("far", u64::MAX, Duration::MAX).await;
                assert!(
                    matches!(
                        far,
                        Err(BudgetError::Limit(AcquireError::ExceedsCapacity { .. }))
                    ),
                    "{far:?}"
                );
                assert!(node.acquire("k", 1, Duration::ZERO).await.is_ok());
            }
        }
    }
    for (cold_below, hot_at) in [(0, 0), (1, 1), (u32::MAX, u32::MAX), (u32::MAX, 0)] {
        let config = KeyedAllowanceConfig {
            hot_at,
            cold_below,
            ..base
        };
        let refused = KeyedAllowance::new(Arc::clone(&store), config).err();
        assert_eq!(refused, Some(AllowanceError::DemandThresholds));
    }
    let never = KeyedAllowanceConfig {
        sample_every: Duration::ZERO,
        ..base
    };
    let refused = KeyedAllowance::new(store, never).err();
    assert_eq!(refused, Some(AllowanceError::ZeroSampleInterval));
}
