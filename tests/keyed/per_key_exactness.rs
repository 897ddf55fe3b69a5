//! The keyed limiter: per-key semantics equal to a single bucket, typed
//! keys, and memory bounds that never mint credit.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::{
    AcquireError, AtCapacity, InitialCredit, KeyedLimiter, Limit, ManualClock, Quota, TokenBucket,
};

use common::Envelope;
use tollgate_test_support::common;

const SECOND: Duration = Duration::from_secs(1);

fn keyed(quota: Quota, clock: &ManualClock) -> KeyedLimiter<u32, ManualClock> {
    KeyedLimiter::builder(quota).clock(clock.clone()).build()
}

/// The longest exact key for a test that runs on either table: zero keeps
/// every key as a fingerprint.
fn exact_key_bytes(fingerprinted: bool) -> usize {
    if fingerprinted { 0 } else { usize::MAX }
}

fn cap(n: usize) -> tollgate::MaxKeys {
    tollgate::MaxKeys::new(n).unwrap()
}

// Per-key semantics.

#[derive(Clone, Copy, Debug)]
enum Op {
    Acquire(u64),
    Reserve(u64, u64),
    Refund(u64),
    Advance(u64),
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..=6u64).prop_map(Op::Acquire),
        1 => (1..=6u64, 0..2_000u64).prop_map(|(c, w)| Op::Reserve(c, w)),
        1 => (0..=3u64).prop_map(Op::Refund),
        3 => (0..1_500u64).prop_map(Op::Advance),
        1 => Just(Op::Sweep),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    /// One key of a keyed limiter makes exactly the decisions of a token
    /// bucket with the same quota and clock, sweeps included: dropping a
    /// full bucket changes nothing. The same whether the key is kept as
    /// itself or as a fingerprint.
    #[test]
    fn one_key_decides_like_a_token_bucket(
        capacity in 1..=6u64,
        tokens in 1..=7u64,
        period_ms in 1..=3_000u64,
        fingerprinted in any::<bool>(),
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let quota = Quota::new(capacity, tokens, Duration::from_millis(period_ms)).unwrap();
        let clock = ManualClock::new();
        let bucket = TokenBucket::with_clock(quota, clock.clone());
        let limiter = KeyedLimiter::builder(quota)
            .clock(clock.clone())
            .max_exact_key_bytes(exact_key_bytes(fingerprinted))
            .build::<u32>();
        for op in ops {
            match op {
                Op::Acquire(cost) => {
                    prop_assert_eq!(limiter.try_acquire(&7, cost), bucket.try_acquire(cost));
                }
                Op::Reserve(cost, ms) => {
                    let wait = Duration::from_millis(ms);
                    prop_assert_eq!(limiter.reserve(&7, cost, wait), bucket.reserve(cost, wait));
                }
                Op::Refund(cost) => {
                    limiter.refund(&7, cost);
                    bucket.refund(cost);
                }
                Op::Advance(ms) => clock.advance(Duration::from_millis(ms)),
                Op::Sweep => {
                    limiter.sweep();
                }
            }
            prop_assert_eq!(limiter.available(&7), bucket.available());
            prop_assert_eq!(limiter.retry_after(&7, 1), bucket.retry_after(1));
        }
    }
}

#[test]
fn keys_are_independent_and_created_on_first_use() {
    let clock = ManualClock::new();
    let limiter = keyed(Quota::per_second(2).unwrap(), &clock);
    limiter.try_acquire(&1, 2).unwrap();
    assert!(limiter.try_acquire(&1, 1).is_err());
    assert_eq!(limiter.try_acquire(&2, 2), Ok(()));
    assert_eq!(limiter.len(), 2);
    // Reading a key's state creates nothing.
    assert_eq!(limiter.available(&3), 2);
    assert_eq!(limiter.retry_after(&3, 2), Ok(Duration::ZERO));
    assert_eq!(limiter.len(), 2);
}

#[test]
fn initial_credit_is_granted_at_a_keys_first_use() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(4)
        .unwrap()
        .with_initial_credit(InitialCredit::Empty)
        .unwrap();
    let limiter = keyed(quota, &clock);
    clock.advance(10 * SECOND);
    // Ten seconds after the limiter was built, a new key still starts empty.
    assert_eq!(limiter.available(&1), 0);
    assert_eq!(
        limiter.try_acquire(&1, 1),
        common::insufficient(Duration::from_millis(250))
    );
}

#[test]
fn composite_keys_keep_their_component_boundaries() {
    let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap())
        .clock(ManualClock::new())
        .build::<(String, String)>();
    let glued = ("a:b".to_owned(), "c".to_owned());
    let split = ("a".to_owned(), "b:c".to_owned());
    limiter.try_acquire(&glued, 1).unwrap();
    assert_eq!(limiter.try_acquire(&split, 1), Ok(()), "a distinct key");
    assert!(limiter.try_acquire(&glued, 1).is_err());
}

