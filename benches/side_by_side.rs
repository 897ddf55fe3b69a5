//! The headline ratios, timed side by side: for each row, tollgate and the
//! implementation it is compared with run in alternating rounds in this one
//! process, on their default clocks, and the table gives each one's median
//! time per decision over the rounds, the median of the per-round ratios
//! (other / tollgate: above 1, tollgate is faster) and their spread.
//!
//! Rows: direct decisions (admitted, refused) and keyed ones (one hot key,
//! 100 000 keys in a scattered order, 100 000 keys in a Zipf mix of
//! exponent 1), each beside governor's default limiter of the same quota;
//! the many-keys rows beside tollgate without its hot-key cache, what the
//! cache costs where it misses; and the keyed hot key beside a
//! `TokenBucket`, the floor it is held to.
//! Each on one thread and on two deciding at once (the time of a decision
//! is then the wall time of both together, per decision).
//!
//! Run with `cargo bench --bench side_by_side --all-features` (about two
//! minutes); `docs/benchmarks.md` quotes its table. Under `-- --test` (as
//! `.ci/run` runs every bench) each row runs one short round.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use governor::{Quota as GovernorQuota, RateLimiter};
use tollgate::{KeyedLimiter, Limit, Quota, TokenBucket};

/// Keys of the many-keys rows.
const KEYS: u64 = 100_000;

/// One implementation of a row: makes `n` decisions, walking its keys from
/// `offset`.
type Decide<'a> = Box<dyn Fn(usize, u64) + Sync + 'a>;

fn open() -> Quota {
    Quota::new(u64::from(u32::MAX), 1, Duration::from_nanos(1)).expect("a valid quota")
}

fn shut() -> Quota {
    Quota::new(1, 1, Duration::from_secs(3600)).expect("a valid quota")
}

fn governor_open() -> GovernorQuota {
    GovernorQuota::with_period(Duration::from_nanos(1))
        .expect("a non-zero period")
        .allow_burst(NonZeroU32::MAX)
}

fn governor_shut() -> GovernorQuota {
    GovernorQuota::with_period(Duration::from_secs(3600))
        .expect("a non-zero period")
        .allow_burst(NonZeroU32::MIN)
}

/// The visiting orders of the keyed rows: `len` keys from `0..KEYS`.
struct Walks {
    scattered: Vec<u64>,
    zipf: Vec<u64>,
}

impl Walks {
    fn new(len: usize) -> Self {
        let scattered = (0..len as u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % KEYS)
            .collect();
        // Zipf of exponent 1 by inverting its cumulative weights, on a
        // fixed xorshift sequence: the same walk every run.
        let mut cumulative = Vec::with_capacity(KEYS as usize);
        let mut total = 0.0;
        for rank in 1..=KEYS {
            total += 1.0 / rank as f64;
            cumulative.push(total);
        }
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let zipf = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let u = (state >> 11) as f64 / (1u64 << 53) as f64 * total;
                cumulative.partition_point(|&c| c < u) as u64
            })
            .collect();
        Walks { scattered, zipf }
    }
}

/// The wall time per decision of `threads` threads making `per_thread`
/// decisions each with `decide`, released together: from the first
/// thread's start to the last one's end, as each thread reads them (the
/// spawning thread may not be running when they start).
fn timed(threads: usize, per_thread: u64, decide: &Decide<'_>) -> f64 {
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    decide(thread * 7919, per_thread);
                    (start, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a decider panicked"))
            .collect()
    });
    let start = spans.iter().map(|span| span.0).min().expect("a thread");
    let end = spans.iter().map(|span| span.1).max().expect("a thread");
    (end - start).as_nanos() as f64 / (per_thread * threads as u64) as f64
}

/// Keeps `value` from being optimised away.
fn consume<T>(value: T) {
    let _ = black_box(value);
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One row: `ours` and `theirs` alternately for `rounds` rounds (which goes
/// first alternates too), printed as a table line.
fn row(
    name: &str,
    threads: usize,
    rounds: usize,
    per_thread: u64,
    ours: Decide<'_>,
    theirs: Decide<'_>,
) {
    // A warm-up of each, untimed: keys created, caches filled.
    timed(threads, per_thread / 4 + 1, &ours);
    timed(threads, per_thread / 4 + 1, &theirs);
    let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (x, y) = if round % 2 == 0 {
            let x = timed(threads, per_thread, &ours);
            (x, timed(threads, per_thread, &theirs))
        } else {
            let y = timed(threads, per_thread, &theirs);
            (timed(threads, per_thread, &ours), y)
        };
        a.push(x);
        b.push(y);
        ratios.push(y / x);
    }
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &r| (lo.min(r), hi.max(r)));
    println!(
        "| {name} | {threads} | {:.1} | {:.1} | {:.2} | {lo:.2}–{hi:.2} |",
        median(&mut a),
        median(&mut b),
        median(&mut ratios)
    );
}

