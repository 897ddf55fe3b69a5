//! The main demo: threads hammer one hot bucket and a handful of per-tenant
//! buckets on the default monotonic clock, printing a live line each second,
//! then check every bucket's envelope `admitted <= B + r * t`.
//!
//! ```text
//! cargo run --release --example hotpath            # 4 threads, 3 seconds
//! cargo run --release --example hotpath -- 8 5     # 8 threads, 5 seconds
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use tollgate::{Clock, Limit, Quota, TokenBucket};

/// Counters are published every this many decisions, so that reporting costs
/// the hot loop a plain store now and then rather than a shared write each
/// time.
const PUBLISH_EVERY: u64 = 1024;
const TENANTS: usize = 4;

struct Limited {
    name: String,
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

    let mut buckets = vec![limited(
        "hot".into(),
        Quota::new(1_000, 200_000, Duration::from_secs(1))?,
    )];
    // Tenants get different rates, three of them with emission intervals
    // that are not whole nanoseconds (1/3 and 1/7 ns): exact all the same.
    for (t, rate) in [3_000, 5_000, 7_000, 15_000].into_iter().enumerate() {
        let quota = Quota::new(100, rate, Duration::from_secs(1))?;
        assert!(quota.is_exact(), "{rate}/s is represented exactly");
        buckets.push(limited(format!("tenant-{t}"), quota));
    }
    let slots: Vec<CachePadded<Slot>> = (0..threads).map(|_| CachePadded::default()).collect();
    let stop = AtomicBool::new(false);

    println!(
        "{threads} threads, {seconds} s: one hot bucket (B=1000, 200000/s) and {TENANTS} tenant buckets"
    );
    thread::scope(|s| {
        for (id, slot) in slots.iter().enumerate() {
            let (buckets, stop) = (&buckets, &stop);
            s.spawn(move || hammer(id, buckets, slot, stop));
        }
        report(&slots, seconds);
        stop.store(true, Ordering::Relaxed);
    });

    summarise(&buckets, &slots)
}

fn limited(name: String, quota: Quota) -> Limited {
    let bucket = TokenBucket::new(quota);
    let start_nanos = bucket.clock().now_nanos();
    Limited {
        name,
        bucket,
        start_nanos,
    }
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

fn report(slots: &[CachePadded<Slot>], seconds: u64) {
    let started = Instant::now();
    let (mut last_decisions, mut last_admitted) = (0, 0);
    for second in 1..=seconds {
        let tick = started + Duration::from_secs(second);
        thread::sleep(tick.saturating_duration_since(Instant::now()));
        let (decisions, admitted) = totals(slots);
        let admitted: u64 = admitted.iter().sum();
        let (decided, allowed) = (decisions - last_decisions, admitted - last_admitted);
        println!(
            "t={second:>3}s  {decided:>11} decisions/s  {allowed:>8} admitted/s  {:>11} denied/s",
            decided - allowed,
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
            "{:<9} admitted {admitted:>9} <= B + r*t = {bound:>9} over {:.3} s: {}",
            limited.name,
            elapsed as f64 / 1e9,
            if holds { "holds" } else { "VIOLATED" },
        );
    }
    if violated {
        return Err("a bucket admitted more than its envelope".into());
    }
    Ok(())
}
