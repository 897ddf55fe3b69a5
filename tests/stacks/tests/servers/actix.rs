//! Rate-limit rules as actix-web middleware (`http::actix::RateLimit`), on
//! actix's test service: the same answers as the tower layer (429 with
//! Retry-After, the RateLimit fields and problem+json; the server's 500 for
//! a request with no peer address), the same identity handling (the peer,
//! trusted proxies), and the same work after the response (give-backs,
//! settlement), with a shared rule waiting for its store.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{App, HttpMessage, HttpResponse, test, web};
use tollgate::http::PolicyName;
use tollgate::http::actix::RateLimit;
use tollgate::http::rules::{ActualCost, Rule, Settlement, extract};
use tollgate::identity::{AddrKey, ForwardedResolver, HeaderSource, TrustedProxies};
use tollgate::shared::{FailurePolicy, KeyedAllowance, KeyedAllowanceConfig, LocalStore};
use tollgate::{KeyedLimiter, Limit, ManualClock, Quota, TokenBucket};

/// `capacity`, one back an hour: with the clock frozen, exactly `capacity`.
fn hourly(capacity: u64) -> Quota {
    Quota::new(capacity, 1, Duration::from_secs(3600)).unwrap()
}

fn peer(addr: &str) -> SocketAddr {
    addr.parse().unwrap()
}

