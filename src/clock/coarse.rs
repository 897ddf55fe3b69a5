use std::io;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use super::{Clock, saturating_nanos};
use crate::sync::Ordering;
use crate::sync::unmodelled::{Arc, AtomicU64, Weak};

/// A clock read with a single atomic load: a background thread stores the
/// monotonic time every `resolution`.
///
/// Hand-written rather than `quanta`'s `Upkeep`/`recent()`, because that
/// keeps one process-global time with a single upkeep thread, while this one
/// lives and dies with the limiters that hold it.
///
/// Trade-offs: readings lag real time by up to one resolution plus the
/// updater's scheduling delay, so a bucket refills in steps of about one
/// resolution. A lagging reading only ever *denies* (it sees less credit,
/// never more), and the one writer stores increasing values, so readings are
/// monotonic on every core. The thread wakes once per resolution and exits
/// within one resolution of the last clone being dropped.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, CoarseClock};
///
/// let clock = CoarseClock::new(Duration::from_millis(1))?;
/// let a = clock.now_nanos();
/// assert!(clock.now_nanos() >= a);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct CoarseClock {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    nanos: CachePadded<AtomicU64>,
    epoch: Instant,
    resolution: Duration,
}

impl CoarseClock {
    /// The shortest update period accepted: below it the updater's wake-ups
    /// cost more than the readings they save (see [`docs/clocks.md`](crate::guide::clocks)).
    pub const MIN_RESOLUTION: Duration = Duration::from_micros(10);

    /// The longest update period accepted.
    pub const MAX_RESOLUTION: Duration = Duration::from_secs(1);

    /// Starts the updater thread.
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`] unless `resolution` lies in
    /// [`MIN_RESOLUTION`](Self::MIN_RESOLUTION)..=[`MAX_RESOLUTION`](Self::MAX_RESOLUTION)
    /// (a zero period would busy-loop a core; a very long one would freeze
    /// refill and keep the thread alive long after the last handle), and
    /// with the spawn error if the thread cannot be started.
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = tollgate::CoarseClock::new(Duration::from_micros(100))?;
    /// assert_eq!(clock.resolution(), Duration::from_micros(100));
    /// assert!(tollgate::CoarseClock::new(Duration::ZERO).is_err());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(resolution: Duration) -> io::Result<Self> {
        if !(Self::MIN_RESOLUTION..=Self::MAX_RESOLUTION).contains(&resolution) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "coarse clock resolution {resolution:?} is outside {:?}..={:?}",
                    Self::MIN_RESOLUTION,
                    Self::MAX_RESOLUTION
                ),
            ));
        }
        let shared = Arc::new(Shared {
            nanos: CachePadded::new(AtomicU64::new(0)),
            epoch: Instant::now(),
            resolution,
        });
        let weak = Arc::downgrade(&shared);
        thread::Builder::new()
            .name("tollgate-coarse-clock".into())
            .spawn(move || update(&weak))?;
        Ok(CoarseClock { shared })
    }

    /// How often the time is refreshed.
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = tollgate::CoarseClock::new(Duration::from_millis(2))?;
    /// assert_eq!(clock.resolution(), Duration::from_millis(2));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn resolution(&self) -> Duration {
        self.shared.resolution
    }
}

/// Runs until the last `CoarseClock` handle is gone.
fn update(shared: &Weak<Shared>) {
    while let Some(shared) = shared.upgrade() {
        let now = saturating_nanos(shared.epoch.elapsed());
        // Relaxed is enough: readers need no other memory than this word, and
        // coherence keeps one writer's increasing values increasing for all.
        shared.nanos.store(now, Ordering::Relaxed);
        let resolution = shared.resolution;
        drop(shared);
        thread::sleep(resolution);
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.shared.nanos.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The updater must keep publishing: a reader sees the time move. The
    /// bound on attempts only stops a broken updater from hanging the test.
    #[test]
    fn updater_advances_the_time() {
        let clock = CoarseClock::new(Duration::from_micros(200)).expect("spawn updater");
        let first = clock.now_nanos();
        let advanced = (0..10_000).any(|_| {
            thread::sleep(Duration::from_millis(1));
            clock.now_nanos() > first
        });
        assert!(advanced, "coarse clock stuck at {first} ns");
    }

    #[test]
    fn resolutions_outside_the_range_are_invalid_input() {
        let below = CoarseClock::MIN_RESOLUTION - Duration::from_nanos(1);
        let above = CoarseClock::MAX_RESOLUTION + Duration::from_nanos(1);
        for resolution in [Duration::ZERO, below, above, Duration::MAX] {
            let err = CoarseClock::new(resolution).expect_err("accepted");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{resolution:?}");
        }
        for resolution in [CoarseClock::MIN_RESOLUTION, CoarseClock::MAX_RESOLUTION] {
            assert!(CoarseClock::new(resolution).is_ok(), "{resolution:?}");
        }
    }

    /// The updater holds only a weak reference between updates, so dropping
    /// the last handle frees the shared state and lets the thread exit.
    #[test]
    fn dropping_the_last_handle_releases_the_state() {
        let clock = CoarseClock::new(Duration::from_micros(100)).expect("spawn updater");
        let weak = Arc::downgrade(&clock.shared);
        drop(clock);
        let released = (0..10_000).any(|_| {
            thread::sleep(Duration::from_millis(1));
            weak.upgrade().is_none()
        });
        assert!(released, "the updater keeps the clock's state alive");
    }
}
