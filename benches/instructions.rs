//! Instructions per decision, counted under callgrind by gungraun: the
//! figures that do not drift with the machine's load, beside the timed ones
//! of criterion, for every headline row of `docs/benchmarks.md`.
//!
//! Each benchmark makes [`OPS`] decisions on a limiter its setup built and
//! warmed (setup is not counted) and returns it (its drop is not counted
//! either), so a row's instructions divided by 1000
//! are one decision's. Every row has a hard limit a little above what it
//! executes now: `.ci/run` runs this file, and a change that makes a hot
//! path execute more fails the build. The limits are the figures quoted in
//! `docs/benchmarks.md`, "Instructions per decision".
//!
//! tollgate's rows read [`TscClock`], the time-stamp counter through
//! `quanta`: what [`DefaultClock`](tollgate::DefaultClock) reads on a
//! machine whose counter its start-up check trusts, and what governor's
//! default clock reads. Under valgrind that check cannot pin threads and
//! compare their counters, so the default would read the OS clock there
//! and count the kernel's clock instead of the limiter.
//!
//! Callgrind also counts each row's locked instructions (`Ge`, its global
//! bus events): one per admission on the bucket and on a cached hot key
//! (limited too), three on a keyed decision through the table.
//!
//! Run with `cargo bench -p tollgate-benches --bench instructions` (valgrind and
//! `gungraun-runner` of the same version as the `gungraun` dev-dependency
//! must be installed; `.ci/run` installs both).

// gungraun's macros generate a module per benchmark, undocumented.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

mod common;

use governor::{Quota as GovernorQuota, RateLimiter};
use gungraun::{
    Callgrind, EventKind, LibraryBenchmarkConfig, library_benchmark, library_benchmark_group, main,
};
use tollgate::{
    KeyedLimiter, Limit, ManualClock, Quota, SlidingWindow, StripedBucket, TokenBucket, TscClock,
    WindowQuota,
};

type Bucket = TokenBucket<TscClock>;
type Keyed = KeyedLimiter<u64, TscClock>;

/// Decisions per benchmark: a row's instructions per 1000 decisions.
const OPS: u64 = 1000;

/// Keys of the many-keys rows, all created by the setup.
const KEYS: u64 = 100_000;

/// Decisions of a Zipf walk made by the setup before the counted ones.
const WARM: u64 = 50_000;

fn open() -> Quota {
    common::OPEN.tollgate()
}

fn shut() -> Quota {
    common::SHUT.tollgate()
}

/// The `i`-th key of the scattered walk over the many keys.
fn scattered(i: u64) -> u64 {
    common::scattered_key(i % KEYS, KEYS)
}

/// A Zipf walk (exponent 1) of `len` decisions over the many keys.
fn zipf_walk(len: u64) -> Vec<u64> {
    common::zipf_ranks(KEYS, len as usize)
        .into_iter()
        .map(|rank| common::scattered_key(rank, KEYS))
        .collect()
}

fn open_bucket() -> Bucket {
    let bucket = TokenBucket::with_clock(open(), TscClock::new());
    bucket.try_acquire(1).expect("open");
    bucket
}

fn shut_bucket() -> Bucket {
    let bucket = TokenBucket::with_clock(shut(), TscClock::new());
    bucket.try_acquire(1).expect("the one token");
    bucket
}

/// A bucket whose quota changed once, then decided on once.
fn changed_bucket(quota: Quota) -> Bucket {
    let before = Quota::new(quota.capacity() + 1, 1, Duration::from_secs(1)).expect("valid");
    let bucket = TokenBucket::with_clock(before, TscClock::new());
    bucket.set_quota(quota);
    let _ = bucket.try_acquire(1);
    bucket
}

#[library_benchmark]
#[bench::admitted(setup = open_bucket, config = limit_locked(BUCKET_ADMITTED, 1_000))]
fn bucket_admitted(bucket: Bucket) -> Bucket {
    for _ in 0..OPS {
        let _ = black_box(black_box(&bucket).try_acquire(1));
    }
    bucket
}

#[library_benchmark]
#[bench::refused(setup = shut_bucket, config = limit(BUCKET_REFUSED))]
fn bucket_refused(bucket: Bucket) -> Bucket {
    for _ in 0..OPS {
        let _ = black_box(black_box(&bucket).try_acquire(1));
    }
    bucket
}

