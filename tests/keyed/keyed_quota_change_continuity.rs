//! Run-time quota changes of a keyed limiter (`KeyedLimiter::set_quota`),
//! against a model kept in exact rationals: every key is an ideal GCRA
//! bucket, and a change converts each tracked key by the continuity rule of
//! `docs/semantics.md` ("Changing a quota"), written here from its statement:
//! whole tokens carry over clipped to the new capacity, a debt keeps the
//! instant it is paid (rounded up to the new tick). Keys the limiter does not
//! track (never seen, or swept once full) start with the new quota's
//! initial credit, but no fuller than the sweeps' watermark: the state of a
//! bucket full at the latest sweep that dropped one, converted by the same
//! rule at every change since (none before the first such sweep). The
//! quotas are exact ones with tick units from 1 to 7 per nanosecond, so
//! every observable must equal the model's.
//!
//! Beside equality, each constant-quota stretch of each key is held to its
//! quota's envelope: the tokens of the stretch's admissions starting within
//! `[change, s]` are at most `B + r·(s - change)`, for every start `s`; and
//! each key's whole life, across changes and sweeps, to the envelope of the
//! largest capacity and the fastest rate it was ever given: changes and
//! sweeps back and forth never gain.

use std::collections::HashMap;
use std::time::Duration;

use num_rational::Ratio;
use proptest::prelude::*;
use tollgate::{AcquireError, KeyedLimiter, ManualClock, Quota, Receipt};

use common::{Envelope, race_beside};
use tollgate_test_support::common;

type Q = Ratio<i128>;

fn q(n: u64) -> Q {
    Q::from_integer(i128::from(n))
}

fn ceil_nanos(x: Q) -> u64 {
    u64::try_from(x.ceil().to_integer().max(0)).unwrap()
}

/// `(capacity, tokens, period)` of exact quotas whose ticks are 1, 3, 7 and
/// 1 (a slow one) per nanosecond.
const QUOTAS: [(u64, u64, u64); 5] = [
    (10, 10, 1_000_000_000),
    (3, 3, 1_000_000_000),
    (7, 7, 1_000_000_000),
    (20, 6, 1_000_000_000),
    (2, 1, 3_000_000_000),
];

fn quota(index: usize) -> Quota {
    let (b, n, p) = QUOTAS[index];
    Quota::new(b, n, Duration::from_nanos(p)).unwrap()
}

/// A quota as the model reads it.
#[derive(Clone, Copy, Debug)]
struct Ideal {
    capacity: u64,
    /// Nanoseconds per token.
    interval: Q,
    /// Ticks per nanosecond: the reduced denominator of the interval.
    ticks: i128,
    envelope: Envelope,
}

impl Ideal {
    fn of(index: usize) -> Self {
        let (capacity, tokens, period) = QUOTAS[index];
        let interval = Q::new(i128::from(period), i128::from(tokens));
        Ideal {
            capacity,
            interval,
            ticks: *interval.denom(),
            envelope: Envelope {
                capacity,
                tokens,
                period_ns: period,
            },
        }
    }

    fn tolerance(&self) -> Q {
        q(self.capacity) * self.interval
    }

    fn available(&self, tat: Q, now: Q) -> u64 {
        let debt = (tat - now).max(q(0));
        let span = self.tolerance() - debt;
        if span < q(0) {
            0
        } else {
            u64::try_from((span / self.interval).floor().to_integer()).unwrap()
        }
    }

    /// The continuity rule, from its statement.
    fn carry(&self, tat: Q, now: Q, to: &Ideal) -> Q {
        let paid = tat - self.tolerance();
        if paid > now {
            // The instant the debt is paid, rounded up to the new tick.
            let ticks = (paid * Q::from_integer(to.ticks)).ceil();
            return ticks / Q::from_integer(to.ticks) + to.tolerance();
        }
        let carried = self.available(tat, now).min(to.capacity);
        now + q(to.capacity - carried) * to.interval
    }
}

/// One stretch of one key under one quota: its start, and the admissions
/// decided in it as `(start instant, tokens)`.
#[derive(Debug)]
struct Stretch {
    from: u64,
    envelope: Envelope,
    starts: Vec<(Q, u64)>,
}

