//! Keyed shared budgets over the in-process store on tokio's paused clock:
//! the per-key bound across nodes under random interleavings, the switch
//! between cold and hot both ways, the bounds on local state, and each key
//! on its own.

#![cfg(feature = "tokio")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::shared::{
    AllowanceConfig, FailurePolicy, Grant, KeyedAllowance, KeyedAllowanceConfig, Lease, LocalStore,
    Source, Store, store_key,
};
use tollgate::{AcquireError, Clock, KeyedLimiter, Quota};

mod common;
use common::Envelope;

/// The store's clock: tokio's, so that the paused clock drives refill,
/// leases, samples and the envelope alike.
#[derive(Clone, Copy, Debug)]
struct TokioClock(tokio::time::Instant);

impl Clock for TokioClock {
    fn now_nanos(&self) -> u64 {
        let since = tokio::time::Instant::now().duration_since(self.0);
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A `LocalStore` that keeps per-key books: tokens it reported granting
/// and tokens it was sent back; and that can be made to fail.
#[derive(Debug)]
struct Ledger {
    inner: LocalStore<TokioClock>,
    clock: TokioClock,
    failing: AtomicBool,
    calls: AtomicU64,
    /// `acquire_many` calls: round trips for batched refills.
    batches: AtomicU64,
    books: Mutex<HashMap<String, (u64, u64)>>,
}

#[derive(Debug, thiserror::Error)]
#[error("store unreachable")]
struct Unreachable;

impl Ledger {
    /// Must be called inside the paused runtime: its epoch is now.
    fn new(quota: Quota) -> Arc<Self> {
        let clock = TokioClock(tokio::time::Instant::now());
        Arc::new(Ledger {
            inner: LocalStore::from_limiter(KeyedLimiter::builder(quota).clock(clock).build()),
            clock,
            failing: AtomicBool::new(false),
            calls: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            books: Mutex::new(HashMap::new()),
        })
    }

    /// `(granted, sent back)` for the store key `name`.
    fn books(&self, name: &str) -> (u64, u64) {
        self.books
            .lock()
            .unwrap()
            .get(name)
            .copied()
            .unwrap_or((0, 0))
    }

    fn available(&self, name: &str) -> u64 {
        self.inner.limiter().available(name)
    }
}

impl Store for Ledger {
    type Error = Unreachable;

    async fn acquire(&self, key: &str, want: u64) -> Result<Grant, Unreachable> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(Unreachable);
        }
        let grant = self
            .inner
            .acquire(key, want)
            .await
            .map_err(|_| Unreachable)?;
        self.books
            .lock()
            .unwrap()
            .entry(key.to_owned())
            .or_default()
            .0 += grant.tokens;
        Ok(grant)
    }

    async fn acquire_many<'a>(
        &'a self,
        requests: &'a [(&'a str, u64)],
    ) -> Vec<Result<Grant, Unreachable>> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        let mut grants = Vec::with_capacity(requests.len());
        for &(key, want) in requests {
            grants.push(self.acquire(key, want).await);
        }
        grants
    }

    async fn release(&self, key: &str, lease: Lease, unused: u64) -> Result<(), Unreachable> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(Unreachable);
        }
        self.books
            .lock()
            .unwrap()
            .entry(key.to_owned())
            .or_default()
            .1 += unused;
        self.inner
            .release(key, lease, unused)
            .await
            .map_err(|_| Unreachable)
    }
}

/// Small thresholds and pools, so that a few steps switch keys.
fn config(policy: FailurePolicy) -> KeyedAllowanceConfig {
    KeyedAllowanceConfig {
        allowance: AllowanceConfig {
            max_lease: 10,
            idle_return: Some(Duration::from_millis(200)),
            ..AllowanceConfig::new(policy)
        },
        hot_at: 30,
        cold_below: 10,
        sample_every: Duration::from_millis(50),
        max_keys: 64,
        max_hot_keys: 8,
        forget_after: Duration::from_millis(500),
        ..KeyedAllowanceConfig::new(policy)
    }
}

/// Lets spawned cold calls, refills and returns run on the current-thread
/// runtime.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

