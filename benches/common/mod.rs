//! What the benchmark files share: the clocks of each class and the macro
//! that runs a group over every class.

// Each bench target compiles this module and may use only part of it.
#![allow(dead_code, unused_macros, unused_imports)]

use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use criterion::Criterion;
use governor::Quota as GovernorQuota;
use governor::clock::QuantaUpkeepClock;
use ratelimit::Ratelimiter;
use tollgate::{Clock, CoarseClock, Quota};

/// The measurement settings every group shares: short warm-up, 3 s of
/// samples (medians are stable to a few percent on a quiet machine).
pub fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

/// Resolution of both background-thread clocks.
pub const COARSE_RESOLUTION: Duration = Duration::from_millis(1);

/// `quanta`'s upkeep thread is process-global: at most one may run, so each
/// group starts its own and stops it (by dropping every clone) before the next.
pub fn quanta_upkeep_clock() -> QuantaUpkeepClock {
    QuantaUpkeepClock::from_interval(COARSE_RESOLUTION).expect("no other quanta upkeep thread")
}

pub fn coarse_clock() -> CoarseClock {
    CoarseClock::new(COARSE_RESOLUTION).expect("spawn the coarse clock thread")
}

/// Runs `$class` once per clock class, each tollgate clock beside governor's
/// equivalent: `monotonic` (`Instant` on both), `default` (what each crate
/// reads when no clock is chosen: on both, the time-stamp counter through
/// `quanta`, tollgate's `DefaultClock` and governor's `QuantaClock`) and
/// `coarse`. A macro because each class instantiates the generic function
/// with different clock types.
macro_rules! for_each_clock_class {
    ($group:expr, $class:ident) => {{
        $class(
            $group,
            "monotonic",
            tollgate::MonotonicClock::new(),
            governor::clock::MonotonicClock,
        );
        $class(
            $group,
            "default",
            tollgate::DefaultClock::new(),
            governor::clock::DefaultClock::default(),
        );
        $class(
            $group,
            "coarse",
            $crate::common::coarse_clock(),
            $crate::common::quanta_upkeep_clock(),
        );
    }};
}
pub(crate) use for_each_clock_class;

/// Runs `iters` decisions in total over `threads` threads released together
/// by a barrier (spawned before it, outside the timed region), thread `t`
/// calling `decide(t)` `iters / threads` times (rounded up), and returns the
/// time from the release to the last thread's end.
pub fn timed<F: Fn(usize) + Sync>(threads: usize, iters: u64, decide: F) -> Duration {
    let barrier = std::sync::Barrier::new(threads + 1);
    let per_thread = iters.div_ceil(threads as u64);
    std::thread::scope(|s| {
        for thread in 0..threads {
            let (barrier, decide) = (&barrier, &decide);
            s.spawn(move || {
                barrier.wait();
                for _ in 0..per_thread {
                    decide(thread);
                }
            });
        }
        barrier.wait();
        // The scope joins every thread before returning.
        std::time::Instant::now()
    })
    .elapsed()
}

/// A token bucket with a floating-point balance, the textbook design: the
/// state a lock-based limiter keeps per bucket.
pub struct FloatBucket {
    /// Time of the latest decision (ns).
    last: u64,
    /// The balance then.
    tokens: f64,
    capacity: f64,
    per_nano: f64,
}

impl FloatBucket {
    /// A full bucket of `capacity` tokens refilling `per_nano` tokens per
    /// nanosecond, as of `now`.
    pub fn new(capacity: f64, per_nano: f64, now: u64) -> Self {
        FloatBucket {
            last: now,
            tokens: capacity,
            capacity,
            per_nano,
        }
    }

    /// Refills to `now` (a reading older than the last one refills
    /// nothing), then takes `cost` if the balance holds it.
    pub fn try_acquire(&mut self, now: u64, cost: u64) -> bool {
        self.tokens = self.balance(now);
        self.last = self.last.max(now);
        let cost = cost as f64;
        let admitted = self.tokens >= cost;
        if admitted {
            self.tokens -= cost;
        }
        admitted
    }

    /// Whether the bucket holds `cost` at `now`; charges nothing.
    pub fn holds(&self, now: u64, cost: u64) -> bool {
        self.balance(now) >= cost as f64
    }

