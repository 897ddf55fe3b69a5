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
//! Run with `cargo bench -p tollgate-benches --bench side_by_side` (about two
//! minutes); `docs/benchmarks.md` quotes its table. Under `-- --test` (as
//! `.ci/run` runs every bench) each row runs one short round.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::Instant;

mod common;

use governor::RateLimiter;
use tollgate::{KeyedLimiter, Limit, TokenBucket};

/// Keys of the many-keys rows.
const KEYS: u64 = 100_000;

/// One implementation of a row: makes `n` decisions, walking its keys from
/// `offset`.
type Decide<'a> = Box<dyn Fn(usize, u64) + Sync + 'a>;

/// The visiting orders of the keyed rows: `len` keys from the many keys,
/// scattered, and in a Zipf mix (exponent 1), as `benches/keyed.rs` walks
/// them.
struct Walks {
    scattered: Vec<u64>,
    zipf: Vec<u64>,
}

impl Walks {
    fn new(len: usize) -> Self {
        let scattered = (0..len as u64)
            .map(|i| common::scattered_key(i % KEYS, KEYS))
            .collect();
        let zipf = common::zipf_ranks(KEYS, len)
            .into_iter()
            .map(|rank| common::scattered_key(rank, KEYS))
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

/// Decisions of one token on `limiter`, on the keys `key` walks.
fn keyed<'a>(
    limiter: &'a KeyedLimiter<u64>,
    key: &'a (dyn Fn(usize, u64) -> u64 + Sync),
) -> Decide<'a> {
    Box::new(move |offset, n| {
        for i in 0..n {
            consume(black_box(limiter).try_acquire(&key(offset, i), 1));
        }
    })
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
        let bucket = TokenBucket::new(common::OPEN.tollgate());
        let governor = RateLimiter::direct(common::OPEN.governor());
        row(
            "direct, admitted (governor)",
            threads,
            rounds,
            per_thread,
            Box::new(|_, n| (0..n).for_each(|_| consume(black_box(&bucket).try_acquire(1)))),
            Box::new(|_, n| (0..n).for_each(|_| consume(black_box(&governor).check()))),
        );
        let bucket = TokenBucket::new(common::SHUT.tollgate());
        let _ = bucket.try_acquire(1);
        let governor = RateLimiter::direct(common::SHUT.governor());
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
            let ours = KeyedLimiter::<u64>::new(common::OPEN.tollgate());
            let theirs = RateLimiter::keyed(common::OPEN.governor());
            let key = |offset, i| keys.map_or(7, |walk| walk(offset, i));
            let governor = Box::new(|offset, n| {
                for i in 0..n {
                    consume(black_box(&theirs).check_key(&key(offset, i)));
                }
            });
            row(
                name,
                threads,
                rounds,
                per_thread,
                keyed(&ours, &key),
                governor,
            );
        }
        for (name, keys) in [
            ("keyed, 100 000 keys (no hot-key cache)", walk(scattered)),
            ("keyed, Zipf mix (no hot-key cache)", walk(zipf)),
        ] {
            let ours = KeyedLimiter::<u64>::new(common::OPEN.tollgate());
            let uncached = KeyedLimiter::builder(common::OPEN.tollgate())
                .hot_keys_per_thread(0)
                .build::<u64>();
            let (ours, uncached) = (keyed(&ours, &keys), keyed(&uncached, &keys));
            row(name, threads, rounds, per_thread, ours, uncached);
        }
        let ours = KeyedLimiter::<u64>::new(common::OPEN.tollgate());
        let bucket = TokenBucket::new(common::OPEN.tollgate());
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
