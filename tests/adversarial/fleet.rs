//! Attacks on the keyed shared limiter: a store that grants more than
//! asked, hangs, fails, refuses with absurd waits or claims no capacity;
//! receipts inflated or shrunk; acquire futures cancelled while their store
//! call is in flight or after its grant arrived; a fallback flooded with
//! keys; a hot key over a store that overgrants; receipts undone against
//! a store that overgranted, inflated its receipt, or fails the return.
//!
//! The invariant every attack must leave standing: tokens admitted, plus
//! tokens sent back, never exceed what the store debited; and every call
//! ends (no await without a bound), with a typed answer.

use std::sync::Arc;
use std::time::Duration;

use tollgate::shared::{
    AllowanceConfig, FailurePolicy, Grant, KeyedAllowance, KeyedAllowanceConfig, Lease, Source,
    Store,
};
use tollgate::shared::{BudgetError, HotAnswer};
use tollgate::{AcquireError, Quota};

use crate::common::poll_once;
use crate::shared::{Conduct, Refused, Rogue, settle};

fn keyed(store: &Arc<Rogue>, policy: FailurePolicy) -> KeyedAllowance<Rogue> {
    let config = KeyedAllowanceConfig {
        allowance: AllowanceConfig {
            max_lease: 10,
            idle_return: None,
            ..AllowanceConfig::new(policy)
        },
        hot_at: 20,
        cold_below: 5,
        ..KeyedAllowanceConfig::new(policy)
    };
    KeyedAllowance::new(Arc::clone(store), config).expect("inside a runtime")
}

/// A grant of ten times the ask admits the cost; the rest is stranded,
/// counted, and never admitted nor sent back against a receipt.
#[tokio::test(start_paused = true)]
async fn a_cold_grant_beyond_the_cost_admits_only_the_cost() {
    let (store, _clock) = Rogue::new(Quota::per_second(1000).unwrap(), Conduct::Overgrants(10));
    let node = keyed(&store, FailurePolicy::Closed);
    assert_eq!(
        node.acquire("k", 2, Duration::ZERO).await,
        Ok(Source::Lease)
    );
    let stats = node.stats();
    assert_eq!((stats.cold_admitted, stats.stranded), (2, 18));
    store.assert_bound(2);
    assert!(store.releases.lock().unwrap().is_empty());
}

/// A store that never answers: each call ends at the store timeout with
/// the failure policy's answer, whatever the caller's wait; the
/// non-blocking path never calls it.
#[tokio::test(start_paused = true)]
async fn a_hanging_store_ends_every_call_at_the_timeout() {
    let (store, _clock) = Rogue::hundred_a_second(Conduct::Hangs);
    let node = keyed(&store, FailurePolicy::Closed);
    assert_eq!(node.try_acquire("k", 1), Ok(HotAnswer::AskStore));
    assert_eq!(store.calls(), 0);
    // Instants of tokio's paused clock, which only the awaited timers move:
    // the call ended exactly when the store timeout fired.
    let timed_out_at =
        tokio::time::Instant::now() + AllowanceConfig::new(FailurePolicy::Closed).timeout;
    assert_eq!(
        node.acquire("k", 1, Duration::MAX).await,
        Err(BudgetError::StoreUnavailable)
    );
    assert_eq!(tokio::time::Instant::now(), timed_out_at);
    assert_eq!(node.stats().store_errors, 1);
}

/// A failing store under `Closed`: every cold request refused, nothing
/// admitted; after one failed call the node holds cold calls back for a
/// backoff instead of asking once per request, and asks again after it.
#[tokio::test(start_paused = true)]
async fn a_failing_store_admits_nothing_when_closed_and_is_not_asked_per_request() {
    let (store, _clock) = Rogue::hundred_a_second(Conduct::Fails);
    let node = keyed(&store, FailurePolicy::Closed);
    for i in 0..10 {
        let key = format!("k{i}");
        assert_eq!(
            node.acquire(&key, 1, Duration::from_secs(1)).await,
            Err(BudgetError::StoreUnavailable)
        );
    }
    assert_eq!((store.calls(), node.stats().store_errors), (1, 1));
    store.assert_bound(0);
    // The first backoff is at most 1.5 × 2 × lease_period / 4 = 75 ms.
    tokio::time::sleep(Duration::from_millis(80)).await;
    store.behave(Conduct::Honest);
    assert_eq!(
        node.acquire("k0", 1, Duration::ZERO).await,
        Ok(Source::Lease)
    );
    assert_eq!(store.calls(), 2);
}

