//! The default clock's contract: readings that step back and forth across
//! threads (the time-stamp counters of different cores disagree) may only
//! deny, never mint. Every limiter that reads a clock is driven from many
//! threads through a clock whose readings jitter by up to ±Δ per thread and
//! per reading around a simulated time, and what it admitted must fit the
//! envelope `B + r·(t_max − t_min)` of the readings it saw, hence
//! `B + r·(T + 2Δ)` of the simulated time `T` that passed. The same envelope
//! is checked on the real default clock, in its own readings. No assertion
//! depends on how fast anything ran.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[cfg(feature = "keyed")]
use tollgate::KeyedLimiter;
use tollgate::{
    Clock, DefaultClock, Limit, ManualClock, Quota, Receipt, StripedBucket, TokenBucket,
};

use common::{Interleaving, race, until_interleaved};
use tollgate_test_support::common;

const THREADS: usize = 4;
const DECISIONS_PER_THREAD: u64 = 20_000;
/// Simulated time moves this far every [`ADVANCE_EVERY`] decisions of a
/// thread: about a thousand tokens of refill over a run, against eighty
/// thousand requests, so every limiter is drained again and again.
const STEP: Duration = Duration::from_nanos(100);
const ADVANCE_EVERY: u64 = 8;
/// The jitter, ±: a few emission intervals' worth would hide nothing, so
/// it is a large fraction of one.
const JITTER_NS: u64 = 400;
const BURST: u64 = 10;
/// One token a microsecond.
const PERIOD_NS: u64 = 1_000;

fn quota() -> Quota {
    Quota::new(BURST, 1, Duration::from_nanos(PERIOD_NS)).expect("a valid quota")
}

/// Hands each thread its own jitter sequence.
static NEXT_SEED: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's readings so far (the index of its next offset), and
    /// the seed of its sequence.
    static READINGS: Cell<u64> = const { Cell::new(0) };
    static SEED: u64 = NEXT_SEED.fetch_add(1, Ordering::Relaxed);
}

/// Simulated time seen through a per-thread jitter of up to ±[`JITTER_NS`]:
/// a thread's consecutive readings, and the readings of different threads at
/// the same simulated instant, step back and forth. Records the extreme
/// readings handed out, and how often a reading was behind the one handed
/// out just before it (on any thread), so a test can show the clock did step
/// back.
#[derive(Debug)]
struct Jittered {
    time: ManualClock,
    min: AtomicU64,
    max: AtomicU64,
    last: AtomicU64,
    backward_steps: AtomicU64,
}

impl Jittered {
    /// Starts the simulated time well past the jitter, so no reading is
    /// clamped at zero.
    fn new() -> Self {
        let time = ManualClock::new();
        time.set(Duration::from_secs(1));
        Jittered {
            time,
            min: AtomicU64::new(u64::MAX),
            max: AtomicU64::new(0),
            last: AtomicU64::new(0),
            backward_steps: AtomicU64::new(0),
        }
    }

    /// An offset in `0..=2Δ`, spread over the range differently per thread.
    fn offset() -> u64 {
        let seed = SEED.with(|seed| *seed);
        READINGS.with(|n| {
            let k = n.get();
            n.set(k + 1);
            (k.wrapping_mul(7_919) ^ seed.wrapping_mul(0x9E37_79B9)) % (2 * JITTER_NS + 1)
        })
    }

    /// The readings' span: `t_max − t_min`.
    fn span(&self) -> u64 {
        self.max.load(Ordering::Acquire) - self.min.load(Ordering::Acquire)
    }
}

impl Clock for Jittered {
    fn now_nanos(&self) -> u64 {
        let reading = self.time.now_nanos() - JITTER_NS + Self::offset();
        self.min.fetch_min(reading, Ordering::AcqRel);
        self.max.fetch_max(reading, Ordering::AcqRel);
        if self.last.swap(reading, Ordering::AcqRel) > reading {
            self.backward_steps.fetch_add(1, Ordering::Relaxed);
        }
        reading
    }
}

/// The most tokens a limiter may admit over readings spanning `span_ns`.
fn envelope(span_ns: u64) -> u64 {
    BURST + span_ns / PERIOD_NS
}

/// Runs `decide` [`DECISIONS_PER_THREAD`] times on each of [`THREADS`]
/// threads while the simulated time advances, and checks what was admitted
/// against the envelope, in the readings and in simulated time.
fn assert_enveloped(what: &str, clock: &Jittered, started: u64, decide: impl Fn() -> u64 + Sync) {
    let admitted: u64 = race(THREADS, |_| {
        (1..=DECISIONS_PER_THREAD)
            .map(|i| {
                if i.is_multiple_of(ADVANCE_EVERY) {
                    clock.time.advance(STEP);
                }
                decide()
            })
            .sum::<u64>()
    })
    .iter()
    .sum();
    let elapsed = clock.time.now_nanos() - started;
    let attempts = THREADS as u64 * DECISIONS_PER_THREAD;
    assert!(
        clock.backward_steps.load(Ordering::Relaxed) > 0,
        "{what}: the clock never stepped back"
    );
    assert!(admitted < attempts, "{what}: nothing was ever denied");
    assert!(
        admitted <= envelope(clock.span()),
        "{what}: {admitted} admitted over readings spanning {} ns, envelope {}",
        clock.span(),
        envelope(clock.span())
    );
    assert!(
        admitted <= envelope(elapsed + 2 * JITTER_NS),
        "{what}: {admitted} admitted in {elapsed} ns of simulated time"
    );
    // Not a lower bound on correctness, only a check that the run measured
    // something: a limiter that denied everything would pass the above.
    assert!(
        admitted >= envelope(elapsed) / 2,
        "{what}: only {admitted} admitted in {elapsed} ns"
    );
}

