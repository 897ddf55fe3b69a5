//! What a shared rule's 429 tells a client, held to the store's own state:
//! three node processes serve "100 a minute" per API key from a private
//! Redis; a client sends a fresh key 105 requests as fast as it can, then
//! one every 10 ms for 2 s (once to one node, once to the three in turn:
//! each node's demand stays above `cold_below`, so no node gives a lease
//! back mid-run, which the others would not see until their word of an
//! empty store ran out: `tests/tokio_layer/keyed_allowances_within_the_bound.rs` bounds that case),
//! and after each 429 reads the key's state in Redis (`TIME` and `GET` in
//! one pipeline) to learn what the store held and how long it would have
//! made the client wait.

use std::process::Command;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use tollgate::Quota;
use tollgate::http::parse_rate_limit;
use tollgate::shared::RedisStore;

use super::{NODE_QUOTA, NODE_REDIS, NODES, PREFIX, nodes, server};
use tollgate_test_support::redis_server::RedisServer;

/// The quota of `docs/http.md`'s example: 100 a minute per API key.
const PER_MINUTE: &str = "100/100/60";
/// The store's epoch, Unix seconds (`src/shared/redis/scale.rs`): its
/// times count from it.
const STORE_EPOCH_SECS: i128 = 1_735_689_600;
/// The burst the client sends at once, and then the steady requests and
/// the gap between them.
const BURST: usize = 105;
const STEADY: usize = 200;
const GAP: Duration = Duration::from_millis(10);

/// `capacity/tokens/seconds` as a quota.
pub fn parse_quota(text: &str) -> Quota {
    let numbers: Vec<u64> = text
        .split('/')
        .map(|n| n.parse().expect("a number"))
        .collect();
    let [capacity, tokens, seconds] = numbers[..] else {
        panic!("a quota is capacity/tokens/seconds, not {text}");
    };
    Quota::new(capacity, tokens, Duration::from_secs(seconds)).expect("a valid quota")
}

/// One 429 and what the store said of the key when it was asked.
#[derive(Debug)]
struct Refused {
    /// Retry-After and RateLimit `t`, in seconds.
    retry_after: u64,
    reset: Option<u64>,
    /// The store's tokens and its wait for one, when the request was sent
    /// (read from the state after the answer: nothing else spends the key,
    /// and refill only adds).
    held: u64,
    wait: Duration,
    /// From sending the request to reading the state.
    took: Duration,
    /// Whether another node gave tokens back to the store within one refill
    /// interval before (or while the state was read): a node's word that
    /// the store was empty does not see them until its next token is due.
    after_return: bool,
}

/// What one key got.
#[derive(Debug, Default)]
struct Run {
    burst_admitted: u64,
    admitted: u64,
    refused: Vec<Refused>,
    /// Script calls Redis ran for the run (acquires and releases), and for
    /// the burst alone.
    store_calls: u64,
    burst_calls: u64,
}

/// The key's state after the last answer: its `tat`, and the store's time
/// when another node's give-back was last seen (the `tat` moved back).
#[derive(Default)]
struct Watch {
    tat: Option<i128>,
    returned_at_us: Option<i128>,
}

/// A key's bucket as Redis holds it: `<d>:<tat>:<born>:<gen>:<T>:<BT>`,
/// ticks of `1/d` µs since the store's epoch; absent is full.
struct Bucket {
    d: i128,
    tat: i128,
    ticks_per_token: i128,
    full: i128,
}

impl Bucket {
    fn parse(state: Option<&str>) -> Option<Bucket> {
        let fields: Vec<i128> = state?
            .split(':')
            .map(|f| f.parse().expect("a number"))
            .collect();
        assert_eq!(fields.len(), 6, "a quota charged per token");
        Some(Bucket {
            d: fields[0],
            tat: fields[1],
            ticks_per_token: fields[4],
            full: fields[5],
        })
    }

