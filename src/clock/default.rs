use std::sync::OnceLock;

use super::anchored::Anchored;
use super::choice::{self, ClockChoice, ThisMachine};
use super::{Clock, MonotonicClock, TscClock};

/// The clock of every limiter built without one ([`TokenBucket::new`](crate::TokenBucket::new),
/// [`KeyedLimiter::new`](crate::KeyedLimiter::new),
/// [`StripedBucket::new`](crate::StripedBucket::new), the keyed builder,
/// the window counters, [`Pacer::new`](crate::Pacer::new),
/// [`LocalStore::new`](crate::shared::LocalStore::new)).
///
/// The time-stamp counter ([`TscClock`], what governor's default reads, at
/// about a third of the cost of `Instant::now()` here) only where it is
/// known to agree across every CPU the process may run on; the OS
/// monotonic clock ([`MonotonicClock`]) everywhere else. On a machine whose
/// cores' counters disagree by Δ (Ryzen laptops, some multi-socket servers
/// and virtual machines), a counter read after a thread moves to a core
/// behind would refuse requests the quota allows, and one read on a core
/// ahead would find `r·Δ` of refill already spent on the other.
///
/// The counter is trusted on Linux on x86-64 when the kernel keeps time
/// with it (clocksource `tsc`: the kernel demotes a counter it finds
/// unsynchronised), it is invariant, and a check that reads it on every CPU
/// of the process's affinity, one pinned thread at a time, bounds any two
/// CPUs' disagreement within 10 µs. The decision is made once per process,
/// by the first default clock, which also pays quanta's calibration (up to
/// 200 ms) and the check (up to 100 ms); later clocks copy it.
/// [`choice`](Self::choice) says which clock it is and why, and
/// [`docs/clocks.md`](crate::guide::clocks), "The default", which machines
/// get which and what the bound means for both halves of the promise.
///
/// The counter's rate is calibrated once per process, and may be off by
/// hundreds of parts per million either way; the default holds it to the
/// OS monotonic clock, the one users measure with: every millisecond of
/// readings, one reading compares the two and moves the counter's offset,
/// so that no reading is more than `e · 1 ms` ahead of the OS clock (0.5 µs
/// for a rate `e` off by 500 ppm), and over any interval it advances at
/// most the OS clock's advance plus twice that. A limiter on the default
/// clock never admits beyond `B + r·t` by the OS clock by more than
/// `r · 1 µs` (a token only for a rate above a million a second), and
/// refuses nothing the quota allows but what the same microsecond holds
/// back ([`docs/clocks.md`](crate::guide::clocks), "Held to the OS clock").
///
/// A reading costs one well-predicted branch on top of the clock it reads,
/// and on the counter two loads and an add.
///
/// ```
/// use tollgate::{DefaultClock, Limit, Quota, TokenBucket};
///
/// let bucket: TokenBucket<DefaultClock> = TokenBucket::new(Quota::per_second(10)?);
/// assert!(bucket.try_acquire(1).is_ok());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Debug)]
pub struct DefaultClock {
    source: ChosenClock,
}

/// The clock the process's [`ClockChoice`] picked: the counter held to the
/// OS clock (its calibrated rate may be off by hundreds of parts per
/// million: `Anchored` keeps it within half a microsecond of the OS
/// clock), or the OS clock itself.
#[derive(Clone, Debug)]
enum ChosenClock {
    Counter(Anchored<TscClock, MonotonicClock>),
    Os(MonotonicClock),
}

static CHOICE: OnceLock<ClockChoice> = OnceLock::new();

impl DefaultClock {
    /// A clock whose epoch is now, reading the source this process chose
    /// (deciding it, if this is the first).
    ///
    /// ```
    /// use tollgate::{Clock, DefaultClock};
    ///
    /// let clock = DefaultClock::new();
    /// let a = clock.now_nanos();
    /// assert!(clock.now_nanos() >= a);
    /// ```
    pub fn new() -> Self {
        let source = if Self::choice().reads_counter() {
            ChosenClock::Counter(Anchored::new(TscClock::new(), MonotonicClock::new()))
        } else {
            ChosenClock::Os(MonotonicClock::new())
        };
        DefaultClock { source }
    }

    /// Which clock the default reads in this process, and why; decided by
    /// the first call (of this or of [`new`](Self::new)).
    ///
    /// ```
    /// let choice = tollgate::DefaultClock::choice();
    /// assert_eq!(tollgate::DefaultClock::new().reads_counter(), choice.reads_counter());
    /// ```
    pub fn choice() -> &'static ClockChoice {
        CHOICE.get_or_init(|| choice::decide(&ThisMachine::default(), choice::BUDGET))
    }

    /// Whether this clock reads the time-stamp counter.
    ///
    /// ```
    /// let clock = tollgate::DefaultClock::new();
    /// assert_eq!(clock.reads_counter(), tollgate::DefaultClock::choice().reads_counter());
    /// ```
    pub fn reads_counter(&self) -> bool {
        matches!(self.source, ChosenClock::Counter(_))
    }
}

impl Default for DefaultClock {
    fn default() -> Self {
        DefaultClock::new()
    }
}

impl Clock for DefaultClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        match &self.source {
            ChosenClock::Counter(counter) => counter.now_nanos(),
            ChosenClock::Os(os) => os.now_nanos(),
        }
    }
}
