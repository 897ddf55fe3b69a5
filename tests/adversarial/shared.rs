//! Attacks on the shared layer: a faulty or hostile store, receipts used
//! twice or beyond their size, futures cancelled at every await point,
//! allowances dropped at bad moments, fallback quotas multiplied by nodes,
//! and a Redis server restarted under a lease.
//!
//! The invariant every attack must leave standing: tokens admitted from
//! leases never exceed tokens the store debited net of those it was sent
//! back, and the store's own grants stay within `B + r·t`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::shared::BudgetError;
use tollgate::shared::{
    AllowanceConfig, FailurePolicy, Grant, Lease, LocalAllowance, LocalStore, RefillError, Source,
    Store,
};
use tollgate::{AcquireError, Clock, KeyedLimiter, ManualClock, Quota};

use crate::common::Envelope;

const KEY: &str = "tenant-7";

/// How [`Rogue`] answers.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Conduct {
    Honest,
    /// Debits this many times what was asked, and grants all of it.
    Overgrants(u64),
    /// Grants honestly; the receipt claims this many times the tokens.
    InflatesReceipts(u64),
    /// Grants honestly; the receipt covers one token.
    ShrinksReceipts,
    /// Debits at once; replies (and applies returns) this late.
    Late(Duration),
    /// Fails every call.
    Fails,
    /// Never answers.
    Hangs,
    /// Grants nothing, and says when to retry.
    Refuses(Duration),
}

/// A store in front of an honest in-process one, misbehaving as told, and
/// keeping the books the invariant is checked against.
pub(crate) struct Rogue {
    pub(crate) honest: LocalStore<ManualClock>,
    conduct: Mutex<Conduct>,
    calls: AtomicU64,
    /// Tokens the allowance asked for, in all.
    asked: AtomicU64,
    /// Tokens the honest store debited.
    pub(crate) debited: AtomicU64,
    /// Tokens the allowance sent back, and each release as received.
    pub(crate) sent_back: AtomicU64,
    pub(crate) releases: Mutex<Vec<(Lease, u64)>>,
}

#[derive(Debug, thiserror::Error)]
#[error("the rogue store refused")]
pub(crate) struct Refused;

impl Rogue {
    /// A rogue over `quota`, and the manual clock of its honest store.
    pub(crate) fn new(quota: Quota, conduct: Conduct) -> (Arc<Self>, ManualClock) {
        let clock = ManualClock::new();
        let limiter = KeyedLimiter::builder(quota).clock(clock.clone()).build();
        let rogue = Arc::new(Rogue {
            honest: LocalStore::from_limiter(limiter),
            conduct: Mutex::new(conduct),
            calls: AtomicU64::new(0),
            asked: AtomicU64::new(0),
            debited: AtomicU64::new(0),
            sent_back: AtomicU64::new(0),
            releases: Mutex::new(Vec::new()),
        });
        (rogue, clock)
    }

    /// A rogue over 100 tokens a second, the quota most attacks use.
    pub(crate) fn hundred_a_second(conduct: Conduct) -> (Arc<Self>, ManualClock) {
        Rogue::new(Quota::per_second(100).unwrap(), conduct)
    }

    pub(crate) fn behave(&self, conduct: Conduct) {
        *self.conduct.lock().unwrap() = conduct;
    }

    fn conduct(&self) -> Conduct {
        *self.conduct.lock().unwrap()
    }

    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    fn available(&self) -> u64 {
        self.honest.limiter().available(KEY)
    }

    /// The bound: admitted from leases, plus what was sent back, never
    /// exceeds what the store debited.
    pub(crate) fn assert_bound(&self, admitted: u64) {
        let debited = self.debited.load(Ordering::SeqCst);
        let sent_back = self.sent_back.load(Ordering::SeqCst);
        assert!(
            admitted + sent_back <= debited,
            "admitted {admitted} and sent back {sent_back} of {debited} debited"
        );
    }
}

impl Store for Rogue {
    type Error = Refused;

    fn quota(&self) -> Quota {
        self.honest.quota()
    }

