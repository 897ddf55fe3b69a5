//! Attacks on the keyed layer. A client chooses its keys: how many, how
//! long, how they hash, when they arrive, and (through a key type's own
//! code) how they behave. Whatever it chooses, no key gets more than its
//! quota, no key touches another key's spent budget, and the table stays
//! within its bound.

use std::cell::Cell;
use std::fmt::Write as _;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use tollgate::{
    AcquireError, AtCapacity, Clock, HierarchyError, KeyedLimiter, Limit, ManualClock, Quota,
    Tiered, TokenBucket, try_acquire_all,
};

use crate::common::{self, Envelope};

const SECOND: Duration = Duration::from_secs(1);

fn cap(n: usize) -> tollgate::MaxKeys {
    tollgate::MaxKeys::new(n).unwrap()
}

/// How many of `cost`-token admissions `key` gets right now, trying until
/// the first refusal.
fn drain<K, C, S, Q>(limiter: &KeyedLimiter<K, C, S>, key: &Q, cost: u64) -> u64
where
    K: Hash + Eq + Send + std::borrow::Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    C: Clock,
    S: BuildHasher + Clone,
{
    let mut admitted = 0;
    while limiter.try_acquire(key, cost).is_ok() {
        admitted += cost;
    }
    admitted
}

/// A client's key as long as a request path may be: `len` bytes, distinct
/// per `id` in its first bytes (the rest is padding an attacker controls).
fn long_key(id: u64, len: usize) -> String {
    let mut key = String::with_capacity(len);
    write!(key, "/{id:016x}/").unwrap();
    while key.len() < len {
        key.push('a');
    }
    key
}

/// A flood of new keys at the cap, under [`AtCapacity::Deny`], neither
/// evicts nor refreshes a tracked key's spent budget: automatic sweeps drop
/// the flood's own refilled keys, and the victim's bucket, never full, is
/// kept with its debt to the tick.
#[test]
fn a_flood_at_the_cap_never_refreshes_a_spent_key_under_deny() {
    let clock = ManualClock::new();
    // Three tokens, one a second: the victim is full again three seconds
    // after spending all three; a flood key spending one, after one.
    let limiter = KeyedLimiter::builder(Quota::new(3, 1, SECOND).unwrap())
        .clock(clock.clone())
        .max_keys(cap(8))
        .at_capacity(AtCapacity::Deny)
        .sweep_interval(Some(Duration::from_millis(100)))
        .build::<String>();
    let victim = "victim".to_owned();
    assert_eq!(drain(&limiter, victim.as_str(), 1), 3);
    let (mut admitted, mut refused) = (0, 0);
    for i in 0..2_500u64 {
        match limiter.try_acquire(long_key(i, 64).as_str(), 1) {
            Ok(()) => admitted += 1,
            Err(AcquireError::TooManyKeys { max_keys: 8 }) => refused += 1,
            Err(other) => panic!("{other:?}"),
        }
        clock.advance(Duration::from_millis(1));
    }
    let table = limiter.table_stats();
    assert!(
        table.evicted > 0 && refused > 0,
        "the flood met no cap: {table:?}"
    );
    assert!(admitted < 2_500);
    // 2.5 s after spending three, the victim has refilled two, not three.
    assert_eq!(limiter.available(victim.as_str()), 2);
    assert!(limiter.try_acquire(victim.as_str(), 3).is_err());
    assert_eq!(drain(&limiter, victim.as_str(), 1), 2);
}

/// Under [`AtCapacity::SharedOverflow`], a flood of new keys at the cap
/// shares one key's budget between all of its keys, and neither evicts nor
/// refreshes a tracked key's spent budget.
#[test]
fn a_flood_at_the_cap_shares_one_budget_and_refreshes_no_spent_key_under_overflow() {
    let clock = ManualClock::new();
    clock.set(SECOND);
    let limiter = KeyedLimiter::builder(Quota::new(3, 1, SECOND).unwrap())
        .clock(clock.clone())
        .max_keys(cap(8))
        .at_capacity(AtCapacity::SharedOverflow)
        .build::<String>();
    assert_eq!(drain(&limiter, "victim", 1), 3);
    // A frozen clock: seven flood keys fill the table, the rest share the
    // overflow bucket's three tokens.
    let admitted: u64 = (0..10_000u64)
        .map(|i| u64::from(limiter.try_acquire(long_key(i, 4096).as_str(), 1).is_ok()))
        .sum();
    assert_eq!(admitted, 7 + 3);
    assert_eq!(limiter.table_stats().overflowed, 3);
    assert_eq!(limiter.available("victim"), 0);
    // Half a second on: the flood's keys still hold debt, so a sweep drops
    // nothing and the victim has refilled nothing whole.
    clock.advance(SECOND / 2);
    assert_eq!(limiter.sweep(), 0);
    assert_eq!(drain(&limiter, "victim", 1), 0);
}