/// A refusal saying "retry now" cannot make `acquire` spin: each retry
/// waits at least 1 ms. One saying "never" is asked again within a second,
/// until the caller's deadline.
#[tokio::test(start_paused = true)]
async fn refusals_with_zero_or_endless_waits_neither_spin_nor_hang() {
    let (store, _clock) = Rogue::hundred_a_second(Conduct::Refuses(Duration::ZERO));
    let node = keyed(&store, FailurePolicy::Closed);
    let refused = node.acquire("k", 1, Duration::from_millis(10)).await;
    assert_eq!(
        refused,
        Err(BudgetError::Limit(AcquireError::Insufficient {
            retry_after: Duration::from_millis(1)
        }))
    );
    assert!(store.calls() <= 11, "{} calls", store.calls());
    store.behave(Conduct::Refuses(Duration::MAX));
    let calls = store.calls();
    // The caller's deadline, as an instant of tokio's paused clock (which
    // only the waits move, never the wall clock): no wait runs past it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    assert!(matches!(
        node.acquire("k", 1, Duration::from_secs(3)).await,
        Err(BudgetError::Limit(AcquireError::Insufficient { .. }))
    ));
    assert!(tokio::time::Instant::now() <= deadline);
    // Pauses of 0.5 to 1 s (1 s spread by jitter, at most 1 s).
    let asked = store.calls() - calls;
    assert!((3..=7).contains(&asked), "{asked} calls");
}

/// A store claiming a capacity of zero: every cost is refused as above
/// it, typed, and the non-blocking path learns it.
#[tokio::test(start_paused = true)]
async fn a_store_with_no_capacity_is_refused_as_exceeding_it() {
    #[derive(Debug)]
    struct Empty;
    impl Store for Empty {
        type Error = Refused;

        fn quota(&self) -> Quota {
            Quota::per_second(1).unwrap()
        }
        async fn acquire(&self, _key: &str, _want: u64) -> Result<Grant, Refused> {
            Ok(Grant::nothing(Duration::ZERO, 0))
        }
        async fn release(&self, _key: &str, _lease: Lease, _unused: u64) -> Result<(), Refused> {
            Ok(())
        }
        async fn debit(&self, _key: &str, _tokens: u64) -> Result<(), Refused> {
            Ok(())
        }
    }
    let node = KeyedAllowance::new(
        Arc::new(Empty),
        KeyedAllowanceConfig::new(FailurePolicy::Closed),
    )
    .unwrap();
    let too_large = Err(BudgetError::Limit(AcquireError::ExceedsCapacity {
        cost: 1,
        capacity: 0,
    }));
    assert_eq!(
        node.acquire("k", 1, Duration::from_secs(1)).await,
        too_large
    );
    assert_eq!(node.try_acquire("k", 1), too_large.map(HotAnswer::Admitted));
}

/// An acquire dropped while its store call is in flight: the grant that
/// arrives later is given back whole, and nothing is admitted.
#[tokio::test(start_paused = true)]
async fn a_cancelled_acquire_gives_back_a_grant_that_arrives_later() {
    let (store, _clock) = Rogue::hundred_a_second(Conduct::Late(Duration::from_millis(30)));
    let node = keyed(&store, FailurePolicy::Closed);
    let mut acquire = Box::pin(node.acquire("k", 4, Duration::from_secs(1)));
    assert!(poll_once(&mut acquire).is_pending());
    settle().await;
    drop(acquire);
    // The grant arrives at 30 ms; its return, as late, at 60 ms.
    tokio::time::sleep(Duration::from_millis(100)).await;
    settle().await;
    assert_eq!(
        store.releases.lock().unwrap().first(),
        Some(&(Lease { granted: 4, at: 0 }, 4))
    );
    assert_eq!(node.stats().returned, 4);
    // (Four tokens in 100 ms made the key hot: its pool's lease is the
    // only other debit.)
    node.shutdown().await;
    store.assert_bound(0);
}