    async fn acquire(&self, key: &str, want: u64) -> Result<Grant, Refused> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.asked.fetch_add(want, Ordering::SeqCst);
        let conduct = self.conduct();
        let capacity = self.honest.limiter().quota().capacity();
        let ask = match conduct {
            Conduct::Fails => return Err(Refused),
            Conduct::Hangs => std::future::pending().await,
            Conduct::Refuses(retry_after) => return Ok(Grant::nothing(retry_after, capacity)),
            Conduct::Overgrants(factor) => want.saturating_mul(factor),
            _ => want,
        };
        let mut grant = self.honest.acquire(key, ask).await.map_err(|_| Refused)?;
        self.debited.fetch_add(grant.tokens, Ordering::SeqCst);
        match conduct {
            Conduct::InflatesReceipts(factor) => grant.lease.granted *= factor,
            Conduct::ShrinksReceipts => grant.lease.granted = grant.lease.granted.min(1),
            Conduct::Late(by) => tokio::time::sleep(by).await,
            _ => {}
        }
        Ok(grant)
    }

    async fn release(&self, key: &str, lease: Lease, unused: u64) -> Result<(), Refused> {
        self.sent_back.fetch_add(unused, Ordering::SeqCst);
        self.releases.lock().unwrap().push((lease, unused));
        match self.conduct() {
            Conduct::Fails => return Err(Refused),
            Conduct::Hangs => std::future::pending().await,
            Conduct::Late(by) => tokio::time::sleep(by).await,
            _ => {}
        }
        self.honest
            .release(key, lease, unused)
            .await
            .map_err(|_| Refused)
    }

    async fn debit(&self, key: &str, tokens: u64) -> Result<(), Refused> {
        match self.conduct() {
            Conduct::Fails => return Err(Refused),
            Conduct::Hangs => std::future::pending().await,
            Conduct::Late(by) => tokio::time::sleep(by).await,
            _ => {}
        }
        self.honest.debit(key, tokens).await.map_err(|_| Refused)
    }
}

fn config(policy: FailurePolicy) -> AllowanceConfig {
    AllowanceConfig {
        max_lease: 10,
        idle_return: None,
        ..AllowanceConfig::new(policy)
    }
}

fn node(store: &Arc<Rogue>, config: AllowanceConfig) -> LocalAllowance<Rogue> {
    LocalAllowance::new(Arc::clone(store), KEY, config).expect("inside a runtime")
}

/// Lets spawned refills and returns run on the current-thread runtime.
pub(crate) async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// Moves the store's clock and tokio's (paused) clock together.
async fn advance(clock: &ManualClock, by: Duration) {
    clock.advance(by);
    tokio::time::advance(by).await;
    settle().await;
}

/// Admits one token at a time from the pool until it refuses.
fn spend_pool(node: &LocalAllowance<Rogue>) -> u64 {
    let mut admitted = 0;
    while node.try_acquire(1) == Ok(Source::Lease) {
        admitted += 1;
    }
    admitted
}

/// A store that debits and grants more than asked cannot push more than
/// the ask into a node: what the node admits and holds never exceeds what
/// it asked for, the excess is stranded (counted), and admissions stay
/// within the debits.
#[tokio::test(start_paused = true)]
async fn a_store_granting_more_than_asked_fills_no_pool_beyond_the_ask() {
    let (store, clock) = Rogue::new(Quota::per_second(1_000).unwrap(), Conduct::Overgrants(10));
    let node = node(&store, config(FailurePolicy::Closed));
    let mut admitted = 0;
    for _ in 0..20 {
        let _ = node.refill().await;
        let asked = store.asked.load(Ordering::SeqCst);
        assert!(admitted + node.pooled() <= asked, "{asked} asked");
        admitted += spend_pool(&node);
        store.assert_bound(admitted);
    }
    let envelope = Envelope {
        capacity: 1_000,
        tokens: 1_000,
        period_ns: 1_000_000_000,
    };
    assert!(envelope.admits(u128::from(admitted), clock.now_nanos()));
    let stats = node.stats();
    assert!(stats.stranded > 0, "{stats:?}");
    assert_eq!(
        stats.leased,
        admitted + stats.pooled + stats.returned + stats.stranded
    );
}