/// The default hasher is keyed per limiter from OS randomness: a key set
/// crafted to collide in one limiter's shards and buckets does not collide
/// in another's, so hash flooding cannot be prepared offline.
#[test]
fn two_limiters_hash_the_same_keys_differently() {
    let quota = Quota::per_second(1).unwrap();
    let a = KeyedLimiter::<u64>::new(quota);
    let b = KeyedLimiter::<u64>::new(quota);
    for key in 0..64u64 {
        assert_ne!(
            a.hasher().hash_one(key),
            b.hasher().hash_one(key),
            "key {key}"
        );
    }
}

/// A hasher that sends every key to one shard and one bucket chain, as a
/// successful hash-flooding attack would.
#[derive(Default)]
struct Colliding;

impl Hasher for Colliding {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, _: &[u8]) {}
}

/// Keys that all collide in the table's hasher still get one budget each:
/// a collision costs probing time, never a merged budget, because keys are
/// told apart by equality, and long keys by their own keyed fingerprint.
#[test]
fn keys_colliding_in_the_hasher_keep_one_budget_each() {
    let limiter = KeyedLimiter::builder(Quota::per_second(2).unwrap())
        .clock(ManualClock::new())
        .hasher(BuildHasherDefault::<Colliding>::default())
        .build::<String>();
    let keys: Vec<String> = (0..200)
        .map(|i| {
            if i % 2 == 0 {
                format!("k{i}")
            } else {
                long_key(i, 1024)
            }
        })
        .collect();
    for key in &keys {
        assert_eq!(
            drain(&limiter, key.as_str(), 1),
            2,
            "{}",
            &key[..20.min(key.len())]
        );
    }
    assert_eq!(limiter.len(), keys.len());
}

/// Long keys that differ in one byte, anywhere, or only in length, keep
/// separate budgets, and a long key keeps its budget whether it is looked
/// up owned or borrowed: storing keys as fingerprints merges nothing.
#[test]
fn long_keys_differing_in_one_byte_keep_separate_budgets() {
    let limiter = KeyedLimiter::builder(Quota::per_second(2).unwrap())
        .clock(ManualClock::new())
        .build::<String>();
    let base = long_key(0, 65_536);
    let mut keys = vec![
        base.clone(),
        format!("{base}a"),
        base[..base.len() - 1].to_owned(),
    ];
    for at in [0, 1, 4_095, 32_768, 65_535] {
        let mut key = base.clone().into_bytes();
        key[at] ^= 1;
        keys.push(String::from_utf8(key).unwrap());
    }
    for key in &keys {
        assert_eq!(limiter.try_acquire(key, 1), Ok(()));
        assert_eq!(limiter.try_acquire(key.as_str(), 1), Ok(()));
        assert!(limiter.try_acquire(&key.clone(), 1).is_err());
    }
    assert_eq!(limiter.len(), keys.len());
}

/// Keys on either side of the length past which keys are stored as
/// fingerprints are distinct keys with distinct budgets, and each is found
/// again on its side.
#[test]
fn keys_on_either_side_of_the_exact_length_keep_separate_budgets() {
    let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap())
        .clock(ManualClock::new())
        .build::<String>();
    let bound = limiter.max_exact_key_bytes();
    // A string writes its bytes and one terminator to a hasher.
    let keys: Vec<String> = (bound.saturating_sub(3)..bound + 3)
        .map(|len| "k".repeat(len))
        .collect();
    for key in &keys {
        assert_eq!(limiter.try_acquire(key.as_str(), 1), Ok(()));
    }
    for key in &keys {
        assert!(
            limiter.try_acquire(key.as_str(), 1).is_err(),
            "{} bytes",
            key.len()
        );
    }
    assert_eq!(limiter.len(), keys.len());
}

