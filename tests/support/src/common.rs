//! Helpers shared by the integration tests, computed independently of the
//! library so that a bug there cannot hide a bug in the bucket.

use std::future::Future;
use std::pin::Pin;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use num_rational::Ratio;
use tollgate::{AcquireError, HierarchyError};

/// Exact rationals for the models the property tests compare to.
pub type Q = Ratio<i128>;

pub fn q(n: u64) -> Q {
    Q::from_integer(i128::from(n))
}

/// Periods chosen so that exact quotas (small reduced denominators), ones
/// rounded per token (e.g. 11/s, 13 per 7 s, 13 per 333 ns) and ones charged
/// per request (e.g. 17 per 333 ns) are drawn.
pub const PERIODS_NS: [u64; 9] = [
    1_000_000_000,
    7_000_000_000,
    1_000_000,
    333,
    1_001,
    12_345,
    3_333_333,
    100_000_000,
    999_999_937,
];

/// Rates of bytes and others, too fast and irregular for a whole number of
/// eighths of a nanosecond per token within 0.1 %: charged per request.
/// `(tokens, period_ns)`.
pub const FAST_RATES: [(u64, u64); 6] = [
    (64 << 20, 1_000_000_000),
    (1 << 30, 1_000_000_000),
    (1 << 33, 1_000_000_000),
    (3_000_000_007, 1_000_000_000),
    (10_000_000_019, 7_000_000_000),
    // A tick (1/8 ns) is 125 000 tokens: every request costs at least one.
    (999_999_937, 1_000),
];

/// A duration in whole nanoseconds, saturating.
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Whole nanoseconds at or after `x` (never negative).
pub fn ceil_nanos(x: Q) -> u64 {
    u64::try_from(x.ceil().to_integer().max(0)).unwrap()
}