/// A receipt is never used for more than its grant: a store whose receipts
/// claim more tokens than it granted cannot make a node return tokens of an
/// older lease (whose cost the bucket has refilled since) against a newer
/// one, which would mint them; one whose receipts claim less gets back no
/// more than they cover.
#[tokio::test(start_paused = true)]
async fn a_receipt_that_does_not_match_its_grant_returns_no_more_than_the_grant() {
    // B = 100, 10 a second; leases of exactly 10.
    let quota = Quota::new(100, 10, Duration::from_secs(1)).unwrap();
    let fixed = AllowanceConfig {
        min_lease: 10,
        ..config(FailurePolicy::Closed)
    };
    let (store, clock) = Rogue::new(quota, Conduct::InflatesReceipts(100));
    let inflated = node(&store, fixed);
    assert_eq!(inflated.refill().await.unwrap(), 10);
    // The first lease's cost refills; the bucket is full again.
    advance(&clock, Duration::from_secs(10)).await;
    assert_eq!(inflated.refill().await.unwrap(), 10);
    // Another client takes the rest of the bucket.
    store.honest.limiter().try_acquire(KEY, 90).unwrap();
    assert_eq!(store.available(), 0);
    // 20 pooled: 10 go back against the second receipt, 10 are stranded
    // (the first lease's cost has long refilled: returning it would mint).
    assert_eq!(inflated.shutdown().await, 10);
    assert_eq!(store.available(), 10);
    assert_eq!(inflated.stats().stranded, 10);

    store.behave(Conduct::ShrinksReceipts);
    store.honest.limiter().try_acquire(KEY, 10).unwrap();
    let shrunk = node(&store, fixed);
    advance(&clock, Duration::from_secs(1)).await;
    assert_eq!(shrunk.refill().await.unwrap(), 10);
    assert_eq!(store.available(), 0);
    assert_eq!(shrunk.shutdown().await, 1, "the receipt covers one token");
    assert_eq!(store.available(), 1);
    for (lease, unused) in store.releases.lock().unwrap().iter() {
        assert!(*unused <= lease.granted.min(10), "{lease:?} {unused}");
    }
}

/// A reply that comes after the timeout is never pooled: the lease it
/// carries (debited by the store) is stranded and counted as a store error,
/// and nothing is admitted from it, even once it arrives.
#[tokio::test(start_paused = true)]
async fn a_reply_after_the_timeout_is_stranded_never_pooled() {
    let (store, clock) = Rogue::hundred_a_second(Conduct::Late(Duration::from_secs(1)));
    let node = node(&store, config(FailurePolicy::Closed));
    assert!(matches!(node.refill().await, Err(RefillError::Timeout)));
    assert!(store.debited.load(Ordering::SeqCst) >= 1);
    advance(&clock, Duration::from_secs(2)).await;
    assert_eq!(node.pooled(), 0);
    assert_eq!(node.try_acquire(1), Err(BudgetError::StoreUnavailable));
    assert_eq!(node.stats().store_errors, 1);
    store.assert_bound(0);
}

/// A store that fails every call admits nothing under `Closed`, and is
/// asked with a backoff (at most about once a second), not once per
/// request.
#[tokio::test(start_paused = true)]
async fn a_failing_store_admits_nothing_when_closed_and_is_asked_with_backoff() {
    let (store, clock) = Rogue::hundred_a_second(Conduct::Fails);
    let node = node(&store, config(FailurePolicy::Closed));
    for _ in 0..10_000 {
        let outcome = node.try_acquire(1);
        assert!(
            matches!(
                outcome,
                Err(BudgetError::StoreUnavailable
                    | BudgetError::Limit(AcquireError::Insufficient { .. }))
            ),
            "{outcome:?}"
        );
        advance(&clock, Duration::from_millis(1)).await;
    }
    // 10 s: backoffs of 50, 100, ... 800 ms, then one a second.
    assert!(store.calls() <= 16, "{} calls in 10 s", store.calls());
    store.assert_bound(0);
}

/// A store that never answers costs one timeout per backoff; a wait without
/// a deadline ends with the failure policy's answer instead of hanging, and
/// the node serves again once the store answers.
#[tokio::test(start_paused = true)]
async fn a_store_that_never_answers_cannot_hang_a_caller_or_the_node() {
    let (store, clock) = Rogue::hundred_a_second(Conduct::Hangs);
    let node = node(&store, config(FailurePolicy::Closed));
    assert_eq!(
        node.acquire(1, Duration::MAX).await,
        Err(BudgetError::StoreUnavailable)
    );
    for _ in 0..1_000 {
        let _ = node.try_acquire(1);
        advance(&clock, Duration::from_millis(10)).await;
    }
    assert!(store.calls() <= 16, "{} calls in 10 s", store.calls());
    // The call in flight times out; the next one, within the backoff, is
    // answered.
    store.behave(Conduct::Honest);
    let _ = node.try_acquire(1);
    advance(&clock, Duration::from_secs(2)).await;
    assert_eq!(
        node.acquire(1, Duration::from_millis(100)).await,
        Ok(Source::Lease)
    );
    store.assert_bound(1);
}

