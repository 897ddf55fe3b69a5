//! Local allowances over the in-process store: the shared bound across
//! nodes, single-flight refills, returns, and each failure policy against a
//! store that can be made to fail.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use tollgate::shared::BudgetError;
use tollgate::shared::{
    AllowanceConfig, FailurePolicy, Grant, Lease, LocalAllowance, LocalStore, Source, Store,
};
use tollgate::{AcquireError, Clock, KeyedLimiter, ManualClock, Quota};

use common::Envelope;
use tollgate_test_support::common;

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
    /// Tokens the store reported granting, and tokens it was sent back.
    granted: AtomicU64,
    released: AtomicU64,
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
            granted: AtomicU64::new(0),
            released: AtomicU64::new(0),
        })
    }
}

impl Store for Flaky {
    type Error = Unreachable;

    fn quota(&self) -> Quota {
        self.inner.quota()
    }

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
        self.granted.fetch_add(grant.tokens, Ordering::SeqCst);
        Ok(grant)
    }

    async fn release(&self, key: &str, lease: Lease, unused: u64) -> Result<(), Unreachable> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(Unreachable);
        }
        self.released.fetch_add(unused, Ordering::SeqCst);
        self.inner
            .release(key, lease, unused)
            .await
            .map_err(|_| Unreachable)
    }

    async fn debit(&self, key: &str, tokens: u64) -> Result<(), Unreachable> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(Unreachable);
        }
        self.inner.debit(key, tokens).await.map_err(|_| Unreachable)
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
            Err(BudgetError::Limit(AcquireError::Insufficient { .. }))
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
    assert_eq!(
        node.try_acquire(0),
        Err(BudgetError::Limit(AcquireError::ZeroCost))
    );
    assert_eq!(
        node.try_acquire(11),
        Err(BudgetError::Limit(AcquireError::ExceedsCapacity {
            cost: 11,
            capacity: 10
        }))
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
    assert_eq!(node.try_acquire(1), Err(BudgetError::StoreUnavailable));
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
        Err(BudgetError::Limit(AcquireError::Insufficient { .. }))
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
    assert_eq!(node.try_acquire(1), Err(BudgetError::StoreUnavailable));
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
    assert_eq!(node.try_acquire(1), Err(BudgetError::StoreUnavailable));
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
/// request waits at least a quarter of the lease period (jittered).
#[tokio::test(start_paused = true)]
async fn an_exhausted_store_is_asked_at_most_once_per_pause() {
    let clock = ManualClock::new();
    let store = Flaky::new(
        Quota::new(5, 1_000, Duration::from_secs(1)).unwrap(),
        &clock,
    );
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap();
    // 100 ms lease period: a pause of 25 ms on average after each short
    // grant (a batch of B/8 < 1 token is 1 ms, the floor is longer).
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
                Ok(Source::FailedOpen) | Err(BudgetError::Limit(AcquireError::Insufficient { .. }))
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

/// `acquire` takes any `max_wait`, `Duration::MAX` included, as
/// `TokenBucket::acquire` does: a wait without a deadline, never a panic.
#[tokio::test(start_paused = true)]
async fn acquire_accepts_a_wait_of_duration_max() {
    let clock = ManualClock::new();
    let store = Flaky::new(Quota::per_second(10).unwrap(), &clock);
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap();
    assert_eq!(node.acquire(1, Duration::MAX).await, Ok(Source::Lease));
    assert_eq!(
        node.acquire(0, Duration::MAX).await,
        Err(BudgetError::Limit(AcquireError::ZeroCost))
    );
    // The store fails: the wait ends with the failure policy's answer.
    store.failing.store(true, Ordering::SeqCst);
    while node.try_acquire(1).is_ok() {}
    assert_eq!(
        node.acquire(1, Duration::MAX).await,
        Err(BudgetError::StoreUnavailable)
    );
}

/// A cost above the store's capacity can never be served, so it
/// is refused as such (`ExceedsCapacity`, a 413 over HTTP) as soon as a
/// grant has told the allowance the capacity, never `Insufficient` with a
/// retry that cannot help; costs within it are still served.
#[tokio::test(start_paused = true)]
async fn a_cost_above_the_store_capacity_is_refused_as_exceeding_it() {
    let clock = ManualClock::new();
    // Capacity 3, one token an hour: an `Insufficient` would say 20 min.
    let quota = Quota::new(3, 1, Duration::from_secs(3600)).unwrap();
    let store = Flaky::new(quota, &clock);
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap();
    let exceeds = Err(BudgetError::Limit(AcquireError::ExceedsCapacity {
        cost: 5,
        capacity: 3,
    }));
    assert_eq!(node.acquire(5, Duration::from_secs(1)).await, exceeds);
    assert_eq!(node.try_acquire(5), exceeds);
    assert_eq!(node.acquire(5, Duration::MAX).await, exceeds);
    assert_eq!(node.try_acquire(3), Ok(Source::Lease));
    // The refusals asked the store for one lease, not one per call.
    assert_eq!(store.calls.load(Ordering::SeqCst), 1);
}

/// A zero store timeout would fail every call to a remote store
/// (and strand what each debited), so it is refused with a typed error;
/// every other extreme of the configuration is accepted and saturates.
#[tokio::test(start_paused = true)]
async fn a_zero_timeout_is_a_typed_error_and_other_extremes_are_accepted() {
    let store = Arc::new(LocalStore::new(Quota::per_second(10).unwrap()));
    let zero = AllowanceConfig {
        timeout: Duration::ZERO,
        ..config(FailurePolicy::Closed)
    };
    assert_eq!(
        LocalAllowance::new(Arc::clone(&store), KEY, zero).err(),
        Some(tollgate::shared::AllowanceError::ZeroTimeout)
    );
    let unbounded = AllowanceConfig {
        min_lease: u64::MAX,
        max_lease: u64::MAX,
        lease_period: Duration::MAX,
        idle_return: Some(Duration::MAX),
        timeout: Duration::MAX,
        on_failure: FailurePolicy::Closed,
    };
    let node = LocalAllowance::new(Arc::clone(&store), KEY, unbounded).unwrap();
    assert_eq!(node.refill().await.unwrap(), 10, "a lease of the capacity");
    assert_eq!(
        node.try_acquire(u64::MAX),
        Err(BudgetError::Limit(AcquireError::ExceedsCapacity {
            cost: u64::MAX,
            capacity: 10
        }))
    );
    assert_eq!(node.try_acquire(10), Ok(Source::Lease));
    let tiny = AllowanceConfig {
        lease_period: Duration::ZERO,
        idle_return: Some(Duration::ZERO),
        timeout: Duration::from_nanos(1),
        ..config(FailurePolicy::Closed)
    };
    let node = LocalAllowance::new(store, "other", tiny).unwrap();
    // No wait at all still waits for the store's word (a pool's
    // emptiness is not the store's): one call, here a grant.
    assert_eq!(node.acquire(1, Duration::ZERO).await, Ok(Source::Lease));
    assert_eq!(
        node.acquire(1, Duration::from_secs(1)).await,
        Ok(Source::Lease)
    );
}

/// One step of [`extreme_inputs_never_panic_nor_admit_beyond_the_grants`].
#[derive(Clone, Debug)]
enum Step {
    Try(u64),
    Acquire(u64, Duration),
    Refill,
    Shutdown,
    Advance(Duration),
    StoreFails(bool),
}

fn extreme_count() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(2),
        Just(u64::MAX - 1),
        Just(u64::MAX),
        1..64u64
    ]
}

