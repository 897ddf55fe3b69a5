use super::Clock;

/// A clock read from the CPU's time-stamp counter through `quanta`, which
/// calibrates the counter against the OS clock and falls back to the OS clock
/// where the counter is not invariant.
///
/// Trade-offs (measured in `docs/clocks.md`): about 40 % of the cost of
/// `Instant::now()` on the development machine. The counters of different
/// cores disagree by up to tens of nanoseconds there; a reading that appears
/// to go backwards only makes a bucket see less credit, never more.
/// Calibration error against the OS clock is a rate error of parts per
/// million, far inside any quota's precision.
///
/// ```
/// use tollgate::{Clock, TscClock};
///
/// let clock = TscClock::new();
/// let a = clock.now_nanos();
/// assert!(clock.now_nanos() >= a);
/// ```
#[derive(Clone, Debug)]
pub struct TscClock {
    clock: quanta::Clock,
    /// The raw counter at creation.
    epoch: u64,
}

impl TscClock {
    /// A calibrated counter clock whose epoch is now.
    ///
    /// ```
    /// let clock = tollgate::TscClock::new();
    /// # let _ = clock;
    /// ```
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let epoch = clock.raw();
        TscClock { clock, epoch }
    }
}

impl Default for TscClock {
    fn default() -> Self {
        TscClock::new()
    }
}

impl Clock for TscClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // Raw counter and one scaling multiply, with no `Duration` round
        // trip. A reading below the epoch (counters of other cores behind
        // this one) scales to 0: early, so it can only deny.
        self.clock.delta_as_nanos(self.epoch, self.clock.raw())
    }
}
