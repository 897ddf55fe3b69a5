//! Loom models of tollgate's lock-free state machines.
//!
//! Run them with the project cfg that swaps tollgate's atomics for loom's:
//!
//! ```text
//! RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=5 \
//!     CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release --tests
//! ```
//!
//! Without the cfg this crate is empty, so a plain `cargo test --workspace`
//! neither builds loom nor runs the (slow) models.

#![cfg(tollgate_loom)]

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use tollgate::{AcquireError, Limit, ManualClock, Quota, TokenBucket};

/// Explores every interleaving of `f` up to the preemption bound.
///
/// The bound defaults to 3 (enough for every race in these models: each needs
/// at most two forced switches) and `LOOM_MAX_PREEMPTIONS` overrides it, as
/// loom's own builder reads it.
pub fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

/// Every distinct value `f` returns across the executions loom explores.
///
/// The set lives in a std mutex, outside loom's view, so that recording an
/// execution adds no interleavings of its own.
pub fn gather<T, F>(f: F) -> BTreeSet<T>
where
    T: Ord + Send + 'static,
    F: Fn() -> T + Sync + Send + 'static,
{
    let seen = std::sync::Arc::new(Mutex::new(BTreeSet::new()));
    let sink = std::sync::Arc::clone(&seen);
    model(move || {
        let value = f();
        sink.lock().expect("a model panicked").insert(value);
    });
    std::mem::take(&mut *seen.lock().expect("a model panicked"))
}

/// Asserts the envelope of a bucket of `capacity` refilled at one token per
/// second over every window between two admissions, given their times in
/// nanoseconds: at most `B + r·(t - s)` in `[s, t]`.
pub fn assert_envelope(capacity: u64, admitted_at: &[u64]) {
    for &s in admitted_at {
        for &t in admitted_at.iter().filter(|&&t| t >= s) {
            let inside = admitted_at.iter().filter(|&&a| s <= a && a <= t).count() as u64;
            let allowed = capacity + (t - s) / 1_000_000_000;
            assert!(inside <= allowed, "{inside} in [{s}, {t}]: {admitted_at:?}");
        }
    }
}

/// Drains a bucket of two tokens refilled at one per second at 0.6 s and at
/// 1 s (after `earlier`, an admission a racing thread may have made), and
/// asserts the envelope over every window of what was admitted.
pub fn assert_drained_within_envelope(
    bucket: &TokenBucket<ManualClock>,
    clock: &ManualClock,
    earlier: Option<Duration>,
) {
    let mut kept: Vec<Duration> = earlier.into_iter().collect();
    for at in [Duration::from_millis(600), Duration::from_secs(1)] {
        clock.set(at);
        while bucket.try_acquire(1).is_ok() {
            kept.push(at);
        }
    }
    let nanos: Vec<u64> = kept.iter().map(|d| d.as_nanos() as u64).collect();
    assert_envelope(2, &nanos);
}

/// One call a model makes on the shared bucket or on its clock.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// `try_acquire(cost)`.
    Acquire(u64),
    /// `reserve(cost, max_wait)`.
    Reserve(u64, Duration),
    /// `refund(cost)`.
    Refund(u64),
    /// `reset()`.
    Reset,
    /// Moves the shared clock forward.
    Advance(Duration),
    /// Sets the shared clock, forwards or backwards.
    SetClock(Duration),
}

/// What an [`Op`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// `cost` tokens were spent; the caller may start after `wait` (always
    /// zero for `try_acquire`).
    Admitted {
        /// The tokens spent.
        cost: u64,
        /// The delay the bucket imposed.
        wait: Duration,
    },
    /// Nothing was spent; the same request would fit after `retry_after`.
    Denied {
        /// The wait the bucket reported.
        retry_after: Duration,
    },
    /// The operation returns nothing.
    Done,
}

/// What one execution of a [`Scenario`] let an observer see.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Run {
    /// The outcomes of the setup, run by the main thread before the race.
    pub setup: Vec<Outcome>,
    /// Each racing thread's outcomes, in program order.
    pub threads: Vec<Vec<Outcome>>,
    /// `available()` once every thread has finished.
    pub available: u64,
}

impl Run {
    /// Every outcome: setup first, then thread by thread.
    pub fn outcomes(&self) -> impl Iterator<Item = &Outcome> {
        self.setup.iter().chain(self.threads.iter().flatten())
    }

    /// Tokens spent by all admissions, setup included.
    pub fn admitted(&self) -> u64 {
        self.outcomes()
            .map(|outcome| match outcome {
                Outcome::Admitted { cost, .. } => cost,
                _ => &0,
            })
            .sum()
    }
}

/// A bucket created full on a [`ManualClock`] at zero, refilled at
/// `per_second` tokens per second, what the main thread does to it first,
/// and the scripts of the threads that then race on it.
#[derive(Clone, Debug)]
pub struct Scenario {
    capacity: u64,
    per_second: u64,
    setup: Vec<Op>,
    threads: Vec<Vec<Op>>,
}

impl Scenario {
    /// A scenario with no setup and no threads yet.
    pub fn new(capacity: u64, per_second: u64) -> Self {
        Scenario {
            capacity,
            per_second,
            setup: Vec::new(),
            threads: Vec::new(),
        }
    }

