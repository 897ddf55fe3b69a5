//! All-or-nothing admission through several limits.

#[cfg(feature = "keyed")]
use std::sync::Barrier;
#[cfg(feature = "keyed")]
use std::thread;
use std::time::Duration;

use proptest::prelude::*;
#[cfg(feature = "keyed")]
use tollgate::KeyedLimiter;
use tollgate::{
    AcquireError, HierarchyError, Limit, ManualClock, Quota, TokenBucket, try_acquire_all,
};

use common::{ChainRefused, Envelope, RefusedBy};
use tollgate_test_support::common;

const SECOND: Duration = Duration::from_secs(1);

fn bucket(capacity: u64, per_second: u64, clock: &ManualClock) -> TokenBucket<ManualClock> {
    TokenBucket::with_clock(
        Quota::new(capacity, per_second, SECOND).unwrap(),
        clock.clone(),
    )
}

#[test]
fn a_refusal_leaves_every_earlier_limit_as_it_was() {
    let clock = ManualClock::new();
    let (address, account, global) = (
        bucket(5, 1, &clock),
        bucket(5, 1, &clock),
        bucket(1, 1, &clock),
    );
    try_acquire_all(&[address.cost(2), account.cost(3), global.cost(1)]).unwrap();
    let refused = try_acquire_all(&[address.cost(2), account.cost(1), global.cost(1)]);
    assert_eq!(
        refused,
        Err(HierarchyError::Refused {
            limit: 2,
            error: AcquireError::Insufficient {
                retry_after: SECOND
            }
        })
    );
    assert_eq!(
        (address.available(), account.available(), global.available()),
        (3, 2, 0)
    );
}

#[test]
fn the_refusal_carries_the_longest_wait_among_the_limits_that_refuse() {
    let clock = ManualClock::new();
    let (first, second, third) = (
        bucket(1, 1, &clock),
        bucket(1, 2, &clock),
        bucket(1, 1, &clock),
    );
    third.try_acquire(1).unwrap();
    second.try_acquire(1).unwrap();
    clock.advance(SECOND / 4);
    // `second` refuses first (0.25 s to go); `third`, never reached, would
    // refuse for 0.75 s. `first` passes and is undone.
    let refused = try_acquire_all(&[first.cost(1), second.cost(1), third.cost(1)]).refused_by();
    assert_eq!(refused.limit, 1);
    assert_eq!(refused.error.retry_after(), Some(SECOND * 3 / 4));
    assert_eq!(first.available(), 1);
}

#[test]
fn a_cost_one_limit_can_never_admit_is_reported_over_any_wait() {
    let clock = ManualClock::new();
    let (small, tiny) = (bucket(5, 1, &clock), bucket(2, 1, &clock));
    small.try_acquire(5).unwrap();
    let refused = try_acquire_all(&[small.cost(3), tiny.cost(3)]).refused_by();
    assert_eq!(
        refused,
        ChainRefused {
            limit: 1,
            error: AcquireError::ExceedsCapacity {
                cost: 3,
                capacity: 2
            }
        }
    );
    assert_eq!(
        try_acquire_all(&[small.cost(0)]).refused_by().error,
        AcquireError::ZeroCost
    );
}

#[cfg(feature = "keyed")]
#[test]
fn keyed_and_single_limits_mix_in_one_chain() {
    let clock = ManualClock::new();
    let per_address = KeyedLimiter::builder(Quota::per_second(2).unwrap())
        .clock(clock.clone())
        .build::<String>();
    let global = bucket(3, 3, &clock);
    for address in ["a", "a", "b"] {
        try_acquire_all(&[per_address.key(address).cost(1), global.cost(1)]).unwrap();
    }
    // "a" is refused by its own limit, before the global one is touched.
    let refused = try_acquire_all(&[per_address.key("a").cost(1), global.cost(1)]).refused_by();
    assert_eq!(refused.limit, 0);
    // "c" passes its own limit, the global one refuses, and "c" keeps its
    // credit: a refused request's cost counts nowhere.
    let refused = try_acquire_all(&[per_address.key("c").cost(1), global.cost(1)]).refused_by();
    assert_eq!(refused.limit, 1);
    assert_eq!(per_address.available("c"), 2);
}