fn extreme_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::from_secs(u64::MAX / 2)),
        Just(Duration::MAX),
        (0..3_000u64).prop_map(Duration::from_millis),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => extreme_count().prop_map(Step::Try),
        2 => (extreme_count(), extreme_duration()).prop_map(|(c, w)| Step::Acquire(c, w)),
        1 => Just(Step::Refill),
        1 => Just(Step::Shutdown),
        2 => prop_oneof![
            Just(Duration::ZERO),
            Just(Duration::from_millis(1)),
            Just(Duration::from_millis(30)),
            Just(Duration::from_secs(1)),
            Just(Duration::from_secs(3600)),
        ]
        .prop_map(Step::Advance),
        1 => any::<bool>().prop_map(Step::StoreFails),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every public input of the allowance at its extremes (costs
    /// 0, 1, `u64::MAX`; waits, lease periods, idle returns and timeouts of
    /// zero, 1 ns and `Duration::MAX`; lease bounds 0 and `u64::MAX`) gets a
    /// typed answer, never a panic, and what the allowance admits from
    /// leases never exceeds what the store granted net of what it was sent
    /// back, nor the store's envelope `B + r·t`.
    #[test]
    fn extreme_inputs_never_panic_nor_admit_beyond_the_grants(
        capacity in prop_oneof![Just(1u64), Just(3), Just(1_000)],
        min_lease in extreme_count(),
        max_lease in extreme_count(),
        lease_period in extreme_duration(),
        idle_return in proptest::option::of(extreme_duration()),
        timeout in extreme_duration(),
        open in any::<bool>(),
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let clock = ManualClock::new();
            let store = Flaky::new(Quota::per_second(capacity).unwrap(), &clock);
            let policy = if open { FailurePolicy::Open } else { FailurePolicy::Closed };
            let config = AllowanceConfig {
                min_lease,
                max_lease,
                lease_period,
                idle_return,
                timeout,
                on_failure: policy,
            };
            let node = match LocalAllowance::new(Arc::clone(&store), KEY, config) {
                Ok(node) => node,
                Err(error) => {
                    let expected = if min_lease == 0 || min_lease > max_lease {
                        tollgate::shared::AllowanceError::LeaseBounds
                    } else {
                        tollgate::shared::AllowanceError::ZeroTimeout
                    };
                    assert_eq!(error, expected, "{config:?}");
                    assert!(
                        min_lease == 0 || min_lease > max_lease || timeout.is_zero(),
                        "{config:?} refused"
                    );
                    return;
                }
            };
            let mut admitted = 0u64;
            for step in steps {
                let outcome = match step {
                    Step::Try(cost) => Some((cost, node.try_acquire(cost))),
                    Step::Acquire(cost, wait) => {
                        // The harness's own bound: a wait the store can
                        // never end (frozen clock) is cancelled, which must
                        // take nothing either.
                        let bounded = Duration::from_secs(60);
                        tokio::time::timeout(bounded, node.acquire(cost, wait))
                            .await
                            .ok()
                            .map(|outcome| (cost, outcome))
                    }
                    Step::Refill => {
                        let _ = node.refill().await;
                        None
                    }
                    Step::Shutdown => {
                        node.shutdown().await;
                        None
                    }
                    Step::Advance(by) => {
                        clock.advance(by);
                        tokio::time::advance(by).await;
                        None
                    }
                    Step::StoreFails(failing) => {
                        store.failing.store(failing, Ordering::SeqCst);
                        None
                    }
                };
                settle().await;
                if let Some((cost, outcome)) = outcome {
                    match outcome {
                        Ok(Source::Lease) => {
                            assert!(cost >= 1 && cost <= capacity.min(max_lease));
                            admitted += cost;
                        }
                        Ok(Source::FailedOpen) => assert!(open),
                        Ok(Source::Fallback) => panic!("no fallback configured"),
                        Err(BudgetError::Limit(AcquireError::ZeroCost)) => assert_eq!(cost, 0),
                        Err(BudgetError::Limit(AcquireError::ExceedsCapacity { cost: c, capacity: limit })) => {
                            assert_eq!(c, cost);
                            assert!(cost > limit && limit <= max_lease);
                        }
                        Err(BudgetError::Limit(AcquireError::Insufficient { retry_after })) => {
                            assert!(!retry_after.is_zero());
                        }
                        Err(BudgetError::StoreUnavailable) => assert!(!open),
                        Err(other) => panic!("unexpected {other:?}"),
                    }
                }
                let granted = store.granted.load(Ordering::SeqCst);
                let released = store.released.load(Ordering::SeqCst);
                assert!(
                    admitted <= granted.saturating_sub(released),
                    "admitted {admitted} of {granted} granted, {released} sent back"
                );
                let envelope = Envelope {
                    capacity,
                    tokens: capacity,
                    period_ns: 1_000_000_000,
                };
                assert!(envelope.admits(u128::from(admitted), clock.now_nanos()));
                let stats = node.stats();
                assert!(stats.pooled + admitted <= stats.leased, "{stats:?}");
            }
        });
    }
}

