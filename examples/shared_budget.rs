//! Several nodes share one budget through a store: each serves its requests
//! from a local allowance, and the example prints every node's admissions,
//! the total against the bound `B + r·t`, the store round trips per 1000
//! admissions, and the utilisation (admitted / allowed). For comparison it
//! runs the same demand with one store call per request.
//!
//! ```text
//! cargo run --release --example shared_budget --features tokio
//! cargo run --release --example shared_budget --features redis -- redis://127.0.0.1:6379
//! ```
//!
//! Without a URL the store is the in-process `LocalStore`; with one, a Redis
//! server (the nodes are tasks of this process, but each has its own
//! allowance and its own view of the shared key, exactly as separate
//! processes would).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::Quota;
use tollgate::shared::{AllowanceConfig, FailurePolicy, LocalAllowance, LocalStore, Store};

const NODES: usize = 4;
const RUN: Duration = Duration::from_secs(2);
const KEY: &str = "customer-7";

/// The shared quota of a scenario: burst `capacity`, `rate` per second.
#[derive(Clone, Copy)]
struct Shared {
    capacity: u64,
    rate: u64,
}

impl Shared {
    fn quota(self) -> Quota {
        Quota::new(self.capacity, self.rate, Duration::from_secs(1)).expect("a valid quota")
    }

    fn allowed(self, elapsed: Duration) -> u64 {
        self.capacity + (self.rate as f64 * elapsed.as_secs_f64()) as u64
    }
}

/// Demand far above the shared rate: the budget is what limits.
const EXHAUSTED: Shared = Shared {
    capacity: 2_000,
    rate: 20_000,
};
/// A budget far above what the nodes can ask: the mechanism is what limits.
const AMPLE: Shared = Shared {
    capacity: 1_000_000,
    rate: 1_000_000,
};

/// What one run measured.
struct Report {
    shared: Shared,
    per_node: Vec<u64>,
    round_trips: u64,
    elapsed: Duration,
}

impl Report {
    fn print(&self, label: &str) {
        let admitted: u64 = self.per_node.iter().sum();
        let allowed = self.shared.allowed(self.elapsed);
        println!("{label}:");
        for (node, n) in self.per_node.iter().enumerate() {
            println!("  node {node}: {n} admitted");
        }
        println!(
            "  total {admitted} <= B + r*t = {allowed} over {:.3} s: {}",
            self.elapsed.as_secs_f64(),
            if admitted <= allowed {
                "holds"
            } else {
                "EXCEEDED"
            }
        );
        println!(
            "  {} store round trips: {:.1} per 1000 admissions; {:.0} admissions/s; utilisation {:.1} %",
            self.round_trips,
            1000.0 * self.round_trips as f64 / admitted.max(1) as f64,
            admitted as f64 / self.elapsed.as_secs_f64(),
            100.0 * admitted as f64 / allowed as f64,
        );
    }

    fn holds(&self) -> bool {
        self.per_node.iter().sum::<u64>() <= self.shared.allowed(self.elapsed)
    }
}

/// Every node asks continuously (demand far above the shared rate) from its
/// own local allowance.
async fn with_allowances<S: Store>(store: Arc<S>, shared: Shared) -> Report {
    let config = AllowanceConfig {
        max_lease: 2_000,
        ..AllowanceConfig::new(FailurePolicy::Closed)
    };
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..NODES)
        .map(|_| {
            let node = LocalAllowance::new(Arc::clone(&store), KEY, config).expect("in a runtime");
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut admitted = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if node.try_acquire(1).is_ok() {
                        admitted += 1;
                    } else {
                        tokio::task::yield_now().await;
                    }
                }
                let round_trips = node.stats().leases;
                node.shutdown().await;
                (admitted, round_trips)
            })
        })
        .collect();
    tokio::time::sleep(RUN).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let mut report = Report {
        shared,
        per_node: Vec::new(),
        round_trips: 0,
        elapsed,
    };
    for task in tasks {
        let (admitted, round_trips) = task.await.expect("a node panicked");
        report.per_node.push(admitted);
        report.round_trips += round_trips;
    }
    report
}

/// The same demand, one store call per request.
async fn per_request<S: Store>(store: Arc<S>, shared: Shared) -> Report {
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..NODES)
        .map(|_| {
            let (store, stop, calls) = (Arc::clone(&store), Arc::clone(&stop), Arc::clone(&calls));
            tokio::spawn(async move {
                let mut admitted = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    calls.fetch_add(1, Ordering::Relaxed);
                    match store.acquire(KEY, 1).await {
                        Ok(grant) if !grant.is_empty() => admitted += 1,
                        _ => tokio::task::yield_now().await,
                    }
                }
                admitted
            })
        })
        .collect();
    tokio::time::sleep(RUN).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let mut per_node = Vec::new();
    for task in tasks {
        per_node.push(task.await.expect("a node panicked"));
    }
    Report {
        shared,
        per_node,
        round_trips: calls.load(Ordering::Relaxed),
        elapsed,
    }
}

/// Runs both modes on both scenarios, each on a fresh store from `make`.
async fn compare<S: Store>(make: impl Fn(Quota) -> Arc<S>) -> bool {
    let mut held = true;
    for (name, shared) in [("budget exhausted", EXHAUSTED), ("budget ample", AMPLE)] {
        println!(
            "\n{name}: {NODES} nodes share one key, B = {}, r = {}/s, {RUN:?} per mode\n",
            shared.capacity, shared.rate
        );
        let leased = with_allowances(make(shared.quota()), shared).await;
        leased.print("local allowances");
        let direct = per_request(make(shared.quota()), shared).await;
        direct.print("one store call per request");
        held &= leased.holds() && direct.holds();
    }
    held
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args().nth(1);
    let held = match url {
        None => compare(|quota| Arc::new(LocalStore::new(quota))).await,
        #[cfg(feature = "redis")]
        Some(url) => {
            // A fresh key prefix per run, so every run starts full.
            let mut stores = Vec::new();
            for run in 0..4 {
                let quota = if run < 2 { EXHAUSTED } else { AMPLE }.quota();
                let prefix = format!("demo:{}:{run}:", std::process::id());
                let timeout = Duration::from_millis(250);
                stores.push(Arc::new(
                    tollgate::shared::RedisStore::connect(&url, quota, prefix, timeout).await?,
                ));
            }
            let next = std::sync::Mutex::new(stores.into_iter());
            compare(|_quota| next.lock().unwrap().next().expect("four stores")).await
        }
        #[cfg(not(feature = "redis"))]
        Some(_) => return Err("this build has no Redis store: add --features redis".into()),
    };
    if held {
        Ok(())
    } else {
        Err("the shared bound was exceeded".into())
    }
}