#[test]
fn the_longest_wait_is_looked_at_once_the_taken_steps_are_undone() {
    let clock = ManualClock::new();
    let (a, b) = (bucket(3, 10, &clock), bucket(1, 20, &clock));
    a.try_acquire(1).unwrap();
    b.try_acquire(1).unwrap();
    // `b` refuses for 50 ms. `a` appears twice, charged 3 in all: its
    // first step is undone before the wait is read, so the wait is the
    // 100 ms `a` lacks for 3 tokens once this request holds nothing, not
    // the 200 ms it would lack while the first step still held a token.
    let refused = try_acquire_all(&[a.cost(1), b.cost(1), a.cost(2)]).refused_by();
    assert_eq!(refused.limit, 1);
    assert_eq!(refused.error.retry_after(), Some(SECOND / 10));
    assert_eq!(a.available(), 2);
    // When the first step refuses, the later ones are looked at too.
    let refused = try_acquire_all(&[a.cost(3), b.cost(1)]).refused_by();
    assert_eq!(refused.limit, 0);
    assert_eq!(refused.error.retry_after(), Some(SECOND / 10));
}

/// Steps naming one limit charge it their combined cost. A chain whose
/// combined cost on a limit exceeds its capacity can never be admitted, so
/// it is refused as exceeding it, not told to wait for a refill that can
/// never be enough.
#[test]
fn a_chain_charging_one_limit_beyond_its_capacity_exceeds_it() {
    let clock = ManualClock::new();
    let b = bucket(5, 5, &clock);
    for _ in 0..3 {
        assert_eq!(
            try_acquire_all(&[b.cost(3), b.cost(3)]),
            Err(HierarchyError::Refused {
                limit: 0,
                error: AcquireError::ExceedsCapacity {
                    cost: 6,
                    capacity: 5
                }
            })
        );
        clock.advance(SECOND);
    }
    assert_eq!(b.available(), 5);
    assert_eq!(try_acquire_all(&[b.cost(3), b.cost(2)]), Ok(()));
}

/// One limit reached through different handles is one limit: a bucket
/// bare, borrowed, shared, counted or striped; one key of a keyed limiter
/// through two of its views, or counted.
#[test]
fn one_limit_through_different_handles_is_charged_once_in_all() {
    use std::sync::Arc;
    use tollgate::{Counted, StripedBucket};

    let exceeds = |steps: &[tollgate::Step<'_>]| {
        matches!(
            try_acquire_all(steps),
            Err(HierarchyError::Refused {
                error: AcquireError::ExceedsCapacity {
                    cost: 6,
                    capacity: 5
                },
                ..
            })
        )
    };
    let clock = ManualClock::new();
    let shared = Arc::new(bucket(5, 5, &clock));
    let borrowed: &TokenBucket<ManualClock> = &shared;
    let counted = Counted::new(Arc::clone(&shared));
    assert!(exceeds(&[shared.cost(3), borrowed.cost(3)]));
    assert!(exceeds(&[counted.cost(3), shared.cost(3)]));
    assert!(exceeds(&[
        tollgate::Step::new(&borrowed, 3),
        counted.cost(3)
    ]));
    let striped = StripedBucket::with_clock(Quota::per_second(5).unwrap(), clock.clone(), 2, 2);
    assert!(exceeds(&[striped.cost(3), striped.bucket().cost(3)]));
    // Different limits of the same shape are not one.
    let other = bucket(5, 5, &clock);
    assert_eq!(try_acquire_all(&[shared.cost(3), other.cost(3)]), Ok(()));
}

#[cfg(feature = "keyed")]
#[test]
fn one_key_through_different_handles_is_charged_once_in_all() {
    use tollgate::{Counted, KeyedSlidingWindow, WindowQuota};

    let exceeds = |steps: &[tollgate::Step<'_>]| {
        matches!(
            try_acquire_all(steps),
            Err(HierarchyError::Refused {
                error: AcquireError::ExceedsCapacity {
                    cost: 6,
                    capacity: 5
                },
                ..
            })
        )
    };
    let clock = ManualClock::new();
    let per_account = Counted::new(
        KeyedLimiter::builder(Quota::per_second(5).unwrap())
            .clock(clock.clone())
            .build::<String>(),
    );
    let alice = "alice".to_owned();
    let (owned, borrowed) = (
        per_account.inner().key(&alice),
        per_account.inner().key("alice"),
    );
    assert!(exceeds(&[owned.cost(3), borrowed.cost(3)]));
    assert!(exceeds(&[
        per_account.key("alice").cost(3),
        borrowed.cost(3)
    ]));
    // Two keys of one limiter are two limits.
    let bob = per_account.inner().key("bob");
    assert_eq!(try_acquire_all(&[borrowed.cost(3), bob.cost(3)]), Ok(()));
    let per_user = KeyedSlidingWindow::builder(WindowQuota::per_second(5).unwrap())
        .clock(clock.clone())
        .build_sliding::<u32>()
        .unwrap();
    let (first, second) = (per_user.key(&7), per_user.key(&7));
    assert!(exceeds(&[first.cost(3), second.cost(3)]));
    assert_eq!(
        try_acquire_all(&[first.cost(3), per_user.key(&8).cost(3)]),
        Ok(())
    );
}

