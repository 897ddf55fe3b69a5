//! Settling a keyed shared admission to its actual cost
//! (`KeyedReceipt::settle`, `KeyedAllowance::debit`): the excess debited at
//! the store into debt every node waits out, the rest given back where it
//! came from, a store that does not confirm a debit counted and reported;
//! and a tower rule over a shared budget settled to its response's usage.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::Full;
use tollgate::http::PolicyName;
use tollgate::http::tower::{ActualCost, RateLimitLayer, Rule, Settlement, extract};
use tollgate::shared::{
    BudgetError, FailurePolicy, Grant, KeyedAllowance, KeyedAllowanceConfig, Lease, LocalStore,
    Store,
};
use tollgate::{AcquireError, KeyedLimiter, Limit, ManualClock, Quota};
use tower::{Layer, ServiceExt};

/// A store on a clock nobody advances: nothing refills during a test.
fn frozen(quota: Quota) -> Arc<LocalStore<ManualClock>> {
    Arc::new(LocalStore::from_limiter(
        KeyedLimiter::builder(quota)
            .clock(ManualClock::new())
            .sweep_interval(None)
            .build(),
    ))
}

fn node<S: Store>(store: &Arc<S>) -> KeyedAllowance<S> {
    KeyedAllowance::new(
        Arc::clone(store),
        KeyedAllowanceConfig::new(FailurePolicy::Closed),
    )
    .unwrap()
}

/// A cold key's receipt settles at the store: the rest of its grant is
/// released, the excess debited, and either is what the store holds after.
#[tokio::test]
async fn a_cold_receipt_settles_at_the_store() {
    let store = frozen(Quota::new(100, 1, Duration::from_secs(3600)).unwrap());
    let allowance = node(&store);
    allowance
        .take("k", 30, Duration::ZERO)
        .await
        .unwrap()
        .settle(10)
        .await
        .unwrap();
    assert_eq!(store.limiter().available("k"), 90, "20 of the 30 came back");
    allowance
        .take("k", 30, Duration::ZERO)
        .await
        .unwrap()
        .settle(130)
        .await
        .unwrap();
    // 10 + 130 of 100: 40 in debt, 41 hours to the next token.
    assert_eq!(store.limiter().available("k"), 0);
    assert_eq!(
        store.limiter().key("k").retry_after(1).unwrap(),
        Duration::from_secs(41 * 3600)
    );
    let stats = allowance.stats();
    assert_eq!((stats.debited, stats.undebited), (100, 0));
    // Every node sees the debt.
    let elsewhere = node(&store);
    let refused = elsewhere.take("k", 1, Duration::ZERO).await.unwrap_err();
    assert!(
        matches!(
            refused,
            BudgetError::Limit(AcquireError::Insufficient { .. })
        ),
        "{refused:?}"
    );
    // A cost known only after the fact, with no admission.
    allowance.debit("j", 7).await.unwrap();
    assert_eq!(store.limiter().available("j"), 93);
}

/// Settled below its estimate after time has passed, a cold grant gives
/// back by the rule applied to the grant as it was made: at most the
/// unused part, and at most the whole grant's cost less the time held (not
/// the unused part's cost less it, which would charge the time held twice).
#[tokio::test]
async fn a_cold_receipt_settled_later_gives_back_by_the_grants_rule() {
    let clock = ManualClock::new();
    // One token a second.
    let store = Arc::new(LocalStore::from_limiter(
        KeyedLimiter::builder(Quota::new(100, 1, Duration::from_secs(1)).unwrap())
            .clock(clock.clone())
            .sweep_interval(None)
            .build(),
    ));
    let allowance = node(&store);
    let receipt = allowance.take("k", 30, Duration::ZERO).await.unwrap();
    allowance
        .take("k", 50, Duration::ZERO)
        .await
        .unwrap()
        .keep();
    clock.advance(Duration::from_secs(10));
    // 80 taken, 10 refilled: 30 left. Settled to 10 of 30: 20 unused,
    // within the grant's 30 less the 10 s held.
    receipt.settle(10).await.unwrap();
    assert_eq!(store.limiter().available("k"), 50);
}

/// A store that does not answer a debit: the settlement says so, and the
/// excess is counted as spent beyond the budget.
#[tokio::test(start_paused = true)]
async fn a_debit_the_store_does_not_confirm_is_reported_and_counted() {
    struct Forgetful(Arc<LocalStore<ManualClock>>);
    impl Store for Forgetful {
        type Error = AcquireError;
        fn quota(&self) -> Quota {
            self.0.quota()
        }
        async fn acquire(&self, key: &str, want: u64) -> Result<Grant, AcquireError> {
            self.0.acquire(key, want).await
        }
        async fn release(&self, key: &str, lease: Lease, unused: u64) -> Result<(), AcquireError> {
            self.0.release(key, lease, unused).await
        }
        async fn debit(&self, _: &str, _: u64) -> Result<(), AcquireError> {
            std::future::pending().await
        }
    }
    let inner = frozen(Quota::new(100, 1, Duration::from_secs(3600)).unwrap());
    let store = Arc::new(Forgetful(Arc::clone(&inner)));
    let allowance = node(&store);
    let receipt = allowance.take("k", 10, Duration::ZERO).await.unwrap();
    assert_eq!(receipt.settle(25).await, Err(BudgetError::StoreUnavailable));
    let stats = allowance.stats();
    assert_eq!((stats.debited, stats.undebited), (0, 15));
    assert_eq!(
        inner.limiter().available("k"),
        90,
        "only the estimate reached the store"
    );
}