#[test]
fn borrowed_lookups_find_owned_keys() {
    let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap())
        .clock(ManualClock::new())
        .build::<String>();
    limiter.try_acquire("alice", 1).unwrap();
    assert!(limiter.try_acquire(&"alice".to_owned(), 1).is_err());
}

#[test]
fn bad_costs_get_the_buckets_errors_and_create_no_key() {
    let limiter = keyed(Quota::per_second(2).unwrap(), &ManualClock::new());
    assert_eq!(limiter.try_acquire(&1, 0), Err(AcquireError::ZeroCost));
    assert_eq!(
        limiter.try_acquire(&1, 3),
        Err(AcquireError::ExceedsCapacity {
            cost: 3,
            capacity: 2
        })
    );
    assert!(limiter.is_empty());
}

// Bounded memory.

#[test]
fn sweep_drops_only_full_buckets() {
    let clock = ManualClock::new();
    let limiter = keyed(Quota::new(2, 1, SECOND).unwrap(), &clock);
    limiter.try_acquire(&1, 2).unwrap();
    limiter.try_acquire(&2, 1).unwrap();
    clock.advance(SECOND);
    // Key 2 has refilled; key 1 still owes a token.
    assert_eq!(limiter.sweep(), 1);
    assert_eq!(limiter.len(), 1);
    assert_eq!(limiter.available(&1), 1);
    clock.advance(SECOND);
    assert_eq!(limiter.sweep(), 1);
    assert!(limiter.is_empty());
}

#[test]
fn at_the_cap_new_keys_are_denied_with_a_distinct_error() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap())
        .clock(clock.clone())
        .max_keys(cap(2))
        .sweep_interval(None)
        .build::<u32>();
    limiter.try_acquire(&1, 1).unwrap();
    limiter.try_acquire(&2, 1).unwrap();
    assert_eq!(
        limiter.try_acquire(&3, 1),
        Err(AcquireError::TooManyKeys { max_keys: 2 })
    );
    assert_eq!(
        AcquireError::TooManyKeys { max_keys: 2 }.retry_after(),
        None
    );
    // Tracked keys are unaffected.
    clock.advance(SECOND);
    assert_eq!(limiter.try_acquire(&1, 1), Ok(()));
    // Once a bucket is full, an explicit sweep frees its room.
    clock.advance(SECOND);
    assert_eq!(limiter.sweep(), 2);
    assert_eq!(limiter.try_acquire(&3, 1), Ok(()));
}

#[test]
fn a_new_key_at_the_cap_sweeps_at_most_once_per_interval() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap())
        .clock(clock.clone())
        .max_keys(cap(1))
        .sweep_interval(Some(10 * SECOND))
        .build::<u32>();
    limiter.try_acquire(&1, 1).unwrap();
    // Full, but nothing to drop yet: the sweep runs and finds nothing.
    assert!(limiter.try_acquire(&2, 1).is_err());
    clock.advance(SECOND);
    // Key 1 is full now, but the last sweep was within the interval.
    assert!(limiter.try_acquire(&2, 1).is_err());
    clock.advance(9 * SECOND);
    assert_eq!(limiter.try_acquire(&2, 1), Ok(()));
    assert_eq!(limiter.len(), 1);
}

#[test]
fn overflow_keys_share_one_bucket_and_leave_it_no_fuller() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(Quota::new(2, 1, SECOND).unwrap())
        .clock(clock.clone())
        .max_keys(cap(2))
        .at_capacity(AtCapacity::SharedOverflow)
        .sweep_interval(None)
        .build::<u32>();
    limiter.try_acquire(&0, 1).unwrap();
    limiter.try_acquire(&1, 1).unwrap();
    // Keys 2 and 3 arrive at the cap and share the overflow bucket.
    limiter.try_acquire(&2, 2).unwrap();
    assert!(limiter.try_acquire(&3, 1).is_err());
    assert_eq!(limiter.len(), 2);
    // Keys 0 and 1 refill and are swept. Key 2's own bucket starts no fuller
    // than the overflow bucket it spent from; key 4, which never did, does
    // not inherit that debt.
    clock.advance(SECOND);
    assert_eq!(limiter.sweep(), 2);
    assert_eq!(limiter.available(&2), 1);
    assert_eq!(limiter.available(&4), 2);
    limiter.try_acquire(&2, 1).unwrap();
    assert!(limiter.try_acquire(&2, 1).is_err());
    limiter.try_acquire(&4, 2).unwrap();
}

