//! A clock on tokio's time, so that tests on a paused runtime drive the
//! limiters' clocks with the same time their timers wait out.

use crate::clock::{Clock, saturating_nanos};

/// Nanoseconds since the clock was made, on tokio's time
/// (`tokio::time::Instant`, feature `tokio`): the real monotonic clock,
/// unless the runtime's clock is paused, when it moves as tokio's paused
/// time moves (`tokio::time::advance`, or auto-advance past a timer). What
/// a test of rate-limited async code wants: a limit's waits and the timers
/// that wait them out on one clock. Read it on the runtime's threads: a
/// thread outside a paused runtime reads real time, behind the paused
/// clock, and a reading behind another thread's is a clock gone back (see
/// [`docs/semantics.md`](crate::guide::semantics), "Giving back"). A
/// reading costs `Instant::now()` and a thread-local check of tokio's; for
/// production, prefer the default clock.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limit, Quota, TokenBucket, TokioClock};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
/// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, TokioClock::new());
/// bucket.try_acquire(1)?;
/// assert!(bucket.try_acquire(1).is_err());
/// tokio::time::sleep(Duration::from_secs(1)).await; // instant: time is paused
/// assert!(bucket.try_acquire(1).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    epoch: tokio::time::Instant,
}

impl TokioClock {
    /// A clock whose epoch is now, on tokio's time.
    ///
    /// ```
    /// use tollgate::{Clock, TokioClock};
    ///
    /// assert!(TokioClock::new().now_nanos() < 1_000_000_000);
    /// ```
    pub fn new() -> TokioClock {
        TokioClock {
            epoch: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    fn now_nanos(&self) -> u64 {
        saturating_nanos(tokio::time::Instant::now().saturating_duration_since(self.epoch))
    }
}