const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

async fn report_usage<B>(request: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
    let used = request.headers()["x-used"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut response = Response::new(Full::new(Bytes::new()));
    response.extensions_mut().insert(ActualCost(used));
    Ok(response)
}

/// A shared rule settled to its response's usage: the fleet's budget for
/// the key is charged what was used, estimates of 0 included.
#[tokio::test]
async fn a_shared_rule_settles_to_its_responses_usage() {
    for estimate in [5_u64, 0] {
        let store = frozen(Quota::new(1_000, 1, Duration::from_secs(3600)).unwrap());
        let rule = Rule::shared(
            PolicyName::new("fleet").unwrap(),
            node(&store),
            extract::header(API_KEY),
        )
        .cost(move |_| estimate)
        .settled_by(Settlement::Extension)
        .unwrap();
        let layer = RateLimitLayer::builder().rule(rule).build();
        for used in ["1", "300"] {
            let request = Request::get("/")
                .header(API_KEY, "k")
                .header("x-used", used)
                .body(Full::new(Bytes::new()))
                .unwrap();
            let service = layer.layer(tower::service_fn(report_usage::<Full<Bytes>>));
            assert_eq!(
                service.oneshot(request).await.unwrap().status(),
                StatusCode::OK
            );
        }
        // The settlements run in the background: wait until the store has
        // both (the test's runtime runs them on its next turns).
        let key = format!("{}:fleet:k", "fleet".len());
        for _ in 0..1_000 {
            if store.limiter().available(&key) == 699 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(store.limiter().available(&key), 699, "estimate {estimate}");
    }
}

/// Under `FailurePolicy::Fallback`, an excess the store cannot be told of
/// is charged to the node's fallback limiter, which admits the key while
/// the store is down: the outage does not make the excess free.
#[tokio::test]
async fn under_fallback_an_undebited_excess_is_charged_locally() {
    #[derive(Debug, thiserror::Error)]
    #[error("down")]
    struct Down;
    struct Unreachable;
    impl Store for Unreachable {
        type Error = Down;
        fn quota(&self) -> Quota {
            Quota::new(100, 1, Duration::from_secs(3600)).unwrap()
        }
        async fn acquire(&self, _: &str, _: u64) -> Result<Grant, Down> {
            Err(Down)
        }
        async fn release(&self, _: &str, _: Lease, _: u64) -> Result<(), Down> {
            Err(Down)
        }
        async fn debit(&self, _: &str, _: u64) -> Result<(), Down> {
            Err(Down)
        }
    }
    let fallback = FailurePolicy::Fallback(Quota::new(10, 1, Duration::from_secs(3600)).unwrap());
    let allowance =
        KeyedAllowance::new(Arc::new(Unreachable), KeyedAllowanceConfig::new(fallback)).unwrap();
    let receipt = allowance.take("k", 5, Duration::ZERO).await.unwrap();
    assert_eq!(receipt.source(), tollgate::shared::Source::Fallback);
    assert_eq!(receipt.settle(25).await, Err(BudgetError::StoreUnavailable));
    assert_eq!(allowance.stats().undebited, 20);
    // 5 + 20 of the fallback's 10: the key waits out its debt there too.
    let refused = allowance.take("k", 1, Duration::ZERO).await.unwrap_err();
    assert!(
        matches!(
            refused,
            BudgetError::Limit(AcquireError::Insufficient { .. })
        ),
        "{refused:?}"
    );
}

/// A store whose debit panics (user code) when a settlement reaches it
/// after the response: the response is still answered, the panic stays in
/// the store's call, and no budget is minted (the debit is lost, as a
/// failed debit is).
#[tokio::test]
async fn a_store_that_panics_in_a_settlement_never_reaches_the_response() {
    struct Panicking(Arc<LocalStore<ManualClock>>);
    impl Store for Panicking {
        type Error = AcquireError;
        fn quota(&self) -> Quota {
            self.0.quota()
        }
        async fn acquire(&self, key: &str, want: u64) -> Result<Grant, AcquireError> {
            self.0.acquire(key, want).await
        }
        async fn release(&self, key: &str, lease: Lease, unused: u64) -> Result<(), AcquireError> {
            self.0.release(key, lease, unused).await
        }
        async fn debit(&self, _: &str, _: u64) -> Result<(), AcquireError> {
            panic!("the store's debit panicked")
        }
    }
    let inner = frozen(Quota::new(1_000, 1, Duration::from_secs(3600)).unwrap());
    let store = Arc::new(Panicking(Arc::clone(&inner)));
    // An estimate of 0 takes nothing: the usage reported is all debit.
    let rule = Rule::shared(
        PolicyName::new("fleet").unwrap(),
        node(&store),
        extract::header(API_KEY),
    )
    .cost(|_| 0)
    .settled_by(Settlement::Extension)
    .unwrap();
    let layer = RateLimitLayer::builder().rule(rule).build();
    let request = Request::get("/")
        .header(API_KEY, "k")
        .header("x-used", "40")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let service = layer.layer(tower::service_fn(report_usage::<Full<Bytes>>));
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    let key = format!("{}:fleet:k", "fleet".len());
    assert_eq!(
        inner.limiter().available(&key),
        1_000,
        "nothing minted, nothing charged"
    );
}