/// A refused chain's wait is the wait for what the whole chain charges
/// each limit: waited out, the chain passes. `b` holds 3 tokens and the
/// chain charges it 2 twice, around a limit that refuses for 100 ms: after
/// those 100 ms `b` would hold 3.5, not the 4 the chain needs.
#[test]
fn a_refused_chain_passes_once_its_wait_is_waited_out() {
    let clock = ManualClock::new();
    let (b, other) = (bucket(5, 5, &clock), bucket(1, 10, &clock));
    b.try_acquire(2).unwrap();
    other.try_acquire(1).unwrap();
    let refused = try_acquire_all(&[b.cost(2), other.cost(1), b.cost(2)]).refused_by();
    assert_eq!(refused.limit, 1);
    let wait = refused.error.retry_after().unwrap();
    assert_eq!(wait, SECOND / 5, "the 200 ms b lacks for 4 tokens");
    clock.advance(wait - Duration::from_nanos(1));
    assert!(try_acquire_all(&[b.cost(2), other.cost(1), b.cost(2)]).is_err());
    clock.advance(Duration::from_nanos(1));
    assert_eq!(
        try_acquire_all(&[b.cost(2), other.cost(1), b.cost(2)]),
        Ok(())
    );
}

#[cfg(feature = "keyed")]
#[test]
fn a_step_that_can_never_admit_wins_over_a_key_cap() {
    let clock = ManualClock::new();
    let per_key = KeyedLimiter::builder(Quota::per_second(5).unwrap())
        .clock(clock.clone())
        .max_keys(std::num::NonZeroUsize::MIN.into())
        .sweep_interval(None)
        .build::<u32>();
    per_key.try_acquire(&1, 1).unwrap();
    let tiny = bucket(2, 1, &clock);
    let refused = try_acquire_all(&[per_key.key(&2).cost(1), tiny.cost(3)]).refused_by();
    assert_eq!(refused.limit, 1);
    assert!(matches!(
        refused.error,
        AcquireError::ExceedsCapacity { cost: 3, .. }
    ));
    let refused = try_acquire_all(&[per_key.key(&2).cost(1), tiny.cost(1)]).refused_by();
    assert_eq!(
        refused,
        ChainRefused {
            limit: 0,
            error: AcquireError::TooManyKeys { max_keys: 1 }
        }
    );
}

#[cfg(feature = "keyed")]
#[test]
fn steps_can_cross_threads() {
    fn shareable<T: Send + Sync>(_: &T) {}
    let clock = ManualClock::new();
    let per_key = KeyedLimiter::builder(Quota::per_second(5).unwrap())
        .clock(clock.clone())
        .build::<String>();
    let global = bucket(5, 5, &clock);
    let account = per_key.key("alice");
    let steps = [account.cost(1), global.cost(1)];
    shareable(&steps);
    thread::scope(|s| {
        s.spawn(|| try_acquire_all(&steps).unwrap());
    });
    assert_eq!(global.available(), 4);
}

/// Requests refused by a later limit leave no key behind in an earlier
/// keyed limiter: they cannot fill its key cap and turn refusals into
/// `TooManyKeys` for everyone else.
#[cfg(feature = "keyed")]
#[test]
fn refused_requests_leave_no_keys_behind() {
    let clock = ManualClock::new();
    let per_account = KeyedLimiter::builder(Quota::per_second(5).unwrap())
        .clock(clock.clone())
        .max_keys(std::num::NonZeroUsize::new(3).unwrap().into())
        .sweep_interval(None)
        .build::<u32>();
    let global = bucket(1, 1, &clock);
    try_acquire_all(&[per_account.key(&0).cost(1), global.cost(1)]).unwrap();
    for account in 1..10 {
        let refused = try_acquire_all(&[per_account.key(&account).cost(1), global.cost(1)]);
        assert_eq!(refused.refused_by().limit, 1, "account {account}");
    }
    assert_eq!(per_account.len(), 1);
    // The account that was admitted keeps its spent bucket.
    assert_eq!(per_account.available(&0), 4);
}

