//! Which clock the default reads: the time-stamp counter only where it is
//! known to agree across every CPU the process may run on, the OS monotonic
//! clock everywhere else ([`docs/clocks.md`](crate::guide::clocks), "The
//! default"). Decided once per process, against a [`Machine`] that the
//! tests replace with counters of known offsets.
mod machine;
mod skew;

use std::fmt;
use std::io;
use std::time::Duration;

use machine::Machine;
pub(crate) use machine::ThisMachine;
pub(crate) use skew::BUDGET;
use skew::{Budget, MAX_SKEW, skew};

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

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::sync::Ordering;
    use crate::sync::unmodelled::AtomicU64;

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