/// `acquire` with time left waits for the lease its refusal set coming,
/// even when that lease lands (on another worker thread) between its
/// attempt and its decision to wait: it used to wait only while a refill
/// was still in flight, and so returned `Insufficient` with time to spare.
#[test]
fn acquire_waits_for_a_lease_that_lands_before_it_decides_to_wait() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let store = Arc::new(LocalStore::new(Quota::per_second(1_000_000).unwrap()));
    runtime.block_on(async {
        for round in 0..200 {
            let key = format!("fresh-{round}");
            let node = LocalAllowance::new(Arc::clone(&store), key, config(FailurePolicy::Closed))
                .unwrap();
            // An empty pool: the refusal starts a refill on a worker.
            assert_eq!(
                node.acquire(1, Duration::from_secs(60)).await,
                Ok(Source::Lease),
                "round {round}"
            );
        }
    });
}

#[tokio::test]
async fn an_allowance_follows_its_local_stores_quota_change() {
    let clock = ManualClock::new();
    let store = Arc::new(LocalStore::from_limiter(
        KeyedLimiter::builder(Quota::per_second(100).unwrap())
            .clock(clock.clone())
            .build(),
    ));
    let node = LocalAllowance::new(Arc::clone(&store), KEY, config(FailurePolicy::Closed)).unwrap();
    assert!(node.try_acquire(1).is_err());
    settle().await;
    store.set_quota(Quota::per_second(4).unwrap());
    // The pool leased before the change is spent as it is.
    let mut spent = 0;
    while node.try_acquire(1) == Ok(Source::Lease) {
        spent += 1;
    }
    assert!(spent >= 1);
    settle().await;
    // The next grant, under the new quota, carries its capacity: the
    // allowance no longer takes a cost above it.
    assert!(node.pooled() <= 4);
    assert_eq!(
        node.try_acquire(5),
        Err(BudgetError::Limit(AcquireError::ExceedsCapacity {
            cost: 5,
            capacity: 4
        }))
    );
}

