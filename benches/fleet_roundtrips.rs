//! Store round trips per 1000 admissions, utilisation and over-admission
//! of a fleet of node *processes* sharing budgets in one real Redis.
//!
//! The parent starts a private `redis-server` (loopback, no persistence),
//! then, for each scenario, spawns `n` children of this same binary. Each
//! child is a node: a tokio runtime, its own `RedisStore` connection and
//! `LocalAllowance`s, callers demanding tokens until a wall-clock deadline
//! shared by the fleet. Each child prints one line of counts; the parent
//! sums them and prints a table:
//!
//! - **round trips / 1000**: every `acquire` and `release` the nodes sent
//!   to Redis (counted by a wrapper around the store), per 1000 tokens
//!   admitted;
//! - **hot keys**, **hot/1000**: the keys whose demand was at least twice
//!   their budget `B + r·t` (exhausted), and the round trips per 1000
//!   admissions on those keys alone;
//! - **utilisation**: admitted / (`B + r·t`) over the hot keys, `t` the
//!   run (from the shared start to the shared deadline);
//! - **held**: tokens in the nodes' pools at the deadline, over the same
//!   `B + r·t`: leased within the run, not yet spent (a node with modest
//!   demand spends a batch over seconds), given back at shutdown;
//! - **over-admission**: tokens admitted beyond `B + r·t'` per key, `t'` an
//!   upper bound of the time the store could have granted in (from the
//!   start to the last child's exit). Must be 0.
//!
//! Scenarios, each at 4, 8 and 16 nodes:
//!
//! - `one key`: one exhausted key, `B = 2000`, `r = 20 000/s`; every node
//!   demands far more than the whole rate (a caller drains the pool, then
//!   waits for the next lease). A batch is `B/8 = 250` tokens, so paced
//!   nodes should make about 4 round trips per 1000 admissions at any
//!   fleet size.
//! - `zipf 10000`: 10 000 keys of `B = 1000`, `r = 250/s` each (a batch of
//!   125), the fleet offering 20 000 requests a second in all (split evenly
//!   over its nodes, so every fleet size sees the same demand), each for
//!   one token of a key drawn from a Zipf law (exponent 1), answered at
//!   once or refused: the top three keys are exhausted, the long tail is
//!   cold. One `LocalAllowance` per key per node (default configuration).
//!   Overall round trips are dominated by the cold keys, each of whose
//!   requests finds an empty pool, leases a token or two, and gives them
//!   back when idle: per-request store calls are the better design for
//!   them (the keyed shared limiter's cold path).
//!
//! `cargo bench -p tollgate-benches --bench fleet_roundtrips` runs 10 s per
//! one-key row and 30 s per Zipf row (`-- zipf` or `-- "one key"` runs
//! only those rows). Without
//! `--bench` (`cargo test -p tollgate-benches --benches`) or with `--test` (`cargo bench --
//! --test`), each scenario runs once at 2 nodes for
//! 300 ms with 100 Zipf keys and only the bound is checked: nothing that
//! depends on timing. Without `redis-server` the run is skipped with a
//! notice, unless `CI` is set, where it fails.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tollgate::Quota;
use tollgate::jitter::JitterGenerator;
use tollgate::shared::{
    AllowanceConfig, FailurePolicy, Grant, Lease, LocalAllowance, RedisStore, Store,
};

use redis_server::RedisServer;
use tollgate_test_support::redis_server;

/// The first argument of a child process.
const NODE: &str = "--fleet-node";
/// How long children get to connect before the shared start.
const WARM_UP: Duration = Duration::from_millis(1500);
const CALL_TIMEOUT: Duration = Duration::from_millis(500);

/// One scenario: its keys, quota and demand.
#[derive(Clone, Copy, Debug)]
struct Scenario {
    keys: usize,
    capacity: u64,
    rate: u64,
    /// Requests offered per second (by the fleet; by one node once handed
    /// to it), spread over the keys by a Zipf law; `None`: one key,
    /// unbounded demand.
    offered: Option<u64>,
}

impl Scenario {
    fn quota(&self) -> Quota {
        Quota::new(self.capacity, self.rate, Duration::from_secs(1)).expect("a valid quota")
    }

