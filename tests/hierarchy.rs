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

mod common;
use common::Envelope;

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
        Err(HierarchyError {
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
    let refused = try_acquire_all(&[first.cost(1), second.cost(1), third.cost(1)]).unwrap_err();
    assert_eq!(refused.limit, 1);
    assert_eq!(refused.error.retry_after(), Some(SECOND * 3 / 4));
    assert_eq!(first.available(), 1);
}

#[test]
fn a_cost_one_limit_can_never_admit_is_reported_over_any_wait() {
    let clock = ManualClock::new();
    let (small, tiny) = (bucket(5, 1, &clock), bucket(2, 1, &clock));
    small.try_acquire(5).unwrap();
    let refused = try_acquire_all(&[small.cost(3), tiny.cost(3)]).unwrap_err();
    assert_eq!(
        refused,
        HierarchyError {
            limit: 1,
            error: AcquireError::ExceedsCapacity {
                cost: 3,
                capacity: 2
            }
        }
    );
    assert_eq!(
        try_acquire_all(&[small.cost(0)]).unwrap_err().error,
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
    let refused = try_acquire_all(&[per_address.key("a").cost(1), global.cost(1)]).unwrap_err();
    assert_eq!(refused.limit, 0);
    // "c" passes its own limit, the global one refuses, and "c" keeps its
    // credit: a refused request's cost counts nowhere.
    let refused = try_acquire_all(&[per_address.key("c").cost(1), global.cost(1)]).unwrap_err();
    assert_eq!(refused.limit, 1);
    assert_eq!(per_address.available("c"), 2);
}

#[test]
fn the_longest_wait_is_looked_at_once_the_taken_steps_are_undone() {
    let clock = ManualClock::new();
    let (a, b) = (bucket(2, 10, &clock), bucket(1, 20, &clock));
    a.try_acquire(1).unwrap();
    b.try_acquire(1).unwrap();
    // `b` refuses for 50 ms. `a` appears twice: its first step is undone
    // before the second one's wait is read, so that wait is the 100 ms `a`
    // lacks for 2 tokens once this request holds nothing, not the 200 ms it
    // would lack while the first step still held a token.
    let refused = try_acquire_all(&[a.cost(1), b.cost(1), a.cost(2)]).unwrap_err();
    assert_eq!(refused.limit, 1);
    assert_eq!(refused.error.retry_after(), Some(SECOND / 10));
    assert_eq!(a.available(), 1);
    // When the first step refuses, the later ones are looked at too.
    let refused = try_acquire_all(&[a.cost(2), b.cost(1)]).unwrap_err();
    assert_eq!(refused.limit, 0);
    assert_eq!(refused.error.retry_after(), Some(SECOND / 10));
}

#[cfg(feature = "keyed")]
#[test]
fn a_step_that_can_never_admit_wins_over_a_key_cap() {
    let clock = ManualClock::new();
    let per_key = KeyedLimiter::builder(Quota::per_second(5).unwrap())
        .clock(clock.clone())
        .max_keys(std::num::NonZeroUsize::MIN)
        .sweep_interval(None)
        .build::<u32>();
    per_key.try_acquire(&1, 1).unwrap();
    let tiny = bucket(2, 1, &clock);
    let refused = try_acquire_all(&[per_key.key(&2).cost(1), tiny.cost(3)]).unwrap_err();
    assert_eq!(refused.limit, 1);
    assert!(matches!(
        refused.error,
        AcquireError::ExceedsCapacity { cost: 3, .. }
    ));
    let refused = try_acquire_all(&[per_key.key(&2).cost(1), tiny.cost(1)]).unwrap_err();
    assert_eq!(
        refused,
        HierarchyError {
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
        .max_keys(std::num::NonZeroUsize::new(3).unwrap())
        .sweep_interval(None)
        .build::<u32>();
    let global = bucket(1, 1, &clock);
    try_acquire_all(&[per_account.key(&0).cost(1), global.cost(1)]).unwrap();
    for account in 1..10 {
        let refused = try_acquire_all(&[per_account.key(&account).cost(1), global.cost(1)]);
        assert_eq!(refused.unwrap_err().limit, 1, "account {account}");
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
        specs in prop::collection::vec((1..=4u64, 1..=3u64), 3),
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