    /// Whole tokens held at `at_us` (µs since the epoch), and the wait
    /// then for one more if it holds none.
    fn at(&self, at_us: i128) -> (u64, Duration) {
        let now = at_us * self.d;
        let room = now + self.full - self.tat.max(now);
        let held = u64::try_from(room / self.ticks_per_token).unwrap();
        let wait_ticks = (self.ticks_per_token - room).max(0);
        let wait_us = (wait_ticks + self.d - 1) / self.d;
        let wait = Duration::from_micros(u64::try_from(wait_us).unwrap());
        (held, if held > 0 { Duration::ZERO } else { wait })
    }
}

/// Script calls Redis has run so far (`INFO commandstats`).
async fn script_calls(admin: &mut MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap();
    info.lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:"))
        .filter_map(|line| {
            let calls = line.split("calls=").nth(1)?;
            calls.split(',').next()?.parse::<u64>().ok()
        })
        .sum()
}

/// The store's time (µs since its epoch) and the key's state, read in one
/// pipeline.
async fn read_state(admin: &mut MultiplexedConnection, redis_key: &str) -> (i128, Option<String>) {
    let ((seconds, micros), state): ((i128, i128), Option<String>) = redis::pipe()
        .cmd("TIME")
        .cmd("GET")
        .arg(redis_key)
        .query_async(admin)
        .await
        .unwrap();
    ((seconds - STORE_EPOCH_SECS) * 1_000_000 + micros, state)
}

/// Sends `key` the burst and then the steady requests, to `urls` in turn.
async fn drive(
    urls: &[String],
    key: &str,
    store: &RedisStore,
    admin: &mut MultiplexedConnection,
) -> Run {
    let client = reqwest::Client::new();
    // The rule scopes its keys by its name (`docs/http.md`, "Keys").
    let redis_key = store.redis_key(&format!(
        "{}:{}:{key}",
        server::PER_KEY_POLICY.len(),
        server::PER_KEY_POLICY
    ));
    let calls_before = script_calls(admin).await;
    let mut run = Run::default();
    let mut watch = Watch::default();
    let interval_us = 600_000;
    for request in 0..BURST + STEADY {
        if request == BURST {
            run.burst_calls = script_calls(admin).await - calls_before;
        }
        if request >= BURST {
            tokio::time::sleep(GAP).await;
        }
        let sent = Instant::now();
        let response = client
            .get(&urls[request % urls.len()])
            .header(server::API_KEY, key)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        // Read after every answer: a give-back moves `tat` back, which no
        // grant does.
        let (now_us, state) = read_state(admin, &redis_key).await;
        let took = sent.elapsed();
        let bucket = Bucket::parse(state.as_deref());
        let tat = bucket.as_ref().map(|b| b.tat);
        if let (Some(before), Some(now)) = (watch.tat, tat)
            && now < before
        {
            watch.returned_at_us = Some(now_us);
        }
        watch.tat = tat;
        match status {
            200 => {
                run.admitted += 1;
                if request < BURST {
                    run.burst_admitted += 1;
                }
            }
            429 => {
                let retry_after = headers["retry-after"].to_str().unwrap().parse().unwrap();
                let limits =
                    parse_rate_limit(headers.get_all("ratelimit").iter().map(|v| v.as_bytes()));
                let reset = limits
                    .iter()
                    .find(|limit| limit.policy == server::PER_KEY_POLICY)
                    .and_then(|limit| limit.reset)
                    .map(|t| t.as_secs());
                let sent_us = now_us - i128::try_from(took.as_micros()).unwrap();
                let (held, wait) = bucket.map_or((100, Duration::ZERO), |b| b.at(sent_us));
                let after_return = watch
                    .returned_at_us
                    .is_some_and(|at| at >= sent_us - interval_us);
                run.refused.push(Refused {
                    retry_after,
                    reset,
                    held,
                    wait,
                    took,
                    after_return,
                });
            }
            status => panic!("{key}: request {request} answered {status}"),
        }
    }
    run.store_calls = script_calls(admin).await - calls_before;
    run
}

