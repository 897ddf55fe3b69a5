//! Window limits: "N per window", counted in one atomic word.
//!
//! Many contracts are written in windows rather than rates: "100 per
//! calendar minute" to match an upstream API, "600 in any rolling hour".
//! Two counters keep them, each in one `AtomicU64` with one
//! compare-and-swap per admission:
//!
//! - [`FixedWindow`]: the cost admitted in the current window, reset when
//!   the next begins. Exact for a contract of that form; a client may
//!   spend up to `2N` across a boundary.
//! - [`SlidingWindow`]: the current and the previous window's counts,
//!   the previous one weighted by the part of the rolling window it still
//!   covers. An approximation of an exact rolling count (a sliding log),
//!   with no boundary cliff and a stated bound.
//!
//! Both are [`WindowCounter`]s, told apart by their kind ([`Fixed`],
//! [`Sliding`]), and both are [`Limit`](crate::Limit)s: the same typed
//! errors as the token bucket, [`Counted`](crate::Counted), steps of a
//! hierarchy, and [`Receipt`](crate::Receipt)s, whose undo gives back only
//! within the window the cost was counted in. The rules, the approximation
//! bound, what a reservation can buy, the packing and what happens at the
//! end of the index's range are in
//! [`docs/semantics.md`](crate::guide::semantics) ("Windows").
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Limit, ManualClock, SlidingWindow, WindowQuota};
//!
//! let clock = ManualClock::new();
//! let limiter = SlidingWindow::with_clock(WindowQuota::per_minute(60)?, &clock)?;
//! limiter.try_acquire(60)?;
//! clock.advance(Duration::from_secs(90));
//! // Half of the last window still counts: 30 of 60.
//! assert_eq!(limiter.available(), 30);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod counter;
mod frame;
#[cfg(feature = "keyed")]
mod keyed;
#[cfg(feature = "keyed")]
mod keys;
mod quota;
mod state;

pub use counter::WindowCounter;
#[cfg(feature = "keyed")]
pub use keyed::{KeyWindow, KeyedFixedWindow, KeyedSlidingWindow, KeyedWindow};
// The loom models run a key's decisions and the sweep watermark against a
// stand-in table.
#[cfg(all(tollgate_loom, feature = "keyed"))]
#[doc(hidden)]
pub use keys::WindowKeys;
pub use quota::WindowQuota;
#[cfg(all(tollgate_loom, feature = "keyed"))]
#[doc(hidden)]
pub use state::WindowState;

use crate::clock::DefaultClock;

/// A fixed-window counter: at most `N` per window, the count reset at each
/// window's start.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{FixedWindow, Limit, ManualClock, WindowQuota};
///
/// let clock = ManualClock::new();
/// let limiter = FixedWindow::with_clock(WindowQuota::per_second(2)?, &clock)?;
/// limiter.try_acquire(2)?;
/// assert!(limiter.try_acquire(1).is_err());
/// clock.advance(Duration::from_secs(1));
/// limiter.try_acquire(2)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type FixedWindow<C = DefaultClock> = WindowCounter<Fixed, C>;

/// A sliding-window counter: the current window's count plus the previous
/// window's, weighted by the part of the rolling window it still covers,
/// at most `N`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limit, ManualClock, SlidingWindow, WindowQuota};
///
/// let clock = ManualClock::new();
/// let limiter = SlidingWindow::with_clock(WindowQuota::per_second(10)?, &clock)?;
/// limiter.try_acquire(10)?;
/// clock.advance(Duration::from_millis(1200));
/// // 10 · (1 - 0.2) = 8 still count.
/// assert_eq!(limiter.available(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type SlidingWindow<C = DefaultClock> = WindowCounter<Sliding, C>;

/// The kind of a [`WindowCounter`]: [`Fixed`] or [`Sliding`]. Sealed.
///
/// ```
/// use tollgate::window::{WindowCounter, WindowKind};
/// use tollgate::{FixedWindow, Limit, ManualClock, SlidingWindow, WindowQuota};
///
/// fn spend_one<K: WindowKind>(limiter: &WindowCounter<K, ManualClock>) -> bool {
///     limiter.try_acquire(1).is_ok()
/// }
/// let quota = WindowQuota::per_second(1)?;
/// assert!(spend_one(&FixedWindow::with_clock(quota, ManualClock::new())?));
/// assert!(spend_one(&SlidingWindow::with_clock(quota, ManualClock::new())?));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait WindowKind: sealed::Sealed + Send + Sync + 'static {
    /// Whether the previous window's count is kept and weighed.
    #[doc(hidden)]
    const SLIDING: bool;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Fixed {}
    impl Sealed for super::Sliding {}
}

/// The fixed-window kind: see [`FixedWindow`].
///
/// ```
/// use tollgate::window::{Fixed, WindowCounter};
/// use tollgate::{FixedWindow, WindowQuota};
///
/// let limiter: WindowCounter<Fixed> = FixedWindow::new(WindowQuota::per_second(1)?)?;
/// # let _ = limiter;
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub enum Fixed {}

/// The sliding-window kind: see [`SlidingWindow`].
///
/// ```
/// use tollgate::window::{Sliding, WindowCounter};
/// use tollgate::{SlidingWindow, WindowQuota};
///
/// let limiter: WindowCounter<Sliding> = SlidingWindow::new(WindowQuota::per_second(1)?)?;
/// # let _ = limiter;
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub enum Sliding {}

impl WindowKind for Fixed {
    const SLIDING: bool = false;
}

impl WindowKind for Sliding {
    const SLIDING: bool = true;
}