    /// Runs `ops` on the main thread before any racing thread starts.
    pub fn setup(mut self, ops: impl IntoIterator<Item = Op>) -> Self {
        self.setup.extend(ops);
        self
    }

    /// Adds a racing thread that runs `ops` in order.
    pub fn thread(mut self, ops: impl IntoIterator<Item = Op>) -> Self {
        self.threads.push(ops.into_iter().collect());
        self
    }

    /// The most tokens the quota lets be spent by `elapsed` past time zero:
    /// `B + floor(r * elapsed)`, in exact integer arithmetic.
    pub fn envelope(&self, elapsed: Duration) -> u64 {
        let refilled = u128::from(self.per_second) * elapsed.as_nanos() / 1_000_000_000;
        self.capacity + u64::try_from(refilled).expect("models use short times")
    }

    /// Every run loom reaches with the threads truly racing.
    pub fn explore(&self) -> BTreeSet<Run> {
        let scenario = self.clone();
        gather(move || scenario.run_concurrently())
    }

    /// Every run of the linearizable specification: whole operations one at a
    /// time, in each order that keeps every thread's program order.
    pub fn sequential(&self) -> BTreeSet<Run> {
        let scenario = self.clone();
        // Loom atomics exist only inside a model; with no threads spawned it
        // runs once.
        gather(move || {
            scenario
                .orders()
                .iter()
                .map(|order| scenario.run_in_order(order))
                .collect::<BTreeSet<_>>()
        })
        .into_iter()
        .flatten()
        .collect()
    }

    /// Explores the race and asserts that the runs it reaches are exactly
    /// those of the sequential specification: none is extra (linearizability)
    /// and none is missing (the model really exercised every race).
    ///
    /// Only meaningful while no thread reads the clock across another's
    /// change of it: a reading taken before a change and acted on after it
    /// matches no sequential order.
    pub fn explore_linearizable(&self) -> BTreeSet<Run> {
        let runs = self.explore();
        assert_eq!(runs, self.sequential(), "{self:?}");
        runs
    }

    fn bucket(&self) -> TokenBucket<ManualClock> {
        let quota = Quota::new(self.capacity, self.per_second, Duration::from_secs(1))
            .expect("models use valid quotas");
        TokenBucket::with_clock(quota, ManualClock::new())
    }

    fn run_concurrently(&self) -> Run {
        let bucket = Arc::new(self.bucket());
        let setup = self.setup.iter().map(|&op| apply(&bucket, op)).collect();
        let handles: Vec<_> = self
            .threads
            .iter()
            .map(|script| {
                let (bucket, script) = (Arc::clone(&bucket), script.clone());
                thread::spawn(move || {
                    script
                        .into_iter()
                        .map(|op| apply(&bucket, op))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let threads = handles
            .into_iter()
            .map(|handle| handle.join().expect("a racing thread panicked"))
            .collect();
        Run {
            setup,
            threads,
            available: bucket.available(),
        }
    }

    /// Runs the threads' operations one at a time; `order` names the thread
    /// whose next operation runs at each step.
    fn run_in_order(&self, order: &[usize]) -> Run {
        let bucket = self.bucket();
        let setup = self.setup.iter().map(|&op| apply(&bucket, op)).collect();
        let mut threads = vec![Vec::new(); self.threads.len()];
        for &t in order {
            let op = self.threads[t][threads[t].len()];
            threads[t].push(apply(&bucket, op));
        }
        Run {
            setup,
            threads,
            available: bucket.available(),
        }
    }

    /// Every merge of the threads' scripts that keeps each in program order.
    fn orders(&self) -> Vec<Vec<usize>> {
        fn extend(left: &mut [usize], prefix: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
            if left.iter().all(|&n| n == 0) {
                out.push(prefix.clone());
                return;
            }
            for t in 0..left.len() {
                if left[t] > 0 {
                    left[t] -= 1;
                    prefix.push(t);
                    extend(left, prefix, out);
                    prefix.pop();
                    left[t] += 1;
                }
            }
        }
        let mut left: Vec<usize> = self.threads.iter().map(Vec::len).collect();
        let mut out = Vec::new();
        extend(&mut left, &mut Vec::new(), &mut out);
        out
    }
}

fn apply(bucket: &TokenBucket<ManualClock>, op: Op) -> Outcome {
    let decided = |cost, result: Result<Duration, AcquireError>| match result {
        Ok(wait) => Outcome::Admitted { cost, wait },
        Err(AcquireError::Insufficient { retry_after }) => Outcome::Denied { retry_after },
        Err(other) => panic!("models only make valid requests: {other}"),
    };
    match op {
        Op::Acquire(cost) => decided(cost, bucket.try_acquire(cost).map(|()| Duration::ZERO)),
        Op::Reserve(cost, max_wait) => decided(cost, bucket.reserve(cost, max_wait)),
        Op::Refund(cost) => {
            bucket.refund(cost);
            Outcome::Done
        }
        Op::Reset => {
            bucket.reset();
            Outcome::Done
        }
        Op::Advance(by) => {
            bucket.clock().advance(by);
            Outcome::Done
        }
        Op::SetClock(to) => {
            bucket.clock().set(to);
            Outcome::Done
        }
    }
}
