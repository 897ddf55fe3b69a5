//! Where a bucket's time comes from.
//!
//! A [`Clock`] reports nanoseconds since its own epoch. Buckets only compare
//! readings of the same clock, so the epoch is arbitrary. Clocks need not be
//! strictly monotonic: a reading that is stale (taken before another thread's
//! update) or that goes backwards can only make a bucket see *less* credit,
//! never more (see [`docs/semantics.md`](crate::guide::semantics)).
//!
//! | clock | cost of a reading (dev machine) | resolution | notes |
//! |---|---|---|---|
//! | [`DefaultClock`] | its source's, and a branch | its source's | [`TscClock`] where every CPU's counter was checked to agree, [`MonotonicClock`] elsewhere |
//! | [`TscClock`] | ~11 ns | ~10 ns | CPU time-stamp counter through `quanta`; opt-in where the default does not trust it (see its caveats) |
//! | [`MonotonicClock`] | ~31 ns | 1 ns | `Instant::now()` |
//! | [`CoarseClock`] | ~0.7 ns (one load) | its update period | a background thread |
//! | [`ManualClock`] | one load | 1 ns | tests and simulations |
//! | `TokioClock` | `Instant::now()` and a check of tokio's | 1 ns | tokio's time, paused in tests (feature `tokio`) |
//!
//! [`docs/clocks.md`](crate::guide::clocks) has the measurements, including cross-core behaviour and
//! the updater thread's cost.

mod anchored;
mod choice;
mod coarse;
mod default;
mod manual;
mod monotonic;
#[cfg(feature = "tokio")]
mod tokio_time;
mod tsc;

#[cfg(tollgate_loom)]
pub use anchored::Anchored;
pub use choice::ClockChoice;
pub use coarse::CoarseClock;
pub use default::DefaultClock;
pub use manual::ManualClock;
pub use monotonic::MonotonicClock;
#[cfg(feature = "tokio")]
pub use tokio_time::TokioClock;
pub use tsc::TscClock;

/// A source of time for buckets, in nanoseconds since the clock's epoch.
///
/// ```
/// use tollgate::Clock;
///
/// /// A clock that never moves: every bucket on it only spends its credit.
/// struct Frozen;
/// impl Clock for Frozen {
///     fn now_nanos(&self) -> u64 { 42 }
/// }
/// assert_eq!(Frozen.now_nanos(), 42);
/// ```
pub trait Clock: Send + Sync {
    /// Nanoseconds elapsed since this clock's epoch, saturating at `u64::MAX`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::from_micros(3));
    /// assert_eq!(clock.now_nanos(), 3_000);
    /// ```
    fn now_nanos(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
}

impl<C: Clock + ?Sized> Clock for crate::sync::unmodelled::Arc<C> {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
}

/// Nanoseconds in a duration, saturating where `u64` ends (584 years).
#[inline]
pub(crate) fn saturating_nanos(d: std::time::Duration) -> u64 {
    // Plain u64 arithmetic: `as_nanos()` goes through u128 on every reading.
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}