    /// Whether the bucket has refilled to its capacity at `now`.
    pub fn is_full(&self, now: u64) -> bool {
        self.balance(now) >= self.capacity
    }

    fn balance(&self, now: u64) -> f64 {
        (self.tokens + now.saturating_sub(self.last) as f64 * self.per_nano).min(self.capacity)
    }
}

/// A [`FloatBucket`] behind a lock: the design a one-word bucket replaces,
/// and a baseline of every group.
pub struct MutexBucket(Mutex<FloatBucket>);

impl MutexBucket {
    /// See [`FloatBucket::try_acquire`].
    pub fn try_acquire(&self, now: u64, cost: u64) -> bool {
        self.0.lock().unwrap().try_acquire(now, cost)
    }
}

/// A tollgate clock seen through the `ratelimit` crate's clock trait, so
/// that its limiter reads the same clock class as the others in a group.
pub struct RatelimitClock<C>(pub C);

impl<C: Clock> ratelimit::Clock for RatelimitClock<C> {
    fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.0.now_nanos())
    }
}

/// A quota that every implementation is given in its own terms: `capacity`
/// tokens, one more every `interval`, starting full.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SameQuota {
    pub capacity: u32,
    pub interval: Duration,
}

/// Never denies a decision of one token: a burst of `u32::MAX` (governor's
/// largest) refilled at one token per nanosecond (governor's fastest), and
/// every decision takes longer than a nanosecond.
pub const OPEN: SameQuota = SameQuota {
    capacity: u32::MAX,
    interval: Duration::from_nanos(1),
};

/// One token an hour: once taken, refuses for the rest of a run.
pub const SHUT: SameQuota = SameQuota {
    capacity: 1,
    interval: Duration::from_secs(3600),
};

impl SameQuota {
    pub fn tollgate(self) -> Quota {
        Quota::new(u64::from(self.capacity), 1, self.interval).expect("a valid quota")
    }

    pub fn governor(self) -> GovernorQuota {
        GovernorQuota::with_period(self.interval)
            .expect("non-zero period")
            .allow_burst(NonZeroU32::new(self.capacity).expect("non-zero capacity"))
    }

    /// `ratelimit`'s rate is in tokens per period: one per `interval`.
    pub fn ratelimit<C: Clock>(self, clock: C) -> Ratelimiter<RatelimitClock<C>> {
        ratelimit::Builder::with_clock(1, RatelimitClock(clock))
            .period(self.interval)
            .max_tokens(u64::from(self.capacity))
            .initial_available(u64::from(self.capacity))
            .build()
            .expect("a valid ratelimit quota")
    }

    /// A full [`FloatBucket`] of this quota as of `now`.
    pub fn float(self, now: u64) -> FloatBucket {
        let per_nano = 1.0 / self.interval.as_nanos() as f64;
        FloatBucket::new(f64::from(self.capacity), per_nano, now)
    }

    /// A full [`MutexBucket`] of this quota as of `now`.
    pub fn mutex(self, now: u64) -> MutexBucket {
        MutexBucket(Mutex::new(self.float(now)))
    }
}

/// Spreads an index over the 64-bit key space. Multiplying by an odd
/// constant is a bijection, so distinct indices give distinct keys.
pub fn mix(index: u64) -> u64 {
    index.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xA5A5_A5A5
}

/// The `i`-th of `n` keys in scattered order: a multiplier coprime to `n`
/// (a power of ten) permutes the indices, and [`mix`] spreads the values.
pub fn scattered_key(i: u64, n: u64) -> u64 {
    mix(i * 48_271 % n)
}

/// `draws` ranks in `0..n` with probability proportional to `1 / (rank + 1)`,
/// by inverse CDF on a fixed-seed generator, so every run visits the same
/// sequence. (A splitmix step rather than a `rand` dependency: the bench
/// needs reproducible draws, not statistical quality.)
pub fn zipf_ranks(n: u64, draws: usize) -> Vec<u64> {
    let mut cumulative = Vec::with_capacity(n as usize);
    let mut total = 0.0;
    for rank in 0..n {
        total += 1.0 / (rank + 1) as f64;
        cumulative.push(total);
    }
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    (0..draws)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            let u = (z ^ (z >> 31)) as f64 / u64::MAX as f64 * total;
            cumulative.partition_point(|&c| c < u) as u64
        })
        .map(|rank| rank.min(n - 1))
        .collect()
}
