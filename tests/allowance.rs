//! Local allowances over the in-process store: the shared bound across
//! nodes, single-flight refills, returns, and each failure policy against a
//! store that can be made to fail.

#![cfg(feature = "tokio")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate::shared::{
    AllowanceConfig, FailurePolicy, Grant, Lease, LocalAllowance, LocalStore, Source, Store,
};
use tollgate::{AcquireError, Clock, KeyedLimiter, ManualClock, Quota};

mod common;
use common::Envelope;

const KEY: &str = "customer-7";

/// A store in front of a `LocalStore` that can be switched to fail, to hang
/// (until the caller's timeout), or to lose its replies after debiting.
#[derive(Debug)]
struct Flaky {
    inner: LocalStore<ManualClock>,
    failing: AtomicBool,
    hanging: AtomicBool,
    losing_replies: AtomicBool,
    calls: AtomicU64,
}

#[derive(Debug, thiserror::Error)]
#[error("store unreachable")]
struct Unreachable;

impl Flaky {
    fn new(quota: Quota, clock: &ManualClock) -> Arc<Self> {
        Arc::new(Flaky {
            inner: LocalStore::from_limiter(
                KeyedLimiter::builder(quota).clock(clock.clone()).build(),
            ),
            failing: AtomicBool::new(false),
            hanging: AtomicBool::new(false),
            losing_replies: AtomicBool::new(false),
            calls: AtomicU64::new(0),
        })
    }
}

impl Store for Flaky {
    type Error = Unreachable;

    async fn acquire(&self, key: &str, want: u64) -> Result<Grant, Unreachable> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.hanging.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if self.failing.load(Ordering::SeqCst) {
            return Err(Unreachable);
        }
        let grant = self
            .inner
            .acquire(key, want)
            .await
            .map_err(|_| Unreachable)?;
        if self.losing_replies.load(Ordering::SeqCst) {
            return Err(Unreachable); // debited, but the caller never hears of it
        }
        Ok(grant)
    }

    async fn release(&self, key: &str, lease: Lease, unused: u64) -> Result<(), Unreachable> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(Unreachable);
        }
        self.inner
            .release(key, lease, unused)
            .await
            .map_err(|_| Unreachable)
    }
}

fn config(policy: FailurePolicy) -> AllowanceConfig {
    AllowanceConfig {
        max_lease: 10,
        idle_return: None,
        ..AllowanceConfig::new(policy)
    }
}

/// Lets spawned refills run to completion on the current-thread runtime.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn the_pool_refills_in_the_background_and_never_twice_at_once() {
    let clock = ManualClock::new();
    let store = Flaky::new(Quota::per_second(100).unwrap(), &clock);
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap();
    // An empty pool: refused, one refill started, however many callers.
    for _ in 0..5 {
        assert!(matches!(
            node.try_acquire(1),
            Err(AcquireError::Insufficient { .. })
        ));
    }
    settle().await;
    assert_eq!(store.calls.load(Ordering::SeqCst), 1);
    assert!(node.pooled() >= 1);
    let stats = node.stats();
    assert_eq!((stats.leases, stats.largest_lease), (1, stats.leased));
    assert_eq!(stats.pooled, node.pooled());
    assert_eq!(node.try_acquire(1), Ok(Source::Lease));
    assert_eq!(node.stats().pooled, stats.pooled - 1);
}

#[tokio::test]
async fn bad_costs_are_typed_errors() {
    let store = Arc::new(LocalStore::new(Quota::per_second(100).unwrap()));
    let node = LocalAllowance::new(store, KEY, config(FailurePolicy::Closed)).unwrap();
    assert_eq!(node.try_acquire(0), Err(AcquireError::ZeroCost));
    assert_eq!(
        node.try_acquire(11),
        Err(AcquireError::ExceedsCapacity {
            cost: 11,
            capacity: 10
        })
    );
    let bounds = AllowanceConfig {
        min_lease: 5,
        max_lease: 4,
        ..config(FailurePolicy::Closed)
    };
    let store = Arc::new(LocalStore::new(Quota::per_second(1).unwrap()));
    assert_eq!(
        LocalAllowance::new(store, KEY, bounds).err(),
        Some(tollgate::shared::AllowanceError::LeaseBounds)
    );
}