#[library_benchmark]
#[bench::admitted(args = (open()), setup = changed_bucket, config = limit(CHANGED_ADMITTED))]
#[bench::refused(args = (shut()), setup = changed_bucket, config = limit(CHANGED_REFUSED))]
fn changed_bucket_decision(bucket: Bucket) -> Bucket {
    for _ in 0..OPS {
        let _ = black_box(black_box(&bucket).try_acquire(1));
    }
    bucket
}

/// A striped bucket on a clock that stands still: on the real clock its
/// leases expire and refill as valgrind's slow run lets time pass, and
/// its count moved between runs (102.0 to 128.6 a decision); frozen, a
/// run takes the same path every time, lease for lease, and its limit can
/// be tight.
fn striped() -> StripedBucket<ManualClock> {
    let quota = Quota::new(1 << 40, 1, Duration::from_micros(1)).expect("a valid quota");
    let striped = StripedBucket::with_clock(quota, ManualClock::new(), 4, 64);
    striped.try_acquire(1).expect("open");
    striped
}

#[library_benchmark]
#[bench::uncontended(setup = striped, config = limit(STRIPED))]
fn striped_admitted(striped: StripedBucket<ManualClock>) -> StripedBucket<ManualClock> {
    for _ in 0..OPS {
        let _ = black_box(black_box(&striped).try_acquire(1));
    }
    striped
}

fn shut_sliding() -> SlidingWindow<TscClock> {
    let quota = WindowQuota::new(1, Duration::from_secs(3600)).expect("valid");
    let window = SlidingWindow::with_clock(quota, TscClock::new()).expect("packs");
    window.try_acquire(1).expect("the one");
    window
}

#[library_benchmark]
#[bench::refused(setup = shut_sliding, config = limit(SLIDING_REFUSED))]
fn sliding_refused(window: SlidingWindow<TscClock>) -> SlidingWindow<TscClock> {
    for _ in 0..OPS {
        let _ = black_box(black_box(&window).try_acquire(1));
    }
    window
}

fn keyed(hot_keys: usize) -> Keyed {
    KeyedLimiter::builder(open())
        .clock(TscClock::new())
        .hot_keys_per_thread(hot_keys)
        .build()
}

fn hot_key(hot_keys: usize) -> Keyed {
    let limiter = keyed(hot_keys);
    limiter.try_acquire(&7, 1).expect("open");
    limiter
}

fn many_keys(hot_keys: usize) -> Keyed {
    let limiter = keyed(hot_keys);
    for i in 0..KEYS {
        limiter.try_acquire(&scattered(i), 1).expect("open");
    }
    limiter
}

/// The many keys after a Zipf walk of `WARM` decisions (the threads'
/// caches as steady traffic leaves them), and the walk's next [`OPS`].
fn zipf_keys(hot_keys: usize) -> (Keyed, Vec<u64>) {
    let limiter = many_keys(hot_keys);
    let mut walk = zipf_walk(WARM + OPS);
    for key in walk.drain(..WARM as usize) {
        limiter.try_acquire(&key, 1).expect("open");
    }
    (limiter, walk)
}

#[library_benchmark]
#[bench::cached(args = (64), setup = zipf_keys, config = limit(ZIPF_CACHED))]
#[bench::uncached(args = (0), setup = zipf_keys, config = limit(ZIPF_UNCACHED))]
fn keyed_zipf((limiter, walk): (Keyed, Vec<u64>)) -> (Keyed, Vec<u64>) {
    for key in &walk {
        let _ = black_box(black_box(&limiter).try_acquire(key, 1));
    }
    (limiter, walk)
}

#[library_benchmark]
#[bench::hot(args = (64), setup = hot_key, config = limit_locked(HOT_CACHED, 1_030))]
#[bench::uncached(args = (0), setup = hot_key, config = limit(HOT_UNCACHED))]
fn keyed_hot(limiter: Keyed) -> Keyed {
    for _ in 0..OPS {
        let _ = black_box(black_box(&limiter).try_acquire(&7, 1));
    }
    limiter
}

#[library_benchmark]
#[bench::many(args = (64), setup = many_keys, config = limit(MANY_CACHED))]
#[bench::uncached(args = (0), setup = many_keys, config = limit(MANY_UNCACHED))]
fn keyed_many(limiter: Keyed) -> Keyed {
    for i in 0..OPS {
        let _ = black_box(black_box(&limiter).try_acquire(&scattered(i), 1));
    }
    limiter
}

library_benchmark_group!(
    name = tollgate_rows;
    benchmarks = bucket_admitted, bucket_refused, changed_bucket_decision, striped_admitted,
        sliding_refused, keyed_hot, keyed_many, keyed_zipf
);