#[test]
fn a_bucket_on_a_jittering_clock_stays_in_the_envelope() {
    let clock = Jittered::new();
    let started = clock.time.now_nanos();
    let bucket = TokenBucket::with_clock(quota(), &clock);
    assert_enveloped("bucket", &clock, started, || {
        u64::from(bucket.try_acquire(1).is_ok())
    });
}

/// Half the admissions are given back through receipts, whose rule reads
/// the clock again: a give-back on a reading behind the admission's must
/// not return credit the bucket never had. Only kept tokens are counted,
/// which is at most what was spent.
#[test]
fn receipts_given_back_on_a_jittering_clock_stay_in_the_envelope() {
    let clock = Jittered::new();
    let started = clock.time.now_nanos();
    let bucket = TokenBucket::with_clock(quota(), &clock);
    let turn = AtomicU64::new(0);
    assert_enveloped("receipts", &clock, started, || {
        match Receipt::take(&bucket, 1) {
            Ok(receipt) if turn.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) => {
                receipt.undo();
                0
            }
            Ok(receipt) => {
                receipt.keep();
                1
            }
            Err(_) => 0,
        }
    });
}

#[cfg(feature = "keyed")]
#[test]
fn a_keyed_limiter_on_a_jittering_clock_keeps_every_key_in_the_envelope() {
    const KEYS: u64 = 3;
    let clock = Jittered::new();
    let started = clock.time.now_nanos();
    let limiter = KeyedLimiter::builder(quota()).clock(&clock).build::<u64>();
    let admitted: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
    let turn = AtomicU64::new(0);
    // Every key sees a third of the decisions, so each is checked against
    // the whole run's envelope, and all together against three of them.
    assert_enveloped("keyed", &clock, started, || {
        let key = turn.fetch_add(1, Ordering::Relaxed) % KEYS;
        let ok = limiter.try_acquire(&key, 1).is_ok();
        admitted[key as usize].fetch_add(u64::from(ok), Ordering::Relaxed);
        u64::from(ok) * u64::from(key == 0)
    });
    for (key, admitted) in admitted.iter().enumerate() {
        let admitted = admitted.load(Ordering::Relaxed);
        assert!(
            admitted <= envelope(clock.span()),
            "key {key}: {admitted} admitted over readings spanning {} ns",
            clock.span()
        );
    }
}

#[test]
fn a_striped_bucket_on_a_jittering_clock_stays_in_the_envelope() {
    let clock = Jittered::new();
    let started = clock.time.now_nanos();
    let bucket = StripedBucket::with_clock(quota(), &clock, THREADS, 4);
    assert_enveloped("striped", &clock, started, || {
        u64::from(bucket.try_acquire(1).is_ok())
    });
}

/// The real default clock, read by racing threads on whatever cores they
/// land: what the bucket admitted fits the envelope of the readings it was
/// given, however those readings were ordered across cores.
#[test]
fn the_default_clock_keeps_a_raced_bucket_in_the_envelope_of_its_readings() {
    /// The default clock, recording the extreme readings it handed out.
    struct Recorded {
        clock: DefaultClock,
        min: AtomicU64,
        max: AtomicU64,
    }
    impl Clock for Recorded {
        fn now_nanos(&self) -> u64 {
            let reading = self.clock.now_nanos();
            self.min.fetch_min(reading, Ordering::AcqRel);
            self.max.fetch_max(reading, Ordering::AcqRel);
            reading
        }
    }
    // Shown to race: a run counts only if two threads' decisions
    // interleaved (`common::Interleaving`).
    until_interleaved(1, |_| {
        let clock = Recorded {
            clock: DefaultClock::new(),
            min: AtomicU64::new(u64::MAX),
            max: AtomicU64::new(0),
        };
        let bucket = TokenBucket::with_clock(quota(), &clock);
        let order = Interleaving::default();
        let tallies = race(THREADS, |_| {
            let mut me = order.worker();
            let mut admitted = 0;
            for _ in 0..DECISIONS_PER_THREAD {
                admitted += u64::from(bucket.try_acquire(1).is_ok());
                me.step();
            }
            (admitted, me.interleaved())
        });
        let admitted: u64 = tallies.iter().map(|t| t.0).sum();
        let span = clock.max.load(Ordering::Acquire) - clock.min.load(Ordering::Acquire);
        assert!(
            admitted <= envelope(span),
            "{admitted} admitted over readings spanning {span} ns"
        );
        assert!(admitted >= BURST, "the full burst was not admitted");
        tallies.iter().any(|t| t.1)
    });
}