#[test]
fn a_stale_reading_after_a_sweep_sees_the_dropped_buckets_debt() {
    let clock = ManualClock::new();
    let limiter = keyed(Quota::new(1, 1, SECOND).unwrap(), &clock);
    limiter.try_acquire(&1, 1).unwrap();
    clock.set(SECOND);
    assert_eq!(limiter.sweep(), 1);
    // A decision whose clock reading predates the sweep (here, a clock set
    // back) finds the recreated bucket no fuller than the dropped one was.
    clock.set(SECOND / 2);
    assert_eq!(limiter.try_acquire(&1, 1), common::insufficient(SECOND / 2));
}

// No sequence of evictions and re-creations admits more than the envelope.

#[derive(Clone, Copy, Debug)]
enum Churn {
    Acquire {
        key: u32,
        cost: u64,
    },
    /// An acquire whose clock reading is `stale` ms old, as a thread
    /// preempted between reading the clock and deciding would make.
    Stale {
        key: u32,
        cost: u64,
        stale: u64,
    },
    Advance(u64),
    Sweep,
}

fn churn() -> impl Strategy<Value = Churn> {
    prop_oneof![
        6 => (0..5u32, 1..=3u64).prop_map(|(key, cost)| Churn::Acquire { key, cost }),
        3 => (0..800u64).prop_map(Churn::Advance),
        2 => (0..5u32, 1..=3u64, 0..800u64).prop_map(|(key, cost, stale)| Churn::Stale { key, cost, stale }),
        2 => Just(Churn::Sweep),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn evictions_and_recreations_never_exceed_the_envelope_per_key(
        capacity in 1..=4u64,
        tokens in 1..=3u64,
        max_keys in 1..=3usize,
        overflow in any::<bool>(),
        auto_sweep in any::<bool>(),
        fingerprinted in any::<bool>(),
        ops in prop::collection::vec(churn(), 1..120),
    ) {
        let period = SECOND;
        let clock = ManualClock::new();
        let limiter = KeyedLimiter::builder(Quota::new(capacity, tokens, period).unwrap())
            .clock(clock.clone())
            .max_keys(cap(max_keys))
            .at_capacity(if overflow { AtCapacity::SharedOverflow } else { AtCapacity::Deny })
            .sweep_interval(auto_sweep.then_some(Duration::from_millis(300)))
            .max_exact_key_bytes(exact_key_bytes(fingerprinted))
            .build::<u32>();
        let mut spent: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        let mut acquire = |key: u32, cost: u64, at: u64| match limiter.try_acquire(&key, cost) {
            Ok(()) => spent.entry(key).or_default().push((at, cost)),
            Err(
                AcquireError::Insufficient { .. }
                | AcquireError::TooManyKeys { .. }
                | AcquireError::ExceedsCapacity { .. },
            ) => {}
            Err(other) => panic!("{other:?}"),
        };
        for op in ops {
            let now = clock_ns(&clock);
            match op {
                Churn::Acquire { key, cost } => acquire(key, cost, now),
                Churn::Stale { key, cost, stale } => {
                    // The decision happens after everything before it, on a
                    // reading from earlier. The envelope is a statement over
                    // the readings decisions are made at (docs/semantics.md),
                    // so that is the time the admission is checked at.
                    let reading = now.saturating_sub(stale * 1_000_000);
                    clock.set(Duration::from_nanos(reading));
                    acquire(key, cost, reading);
                    clock.set(Duration::from_nanos(now));
                }
                Churn::Advance(ms) => clock.advance(Duration::from_millis(ms)),
                Churn::Sweep => {
                    limiter.sweep();
                }
            }
            prop_assert!(limiter.len() <= max_keys);
            // Every bucket created is either tracked or was evicted.
            let table = limiter.table_stats();
            prop_assert_eq!(table.created, table.keys + table.evicted);
        }
        let envelope = Envelope { capacity, tokens, period_ns: 1_000_000_000 };
        for events in spent.values() {
            envelope.assert_holds_over(events, 0);
        }
    }
}

fn clock_ns(clock: &ManualClock) -> u64 {
    use tollgate::Clock;
    clock.now_nanos()
}

// Real threads: creation races and sweeps running beside decisions.

/// Runs `round(i, n, tally)` on `threads` threads, at least `rounds` times
/// each, beside a thread that sweeps until they finish (and at least
/// [`SWEEPS_PER_WORKER`] times during each worker's run); returns each
/// worker's per-key tally.
fn race_with_sweeper<K, C>(
    limiter: &KeyedLimiter<K, C>,
    threads: usize,
    rounds: u64,
    round: impl Fn(usize, u64, &mut Vec<u64>) + Sync,
) -> Vec<Vec<u64>>
where
    K: std::hash::Hash + Eq + Send + Sync,
    C: tollgate::Clock,
{
    common::race_beside(threads, rounds, SWEEPS_PER_WORKER, round, || {
        limiter.sweep();
    })
}

const SWEEPS_PER_WORKER: u64 = 20;

/// Each key's total over the threads' per-key tallies.
fn per_key_totals(per_thread: &[Vec<u64>]) -> Vec<u64> {
    (0..per_thread[0].len())
        .map(|key| per_thread.iter().map(|tally| tally[key]).sum())
        .collect()
}

/// On a frozen clock every key admits exactly its capacity, however the
/// threads race to create its bucket and however often a sweeper runs: a
/// spent bucket is never full, so it is never dropped.
#[test]
fn racing_creations_and_sweeps_admit_exactly_the_capacity_per_key() {
    const KEYS: u32 = 64;
    const CAPACITY: u64 = 20;
    for threads in [2usize, 4, 8] {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(7));
        let limiter = keyed(Quota::per_second(CAPACITY).unwrap(), &clock);
        let per_thread = race_with_sweeper(&limiter, threads, CAPACITY, |_, _, admitted| {
            admitted.resize(KEYS as usize, 0);
            for key in 0..KEYS {
                if limiter.try_acquire(&key, 1).is_ok() {
                    admitted[key as usize] += 1;
                }
            }
        });
        for (key, total) in per_key_totals(&per_thread).into_iter().enumerate() {
            assert_eq!(total, CAPACITY, "{threads} threads, key {key}");
        }
        assert_eq!(limiter.len(), KEYS as usize);
    }
}