impl Stretch {
    fn check(&self) {
        let mut starts = self.starts.clone();
        starts.sort();
        let mut spent = 0u128;
        for (start, tokens) in starts {
            spent += u128::from(tokens);
            let elapsed = ceil_nanos(start) - self.from;
            assert!(
                self.envelope.admits(spent, elapsed),
                "{spent} tokens within {elapsed} ns of a stretch of {:?}",
                self.envelope
            );
        }
    }
}

#[derive(Default)]
struct Model {
    now: u64,
    quota: usize,
    /// Each tracked key's state: the instant its bucket is full again.
    keys: HashMap<u8, Q>,
    /// The state of a bucket full at the latest sweep that dropped one, in
    /// the current quota; `None` while no sweep has dropped anything.
    dropped: Option<Q>,
    stretches: HashMap<u8, Stretch>,
    /// Every admission of each key, over its whole life: `(start, tokens)`.
    lives: HashMap<u8, Vec<(Q, u64)>>,
    /// The quotas the limiter has had.
    quotas: Vec<usize>,
}

impl Model {
    fn ideal(&self) -> Ideal {
        Ideal::of(self.quota)
    }

    fn now(&self) -> Q {
        q(self.now)
    }

    /// The model's decision of `cost` with up to `slack` nanoseconds of
    /// delay: the wait, or the refusal's `retry_after`.
    fn decide(&mut self, key: u8, cost: u64, slack: u64) -> Result<Duration, AcquireError> {
        let ideal = self.ideal();
        if cost > ideal.capacity {
            return Err(AcquireError::ExceedsCapacity {
                cost,
                capacity: ideal.capacity,
            });
        }
        let now = self.now();
        // A decision with a valid cost creates the key's bucket, full, but
        // no fuller than a bucket full at the latest drop.
        let fresh = self.fresh();
        let tat = *self.keys.entry(key).or_insert(fresh);
        let new = tat.max(now) + q(cost) * ideal.interval;
        let limit = now + ideal.tolerance() + q(slack);
        if new > limit {
            return Err(AcquireError::Insufficient {
                retry_after: Duration::from_nanos(ceil_nanos(new - limit)),
            });
        }
        self.keys.insert(key, new);
        let wait = (new - now - ideal.tolerance()).max(q(0));
        self.stretch(key).starts.push((now + wait, cost));
        self.lives.entry(key).or_default().push((now + wait, cost));
        Ok(Duration::from_nanos(ceil_nanos(wait)))
    }

    /// The state a new bucket starts from now.
    fn fresh(&self) -> Q {
        self.dropped
            .map_or(self.now(), |dropped| dropped.max(self.now()))
    }

    fn stretch(&mut self, key: u8) -> &mut Stretch {
        let (now, envelope) = (self.now, self.ideal().envelope);
        self.stretches.entry(key).or_insert_with(|| Stretch {
            from: now,
            envelope,
            starts: Vec::new(),
        })
    }

    fn available(&self, key: u8) -> u64 {
        let ideal = self.ideal();
        let tat = self.keys.get(&key).copied().unwrap_or(self.fresh());
        ideal.available(tat, self.now())
    }

    fn sweep(&mut self) -> usize {
        let now = self.now();
        let before = self.keys.len();
        self.keys.retain(|_, tat| *tat > now);
        let dropped = before - self.keys.len();
        if dropped > 0 {
            self.dropped = Some(self.fresh());
        }
        dropped
    }

    fn set_quota(&mut self, index: usize) {
        let (from, to) = (self.ideal(), Ideal::of(index));
        let now = self.now();
        for tat in self.keys.values_mut().chain(self.dropped.as_mut()) {
            *tat = from.carry(*tat, now, &to);
        }
        for (_, stretch) in self.stretches.drain() {
            stretch.check();
        }
        self.quota = index;
        self.quotas.push(index);
    }

