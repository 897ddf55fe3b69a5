//! What a limit tells its clients about itself, apart from what it decides:
//! the HTTP layer advertises a limit through [`Advertised`] (its
//! `RateLimit-Policy` and the reset of its `RateLimit` field), so the
//! core's [`Limit`] holds only what admission needs.

use std::time::Duration;

use crate::limit::Limit;
use crate::quota::Quota;
use crate::window::WindowQuota;

/// The shape of a limit as clients are told it: the quota `q`, the most it
/// admits at once, and the window `w` in whole seconds, rounded up, at
/// least 1, over which that much comes back.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Quota, Shape, WindowQuota};
///
/// // A burst of 10 refilled at 3 a second is full again after 3.33 s: w = 4.
/// let bucket = Shape::from(&Quota::new(10, 3, Duration::from_secs(1))?);
/// assert_eq!((bucket.quota(), bucket.window_seconds()), (10, 4));
/// let window = Shape::from(&WindowQuota::per_minute(600)?);
/// assert_eq!((window.quota(), window.window_seconds()), (600, 60));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    pub(crate) quota: u64,
    pub(crate) window_seconds: u64,
}

impl Shape {
    /// `q`: the most the limit admits at once (a bucket's capacity, a
    /// window's limit).
    ///
    /// ```
    /// use tollgate::{Quota, Shape};
    ///
    /// assert_eq!(Shape::from(&Quota::per_second(5)?).quota(), 5);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// `w`: the seconds over which `q` comes back, rounded up, at least 1.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Quota, Shape};
    ///
    /// let slow = Quota::new(1, 1, Duration::from_millis(1500))?;
    /// assert_eq!(Shape::from(&slow).window_seconds(), 2);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn window_seconds(&self) -> u64 {
        self.window_seconds
    }
}

/// A bucket's: `q` its capacity, `w` the time it takes to refill from empty
/// to full.
impl From<&Quota> for Shape {
    fn from(quota: &Quota) -> Shape {
        Shape {
            quota: quota.capacity(),
            window_seconds: quota.refill_seconds(),
        }
    }
}

/// A window counter's: `q` its limit, `w` its window.
impl From<&WindowQuota> for Shape {
    fn from(quota: &WindowQuota) -> Shape {
        Shape {
            quota: quota.limit(),
            window_seconds: quota.window_seconds(),
        }
    }
}

/// A [`Limit`] that can describe itself to clients: every limit of the
/// crate, and one key of every keyed limiter. An HTTP adapter advertises a
/// limit's policy and reset from it (the crate's tower layer does); a
/// server that writes its own responses reads it the same way.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Advertised, Limit, ManualClock, Quota, TokenBucket};
///
/// let bucket = TokenBucket::with_clock(Quota::per_second(4)?, ManualClock::new());
/// assert_eq!(bucket.shape().quota(), 4);
/// bucket.try_acquire(4)?;
/// // Empty, nothing spent since: the next token comes back in 250 ms.
/// assert_eq!(bucket.idle_reset(), Duration::from_millis(250));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Advertised: Limit {
    /// What this limit advertises now (a quota changed at run time shows
    /// here at once): see [`Shape`].
    fn shape(&self) -> Shape;

    /// While nothing is spent, the wait until the limit's state next moves
    /// on its own: a bucket's next token of refill, a window counter's end
    /// of the current window. Beside the wait for one unit more than is
    /// available, it is the reset an HTTP `RateLimit` field reports.
    fn idle_reset(&self) -> Duration;
}

/// Implements [`Advertised`] for a pointer to a limit, as `forward_limit!`
/// implements [`Limit`].
macro_rules! forward_advertised {
    ($($pointer:ty where $($bound:path)?);*) => {$(
        impl<L: Advertised + ?Sized $(+ $bound)?> Advertised for $pointer {
            fn shape(&self) -> Shape {
                (**self).shape()
            }
            fn idle_reset(&self) -> Duration {
                (**self).idle_reset()
            }
        }
    )*};
}
forward_advertised!(&L where; Box<L> where; crate::sync::unmodelled::Arc<L> where Send);