/// Several nodes share one key of one store, on a frozen clock: together
/// they admit exactly the store's capacity, never more, whatever the lease
/// sizes; what is left in their pools goes back on shutdown.
#[tokio::test]
async fn nodes_sharing_a_key_admit_exactly_the_shared_capacity() {
    const CAPACITY: u64 = 200;
    let clock = ManualClock::new();
    let store = Flaky::new(Quota::per_second(CAPACITY).unwrap(), &clock);
    let nodes: Vec<_> = (0..4)
        .map(|_| {
            LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap()
        })
        .collect();
    let mut admitted = 0;
    for _round in 0..200 {
        for node in &nodes {
            for _ in 0..3 {
                if node.try_acquire(1).is_ok() {
                    admitted += 1;
                }
            }
        }
        settle().await;
    }
    assert_eq!(admitted, CAPACITY, "the nodes admitted {admitted}");
    let leased: u64 = nodes.iter().map(|n| n.stats().leased).sum();
    assert_eq!(leased, CAPACITY);
    for node in &nodes {
        node.shutdown().await;
    }
    assert_eq!(
        store.inner.limiter().available(KEY),
        0,
        "everything was spent"
    );
}

/// On a moving clock (the store's and tokio's, advanced together), nodes
/// hammering one key stay within `B + r·t` of the store's quota over the
/// run, and admit most of it.
#[tokio::test(start_paused = true)]
async fn nodes_on_a_moving_clock_stay_within_the_envelope() {
    let (capacity, rate) = (50, 1_000);
    let clock = ManualClock::new();
    let store = Flaky::new(
        Quota::new(capacity, rate, Duration::from_secs(1)).unwrap(),
        &clock,
    );
    let nodes: Vec<_> = (0..3)
        .map(|_| {
            LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap()
        })
        .collect();
    let mut admitted = 0u64;
    for _step in 0..500 {
        clock.advance(Duration::from_micros(700));
        tokio::time::advance(Duration::from_micros(700)).await;
        for node in &nodes {
            while node.try_acquire(1).is_ok() {
                admitted += 1;
            }
        }
        settle().await;
    }
    let elapsed = clock.now_nanos();
    let envelope = Envelope {
        capacity,
        tokens: rate,
        period_ns: 1_000_000_000,
    };
    assert!(
        envelope.admits(u128::from(admitted), elapsed),
        "{admitted} in {elapsed} ns"
    );
    // Demand far above the rate: most of what was allowed was admitted.
    assert!(
        admitted * 10 >= envelope_tokens(&envelope, elapsed) * 9,
        "{admitted}"
    );
}

fn envelope_tokens(envelope: &Envelope, elapsed_ns: u64) -> u64 {
    envelope.capacity + envelope.tokens * elapsed_ns / envelope.period_ns
}