/// A store that grants nothing and says "retry at once" does not turn each
/// refused caller into a store call, even with a zero lease period: the
/// node pauses at least 1 ms between requests.
#[tokio::test(start_paused = true)]
async fn a_zero_retry_after_does_not_turn_callers_into_store_calls() {
    let (store, clock) = Rogue::hundred_a_second(Conduct::Refuses(Duration::ZERO));
    let eager = AllowanceConfig {
        lease_period: Duration::ZERO,
        ..config(FailurePolicy::Closed)
    };
    let node = node(&store, eager);
    // 100 ms of 10 callers a millisecond.
    for _ in 0..100 {
        for _ in 0..10 {
            let outcome = node.try_acquire(1);
            assert!(
                matches!(outcome, Err(BudgetError::Limit(AcquireError::Insufficient { retry_after })) if !retry_after.is_zero()),
                "{outcome:?}"
            );
            settle().await;
        }
        advance(&clock, Duration::from_millis(1)).await;
    }
    assert!(
        store.calls() <= 102,
        "{} calls for 1000 callers",
        store.calls()
    );
}

/// A `retry_after` of `Duration::MAX` neither panics nor stalls the node:
/// callers are told to wait (saturated, not wrapped), and the node asks the
/// store again within a second.
#[tokio::test(start_paused = true)]
async fn a_retry_after_of_duration_max_neither_panics_nor_stalls_the_node() {
    let (store, clock) = Rogue::hundred_a_second(Conduct::Refuses(Duration::MAX));
    let node = node(&store, config(FailurePolicy::Closed));
    assert_eq!(node.refill().await.unwrap(), 0);
    match node.try_acquire(1) {
        Err(BudgetError::Limit(AcquireError::Insufficient { retry_after })) => {
            assert!(retry_after >= Duration::from_secs(3600), "{retry_after:?}")
        }
        other => panic!("{other:?}"),
    }
    store.behave(Conduct::Honest);
    advance(&clock, Duration::from_secs(1)).await;
    assert_eq!(
        node.acquire(1, Duration::from_millis(100)).await,
        Ok(Source::Lease)
    );
    store.assert_bound(1);
}

/// A lease goes back at most once and never beyond its size: shutdowns
/// racing each other, the idle return and the drop send the pool's tokens
/// back once in all, and a store given more than a receipt covers takes
/// back no more than it covers.
#[tokio::test(start_paused = true)]
async fn a_lease_goes_back_at_most_once_and_never_beyond_its_size() {
    let (store, clock) = Rogue::hundred_a_second(Conduct::Honest);
    let racing = AllowanceConfig {
        min_lease: 10,
        idle_return: Some(Duration::ZERO),
        ..config(FailurePolicy::Closed)
    };
    let node = node(&store, racing);
    assert_eq!(node.refill().await.unwrap(), 10);
    let (a, b, c) = tokio::join!(node.shutdown(), node.shutdown(), node.shutdown());
    advance(&clock, Duration::from_millis(5)).await;
    drop(node);
    advance(&clock, Duration::from_millis(5)).await;
    assert_eq!(a + b + c, 10);
    assert_eq!(store.sent_back.load(Ordering::SeqCst), 10);
    assert_eq!(store.releases.lock().unwrap().len(), 1);
    assert_eq!(store.available(), 100);

    // Straight to the store: a receipt split beyond its size, and a release
    // of more than a receipt covers, give back no more than it granted.
    let mut lease = store.honest.acquire(KEY, 10).await.unwrap().lease;
    store.honest.limiter().try_acquire(KEY, 90).unwrap();
    let part = lease.split_off(100);
    assert_eq!((part.granted, lease.granted), (10, 0));
    store.honest.release(KEY, part, u64::MAX).await.unwrap();
    store.honest.release(KEY, lease, u64::MAX).await.unwrap();
    assert_eq!(store.available(), 10);
}

