//! The cost of a limit on a real HTTP server: an axum "hello" server with no
//! limiter, behind tower layers that do nothing, behind tollgate's tower
//! layer, and behind tower_governor, each limit with a per-address rule and
//! a global rule of the same quota, driven by a load generator in this file
//! over keep-alive HTTP/1.1 connections.
//!
//! Side by side in one run: every server listens on loopback at once, on
//! one server runtime with one worker thread; the client is one more thread.
//! Each round sends the same fixed number of requests to every server in
//! turn, the order rotating from round to round, and every row is the
//! median over rounds. On a 2-core machine the server and the client share
//! the cores, so a request's wall-clock time is both sides' work and their
//! scheduling; the server worker's CPU time per request, and each router
//! called directly without a network (its CPU time per call), measure the
//! limit's cost where the wall clock cannot.
//!
//!     cargo bench -p tollgate-benches --bench server -- --rounds 21    # docs/benchmarks.md's run
//!     cargo bench -p tollgate-benches --bench server -- --only tollgate --calls 1000000   # to profile one
//!     cargo bench -p tollgate-benches --bench server -- --test        # CI: tiny, asserts no timing
//!     python3 benches/plot_server.py                               # docs/img/server_latency.svg
//!
//! The full run writes `target/serverbench/server.json` (every round's
//! throughput, percentiles and CPU times, the medians, the ratios to the
//! unlimited server, each server's latency distribution and the direct
//! calls' times).
//!
//! Every run checks what it can without a clock: every response is a 200
//! with the handler's body, and each limited server's per-address table
//! holds the one client address, so the rules were charged.

use std::error::Error;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Either, Empty, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tollgate::http::PolicyName;
use tollgate::http::tower::{RateLimitLayer, Rule, extract};
use tollgate::identity::{AddrKey, PrefixPolicy};
use tollgate::{KeyedLimiter, Quota, TokenBucket};
use tower::util::{MapRequestLayer, MapResponseLayer};
use tower::{Service, ServiceExt};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::{GlobalKeyExtractor, PeerIpKeyExtractor};

type BoxError = Box<dyn Error + Send + Sync>;

/// Every rule on every limited server: bursts of a billion, refilled at one
/// a microsecond. No run comes near it, so nothing is refused and what is
/// measured is the cost of deciding to admit.
const BURST: u32 = 1_000_000_000;
const REFILL_EVERY: Duration = Duration::from_micros(1);

/// The handler's answer, checked on every response.
const HELLO: &str = "hello\n";

/// The points of each server's latency distribution written out.
const CDF_POINTS: usize = 400;

/// Who answers: the unlimited server, or one of the two layers, with or
/// without the fields each advertises on an admitted response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Setup {
    Unlimited,
    /// A tower layer that does nothing (it maps each request to itself):
    /// what any layer costs in axum, before a limiter does any work.
    NoopLayer,
    /// A tower layer that only wraps each response's body in another type
    /// (`Either::Right`), as a layer with answers of its own does: axum
    /// boxes a body of any type but its own.
    BodyLayer,
    Tollgate,
    /// tollgate answering in axum's own body type (`with_inner_body`), so
    /// that axum does not box the response bodies.
    TollgateInnerBody,
    TowerGovernor,
    /// tollgate with `advertise_on_success`: `RateLimit` and
    /// `RateLimit-Policy` on every response.
    TollgateFields,
    /// tower_governor with `use_headers`: `x-ratelimit-limit` and
    /// `x-ratelimit-remaining` on every response.
    TowerGovernorHeaders,
}

impl Setup {
    const ALL: &[Setup] = &[
        Setup::Unlimited,
        Setup::NoopLayer,
        Setup::BodyLayer,
        Setup::Tollgate,
        Setup::TollgateInnerBody,
        Setup::TowerGovernor,
        Setup::TollgateFields,
        Setup::TowerGovernorHeaders,
    ];

