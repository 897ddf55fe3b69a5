//! A key's measured demand on this node, and the rule that switches it
//! between leased (hot) and per-request (cold).

use std::time::Duration;

/// A key's smoothed demand: tokens asked for per second on this node,
/// admitted or not.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Demand(f64);

/// What the rule says a key should be after a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Switch {
    /// Give it a lease pool.
    ToHot,
    /// Give its pool back and decide it per request.
    ToCold,
    /// Stay as it is.
    Stay,
}

impl Demand {
    /// Adds one sample of `asked` tokens over `over`: half old, half new, so
    /// that a sustained change crosses a threshold within a few samples and
    /// a single burst decays within a few.
    pub(crate) fn sample(self, asked: u64, over: Duration) -> Demand {
        let rate = asked as f64 / over.as_secs_f64().max(1e-9);
        Demand(0.5 * self.0 + 0.5 * rate)
    }

    /// The rule, with hysteresis: a cold key goes hot at `hot_at` tokens a
    /// second or more, a hot key goes cold below `cold_below` (itself below
    /// `hot_at`), and a key in between stays as it is.
    pub(crate) fn switch(self, hot: bool, hot_at: u32, cold_below: u32) -> Switch {
        if !hot && self.0 >= f64::from(hot_at) {
            Switch::ToHot
        } else if hot && self.0 < f64::from(cold_below) {
            Switch::ToCold
        } else {
            Switch::Stay
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(100);

    #[test]
    fn sustained_demand_crosses_and_a_burst_decays() {
        let mut demand = Demand::default();
        // 6 tokens a tick is 60/s: hot at 50/s on the third sample.
        let mut samples = 0;
        while demand.switch(false, 50, 10) != Switch::ToHot {
            demand = demand.sample(6, TICK);
            samples += 1;
        }
        assert_eq!(samples, 3);
        // In between the thresholds a hot key stays hot.
        assert_eq!(Demand(30.0).switch(true, 50, 10), Switch::Stay);
        assert_eq!(Demand(30.0).switch(false, 50, 10), Switch::Stay);
        // Silence: below 10/s after three quiet samples.
        let mut quiet = 0;
        while demand.switch(true, 50, 10) != Switch::ToCold {
            demand = demand.sample(0, TICK);
            quiet += 1;
        }
        assert_eq!(quiet, 3);
    }

    #[test]
    fn a_zero_interval_counts_as_a_burst_not_a_division_by_zero() {
        let demand = Demand::default().sample(1, Duration::ZERO);
        assert!(demand.0.is_finite() && demand.0 > 0.0);
    }
}
