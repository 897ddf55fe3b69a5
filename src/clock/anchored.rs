use super::Clock;
use crate::sync::{AtomicU64, Ordering};

/// Counter time between two comparisons with the trusted clock: the most a
/// counter whose rate is off by `e` can lead by is `e` times this (0.5 µs
/// at 500 ppm, far below any quota's tick), and a comparison (one OS clock
/// read, some 20 ns) every millisecond of readings costs nothing measurable.
pub(crate) const PERIOD_NANOS: u64 = 1_000_000;

/// A fast counter clock (`C`, the time-stamp counter) held to a trusted
/// clock (`O`, the OS monotonic clock) that users measure with: the
/// counter's rate is calibrated once per process and may be off by
/// hundreds of parts per million either way, which over a long run admits
/// beyond `B + r·t` by the OS clock (fast) or refuses what the quota allows
/// (slow). Every [`PERIOD_NANOS`] of readings, a reader that finds the
/// period over reads the trusted clock and answers with it, and one such
/// reader at a time moves the counter's offset so that the counter reads
/// the same.
///
/// The bound, whatever the counter's rate error `e` (fast or slow): every
/// reading is at most `e · PERIOD_NANOS` ahead of the trusted clock, and
/// over any interval the reading advances at most the trusted clock's
/// advance plus `2e · PERIOD_NANOS` (a step forward where a slow counter is
/// caught up). A fast counter is moved back at a comparison: the reading
/// may step back by its lead, which a limiter treats as it treats any
/// reading behind another (it only denies: [`docs/clocks.md`](crate::guide::clocks)).
///
/// Linearization: a reading loads the period's end (acquire) before the
/// offset, and a comparison stores the offset before the period's end
/// (release), so a reading that sees a new period sees its offset; one
/// that sees the old period with either offset is either within it (its
/// lead bounded as above) or past it (clamped).
#[derive(Debug)]
pub struct Anchored<C, O> {
    counter: C,
    trusted: O,
    /// Added to the counter's reading: an `i64` in two's complement.
    offset: AtomicU64,
    /// The reading at or past which a reader compares with the trusted
    /// clock.
    due: AtomicU64,
    /// 1 while a comparison reads the two clocks and stores its offset and
    /// period: one at a time, so that a comparison stalled between its
    /// reads and its stores never overwrites a later one's offset with its
    /// own older pair.
    storing: AtomicU64,
}

impl<C: Clock, O: Clock> Anchored<C, O> {
    /// `counter` held to `trusted`, both read from their epochs: the first
    /// reading compares them.
    pub fn new(counter: C, trusted: O) -> Self {
        Anchored {
            counter,
            trusted,
            offset: AtomicU64::new(0),
            due: AtomicU64::new(0),
            storing: AtomicU64::new(0),
        }
    }

    /// The counter's reading moved by the offset, at zero if the offset
    /// would take it below.
    #[inline]
    fn offset_reading(&self, offset: u64) -> u64 {
        let counter = i64::try_from(self.counter.now_nanos()).unwrap_or(i64::MAX);
        let reading = counter.saturating_add(offset as i64);
        u64::try_from(reading).unwrap_or(0)
    }

    /// Compares the counter with the trusted clock: the offset moved so
    /// that the counter reads what the trusted clock read, then the next
    /// period set; the reading past its period is answered with the trusted
    /// clock's (held back if the counter ran ahead, caught up if behind).
    #[cold]
    #[inline(never)]
    fn compare(&self) -> u64 {
        // One comparison stores at a time; the others past the period
        // answer with their own trusted reading.
        if self.storing.swap(1, Ordering::Acquire) != 0 {
            return self.trusted.now_nanos();
        }
        // Released however this ends, a panicking clock included.
        let _storing = Storing(&self.storing);
        // The trusted clock first, under the claim, so that no other
        // comparison stores between this one's reads and its stores: the
        // counter read after it can only be later, so the offset never
        // puts the counter ahead (a stall between the two reads leaves the
        // readings behind by the stall, until the next comparison).
        let trusted = self.trusted.now_nanos();
        let counter = i64::try_from(self.counter.now_nanos()).unwrap_or(i64::MAX);
        let trusted_signed = i64::try_from(trusted).unwrap_or(i64::MAX);
        let offset = trusted_signed.saturating_sub(counter);
        self.offset.store(offset as u64, Ordering::Relaxed);
        // From the pair's own trusted reading: a comparison that stalled
        // finds its period already over, and the next reader compares.
        self.due
            .store(trusted.saturating_add(PERIOD_NANOS), Ordering::Release);
        trusted
    }
}