/// Sweeps racing decisions, refused hierarchies (whose undo may drop a
/// bucket it left full) and creations, on short and long keys alike, on a
/// frozen clock: every key admits exactly its capacity. A spent bucket is
/// never dropped, and a dropped one never comes back fuller.
#[test]
fn sweeps_and_undos_racing_decisions_admit_exactly_the_capacity() {
    const CAPACITY: u64 = 12;
    const SWEEPS_PER_WORKER: u64 = 20;
    let keys: Vec<String> = (0..24u64)
        .map(|i| {
            if i % 2 == 0 {
                format!("short-{i}")
            } else {
                long_key(i, 300)
            }
        })
        .collect();
    for threads in [2usize, 4] {
        let clock = ManualClock::new();
        clock.set(SECOND * 5);
        let limiter = KeyedLimiter::builder(Quota::per_second(CAPACITY).unwrap())
            .clock(clock.clone())
            .build::<String>();
        let closed = TokenBucket::with_clock(Quota::per_second(1).unwrap(), clock.clone());
        closed.try_acquire(1).unwrap();
        let per_thread = common::race_beside(
            threads,
            CAPACITY,
            SWEEPS_PER_WORKER,
            |i, _, admitted: &mut Vec<u64>| {
                admitted.resize(keys.len(), 0);
                for (k, key) in keys.iter().enumerate() {
                    if i % 2 == 1 {
                        // Taken from the key, then undone: the second
                        // step is always refused.
                        let limit = limiter.key(key.as_str());
                        assert!(try_acquire_all(&[limit.cost(1), closed.cost(1)]).is_err());
                    }
                    if limiter.try_acquire(key.as_str(), 1).is_ok() {
                        admitted[k] += 1;
                    }
                }
            },
            || {
                limiter.sweep();
            },
        );
        for (k, key) in keys.iter().enumerate() {
            let total: u64 = per_thread.iter().map(|tally| tally[k]).sum();
            assert_eq!(
                total,
                CAPACITY,
                "{threads} threads, key of {} bytes",
                key.len()
            );
        }
        assert_eq!(limiter.len(), keys.len());
    }
}

/// A clock jumping far forward makes every bucket full, and one sweep drops
/// them all; every key then gets its capacity once, not more: the jump
/// refills a bucket to full and no further.
#[test]
fn a_forward_clock_jump_sweeps_every_key_and_refills_none_past_full() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(Quota::per_second(3).unwrap())
        .clock(clock.clone())
        .build::<String>();
    let keys: Vec<String> = (0..100)
        .map(|i| long_key(i, 200 * (i as usize % 3)))
        .collect();
    for key in &keys {
        assert_eq!(drain(&limiter, key.as_str(), 1), 3);
    }
    clock.advance(Duration::from_secs(100 * 365 * 24 * 3600));
    assert_eq!(limiter.sweep(), keys.len());
    assert!(limiter.is_empty());
    for key in &keys {
        assert_eq!(drain(&limiter, key.as_str(), 1), 3);
    }
    // At the end of the clock's range time stops: every bucket is full and
    // swept, but nothing is admitted any more, and nothing panics.
    clock.advance(Duration::MAX);
    assert_eq!(limiter.sweep(), keys.len());
    for key in &keys {
        assert_eq!(drain(&limiter, key.as_str(), 1), 0);
    }
}

/// A clock going backwards credits no key, tracked or new: tracked buckets
/// keep their debt, and a key created after a sweep starts no fuller than a
/// bucket full at the sweep's time, even if it was never seen before.
#[test]
fn a_backward_clock_jump_credits_no_key() {
    for policy in [AtCapacity::Deny, AtCapacity::SharedOverflow] {
        let clock = ManualClock::new();
        let limiter = KeyedLimiter::builder(Quota::per_second(2).unwrap())
            .clock(clock.clone())
            .max_keys(cap(4))
            .at_capacity(policy)
            .build::<String>();
        clock.set(SECOND * 100);
        let spent = long_key(1, 100);
        assert_eq!(drain(&limiter, spent.as_str(), 1), 2);
        clock.set(SECOND * 50);
        assert_eq!(limiter.available(spent.as_str()), 0);
        assert_eq!(drain(&limiter, spent.as_str(), 1), 0);
        // Forward past the refill, a sweep drops the spent key; back again,
        // neither it nor a key never seen has credit until the clock is
        // back where the sweep ran.
        clock.set(SECOND * 200);
        assert_eq!(limiter.sweep(), 1);
        clock.set(SECOND * 150);
        for key in [spent.as_str(), "never-seen", &long_key(2, 5_000)] {
            assert_eq!(limiter.available(key), 0, "{policy:?}");
            assert_eq!(drain(&limiter, key, 1), 0, "{policy:?}");
        }
        // Once the clock is back there, the dropped key has its capacity
        // again, as its twin would have.
        clock.set(SECOND * 200);
        assert_eq!(drain(&limiter, spent.as_str(), 1), 2);
    }
}