fn main() {
    let quick = std::env::args().any(|arg| arg == "--test");
    let (rounds, per_thread) = if quick { (1, 10_000) } else { (15, 1_000_000) };
    let walks = Walks::new(1 << 20);
    let mask = walks.zipf.len() - 1;
    let walk =
        |keys: &'static [u64]| move |offset: usize, i: u64| keys[(offset + i as usize) & mask];
    let scattered: &'static [u64] = Vec::leak(walks.scattered);
    let zipf: &'static [u64] = Vec::leak(walks.zipf);

    println!("| row | threads | tollgate ns | other ns | ratio (median) | ratio (spread) |");
    println!("|---|---:|---:|---:|---:|---|");
    for threads in [1, 2] {
        let bucket = TokenBucket::new(open());
        let governor = RateLimiter::direct(governor_open());
        row(
            "direct, admitted (governor)",
            threads,
            rounds,
            per_thread,
            Box::new(|_, n| (0..n).for_each(|_| consume(black_box(&bucket).try_acquire(1)))),
            Box::new(|_, n| (0..n).for_each(|_| consume(black_box(&governor).check()))),
        );
        let bucket = TokenBucket::new(shut());
        let _ = bucket.try_acquire(1);
        let governor = RateLimiter::direct(governor_shut());
        let _ = governor.check();
        row(
            "direct, refused (governor)",
            threads,
            rounds,
            per_thread,
            Box::new(|_, n| (0..n).for_each(|_| consume(black_box(&bucket).try_acquire(1)))),
            Box::new(|_, n| (0..n).for_each(|_| consume(black_box(&governor).check()))),
        );
        for (name, keys) in [
            ("keyed, one hot key (governor)", None),
            ("keyed, 100 000 keys (governor)", Some(walk(scattered))),
            ("keyed, Zipf mix (governor)", Some(walk(zipf))),
        ] {
            let ours = KeyedLimiter::<u64>::new(open());
            let theirs = RateLimiter::keyed(governor_open());
            let key = |offset, i| keys.map_or(7, |walk| walk(offset, i));
            row(
                name,
                threads,
                rounds,
                per_thread,
                Box::new(|offset, n| {
                    for i in 0..n {
                        consume(black_box(&ours).try_acquire(&key(offset, i), 1));
                    }
                }),
                Box::new(|offset, n| {
                    for i in 0..n {
                        consume(black_box(&theirs).check_key(&key(offset, i)));
                    }
                }),
            );
        }
        for (name, keys) in [
            ("keyed, 100 000 keys (no hot-key cache)", walk(scattered)),
            ("keyed, Zipf mix (no hot-key cache)", walk(zipf)),
        ] {
            let ours = KeyedLimiter::<u64>::new(open());
            let uncached = KeyedLimiter::builder(open())
                .hot_keys_per_thread(0)
                .build::<u64>();
            row(
                name,
                threads,
                rounds,
                per_thread,
                Box::new(|offset, n| {
                    for i in 0..n {
                        consume(black_box(&ours).try_acquire(&keys(offset, i), 1));
                    }
                }),
                Box::new(|offset, n| {
                    for i in 0..n {
                        consume(black_box(&uncached).try_acquire(&keys(offset, i), 1));
                    }
                }),
            );
        }
        let ours = KeyedLimiter::<u64>::new(open());
        let bucket = TokenBucket::new(open());
        row(
            "keyed, one hot key (a TokenBucket)",
            threads,
            rounds,
            per_thread,
            Box::new(|_, n| (0..n).for_each(|_| consume(black_box(&ours).try_acquire(&7, 1)))),
            Box::new(|_, n| (0..n).for_each(|_| consume(black_box(&bucket).try_acquire(1)))),
        );
    }
}
