//! What the tower layer allocates per request: an admitted request through
//! in-process rules (a keyed limiter, a bucket, a window) that keep nothing
//! past `call` (no status to give back, no fields to advertise) costs no
//! heap allocation beyond the inner service's own. The rules are bound on
//! the stack, charged from there, and the inner future is held in place.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use stats_alloc::Region;
use tollgate::http::PolicyName;
use tollgate::http::tower::{RateLimitLayer, Rule, extract};
use tollgate::identity::AddrKey;
use tollgate::{KeyedLimiter, Limit, ManualClock, Quota, SlidingWindow, TokenBucket, WindowQuota};
use tower::{Layer, Service, ServiceExt};

/// Requests measured per service.
const REQUESTS: usize = 200;

/// The inner service: a 200 whose body is static, allocating nothing.
async fn hello(_: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
}

/// Requests from one peer, built before anything is counted (their
/// extension map is an allocation of the caller's).
fn requests() -> Vec<Request<Full<Bytes>>> {
    let peer = SocketAddr::from(([192, 0, 2, 7], 40_000));
    (0..REQUESTS)
        .map(|_| {
            let mut request = Request::new(Full::new(Bytes::new()));
            request.extensions_mut().insert(peer);
            request
        })
        .collect()
}

/// Heap allocations while `service` answers [`REQUESTS`] requests, each
/// checked to be a 200.
async fn allocations<S, B>(service: &mut S) -> usize
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>, Error = Infallible>,
{
    let requests = requests();
    let region = Region::new(crate::GLOBAL);
    for request in requests {
        let response = service.ready().await.unwrap().call(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    region.change().allocations + region.change().reallocations
}

/// Measured rounds after the warm-up one.
const ROUNDS: usize = 5;

#[test]
fn an_admitted_request_through_in_process_rules_allocates_nothing() {
    let _alone = crate::alone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let quota = Quota::new(1_000_000, 1, Duration::from_secs(1)).unwrap();
    let clock = ManualClock::new();
    let per_address = Arc::new(
        KeyedLimiter::builder(quota)
            .clock(clock.clone())
            .build::<AddrKey>(),
    );
    let global = Arc::new(TokenBucket::with_clock(quota, clock.clone()));
    let per_minute = WindowQuota::per_minute(10_000).unwrap();
    let window = Arc::new(SlidingWindow::with_clock(per_minute, clock).unwrap());
    let layer = RateLimitLayer::builder()
        .rule(Rule::keyed(
            PolicyName::new("per-address").unwrap(),
            Arc::clone(&per_address),
            extract::peer_addr,
        ))
        .rule(Rule::global(
            PolicyName::new("global").unwrap(),
            Arc::clone(&global),
        ))
        .rule(Rule::global(
            PolicyName::new("per-minute").unwrap(),
            Arc::clone(&window),
        ))
        .build();
    let mut bare = tower::service_fn(hello);
    let mut limited = layer.layer(tower::service_fn(hello));
    runtime.block_on(async {
        // Warm: the peer's key is created by the first request, and the
        // runtime's own structures are in place.
        allocations(&mut limited).await;
        allocations(&mut bare).await;
        // The counter is process-wide: the harness's own thread may
        // allocate during a round, so each side is its fewest over rounds.
        let (mut limited_allocations, mut bare_allocations) = (usize::MAX, usize::MAX);
        for _ in 0..ROUNDS {
            limited_allocations = limited_allocations.min(allocations(&mut limited).await);
            bare_allocations = bare_allocations.min(allocations(&mut bare).await);
        }
        assert_eq!(limited_allocations, bare_allocations);
    });
    // Every rule charged every limited request (the clock stands still).
    assert_eq!(per_address.len(), 1);
    let charged = (1 + ROUNDS) as u64 * REQUESTS as u64;
    assert_eq!(global.available(), quota.capacity() - charged);
    assert_eq!(window.available(), per_minute.limit() - charged);
}