    /// Each key's whole life within the envelope of the largest capacity
    /// and the fastest rate among the quotas it was given.
    fn check_lives(&self) {
        let used = || self.quotas.iter().map(|&i| Ideal::of(i).envelope);
        let capacity = used().map(|e| e.capacity).max().unwrap();
        // The fastest rate: the largest tokens / period.
        let fastest = used()
            .max_by_key(|e| Q::new(i128::from(e.tokens), i128::from(e.period_ns)))
            .unwrap();
        let envelope = Envelope {
            capacity,
            ..fastest
        };
        for life in self.lives.values() {
            let events: Vec<(u64, u64)> = life
                .iter()
                .map(|&(start, tokens)| (ceil_nanos(start), tokens))
                .collect();
            // Start instants are rounded up to the nanosecond: an interval
            // between two of them is at most a nanosecond off.
            envelope.assert_holds_over(&events, 1);
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        key: u8,
        cost: u64,
    },
    Reserve {
        key: u8,
        cost: u64,
        max_wait_ms: u64,
    },
    Advance {
        ms: u64,
    },
    SetQuota {
        index: usize,
    },
    Sweep,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..4u8, 1..12u64).prop_map(|(key, cost)| Op::Acquire { key, cost }),
        3 => (0..4u8, 1..12u64, 0..3000u64)
            .prop_map(|(key, cost, max_wait_ms)| Op::Reserve { key, cost, max_wait_ms }),
        4 => (0..1500u64).prop_map(|ms| Op::Advance { ms }),
        2 => (0..QUOTAS.len()).prop_map(|index| Op::SetQuota { index }),
        1 => Just(Op::Sweep),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn changes_mixed_into_decisions_follow_the_model(
        first in 0..QUOTAS.len(),
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let clock = ManualClock::new();
        let limiter = KeyedLimiter::builder(quota(first))
            .clock(clock.clone())
            .build::<u8>();
        let mut model = Model { quota: first, quotas: vec![first], ..Model::default() };
        for op in ops {
            match op {
                Op::Acquire { key, cost } => {
                    let expected = model.decide(key, cost, 0).map(drop);
                    prop_assert_eq!(limiter.try_acquire(&key, cost), expected, "{:?}", op);
                }
                Op::Reserve { key, cost, max_wait_ms } => {
                    let max_wait = Duration::from_millis(max_wait_ms);
                    let expected = model.decide(key, cost, max_wait_ms * 1_000_000);
                    prop_assert_eq!(limiter.reserve(&key, cost, max_wait), expected, "{:?}", op);
                }
                Op::Advance { ms } => {
                    clock.advance(Duration::from_millis(ms));
                    model.now += ms * 1_000_000;
                }
                Op::SetQuota { index } => {
                    limiter.set_quota(quota(index));
                    model.set_quota(index);
                    prop_assert_eq!(limiter.quota(), quota(index));
                }
                Op::Sweep => {
                    prop_assert_eq!(limiter.sweep(), model.sweep());
                }
            }
            for key in 0..4 {
                prop_assert_eq!(limiter.available(&key), model.available(key), "key {}", key);
            }
        }
        for stretch in model.stretches.values() {
            stretch.check();
        }
        model.check_lives();
    }
}

#[test]
fn a_receipt_from_before_a_change_gives_nothing_back() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(Quota::per_second(10).unwrap())
        .clock(clock.clone())
        .build::<u8>();
    let receipt = Receipt::take(limiter.key(&1), 6).unwrap();
    limiter.set_quota(Quota::per_second(10).unwrap());
    receipt.undo();
    // The same quota again: the 4 tokens left carried over, and the undo
    // of an admission of the old generation added nothing to them.
    assert_eq!(limiter.available(&1), 4);
    // A receipt of the new generation is given back as ever.
    let receipt = Receipt::take(limiter.key(&1), 3).unwrap();
    receipt.undo();
    assert_eq!(limiter.available(&1), 4);
}

#[test]
fn the_overflow_bucket_is_carried_and_its_floors_follow() {
    let limiter = KeyedLimiter::builder(Quota::per_second(10).unwrap())
        .clock(ManualClock::new())
        .max_keys(std::num::NonZeroUsize::MIN.into())
        .at_capacity(tollgate::AtCapacity::SharedOverflow)
        .sweep_interval(None)
        .build::<u8>();
    limiter.try_acquire(&1, 1).unwrap();
    // Key 2 spends 8 of the overflow bucket's 10.
    limiter.try_acquire(&2, 8).unwrap();
    assert_eq!(limiter.table_stats().overflowed, 1);
    limiter.set_quota(Quota::per_second(5).unwrap());
    // 2 tokens were left: both carry over, under the new capacity of 5
    // (3 missing, 200 ms each).
    assert_eq!(
        limiter.try_acquire(&3, 3),
        Err(AcquireError::Insufficient {
            retry_after: Duration::from_millis(200),
        })
    );
    // Key 1 had 9 tokens: 5 carry over, a full bucket, which a sweep drops.
    assert_eq!(limiter.sweep(), 1);
    // Key 2's own bucket starts no fuller than the overflow bucket after
    // its decision, carried: 2 tokens (the floor unconverted would leave 1
    // under the new quota, and no floor at all 5).
    assert_eq!(limiter.available(&2), 2);
    assert!(limiter.try_acquire(&2, 3).is_err());
    limiter.try_acquire(&2, 2).unwrap();
}

