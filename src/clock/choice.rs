//! Which clock the default reads: the time-stamp counter only where it is
//! known to agree across every CPU the process may run on, the OS monotonic
//! clock everywhere else ([`docs/clocks.md`](crate::guide::clocks), "The
//! default"). Decided once per process, against a [`Machine`] that the
//! tests replace with counters of known offsets.

use std::fmt;
use std::io;
use std::thread;
use std::time::{Duration, Instant};

use crate::sync::Ordering;
use crate::sync::unmodelled::AtomicU64;

/// The largest disagreement between two CPUs' counters the default clock
/// accepts, as bounded by the check at calibration. Far below any emission
/// interval a limiter is built for, and far above what the check can
/// resolve (twice a cache line's trip between two cores, a few hundred
/// nanoseconds on a virtual machine), so that a machine whose counters
/// agree passes even when the check runs on a busy machine.
pub(crate) const MAX_SKEW: Duration = Duration::from_micros(10);

/// What the check may spend: round trips per CPU, and time in all.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    pub(crate) rounds: u32,
    pub(crate) time: Duration,
}

/// The default clock's budget: 256 round trips against each CPU, the
/// whole check 2.7 to 4.8 ms on the development machine's two CPUs; the
/// time bound keeps a machine too busy to answer from delaying the first
/// limiter by more than quanta's own calibration may (200 ms).
pub(crate) const BUDGET: Budget = Budget {
    rounds: 256,
    time: Duration::from_millis(100),
};

/// What the decision reads of the machine.
pub(crate) trait Machine: Sync {
    /// The kernel's current clocksource (Linux's
    /// `/sys/devices/system/clocksource/clocksource0/current_clocksource`);
    /// [`io::ErrorKind::Unsupported`] where the platform has none.
    fn clocksource(&self) -> io::Result<String>;
    /// Whether the counter runs at one rate through every power state and
    /// quanta reads it (quanta's own test: invariant TSC and `rdtscp`).
    fn invariant_counter(&self) -> bool;
    /// The CPUs the process may run on, if they can be listed.
    fn cpus(&self) -> Option<Vec<usize>>;
    /// Pins the calling thread to `cpu`; false if refused.
    fn pin(&self, cpu: usize) -> bool;
    /// The counter, read on the calling thread's CPU, in its own ticks.
    fn counter(&self) -> u64;
    /// `ticks` of the counter in nanoseconds.
    fn nanos(&self, ticks: u64) -> u64;
}

/// Which clock [`DefaultClock`](crate::DefaultClock) reads in this
/// process, and why: decided once, by the first default clock.
///
/// ```
/// let choice = tollgate::DefaultClock::choice();
/// // On a machine whose counters were checked to agree, the bound it was
/// // checked to; on any other, the OS monotonic clock and why.
/// if choice.reads_counter() {
///     assert!(choice.skew_bound().is_some());
/// }
/// println!("default clock: {choice}");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClockChoice {
    reason: Reason,
}

/// Why the counter was or was not trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reason {
    /// Every CPU's counter agrees with every other's within `bound_ns`.
    Agreed {
        cpus: usize,
        bound_ns: u64,
    },
    /// The process may run on one CPU only: no reading comes from another.
    OneCpu,
    /// The platform has no kernel clocksource to consult.
    NoClocksource,
    ClocksourceUnreadable(io::ErrorKind),
    /// The kernel keeps time with another clocksource: it does not trust
    /// the counter (it demotes one it found unsynchronised), or never did.
    Clocksource(String),
    NotInvariant,
    CpusUnknown,
    PinRefused {
        cpu: usize,
    },
    /// A thread for the check could not be started.
    NoThread(io::ErrorKind),
    /// A CPU's counter is apart from the first CPU's by at least this much.
    Skewed {
        cpu: usize,
        at_least_ns: u64,
    },
    /// The check could bound the counters' disagreement only this loosely.
    Unbounded {
        bound_ns: u64,
    },
    /// The check did not finish within its budget.
    OutOfTime,
}