/// Cancelling `refill` at any await point (in its pause, in the store call,
/// after it) leaks no refill claim, mints nothing, and does not pass for a
/// store failure unless the store was called: under `Open`, a refill
/// cancelled in its pause must not switch the node to admitting everything.
#[tokio::test(start_paused = true)]
async fn cancelling_a_refill_at_any_await_point_leaks_no_claim_and_mints_nothing() {
    for cancel_after_ms in 0..40 {
        let (store, clock) = Rogue::hundred_a_second(Conduct::Refuses(Duration::from_millis(20)));
        let node = node(&store, config(FailurePolicy::Open));
        // An empty grant: the next refill pauses 25 ms before asking.
        assert_eq!(node.refill().await.unwrap(), 0);
        store.behave(Conduct::Late(Duration::from_millis(5)));
        let calls = store.calls();
        let cancel = Duration::from_millis(cancel_after_ms);
        let finished = tokio::time::timeout(cancel, node.refill()).await.is_ok();
        if !finished && store.calls() == calls {
            // Cancelled in the pause: the store was never called.
            assert!(
                matches!(
                    node.try_acquire(1),
                    Err(BudgetError::Limit(AcquireError::Insufficient { .. }))
                ),
                "cancelled after {cancel_after_ms} ms: the pause passed for a failure"
            );
        }
        store.behave(Conduct::Honest);
        advance(&clock, Duration::from_secs(2)).await;
        assert!(
            node.refill().await.unwrap() >= 1,
            "cancelled after {cancel_after_ms} ms: the claim leaked"
        );
        let admitted = spend_pool(&node);
        store.assert_bound(admitted);
    }
}

/// Cancelling `shutdown` while its return is in flight leaves the books
/// whole: the drained tokens count as stranded (the return may or may not
/// have reached the store), never as spent, and nothing is returned twice.
#[tokio::test(start_paused = true)]
async fn cancelling_a_return_in_flight_counts_its_tokens_stranded() {
    let (store, _clock) = Rogue::hundred_a_second(Conduct::Honest);
    let node = node(&store, config(FailurePolicy::Closed));
    let granted = node.refill().await.unwrap();
    assert!(granted >= 1);
    store.behave(Conduct::Late(Duration::from_millis(20)));
    let cancelled = tokio::time::timeout(Duration::from_millis(5), node.shutdown()).await;
    assert!(cancelled.is_err());
    let stats = node.stats();
    assert_eq!(stats.pooled, 0);
    assert_eq!(
        stats.leased,
        stats.pooled + stats.returned + stats.stranded,
        "{stats:?}"
    );
    assert_eq!(node.shutdown().await, 0, "nothing left to return twice");
    store.assert_bound(0);
}

/// Cancelling `acquire` at any point takes nothing: every token the store
/// granted is either admitted by a call that completed or still pooled.
#[tokio::test(start_paused = true)]
async fn cancelling_acquire_at_any_point_takes_nothing() {
    for cancel_after_ms in 0..20 {
        let (store, clock) = Rogue::hundred_a_second(Conduct::Late(Duration::from_millis(5)));
        let node = node(&store, config(FailurePolicy::Closed));
        let mut admitted = 0;
        for _ in 0..3 {
            let cancel = Duration::from_millis(cancel_after_ms);
            if let Ok(outcome) = tokio::time::timeout(cancel, node.acquire(3, Duration::MAX)).await
            {
                assert_eq!(outcome, Ok(Source::Lease));
                admitted += 3;
            }
        }
        advance(&clock, Duration::from_millis(50)).await;
        let stats = node.stats();
        assert_eq!(stats.leased, admitted + stats.pooled, "{stats:?}");
        store.assert_bound(admitted);
    }
}

/// An allowance dropped while a refill is in flight gives that lease back
/// once it lands, instead of leaving it in a pool nobody can read.
#[tokio::test(start_paused = true)]
async fn an_allowance_dropped_mid_refill_gives_the_landing_lease_back() {
    let (store, _clock) = Rogue::new(
        Quota::new(100, 1, Duration::from_secs(3600)).unwrap(),
        Conduct::Late(Duration::from_millis(10)),
    );
    let node = node(&store, config(FailurePolicy::Closed));
    assert!(node.try_acquire(1).is_err(), "the pool starts empty");
    settle().await;
    assert_eq!(store.calls(), 1, "a refill is in flight");
    drop(node);
    // The drop's return runs before the lease lands. Only tokio's clock
    // moves: on the store's, the lease is returned the instant it was
    // granted, so all of it comes back.
    settle().await;
    for _ in 0..5 {
        tokio::time::advance(Duration::from_millis(10)).await;
        settle().await;
    }
    assert!(store.debited.load(Ordering::SeqCst) >= 1);
    assert_eq!(store.available(), 100, "the landed lease went back");
    store.assert_bound(0);
}