#[test]
fn leases_from_before_a_change_are_not_given_back() {
    use tollgate::shared::{LocalStore, Store};
    let clock = ManualClock::new();
    let store = LocalStore::from_limiter(
        KeyedLimiter::builder(Quota::per_second(10).unwrap())
            .clock(clock.clone())
            .build(),
    );
    let before = ready(store.acquire("k", 8)).unwrap();
    store.set_quota(Quota::per_second(10).unwrap());
    ready(store.release("k", before.lease, 8)).unwrap();
    assert_eq!(store.limiter().available("k"), 2);
    clock.advance(Duration::from_millis(100));
    let after = ready(store.acquire("k", 2)).unwrap();
    assert_eq!((after.tokens, after.capacity), (2, 10));
    clock.advance(Duration::from_millis(100));
    // A lease of the new quota comes back by the one rule: held 100 ms of
    // its 200 ms cost, one token's worth, beside the one refilled.
    ready(store.release("k", after.lease, 2)).unwrap();
    assert_eq!(store.limiter().available("k"), 3);
}

/// Polls a future that never waits (every `LocalStore` call is ready at
/// once).
fn ready<T>(future: impl std::future::Future<Output = T>) -> T {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(value) => value,
        std::task::Poll::Pending => panic!("a LocalStore call waited"),
    }
}

/// Deciders on many keys while another thread changes the quota back and
/// forth between 50 and 7 per second: no panic, no deadlock, and on a still
/// clock (no refill) nothing minted. A change carries at most what a key
/// holds, so per key the tokens admitted plus those left are at most the 50
/// it started with, whatever the interleaving, and no key holds more than
/// the last quota's capacity.
#[test]
fn deciders_race_a_changer_on_real_threads() {
    const CHANGES_PER_DECIDER: u64 = 10;
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(Quota::per_second(50).unwrap())
        .clock(clock.clone())
        .build::<u32>();
    let keys = 2000u32;
    let changes = std::sync::atomic::AtomicU64::new(0);
    let quotas = [
        Quota::per_second(50).unwrap(),
        Quota::per_second(7).unwrap(),
    ];
    let admitted = race_beside(
        3,
        20,
        CHANGES_PER_DECIDER,
        |thread, round, admitted: &mut Vec<u64>| {
            admitted.resize(keys as usize, 0);
            for key in 0..keys {
                let key = (key + thread as u32 * 7 + round as u32) % keys;
                if limiter.try_acquire(&key, 1 + u64::from(key % 3)).is_ok() {
                    admitted[key as usize] += 1 + u64::from(key % 3);
                }
            }
        },
        || {
            let n = changes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            limiter.set_quota(quotas[(n % 2) as usize]);
        },
    );
    let changes = changes.into_inner();
    assert!(changes >= CHANGES_PER_DECIDER, "the changer ran");
    let last = limiter.quota();
    assert!(quotas.contains(&last));
    for key in 0..keys {
        let total: u64 = admitted
            .iter()
            .map(|per_thread| per_thread[key as usize])
            .sum();
        // A still clock refills nothing: each stretch spends at most the
        // credit carried into it, itself at most what was left.
        assert!(total <= 50, "key {key}: {total} tokens on a still clock");
        assert!(limiter.available(&key) <= last.capacity());
        assert!(
            limiter.available(&key) + total <= 50,
            "key {key} minted credit"
        );
    }
}

/// How many single tokens `key` gets now, trying until the first refusal.
fn drain<C: tollgate::Clock>(limiter: &KeyedLimiter<u8, C>, key: u8) -> u64 {
    let mut admitted = 0;
    while limiter.try_acquire(&key, 1).is_ok() {
        admitted += 1;
    }
    admitted
}

fn per_second(n: u64) -> Quota {
    Quota::per_second(n).unwrap()
}