/// A [`Tiered`] resolver answering any index, `usize::MAX` included, picks
/// a tier (past the end: the last, most restrictive one), and tiers with
/// extreme quotas (a huge burst, a century's refill) decide exactly and
/// refuse what never fits with a typed error.
#[test]
fn tiered_resolvers_with_extreme_answers_and_quotas_stay_exact() {
    let clock = ManualClock::new();
    let century = Duration::from_secs(100 * 365 * 24 * 3600);
    // The largest burst a quota can have: a full refill spans half the
    // tick range.
    const HUGE: u64 = u64::MAX / 2;
    let tiers = Tiered::new(
        [
            KeyedLimiter::builder(Quota::new(HUGE, 1, Duration::from_nanos(1)).unwrap())
                .clock(clock.clone())
                .build(),
            KeyedLimiter::builder(Quota::new(1, 1, century).unwrap())
                .clock(clock.clone())
                .build(),
        ],
        |key: &u64| if *key == 0 { 0 } else { usize::MAX },
    );
    assert_eq!(tiers.try_acquire(&0, HUGE), Ok(()));
    assert!(tiers.try_acquire(&0, 1).is_err());
    assert_eq!(
        tiers.try_acquire(&0, u64::MAX),
        Err(AcquireError::ExceedsCapacity {
            cost: u64::MAX,
            capacity: HUGE
        })
    );
    for key in [1, u64::MAX] {
        assert_eq!(tiers.tier(&key).quota().capacity(), 1);
        assert_eq!(tiers.try_acquire(&key, 1), Ok(()));
        assert!(tiers.try_acquire(&key, 1).is_err());
    }
    clock.advance(century / 2);
    assert!(tiers.try_acquire(&1, 1).is_err());
    clock.advance(century / 2);
    assert_eq!(tiers.try_acquire(&1, 1), Ok(()));
}

/// A cost of `u64::MAX` (or zero) on any keyed entry point gets a typed
/// refusal, creates no key and spends nothing; `refund(u64::MAX)`, the
/// caller's own trusted give-back, fills a bucket and no further.
#[test]
fn extreme_costs_get_typed_refusals_and_create_no_key() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(Quota::per_second(4).unwrap())
        .clock(clock.clone())
        .build::<String>();
    let too_much = Err(AcquireError::ExceedsCapacity {
        cost: u64::MAX,
        capacity: 4,
    });
    for key in ["short".to_owned(), long_key(9, 10_000)] {
        let key = key.as_str();
        let tracked = limiter.len();
        assert_eq!(limiter.try_acquire(key, u64::MAX), too_much);
        assert_eq!(
            limiter.reserve(key, u64::MAX, Duration::MAX).map(drop),
            too_much
        );
        assert_eq!(limiter.retry_after(key, u64::MAX).map(drop), too_much);
        assert_eq!(limiter.try_acquire(key, 0), Err(AcquireError::ZeroCost));
        assert_eq!(
            try_acquire_all(&[limiter.key(key).cost(u64::MAX)]).map_err(|refused| match refused {
                HierarchyError::Refused { error, .. } => error,
                other => panic!("{other:?}"),
            }),
            too_much
        );
        assert_eq!(limiter.len(), tracked);
        assert_eq!(drain(&limiter, key, 1), 4);
        limiter.refund(key, u64::MAX);
        assert_eq!(limiter.available(key), 4);
        assert_eq!(drain(&limiter, key, 1), 4);
    }
}

