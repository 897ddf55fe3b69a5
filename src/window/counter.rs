//! A window counter: one cache-padded word, its frame and its clock.

use std::time::Duration;

use crossbeam_utils::CachePadded;

use super::frame::Frame;
use super::state::WindowState;
use super::{WindowKind, WindowQuota};
use crate::advertised::{Advertised, Shape};
use crate::clock::{Clock, DefaultClock};
use crate::error::{AcquireError, QuotaError};
use crate::limit::{Identity, Limit, Taken, sealed};

/// A window limit in one cache-padded `AtomicU64`: a [`FixedWindow`](super::FixedWindow)
/// or a [`SlidingWindow`](super::SlidingWindow), by its kind `K`.
///
/// Every decision reads the clock once, then runs a compare-and-swap loop
/// on the word; the first decision of a window rolls the word forward in
/// its own compare-and-swap, so a refusal never writes and an admission
/// writes once. The rules, the bounds and the packing are in
/// [`docs/semantics.md`](crate::guide::semantics) ("Windows").
///
/// Its decisions are the methods of [`Limit`]: a window counter can be
/// [`Counted`](crate::Counted), a step of a hierarchy, and issue
/// [`Receipt`](crate::Receipt)s, whose undo gives back only within the
/// window the cost was counted in.
///
/// Linearization points:
/// - an admission ([`try_acquire`](Limit::try_acquire),
///   [`reserve`](Limit::reserve), a receipt's take) at its successful
///   compare-and-swap, which also rolls the window;
/// - a refusal, [`available`](Limit::available) and
///   [`retry_after`](Limit::retry_after) at the load (or failed
///   compare-and-swap) whose word they decided on;
/// - a [`Receipt`](crate::Receipt)'s undo at its successful
///   compare-and-swap, or at the load that (with its clock reading) showed
///   the window had ended.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{FixedWindow, Limit, ManualClock, SlidingWindow, WindowQuota};
///
/// let clock = ManualClock::new();
/// let quota = WindowQuota::per_second(2)?;
/// let fixed = FixedWindow::with_clock(quota, &clock)?;
/// let sliding = SlidingWindow::with_clock(quota, &clock)?;
/// fixed.try_acquire(2)?;
/// sliding.try_acquire(2)?;
/// clock.advance(Duration::from_millis(1500));
/// // A new window: the fixed counter is empty, the sliding one still
/// // counts half of the last window's 2.
/// assert_eq!((fixed.available(), sliding.available()), (2, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Receipts, counting and reservations, as for any limit:
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Counted, FixedWindow, Limit, ManualClock, Receipt, SlidingWindow, WindowQuota};
///
/// let clock = ManualClock::new();
/// let fixed = Counted::new(FixedWindow::with_clock(WindowQuota::per_second(2)?, &clock)?);
/// Receipt::take(&fixed, 2)?.undo(); // within its window: all of it back
/// assert_eq!((fixed.available(), fixed.stats().abandoned), (2, 1));
///
/// let sliding = SlidingWindow::with_clock(WindowQuota::per_second(4)?, &clock)?;
/// sliding.try_acquire(4)?;
/// clock.advance(Duration::from_secs(1));
/// // The last window's 4 weigh 3 a quarter into this one: a reservation,
/// // counted in this window, used then.
/// assert_eq!(sliding.reserve(1, Duration::from_secs(1))?, Duration::from_millis(250));
/// // A fixed window's room lies in the next window: it never reserves.
/// fixed.try_acquire(2)?;
/// assert!(fixed.reserve(1, Duration::from_secs(5)).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct WindowCounter<K: WindowKind, C = DefaultClock> {
    state: CachePadded<WindowState>,
    frame: Frame<K>,
    quota: WindowQuota,
    clock: C,
}

impl<K: WindowKind> WindowCounter<K, DefaultClock> {
    /// A window counter on the [`DefaultClock`].
    ///
    /// Refuses a limit too large to pack beside a window index that lasts
    /// 36 years ([`QuotaError::LimitTooLarge`], with the largest that fits).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, Limit, QuotaError, SlidingWindow, WindowQuota};
    ///
    /// let limiter = SlidingWindow::new(WindowQuota::per_minute(600)?)?;
    /// assert!(limiter.try_acquire(1).is_ok());
    /// assert_eq!(
    ///     SlidingWindow::new(WindowQuota::per_second(1 << 20)?).unwrap_err(),
    ///     QuotaError::LimitTooLarge { limit: 1 << 20, max: (1 << 16) - 1 },
    /// );
    /// assert!(FixedWindow::new(WindowQuota::per_second(1 << 20)?).is_ok());
    /// # Ok::<(), QuotaError>(())
    /// ```
    pub fn new(quota: WindowQuota) -> Result<Self, QuotaError> {
        WindowCounter::with_clock(quota, DefaultClock::new())
    }
}