/// On a still clock, a key spends 990 of 1000, the capacity drops to 10
/// (its 10 tokens are then a full bucket), a sweep drops it, and the
/// capacity comes back: the key carries the 10 it had, not a fresh 1000.
/// Five such rounds admit 1000 in all, the most any capacity allowed.
#[test]
fn sweeps_between_changes_regain_no_credit() {
    let limiter = KeyedLimiter::builder(per_second(1000))
        .clock(ManualClock::new())
        .build::<u8>();
    limiter.try_acquire(&1, 990).unwrap();
    let mut admitted = 990;
    for _ in 0..5 {
        limiter.set_quota(per_second(10));
        limiter.sweep();
        limiter.set_quota(per_second(1000));
        admitted += drain(&limiter, 1);
    }
    assert_eq!(admitted, 1000);
}

/// The same through a sweep that a new key at the cap runs, and through a
/// key forgotten because a give-back left it full: neither drop lets the
/// key regain what it spent.
#[test]
fn drops_at_the_cap_and_on_give_backs_between_changes_regain_no_credit() {
    let limiter = KeyedLimiter::builder(per_second(1000))
        .clock(ManualClock::new())
        .max_keys(std::num::NonZeroUsize::new(2).unwrap().into())
        .sweep_interval(Some(Duration::ZERO))
        .build::<u8>();
    limiter.try_acquire(&1, 990).unwrap();
    limiter.try_acquire(&2, 1).unwrap();
    limiter.set_quota(per_second(10));
    // Both keys hold 10, full: a new key at the cap sweeps them away.
    limiter.try_acquire(&3, 1).unwrap();
    assert_eq!(limiter.len(), 1);
    limiter.set_quota(per_second(1000));
    assert_eq!(drain(&limiter, 1), 10);

    let limiter = KeyedLimiter::builder(per_second(1000))
        .clock(ManualClock::new())
        .build::<u8>();
    limiter.try_acquire(&1, 990).unwrap();
    limiter.set_quota(per_second(10));
    // A receipt given back leaves the key full: it is forgotten.
    Receipt::take(limiter.key(&1), 1).unwrap().undo();
    assert!(limiter.is_empty());
    limiter.set_quota(per_second(1000));
    assert_eq!(drain(&limiter, 1), 10);
}

/// A `LocalStore` is a keyed limiter: a sweep between two changes gives a
/// lease of the returning key no more than it carried.
#[test]
fn a_local_store_regains_no_credit_through_a_sweep_between_changes() {
    use tollgate::shared::{LocalStore, Store};
    let store = LocalStore::from_limiter(
        KeyedLimiter::builder(per_second(1000))
            .clock(ManualClock::new())
            .build(),
    );
    assert_eq!(ready(store.acquire("k", 990)).unwrap().tokens, 990);
    store.set_quota(per_second(10));
    assert_eq!(store.limiter().sweep(), 1);
    store.set_quota(per_second(1000));
    assert_eq!(ready(store.acquire("k", 1000)).unwrap().tokens, 10);
}

/// The price of the rule above: after a raise of the capacity, a key
/// created while a key dropped before the raise could still be refilling
/// starts as that key would, not full. Here a sweep dropped a full bucket
/// of 10 (10 per second); the capacity is raised to 100 (100 per second):
/// a new key starts with the 10 carried and has its 100 once the 90
/// missing have refilled, 900 ms after the change, and never later.
#[test]
fn after_a_raise_new_keys_start_as_a_dropped_key_would_for_one_refill_at_most() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(per_second(10))
        .clock(clock.clone())
        .build::<u8>();
    limiter.try_acquire(&1, 1).unwrap();
    clock.advance(Duration::from_millis(100));
    assert_eq!(limiter.sweep(), 1);
    clock.advance(Duration::from_secs(5));
    limiter.set_quota(per_second(100));
    assert_eq!(limiter.available(&7), 10);
    clock.advance(Duration::from_millis(899));
    assert_eq!(limiter.available(&7), 99);
    assert_eq!(drain(&limiter, 8), 99);
    clock.advance(Duration::from_millis(1));
    assert_eq!(limiter.available(&7), 100);
    assert_eq!(drain(&limiter, 7), 100);
}

/// And nothing is restricted where no bucket was ever dropped: sweeps that
/// drop nothing, on a still clock at reading zero, and changes down and up
/// leave new keys the full new capacity.
#[test]
fn without_a_drop_a_raise_restricts_no_new_key() {
    let limiter = KeyedLimiter::builder(per_second(1000))
        .clock(ManualClock::new())
        .build::<u8>();
    limiter.try_acquire(&1, 995).unwrap();
    assert_eq!(limiter.sweep(), 0);
    // Key 1 carries 5 of 10: not full, kept.
    limiter.set_quota(per_second(10));
    limiter.try_acquire(&2, 1).unwrap();
    assert_eq!(limiter.sweep(), 0);
    limiter.set_quota(per_second(1000));
    assert_eq!(limiter.available(&3), 1000);
    assert_eq!(drain(&limiter, 3), 1000);
}