#[test]
fn an_empty_chain_admits() {
    assert_eq!(try_acquire_all(&[]), Ok(()));
}

// Random chains on a moving clock: every limit stays within its envelope,
// and on a clock that did not move, a refusal changes nothing.

#[derive(Clone, Copy, Debug)]
enum Op {
    /// A chain over the limits in `order` (indices into three limits),
    /// each charged `cost`.
    Chain {
        order: [usize; 3],
        len: usize,
        cost: u64,
    },
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let order = Just([0usize, 1, 2])
        .prop_shuffle()
        .prop_map(|v| [v[0], v[1], v[2]]);
    prop_oneof![
        4 => (order, 1..=3usize, 1..=3u64).prop_map(|(order, len, cost)| Op::Chain { order, len, cost }),
        2 => (0..700u64).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn chains_keep_every_limit_in_its_envelope(
        specs in prop::collection::vec((1..=4u64, prop_oneof![3 => 1..=3u64, 1 => Just(11u64)]), 3),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let clock = ManualClock::new();
        let limits: Vec<_> = specs.iter().map(|&(c, r)| bucket(c, r, &clock)).collect();
        let mut spent: Vec<Vec<(u64, u64)>> = vec![Vec::new(); 3];
        for op in ops {
            match op {
                Op::Chain { order, len, cost } => {
                    let steps: Vec<_> = order[..len].iter().map(|&i| limits[i].cost(cost)).collect();
                    let before: Vec<u64> = limits.iter().map(|l| l.available()).collect();
                    let now = nanos(&clock);
                    match try_acquire_all(&steps) {
                        Ok(()) => {
                            for &i in &order[..len] {
                                spent[i].push((now, cost));
                            }
                        }
                        Err(refused) => {
                            let refused = Err(refused).refused_by();
                            let after: Vec<u64> = limits.iter().map(|l| l.available()).collect();
                            prop_assert_eq!(before, after, "a refusal spent credit");
                            prop_assert!(refused.limit < len);
                        }
                    }
                }
                Op::Advance(ms) => clock.advance(Duration::from_millis(ms)),
            }
        }
        for (events, &(capacity, tokens)) in spent.iter().zip(&specs) {
            Envelope { capacity, tokens, period_ns: 1_000_000_000 }.assert_holds_over(events, 0);
        }
    }
}

// Random chains over a few limits, each reached through several handles:
// a refusal exceeds a capacity exactly when the chain's combined cost on
// some limit does, and otherwise reports the exact wait after which the
// same chain passes.

/// Three buckets, each behind two handles, and a sliding window behind
/// two; and, with feature `keyed`, one key of a keyed limiter behind two
/// views of it.
#[cfg(feature = "keyed")]
const HANDLES: usize = 10;
#[cfg(not(feature = "keyed"))]
const HANDLES: usize = 8;

/// The limit a handle reaches.
fn limit_of(handle: usize) -> usize {
    handle / 2
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_refused_chain_exceeds_a_capacity_or_passes_once_its_wait_is_waited_out(
        // Exact rates and rounded ones (11 and 13 a second: intervals the
        // bucket rounds up to its tick).
        specs in prop::collection::vec((1..=6u64, prop_oneof![Just(1u64), Just(2), Just(4), Just(5), Just(10), Just(11), Just(13)]), HANDLES / 2),
        spent in prop::collection::vec(0..=6u64, HANDLES / 2),
        chains in prop::collection::vec(
            (prop::collection::vec((0..HANDLES, 1..=4u64), 1..=6), 0..300u64),
            1..12,
        ),
    ) {
        use std::sync::Arc;
        use tollgate::{Counted, SlidingWindow, Step, WindowQuota};

        let clock = ManualClock::new();
        let buckets: Vec<Arc<TokenBucket<ManualClock>>> =
            specs.iter().take(3).map(|&(c, r)| Arc::new(bucket(c, r, &clock))).collect();
        let counted: Vec<_> = buckets.iter().map(|b| Counted::new(Arc::clone(b))).collect();
        let window = SlidingWindow::with_clock(
            WindowQuota::new(specs[3].0, SECOND).unwrap(),
            clock.clone(),
        )
        .unwrap();
        let window_ref = &window;
        #[cfg(feature = "keyed")]
        let keyed = {
            let (capacity, rate) = specs[4];
            KeyedLimiter::builder(Quota::new(capacity, rate, SECOND).unwrap())
                .clock(clock.clone())
                .build::<String>()
        };
        #[cfg(feature = "keyed")]
        let (owned_key, key) = ("k".to_owned(), keyed.key("k"));
        #[cfg(feature = "keyed")]
        let owned_view = keyed.key(&owned_key);
        let mut handles: Vec<&dyn Limit> = Vec::new();
        for (bare, counted) in buckets.iter().zip(&counted) {
            handles.push(&**bare);
            handles.push(counted);
        }
        handles.push(&window);
        handles.push(&window_ref);
        #[cfg(feature = "keyed")]
        {
            handles.push(&key);
            handles.push(&owned_view);
        }
        let capacities: Vec<u64> = specs.iter().map(|&(c, _)| c).collect();
        for (limit, &spend) in spent.iter().enumerate() {
            let _ = handles[limit * 2].try_acquire(spend.min(capacities[limit]).max(1));
        }
        for (chain, pause_ms) in chains {
            let steps: Vec<Step<'_>> =
                chain.iter().map(|&(handle, cost)| Step::new(handles[handle], cost)).collect();
            let mut combined = [0u64; HANDLES / 2];
            for &(handle, cost) in &chain {
                combined[limit_of(handle)] += cost;
            }
            // The first step, in the chain's order, whose limit the chain
            // charges beyond its capacity.
            let too_much = chain
                .iter()
                .position(|&(handle, _)| combined[limit_of(handle)] > capacities[limit_of(handle)]);
            let before: Vec<u64> = handles.iter().map(|h| h.available()).collect();
            match try_acquire_all(&steps) {
                Ok(()) => prop_assert!(too_much.is_none()),
                Err(refused) => {
                    let refused = Err(refused).refused_by();
                    let after: Vec<u64> = handles.iter().map(|h| h.available()).collect();
                    prop_assert_eq!(&before, &after, "a refusal spent credit");
                    match refused.error {
                        AcquireError::ExceedsCapacity { cost, capacity } => {
                            prop_assert_eq!(too_much, Some(refused.limit));
                            let limit = limit_of(chain[refused.limit].0);
                            prop_assert_eq!((cost, capacity), (combined[limit], capacities[limit]));
                        }
                        AcquireError::Insufficient { retry_after } => {
                            prop_assert!(too_much.is_none());
                            prop_assert!(retry_after > Duration::ZERO);
                            // The exact wait: a nanosecond less is too soon.
                            clock.advance(retry_after - Duration::from_nanos(1));
                            prop_assert!(try_acquire_all(&steps).is_err());
                            clock.advance(Duration::from_nanos(1));
                            prop_assert_eq!(try_acquire_all(&steps), Ok(()));
                        }
                        other => prop_assert!(false, "unexpected refusal {other:?}"),
                    }
                }
            }
            clock.advance(Duration::from_millis(pause_ms));
        }
    }
}

fn nanos(clock: &ManualClock) -> u64 {
    use tollgate::Clock;
    clock.now_nanos()
}

// Real threads through a per-thread limit and a shared one.

#[cfg(feature = "keyed")]
#[test]
fn racing_threads_never_pass_more_than_the_shared_limit_and_undo_exactly() {
    const GLOBAL: u64 = 500;
    const PER_KEY: u64 = 300;
    for threads in [2usize, 4, 8] {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(3));
        let per_key = KeyedLimiter::builder(Quota::per_second(PER_KEY).unwrap())
            .clock(clock.clone())
            .build::<usize>();
        let global = bucket(GLOBAL, 1, &clock);
        let barrier = Barrier::new(threads);
        let passed: Vec<u64> = thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|key| {
                    let (per_key, global, barrier) = (&per_key, &global, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        (0..PER_KEY * 2)
                            .filter(|_| {
                                try_acquire_all(&[per_key.key(&key).cost(1), global.cost(1)])
                                    .is_ok()
                            })
                            .count() as u64
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let total: u64 = passed.iter().sum();
        assert_eq!(total, GLOBAL.min(PER_KEY * threads as u64), "{passed:?}");
        assert_eq!(global.available(), GLOBAL - total);
        for (key, &n) in passed.iter().enumerate() {
            assert!(n <= PER_KEY);
            // The clock is frozen, so every refused request's per-key charge
            // was undone in full: what is left is exactly what passed.
            assert_eq!(per_key.available(&key), PER_KEY - n, "key {key}");
        }
    }
}
