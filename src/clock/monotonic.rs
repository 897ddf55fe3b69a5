use std::time::Instant;

use super::{Clock, saturating_nanos};

/// The operating system's monotonic clock (`std::time::Instant`), measured
/// from the moment this clock was created: exact to the nanosecond, never
/// behind another core's reading, at about three times the cost of the
/// time-stamp counter's ([`TscClock`](crate::TscClock)). The
/// [`DefaultClock`](crate::DefaultClock) reads it wherever the counters of
/// the CPUs were not checked to agree.
///
/// ```
/// use tollgate::{Clock, MonotonicClock};
///
/// let clock = MonotonicClock::new();
/// let a = clock.now_nanos();
/// assert!(clock.now_nanos() >= a);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    epoch: Instant,
}

impl MonotonicClock {
    /// A clock whose epoch is now.
    ///
    /// ```
    /// let clock = tollgate::MonotonicClock::new();
    /// # let _ = clock;
    /// ```
    pub fn new() -> Self {
        MonotonicClock {
            epoch: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        saturating_nanos(self.epoch.elapsed())
    }
}