impl ClockChoice {
    /// Whether the default clock reads the time-stamp counter
    /// ([`TscClock`](crate::TscClock)); otherwise it reads the OS
    /// monotonic clock ([`MonotonicClock`](crate::MonotonicClock)).
    ///
    /// ```
    /// let counter = tollgate::DefaultClock::choice().reads_counter();
    /// # let _ = counter;
    /// ```
    pub fn reads_counter(&self) -> bool {
        matches!(self.reason, Reason::Agreed { .. } | Reason::OneCpu)
    }

    /// The most two CPUs' counters were found to disagree by, when the
    /// default reads the counter (zero when the process runs on one CPU);
    /// `None` when it reads the OS clock, which never disagrees.
    ///
    /// ```
    /// use tollgate::DefaultClock;
    ///
    /// let choice = DefaultClock::choice();
    /// assert_eq!(choice.skew_bound().is_some(), choice.reads_counter());
    /// ```
    pub fn skew_bound(&self) -> Option<Duration> {
        match self.reason {
            Reason::Agreed { bound_ns, .. } => Some(Duration::from_nanos(bound_ns)),
            Reason::OneCpu => Some(Duration::ZERO),
            _ => None,
        }
    }

    fn os(reason: Reason) -> Self {
        ClockChoice { reason }
    }
}

impl fmt::Display for ClockChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = |n: u64| Duration::from_nanos(n);
        match &self.reason {
            Reason::Agreed { cpus, bound_ns } => write!(
                f,
                "time-stamp counter: {cpus} CPUs agree within {:?}",
                ns(*bound_ns)
            ),
            Reason::OneCpu => write!(f, "time-stamp counter: the process runs on one CPU"),
            Reason::NoClocksource => write!(
                f,
                "OS monotonic clock: no kernel clocksource to vouch for the counter here"
            ),
            Reason::ClocksourceUnreadable(kind) => write!(
                f,
                "OS monotonic clock: the kernel's clocksource could not be read ({kind})"
            ),
            Reason::Clocksource(source) => {
                write!(
                    f,
                    "OS monotonic clock: the kernel keeps time with `{source}`, not `tsc`"
                )
            }
            Reason::NotInvariant => {
                write!(f, "OS monotonic clock: the counter's rate is not invariant")
            }
            Reason::CpusUnknown => write!(
                f,
                "OS monotonic clock: the CPUs the process may run on could not be listed"
            ),
            Reason::PinRefused { cpu } => {
                write!(
                    f,
                    "OS monotonic clock: the check could not run on CPU {cpu}"
                )
            }
            Reason::NoThread(kind) => {
                write!(
                    f,
                    "OS monotonic clock: the check's thread did not start ({kind})"
                )
            }
            Reason::Skewed { cpu, at_least_ns } => write!(
                f,
                "OS monotonic clock: CPU {cpu}'s counter is at least {:?} off the first CPU's",
                ns(*at_least_ns)
            ),
            Reason::Unbounded { bound_ns } => write!(
                f,
                "OS monotonic clock: the counters could be bounded only to {:?}, above {MAX_SKEW:?}",
                ns(*bound_ns)
            ),
            Reason::OutOfTime => write!(
                f,
                "OS monotonic clock: the counters' check did not finish in {:?}",
                BUDGET.time
            ),
        }
    }
}

/// The decision: the counter only if the kernel keeps time with it (it
/// demotes a counter it finds unsynchronised), its rate is invariant, and
/// every CPU the process may run on reads it within [`MAX_SKEW`] of every
/// other ([`skew`]).
pub(crate) fn decide(machine: &impl Machine, budget: Budget) -> ClockChoice {
    let os = ClockChoice::os;
    match machine.clocksource() {
        Ok(source) if source.trim() == "tsc" => {}
        Ok(source) => return os(Reason::Clocksource(source.trim().to_owned())),
        Err(error) if error.kind() == io::ErrorKind::Unsupported => {
            return os(Reason::NoClocksource);
        }
        Err(error) => return os(Reason::ClocksourceUnreadable(error.kind())),
    }
    if !machine.invariant_counter() {
        return os(Reason::NotInvariant);
    }
    let Some(cpus) = machine.cpus().filter(|cpus| !cpus.is_empty()) else {
        return os(Reason::CpusUnknown);
    };
    if cpus.len() == 1 {
        return os(Reason::OneCpu);
    }
    match skew(machine, &cpus, budget) {
        Ok(bound_ns) => os(Reason::Agreed {
            cpus: cpus.len(),
            bound_ns,
        }),
        Err(reason) => os(reason),
    }
}

