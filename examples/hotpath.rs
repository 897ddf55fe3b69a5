//! The main demo: threads hammer one hot bucket and a handful of per-tenant
//! buckets on the default monotonic clock, printing each second what each
//! bucket admitted against its rate, then check every bucket's envelope
//! `admitted <= B + r * t`.
//!
//! ```text
//! cargo run --release --example hotpath            # 4 threads, 3 seconds
//! cargo run --release --example hotpath -- 8 5     # 8 threads, 5 seconds
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use tollgate::{Clock, Limit, Quota, QuotaError, TokenBucket};

/// Counters are published every this many decisions, so that reporting costs
/// the hot loop a plain store now and then rather than a shared write each
/// time.
const PUBLISH_EVERY: u64 = 1024;
/// The hot bucket's burst `B` and rate `r` a second.
const HOT: (u64, u64) = (1_000, 200_000);
/// Every tenant's burst, and each tenant's rate: three of them with
/// emission intervals that are not whole nanoseconds (1/3 and 1/7 ns),
/// exact all the same.
const TENANT_BURST: u64 = 100;
const TENANT_RATES: [u64; 4] = [3_000, 5_000, 7_000, 15_000];
const TENANTS: usize = TENANT_RATES.len();

struct Limited {
    name: String,
    /// Tokens a second, `r`: what a saturated bucket admits each second.
    rate: u64,
    bucket: TokenBucket,
    /// The bucket clock's reading before any decision: the envelope's start.
    start_nanos: u64,
}

/// One thread's counters, padded so threads do not share cache lines.
#[derive(Default)]
struct Slot {
    decisions: AtomicU64,
    /// Admissions per bucket: the hot one first, then the tenants.
    admitted: [AtomicU64; 1 + TENANTS],
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(4);
    let seconds: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(3);

    let mut buckets = vec![limited("hot".into(), HOT.0, HOT.1)?];
    for (t, rate) in TENANT_RATES.into_iter().enumerate() {
        let tenant = limited(format!("tenant-{t}"), TENANT_BURST, rate)?;
        assert!(
            tenant.bucket.quota().is_exact(),
            "{rate}/s is represented exactly"
        );
        buckets.push(tenant);
    }
    let slots: Vec<CachePadded<Slot>> = (0..threads).map(|_| CachePadded::default()).collect();
    let stop = AtomicBool::new(false);

    let tenant_rates: Vec<String> = TENANT_RATES.iter().map(u64::to_string).collect();
    println!(
        "{threads} threads, {seconds} s: one hot bucket (B={}, r={}/s) and {TENANTS} tenant buckets (B={TENANT_BURST}, r={}/s)",
        HOT.0,
        HOT.1,
        tenant_rates.join(", "),
    );
    println!(
        "each second, per bucket: admitted that second / r (the first second may add up to B)"
    );
    thread::scope(|s| {
        for (id, slot) in slots.iter().enumerate() {
            let (buckets, stop) = (&buckets, &stop);
            s.spawn(move || hammer(id, buckets, slot, stop));
        }
        report(&buckets, &slots, seconds);
        stop.store(true, Ordering::Relaxed);
    });

    summarise(&buckets, &slots)
}

/// A bucket of `capacity` tokens refilled at `rate` a second.
fn limited(name: String, capacity: u64, rate: u64) -> Result<Limited, QuotaError> {
    let bucket = TokenBucket::new(Quota::new(capacity, rate, Duration::from_secs(1))?);
    let start_nanos = bucket.clock().now_nanos();
    Ok(Limited {
        name,
        rate,
        bucket,
        start_nanos,
    })
}

/// Alternates between the hot bucket and a rotating tenant bucket.
fn hammer(id: usize, buckets: &[Limited], slot: &Slot, stop: &AtomicBool) {
    let mut decisions = 0u64;
    let mut admitted = [0u64; 1 + TENANTS];
    let mut tenant = id % TENANTS;
    loop {
        for which in [0, 1 + tenant] {
            if buckets[which].bucket.try_acquire(1).is_ok() {
                admitted[which] += 1;
            }
        }
        decisions += 2;
        tenant = (tenant + 1) % TENANTS;
        if decisions.is_multiple_of(PUBLISH_EVERY) {
            publish(slot, decisions, &admitted);
            if stop.load(Ordering::Relaxed) {
                return;
            }
        }
    }
}

fn publish(slot: &Slot, decisions: u64, admitted: &[u64]) {
    slot.decisions.store(decisions, Ordering::Relaxed);
    for (shared, &local) in slot.admitted.iter().zip(admitted) {
        shared.store(local, Ordering::Relaxed);
    }
}

/// Sums the counters every thread has published so far.
fn totals(slots: &[CachePadded<Slot>]) -> (u64, [u64; 1 + TENANTS]) {
    let mut admitted = [0u64; 1 + TENANTS];
    let mut decisions = 0;
    for slot in slots {
        decisions += slot.decisions.load(Ordering::Relaxed);
        for (sum, a) in admitted.iter_mut().zip(&slot.admitted) {
            *sum += a.load(Ordering::Relaxed);
        }
    }
    (decisions, admitted)
}

/// Prints, each second, the decisions made and, per bucket, the admissions
/// against its rate: `hot 200000/200000` is a saturated hot bucket.
fn report(buckets: &[Limited], slots: &[CachePadded<Slot>], seconds: u64) {
    let started = Instant::now();
    let (mut last_decisions, mut last_admitted) = (0, [0; 1 + TENANTS]);
    for second in 1..=seconds {
        let tick = started + Duration::from_secs(second);
        thread::sleep(tick.saturating_duration_since(Instant::now()));
        let (decisions, admitted) = totals(slots);
        let per_bucket: Vec<String> = buckets
            .iter()
            .zip(admitted.iter().zip(&last_admitted))
            .map(|(limited, (now, last))| format!("{}/{}", now - last, limited.rate))
            .collect();
        println!(
            "t={second:>3}s  {:>11} decisions/s  hot {}  tenants {}",
            decisions - last_decisions,
            per_bucket[0],
            per_bucket[1..].join(" "),
        );
        (last_decisions, last_admitted) = (decisions, admitted);
    }
}

/// Checks each bucket's envelope, `admitted <= B + r * t`, over the interval
/// from its creation to now.
fn summarise(
    buckets: &[Limited],
    slots: &[CachePadded<Slot>],
) -> Result<(), Box<dyn std::error::Error>> {
    let (decisions, admitted) = totals(slots);
    println!("\n{decisions} decisions in total");
    let mut violated = false;
    for (limited, &admitted) in buckets.iter().zip(&admitted) {
        let elapsed = limited.bucket.clock().now_nanos() - limited.start_nanos;
        let bound = limited
            .bucket
            .quota()
            .envelope(Duration::from_nanos(elapsed));
        let holds = admitted <= bound;
        violated |= !holds;
        println!(
            "{:<9} admitted {admitted:>9} <= B + r*t = {:>4} + {:>6}/s * {:.6} s = {bound:>9}: {}",
            limited.name,
            limited.bucket.quota().capacity(),
            limited.rate,
            elapsed as f64 / 1e9,
            if holds { "holds" } else { "VIOLATED" },
        );
    }
    if violated {
        return Err("a bucket admitted more than its envelope".into());
    }
    Ok(())
}