/// Two requests pass per peer address, the third is a 429 with the fields
/// and a problem+json body; another address has its own budget; a request
/// with no peer address is the server's 500.
#[actix_web::test]
async fn per_peer_limits_answer_as_the_tower_layer_does() {
    let per_peer = Arc::new(
        KeyedLimiter::builder(hourly(2))
            .clock(ManualClock::new())
            .build::<AddrKey>(),
    );
    let limit = RateLimit::builder()
        .rule(Rule::keyed(
            PolicyName::new("per-peer").unwrap(),
            Arc::clone(&per_peer),
            extract::peer_addr,
        ))
        .build();
    let app = test::init_service(
        App::new()
            .wrap(limit.clone())
            .route("/", web::get().to(|| async { "ok" })),
    )
    .await;
    let from = |addr: &str| {
        test::TestRequest::get()
            .uri("/")
            .peer_addr(peer(addr))
            .to_request()
    };
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(
            test::call_service(&app, from("192.0.2.7:4000"))
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 429]);
    let refused = test::call_service(&app, from("192.0.2.7:4001")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let header = |name: &str| {
        refused
            .headers()
            .get(name)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(header("retry-after"), "3600");
    assert!(header("ratelimit-policy").starts_with(r#""per-peer";q=2;w=7200"#));
    assert_eq!(header("content-type"), "application/problem+json");
    let problem: serde_json::Value =
        serde_json::from_slice(&test::read_body(refused).await).unwrap();
    assert_eq!(
        problem["violated-policies"],
        serde_json::json!(["per-peer"])
    );
    assert_eq!(
        test::call_service(&app, from("198.51.100.1:80"))
            .await
            .status(),
        StatusCode::OK
    );
    let anonymous = test::TestRequest::get().uri("/").to_request();
    assert_eq!(
        test::call_service(&app, anonymous).await.status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(per_peer.len(), 2);
}

/// The client behind a trusted proxy is keyed by the header the proxy
/// wrote; a client that forges it from outside is keyed by its own address.
#[actix_web::test]
async fn trusted_proxies_are_believed_and_others_are_not() {
    let per_client = Arc::new(
        KeyedLimiter::builder(hourly(1))
            .clock(ManualClock::new())
            .build::<AddrKey>(),
    );
    let resolver = ForwardedResolver::new(
        HeaderSource::XForwardedFor,
        TrustedProxies::parse(["10.0.0.0/8"]).unwrap(),
    );
    let limit = RateLimit::builder()
        .rule(Rule::keyed(
            PolicyName::new("per-client").unwrap(),
            Arc::clone(&per_client),
            extract::forwarded(resolver, extract::peer_ip),
        ))
        .build();
    let app = test::init_service(
        App::new()
            .wrap(limit.clone())
            .route("/", web::get().to(|| async { "ok" })),
    )
    .await;
    let via = |peer_addr: &str, forwarded: &str| {
        test::TestRequest::get()
            .uri("/")
            .peer_addr(peer(peer_addr))
            .insert_header(("x-forwarded-for", forwarded))
            .to_request()
    };
    // Two clients behind the proxy: one budget each.
    assert_eq!(
        test::call_service(&app, via("10.0.0.1:1", "203.0.113.1"))
            .await
            .status(),
        200
    );
    assert_eq!(
        test::call_service(&app, via("10.0.0.1:1", "203.0.113.2"))
            .await
            .status(),
        200
    );
    assert_eq!(
        test::call_service(&app, via("10.0.0.1:1", "203.0.113.1"))
            .await
            .status(),
        429
    );
    // A client outside claims to be another: keyed by its own address.
    assert_eq!(
        test::call_service(&app, via("198.51.100.9:1", "203.0.113.3"))
            .await
            .status(),
        200
    );
    assert_eq!(
        test::call_service(&app, via("198.51.100.9:1", "203.0.113.4"))
            .await
            .status(),
        429
    );
    assert_eq!(per_client.len(), 3);
}

/// After the response: a 401 gives the charge back, and a rule settled to
/// its response's `ActualCost` is charged what was used.
#[actix_web::test]
async fn responses_give_back_and_settle() {
    let clock = ManualClock::new();
    let logins = Arc::new(TokenBucket::with_clock(hourly(2), clock.clone()));
    let tokens = Arc::new(TokenBucket::with_clock(hourly(100), clock));
    let limit = RateLimit::builder()
        .rule(
            Rule::global(PolicyName::new("logins").unwrap(), Arc::clone(&logins))
                .give_back_on([http::StatusCode::UNAUTHORIZED])
                .when(|parts| parts.uri.path() == "/login"),
        )
        .rule(
            Rule::global(PolicyName::new("tokens").unwrap(), Arc::clone(&tokens))
                .cost(|_| 10)
                .settled_by(Settlement::Extension)
                .unwrap()
                .when(|parts| parts.uri.path() == "/chat"),
        )
        .build();
    let app = test::init_service(
        App::new()
            .wrap(limit.clone())
            .route(
                "/login",
                web::post().to(|| async { HttpResponse::Unauthorized().finish() }),
            )
            .route(
                "/chat",
                web::post().to(|| async {
                    let mut response = HttpResponse::Ok().body("completion");
                    response.extensions_mut().insert(ActualCost(35));
                    response
                }),
            ),
    )
    .await;
    let post = |path: &str| {
        test::TestRequest::post()
            .uri(path)
            .peer_addr(peer("192.0.2.1:1"))
            .to_request()
    };
    for _ in 0..5 {
        assert_eq!(
            test::call_service(&app, post("/login")).await.status(),
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(logins.available(), 2, "every 401 gave its charge back");
    assert_eq!(
        test::call_service(&app, post("/chat")).await.status(),
        StatusCode::OK
    );
    assert_eq!(tokens.available(), 65, "estimated 10, settled to 35");
}

/// A shared rule's cold key is decided by its store in the response
/// future; a principal copied from actix's extensions keys a rule.
#[actix_web::test]
async fn shared_rules_wait_for_their_store_and_extensions_are_copied() {
    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    struct Account(u32);
    let store = Arc::new(LocalStore::from_limiter(
        KeyedLimiter::builder(hourly(2))
            .clock(ManualClock::new())
            .sweep_interval(None)
            .build(),
    ));
    let allowance = KeyedAllowance::new(
        Arc::clone(&store),
        KeyedAllowanceConfig::new(FailurePolicy::Closed),
    )
    .unwrap();
    let per_account = Rule::shared(
        PolicyName::new("fleet").unwrap(),
        allowance,
        |parts: &http::request::Parts| parts.extensions.get::<Account>().map(|account| account.0),
    );
    let middleware = RateLimit::builder()
        .rule(per_account)
        .build()
        .with_extensions(|request, extensions| {
            if let Some(account) = request.extensions().get::<Account>() {
                extensions.insert(account.clone());
            }
        });
    let app = test::init_service(
        App::new()
            .wrap(middleware)
            .route("/", web::get().to(|| async { "ok" })),
    )
    .await;
    let as_account = |id| {
        let request = test::TestRequest::get()
            .uri("/")
            .peer_addr(peer("192.0.2.1:1"))
            .to_request();
        request.extensions_mut().insert(Account(id));
        request
    };
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(
            test::call_service(&app, as_account(7))
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(
        test::call_service(&app, as_account(8)).await.status(),
        StatusCode::OK
    );
    // No principal: the rule's key is missing from the request (400).
    let anonymous = test::TestRequest::get()
        .uri("/")
        .peer_addr(peer("192.0.2.1:1"))
        .to_request();
    assert_eq!(
        test::call_service(&app, anonymous).await.status(),
        StatusCode::BAD_REQUEST
    );
}