/// Seconds, rounded up, as Retry-After counts them.
fn ceil_secs(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

/// Without a `redis-server` this prints why and passes on a developer's
/// machine, and panics under `CI`.
pub fn a_shared_refusal_is_the_stores_word() {
    let Some(redis) = RedisServer::start("a_shared_refusal_is_the_stores_word") else {
        return;
    };
    let program = std::env::current_exe().unwrap();
    let fleet: Vec<nodes::Node> = (0..NODES)
        .map(|_| {
            let mut command = Command::new(&program);
            command
                .env(NODE_REDIS, redis.url())
                .env(NODE_QUOTA, PER_MINUTE);
            nodes::Node::spawn(command).expect("a fleet node starts")
        })
        .collect();
    let urls: Vec<String> = fleet.iter().map(|node| node.url.clone()).collect();
    let quota = parse_quota(PER_MINUTE);
    let interval = Duration::from_millis(600);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let runs = runtime.block_on(async {
        let store = RedisStore::connect(&redis.url(), quota, PREFIX, server::STORE_WAIT)
            .await
            .unwrap();
        let mut admin = redis::Client::open(redis.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let started = Instant::now();
        let alone = drive(&urls[..1], "one-node", &store, &mut admin).await;
        let alone_took = started.elapsed();
        let started = Instant::now();
        let spread = drive(&urls, "three-nodes", &store, &mut admin).await;
        [
            ("one node", alone, alone_took),
            ("three nodes", spread, started.elapsed()),
        ]
    });
    println!(
        "{:<12} {:>9} {:>8} {:>8} {:>22} {:>10} {:>14} {:>15}",
        "key",
        "burst ok",
        "admitted",
        "refused",
        "store had one (return)",
        "ratio max",
        "calls (burst)",
        "calls per 1000"
    );
    for (name, run, _) in &runs {
        let held = run.refused.iter().filter(|r| r.held > 0).count();
        let unseen = run
            .refused
            .iter()
            .filter(|r| r.held > 0 && r.after_return)
            .count();
        let ratio = run
            .refused
            .iter()
            .map(|r| r.retry_after as f64 / ceil_secs(r.wait).max(1) as f64)
            .fold(0.0, f64::max);
        println!(
            "{name:<12} {:>9} {:>8} {:>8} {:>22} {ratio:>10.2} {:>14} {:>15.1}",
            run.burst_admitted,
            run.admitted,
            run.refused.len(),
            format!("{held} ({unseen})"),
            format!("{} ({})", run.store_calls, run.burst_calls),
            1000.0 * run.store_calls as f64 / run.admitted.max(1) as f64,
        );
    }
    for (name, run, took) in &runs {
        // Every token of the burst is admitted, within the burst itself
        // on one node (across nodes some wait in the others' leases a
        // while: tokens the store has leased are not the store's), and
        // nothing beyond B + r·t.
        let refill = u64::try_from(took.as_nanos() / interval.as_nanos()).unwrap();
        let admitted = (run.burst_admitted, run.admitted);
        if *name == "one node" {
            assert!(run.burst_admitted >= 100, "{name}: admitted {admitted:?}");
        }
        assert!(run.admitted >= 100, "{name}: admitted {admitted:?}");
        assert!(
            run.admitted <= 100 + refill,
            "{name}: admitted {admitted:?}, refill {refill}"
        );
        for refused in &run.refused {
            assert!(
                refused.held == 0 || refused.after_return,
                "{name}: refused while the store held a token: {refused:?}"
            );
            // The store's wait, rounded up as Retry-After is: never shorter
            // than it was when the node decided (at most `took` after it
            // was read), and less than one refill interval longer.
            let least = ceil_secs(refused.wait.saturating_sub(refused.took));
            assert!(refused.retry_after >= least.max(1), "{name}: {refused:?}");
            assert!(
                refused.retry_after <= ceil_secs(refused.wait + interval),
                "{name}: {refused:?}"
            );
            assert_eq!(
                refused.reset,
                Some(refused.retry_after),
                "{name}: {refused:?}"
            );
        }
    }
    println!(
        "fleet_e2e: every 429 of {PER_MINUTE} came while the store held no token (but for \
         another node's give-back not yet seen), with the store's wait"
    );
}
