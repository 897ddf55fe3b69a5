//! Window receipts: what one admission counted, and the one way to give it
//! back.

use std::fmt;
use std::ops::Deref;

use super::{WindowCounter, WindowKind};
use crate::{AcquireError, Clock};

/// A window counter a [`WindowReceipt`] can take from: a
/// [`FixedWindow`](super::FixedWindow), a [`SlidingWindow`](super::SlidingWindow),
/// or any pointer to one (`&`, `Box`, `Arc`).
///
/// Sealed: its operations are internal, so a receipt's cost can only go
/// back to the counter that admitted it.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::{FixedWindow, WindowLimit, WindowQuota, WindowReceipt};
///
/// fn charge<L: WindowLimit>(limit: L) -> Result<WindowReceipt<L>, tollgate::AcquireError> {
///     WindowReceipt::take(limit, 1)
/// }
/// let shared = Arc::new(FixedWindow::new(WindowQuota::per_second(10)?)?);
/// charge(Arc::clone(&shared))?.keep();
/// assert_eq!(shared.available(), 9);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait WindowLimit: sealed::Sealed {}

mod sealed {
    use crate::AcquireError;

    /// The operations of a [`WindowLimit`](super::WindowLimit), kept out of
    /// reach.
    pub trait Sealed {
        /// Admits `cost`, returning the index of the window it counted in.
        fn take(&self, cost: u64) -> Result<u64, AcquireError>;
        /// Gives back `cost` counted in window `index`.
        fn give_back(&self, index: u64, cost: u64);
    }
}

impl<K: WindowKind, C: Clock> sealed::Sealed for WindowCounter<K, C> {
    fn take(&self, cost: u64) -> Result<u64, AcquireError> {
        WindowCounter::take(self, cost)
    }

    fn give_back(&self, index: u64, cost: u64) {
        WindowCounter::give_back(self, index, cost);
    }
}

impl<K: WindowKind, C: Clock> WindowLimit for WindowCounter<K, C> {}

impl<P: Deref<Target: WindowLimit>> sealed::Sealed for P {
    fn take(&self, cost: u64) -> Result<u64, AcquireError> {
        (**self).take(cost)
    }

    fn give_back(&self, index: u64, cost: u64) {
        (**self).give_back(index, cost);
    }
}

impl<P: Deref<Target: WindowLimit>> WindowLimit for P {}

/// Units one admission counted in a window, and the only way to give them
/// back, which never mints: [`undo`](Self::undo) takes them off the window's
/// count while the window they were counted in lasts (exactly: as if they
/// had never been admitted), and gives back nothing once it has ended, by
/// the limiter's clock or because a later decision has moved the counter
/// on. Never more than was taken, and never into a later window
/// ([`docs/semantics.md`](crate::guide::semantics), "Windows").
///
/// A receipt undoes once (`undo` consumes it) and only on the counter that
/// admitted it (it holds that counter). Dropping it keeps the units
/// counted, as [`keep`](Self::keep) says explicitly.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{FixedWindow, ManualClock, WindowQuota, WindowReceipt};
///
/// let clock = ManualClock::new();
/// let limiter = FixedWindow::with_clock(WindowQuota::per_second(2)?, &clock)?;
/// let receipt = WindowReceipt::take(&limiter, 2)?;
/// receipt.undo(); // the work was not done, in the same window: all back
/// assert_eq!(limiter.available(), 2);
///
/// let late = WindowReceipt::take(&limiter, 2)?;
/// clock.advance(Duration::from_secs(1));
/// late.undo(); // its window ended: nothing goes into the new one
/// limiter.try_acquire(2)?;
/// assert_eq!(limiter.available(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "dropping a receipt keeps its units counted: call `keep` to say so, or `undo`"]
pub struct WindowReceipt<L: WindowLimit> {
    limit: L,
    window: u64,
    cost: u64,
}

impl<L: WindowLimit> WindowReceipt<L> {
    /// Counts `cost` in `limit` now, or refuses without counting anything
    /// (the same outcomes as `try_acquire`).
    ///
    /// ```
    /// use tollgate::{AcquireError, SlidingWindow, WindowQuota, WindowReceipt};
    ///
    /// let limiter = SlidingWindow::new(WindowQuota::per_minute(3)?)?;
    /// let receipt = WindowReceipt::take(&limiter, 3)?;
    /// assert!(matches!(
    ///     WindowReceipt::take(&limiter, 1),
    ///     Err(AcquireError::Insufficient { .. })
    /// ));
    /// receipt.keep();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take(limit: L, cost: u64) -> Result<Self, AcquireError> {
        let window = limit.take(cost)?;
        Ok(WindowReceipt {
            limit,
            window,
            cost,
        })
    }

    /// The units this receipt counted.
    ///
    /// ```
    /// use tollgate::{FixedWindow, WindowQuota, WindowReceipt};
    ///
    /// let limiter = FixedWindow::new(WindowQuota::per_second(10)?)?;
    /// let receipt = WindowReceipt::take(&limiter, 4)?;
    /// assert_eq!(receipt.tokens(), 4);
    /// receipt.keep();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tokens(&self) -> u64 {
        self.cost
    }

    /// The counter the units were counted in.
    ///
    /// ```
    /// use tollgate::{FixedWindow, WindowQuota, WindowReceipt};
    ///
    /// let limiter = FixedWindow::new(WindowQuota::per_second(10)?)?;
    /// let receipt = WindowReceipt::take(&limiter, 1)?;
    /// assert_eq!(receipt.limit().quota().limit(), 10);
    /// receipt.keep();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limit(&self) -> &L {
        &self.limit
    }

    /// Gives the units back if their window has not ended (exactly), and
    /// nothing otherwise.
    ///
    /// ```
    /// use tollgate::{SlidingWindow, WindowQuota, WindowReceipt};
    ///
    /// let limiter = SlidingWindow::new(WindowQuota::per_minute(5)?)?;
    /// WindowReceipt::take(&limiter, 3)?.undo();
    /// assert_eq!(limiter.available(), 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn undo(self) {
        self.limit.give_back(self.window, self.cost);
    }

    /// Keeps the units counted: what dropping the receipt does, said
    /// explicitly.
    ///
    /// ```
    /// use tollgate::{FixedWindow, WindowQuota, WindowReceipt};
    ///
    /// let limiter = FixedWindow::new(WindowQuota::per_minute(1)?)?;
    /// WindowReceipt::take(&limiter, 1)?.keep();
    /// assert_eq!(limiter.available(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn keep(self) {}
}

impl<L: WindowLimit> fmt::Debug for WindowReceipt<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowReceipt")
            .field("tokens", &self.cost)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}