/// Bounds how far apart the counters of `cpus` are, in nanoseconds.
///
/// Against the first CPU, each other one plays ping-pong: a thread pinned
/// to the first reads `t1` and hands the turn over, one pinned to the
/// other reads `t2` and hands it back, the first reads `t3`. With the
/// other's counter ahead by `d`, `t1 < t2 - d < t3` in the first's time, so
/// `t2 - t3 < d < t2 - t1`: every round narrows an interval around `d`,
/// and the tightest is kept. A round's interval is as wide as its round
/// trip, so the bound is honest whatever the scheduler did, and tight once
/// one round ran undisturbed. The disagreement of any two CPUs is within
/// the spread of all the intervals, the first CPU's `[0, 0]` included.
fn skew(machine: &impl Machine, cpus: &[usize], budget: Budget) -> Result<u64, Reason> {
    let deadline = Instant::now() + budget.time;
    let max = u64::try_from(MAX_SKEW.as_nanos()).unwrap_or(u64::MAX);
    let nanos =
        |ticks: i128| machine.nanos(u64::try_from(ticks.unsigned_abs()).unwrap_or(u64::MAX));
    let (&first, others) = cpus.split_first().ok_or(Reason::CpusUnknown)?;
    let (mut lowest, mut highest) = (0i128, 0i128);
    for &cpu in others {
        let (low, high) = offset(machine, first, cpu, budget.rounds, deadline)?;
        // An interval that excludes zero by more than the bound proves the
        // skew; one that straddles it bounds it.
        let apart = if low > 0 { low } else { -high.min(0) };
        if nanos(apart) > max {
            return Err(Reason::Skewed {
                cpu,
                at_least_ns: nanos(apart),
            });
        }
        lowest = lowest.min(low.min(high));
        highest = highest.max(high.max(low));
    }
    let bound_ns = nanos(highest - lowest);
    if bound_ns > max {
        return Err(Reason::Unbounded { bound_ns });
    }
    Ok(bound_ns)
}