/// Runs `work(thread_index)` on `threads` threads released together, and
/// returns what each returned. Past the barrier, each thread also waits
/// (yielding) until every other one is running: a barrier wakes threads,
/// it does not run them, and a thread still waking when the first has
/// drained a bucket races nothing. Whether their operations then
/// interleaved is each test's to prove ([`Interleaving`]).
pub fn race<T: Send>(threads: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let barrier = Barrier::new(threads);
    let running = AtomicU64::new(0);
    thread::scope(|s| {
        let (barrier, running, work) = (&barrier, &running, &work);
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                s.spawn(move || {
                    barrier.wait();
                    running.fetch_add(1, Ordering::AcqRel);
                    while running.load(Ordering::Acquire) < threads as u64 {
                        thread::yield_now();
                    }
                    work(i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The operations of racing threads, numbered in one order as each
/// completes, to show that the threads ran at the same time: a worker
/// whose first and last numbers have another worker's number between them
/// was still running while the other completed an operation. It shows the
/// runs overlapped on the object, not that one operation's own steps were
/// split by another's (a loom model shows that). A test that claims a race
/// repeats its rounds until one shows it ([`until_interleaved`]).
#[derive(Debug, Default)]
pub struct Interleaving {
    total: AtomicU64,
}

impl Interleaving {
    /// One worker's view of the count.
    pub fn worker(&self) -> Worker<'_> {
        Worker {
            shared: self,
            own: 0,
            first: None,
            last: 0,
        }
    }
}

/// One racing worker's operations among all of them.
#[derive(Debug)]
pub struct Worker<'a> {
    shared: &'a Interleaving,
    own: u64,
    first: Option<u64>,
    last: u64,
}

impl Worker<'_> {
    /// Counts one operation of this worker, just after it.
    pub fn step(&mut self) {
        let at = self.shared.total.fetch_add(1, Ordering::SeqCst);
        self.first.get_or_insert(at);
        self.last = at;
        self.own += 1;
    }

    /// Whether another worker numbered an operation between this worker's
    /// first and last numbers.
    pub fn interleaved(&self) -> bool {
        self.first
            .is_some_and(|first| self.last - first + 1 > self.own)
    }
}

/// Runs `round(n)` for `n = 0, 1, ...` until at least `rounds` have run and
/// at least one of them answered that its threads interleaved, failing
/// loudly if that has not happened within [`RACE_DEADLINE`]. Returns the
/// rounds run.
pub fn until_interleaved(rounds: usize, mut round: impl FnMut(usize) -> bool) -> usize {
    let deadline = Instant::now() + RACE_DEADLINE;
    let mut seen = false;
    let mut ran = 0;
    while ran < rounds || !seen {
        assert!(
            Instant::now() < deadline,
            "no interleaving in {ran} rounds within {RACE_DEADLINE:?}"
        );
        seen |= round(ran);
        ran += 1;
    }
    ran
}

/// How long a racing side may take to do its part before the test fails.
/// Generous: it only bounds a run that would otherwise never end, on a
/// machine as loaded as it may be.
pub const RACE_DEADLINE: Duration = Duration::from_secs(600);

/// Runs `round(i, n, &mut tally)` (worker `i`'s round `n`, from 0) over
/// and over on `threads` threads beside one
/// more thread calling `beside()` in a loop, all released together, and
/// returns each worker's tally.
///
/// The two sides overlap by construction, not by the scheduler's luck: a
/// worker stops only once it has run at least `rounds` rounds *and* at
/// least `beside_calls` calls of `beside` have completed since its first
/// round, and `beside` runs until every worker has stopped. A run that
/// cannot get there within [`RACE_DEADLINE`] fails loudly.
pub fn race_beside<T: Default + Send>(
    threads: usize,
    rounds: u64,
    beside_calls: u64,
    round: impl Fn(usize, u64, &mut T) + Sync,
    beside: impl Fn() + Sync,
) -> Vec<T> {
    let barrier = Barrier::new(threads + 1);
    let done = AtomicBool::new(false);
    let calls = AtomicU64::new(0);
    let deadline = Instant::now() + RACE_DEADLINE;
    thread::scope(|s| {
        let (barrier, done, calls, round, beside) = (&barrier, &done, &calls, &round, &beside);
        s.spawn(move || {
            barrier.wait();
            while !done.load(Ordering::Acquire) {
                beside();
                calls.fetch_add(1, Ordering::Release);
            }
        });
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                s.spawn(move || {
                    barrier.wait();
                    let first = calls.load(Ordering::Acquire);
                    let mut tally = T::default();
                    let mut ran = 0;
                    loop {
                        round(i, ran, &mut tally);
                        ran += 1;
                        let beside_ran = calls.load(Ordering::Acquire) - first;
                        if ran >= rounds && beside_ran >= beside_calls {
                            return tally;
                        }
                        assert!(
                            Instant::now() < deadline,
                            "worker {i}: {ran} of {rounds} rounds beside {beside_ran} of \
                             {beside_calls} calls in {RACE_DEADLINE:?}"
                        );
                    }
                })
            })
            .collect();
        // Joined before `done` is set, so `beside` keeps running for as long
        // as any worker does; a panicking worker stops it too.
        let out: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        done.store(true, Ordering::Release);
        out.into_iter()
            .map(|joined| joined.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    })
}

/// The refusal `try_acquire` must return when the cost fits after
/// `retry_after`.
pub fn insufficient(retry_after: Duration) -> Result<(), AcquireError> {
    Err(AcquireError::Insufficient { retry_after })
}

/// The token-bucket envelope of a quota: over any interval of length `t`, at
/// most `B + r * t` is admitted, `r = tokens / period`. Checked in integers,
/// both sides scaled by the period.
#[derive(Clone, Copy, Debug)]
pub struct Envelope {
    pub capacity: u64,
    pub tokens: u64,
    pub period_ns: u64,
}

impl Envelope {
    /// Whether `spent` fits in an interval of `elapsed_ns`.
    pub fn admits(&self, spent: u128, elapsed_ns: u64) -> bool {
        let period = u128::from(self.period_ns);
        spent * period
            <= u128::from(self.capacity) * period + u128::from(self.tokens) * u128::from(elapsed_ns)
    }

    /// Asserts the envelope over every pair of event times `s <= e`, each
    /// interval widened by `slack_ns`. `events` holds `(time_ns, cost)`, with
    /// cost zero for a refusal; any order.
    pub fn assert_holds_over(&self, events: &[(u64, u64)], slack_ns: u64) {
        let mut events = events.to_vec();
        events.sort_unstable();
        // One entry per distinct time, with the cost spent up to and
        // including it, so that an interval's total is a difference.
        let mut cumulative: Vec<(u64, u128)> = Vec::new();
        let mut total = 0u128;
        for &(at, cost) in &events {
            total += u128::from(cost);
            match cumulative.last_mut() {
                Some(last) if last.0 == at => last.1 = total,
                _ => cumulative.push((at, total)),
            }
        }
        for (i, &(start, _)) in cumulative.iter().enumerate() {
            let before = if i == 0 { 0 } else { cumulative[i - 1].1 };
            for &(end, through) in &cumulative[i..] {
                let spent = through - before;
                assert!(
                    self.admits(spent, end - start + slack_ns),
                    "{spent} tokens in [{start}, {end}] ns exceed {self:?}"
                );
            }
        }
    }
}

/// Polls `future` once with a waker that does nothing: what a client that
/// sends and hangs up at once leaves the server to do.
pub fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

/// Polls an async acquire once inside a paused tokio runtime, then drops
/// it: whether it was admitted at once. A wait that was pending is given
/// back by its cancellation path as the future drops.
pub fn admitted_at_first_poll<T, E>(future: impl Future<Output = Result<T, E>>) -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a tokio runtime");
    let _inside = runtime.enter();
    let mut future = std::pin::pin!(future);
    matches!(poll_once(&mut future), Poll::Ready(Ok(_)))
}

/// A chain refused by one of its limits: which one, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainRefused {
    pub limit: usize,
    pub error: AcquireError,
}

/// The refusal of a chain by one of its limits, failing the test on an
/// admission or on a chain refused for its length.
pub trait RefusedBy {
    fn refused_by(self) -> ChainRefused;
}

impl RefusedBy for Result<(), HierarchyError> {
    #[track_caller]
    fn refused_by(self) -> ChainRefused {
        match self {
            Err(HierarchyError::Refused { limit, error }) => ChainRefused { limit, error },
            other => panic!("expected a limit to refuse the chain, got {other:?}"),
        }
    }
}