#[tokio::test]
async fn unused_tokens_go_back_on_shutdown() {
    let clock = ManualClock::new();
    let store = Flaky::new(Quota::per_second(10).unwrap(), &clock);
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap();
    let granted = node.refill().await.unwrap();
    assert!(granted >= 1);
    assert_eq!(store.inner.limiter().available(KEY), 10 - granted);
    node.try_acquire(1).unwrap();
    assert_eq!(node.shutdown().await, granted - 1);
    assert_eq!(store.inner.limiter().available(KEY), 9);
    assert_eq!(node.stats().returned, granted - 1);
    assert_eq!(node.pooled(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_idle_pool_goes_back_after_the_idle_interval() {
    let clock = ManualClock::new();
    let store = Flaky::new(Quota::per_second(10).unwrap(), &clock);
    let idle = AllowanceConfig {
        idle_return: Some(Duration::from_secs(1)),
        ..config(FailurePolicy::Closed)
    };
    let node = LocalAllowance::new(Arc::clone(&store), KEY, idle).unwrap();
    let granted = node.refill().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // One check saw the pool, the next saw it unchanged: not yet returned
    // before two intervals have passed.
    assert_eq!(node.pooled(), granted);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(node.pooled(), 0);
    assert_eq!(store.inner.limiter().available(KEY), 10);
}

#[tokio::test(start_paused = true)]
async fn fail_closed_denies_once_the_pool_is_spent() {
    let clock = ManualClock::new();
    let store = Flaky::new(Quota::per_second(100).unwrap(), &clock);
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap();
    let granted = node.refill().await.unwrap();
    store.failing.store(true, Ordering::SeqCst);
    // The pool still serves what it holds.
    for _ in 0..granted {
        assert_eq!(node.try_acquire(1), Ok(Source::Lease));
    }
    settle().await;
    assert!(node.stats().store_errors >= 1);
    assert_eq!(node.try_acquire(1), Err(AcquireError::StoreUnavailable));
    // The refused call started a refill, which waits out the backoff after
    // the failure; the store comes back meanwhile, and service resumes.
    store.failing.store(false, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(1)).await;
    settle().await;
    assert_eq!(node.try_acquire(1), Ok(Source::Lease));
}

#[tokio::test]
async fn fail_open_admits_and_counts_it() {
    let clock = ManualClock::new();
    let store = Flaky::new(Quota::per_second(100).unwrap(), &clock);
    store.failing.store(true, Ordering::SeqCst);
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Open)).unwrap();
    assert!(node.refill().await.is_err());
    assert_eq!(node.try_acquire(3), Ok(Source::FailedOpen));
    assert_eq!(node.stats().failed_open, 3);
}

#[tokio::test]
async fn fallback_admits_within_its_own_quota() {
    let clock = ManualClock::new();
    let store = Flaky::new(Quota::per_second(100).unwrap(), &clock);
    store.failing.store(true, Ordering::SeqCst);
    let policy = FailurePolicy::Fallback(Quota::new(2, 1, Duration::from_secs(3600)).unwrap());
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(policy)).unwrap();
    assert!(node.refill().await.is_err());
    assert_eq!(node.try_acquire(1), Ok(Source::Fallback));
    assert_eq!(node.try_acquire(1), Ok(Source::Fallback));
    assert!(matches!(
        node.try_acquire(1),
        Err(AcquireError::Insufficient { .. })
    ));
    assert_eq!(node.stats().fallback, 2);
}

/// A timed-out lease counts as spent: whatever the store debited is
/// stranded, never asked for again as if it had been lost.
#[tokio::test(start_paused = true)]
async fn a_timed_out_lease_counts_as_spent() {
    let clock = ManualClock::new();
    let store = Flaky::new(Quota::per_second(10).unwrap(), &clock);
    store.hanging.store(true, Ordering::SeqCst);
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap();
    assert!(matches!(
        node.refill().await,
        Err(tollgate::shared::RefillError::Timeout)
    ));
    assert_eq!(node.stats().store_errors, 1);
    assert_eq!(node.try_acquire(1), Err(AcquireError::StoreUnavailable));
}

/// A reply lost after the store debited the lease strands its tokens: the
/// node admits less, and the store's books stay debited.
#[tokio::test]
async fn a_lost_lease_reply_strands_tokens_and_admits_nothing_extra() {
    let clock = ManualClock::new();
    let store = Flaky::new(Quota::per_second(10).unwrap(), &clock);
    store.losing_replies.store(true, Ordering::SeqCst);
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap();
    assert!(node.refill().await.is_err());
    let debited = 10 - store.inner.limiter().available(KEY);
    assert!(debited >= 1);
    assert_eq!(node.pooled(), 0);
    assert_eq!(node.try_acquire(1), Err(AcquireError::StoreUnavailable));
}

