//! What a window counter allows: `N` per window of length `W`, and where its
//! windows start.

use std::time::{Duration, SystemTime};

use crate::error::QuotaError;

/// A window limit: at most `limit` per window of length `window`, with the
/// windows' boundaries aligned to the limiter's clock or to the wall clock.
///
/// Construction checks what every window counter needs (a limit of at
/// least one, a window of at least one nanosecond that fits in 64 bits of
/// nanoseconds); whether the limit fits one atomic word beside its window
/// index is checked when a limiter is built, since a sliding window packs
/// two counts where a fixed one packs one
/// ([`docs/semantics.md`](crate::guide::semantics), "Windows").
///
/// ```
/// use std::time::Duration;
/// use tollgate::{QuotaError, WindowQuota};
///
/// let quota = WindowQuota::new(100, Duration::from_secs(60))?;
/// assert_eq!((quota.limit(), quota.window()), (100, Duration::from_secs(60)));
/// assert_eq!(WindowQuota::new(0, Duration::from_secs(60)), Err(QuotaError::ZeroCapacity));
/// assert_eq!(WindowQuota::new(100, Duration::ZERO), Err(QuotaError::ZeroPeriod));
/// # Ok::<(), QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WindowQuota {
    limit: u64,
    window: u64,
    alignment: Alignment,
}

/// Where a limiter's windows start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Alignment {
    /// At the clock readings congruent to this many nanoseconds modulo the
    /// window (0: the clock's epoch).
    Clock(u64),
    /// At the multiples of the window in Unix time, as the wall clock says
    /// when the limiter is built.
    Calendar,
}

impl WindowQuota {
    /// At most `limit` per `window`, windows starting at the limiter's
    /// clock's epoch and every `window` after it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{QuotaError, WindowQuota};
    ///
    /// assert!(WindowQuota::new(10, Duration::from_secs(1)).is_ok());
    /// assert_eq!(
    ///     WindowQuota::new(10, Duration::MAX),
    ///     Err(QuotaError::PeriodTooLong),
    /// );
    /// ```
    pub fn new(limit: u64, window: Duration) -> Result<Self, QuotaError> {
        if limit == 0 {
            return Err(QuotaError::ZeroCapacity);
        }
        let window = u64::try_from(window.as_nanos()).map_err(|_| QuotaError::PeriodTooLong)?;
        if window == 0 {
            return Err(QuotaError::ZeroPeriod);
        }
        Ok(WindowQuota {
            limit,
            window,
            alignment: Alignment::Clock(0),
        })
    }