/// A dropped allowance (a keyed allowance's key demoted) gives its pooled
/// tokens back at once: not once a refill held by pacing has waited out
/// its pause (7.2 s here), while the rest of the fleet is refused them.
/// The paused refill ends without asking the store.
#[tokio::test(start_paused = true)]
async fn a_dropped_allowance_gives_its_tokens_back_at_once_not_after_its_paced_refill() {
    let clock = ManualClock::new();
    let quota = Quota::new(100, 100, Duration::from_secs(60)).unwrap();
    let store = Flaky::new(quota, &clock);
    let leases = AllowanceConfig {
        min_lease: 95,
        max_lease: 95,
        ..config(FailurePolicy::Closed)
    };
    let node = LocalAllowance::new(Arc::clone(&store), KEY, leases).unwrap();
    // 95 granted, 5 left behind: scarce, the next refill paced.
    assert_eq!(node.refill().await.unwrap(), 95);
    // Below the low-water mark (48): the refill is claimed, and waits.
    for _ in 0..48 {
        assert_eq!(node.try_acquire(1), Ok(Source::Lease));
    }
    settle().await;
    assert!(node.stats().leases == 1 && node.pooled() == 47);
    drop(node);
    settle().await;
    assert_eq!(store.inner.limiter().available(KEY), 5 + 47);
    // Long after the pause: the paused refill never asked.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(store.calls.load(Ordering::SeqCst), 1);
    assert_eq!(store.released.load(Ordering::SeqCst), 47);
}

/// The hot path's side of the same promise: a pool whose own key the store
/// refuses (here a full `LocalStore`, `TooManyKeys`) is refused, typed,
/// and never admitted by its `Open` policy, which is for an unreachable
/// store only.
#[tokio::test(start_paused = true)]
async fn a_pool_whose_key_the_store_refuses_is_refused_not_failed_open() {
    let store = Arc::new(LocalStore::from_limiter(
        KeyedLimiter::builder(Quota::new(3, 1, Duration::from_secs(3600)).unwrap())
            .clock(ManualClock::new())
            .sweep_interval(None)
            .max_keys(std::num::NonZeroUsize::new(1).unwrap().into())
            .build(),
    ));
    assert_eq!(store.acquire("tracked", 1).await.unwrap().tokens, 1);
    let pool = LocalAllowance::new(
        Arc::clone(&store),
        "refused",
        AllowanceConfig::new(FailurePolicy::Open),
    )
    .unwrap();
    assert!(pool.refill().await.is_err());
    for _ in 0..10 {
        assert_eq!(pool.try_acquire(1), Err(BudgetError::StoreRefused));
        assert_ne!(
            pool.acquire(1, Duration::from_secs(5)).await,
            Ok(Source::FailedOpen)
        );
    }
    assert_eq!(pool.stats().failed_open, 0);
}
