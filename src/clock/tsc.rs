use super::Clock;

/// A clock read from the CPU's time-stamp counter through `quanta`, which
/// calibrates the counter against the OS clock and falls back to the OS clock
/// where the counter is not invariant. The [`DefaultClock`](crate::DefaultClock)
/// reads it where every CPU's counter was checked to agree; choose it
/// yourself only where you know they do.
///
/// Trade-offs (measured in [`docs/clocks.md`](crate::guide::clocks)): about 40 % of the cost of
/// `Instant::now()` on the development machine. Neither quanta nor this
/// clock checks that the cores' counters agree. Where they are apart by Δ
/// (unsynchronised laptops, some multi-socket servers and virtual machines),
/// a reading on a core behind sees Δ less refill: requests the quota allows
/// are refused, and a limiter created on a core ahead counts the others'
/// readings as its creation until the gap closes. A reading on a core ahead
/// finds `r·Δ` of refill another core already spent: the real-time envelope
/// widens by `r·2Δ`. Readings behind another core's never mint credit in
/// clock time, and a reading below the epoch counts as the epoch rather than
/// wrapping. Its calibrated rate may be off the OS clock's by hundreds of
/// parts per million, either way, which scales the envelope by that
/// fraction; the [`DefaultClock`](crate::DefaultClock) holds the counter to
/// the OS clock, and this clock alone does not. The first clock of a
/// process calibrates the counter (up to 200 ms, once); later ones copy that.
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
        TscClock::from_quanta(quanta::Clock::new())
    }

    /// Reads `clock` from its current reading on: the tests drive a mocked
    /// counter through it.
    fn from_quanta(clock: quanta::Clock) -> Self {
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
        // trip. A reading at or below the epoch (the counter of another core
        // behind this one's) scales to 0 (`delta_as_nanos` clamps rather
        // than wrapping): early, so it can only deny.
        self.clock.delta_as_nanos(self.epoch, self.clock.raw())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A counter that steps back below the epoch must read as the epoch: a
    /// wrapped difference would be a time centuries ahead, a full bucket
    /// for the caller and a state no later reading could ever catch up with.
    #[test]
    fn a_counter_behind_the_epoch_reads_as_the_epoch() {
        let (counter, mock) = quanta::Clock::mock();
        mock.increment(Duration::from_secs(10));
        let clock = TscClock::from_quanta(counter);
        mock.increment(Duration::from_nanos(250));
        assert_eq!(clock.now_nanos(), 250);
        mock.decrement(Duration::from_nanos(251));
        assert_eq!(clock.now_nanos(), 0);
        mock.decrement(Duration::from_secs(5));
        assert_eq!(clock.now_nanos(), 0);
        mock.increment(Duration::from_secs(5) + Duration::from_nanos(1 + 40));
        assert_eq!(clock.now_nanos(), 40);
    }
}