    fn name(self) -> &'static str {
        match self {
            Setup::Unlimited => "unlimited",
            Setup::NoopLayer => "noop_layer",
            Setup::BodyLayer => "body_layer",
            Setup::Tollgate => "tollgate",
            Setup::TollgateInnerBody => "tollgate_inner_body",
            Setup::TowerGovernor => "tower_governor",
            Setup::TollgateFields => "tollgate_fields",
            Setup::TowerGovernorHeaders => "tower_governor_headers",
        }
    }
}

/// A running server, and how to count the client addresses its
/// per-address rule has seen.
struct Server {
    setup: Setup,
    addr: SocketAddr,
    /// The same app, for calls without a network.
    router: Router,
    keys_seen: Option<KeysSeen>,
}

/// One tower_governor configuration of the shared quota, keyed by `$key`,
/// with `$headers` (`use_headers`) if given.
macro_rules! governor_config {
    ($key:expr $(, $headers:ident)?) => {
        GovernorConfigBuilder::default()
            .period(REFILL_EVERY)
            .burst_size(BURST)
            .key_extractor($key)
            $(.$headers())?
            .finish()
            .ok_or("tower_governor refused the quota")?
    };
}

/// tower_governor's layers on `hello`, built as its README shows, with
/// `$headers` (`use_headers`) if given: one per address, one global, the
/// same quota as tollgate's rules. Macros because `use_headers` changes
/// the configuration's type, and with it every bound the router asks of it.
macro_rules! tower_governor {
    ($hello:expr $(, $headers:ident)?) => {{
        let per_address = governor_config!(PeerIpKeyExtractor $(, $headers)?);
        let global = governor_config!(GlobalKeyExtractor $(, $headers)?);
        let table = Arc::clone(per_address.limiter());
        // The layer added last is the outer one: per address first, as
        // tollgate's rules are charged.
        let app = $hello
            .layer(GovernorLayer::new(global))
            .layer(GovernorLayer::new(per_address));
        (app, Some(Box::new(move || table.len()) as KeysSeen))
    }};
}

/// How many client addresses a server's per-address rule has seen.
type KeysSeen = Box<dyn Fn() -> usize>;

/// The app of `setup`, and its per-address table's size.
fn app(setup: Setup) -> Result<(Router, Option<KeysSeen>), BoxError> {
    let hello = Router::new().route("/", get(|| async { HELLO }));
    let quota = Quota::new(u64::from(BURST), 1, REFILL_EVERY)?;
    Ok(match setup {
        Setup::Unlimited => (hello, None),
        Setup::NoopLayer => (
            hello.layer(MapRequestLayer::new(|request: Request<Body>| request)),
            None,
        ),
        Setup::BodyLayer => (
            hello.layer(MapResponseLayer::new(|response: Response<Body>| {
                response.map(Either::<Full<Bytes>, Body>::Right)
            })),
            None,
        ),
        Setup::Tollgate | Setup::TollgateFields => {
            let layer = tollgate(quota, setup == Setup::TollgateFields)?;
            (hello.layer(layer.0), Some(layer.1))
        }
        Setup::TollgateInnerBody => {
            let layer = tollgate(quota, false)?;
            (hello.layer(layer.0.with_inner_body()), Some(layer.1))
        }
        Setup::TowerGovernor => tower_governor!(hello),
        Setup::TowerGovernorHeaders => tower_governor!(hello, use_headers),
    })
}

/// tollgate's layer: a per-address rule, then a global one, each on the
/// default clock (`new` is what a user gets); and its per-address table's
/// size.
fn tollgate(
    quota: Quota,
    advertise_on_success: bool,
) -> Result<(RateLimitLayer, KeysSeen), BoxError> {
    let per_address = Arc::new(KeyedLimiter::<AddrKey>::new(quota));
    // The peer as axum's `ConnectInfo` gives it, keyed under the default
    // prefix policy, as `extract::peer_addr` keys a plain `SocketAddr`.
    let peer = extract::extension_map(|info: &ConnectInfo<SocketAddr>| {
        AddrKey::new(info.0.ip(), PrefixPolicy::default())
    });
    let layer = RateLimitLayer::builder()
        .rule(Rule::keyed(
            PolicyName::new("per-address")?,
            Arc::clone(&per_address),
            peer,
        ))
        .rule(Rule::global(
            PolicyName::new("global")?,
            Arc::new(TokenBucket::new(quota)),
        ))
        .advertise_on_success(advertise_on_success)
        .build();
    Ok((layer, Box::new(move || per_address.len())))
}

