//! Measures the trade-offs of tollgate's clocks on this machine: the cost of a
//! reading, the effective resolution, backward steps seen across cores, and
//! the CPU the coarse clock's updater thread costs. `docs/clocks.md` records
//! the results.
//!
//! ```text
//! cargo run --release --all-features --example clocks
//! ```

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tollgate::{Clock, CoarseClock, MonotonicClock};

const READINGS: u32 = 5_000_000;
const HANDOFFS: u64 = 200_000;

fn main() -> std::io::Result<()> {
    println!(
        "{:<22} {:>10} {:>14} {:>16} {:>14}",
        "clock", "ns/read", "resolution ns", "backward steps", "largest step"
    );
    measure("MonotonicClock", &MonotonicClock::new());
    measure("TscClock", &tollgate::TscClock::new());
    for resolution in [Duration::from_micros(100), Duration::from_millis(1)] {
        let clock = CoarseClock::new(resolution)?;
        measure(&format!("CoarseClock {resolution:?}"), &clock);
    }

    println!("\nCPU used by the coarse clock's updater while the process idles for 2 s:");
    for resolution in [Duration::from_micros(100), Duration::from_millis(1)] {
        let before = process_cpu();
        let clock = CoarseClock::new(resolution)?;
        thread::sleep(Duration::from_secs(2));
        drop(clock);
        if let (Some(before), Some(after)) = (before, process_cpu()) {
            let share = (after - before).as_secs_f64() / 2.0 * 100.0;
            println!("  resolution {resolution:?}: {share:.2} % of one core");
        }
    }
    Ok(())
}

fn measure(name: &str, clock: &impl Clock) {
    settle(clock);
    let (cost, resolution) = cost_and_resolution(clock);
    let (backward, largest) = cross_core_backward_steps(clock);
    println!("{name:<22} {cost:>10.1} {resolution:>14} {backward:>16} {largest:>14}");
}

/// Waits until the clock has moved twice, so that a coarse clock's first
/// update (from zero to the updater thread's start-up time) is not mistaken
/// for its resolution.
fn settle(clock: &impl Clock) {
    for _ in 0..2 {
        let start = clock.now_nanos();
        while clock.now_nanos() == start {
            thread::sleep(Duration::from_micros(10));
        }
    }
}

/// Mean cost of a reading, and the smallest non-zero step between successive
/// readings (the clock's effective resolution as a spinning reader sees it).
fn cost_and_resolution(clock: &impl Clock) -> (f64, u64) {
    let started = Instant::now();
    let mut previous = clock.now_nanos();
    let mut resolution = u64::MAX;
    for _ in 0..READINGS {
        let now = black_box(clock.now_nanos());
        if now > previous {
            resolution = resolution.min(now - previous);
        }
        previous = now;
    }
    let cost = started.elapsed().as_nanos() as f64 / f64::from(READINGS);
    (cost, resolution)
}

/// Two threads take turns reading the clock; each turn is handed over with
/// release/acquire, so every reading is physically later than the one before
/// it. A reading smaller than the previous one (taken on the other thread,
/// usually on the other core) is a backward step across cores.
fn cross_core_backward_steps(clock: &impl Clock) -> (u64, u64) {
    let turn = AtomicU64::new(0);
    let last = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let results: Vec<(u64, u64)> = thread::scope(|s| {
        let workers: Vec<_> = (0..2u64)
            .map(|me| {
                let (turn, last, done) = (&turn, &last, &done);
                s.spawn(move || {
                    let (mut backward, mut largest) = (0, 0);
                    for round in 0..HANDOFFS {
                        let my_turn = round * 2 + me;
                        while turn.load(Ordering::Acquire) != my_turn {
                            if done.load(Ordering::Relaxed) {
                                return (backward, largest);
                            }
                            std::hint::spin_loop();
                        }
                        let now = clock.now_nanos();
                        let previous = last.load(Ordering::Relaxed);
                        if now < previous {
                            backward += 1;
                            largest = largest.max(previous - now);
                        }
                        last.store(now, Ordering::Relaxed);
                        turn.store(my_turn + 1, Ordering::Release);
                    }
                    done.store(true, Ordering::Relaxed);
                    (backward, largest)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or((0, 0)))
            .collect()
    });
    results
        .iter()
        .fold((0, 0), |(b, l), &(wb, wl)| (b + wb, l.max(wl)))
}

/// User plus system CPU time of this process, from /proc (Linux only).
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 12th and 13th of them, in clock ticks (100 per second on Linux).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}
