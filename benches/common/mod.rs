//! What the benchmark files share: the clocks of each class and the macro
//! that runs a group over every class.

// Each bench target compiles this module and may use only part of it.
#![allow(dead_code, unused_macros, unused_imports)]

use std::time::Duration;

use criterion::Criterion;
use governor::clock::QuantaUpkeepClock;
use tollgate::CoarseClock;

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
/// equivalent. A macro because each class instantiates the generic function
/// with different clock types.
macro_rules! for_each_clock_class {
    ($group:expr, $class:ident) => {{
        $class(
            $group,
            "monotonic",
            tollgate::MonotonicClock::new(),
            governor::clock::MonotonicClock,
        );
        #[cfg(feature = "tsc")]
        $class(
            $group,
            "tsc",
            tollgate::TscClock::new(),
            governor::clock::QuantaClock::default(),
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
