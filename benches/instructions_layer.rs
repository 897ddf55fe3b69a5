//! Instructions per request through the tower layer, counted under
//! callgrind as `instructions.rs` counts a decision: an admitted request
//! over three in-process rules (a keyed limiter per peer address, a global
//! bucket, a global sliding window) and an inner service that answers at
//! once, [`OPS`] requests after an uncounted setup. A binary of its own:
//! in `instructions.rs` its instantiations moved the other rows' inlining
//! (the sliding refusal's count rose by a fifth with no change of its
//! code), so each gate counts only its own code.
//!
//! Run with `cargo bench -p tollgate-benches --bench instructions_layer`
//! (valgrind and `gungraun-runner`, as for `instructions.rs`).

// gungraun's macros generate a module per benchmark, undocumented.
#![allow(missing_docs)]

use std::hint::black_box;

mod common;

use gungraun::{
    Callgrind, EventKind, LibraryBenchmarkConfig, library_benchmark, library_benchmark_group, main,
};
use tollgate::{KeyedLimiter, SlidingWindow, TokenBucket, TscClock, WindowQuota};

/// Requests per benchmark: a row's instructions per 1000 requests.
const OPS: u64 = 1000;

fn open() -> tollgate::Quota {
    common::OPEN.tollgate()
}

/// The tower layer's service around an inner service that answers at
/// once, with the rules of `tests/allocations/admitted_request_allocates_nothing.rs`: a keyed
/// limiter per peer address, a global bucket and a global sliding window,
/// none kept past `call`.
type Layered = tollgate::http::tower::RateLimitService<
    tower::util::ServiceFn<
        fn(LayerRequest) -> std::future::Ready<Result<LayerResponse, std::convert::Infallible>>,
    >,
>;
type LayerRequest = http::Request<http_body_util::Full<bytes::Bytes>>;
type LayerResponse = http::Response<http_body_util::Full<bytes::Bytes>>;

fn answer(_: LayerRequest) -> std::future::Ready<Result<LayerResponse, std::convert::Infallible>> {
    std::future::ready(Ok(http::Response::new(http_body_util::Full::new(
        bytes::Bytes::from_static(b"ok"),
    ))))
}

/// The layered service and [`OPS`] requests from one peer, built before
/// anything is counted, the peer's key already created.
fn layered() -> (Layered, Vec<LayerRequest>) {
    use std::sync::Arc;
    use tollgate::http::PolicyName;
    use tollgate::http::tower::{RateLimitLayer, Rule, extract};
    use tower::{Layer, Service};

    let quota = open();
    let per_address = KeyedLimiter::builder(quota)
        .clock(TscClock::new())
        .build::<tollgate::identity::AddrKey>();
    let window = SlidingWindow::with_clock(
        WindowQuota::per_minute(500_000).expect("quota"),
        TscClock::new(),
    )
    .expect("window");
    let layer = RateLimitLayer::builder()
        .rule(Rule::keyed(
            PolicyName::new("per-address").expect("name"),
            Arc::new(per_address),
            extract::peer_addr,
        ))
        .rule(Rule::global(
            PolicyName::new("global").expect("name"),
            Arc::new(TokenBucket::with_clock(quota, TscClock::new())),
        ))
        .rule(Rule::global(
            PolicyName::new("per-minute").expect("name"),
            Arc::new(window),
        ))
        .build();
    let inner: fn(LayerRequest) -> _ = answer;
    let mut service = layer.layer(tower::service_fn(inner));
    let request = || {
        let mut request = http::Request::new(http_body_util::Full::new(bytes::Bytes::new()));
        let peer = std::net::SocketAddr::from(([192, 0, 2, 7], 40_000));
        request.extensions_mut().insert(peer);
        request
    };
    let first = poll_ready(service.call(request()));
    assert_eq!(first.status(), http::StatusCode::OK);
    (service, (0..OPS).map(|_| request()).collect())
}

/// The response of a future that is ready at once, as the layer's is for
/// an admitted request over an inner service that answers at once.
fn poll_ready<F: std::future::Future<Output = Result<R, std::convert::Infallible>>, R>(
    future: F,
) -> R {
    let mut future = std::pin::pin!(future);
    let waker = std::task::Waker::noop();
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker))
    {
        std::task::Poll::Ready(Ok(response)) => response,
        _ => unreachable!("the inner service answers at once"),
    }
}

#[library_benchmark]
#[bench::admitted(setup = layered, config = limit(LAYER_ADMITTED))]
fn layer_admitted((mut service, requests): (Layered, Vec<LayerRequest>)) -> Layered {
    use tower::Service;
    for request in requests {
        let response = poll_ready(black_box(&mut service).call(request));
        black_box(response.status());
    }
    service
}

/// The layer's admitted request, three in-process rules: 2 284 instructions
/// measured over the rule engine (2 472 over the layer it replaced), the
/// inner service's own answer included; a limit 3 % above.
const LAYER_ADMITTED: u64 = 2_352_000;

library_benchmark_group!(
    name = layer_rows;
    benchmarks = layer_admitted
);

/// A hard limit of `instructions` on a benchmark's count.
fn limit(instructions: u64) -> LibraryBenchmarkConfig {
    let mut config = LibraryBenchmarkConfig::default();
    config.tool(Callgrind::default().hard_limits([(EventKind::Ir, instructions)]));
    config
}

main!(
    config = LibraryBenchmarkConfig::default()
        .tool(Callgrind::with_args(["--cache-sim=no", "--collect-bus=yes"]));
    library_benchmark_groups = layer_rows
);