impl<K: WindowKind, C: Clock> WindowCounter<K, C> {
    /// A window counter reading time from `clock`, with nothing admitted
    /// yet. Its windows are placed as the quota says (the clock's epoch, an
    /// offset, or the calendar) around the clock's reading now.
    ///
    /// ```
    /// use tollgate::{FixedWindow, Limit, ManualClock, WindowQuota};
    ///
    /// let limiter = FixedWindow::with_clock(WindowQuota::per_second(5)?, ManualClock::new())?;
    /// assert_eq!(limiter.available(), 5);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_clock(quota: WindowQuota, clock: C) -> Result<Self, QuotaError> {
        Ok(WindowCounter {
            state: CachePadded::new(WindowState::default()),
            frame: Frame::new(&quota, clock.now_nanos())?,
            quota,
            clock,
        })
    }

    /// Nanoseconds since the start of the limiter's first window.
    #[inline]
    fn now(&self) -> u64 {
        self.frame.elapsed(self.clock.now_nanos())
    }

    /// Counts `cost` at the clock's reading now, with up to `slack`
    /// nanoseconds of delay: the window it was counted in, and the wait.
    #[inline]
    fn admit(&self, cost: u64, slack: u64) -> Result<(u64, u64), AcquireError> {
        self.frame.check_cost(cost)?;
        let reading = self.clock.now_nanos();
        let at = self.frame.elapsed(reading);
        self.state.acquire(&self.frame, (at, reading), cost, slack)
    }

    /// The limit this counter enforces.
    ///
    /// ```
    /// use tollgate::{FixedWindow, WindowQuota};
    ///
    /// let limiter = FixedWindow::new(WindowQuota::per_minute(60)?)?;
    /// assert_eq!(limiter.quota().limit(), 60);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> &WindowQuota {
        &self.quota
    }

    /// The clock this counter reads.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FixedWindow, ManualClock, WindowQuota};
    ///
    /// let limiter = FixedWindow::with_clock(WindowQuota::per_second(1)?, ManualClock::new())?;
    /// limiter.clock().advance(Duration::from_secs(1));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

/// A window counter's decisions are those of every [`Limit`]; what differs
/// is what a delay can buy. A reservation is counted in the window the word
/// holds and used later in it, so only a sliding window reserves, while the
/// previous window's weight fades; a fixed window admits now or refuses
/// with the wait until the next window
/// ([`docs/semantics.md`](crate::guide::semantics), "Windows").
impl<K: WindowKind, C: Clock> sealed::Sealed for WindowCounter<K, C> {
    #[inline]
    fn take(&self, cost: u64) -> Result<Taken, AcquireError> {
        let (index, _) = self.admit(cost, 0)?;
        Ok(Taken::window(index, cost))
    }

    #[inline]
    fn take_within(
        &self,
        cost: u64,
        max_wait: Duration,
    ) -> Result<(Taken, Duration), AcquireError> {
        let (index, wait) = self.admit(cost, crate::clock::saturating_nanos(max_wait))?;
        Ok((Taken::window(index, cost), Duration::from_nanos(wait)))
    }

    /// Gives back by the rule of `WindowState::give_back`: exactly, while
    /// the window the cost was counted in lasts; nothing once it has ended.
    fn undo(&self, taken: &Taken) {
        if let Some(index) = taken.window_index() {
            self.state
                .give_back(&self.frame, index, taken.tokens, self.now());
        }
    }

    /// Counted in the window of now, by the rule of `WindowState::debit`.
    fn debit(&self, tokens: u64) {
        self.state.debit(&self.frame, tokens, self.now());
    }

    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn identity(&self) -> Identity {
        Identity::of(self)
    }
}

impl<K: WindowKind, C: Clock> Advertised for WindowCounter<K, C> {
    fn shape(&self) -> Shape {
        Shape::from(&self.quota)
    }

    /// The end of the window the word decides in: where a fixed window
    /// empties and a sliding one's counts move on.
    fn idle_reset(&self) -> Duration {
        let at = self.now();
        self.frame.until_end(&self.state.view(&self.frame, at), at)
    }
}

impl<K: WindowKind, C: Clock> Limit for WindowCounter<K, C> {
    fn retry_after(&self, cost: u64) -> Result<Duration, AcquireError> {
        self.frame.check_cost(cost)?;
        let reading = self.clock.now_nanos();
        let at = self.frame.elapsed(reading);
        let view = self.state.view(&self.frame, at);
        Ok(self
            .frame
            .retry_after(&view, at, cost, self.frame.behind(reading)))
    }

    /// Whole units that would be admitted now: the limit less the current
    /// window's count (and, for a sliding window, less the previous
    /// window's weighted count, rounded up).
    fn available(&self) -> u64 {
        self.frame
            .available(&self.state.view(&self.frame, self.now()))
    }
}