/// SplitMix64: a seeded, reproducible interleaving.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[tokio::test(start_paused = true)]
async fn cold_keys_take_one_store_decision_each_and_lease_nothing() {
    let store = Ledger::new(Quota::per_second(10).unwrap());
    let node = KeyedAllowance::new(Arc::clone(&store), config(FailurePolicy::Closed)).unwrap();
    for i in 0..100 {
        let key = format!("client-{i}");
        assert_eq!(node.try_acquire(&key, 1), Err(AcquireError::NotLocal));
        assert_eq!(
            node.acquire(&key, 3, Duration::ZERO).await,
            Ok(Source::Lease)
        );
        assert_eq!(store.books(&key), (3, 0));
        assert_eq!(store.available(&key), 7);
    }
    let stats = node.stats();
    assert_eq!(store.calls.load(Ordering::SeqCst), 100);
    assert_eq!((stats.cold_calls, stats.cold_admitted), (100, 300));
    assert_eq!((stats.hot_keys, stats.hot.leased), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_grant_short_of_the_cost_is_given_back_and_the_request_refused() {
    let store = Ledger::new(Quota::per_second(5).unwrap());
    let node = KeyedAllowance::new(Arc::clone(&store), config(FailurePolicy::Closed)).unwrap();
    assert_eq!(
        node.acquire("k", 3, Duration::ZERO).await,
        Ok(Source::Lease)
    );
    // Two tokens left: the store grants them, the node gives them back.
    let refused = node.acquire("k", 3, Duration::ZERO).await;
    // The wait is the refill of the missing token: 200 ms at 5 a second.
    assert_eq!(
        refused,
        Err(AcquireError::Insufficient {
            retry_after: Duration::from_millis(200)
        })
    );
    assert_eq!(store.books("k"), (5, 2));
    assert_eq!(store.available("k"), 2);
    let stats = node.stats();
    assert_eq!(
        (stats.cold_refused, stats.returned, stats.stranded),
        (1, 2, 0)
    );
    // The two tokens are there for a request that fits them.
    assert_eq!(
        node.acquire("k", 2, Duration::ZERO).await,
        Ok(Source::Lease)
    );
    // Above the capacity: told so, and nothing kept.
    let too_large = node.acquire("k", 6, Duration::ZERO).await;
    assert_eq!(
        too_large,
        Err(AcquireError::ExceedsCapacity {
            cost: 6,
            capacity: 5
        })
    );
    assert_eq!(node.try_acquire("k", 6), too_large.map(|_| Source::Lease));
}

#[tokio::test(start_paused = true)]
async fn a_cold_acquire_waits_for_the_stores_retry_after_within_max_wait() {
    let store = Ledger::new(Quota::per_second(10).unwrap());
    let node = KeyedAllowance::new(Arc::clone(&store), config(FailurePolicy::Closed)).unwrap();
    assert_eq!(
        node.acquire("k", 10, Duration::ZERO).await,
        Ok(Source::Lease)
    );
    let start = tokio::time::Instant::now();
    assert_eq!(
        node.acquire("k", 1, Duration::from_millis(150)).await,
        Ok(Source::Lease)
    );
    // One token refills in 100 ms; the retry comes then or within half
    // that again (jitter), never before.
    let waited = start.elapsed();
    assert!(
        (Duration::from_millis(100)..=Duration::from_millis(150)).contains(&waited),
        "{waited:?}"
    );
    assert_eq!(store.books("k"), (11, 0));
}

/// Demand drives a key hot (served from a pool, no store call per
/// request) and, once it falls, cold again, its pool given back.
#[tokio::test(start_paused = true)]
async fn a_key_goes_hot_with_demand_and_cold_again_without() {
    let store = Ledger::new(Quota::per_second(1000).unwrap());
    let node = KeyedAllowance::new(Arc::clone(&store), config(FailurePolicy::Closed)).unwrap();
    let mut admitted = 0u64;
    // 100 a second, against a threshold of 30.
    for _ in 0..100 {
        if node
            .acquire("busy", 1, Duration::from_millis(5))
            .await
            .is_ok()
        {
            admitted += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(node.is_hot("busy"));
    assert!(!node.is_hot("quiet"));
    let stats = node.stats();
    assert_eq!((stats.became_hot, stats.hot_keys), (1, 1));
    // Once hot, requests are served from leases, not a store call each.
    assert!(stats.cold_calls < 40, "{stats:?}");
    assert!(stats.hot.leases < 60, "{stats:?}");
    let calls_then = store.calls.load(Ordering::SeqCst);
    for _ in 0..20 {
        if node.try_acquire("busy", 1).is_ok() {
            admitted += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(store.calls.load(Ordering::SeqCst) - calls_then < 20);
    // Silence: cold again within a few samples, and the pool given back.
    tokio::time::sleep(Duration::from_millis(400)).await;
    settle().await;
    assert!(!node.is_hot("busy"));
    assert_eq!(node.try_acquire("busy", 1), Err(AcquireError::NotLocal));
    let stats = node.stats();
    assert_eq!(stats.became_cold, 1);
    let (granted, sent_back) = store.books(&store_key("busy"));
    assert_eq!(admitted + sent_back, granted, "{stats:?}");
    assert_eq!(node.pooled("busy"), 0);
}

/// Many nodes, many keys, random interleavings of every operation: per
/// key, what the nodes admitted never exceeds `B + r·t` on the store's
/// clock, and never exceeds what the store granted less what it was sent
/// back.
#[tokio::test(start_paused = true)]
async fn nodes_and_keys_in_random_interleavings_stay_within_each_keys_envelope() {
    let (capacity, rate) = (20, 200);
    let envelope = Envelope {
        capacity,
        tokens: rate,
        period_ns: 1_000_000_000,
    };
    for seed in 0..6 {
        let store = Ledger::new(Quota::new(capacity, rate, Duration::from_secs(1)).unwrap());
        let mut rng = Rng(seed);
        let new_node = || KeyedAllowance::new(Arc::clone(&store), config(FailurePolicy::Closed));
        let mut nodes: Vec<_> = (0..4).map(|_| new_node().unwrap()).collect();
        let keys: Vec<String> = (0..12).map(|i| format!("tenant-{i}")).collect();
        let mut admitted: HashMap<&str, u64> = HashMap::new();
        for _step in 0..3000 {
            let node = rng.below(nodes.len() as u64) as usize;
            // Skewed: low indices are asked for far more often.
            let key = &keys[rng.below(12).min(rng.below(12)) as usize];
            let cost = 1 + rng.below(3);
            let outcome = match rng.below(12) {
                0..=4 => nodes[node].try_acquire(key, cost),
                5..=7 => {
                    let wait = Duration::from_millis(rng.below(3) * 10);
                    nodes[node].acquire(key, cost, wait).await
                }
                8..=9 => {
                    tokio::time::sleep(Duration::from_micros(rng.below(5000))).await;
                    continue;
                }
                10 => {
                    settle().await;
                    continue;
                }
                _ => {
                    match rng.below(3) {
                        0 => {
                            nodes[node].shutdown().await;
                        }
                        1 => nodes[node] = new_node().unwrap(),
                        _ => settle().await,
                    }
                    continue;
                }
            };
            if outcome == Ok(Source::Lease) {
                *admitted.entry(key).or_default() += cost;
            }
            let elapsed = store.clock.now_nanos();
            for (&key, &spent) in &admitted {
                assert!(
                    envelope.admits(u128::from(spent), elapsed),
                    "seed {seed}: {key} admitted {spent} in {elapsed} ns"
                );
                let (granted, sent_back) = store.books(key);
                assert!(spent + sent_back <= granted, "seed {seed}: {key}");
            }
        }
        // Keys went hot, and the busiest admitted most of its envelope.
        let hot: u64 = nodes.iter().map(|n| n.stats().became_hot).sum();
        assert!(hot > 0, "seed {seed}: no key went hot");
        let elapsed = store.clock.now_nanos();
        let allowed = capacity + rate * elapsed / 1_000_000_000;
        assert!(
            admitted[keys[0].as_str()] * 2 >= allowed,
            "seed {seed}: {} of {allowed}",
            admitted[keys[0].as_str()]
        );
    }
}

/// At the key cap a new key is served cold and untracked: never refused
/// for want of local room, since the store decides it.
#[tokio::test(start_paused = true)]
async fn keys_past_the_cap_are_served_cold_and_untracked() {
    let store = Ledger::new(Quota::per_second(5).unwrap());
    let config = KeyedAllowanceConfig {
        max_keys: 10,
        ..config(FailurePolicy::Closed)
    };
    let node = KeyedAllowance::new(Arc::clone(&store), config).unwrap();
    for i in 0..100 {
        let key = format!("k{i}");
        assert_eq!(
            node.acquire(&key, 5, Duration::ZERO).await,
            Ok(Source::Lease)
        );
        // Its budget is the store's, tracked or not.
        assert!(node.acquire(&key, 1, Duration::ZERO).await.is_err());
    }
    let stats = node.stats();
    assert_eq!((stats.tracked_keys, stats.untracked), (10, 180));
    assert_eq!(store.calls.load(Ordering::SeqCst), 200);
}

/// A million distinct keys through one node: local state stays within the
/// key cap and the byte bound, and nothing panics.
#[tokio::test(start_paused = true)]
async fn a_flood_of_a_million_keys_keeps_local_state_bounded() {
    let store = Ledger::new(Quota::per_second(1).unwrap());
    let config = KeyedAllowanceConfig {
        max_keys: 100_000,
        max_bytes: 64 << 10,
        ..config(FailurePolicy::Closed)
    };
    let node = KeyedAllowance::new(Arc::clone(&store), config).unwrap();
    let long = "x".repeat(100);
    let mut key = String::new();
    for i in 0..1_000_000u32 {
        key.clear();
        key.push_str(if i % 2 == 0 { "short-" } else { &long });
        key.push_str(&i.to_string());
        assert_eq!(node.try_acquire(&key, 1), Err(AcquireError::NotLocal));
        if i % 10 == 0 {
            assert!(node.acquire(&key, 1, Duration::ZERO).await.is_ok());
            let stats = node.stats();
            assert!(stats.tracked_bytes <= 64 << 10, "{stats:?}");
        }
    }
    let stats = node.stats();
    assert!(
        stats.tracked_keys > 0 && stats.tracked_bytes <= 64 << 10,
        "{stats:?}"
    );
    assert_eq!(stats.tracked_keys + stats.untracked, 100_000);
}

/// Keys with braces, NUL, the fingerprint's own prefix or a megabyte of
/// bytes each have their own budget, and hold it.
#[tokio::test(start_paused = true)]
async fn hostile_keys_each_get_their_own_budget_and_no_more() {
    let store = Ledger::new(Quota::per_second(3).unwrap());
    let node = KeyedAllowance::new(Arc::clone(&store), config(FailurePolicy::Closed)).unwrap();
    let megabyte = "{".repeat(1 << 20);
    let mut megabyte_too = megabyte.clone();
    megabyte_too.push('}');
    let keys = [
        "",
        "{",
        "}{",
        "{tenant}",
        "a\0b",
        "a\0c",
        "~sha256:",
        megabyte.as_str(),
        megabyte_too.as_str(),
    ];
    for key in keys {
        assert_eq!(
            node.acquire(key, 3, Duration::ZERO).await,
            Ok(Source::Lease)
        );
        assert!(matches!(
            node.acquire(key, 1, Duration::ZERO).await,
            Err(AcquireError::Insufficient { .. })
        ));
    }
    assert_eq!(store.books.lock().unwrap().len(), keys.len());
    // The long keys are named by 72-byte fingerprints, not a megabyte.
    assert!(
        store
            .books
            .lock()
            .unwrap()
            .keys()
            .all(|name| name.len() <= 72)
    );
}

/// A forgotten key comes back to the store's budget, never to fresh
/// credit.
#[tokio::test(start_paused = true)]
async fn a_forgotten_key_gets_no_fresh_credit() {
    let store = Ledger::new(Quota::new(4, 1, Duration::from_secs(3600)).unwrap());
    let node = KeyedAllowance::new(Arc::clone(&store), config(FailurePolicy::Closed)).unwrap();
    assert_eq!(
        node.acquire("k", 4, Duration::ZERO).await,
        Ok(Source::Lease)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stats = node.stats();
    assert_eq!((stats.tracked_keys, stats.forgotten), (0, 1));
    assert!(node.acquire("k", 1, Duration::ZERO).await.is_err());
    // A new node on the same store: the same.
    let other = KeyedAllowance::new(Arc::clone(&store), config(FailurePolicy::Closed)).unwrap();
    assert!(other.acquire("k", 1, Duration::ZERO).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn shutdown_gives_every_hot_pool_back() {
    let store = Ledger::new(Quota::per_second(1000).unwrap());
    let node = KeyedAllowance::new(Arc::clone(&store), config(FailurePolicy::Closed)).unwrap();
    let mut admitted = 0;
    for _ in 0..40 {
        for key in ["a", "b"] {
            if node.acquire(key, 1, Duration::from_millis(5)).await.is_ok() {
                admitted += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(node.is_hot("a") && node.is_hot("b"));
    let pooled = node.pooled("a") + node.pooled("b");
    assert_eq!(node.shutdown().await, pooled);
    assert!(!node.is_hot("a") && !node.is_hot("b"));
    let (granted_a, back_a) = store.books("a");
    let (granted_b, back_b) = store.books("b");
    assert_eq!(admitted + back_a + back_b, granted_a + granted_b);
}

/// The failure policy applies per key: a cold key's failed store call is
/// refused (closed), admitted (open), or admitted within the fallback
/// quota of that key alone.
#[tokio::test(start_paused = true)]
async fn the_failure_policy_applies_to_each_cold_key() {
    let store = Ledger::new(Quota::per_second(100).unwrap());
    store.failing.store(true, Ordering::SeqCst);
    let closed = KeyedAllowance::new(Arc::clone(&store), config(FailurePolicy::Closed)).unwrap();
    assert_eq!(
        closed.acquire("k", 1, Duration::from_secs(1)).await,
        Err(AcquireError::StoreUnavailable)
    );
    let open = KeyedAllowance::new(Arc::clone(&store), config(FailurePolicy::Open)).unwrap();
    assert_eq!(
        open.acquire("k", 2, Duration::ZERO).await,
        Ok(Source::FailedOpen)
    );
    assert_eq!(open.stats().failed_open, 2);
    let fallback_quota = Quota::new(2, 1, Duration::from_secs(60)).unwrap();
    let fallback = KeyedAllowance::new(
        Arc::clone(&store),
        config(FailurePolicy::Fallback(fallback_quota)),
    )
    .unwrap();
    for key in ["a", "b"] {
        assert_eq!(
            fallback.acquire(key, 2, Duration::ZERO).await,
            Ok(Source::Fallback)
        );
        assert!(fallback.acquire(key, 1, Duration::ZERO).await.is_err());
    }
    assert_eq!(fallback.stats().fallback, 4);
    assert_eq!(store.books("k"), (0, 0));
}

/// Many hot keys on one node: their refills travel together, in fewer
/// `acquire_many` calls than leases.
#[tokio::test(start_paused = true)]
async fn many_hot_keys_refill_in_shared_round_trips() {
    let store = Ledger::new(Quota::per_second(10_000).unwrap());
    let config = KeyedAllowanceConfig {
        max_hot_keys: 64,
        ..config(FailurePolicy::Closed)
    };
    let node = KeyedAllowance::new(Arc::clone(&store), config).unwrap();
    let keys: Vec<String> = (0..40).map(|i| format!("tenant-{i}")).collect();
    for _ in 0..100 {
        for key in &keys {
            let _ = node.acquire(key, 1, Duration::ZERO).await;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stats = node.stats();
    assert_eq!(stats.hot_keys, 40, "{stats:?}");
    let batches = store.batches.load(Ordering::SeqCst);
    assert!(batches > 0);
    assert!(
        batches * 4 <= stats.hot.leases,
        "{batches} batches for {} leases",
        stats.hot.leases
    );
}
