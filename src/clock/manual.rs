use std::time::Duration;

use super::{Clock, saturating_nanos};
use crate::sync::{Arc, AtomicU64, Ordering};

/// A clock moved only by hand, for tests and simulations. Clones share one
/// time, so a test can keep a handle while a bucket owns another.
///
/// It may be set backwards, to exercise how buckets treat a clock that does
/// (they never mint credit from it).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let handle = clock.clone();
/// handle.advance(Duration::from_millis(1500));
/// assert_eq!(clock.now_nanos(), 1_500_000_000);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at zero.
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock};
    /// assert_eq!(ManualClock::new().now_nanos(), 0);
    /// ```
    pub fn new() -> Self {
        ManualClock::default()
    }

    /// Moves the clock forward, saturating at `u64::MAX` nanoseconds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::MAX);
    /// assert_eq!(clock.now_nanos(), u64::MAX);
    /// ```
    pub fn advance(&self, by: Duration) {
        let by = saturating_nanos(by);
        // fetch_update cannot fail here: the closure always returns Some.
        let _ = self
            .nanos
            .fetch_update(Ordering::Release, Ordering::Relaxed, |t| {
                Some(t.saturating_add(by))
            });
    }

    /// Sets the time since the epoch, forwards or backwards.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// clock.set(Duration::from_secs(10));
    /// clock.set(Duration::from_secs(3));
    /// assert_eq!(clock.now_nanos(), 3_000_000_000);
    /// ```
    pub fn set(&self, since_epoch: Duration) {
        // A swap, not a store, for the same loom reason as `TokenBucket::reset`.
        self.nanos
            .swap(saturating_nanos(since_epoch), Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::Acquire)
    }
}