thread_local! {
    /// Calls of [`Fragile`]'s `clone`, `hash` or `eq` left on this thread
    /// before one panics; `None` when disarmed.
    static FUSE: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Makes the `calls`-th call of [`Fragile`]'s `clone`, `hash` or `eq` on
/// this thread panic.
fn arm(calls: u32) {
    FUSE.with(|fuse| fuse.set(Some(calls)));
}

/// Disarms the fuse; whether it had blown.
fn disarm() -> bool {
    FUSE.with(|fuse| fuse.replace(None)) == Some(0)
}

fn burn() {
    FUSE.with(|fuse| match fuse.get() {
        Some(0) => {}
        Some(1) => {
            fuse.set(Some(0));
            panic!("a key's own code failed");
        }
        Some(n) => fuse.set(Some(n - 1)),
        None => {}
    });
}

/// A key whose `Clone`, `Hash` and `Eq` fail on the n-th call once armed,
/// as a key type with a bug deep in its own code would. Every key hashes
/// alike, so that lookups compare keys (and run `eq`) too.
#[derive(Debug)]
struct Fragile(u32);

impl Clone for Fragile {
    fn clone(&self) -> Self {
        burn();
        Fragile(self.0)
    }
}

impl Hash for Fragile {
    fn hash<H: Hasher>(&self, state: &mut H) {
        burn();
        0u8.hash(state);
    }
}

impl PartialEq for Fragile {
    fn eq(&self, other: &Self) -> bool {
        burn();
        self.0 == other.0
    }
}

impl Eq for Fragile {}

/// A decision on a new key whose `Clone`, `Hash` or `Eq` panics at any
/// point of the decision, under either policy, leaves no phantom key
/// behind: the cap is not filled by keys that were never inserted, every
/// lock is released, and every other key keeps its budget.
#[test]
fn a_key_panicking_mid_creation_leaves_no_phantom_key() {
    for policy in [AtCapacity::Deny, AtCapacity::SharedOverflow] {
        for calls in 1..=12 {
            let clock = ManualClock::new();
            let limiter = KeyedLimiter::builder(Quota::per_second(2).unwrap())
                .clock(clock.clone())
                .max_keys(cap(3))
                .at_capacity(policy)
                .build::<Fragile>();
            assert_eq!(drain(&limiter, &Fragile(1), 1), 2);
            arm(calls);
            let outcome = catch_unwind(AssertUnwindSafe(|| limiter.try_acquire(&Fragile(2), 1)));
            let blew = disarm();
            assert_eq!(outcome.is_err(), blew, "{policy:?}, call {calls}");
            // The other key is untouched, the panicking one no richer.
            assert_eq!(drain(&limiter, &Fragile(1), 1), 0);
            let spent = u64::from(matches!(outcome, Ok(Ok(()))));
            assert!(drain(&limiter, &Fragile(2), 1) + spent <= 2);
            // Once every bucket is full, a sweep empties the table: no
            // count of a key that never went in is left holding the cap.
            clock.advance(SECOND * 10);
            limiter.sweep();
            assert_eq!(limiter.len(), 0, "{policy:?}, call {calls}");
            for key in 10..13 {
                assert_eq!(
                    limiter.try_acquire(&Fragile(key), 1),
                    Ok(()),
                    "{policy:?}, call {calls}"
                );
            }
        }
    }
}

/// A key that spent from the shared overflow bucket, and whose `Clone`,
/// `Hash` or `Eq` panicked at any point of that decision, still gets a
/// bucket of its own no fuller than the overflow bucket it spent from: a
/// panic after the admission cannot skip the record that stops the key from
/// minting.
#[test]
fn a_key_panicking_mid_overflow_decision_mints_nothing() {
    let envelope = Envelope {
        capacity: 2,
        tokens: 2,
        period_ns: 1_000_000_000,
    };
    for calls in 1..=12 {
        let clock = ManualClock::new();
        let limiter = KeyedLimiter::builder(Quota::per_second(2).unwrap())
            .clock(clock.clone())
            .max_keys(cap(2))
            .at_capacity(AtCapacity::SharedOverflow)
            .sweep_interval(None)
            .build::<Fragile>();
        // Two keys fill the table: one spent, one that will be full again in
        // half a second.
        assert_eq!(drain(&limiter, &Fragile(1), 1), 2);
        assert_eq!(limiter.try_acquire(&Fragile(2), 1), Ok(()));
        // The new key spends the whole overflow bucket, perhaps panicking.
        arm(calls);
        let outcome = catch_unwind(AssertUnwindSafe(|| limiter.try_acquire(&Fragile(3), 2)));
        disarm();
        // Whether it spent: a probe from another new key finds the overflow
        // bucket empty.
        let spent = match outcome {
            Ok(Ok(())) => 2,
            Ok(Err(_)) => 0,
            Err(_) if limiter.try_acquire(&Fragile(4), 1).is_err() => 2,
            Err(_) => 0,
        };
        // Half a second on, a sweep drops the refilled key and makes room.
        clock.advance(SECOND / 2);
        assert_eq!(limiter.sweep(), 1);
        let later = drain(&limiter, &Fragile(3), 1);
        assert!(
            envelope.admits(u128::from(spent + later), 500_000_000),
            "call {calls}: {spent} from the overflow bucket, then {later} of its own"
        );
    }
}
