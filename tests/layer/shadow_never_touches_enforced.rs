//! Shadow mode (`Rule::shadow`): a rule decided and counted like any other
//! that never refuses. Its counted refusals are exactly what the same rule
//! enforced would have refused; a refusal by an enforced rule gives back
//! what the shadow rule took; a quiet shadow is invisible to clients and an
//! advertised one never names itself violated.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::Full;
use proptest::prelude::*;
use tollgate::concurrency::KeyedConcurrencyLimiter;
use tollgate::http::PolicyName;
use tollgate::http::tower::{RateLimitLayer, Rule, Shadow, extract};
use tollgate::shared::{FailurePolicy, KeyedAllowance, KeyedAllowanceConfig, LocalStore};
use tollgate::{KeyedLimiter, Limit, ManualClock, Quota, TokenBucket};
use tower::{Layer, ServiceExt};

const ACCOUNT: HeaderName = HeaderName::from_static("x-account");

async fn ok<B>(_: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::new())))
}

fn as_account(account: u8) -> Request<Full<Bytes>> {
    Request::get("/")
        .header(ACCOUNT, account.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap()
}

async fn send(
    layer: &RateLimitLayer,
    request: Request<Full<Bytes>>,
) -> Response<tollgate::http::tower::RateLimitBody<Full<Bytes>>> {
    layer
        .layer(tower::service_fn(ok::<Full<Bytes>>))
        .oneshot(request)
        .await
        .unwrap()
}

fn per_account(quota: Quota, clock: &ManualClock) -> Rule {
    let limiter = Arc::new(
        KeyedLimiter::builder(quota)
            .clock(clock.clone())
            .build::<String>(),
    );
    Rule::keyed(
        PolicyName::new("per-account").unwrap(),
        limiter,
        extract::header(ACCOUNT),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

proptest! {
    /// The same requests, at the same instants, through the rule enforced
    /// and through the rule in shadow (on clocks advanced alike): the
    /// shadow layer admits every request, and counts a refusal exactly
    /// where the enforced one answers 429, request by request.
    #[test]
    fn counted_refusals_are_what_enforcement_refuses(
        capacity in 1_u64..5,
        period_ms in 1_u64..2_000,
        steps in proptest::collection::vec((0_u8..3, 0_u64..1_500), 1..120),
    ) {
        let quota = Quota::new(capacity, 1, Duration::from_millis(period_ms)).unwrap();
        let (enforced_clock, shadow_clock) = (ManualClock::new(), ManualClock::new());
        let enforced = RateLimitLayer::builder().rule(per_account(quota, &enforced_clock)).build();
        let shadow_rule = per_account(quota, &shadow_clock).shadow(Shadow::Quiet);
        let shadow = RateLimitLayer::builder().rule(shadow_rule.clone()).build();
        let runtime = runtime();
        let mut refused = 0;
        for (account, advance_ms) in steps {
            enforced_clock.advance(Duration::from_millis(advance_ms));
            shadow_clock.advance(Duration::from_millis(advance_ms));
            let enforced_status = runtime.block_on(send(&enforced, as_account(account))).status();
            let shadow_status = runtime.block_on(send(&shadow, as_account(account))).status();
            prop_assert_eq!(shadow_status, StatusCode::OK);
            refused += u64::from(enforced_status == StatusCode::TOO_MANY_REQUESTS);
            prop_assert_eq!(shadow_rule.shadow_refusals(), Some(refused));
        }
    }
}

/// A request an enforced rule refuses gives back what the shadow rule
/// took, as it would enforced; a shadow rule that would refuse leaves the
/// enforced rules charged as without it.
#[tokio::test]
async fn a_refusal_by_an_enforced_rule_gives_back_the_shadows_charge() {
    let clock = ManualClock::new();
    let hourly = |n| Quota::new(n, 1, Duration::from_secs(3600)).unwrap();
    let shadow_bucket = Arc::new(TokenBucket::with_clock(hourly(3), clock.clone()));
    let enforced_bucket = Arc::new(TokenBucket::with_clock(hourly(5), clock.clone()));
    let shadow = Rule::global(PolicyName::new("next").unwrap(), Arc::clone(&shadow_bucket))
        .shadow(Shadow::Quiet);
    let layer = RateLimitLayer::builder()
        .rule(shadow.clone())
        .rule(Rule::global(
            PolicyName::new("now").unwrap(),
            Arc::clone(&enforced_bucket),
        ))
        .build();
    let mut statuses = Vec::new();
    for _ in 0..7 {
        statuses.push(send(&layer, as_account(0)).await.status().as_u16());
    }
    // Five admitted (two past the shadow's 3), then the enforced limit.
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429]);
    assert_eq!(enforced_bucket.available(), 0);
    // The shadow took its 3, and kept none of what it took for the two
    // requests the enforced rule refused.
    assert_eq!(shadow_bucket.available(), 0);
    // Requests 4 and 5: admitted, and what enforcing the shadow would add
    // to the refusals. 6 and 7 were refused anyway: not counted.
    assert_eq!(shadow.shadow_refusals(), Some(2));
}

/// A quiet shadow rule is nowhere in the fields; an advertised one is in
/// them, but a 429 from an enforced rule neither names it violated nor
/// waits for it, however long its own wait.
#[tokio::test]
async fn quiet_shadows_are_invisible_and_advertised_ones_never_violated() {
    let clock = ManualClock::new();
    for shown in [Shadow::Quiet, Shadow::Advertised] {
        // The shadow: 1 a day. The enforced rule: 2 a minute.
        let daily = Arc::new(TokenBucket::with_clock(
            Quota::new(1, 1, Duration::from_secs(86_400)).unwrap(),
            clock.clone(),
        ));
        let minute = Arc::new(TokenBucket::with_clock(
            Quota::new(2, 1, Duration::from_secs(60)).unwrap(),
            clock.clone(),
        ));
        let shadow = Rule::global(PolicyName::new("daily").unwrap(), daily).shadow(shown);
        let layer = RateLimitLayer::builder()
            .rule(shadow.clone())
            .rule(Rule::global(PolicyName::new("minute").unwrap(), minute))
            .advertise_on_success(true)
            .build();
        let admitted = send(&layer, as_account(0)).await;
        let policy = admitted.headers()["ratelimit-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            policy.contains("daily"),
            shown == Shadow::Advertised,
            "{policy}"
        );
        assert_eq!(send(&layer, as_account(0)).await.status(), StatusCode::OK);
        let refused = send(&layer, as_account(0)).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        // The enforced rule's wait (one token back in 60 s), not the
        // shadow's day.
        assert_eq!(refused.headers()["retry-after"], "60");
        use http_body_util::BodyExt;
        let body = refused.into_body().collect().await.unwrap().to_bytes();
        let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(problem["violated-policies"], serde_json::json!(["minute"]));
        // The second request was admitted and the shadow would have refused
        // it; the third was refused anyway, so enforcing the shadow would
        // not add it to the refusals.
        assert_eq!(shadow.shadow_refusals(), Some(1));
    }
}

/// Shared and in-flight rules in shadow: a store's refusal and a permit
/// refused are counted, and the request is admitted.
#[tokio::test]
async fn shared_and_in_flight_shadows_count_and_admit() {
    let clock = ManualClock::new();
    let quota = Quota::new(1, 1, Duration::from_secs(3600)).unwrap();
    let store = Arc::new(LocalStore::from_limiter(
        KeyedLimiter::builder(quota)
            .clock(clock.clone())
            .sweep_interval(None)
            .build(),
    ));
    let allowance =
        KeyedAllowance::new(store, KeyedAllowanceConfig::new(FailurePolicy::Closed)).unwrap();
    let shared = Rule::shared(
        PolicyName::new("fleet").unwrap(),
        allowance,
        extract::header(ACCOUNT),
    )
    .shadow(Shadow::Quiet);
    // No room at all in flight: every request would be refused a permit.
    let in_flight = Arc::new(KeyedConcurrencyLimiter::<String>::new(1).unwrap());
    let _held = in_flight.try_acquire(&"7".to_owned(), 1).unwrap();
    let reports = Rule::in_flight(
        PolicyName::new("reports").unwrap(),
        in_flight,
        extract::header(ACCOUNT),
    )
    .shadow(Shadow::Quiet);
    let layer = RateLimitLayer::builder()
        .rule(shared.clone())
        .rule(reports.clone())
        .build();
    for _ in 0..3 {
        assert_eq!(send(&layer, as_account(7)).await.status(), StatusCode::OK);
    }
    assert_eq!(
        shared.shadow_refusals(),
        Some(2),
        "the store admits one an hour"
    );
    assert_eq!(reports.shadow_refusals(), Some(3));
}

/// A shadow rule settled to the actual cost: what it admitted settles, and
/// a request it would have refused (which it took nothing for) is not
/// charged its usage either, as enforced it would have cost nothing.
#[tokio::test]
async fn a_shadow_rule_that_would_refuse_is_not_settled() {
    use tollgate::http::tower::{ActualCost, Settlement};
    async fn used<B>(_: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
        let mut response = Response::new(Full::new(Bytes::new()));
        response.extensions_mut().insert(ActualCost(7));
        Ok(response)
    }
    let clock = ManualClock::new();
    let bucket = Arc::new(TokenBucket::with_clock(
        Quota::new(10, 1, Duration::from_secs(3600)).unwrap(),
        clock,
    ));
    let shadow = Rule::global(PolicyName::new("next").unwrap(), Arc::clone(&bucket))
        .cost(|_| 5)
        .settled_by(Settlement::Extension)
        .unwrap()
        .shadow(Shadow::Quiet);
    let layer = RateLimitLayer::builder().rule(shadow.clone()).build();
    for _ in 0..3 {
        let response = layer
            .layer(tower::service_fn(used::<Full<Bytes>>))
            .oneshot(as_account(0))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    // 5, settled to 7: 3 left. The next two need 5: refused in shadow,
    // counted, and charged neither 5 nor their usage of 7.
    assert_eq!(bucket.available(), 3);
    assert_eq!(shadow.shadow_refusals(), Some(2));
}

/// Whatever the order of the rules, a shadow rule never moves the wait an
/// enforced refusal tells, nor is named in it.
#[tokio::test]
async fn a_shadow_rule_after_the_enforced_one_moves_no_wait() {
    use http_body_util::BodyExt;
    for shadow_first in [true, false] {
        let clock = ManualClock::new();
        let daily = Arc::new(TokenBucket::with_clock(
            Quota::new(1, 1, Duration::from_secs(86_400)).unwrap(),
            clock.clone(),
        ));
        let minute = Arc::new(TokenBucket::with_clock(
            Quota::new(2, 1, Duration::from_secs(60)).unwrap(),
            clock.clone(),
        ));
        let shadow =
            Rule::global(PolicyName::new("daily").unwrap(), daily).shadow(Shadow::Advertised);
        let enforced = Rule::global(PolicyName::new("minute").unwrap(), minute);
        let rules = if shadow_first {
            [shadow, enforced]
        } else {
            [enforced, shadow]
        };
        let layer = rules
            .into_iter()
            .fold(RateLimitLayer::builder(), |b, r| b.rule(r))
            .build();
        for _ in 0..2 {
            assert_eq!(send(&layer, as_account(0)).await.status(), StatusCode::OK);
        }
        let refused = send(&layer, as_account(0)).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            refused.headers()["retry-after"],
            "60",
            "shadow first: {shadow_first}"
        );
        let body = refused.into_body().collect().await.unwrap().to_bytes();
        let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(problem["violated-policies"], serde_json::json!(["minute"]));
    }
}

/// A clock that moves one microsecond at every reading, and logs each
/// reading: time passes between any two reads of a limit, as on a real
/// clock, and the test knows exactly when each read happened.
#[derive(Clone, Default)]
struct Stepping {
    now_ns: Arc<std::sync::atomic::AtomicU64>,
    step_ns: Arc<std::sync::atomic::AtomicU64>,
    readings: Arc<std::sync::Mutex<Vec<u64>>>,
}

impl Stepping {
    fn new() -> Stepping {
        let clock = Stepping::default();
        clock
            .step_ns
            .store(1_000, std::sync::atomic::Ordering::SeqCst);
        clock
    }
}

impl tollgate::Clock for Stepping {
    fn now_nanos(&self) -> u64 {
        use std::sync::atomic::Ordering::SeqCst;
        let step = self.step_ns.load(SeqCst);
        let now = self.now_ns.fetch_add(step, SeqCst) + step;
        self.readings.lock().unwrap().push(now);
        now
    }
}

/// An enforced rule before a shadow rule that refuses everything is
/// charged its cost once per request, on a clock that moves between reads:
/// never taken, given back and taken again (an undo after the clock moved
/// keeps the time it held). The oracle is the bucket's own arithmetic: a
/// full bucket first charged at `t1` holds `B - cost·n + (t - t1)` tokens
/// at `t` after `n` charges, while it is not full again.
#[tokio::test]
async fn an_enforced_rule_beside_a_refusing_shadow_is_charged_its_cost_once() {
    const CAPACITY: u64 = 1_000_000;
    const COST: u64 = 100;
    const REQUESTS: u64 = 200;
    for shadow_first in [false, true] {
        let clock = Stepping::new();
        // One token a microsecond: the clock's step refills one.
        let enforced = Arc::new(TokenBucket::with_clock(
            Quota::new(CAPACITY, CAPACITY, Duration::from_secs(1)).unwrap(),
            clock.clone(),
        ));
        // Empty on a frozen clock: it refuses every request.
        let never = Arc::new(TokenBucket::with_clock(
            Quota::new(1, 1, Duration::from_secs(3_600)).unwrap(),
            ManualClock::new(),
        ));
        assert_eq!(never.try_acquire(1), Ok(()));
        let shadow = Rule::global(PolicyName::new("never").unwrap(), Arc::clone(&never))
            .cost(|_| COST)
            .shadow(Shadow::Quiet);
        // Clones of a rule share its count.
        let counted = shadow.clone();
        let rule = Rule::global(PolicyName::new("enforced").unwrap(), Arc::clone(&enforced))
            .cost(|_| COST);
        let rules = if shadow_first {
            [shadow, rule]
        } else {
            [rule, shadow]
        };
        let layer = rules
            .into_iter()
            .fold(RateLimitLayer::builder(), |b, r| b.rule(r))
            .build();
        clock.readings.lock().unwrap().clear();
        for _ in 0..REQUESTS {
            assert_eq!(send(&layer, as_account(0)).await.status(), StatusCode::OK);
        }
        // Frozen from here: the last reading is the instant of the check.
        clock.step_ns.store(0, std::sync::atomic::Ordering::SeqCst);
        let first = clock.readings.lock().unwrap()[0];
        let available = enforced.available();
        let now = *clock.readings.lock().unwrap().last().unwrap();
        let refilled = (now - first) / 1_000;
        assert_eq!(
            available,
            CAPACITY - COST * REQUESTS + refilled,
            "shadow first: {shadow_first}"
        );
        assert_eq!(
            counted.shadow_refusals(),
            Some(REQUESTS),
            "shadow first: {shadow_first}"
        );
    }
}

/// A shadow rule on the same bucket as an enforced rule refuses nothing and
/// takes nothing, in either order: every request gets exactly the answer
/// the enforced rule alone gives it (frozen clock).
#[tokio::test]
async fn a_shadow_rule_on_an_enforced_rules_bucket_changes_no_answer() {
    // (capacity, tokens spent beforehand, requests)
    for (capacity, spent, requests) in [(1, 0, 3), (5, 4, 3), (5, 0, 7)] {
        let answers = |rules: &dyn Fn(Arc<TokenBucket<ManualClock>>) -> Vec<Rule>| {
            let bucket = Arc::new(TokenBucket::with_clock(
                Quota::new(capacity, 1, Duration::from_secs(3_600)).unwrap(),
                ManualClock::new(),
            ));
            if spent > 0 {
                assert_eq!(bucket.try_acquire(spent), Ok(()));
            }
            let layer = rules(bucket)
                .into_iter()
                .fold(RateLimitLayer::builder(), |b, r| b.rule(r))
                .build();
            async move {
                let mut statuses = Vec::new();
                for _ in 0..requests {
                    statuses.push(send(&layer, as_account(0)).await.status());
                }
                statuses
            }
        };
        let enforced = |bucket: Arc<TokenBucket<ManualClock>>| {
            Rule::global(PolicyName::new("enforced").unwrap(), bucket)
        };
        let shadow = |bucket: Arc<TokenBucket<ManualClock>>| {
            Rule::global(PolicyName::new("shadow").unwrap(), bucket).shadow(Shadow::Quiet)
        };
        let alone = answers(&|bucket| vec![enforced(bucket)]).await;
        let before = answers(&|bucket| vec![enforced(Arc::clone(&bucket)), shadow(bucket)]).await;
        let after = answers(&|bucket| vec![shadow(Arc::clone(&bucket)), enforced(bucket)]).await;
        assert_eq!(before, alone, "[E, S], B = {capacity}, {spent} spent");
        assert_eq!(after, alone, "[S, E], B = {capacity}, {spent} spent");
    }
}

/// A shadow rule beside an enforced one on the same bucket, both settled to
/// the response's usage: the limit is settled once, by the enforced rule.
/// The shadow rule took nothing, so it settles nothing (its usage charged
/// as debt would refuse real clients early).
#[tokio::test]
async fn a_shadow_rule_on_an_enforced_rules_bucket_is_not_settled_twice() {
    use tollgate::http::tower::{ActualCost, Settlement};
    async fn used<B>(_: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
        let mut response = Response::new(Full::new(Bytes::new()));
        response.extensions_mut().insert(ActualCost(20));
        Ok(response)
    }
    let bucket = Arc::new(TokenBucket::with_clock(
        Quota::new(100, 100, Duration::from_secs(3600)).unwrap(),
        ManualClock::new(),
    ));
    let rule = |name: &str| {
        Rule::global(PolicyName::new(name).unwrap(), Arc::clone(&bucket))
            .cost(|_| 10)
            .settled_by(Settlement::Extension)
            .unwrap()
    };
    for shadow_first in [false, true] {
        bucket.reset();
        let (enforced, shadow) = (rule("now"), rule("next").shadow(Shadow::Quiet));
        let layer = if shadow_first {
            RateLimitLayer::builder().rule(shadow).rule(enforced)
        } else {
            RateLimitLayer::builder().rule(enforced).rule(shadow)
        }
        .build();
        let response = layer
            .layer(tower::service_fn(used::<Full<Bytes>>))
            .oneshot(as_account(0))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        // 10 estimated, settled to 20 once: 80 left.
        assert_eq!(bucket.available(), 80, "shadow first: {shadow_first}");
    }
}