/// Under the overflow policy a key that spent from the overflow bucket
/// gets a bucket of its own no fuller than the overflow bucket after its
/// decision: that floor is carried at every change like a state, a full
/// one too (on a still clock at reading zero). Here key 2 spends 990 of
/// the overflow bucket's 1000; the capacity drops to 10 (the floor holds
/// 10, full) and comes back; a place frees, and key 2 starts with the 10
/// it carried, not 1000.
#[test]
fn an_overflow_floor_full_at_a_change_is_carried_not_cleared() {
    let limiter = KeyedLimiter::builder(per_second(1000))
        .clock(ManualClock::new())
        .max_keys(std::num::NonZeroUsize::MIN.into())
        .at_capacity(tollgate::AtCapacity::SharedOverflow)
        .sweep_interval(None)
        .build::<u8>();
    // Key 1 holds the only place, spent, so no change leaves it full.
    limiter.try_acquire(&1, 1000).unwrap();
    limiter.try_acquire(&2, 990).unwrap();
    assert_eq!(limiter.table_stats().overflowed, 1);
    limiter.set_quota(per_second(10));
    limiter.set_quota(per_second(1000));
    // No bucket was dropped so far; now key 1 is, at the new capacity.
    limiter.refund(&1, 1000);
    assert_eq!(limiter.sweep(), 1);
    assert_eq!(limiter.available(&2), 10);
    assert_eq!(drain(&limiter, 2), 10);
}

/// Deciders on many keys while another thread lowers the capacity, sweeps
/// (the keys left with at least the lower capacity are then full, and go),
/// raises it back and sweeps again, over and over, on a still clock: no
/// key ever gets more than the 50 it started with, whatever the
/// interleaving of drops, re-creations and changes. The two sides take
/// turns loosely, by construction: each cycle starts once a decider has
/// finished the pass before it (the other may still be deciding), and each
/// pass once the cycle before it is done.
#[test]
fn sweeps_and_changes_racing_decisions_mint_nothing_on_real_threads() {
    use std::sync::atomic::{AtomicU64, Ordering};
    const ROUNDS: u64 = 30;
    let limiter = KeyedLimiter::builder(per_second(50))
        .clock(ManualClock::new())
        .build::<u32>();
    let keys = 500u32;
    let (cycles, passes, swept) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let wait_for = |what: &str, ready: &dyn Fn() -> bool| {
        while !ready() {
            assert!(std::time::Instant::now() < deadline, "no {what} in 120 s");
            std::thread::yield_now();
        }
    };
    // One round each, which takes its turns with the cycles itself.
    let admitted = race_beside(
        2,
        1,
        0,
        |thread, _, admitted: &mut Vec<u64>| {
            admitted.resize(keys as usize, 0);
            for round in 0..ROUNDS {
                wait_for("cycle", &|| cycles.load(Ordering::Acquire) >= round);
                for key in 0..keys {
                    let key = (key * 7 + thread as u32 * 13 + round as u32) % keys;
                    if limiter.try_acquire(&key, 1 + u64::from(key % 2)).is_ok() {
                        admitted[key as usize] += 1 + u64::from(key % 2);
                    }
                }
                passes.fetch_add(1, Ordering::Release);
            }
        },
        || {
            let cycle = cycles.load(Ordering::Relaxed);
            let last = 2 * ROUNDS;
            wait_for("pass", &|| {
                let passes = passes.load(Ordering::Acquire);
                passes > 2 * cycle || passes == last
            });
            if passes.load(Ordering::Acquire) == last {
                return;
            }
            limiter.set_quota(per_second(7));
            let mut dropped = limiter.sweep();
            limiter.set_quota(per_second(50));
            dropped += limiter.sweep();
            swept.fetch_add(dropped as u64, Ordering::Relaxed);
            cycles.fetch_add(1, Ordering::Release);
        },
    );
    assert!(swept.into_inner() > 0, "no key was swept");
    for key in 0..keys {
        let total: u64 = admitted.iter().map(|per| per[key as usize]).sum();
        let left = limiter.available(&key);
        assert!(
            total + left <= 50,
            "key {key}: {total} admitted, {left} left"
        );
    }
}
