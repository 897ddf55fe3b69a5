//! What the choice reads of the machine, and this machine's answers: the
//! kernel's clocksource, the counter's CPUID bits, the CPUs of the
//! process's affinity, pinning, and the counter itself through quanta.

use std::io;

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