/// An allowance dropped on a thread outside its runtime (while the runtime
/// lives) still gives its pool back on that runtime; nothing is admitted
/// twice and nothing panics.
#[test]
fn an_allowance_dropped_outside_its_runtime_gives_its_pool_back() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .unwrap();
    let (store, _clock) = Rogue::hundred_a_second(Conduct::Honest);
    let node = runtime.block_on(async {
        let node = node(&store, config(FailurePolicy::Closed));
        node.refill().await.unwrap();
        node
    });
    let admitted = std::thread::spawn(move || {
        let admitted = u64::from(node.try_acquire(1).is_ok());
        drop(node);
        admitted
    })
    .join()
    .unwrap();
    runtime.block_on(async {
        // Bounded by iterations, not by a measured duration.
        for _ in 0..1_000 {
            if store.available() == 100 - admitted {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    assert_eq!(store.available(), 100 - admitted);
    store.assert_bound(admitted);
}

/// A fallback quota is per node: while the store is down, `n` nodes admit
/// at most `n` times its envelope, none of it from leases, all of it
/// counted.
#[tokio::test(start_paused = true)]
async fn fallback_quotas_of_many_nodes_admit_at_most_nodes_times_the_fallback() {
    const NODES: u64 = 16;
    let (store, clock) = Rogue::hundred_a_second(Conduct::Fails);
    let fallback = Quota::new(2, 1, Duration::from_secs(3600)).unwrap();
    let nodes: Vec<_> = (0..NODES)
        .map(|_| node(&store, config(FailurePolicy::Fallback(fallback))))
        .collect();
    for node in &nodes {
        assert!(node.refill().await.is_err());
    }
    let mut admitted = 0u64;
    for _ in 0..1_000 {
        for node in &nodes {
            match node.try_acquire(1) {
                Ok(source) => {
                    assert_eq!(source, Source::Fallback);
                    admitted += 1;
                }
                Err(error) => assert!(
                    matches!(error, BudgetError::Limit(AcquireError::Insufficient { .. })),
                    "{error:?}"
                ),
            }
        }
        advance(&clock, Duration::from_millis(10)).await;
    }
    // One token an hour: the fallback buckets (on the real clock) cannot
    // refill during the test.
    assert_eq!(admitted, NODES * fallback.capacity());
    let counted: u64 = nodes.iter().map(|n| n.stats().fallback).sum();
    assert_eq!(counted, admitted);
    store.assert_bound(0);
}

#[cfg(feature = "redis")]
use tollgate_test_support::redis_server;

/// A Redis server restarted (emptied) under a live lease: the node keeps
/// serving what it holds, leases again from the new server (whose script
/// cache is empty: the scripts reload on NOSCRIPT), and a lease from before
/// the restart given back after it returns nothing into the new bucket,
/// which never debited it: the lost debit strands nothing extra and
/// over-admits nothing more than the restart itself forgot.
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_redis_restart_strands_old_leases_and_mints_nothing_from_them() {
    use tollgate::shared::RedisStore;

    let Some(mut server) = redis_server::RedisServer::start(
        "a_redis_restart_strands_old_leases_and_mints_nothing_from_them",
    ) else {
        return;
    };
    // 100 tokens, one an hour: nothing refills during the test.
    let quota = Quota::new(100, 1, Duration::from_secs(3600)).unwrap();
    let timeout = Duration::from_secs(2);
    let store = RedisStore::connect(&server.url(), quota, "restart:", timeout)
        .await
        .expect("connect to the test server");
    let store = Arc::new(store);
    let leases = |size| AllowanceConfig {
        min_lease: size,
        max_lease: size,
        idle_return: None,
        timeout,
        ..AllowanceConfig::new(FailurePolicy::Closed)
    };
    let old = LocalAllowance::new(Arc::clone(&store), KEY, leases(10)).unwrap();
    assert_eq!(old.refill().await.unwrap(), 10);
    assert_eq!(old.try_acquire(1), Ok(Source::Lease));

    server.restart().expect("restart the server on its port");
    // The node still serves its pool while the connection comes back.
    assert_eq!(old.try_acquire(1), Ok(Source::Lease));
    // Another node takes the whole new bucket, once reconnected.
    let other = LocalAllowance::new(Arc::clone(&store), KEY, leases(100)).unwrap();
    let mut granted = 0;
    for _ in 0..100 {
        match other.refill().await {
            Ok(n) if n > 0 => {
                granted = n;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert_eq!(granted, 100, "the new server's bucket starts full");
    // The old node's 8 unused tokens were debited by the lost server: going
    // back into the new bucket would add 8 it never debited.
    old.shutdown().await;
    assert_eq!(store.acquire(KEY, 100).await.unwrap().tokens, 0);
    // The old node admitted 2 of its lease, and accounted for the rest.
    let books = old.stats();
    assert_eq!(
        books.leased,
        2 + books.returned + books.stranded + books.pooled
    );
}