type GovernorDirect = governor::DefaultDirectRateLimiter;
type GovernorKeyed = governor::DefaultKeyedRateLimiter<u64>;

fn governor_direct(quota: GovernorQuota) -> GovernorDirect {
    let limiter = RateLimiter::direct(quota);
    let _ = limiter.check();
    limiter
}

#[library_benchmark]
#[bench::admitted(args = (common::OPEN.governor()), setup = governor_direct)]
#[bench::refused(args = (common::SHUT.governor()), setup = governor_direct)]
fn governor_direct_decision(limiter: GovernorDirect) -> GovernorDirect {
    for _ in 0..OPS {
        let _ = black_box(black_box(&limiter).check());
    }
    limiter
}

fn governor_hot() -> GovernorKeyed {
    let limiter = RateLimiter::keyed(common::OPEN.governor());
    let _ = limiter.check_key(&7);
    limiter
}

fn governor_many() -> GovernorKeyed {
    let limiter = RateLimiter::keyed(common::OPEN.governor());
    for i in 0..KEYS {
        let _ = limiter.check_key(&scattered(i));
    }
    limiter
}

#[library_benchmark]
#[bench::hot(setup = governor_hot)]
fn governor_keyed_hot(limiter: GovernorKeyed) -> GovernorKeyed {
    for _ in 0..OPS {
        let _ = black_box(black_box(&limiter).check_key(&7));
    }
    limiter
}

fn governor_zipf() -> (GovernorKeyed, Vec<u64>) {
    let limiter = governor_many();
    let mut walk = zipf_walk(WARM + OPS);
    for key in walk.drain(..WARM as usize) {
        let _ = limiter.check_key(&key);
    }
    (limiter, walk)
}

#[library_benchmark]
#[bench::zipf(setup = governor_zipf)]
fn governor_keyed_zipf((limiter, walk): (GovernorKeyed, Vec<u64>)) -> (GovernorKeyed, Vec<u64>) {
    for key in &walk {
        let _ = black_box(black_box(&limiter).check_key(key));
    }
    (limiter, walk)
}

#[library_benchmark]
#[bench::many(setup = governor_many)]
fn governor_keyed_many(limiter: GovernorKeyed) -> GovernorKeyed {
    for i in 0..OPS {
        let _ = black_box(black_box(&limiter).check_key(&scattered(i)));
    }
    limiter
}

library_benchmark_group!(
    name = governor_rows;
    benchmarks = governor_direct_decision, governor_keyed_hot, governor_keyed_many,
        governor_keyed_zipf
);

// Each row's limit: its count per 1000 decisions as measured with the
// compiler in `benches/limits-rustc.txt`, plus at most 3 %. Counts under
// callgrind are the same every run (no row's path depends on time), so a
// row over its limit executes more than it did.
const BUCKET_ADMITTED: u64 = 82_500; // 80 104
const BUCKET_REFUSED: u64 = 102_000; // 99 104
const CHANGED_ADMITTED: u64 = 299_800; // 291 104
const CHANGED_REFUSED: u64 = 321_400; // 312 104
const STRIPED: u64 = 102_400; // 99 503, on a clock that stands still
const SLIDING_REFUSED: u64 = 179_200; // 174 055
const HOT_CACHED: u64 = 146_900; // 142 700
const HOT_UNCACHED: u64 = 195_900; // 190 199
const MANY_CACHED: u64 = 250_400; // 243 198
const MANY_UNCACHED: u64 = 206_200; // 200 198
const ZIPF_CACHED: u64 = 212_700; // 206 552
const ZIPF_UNCACHED: u64 = 197_100; // 191 405

/// A hard limit of `instructions` on a benchmark's count.
fn limit(instructions: u64) -> LibraryBenchmarkConfig {
    let mut config = LibraryBenchmarkConfig::default();
    config.tool(Callgrind::default().hard_limits([(EventKind::Ir, instructions)]));
    config
}

/// [`limit`], and a hard limit of `locked` on its locked instructions
/// (callgrind's global bus events, `Ge`).
fn limit_locked(instructions: u64, locked: u64) -> LibraryBenchmarkConfig {
    let mut config = LibraryBenchmarkConfig::default();
    config.tool(
        Callgrind::default().hard_limits([(EventKind::Ir, instructions), (EventKind::Ge, locked)]),
    );
    config
}

main!(
    config = LibraryBenchmarkConfig::default()
        .tool(Callgrind::with_args(["--cache-sim=no", "--collect-bus=yes"]));
    library_benchmark_groups = tollgate_rows, governor_rows
);
