//! Run-time quota changes of a keyed limiter (`KeyedLimiter::set_quota`),
//! against a model kept in exact rationals: every key is an ideal GCRA
//! bucket, and a change converts each tracked key by the continuity rule of
//! `docs/semantics.md` ("Changing a quota"), written here from its statement:
//! whole tokens carry over clipped to the new capacity, a debt keeps the
//! instant it is paid (rounded up to the new tick). Keys the limiter does not
//! track (never seen, or swept once full) start with the new quota's
//! initial credit. The quotas are exact ones with tick units from 1 to 7
//! per nanosecond, so every observable must equal the model's.
//!
//! Beside equality, each constant-quota stretch of each key is held to its
//! quota's envelope: the tokens of the stretch's admissions starting within
//! `[change, s]` are at most `B + r·(s - change)`, for every start `s`.

use std::collections::HashMap;
use std::time::Duration;

use num_rational::Ratio;
use proptest::prelude::*;
use tollgate::{AcquireError, KeyedLimiter, ManualClock, Quota, Receipt};

mod common;
use common::{Envelope, race_beside};

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
    stretches: HashMap<u8, Stretch>,
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
        // A decision with a valid cost creates the key's bucket, full.
        let tat = *self.keys.entry(key).or_insert(now);
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
        Ok(Duration::from_nanos(ceil_nanos(wait)))
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
        self.keys
            .get(&key)
            .map_or(ideal.capacity, |&tat| ideal.available(tat, self.now()))
    }

    fn sweep(&mut self) -> usize {
        let now = self.now();
        let before = self.keys.len();
        self.keys.retain(|_, tat| *tat > now);
        before - self.keys.len()
    }

    fn set_quota(&mut self, index: usize) {
        let (from, to) = (self.ideal(), Ideal::of(index));
        let now = self.now();
        for tat in self.keys.values_mut() {
            *tat = from.carry(*tat, now, &to);
        }
        for (_, stretch) in self.stretches.drain() {
            stretch.check();
        }
        self.quota = index;
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
        let mut model = Model { quota: first, ..Model::default() };
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
        .max_keys(std::num::NonZeroUsize::MIN)
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