    /// At most `limit` per second.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::WindowQuota;
    ///
    /// assert_eq!(WindowQuota::per_second(5)?.window(), Duration::from_secs(1));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_second(limit: u64) -> Result<Self, QuotaError> {
        WindowQuota::new(limit, Duration::from_secs(1))
    }

    /// At most `limit` per minute.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::WindowQuota;
    ///
    /// assert_eq!(WindowQuota::per_minute(5)?.window(), Duration::from_secs(60));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_minute(limit: u64) -> Result<Self, QuotaError> {
        WindowQuota::new(limit, Duration::from_secs(60))
    }

    /// The same limit with windows starting at the clock readings
    /// `offset`, `offset + window`, … (and `offset - window`, …): an offset
    /// of a whole window or more wraps around.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{AcquireError, FixedWindow, Limit, ManualClock, WindowQuota};
    ///
    /// // Windows of 10 s starting at 3 s, 13 s, 23 s… on the clock.
    /// let quota = WindowQuota::new(1, Duration::from_secs(10))?.with_offset(Duration::from_secs(3));
    /// let clock = ManualClock::new();
    /// clock.set(Duration::from_secs(5));
    /// let limiter = FixedWindow::with_clock(quota, clock)?;
    /// limiter.try_acquire(1)?;
    /// assert_eq!(
    ///     limiter.try_acquire(1),
    ///     Err(AcquireError::Insufficient { retry_after: Duration::from_secs(8) }),
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_offset(self, offset: Duration) -> Self {
        // The remainder of a `u128` by a `u64` fits a `u64`.
        let offset = (offset.as_nanos() % u128::from(self.window)) as u64;
        WindowQuota {
            alignment: Alignment::Clock(offset),
            ..self
        }
    }

    /// The same limit with calendar windows: boundaries where Unix time
    /// (UTC, without leap seconds) is a multiple of the window, so that
    /// "N per calendar minute" resets at the top of each wall-clock minute.
    ///
    /// The limiter reads the wall clock once, beside its own clock, when it
    /// is built, and from then on counts windows on its own clock: a step of
    /// the wall clock afterwards (a manual change, an NTP step) does not
    /// move them, and they drift from the wall clock only by the rate
    /// difference of the two clocks ([`docs/semantics.md`](crate::guide::semantics),
    /// "Windows").
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, Limit, WindowQuota};
    ///
    /// let per_calendar_minute = WindowQuota::per_minute(100)?.calendar();
    /// let limiter = FixedWindow::new(per_calendar_minute)?;
    /// limiter.try_acquire(1)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn calendar(self) -> Self {
        WindowQuota {
            alignment: Alignment::Calendar,
            ..self
        }
    }

    /// The most a window admits.
    ///
    /// ```
    /// use tollgate::WindowQuota;
    /// assert_eq!(WindowQuota::per_second(7)?.limit(), 7);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The length of a window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::WindowQuota;
    /// assert_eq!(WindowQuota::per_minute(7)?.window(), Duration::from_secs(60));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    pub(crate) fn window_nanos(&self) -> u64 {
        self.window
    }

    /// The window in whole seconds, rounded up, at least 1: what the HTTP
    /// fields' `w` can say.
    pub(crate) fn window_seconds(&self) -> u64 {
        self.window.div_ceil(1_000_000_000).max(1)
    }

    /// How far into its window the clock reading `reading` lies, in
    /// nanoseconds, reading the wall clock for calendar windows.
    pub(crate) fn position_of(&self, reading: u64) -> u64 {
        match self.alignment {
            Alignment::Clock(offset) => {
                position(i128::from(reading) - i128::from(offset), self.window)
            }
            Alignment::Calendar => position(unix_nanos(SystemTime::now()), self.window),
        }
    }
}

/// `since_boundary` modulo `window`, for a signed distance from a boundary.
fn position(since_boundary: i128, window: u64) -> u64 {
    // In 0..window, so it fits a u64.
    since_boundary.rem_euclid(i128::from(window)) as u64
}

/// Nanoseconds since the Unix epoch, negative before it.
fn unix_nanos(now: SystemTime) -> i128 {
    match now.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => after.as_nanos() as i128,
        Err(before) => -(before.duration().as_nanos() as i128),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_time_maps_to_its_place_in_the_calendar_window() {
        let minute = 60_000_000_000;
        let at = |unix: Duration| position(unix_nanos(SystemTime::UNIX_EPOCH + unix), minute);
        assert_eq!(at(Duration::from_secs(120)), 0);
        assert_eq!(at(Duration::from_millis(125_500)), 5_500_000_000);
        // Before 1970 the windows keep their phase: 10 s before the epoch is
        // 50 s into a minute.
        let before = unix_nanos(SystemTime::UNIX_EPOCH - Duration::from_secs(10));
        assert_eq!(position(before, minute), 50_000_000_000);
    }

    #[test]
    fn an_offset_past_the_clock_reading_places_it_in_the_window_before() {
        // Windows of 10 start at 3, 13, …: reading 1 is 8 into [-7, 3).
        let quota = WindowQuota::new(1, Duration::from_nanos(10))
            .unwrap()
            .with_offset(Duration::from_nanos(23));
        assert_eq!(quota.position_of(1), 8);
        assert_eq!(quota.position_of(13), 0);
    }
}