/// The ping-pong of [`skew`] between `first` and `other`: the tightest
/// `(max(t2 - t3), min(t2 - t1))` over `rounds` rounds, in ticks.
///
/// Hand-written: no maintained crate measures cross-CPU counter offsets.
/// Both sides run on threads of their own, so that the caller's thread is
/// never pinned.
fn offset(
    machine: &impl Machine,
    first: usize,
    other: usize,
    rounds: u32,
    deadline: Instant,
) -> Result<(i128, i128), Reason> {
    // The turn: `2k + 1` when round `k`'s `t1` is read and `t2` is due,
    // `2k + 2` when `t2` is in `reading`; `STOPPED` once either side gives
    // up (a refused pin, the deadline), which ends the other's wait.
    const STOPPED: u64 = u64::MAX;
    let turn = AtomicU64::new(0);
    let reading = AtomicU64::new(0);
    // Waits for the turn to reach `value`; false if the check stopped.
    let wait_for = |value: u64| {
        let mut spins = 0u32;
        loop {
            match turn.load(Ordering::Acquire) {
                STOPPED => return false,
                now if now >= value => return true,
                _ => {}
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && Instant::now() > deadline {
                turn.store(STOPPED, Ordering::Release);
                return false;
            }
            std::hint::spin_loop();
        }
    };
    // Passes the turn on from `from`; false if the other side stopped the
    // check meanwhile (a store would hide that from it).
    let hand_over = |from: u64| {
        turn.compare_exchange(from, from + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    };
    thread::scope(|scope| {
        let spawn = |name: &str| thread::Builder::new().name(format!("tollgate-clock-{name}"));
        let answering = spawn("peer")
            .spawn_scoped(scope, || {
                if !machine.pin(other) {
                    turn.store(STOPPED, Ordering::Release);
                    return false;
                }
                for round in 0..u64::from(rounds) {
                    if !wait_for(2 * round + 1) {
                        return true;
                    }
                    reading.store(machine.counter(), Ordering::Relaxed);
                    if !hand_over(2 * round + 1) {
                        return true;
                    }
                }
                true
            })
            .map_err(|error| Reason::NoThread(error.kind()))?;
        let asking = spawn("probe").spawn_scoped(scope, || {
            if !machine.pin(first) {
                turn.store(STOPPED, Ordering::Release);
                return Err(Reason::PinRefused { cpu: first });
            }
            let (mut low, mut high) = (i128::MIN, i128::MAX);
            for round in 0..u64::from(rounds) {
                if Instant::now() > deadline {
                    turn.store(STOPPED, Ordering::Release);
                    return Err(Reason::OutOfTime);
                }
                let t1 = machine.counter();
                if !hand_over(2 * round) || !wait_for(2 * round + 2) {
                    return Err(Reason::OutOfTime);
                }
                let t3 = machine.counter();
                let t2 = i128::from(reading.load(Ordering::Relaxed));
                low = low.max(t2 - i128::from(t3));
                high = high.min(t2 - i128::from(t1));
            }
            Ok((low, high))
        });
        let asked = match asking {
            Ok(asking) => asking.join().unwrap_or(Err(Reason::OutOfTime)),
            Err(error) => {
                turn.store(STOPPED, Ordering::Release);
                Err(Reason::NoThread(error.kind()))
            }
        };
        let pinned = answering.join().unwrap_or(false);
        match asked {
            // The peer's refusal stopped the asking side too.
            Err(_) if !pinned => Err(Reason::PinRefused { cpu: other }),
            asked => asked,
        }
    })
}

/// The machine this process runs on.
#[derive(Debug, Default)]
pub(crate) struct ThisMachine {
    /// The counter, calibrated once the cheaper tests have passed.
    counter: std::sync::OnceLock<quanta::Clock>,
}

impl ThisMachine {
    fn calibrated(&self) -> &quanta::Clock {
        self.counter.get_or_init(quanta::Clock::new)
    }
}

impl Machine for ThisMachine {
    fn clocksource(&self) -> io::Result<String> {
        if cfg!(target_os = "linux") {
            std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
        } else {
            Err(io::ErrorKind::Unsupported.into())
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn invariant_counter(&self) -> bool {
        let cpuid = raw_cpuid::CpuId::new();
        let invariant = cpuid
            .get_advanced_power_mgmt_info()
            .is_some_and(|power| power.has_invariant_tsc());
        let rdtscp = cpuid
            .get_extended_processor_and_feature_identifiers()
            .is_some_and(|features| features.has_rdtscp());
        invariant && rdtscp
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn invariant_counter(&self) -> bool {
        false
    }

    #[cfg(target_os = "linux")]
    fn cpus(&self) -> Option<Vec<usize>> {
        core_affinity::get_core_ids().map(|ids| ids.into_iter().map(|id| id.id).collect())
    }

    #[cfg(not(target_os = "linux"))]
    fn cpus(&self) -> Option<Vec<usize>> {
        None
    }

    #[cfg(target_os = "linux")]
    fn pin(&self, cpu: usize) -> bool {
        core_affinity::set_for_current(core_affinity::CoreId { id: cpu })
    }

    #[cfg(not(target_os = "linux"))]
    fn pin(&self, _: usize) -> bool {
        false
    }

    fn counter(&self) -> u64 {
        self.calibrated().raw()
    }

    fn nanos(&self, ticks: u64) -> u64 {
        self.calibrated().delta_as_nanos(0, ticks)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    const SECOND: i64 = 1_000_000_000;

    thread_local! {
        /// The CPU the fake pinned this thread to.
        static PINNED: Cell<Option<usize>> = const { Cell::new(None) };
    }

    /// Counters of known offsets: one shared time that moves `STEP` ns at
    /// every reading (so the ping-pong's readings are ordered as the
    /// handovers order them, whatever the scheduler does), seen by each CPU
    /// with its own offset.
    struct Fake {
        clocksource: fn() -> io::Result<String>,
        invariant: bool,
        offsets: Vec<i64>,
        refuses: Option<usize>,
        time: AtomicU64,
    }

    const STEP: u64 = 100;

    fn tsc() -> io::Result<String> {
        Ok("tsc\n".into())
    }

    impl Fake {
        fn with_offsets(offsets: &[i64]) -> Self {
            Fake {
                clocksource: tsc,
                invariant: true,
                offsets: offsets.to_vec(),
                refuses: None,
                time: AtomicU64::new(1 << 50),
            }
        }
    }

    impl Machine for Fake {
        fn clocksource(&self) -> io::Result<String> {
            (self.clocksource)()
        }
        fn invariant_counter(&self) -> bool {
            self.invariant
        }
        fn cpus(&self) -> Option<Vec<usize>> {
            Some((0..self.offsets.len()).collect())
        }
        fn pin(&self, cpu: usize) -> bool {
            PINNED.with(|pinned| pinned.set(Some(cpu)));
            self.refuses != Some(cpu)
        }
        fn counter(&self) -> u64 {
            let cpu = PINNED
                .with(Cell::get)
                .expect("read on a thread never pinned");
            let time = self.time.fetch_add(STEP, Ordering::AcqRel);
            time.wrapping_add_signed(self.offsets[cpu])
        }
        fn nanos(&self, ticks: u64) -> u64 {
            ticks
        }
    }

    fn generous() -> Budget {
        Budget {
            rounds: 64,
            time: Duration::from_secs(120),
        }
    }

    fn decided(machine: &Fake) -> ClockChoice {
        decide(machine, generous())
    }

    fn agreed(cpus: usize, bound_ns: u64) -> ClockChoice {
        ClockChoice::os(Reason::Agreed { cpus, bound_ns })
    }

    /// Agreeing counters: each round brackets the offset by one step either
    /// side, so the bound is two steps, and the counter is trusted.
    #[test]
    fn counters_that_agree_are_trusted_within_the_probes_resolution() {
        assert_eq!(decided(&Fake::with_offsets(&[0, 0])), agreed(2, 2 * STEP));
        let choice = decided(&Fake::with_offsets(&[0, 0, 0, 0]));
        assert!(choice.reads_counter());
        assert_eq!(choice.skew_bound(), Some(Duration::from_nanos(2 * STEP)));
    }

    /// A few nanoseconds apart: invisible to the check, inside its bound.
    #[test]
    fn counters_a_few_nanoseconds_apart_are_trusted() {
        assert_eq!(decided(&Fake::with_offsets(&[0, 5])), agreed(2, 2 * STEP));
        assert_eq!(
            decided(&Fake::with_offsets(&[0, -7, 3])),
            agreed(3, 2 * STEP + 10)
        );
    }

    /// 1.6 s ahead or behind, on any CPU: the skew of the laptops and
    /// servers of quanta #111 and governor #299. The OS clock, and the
    /// skew proven.
    #[test]
    fn a_counter_seconds_apart_sends_the_default_to_the_os_clock() {
        let skew = 1_600_000_000;
        for offsets in [[0, skew, 0], [0, 0, -skew], [skew, 0, 0]] {
            let choice = decided(&Fake::with_offsets(&offsets));
            assert!(!choice.reads_counter(), "{offsets:?}: {choice}");
            assert_eq!(choice.skew_bound(), None);
            let Reason::Skewed { at_least_ns, .. } = choice.reason else {
                panic!("{offsets:?}: {choice:?}");
            };
            assert!(at_least_ns >= 1_600_000_000 - 2 * STEP, "{at_least_ns}");
        }
    }

    /// Two CPUs each within the bound of the first but twice it apart from
    /// each other: the bound is over every pair, not only the first's.
    #[test]
    fn counters_apart_by_more_than_the_bound_in_any_pair_are_not_trusted() {
        let near = i64::try_from(MAX_SKEW.as_nanos()).unwrap() * 3 / 4;
        let choice = decided(&Fake::with_offsets(&[0, near, -near]));
        assert!(
            matches!(choice.reason, Reason::Unbounded { bound_ns } if bound_ns >= 2 * near as u64),
            "{choice:?}"
        );
        assert!(!choice.reads_counter());
    }

    #[test]
    fn a_clocksource_other_than_tsc_sends_the_default_to_the_os_clock() {
        let machine = Fake {
            clocksource: || Ok("kvm-clock\n".into()),
            ..Fake::with_offsets(&[0, 0])
        };
        assert_eq!(
            decided(&machine),
            ClockChoice::os(Reason::Clocksource("kvm-clock".into()))
        );
    }

    #[test]
    fn an_unreadable_or_missing_clocksource_sends_the_default_to_the_os_clock() {
        let unreadable = Fake {
            clocksource: || Err(io::ErrorKind::PermissionDenied.into()),
            ..Fake::with_offsets(&[0, 0])
        };
        assert_eq!(
            decided(&unreadable),
            ClockChoice::os(Reason::ClocksourceUnreadable(
                io::ErrorKind::PermissionDenied
            ))
        );
        let missing = Fake {
            clocksource: || Err(io::ErrorKind::Unsupported.into()),
            ..Fake::with_offsets(&[0, 0])
        };
        assert_eq!(decided(&missing), ClockChoice::os(Reason::NoClocksource));
    }

    #[test]
    fn a_counter_whose_rate_varies_sends_the_default_to_the_os_clock() {
        let machine = Fake {
            invariant: false,
            ..Fake::with_offsets(&[0, 0])
        };
        assert_eq!(decided(&machine), ClockChoice::os(Reason::NotInvariant));
    }

    /// One CPU: no reading can come from another, whatever its offset.
    #[test]
    fn a_process_on_one_cpu_reads_the_counter() {
        let choice = decided(&Fake::with_offsets(&[SECOND]));
        assert_eq!(choice, ClockChoice::os(Reason::OneCpu));
        assert_eq!(choice.skew_bound(), Some(Duration::ZERO));
        let none = decided(&Fake::with_offsets(&[]));
        assert_eq!(none, ClockChoice::os(Reason::CpusUnknown));
    }

    /// A CPU the check cannot run on is a CPU it cannot vouch for, the
    /// first or any other.
    #[test]
    fn a_cpu_the_check_cannot_pin_sends_the_default_to_the_os_clock() {
        for cpu in [0, 2] {
            let machine = Fake {
                refuses: Some(cpu),
                ..Fake::with_offsets(&[0, 0, 0])
            };
            assert_eq!(
                decided(&machine),
                ClockChoice::os(Reason::PinRefused { cpu }),
                "CPU {cpu}"
            );
        }
    }

    /// A check that cannot finish in its budget trusts nothing.
    #[test]
    fn a_check_out_of_time_sends_the_default_to_the_os_clock() {
        let budget = Budget {
            rounds: 64,
            time: Duration::ZERO,
        };
        let choice = decide(&Fake::with_offsets(&[0, 0]), budget);
        assert_eq!(choice, ClockChoice::os(Reason::OutOfTime));
    }

    /// The real check on this machine: whatever it decides must follow
    /// from what the machine says of itself. Where the kernel keeps time
    /// with an invariant counter (the development machine: 2 vCPUs under
    /// KVM, clocksource `tsc`), the counters must be found to agree within
    /// the bound, given the time to finish; elsewhere the OS clock, for the
    /// reason read.
    #[test]
    fn the_real_check_follows_from_what_the_machine_says() {
        let machine = ThisMachine::default();
        let budget = Budget {
            rounds: 256,
            time: Duration::from_secs(120),
        };
        let choice = decide(&machine, budget);
        let kernel_trusts = machine
            .clocksource()
            .is_ok_and(|source| source.trim() == "tsc");
        let cpus = machine.cpus().unwrap_or_default().len();
        if kernel_trusts && machine.invariant_counter() && cpus > 1 {
            assert!(
                matches!(choice.reason, Reason::Agreed { cpus: n, .. } if n == cpus),
                "{choice}"
            );
            let bound = choice.skew_bound().expect("a bound");
            assert!(bound <= MAX_SKEW && bound > Duration::ZERO, "{choice}");
        } else {
            assert_eq!(
                choice.reads_counter(),
                kernel_trusts && cpus == 1,
                "{choice}"
            );
        }
        println!("{choice}");
    }
}