/// Starts every setup on `runtime`, each on its own loopback port.
fn start(runtime: &tokio::runtime::Runtime, setups: &[Setup]) -> Result<Vec<Server>, BoxError> {
    setups
        .iter()
        .map(|&setup| {
            let (router, keys_seen) = app(setup)?;
            let served = router.clone();
            let addr = runtime.block_on(async {
                let listener = TcpListener::bind((IpAddr::from([127, 0, 0, 1]), 0)).await?;
                let addr = listener.local_addr()?;
                tokio::spawn(async move {
                    let service = served.into_make_service_with_connect_info::<SocketAddr>();
                    if let Err(error) = axum::serve(listener, service).await {
                        eprintln!("server: {error}");
                    }
                });
                Ok::<_, BoxError>(addr)
            })?;
            Ok(Server {
                setup,
                addr,
                router,
                keys_seen,
            })
        })
        .collect()
}

/// One keep-alive connection, its driver spawned on the client runtime.
async fn connect(addr: SocketAddr) -> Result<SendRequest<Empty<Bytes>>, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            eprintln!("client connection: {error}");
        }
    });
    Ok(sender)
}

/// Sends `count` requests one after another on one connection; each
/// latency (in ns) runs from the request's start to its whole body.
async fn send(mut sender: SendRequest<Empty<Bytes>>, count: usize) -> Result<Vec<u64>, BoxError> {
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let request = Request::get("/")
            .header(header::HOST, "127.0.0.1")
            .body(Empty::new())?;
        let start = Instant::now();
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        latencies.push(u64::try_from(start.elapsed().as_nanos())?);
        if status != StatusCode::OK || body != HELLO {
            return Err(format!("unexpected answer: {status} {body:?}").into());
        }
    }
    Ok(latencies)
}

/// One server's share of a round.
struct Run {
    elapsed: Duration,
    /// Sorted, in ns.
    latencies: Vec<u64>,
    /// CPU time the server's worker thread spent meanwhile, where the OS
    /// tells it.
    server_cpu: Option<Duration>,
}

impl Run {
    fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    /// The server's CPU time per request, in µs.
    fn cpu_per_request(&self) -> Option<f64> {
        self.server_cpu
            .map(|cpu| cpu.as_secs_f64() * 1e6 / self.latencies.len() as f64)
    }
}

/// The CPU time of the calling thread so far, from Linux's schedstat (its
/// first field is the time on a CPU, in ns); `None` elsewhere.
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(
        stat.split_whitespace().next()?.parse().ok()?,
    ))
}

/// The CPU time of the server runtime's one worker thread, read on it.
/// Unlike a wall-clock rate it does not count the time the worker waited
/// for the client or for other programs on a shared machine.
fn server_cpu(server: &tokio::runtime::Runtime) -> Option<Duration> {
    server.block_on(server.spawn(async { thread_cpu() })).ok()?
}

/// `calls` requests handed straight to `router`, one after another, as a
/// server hands them over after parsing, with the peer address a server
/// would attach: what the router and its layers cost, without a network
/// or a client sharing the cores. The time is this thread's CPU time where
/// the OS tells it (the calls never wait, so it is their cost without the
/// time other programs held the core), else the wall clock's.
async fn call_directly(router: &Router, calls: usize) -> Result<Duration, BoxError> {
    let peer = ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40_000)));
    // With its state, as `axum::serve` takes it: its routes are built once,
    // not once per request.
    let mut service: Router = router.clone().with_state(());
    let start = Instant::now();
    let cpu_start = thread_cpu();
    for _ in 0..calls {
        let mut request = Request::get("/").body(Body::empty())?;
        request.extensions_mut().insert(peer);
        let response = ServiceExt::<Request<Body>>::ready(&mut service)
            .await?
            .call(request)
            .await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        if status != StatusCode::OK || body != HELLO {
            return Err(format!("unexpected answer: {status} {body:?}").into());
        }
    }
    let cpu = thread_cpu()
        .zip(cpu_start)
        .map(|(end, start)| end.saturating_sub(start));
    Ok(cpu.unwrap_or_else(|| start.elapsed()))
}