/// Rounds on a clock that moves only between them, by a whole refill: at
/// each round's start every bucket is full, so the sweeper drops buckets
/// while the threads race to spend and recreate them. Every round still
/// admits exactly the capacity per key: a dropped bucket is never replaced
/// by a fuller one (which would admit more) nor lost mid-decision (which
/// could admit less).
#[test]
fn sweeps_dropping_buckets_under_racing_threads_admit_exactly_the_capacity() {
    const KEYS: u32 = 32;
    const CAPACITY: u64 = 10;
    const ROUNDS: u32 = 20;
    for threads in [2usize, 4] {
        let clock = ManualClock::new();
        let limiter = keyed(Quota::per_second(CAPACITY).unwrap(), &clock);
        let dropped = std::sync::atomic::AtomicUsize::new(0);
        for round in 0..ROUNDS {
            clock.set(SECOND * (round + 1));
            let per_thread = race_with_sweeper(&limiter, threads, CAPACITY, |_, _, admitted| {
                admitted.resize(KEYS as usize, 0);
                // Workers sweep too, before each pass: the first pass of a
                // round finds full buckets to drop.
                dropped.fetch_add(limiter.sweep(), std::sync::atomic::Ordering::Relaxed);
                for key in 0..KEYS {
                    if limiter.try_acquire(&key, 1).is_ok() {
                        admitted[key as usize] += 1;
                    }
                }
            });
            for (key, total) in per_key_totals(&per_thread).into_iter().enumerate() {
                assert_eq!(
                    total, CAPACITY,
                    "{threads} threads, round {round}, key {key}"
                );
            }
        }
        // Buckets really were dropped and recreated under the race, and
        // spent ones never were: every key is tracked at the end.
        assert!(dropped.into_inner() > 0, "no sweep dropped anything");
        assert_eq!(limiter.len(), KEYS as usize);
    }
}

/// On the real clock, with buckets refilling within a millisecond, a small
/// key cap and the overflow policy, sweeps drop and threads recreate buckets
/// all the time; no key is admitted more than `B + r * elapsed`.
#[test]
fn churning_keys_on_the_real_clock_stay_within_the_envelope() {
    const KEYS: u32 = 16;
    const CAPACITY: u64 = 5;
    const RATE: u64 = 5_000;
    for threads in [2usize, 4] {
        let limiter = KeyedLimiter::builder(Quota::new(CAPACITY, RATE, SECOND).unwrap())
            .max_keys(cap(8))
            .at_capacity(AtCapacity::SharedOverflow)
            .build::<u32>();
        use tollgate::Clock;
        let start = limiter.clock().now_nanos();
        let per_thread = race_with_sweeper(&limiter, threads, 20_000, |i, round, admitted| {
            admitted.resize(KEYS as usize, 0);
            let key = ((round as u32).wrapping_mul(7) + i as u32) % KEYS;
            if limiter.try_acquire(&key, 1).is_ok() {
                admitted[key as usize] += 1;
            }
        });
        let elapsed = limiter.clock().now_nanos() - start;
        let envelope = Envelope {
            capacity: CAPACITY,
            tokens: RATE,
            period_ns: 1_000_000_000,
        };
        let mut all = 0;
        for (key, total) in per_key_totals(&per_thread).into_iter().enumerate() {
            all += total;
            assert!(
                envelope.admits(u128::from(total), elapsed),
                "key {key}: {total} in {elapsed} ns"
            );
        }
        // The first keys find full buckets of their own.
        assert!(all >= CAPACITY, "only {all} admitted");
        assert!(limiter.len() <= 8);
    }
}