/// The lease size follows demand: a node that spends fast asks for more per
/// lease (up to the maximum), so round trips per admission fall.
#[tokio::test]
async fn leases_grow_with_demand() {
    let clock = ManualClock::new();
    let store = Flaky::new(
        Quota::new(1_000_000, 1_000_000, Duration::from_secs(1)).unwrap(),
        &clock,
    );
    let big = AllowanceConfig {
        max_lease: 1_000,
        idle_return: None,
        ..AllowanceConfig::new(FailurePolicy::Closed)
    };
    let node = LocalAllowance::new(Arc::clone(&store), KEY, big).unwrap();
    let mut admitted = 0u64;
    for _ in 0..2_000 {
        while node.try_acquire(1).is_ok() {
            admitted += 1;
        }
        settle().await;
    }
    let stats = node.stats();
    assert!(admitted > 10_000, "{admitted}");
    // Far fewer round trips than admissions: leases grew past one token.
    assert!(stats.leases * 20 < admitted, "{stats:?} for {admitted}");
    // The largest lease is at least the mean, and within the configured bound.
    assert!(
        stats.largest_lease * stats.leases >= stats.leased,
        "{stats:?}"
    );
    assert!(stats.largest_lease <= big.max_lease);
}

/// Real threads, each a node with its own allowance, hammer one key of one
/// store on the real clock while a multi-threaded runtime runs their
/// refills: the total admitted stays within `B + r·t` of the store's quota,
/// with `t` measured on the store's clock around the run.
#[test]
fn real_threads_as_nodes_stay_within_the_envelope() {
    let (capacity, rate) = (100, 20_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let quota = Quota::new(capacity, rate, Duration::from_secs(1)).unwrap();
    let store = Arc::new(LocalStore::new(quota));
    let start = store.limiter().clock().now_nanos();
    let nodes: Vec<_> = runtime.block_on(async {
        (0..4)
            .map(|_| {
                LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap()
            })
            .collect()
    });
    let admitted: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|node| {
                s.spawn(move || {
                    let mut admitted = 0;
                    for _ in 0..200_000 {
                        if node.try_acquire(1).is_ok() {
                            admitted += 1;
                        }
                    }
                    admitted
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let elapsed = store.limiter().clock().now_nanos() - start;
    let envelope = Envelope {
        capacity,
        tokens: rate,
        period_ns: 1_000_000_000,
    };
    assert!(admitted >= 1);
    assert!(
        envelope.admits(u128::from(admitted), elapsed),
        "{admitted} in {elapsed} ns"
    );
    let leased: u64 = nodes.iter().map(|n| n.stats().leased).sum();
    assert!(admitted <= leased);
    drop(nodes);
    runtime.shutdown_timeout(Duration::from_secs(1));
}

/// With the shared budget exhausted, callers spinning on an empty pool do
/// not turn into a round trip each: after a short grant the next lease
/// request waits a quarter of the lease period.
#[tokio::test(start_paused = true)]
async fn an_exhausted_store_is_asked_at_most_once_per_pause() {
    let clock = ManualClock::new();
    let store = Flaky::new(
        Quota::new(5, 1_000, Duration::from_secs(1)).unwrap(),
        &clock,
    );
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap();
    // 100 ms lease period: a pause of 25 ms after each short grant, longer
    // than the store's own retry_after (1 ms a token).
    for _ in 0..1_000 {
        while node.try_acquire(1).is_ok() {}
        clock.advance(Duration::from_millis(1));
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
    }
    let calls = store.calls.load(Ordering::SeqCst);
    assert!(
        (30..=50).contains(&calls),
        "{calls} store calls in one second"
    );
}

/// An allowance that outlives its runtime drops without panicking; its
/// pooled tokens are stranded, never admitted twice.
#[test]
fn dropping_an_allowance_after_its_runtime_is_gone_does_not_panic() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let store = Arc::new(LocalStore::new(Quota::per_second(10).unwrap()));
    let node = runtime.block_on(async {
        let node =
            LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap();
        node.refill().await.unwrap();
        node
    });
    drop(runtime);
    assert!(node.try_acquire(1).is_ok());
    drop(node);
    assert!(store.limiter().available(KEY) < 10);
}

/// A refill whose future is dropped (a caller's timeout around `refill`)
/// still ends its claim: the node is not left refusing forever, and the
/// cancelled call is counted as a store error.
#[tokio::test(start_paused = true)]
async fn a_cancelled_refill_releases_its_claim() {
    let clock = ManualClock::new();
    let store = Flaky::new(Quota::per_second(10).unwrap(), &clock);
    store.hanging.store(true, Ordering::SeqCst);
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap();
    let cancelled = tokio::time::timeout(Duration::from_millis(10), node.refill()).await;
    assert!(cancelled.is_err());
    assert_eq!(node.stats().store_errors, 1);
    store.hanging.store(false, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(node.refill().await.unwrap() >= 1);
    assert_eq!(node.try_acquire(1), Ok(Source::Lease));
}

/// A store that fails fast is not asked once per request: failed refills
/// back off, doubling up to a second.
#[tokio::test(start_paused = true)]
async fn a_failing_store_is_asked_with_backoff() {
    let clock = ManualClock::new();
    let store = Flaky::new(Quota::per_second(10).unwrap(), &clock);
    store.failing.store(true, Ordering::SeqCst);
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Open)).unwrap();
    for _ in 0..1_000 {
        // Open once the first refill has failed; refused before that.
        let outcome = node.try_acquire(1);
        assert!(
            matches!(
                outcome,
                Ok(Source::FailedOpen) | Err(AcquireError::Insufficient { .. })
            ),
            "{outcome:?}"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        settle().await;
    }
    let calls = store.calls.load(Ordering::SeqCst);
    // 25 ms, 50, 100, ... capped at 1 s: a handful of calls in one second.
    assert!(
        (2..=10).contains(&calls),
        "{calls} store calls for 1000 requests"
    );
}

/// A call costing more than the demand-sized lease gets a lease of at
/// least its cost (up to the maximum), instead of one token at a time.
#[tokio::test]
async fn a_costly_call_gets_a_lease_of_its_size() {
    let clock = ManualClock::new();
    let store = Flaky::new(Quota::per_second(100).unwrap(), &clock);
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap();
    assert!(node.try_acquire(8).is_err());
    settle().await;
    assert_eq!(node.try_acquire(8), Ok(Source::Lease));
    assert_eq!(store.calls.load(Ordering::SeqCst), 1);
}

/// Sparse traffic: `acquire` waits for the lease an empty pool starts, so a
/// request arriving after the idle return is served, not refused.
#[tokio::test(start_paused = true)]
async fn acquire_waits_for_the_lease_an_empty_pool_starts() {
    let clock = ManualClock::new();
    let store = Flaky::new(Quota::per_second(100).unwrap(), &clock);
    let sparse = AllowanceConfig {
        idle_return: Some(Duration::from_secs(1)),
        ..config(FailurePolicy::Closed)
    };
    let node = LocalAllowance::new(Arc::clone(&store), KEY, sparse).unwrap();
    for _ in 0..5 {
        assert_eq!(
            node.acquire(1, Duration::from_millis(100)).await,
            Ok(Source::Lease)
        );
        tokio::time::sleep(Duration::from_millis(2_500)).await;
    }
    // A store that never answers: acquire gives up at its deadline.
    store.hanging.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(node.acquire(1, Duration::from_millis(20)).await.is_err());
}