/// `requests` over `connections` keep-alive connections, all opened
/// before the clock starts.
async fn drive(addr: SocketAddr, requests: usize, connections: usize) -> Result<Run, BoxError> {
    let mut senders = Vec::with_capacity(connections);
    for _ in 0..connections {
        senders.push(connect(addr).await?);
    }
    let start = Instant::now();
    let tasks: Vec<_> = senders
        .into_iter()
        .enumerate()
        .map(|(i, sender)| {
            let share = requests / connections + usize::from(i < requests % connections);
            tokio::spawn(send(sender, share))
        })
        .collect();
    let mut latencies = Vec::with_capacity(requests);
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = start.elapsed();
    latencies.sort_unstable();
    Ok(Run {
        elapsed,
        latencies,
        server_cpu: None,
    })
}

/// The `q` quantile of sorted values (nearest rank).
fn quantile(sorted: &[u64], q: f64) -> u64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median, or null for no values (no CPU times off Linux).
fn median_or_null(values: &[f64]) -> Value {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    match values.len() {
        0 => Value::Null,
        n if n % 2 == 1 => json!(values[mid]),
        _ => json!((values[mid - 1] + values[mid]) / 2.0),
    }
}

/// What a run is asked to do, from the command line.
struct Plan {
    test: bool,
    requests: usize,
    connections: usize,
    rounds: usize,
    /// Requests per round handed to each router without a network.
    calls: usize,
    /// All of them, or those `--only` names (to profile one).
    setups: Vec<Setup>,
    out: PathBuf,
}

impl Plan {
    /// `--test` (one tiny round, no output file), `--requests N`,
    /// `--connections N`, `--rounds N`, `--calls N`, `--only SERVER`
    /// (repeatable), `--out FILE`. A filter that names
    /// no part of `server` (another bench's, passed by `cargo bench --
    /// FILTER` to every bench) skips the run.
    fn from_args() -> Result<Option<Plan>, BoxError> {
        let target =
            std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| "target".into(), PathBuf::from);
        let mut plan = Plan {
            test: false,
            requests: 20_000,
            connections: 8,
            rounds: 15,
            calls: 100_000,
            setups: Vec::new(),
            out: target.join("serverbench").join("server.json"),
        };
        let mut filters = Vec::new();
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--test" => plan.test = true,
                "--bench" => {}
                "--requests" => plan.requests = value()?.parse()?,
                "--connections" => plan.connections = value()?.parse()?,
                "--rounds" => plan.rounds = value()?.parse()?,
                "--calls" => plan.calls = value()?.parse()?,
                "--out" => plan.out = value()?.into(),
                "--only" => {
                    let name = value()?;
                    let setup = *Setup::ALL
                        .iter()
                        .find(|s| s.name() == name)
                        .ok_or_else(|| format!("no server named {name}"))?;
                    plan.setups.push(setup);
                }
                flag if flag.starts_with("--") => eprintln!("server bench: ignoring {flag}"),
                filter => filters.push(filter.to_owned()),
            }
        }
        if !filters.is_empty() && !filters.iter().any(|f| "server".contains(f.as_str())) {
            return Ok(None);
        }
        if plan.setups.is_empty() {
            plan.setups = Setup::ALL.to_vec();
        }
        if plan.test {
            plan.requests = 64;
            plan.connections = 2;
            plan.rounds = 1;
            plan.calls = 64;
        }
        if [plan.requests, plan.connections, plan.rounds, plan.calls].contains(&0) {
            return Err("--requests, --connections, --rounds and --calls must be positive".into());
        }
        Ok(Some(plan))
    }
}

/// The first line of /proc that names the machine's CPU, and its kernel.
fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|name| name.trim().to_owned())
        });
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_owned())
    };
    json!({
        "cpu": cpu,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "kernel": read("/proc/sys/kernel/osrelease"),
        "loadavg_at_start": read("/proc/loadavg"),
    })
}