    fn encode(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.keys,
            self.capacity,
            self.rate,
            self.offered.unwrap_or(0)
        )
    }

    fn decode(text: &str) -> Scenario {
        let parts: Vec<&str> = text.split(':').collect();
        let number = |i: usize| parts[i].parse::<u64>().expect("a number");
        Scenario {
            keys: number(0) as usize,
            capacity: number(1),
            rate: number(2),
            offered: Some(number(3)).filter(|&n| n > 0),
        }
    }

    fn label(&self) -> String {
        match self.offered {
            None => "one key".to_string(),
            Some(_) => format!("zipf {}", self.keys),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(NODE) {
        node(&args[2..]);
        return;
    }
    let full = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let Some(server) = RedisServer::start("fleet_roundtrips") else {
        return;
    };
    // The Zipf rows run longer: a slow key's nodes pause seconds apart, and
    // their share estimates need a few pauses to settle.
    let (one_key_run, zipf_run, fleets, zipf_keys): (u64, u64, &[usize], usize) = if full {
        (10_000, 30_000, &[4, 8, 16], 10_000)
    } else {
        (300, 300, &[2], 100)
    };
    let scenarios = [
        (
            Scenario {
                keys: 1,
                capacity: 2_000,
                rate: 20_000,
                offered: None,
            },
            Duration::from_millis(one_key_run),
        ),
        (
            Scenario {
                keys: zipf_keys,
                capacity: 1_000,
                rate: 250,
                offered: Some(20_000),
            },
            Duration::from_millis(zipf_run),
        ),
    ];
    println!(
        "{:<10} {:>5} {:>10} {:>12} {:>9} {:>9} {:>9} {:>11} {:>7} {:>5} {:>7}",
        "scenario",
        "nodes",
        "admitted",
        "round trips",
        "per 1000",
        "hot keys",
        "hot/1000",
        "utilisation",
        "held",
        "over",
        "errors"
    );
    // Like criterion: a free argument keeps the rows whose label has it.
    let filter = args[1..].iter().find(|a| !a.starts_with("--"));
    let chosen = scenarios
        .iter()
        .filter(|(s, _)| filter.is_none_or(|f| s.label().contains(f.as_str())));
    for (round, (scenario, run)) in chosen.enumerate() {
        for &nodes in fleets {
            // A fresh prefix per row: no row inherits another's debts.
            let prefix = format!("fleet:{round}:{nodes}:");
            let totals = run_fleet(&server, scenario, nodes, *run, &prefix);
            totals.print(scenario, nodes);
            assert_eq!(totals.over_admitted, 0, "{scenario:?}: over-admission");
        }
    }
}

/// What a fleet did, summed over its nodes.
struct Totals {
    admitted: u64,
    round_trips: u64,
    /// Store calls that failed or timed out.
    errors: u64,
    /// Round trips, admitted and allowed over the exhausted keys (demand
    /// at least twice the budget).
    hot_round_trips: u64,
    hot_admitted: u64,
    /// Tokens in the nodes' pools at the deadline, on the hot keys: leased
    /// within the run, not yet spent (given back at shutdown).
    hot_held: u64,
    hot_allowed: u64,
    hot_keys: usize,
    over_admitted: u64,
}

impl Totals {
    fn print(&self, scenario: &Scenario, nodes: usize) {
        let per_1000 =
            |round_trips: u64, admitted: u64| 1000.0 * round_trips as f64 / admitted.max(1) as f64;
        let allowed = self.hot_allowed.max(1) as f64;
        let utilisation = self.hot_admitted as f64 / allowed;
        let held = self.hot_held as f64 / allowed;
        println!(
            "{:<10} {:>5} {:>10} {:>12} {:>9.2} {:>9} {:>9.2} {:>10.2}% {:>6.2}% {:>5} {:>7}",
            scenario.label(),
            nodes,
            self.admitted,
            self.round_trips,
            per_1000(self.round_trips, self.admitted),
            self.hot_keys,
            per_1000(self.hot_round_trips, self.hot_admitted),
            100.0 * utilisation,
            100.0 * held,
            self.over_admitted,
            self.errors
        );
    }
}

/// Runs `nodes` children on `scenario` for `run` and sums their reports.
fn run_fleet(
    server: &RedisServer,
    scenario: &Scenario,
    nodes: usize,
    run: Duration,
    prefix: &str,
) -> Totals {
    let exe = std::env::current_exe().expect("this binary's path");
    let start = SystemTime::now() + WARM_UP;
    let start_ms = start
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    let per_node = Scenario {
        offered: scenario.offered.map(|fleet| fleet / nodes as u64),
        ..*scenario
    };
    let children: Vec<_> = (0..nodes)
        .map(|_| {
            Command::new(&exe)
                .args([
                    NODE,
                    &server.url(),
                    prefix,
                    &per_node.encode(),
                    &start_ms.to_string(),
                    &run.as_millis().to_string(),
                ])
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a node")
        })
        .collect();
    let keys = scenario.keys;
    let (mut requested, mut admitted) = (vec![0u64; keys], vec![0u64; keys]);
    let mut round_trips = vec![0u64; keys];
    let mut held = vec![0u64; keys];
    let mut errors = 0;
    for mut child in children {
        let stdout = child.stdout.take().expect("piped");
        let line = BufReader::new(stdout)
            .lines()
            .next()
            .expect("a report line")
            .expect("readable");
        let status = child.wait().expect("the node ends");
        assert!(status.success(), "a node failed: {status}");
        let report = NodeReport::decode(&line, keys);
        errors += report.errors;
        for key in 0..keys {
            round_trips[key] += report.round_trips[key];
            held[key] += report.held[key];
            requested[key] += report.requested[key];
            admitted[key] += report.admitted[key];
        }
    }
    // Every child has exited: no grant can come later than now.
    let upper = SystemTime::now()
        .duration_since(start)
        .unwrap_or(Duration::ZERO);
    let quota = scenario.quota();
    let allowed = quota.envelope(run);
    let mut totals = Totals {
        admitted: admitted.iter().sum(),
        round_trips: round_trips.iter().sum(),
        errors,
        hot_round_trips: 0,
        hot_admitted: 0,
        hot_held: 0,
        hot_allowed: 0,
        hot_keys: 0,
        over_admitted: 0,
    };
    for key in 0..keys {
        totals.over_admitted += admitted[key].saturating_sub(quota.envelope(upper));
        // Exhausted: demand at least twice what the budget allowed.
        if requested[key] / 2 >= allowed {
            totals.hot_keys += 1;
            totals.hot_round_trips += round_trips[key];
            totals.hot_held += held[key];
            totals.hot_admitted += admitted[key];
            totals.hot_allowed += allowed;
        }
    }
    totals
}

/// One node's counts: failed store calls, and round trips, requests,
/// admissions and tokens held in its pool at the deadline, per key.
struct NodeReport {
    errors: u64,
    round_trips: Vec<u64>,
    requested: Vec<u64>,
    admitted: Vec<u64>,
    held: Vec<u64>,
}

impl NodeReport {
    /// `errors round_trips... requested... admitted... held...`,
    /// space-separated.
    fn encode(&self) -> String {
        let mut line = self.errors.to_string();
        let per_key = [
            &self.round_trips,
            &self.requested,
            &self.admitted,
            &self.held,
        ];
        for n in per_key.into_iter().flatten() {
            line.push(' ');
            line.push_str(&n.to_string());
        }
        line
    }

    fn decode(line: &str, keys: usize) -> NodeReport {
        let numbers: Vec<u64> = line
            .split(' ')
            .map(|n| n.parse().expect("a count"))
            .collect();
        assert_eq!(numbers.len(), 1 + 4 * keys, "a report of {keys} keys");
        let column = |i: usize| numbers[1 + i * keys..1 + (i + 1) * keys].to_vec();
        NodeReport {
            errors: numbers[0],
            round_trips: column(0),
            requested: column(1),
            admitted: column(2),
            held: column(3),
        }
    }
}

/// The name of key `index` in the store.
fn key_name(index: usize) -> String {
    format!("key-{index}")
}

/// A store that counts the calls it passes on, per key: the node's round
/// trips.
struct Counted<S> {
    inner: S,
    calls: Vec<AtomicU64>,
}

impl<S> Counted<S> {
    fn count(&self, key: &str) {
        let index = key
            .strip_prefix("key-")
            .and_then(|i| i.parse::<usize>().ok());
        let counter = index.and_then(|i| self.calls.get(i)).expect("a bench key");
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl<S: Store> Store for Counted<S> {
    type Error = S::Error;

    fn quota(&self) -> Quota {
        self.inner.quota()
    }

    async fn acquire(&self, key: &str, want: u64) -> Result<Grant, S::Error> {
        self.count(key);
        self.inner.acquire(key, want).await
    }

    async fn release(&self, key: &str, lease: Lease, unused: u64) -> Result<(), S::Error> {
        self.count(key);
        self.inner.release(key, lease, unused).await
    }

    async fn debit(&self, key: &str, tokens: u64) -> Result<(), S::Error> {
        self.count(key);
        self.inner.debit(key, tokens).await
    }
}

/// A child: `url prefix scenario start_unix_ms run_ms`.
fn node(args: &[String]) {
    let [url, prefix, scenario, start_ms, run_ms] = args else {
        panic!("a node takes 5 arguments, got {args:?}");
    };
    let scenario = Scenario::decode(scenario);
    let start = UNIX_EPOCH + Duration::from_millis(start_ms.parse().expect("start"));
    let run = Duration::from_millis(run_ms.parse().expect("run"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let report = runtime.block_on(async {
        let redis = RedisStore::connect(url, scenario.quota(), prefix.as_str(), CALL_TIMEOUT)
            .await
            .expect("connect to the bench's redis-server");
        let store = Arc::new(Counted {
            inner: redis,
            calls: (0..scenario.keys).map(|_| AtomicU64::new(0)).collect(),
        });
        let allowances: Vec<_> = (0..scenario.keys)
            .map(|key| {
                // A call slower than the default 50 ms on this loaded
                // machine would strand its lease: the bench measures
                // pacing, not the scheduler's worst moments.
                let config = AllowanceConfig {
                    timeout: CALL_TIMEOUT,
                    ..AllowanceConfig::new(FailurePolicy::Closed)
                };
                LocalAllowance::new(Arc::clone(&store), key_name(key), config)
                    .expect("inside a runtime")
            })
            .collect();
        // The shared start, on this process's view of the wall clock.
        let wait = start.duration_since(SystemTime::now()).unwrap_or_default();
        tokio::time::sleep(wait).await;
        let deadline = Instant::now() + run;
        let counts = match scenario.offered {
            None => drain_one(&allowances[0], deadline).await,
            Some(rate) => offer_zipf(&allowances, rate, deadline).await,
        };
        let errors = allowances.iter().map(|a| a.stats().store_errors).sum();
        let held = allowances.iter().map(LocalAllowance::pooled).collect();
        for allowance in &allowances {
            allowance.shutdown().await;
        }
        NodeReport {
            errors,
            round_trips: store
                .calls
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            requested: counts.iter().map(|c| c.0).collect(),
            admitted: counts.iter().map(|c| c.1).collect(),
            held,
        }
    });
    println!("{}", report.encode());
}

/// Unbounded demand on one key: drains the pool, then waits for the next
/// lease, until the deadline. Returns `[(requested, admitted)]`, with
/// `requested` counted as unbounded (`u64::MAX`).
async fn drain_one<S: Store>(node: &LocalAllowance<S>, deadline: Instant) -> Vec<(u64, u64)> {
    let mut admitted = 0;
    while Instant::now() < deadline {
        while node.try_acquire(1).is_ok() {
            admitted += 1;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if node.acquire(1, left).await.is_ok() && Instant::now() < deadline {
            admitted += 1;
        }
    }
    vec![(u64::MAX, admitted)]
}

/// `rate` requests a second, each for one token of a key drawn from a Zipf
/// law over the allowances, answered at once from the pool or refused,
/// until the deadline. Returns `(requested, admitted)` per key.
async fn offer_zipf<S: Store>(
    allowances: &[LocalAllowance<S>],
    rate: u64,
    deadline: Instant,
) -> Vec<(u64, u64)> {
    let zipf = Zipf::new(allowances.len());
    let draws = JitterGenerator::from_entropy();
    let mut counts = vec![(0u64, 0u64); allowances.len()];
    // Every millisecond, the requests due by then: `rate` a second on
    // average whatever its remainder by 1000.
    let begun = Instant::now();
    let mut issued = 0u64;
    let mut ticks = tokio::time::interval(Duration::from_millis(1));
    while Instant::now() < deadline {
        ticks.tick().await;
        let due = rate * begun.elapsed().as_millis() as u64 / 1000;
        for _ in issued..due {
            let key = zipf.sample(&draws);
            counts[key].0 += 1;
            if allowances[key].try_acquire(1).is_ok() {
                counts[key].1 += 1;
            }
        }
        issued = issued.max(due);
    }
    counts
}

/// A Zipf law of exponent 1 over `0..n`: key `k` drawn with probability
/// proportional to `1 / (k + 1)`, by inverting the cumulative weights.
struct Zipf {
    cumulative: Vec<u64>,
}

impl Zipf {
    fn new(n: usize) -> Zipf {
        // Weights scaled to integers: 2^40 / (k + 1) keeps every key's
        // weight above zero for any n this bench uses.
        let mut total = 0u64;
        let cumulative = (0..n)
            .map(|k| {
                total += (1u64 << 40) / (k as u64 + 1);
                total
            })
            .collect();
        Zipf { cumulative }
    }

    fn sample(&self, draws: &JitterGenerator) -> usize {
        let total = *self.cumulative.last().expect("at least one key");
        let point = draws.draw(u128::from(total - 1)) as u64;
        self.cumulative.partition_point(|&c| c <= point)
    }
}