/// An acquire dropped after its grant was handed over but before it was
/// read: given back all the same.
#[tokio::test(start_paused = true)]
async fn a_cancelled_acquire_gives_back_a_grant_already_handed_over() {
    let (store, _clock) = Rogue::hundred_a_second(Conduct::Honest);
    let node = keyed(&store, FailurePolicy::Closed);
    let mut acquire = Box::pin(node.acquire("k", 3, Duration::from_secs(1)));
    assert!(poll_once(&mut acquire).is_pending());
    settle().await; // the call runs and hands its grant over
    drop(acquire);
    settle().await;
    assert_eq!(store.sent_back.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(store.honest.limiter().available("k"), 100);
    assert_eq!(node.stats().cold_admitted, 0);
}

/// A short grant whose receipt claims a hundred times its tokens, or one
/// token: what goes back is at most what was granted and the receipt
/// kept covers no more; what the receipt does not cover is stranded.
#[tokio::test(start_paused = true)]
async fn inflated_and_shrunk_receipts_return_no_more_than_was_granted() {
    let (store, _clock) = Rogue::new(Quota::per_second(5).unwrap(), Conduct::Honest);
    let node = keyed(&store, FailurePolicy::Closed);
    assert_eq!(
        node.acquire("a", 3, Duration::ZERO).await,
        Ok(Source::Lease)
    );
    store.behave(Conduct::InflatesReceipts(100));
    assert!(node.acquire("a", 3, Duration::ZERO).await.is_err());
    assert_eq!(
        store.releases.lock().unwrap().last(),
        Some(&(Lease { granted: 2, at: 0 }, 2))
    );
    store.behave(Conduct::Honest);
    assert_eq!(
        node.acquire("b", 3, Duration::ZERO).await,
        Ok(Source::Lease)
    );
    store.behave(Conduct::ShrinksReceipts);
    assert!(node.acquire("b", 3, Duration::ZERO).await.is_err());
    assert_eq!(
        store.releases.lock().unwrap().last(),
        Some(&(Lease { granted: 1, at: 0 }, 1))
    );
    assert_eq!(node.stats().stranded, 1);
    store.assert_bound(6);
}

/// The fallback of cold keys is a bounded keyed limiter: a flood of keys
/// while the store is down cannot grow it, nor admit beyond each key's
/// fallback quota.
#[tokio::test(start_paused = true)]
async fn the_fallback_of_cold_keys_is_bounded_under_a_key_flood() {
    let (store, _clock) = Rogue::hundred_a_second(Conduct::Fails);
    let fallback = Quota::new(1, 1, Duration::from_secs(60)).unwrap();
    let config = KeyedAllowanceConfig {
        max_keys: tollgate::MaxKeys::new(2).unwrap(),
        ..KeyedAllowanceConfig::new(FailurePolicy::Fallback(fallback))
    };
    let node = KeyedAllowance::new(Arc::clone(&store), config).unwrap();
    let mut admitted = 0;
    for i in 0..1000 {
        match node
            .acquire(&format!("k{}", i % 50), 1, Duration::ZERO)
            .await
        {
            Ok(Source::Fallback) => admitted += 1,
            Ok(other) => panic!("{other:?} from a failing store"),
            Err(BudgetError::Limit(
                AcquireError::TooManyKeys { .. } | AcquireError::Insufficient { .. },
            )) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(admitted, 2);
    assert_eq!(node.stats().fallback, 2);
}

/// A hot key over a store that debits and grants ten times what its
/// leases ask: the pool holds only the ask, and what the node admits plus
/// what it sends back stays within the debits.
#[tokio::test(start_paused = true)]
async fn a_hot_key_over_an_overgranting_store_admits_within_the_debits() {
    let (store, _clock) = Rogue::new(Quota::per_second(100_000).unwrap(), Conduct::Overgrants(10));
    let node = keyed(&store, FailurePolicy::Closed);
    let mut admitted = 0;
    for _ in 0..100 {
        for _ in 0..5 {
            if node.acquire("k", 1, Duration::from_millis(1)).await.is_ok() {
                admitted += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(node.is_hot("k"));
    assert!(node.stats().hot.stranded > 0);
    node.shutdown().await;
    store.assert_bound(admitted);
}

/// A wait with no deadline on a store that says "never" asks again every
/// second instead of sleeping for ever, and is served once the store
/// grants.
#[tokio::test(start_paused = true)]
async fn a_wait_with_no_deadline_asks_again_every_second() {
    let (store, _clock) = Rogue::hundred_a_second(Conduct::Refuses(Duration::MAX));
    let node = keyed(&store, FailurePolicy::Closed);
    let waiting = tokio::spawn({
        let node = node.clone();
        async move { node.acquire("k", 1, Duration::MAX).await }
    });
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(!waiting.is_finished());
    store.behave(Conduct::Honest);
    assert_eq!(waiting.await.unwrap(), Ok(Source::Lease));
    // Asked every 0.5 to 1 s: at least four times by 3.5 s, at most eight.
    assert!((5..=9).contains(&store.calls()), "{} calls", store.calls());
}

/// A cold receipt over a store that granted ten times the cost, or claimed
/// a receipt of a hundred times the tokens: the undo sends back at most the
/// cost, never the excess.
#[tokio::test(start_paused = true)]
async fn an_undone_cold_receipt_sends_back_no_more_than_its_cost() {
    let (store, _clock) = Rogue::new(Quota::per_second(1000).unwrap(), Conduct::Overgrants(10));
    let node = keyed(&store, FailurePolicy::Closed);
    let receipt = node.take("k", 2, Duration::ZERO).await.unwrap();
    assert_eq!(receipt.undo().await, 2);
    store.behave(Conduct::InflatesReceipts(100));
    let receipt = node.take("k", 3, Duration::ZERO).await.unwrap();
    assert_eq!(receipt.undo().await, 3);
    let releases = store.releases.lock().unwrap().clone();
    assert_eq!(releases.iter().map(|(_, unused)| unused).sum::<u64>(), 5);
    assert!(
        releases
            .iter()
            .all(|(lease, unused)| lease.granted == *unused)
    );
    store.assert_bound(0);
}

/// A return the store fails: nothing given back, the tokens counted as
/// stranded, and the undo ends at the store timeout at worst.
#[tokio::test(start_paused = true)]
async fn an_undo_whose_return_fails_or_hangs_strands_the_tokens_and_ends() {
    let (store, _clock) = Rogue::hundred_a_second(Conduct::Honest);
    let node = keyed(&store, FailurePolicy::Closed);
    let failing = node.take("k", 2, Duration::ZERO).await.unwrap();
    let hanging = node.take("k", 3, Duration::ZERO).await.unwrap();
    store.behave(Conduct::Fails);
    assert_eq!(failing.undo().await, 0);
    store.behave(Conduct::Hangs);
    // The store timeout ends the hanging return: compared as instants of
    // tokio's paused clock, which only that timer moves.
    let timed_out_by =
        tokio::time::Instant::now() + AllowanceConfig::new(FailurePolicy::Closed).timeout;
    assert_eq!(hanging.undo().await, 0);
    assert!(tokio::time::Instant::now() <= timed_out_by);
    let stats = node.stats();
    assert_eq!((stats.stranded, stats.returned), (5, 0));
    store.behave(Conduct::Honest);
    assert_eq!(store.honest.limiter().available("k"), 95);
    store.assert_bound(0);
}