fn main() -> Result<(), BoxError> {
    let Some(plan) = Plan::from_args()? else {
        return Ok(());
    };
    let machine = machine();
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let servers = start(&server_runtime, &plan.setups)?;

    if !plan.test {
        // Connections, allocator and caches warm on every server first.
        for server in &servers {
            client.block_on(drive(server.addr, plan.requests / 4, plan.connections))?;
        }
    }
    let mut runs: Vec<Vec<Run>> = servers.iter().map(|_| Vec::new()).collect();
    for round in 0..plan.rounds {
        for turn in 0..servers.len() {
            let index = (round + turn) % servers.len();
            let before = server_cpu(&server_runtime);
            let mut run =
                client.block_on(drive(servers[index].addr, plan.requests, plan.connections))?;
            run.server_cpu = before
                .zip(server_cpu(&server_runtime))
                .map(|(before, after)| after.saturating_sub(before));
            runs[index].push(run);
        }
        eprintln!("server bench: round {} of {} done", round + 1, plan.rounds);
    }
    let mut direct: Vec<Vec<Duration>> = servers.iter().map(|_| Vec::new()).collect();
    for round in 0..plan.rounds {
        for turn in 0..servers.len() {
            let index = (round + turn) % servers.len();
            direct[index].push(client.block_on(call_directly(&servers[index].router, plan.calls))?);
        }
    }
    for server in &servers {
        if let Some(keys_seen) = &server.keys_seen {
            let keys = keys_seen();
            if keys != 1 {
                return Err(format!(
                    "{}: the per-address rule saw {keys} addresses, not the one client",
                    server.setup.name()
                )
                .into());
            }
        }
    }
    if plan.test {
        eprintln!(
            "server bench: {} servers answered {} requests and {} direct calls each with 200",
            servers.len(),
            plan.requests,
            plan.calls,
        );
        return Ok(());
    }

    let mut report = report(&plan, machine, &servers, &runs);
    report["in_process"] = in_process(&plan, &servers, &direct);
    print_table(&report);
    std::fs::create_dir_all(plan.out.parent().ok_or("--out has no directory")?)?;
    std::fs::write(&plan.out, serde_json::to_string_pretty(&report)?)?;
    eprintln!("server bench: wrote {}", plan.out.display());
    Ok(())
}

/// Every round's numbers, each server's medians and ratios to the
/// unlimited server, and each server's latency distribution over all its
/// rounds.
fn report(plan: &Plan, machine: Value, servers: &[Server], runs: &[Vec<Run>]) -> Value {
    let unlimited = servers
        .iter()
        .position(|s| s.setup == Setup::Unlimited)
        .map(|i| &runs[i]);
    let rows: Vec<Value> = servers
        .iter()
        .zip(runs)
        .map(|(server, runs)| {
            let rps: Vec<f64> = runs.iter().map(Run::per_second).collect();
            let p50: Vec<f64> = runs
                .iter()
                .map(|r| quantile(&r.latencies, 0.5) as f64 / 1e3)
                .collect();
            let p99: Vec<f64> = runs
                .iter()
                .map(|r| quantile(&r.latencies, 0.99) as f64 / 1e3)
                .collect();
            // Each round's throughput against the unlimited server's in the
            // same round: neighbours in time, so load that comes and goes
            // between rounds cancels.
            let paired: Vec<f64> = unlimited.map_or_else(Vec::new, |base| {
                runs.iter()
                    .zip(base)
                    .map(|(run, base)| run.per_second() / base.per_second())
                    .collect()
            });
            let cpu: Vec<f64> = runs.iter().filter_map(Run::cpu_per_request).collect();
            let cpu_paired: Vec<f64> = unlimited.map_or_else(Vec::new, |base| {
                runs.iter()
                    .zip(base)
                    .filter_map(|(run, base)| {
                        Some(run.cpu_per_request()? / base.cpu_per_request()?)
                    })
                    .collect()
            });
            let mut pooled: Vec<u64> = runs
                .iter()
                .flat_map(|r| r.latencies.iter().copied())
                .collect();
            pooled.sort_unstable();
            let cdf: Vec<[f64; 2]> = (1..=CDF_POINTS)
                .map(|i| {
                    let q = i as f64 / CDF_POINTS as f64;
                    [quantile(&pooled, q) as f64 / 1e3, q]
                })
                .collect();
            json!({
                "server": server.setup.name(),
                "rounds": {
                    "rps": rps,
                    "p50_us": p50,
                    "p99_us": p99,
                    "rps_over_unlimited": paired,
                    "server_cpu_us_per_request": cpu,
                    "cpu_over_unlimited": cpu_paired,
                },
                "median": {
                    "rps": median_or_null(&rps),
                    "p50_us": median_or_null(&p50),
                    "p99_us": median_or_null(&p99),
                    "rps_over_unlimited": median_or_null(&paired),
                    "server_cpu_us_per_request": median_or_null(&cpu),
                    "cpu_over_unlimited": median_or_null(&cpu_paired),
                },
                "cdf_us": cdf,
            })
        })
        .collect();
    json!({
        "machine": machine,
        "loadavg_at_end": std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.trim().to_owned()),
        "requests_per_round": plan.requests,
        "connections": plan.connections,
        "rounds": plan.rounds,
        "server_threads": 1,
        "client_threads": 1,
        "quota": { "burst": BURST, "refill_every_ns": REFILL_EVERY.as_nanos() as u64 },
        "servers": rows,
    })
}