/// The comparison's claim to store, given up when dropped.
struct Storing<'a>(&'a AtomicU64);

impl Drop for Storing<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

impl<C: Clock, O: Clock> Clock for Anchored<C, O> {
    #[inline]
    fn now_nanos(&self) -> u64 {
        let due = self.due.load(Ordering::Acquire);
        let reading = self.offset_reading(self.offset.load(Ordering::Relaxed));
        if reading < due {
            return reading;
        }
        self.compare()
    }
}

impl<C: Clock + Clone, O: Clock + Clone> Clone for Anchored<C, O> {
    /// The same clocks and offset; the copy compares on its next reading.
    fn clone(&self) -> Self {
        Anchored {
            counter: self.counter.clone(),
            trusted: self.trusted.clone(),
            offset: AtomicU64::new(self.offset.load(Ordering::Relaxed)),
            due: AtomicU64::new(0),
            storing: AtomicU64::new(0),
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64 as StdAtomic, Ordering as StdOrdering};

    use super::*;

    /// The trusted clock, moved by the test.
    #[derive(Clone, Default)]
    struct Trusted(Arc<StdAtomic>);

    impl Clock for Trusted {
        fn now_nanos(&self) -> u64 {
            self.0.load(StdOrdering::SeqCst)
        }
    }

    /// A counter running `ppm` parts per million fast (negative: slow)
    /// against the trusted clock, from `start` ahead or behind.
    #[derive(Clone)]
    struct Drifting {
        trusted: Trusted,
        ppm: i64,
        start: i64,
    }

    impl Clock for Drifting {
        fn now_nanos(&self) -> u64 {
            let t = i128::from(self.trusted.now_nanos());
            let drifted = t + t * i128::from(self.ppm) / 1_000_000 + i128::from(self.start);
            u64::try_from(drifted.max(0)).unwrap()
        }
    }

    /// Readings every `step` over `span` of trusted time, each checked
    /// against the bound: never more than `e · PERIOD` ahead of the trusted
    /// clock, and over every interval from the first reading no more than
    /// the trusted clock's advance plus `2e · PERIOD`. Slow counters are
    /// also never more than `e · PERIOD` behind.
    fn run(ppm: i64, start: i64, step: u64, span: u64) {
        let trusted = Trusted::default();
        let counter = Drifting {
            trusted: trusted.clone(),
            ppm,
            start,
        };
        let clock = Anchored::new(counter, trusted.clone());
        let lead = ppm.unsigned_abs() * PERIOD_NANOS / 1_000_000 + 1;
        let (first_reading, first_trusted) = (clock.now_nanos(), 0);
        assert!(first_reading <= first_trusted, "{ppm} ppm: {first_reading}");
        let mut t = 0;
        while t < span {
            t += step;
            trusted.0.store(t, StdOrdering::SeqCst);
            let reading = clock.now_nanos();
            assert!(reading <= t + lead, "{ppm} ppm at {t}: read {reading}");
            assert!(
                reading - first_reading <= t - first_trusted + 2 * lead,
                "{ppm} ppm over [0, {t}]: {reading}"
            );
            assert!(
                reading + lead >= t,
                "{ppm} ppm at {t}: read {reading}, far behind"
            );
        }
    }

    #[test]
    fn a_counter_drifting_500_ppm_either_way_stays_within_its_bound() {
        for ppm in [500, -500, 170, -236, 18, 0] {
            // Readings finer and coarser than the period, and idle gaps
            // far longer than it.
            run(ppm, 0, 10_000, 50_000_000);
            run(ppm, 0, 3_000_000, 3_000_000_000);
            run(ppm, 0, 60_000_000_000, 600_000_000_000);
        }
    }

    #[test]
    fn a_counter_that_starts_ahead_is_held_back_from_its_first_reading() {
        // A counter calibrated a millisecond ahead of the trusted clock's
        // epoch: its first reading is clamped, its offset moved back.
        run(500, 1_000_000, 10_000, 50_000_000);
        run(-500, 1_000_000, 10_000, 50_000_000);
    }

    #[test]
    fn a_clone_reads_the_same_time_and_compares_on_its_own() {
        let trusted = Trusted::default();
        let counter = Drifting {
            trusted: trusted.clone(),
            ppm: 400,
            start: 0,
        };
        let clock = Anchored::new(counter, trusted.clone());
        trusted.0.store(5_000_000_000, StdOrdering::SeqCst);
        let read = clock.now_nanos();
        let copy = clock.clone();
        assert_eq!(copy.now_nanos(), read);
        assert_eq!(read, 5_000_000_000);
    }
}