/// Each router's CPU time per direct call, its median, and the median of each
/// round's difference from the unlimited router's: the layer's own cost.
fn in_process(plan: &Plan, servers: &[Server], direct: &[Vec<Duration>]) -> Value {
    let per_call = |times: &[Duration]| -> Vec<f64> {
        times
            .iter()
            .map(|t| t.as_nanos() as f64 / plan.calls as f64)
            .collect()
    };
    let unlimited = servers
        .iter()
        .position(|s| s.setup == Setup::Unlimited)
        .map(|i| per_call(&direct[i]));
    let rows: Vec<Value> = servers
        .iter()
        .zip(direct)
        .map(|(server, times)| {
            let ns = per_call(times);
            let added: Vec<f64> = unlimited.as_ref().map_or_else(Vec::new, |base| {
                ns.iter().zip(base).map(|(ns, base)| ns - base).collect()
            });
            json!({
                "server": server.setup.name(),
                "rounds_ns_per_request": ns,
                "median_ns_per_request": median_or_null(&ns),
                "median_ns_over_unlimited": median_or_null(&added),
            })
        })
        .collect();
    json!({ "calls_per_round": plan.calls, "servers": rows })
}

/// A number of the report with `digits` decimals, or nothing for null.
fn cell(value: &Value, digits: usize) -> String {
    value
        .as_f64()
        .map_or_else(String::new, |v| format!("{v:.digits$}"))
}

/// The Markdown tables of the medians.
fn print_table(report: &Value) {
    println!(
        "| server | requests/s | p50 µs | p99 µs | requests/s ÷ unlimited's | server CPU µs/request | CPU ÷ unlimited's |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for row in report["servers"].as_array().into_iter().flatten() {
        let median = &row["median"];
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            row["server"].as_str().unwrap_or("?"),
            cell(&median["rps"], 0),
            cell(&median["p50_us"], 1),
            cell(&median["p99_us"], 1),
            cell(&median["rps_over_unlimited"], 3),
            cell(&median["server_cpu_us_per_request"], 2),
            cell(&median["cpu_over_unlimited"], 3),
        );
    }
    println!();
    println!("| router called directly | CPU ns/request | ns over unlimited |");
    println!("|---|---:|---:|");
    let direct = report["in_process"]["servers"].as_array();
    for row in direct.into_iter().flatten() {
        println!(
            "| {} | {} | {} |",
            row["server"].as_str().unwrap_or("?"),
            cell(&row["median_ns_per_request"], 0),
            cell(&row["median_ns_over_unlimited"], 0),
        );
    }
}
