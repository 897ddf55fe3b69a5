//! The one limiter trait: every limiter that spends tokens makes its
//! decisions through [`Limit`], so the layers around them (counting,
//! hierarchies, receipts) are written once.

use std::time::Duration;

use crate::error::AcquireError;
use crate::hierarchy::Step;

/// A limiter that spends tokens: a [`TokenBucket`](crate::TokenBucket), one
/// key of a [`KeyedLimiter`](crate::KeyedLimiter) or of a
/// [`Tiered`](crate::Tiered) ([`KeyLimit`](crate::KeyLimit)), a
/// [`StripedBucket`](crate::StripedBucket), a window counter
/// ([`FixedWindow`](crate::FixedWindow), [`SlidingWindow`](crate::SlidingWindow)),
/// or any of them wrapped in [`Counted`](crate::Counted).
///
/// Its decisions are synchronous and never block: take now
/// ([`try_acquire`](Self::try_acquire)), take now and wait before use
/// ([`reserve`](Self::reserve)), or look without spending
/// ([`retry_after`](Self::retry_after), [`available`](Self::available)).
/// With feature `tokio`, [`acquire`](Self::acquire) sleeps a reservation out
/// on tokio's timer. Every limit can be a step of a hierarchy
/// ([`cost`](Self::cost), [`try_acquire_all`](crate::try_acquire_all)) and
/// issue a [`Receipt`](crate::Receipt).
///
/// One trait, sealed: besides these methods every limit has internal ones
/// (take with a record of what was taken, and undo that record by the rule
/// that never mints credit) that receipts, hierarchies and async waits are
/// built on. They stay out of reach so that a record taken from one limit
/// can never be handed to another, and so that no implementation outside
/// this crate can give credit back by another rule. Calls are statically
/// dispatched unless the caller asks for `dyn Limit`, as a
/// [`Step`] does.
///
/// Not every limiter of the crate is a `Limit`. A
/// [`ConcurrencyLimiter`](crate::concurrency::ConcurrencyLimiter) hands out
/// permits that return their weight when dropped, not tokens that stay
/// spent: a `try_acquire` that returned nothing would release its permit at
/// once. A [`LocalAllowance`](crate::shared::LocalAllowance) admits from a
/// pool of leased tokens and says where an admission came from
/// ([`Source`](crate::shared::Source): a lease, or the failure policy), which
/// a `Result<(), _>` would hide, and it has neither a delay (a pool cannot
/// lend what the store has not granted) nor a way to give tokens back. A
/// [`KeyedLimiter`](crate::KeyedLimiter) is many limits: each of its keys is
/// one ([`key`](crate::KeyedLimiter::key)).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Counted, Limit, ManualClock, Quota, TokenBucket};
///
/// // Written once, for any limit.
/// fn serve(limit: &impl Limit) -> Result<(), tollgate::AcquireError> {
///     limit.try_acquire(1)
/// }
///
/// let clock = ManualClock::new();
/// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, &clock);
/// serve(&bucket)?;
/// assert_eq!(bucket.retry_after(1)?, Duration::from_secs(1));
/// let counted = Counted::new(TokenBucket::with_clock(Quota::per_second(1)?, &clock));
/// serve(&counted)?;
/// assert_eq!(counted.stats().admitted, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Limit: sealed::Sealed + Sync {
    /// Takes `cost` tokens now, or refuses without spending anything.
    ///
    /// A refusal for want of tokens carries the exact wait until `cost`
    /// would fit, rounded up to the nanosecond. A cost above the capacity
    /// can never fit and gets [`AcquireError::ExceedsCapacity`]; a cost of
    /// zero gets [`AcquireError::ZeroCost`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{AcquireError, Limit, ManualClock, Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::with_clock(Quota::per_second(3)?, ManualClock::new());
    /// bucket.try_acquire(3)?;
    /// // 3/s is an emission interval of 333_333_333.3 ns, rounded up.
    /// assert_eq!(
    ///     bucket.try_acquire(1),
    ///     Err(AcquireError::Insufficient { retry_after: Duration::from_nanos(333_333_334) }),
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    fn try_acquire(&self, cost: u64) -> Result<(), AcquireError> {
        self.take(cost).map(drop)
    }

    /// Takes `cost` tokens now and tells the caller how long to wait before
    /// using them, provided that wait is at most `max_wait`; otherwise
    /// refuses without spending anything.
    ///
    /// This is *delay* rather than denial: the tokens are spent at once (the
    /// limit goes into debt), and the caller starts its work after the
    /// returned wait, which keeps the start times within the quota (to the
    /// nanosecond the wait is rounded up to; see
    /// [`docs/semantics.md`](crate::guide::semantics)). A refusal reports
    /// how much later the same call would succeed. Nothing queues: the wait
    /// is the caller's to honour.
    ///
    /// A window counter reserves only within its current window (a sliding
    /// window while the last window's weight fades; a fixed window never):
    /// [`docs/semantics.md`](crate::guide::semantics), "Windows".
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limit, ManualClock, Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
    /// assert_eq!(bucket.reserve(2, Duration::ZERO)?, Duration::ZERO);
    /// assert_eq!(bucket.reserve(1, Duration::from_secs(1))?, Duration::from_millis(500));
    /// assert_eq!(bucket.reserve(1, Duration::from_secs(1))?, Duration::from_secs(1));
    /// assert!(bucket.reserve(1, Duration::from_secs(1)).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    fn reserve(&self, cost: u64, max_wait: Duration) -> Result<Duration, AcquireError> {
        self.take_within(cost, max_wait).map(|(_, wait)| wait)
    }

    /// Takes `cost` tokens and sleeps the calling thread until they may be
    /// used: [`reserve`](Self::reserve) for code without async (a worker
    /// loop, a batch job). If the tokens exist within `max_wait` they are
    /// reserved at once and the thread sleeps the wait
    /// ([`std::thread::sleep`], which never wakes early); the answer is the
    /// wait slept. Otherwise it refuses at once, spending nothing, with the
    /// exact `retry_after`, and does not sleep.
    ///
    /// The tokens are spent when the call is made, so a caller that must
    /// give up while it sleeps cannot: on an async runtime use
    /// [`acquire`](Self::acquire) (feature `tokio`), which gives the
    /// reservation back when its future is dropped. Never call it on an
    /// async runtime's worker threads: it blocks the thread.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{AcquireError, Limit, ManualClock, Quota, TokenBucket};
    ///
    /// // A worker loop held to 1000 items a second, in bursts of at most 10
    /// // (on a clock that stands still, so the waits are exact).
    /// let bucket = TokenBucket::with_clock(Quota::new(10, 1000, Duration::from_secs(1))?, ManualClock::new());
    /// let mut waited = Duration::ZERO;
    /// for _item in 0..12 {
    ///     waited += bucket.acquire_blocking(1, Duration::from_secs(1))?;
    ///     // ... process the item ...
    /// }
    /// // Ten went at once; the 11th slept 1 ms and the 12th 2 ms.
    /// assert_eq!(waited, Duration::from_millis(3));
    /// // The next would wait 3 ms: beyond a `max_wait` of 1 ms, refused at
    /// // once, spending nothing; the same call fits 2 ms later.
    /// assert_eq!(
    ///     bucket.acquire_blocking(1, Duration::from_millis(1)),
    ///     Err(AcquireError::Insufficient { retry_after: Duration::from_millis(2) }),
    /// );
    /// assert_eq!(bucket.retry_after(1)?, Duration::from_millis(3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn acquire_blocking(&self, cost: u64, max_wait: Duration) -> Result<Duration, AcquireError> {
        let wait = self.reserve(cost, max_wait)?;
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        Ok(wait)
    }

    /// How long until `cost` tokens would be admitted, zero if they would be
    /// now. Spends nothing (and creates no key): another caller may take the
    /// credit first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limit, ManualClock, Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::with_clock(Quota::per_second(4)?, ManualClock::new());
    /// assert_eq!(bucket.retry_after(4)?, Duration::ZERO);
    /// bucket.try_acquire(4)?;
    /// assert_eq!(bucket.retry_after(2)?, Duration::from_millis(500));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn retry_after(&self, cost: u64) -> Result<Duration, AcquireError>;

    /// Whole tokens available now (zero while reservations hold the limit
    /// in debt).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limit, ManualClock, Quota, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, clock.clone());
    /// bucket.try_acquire(2)?;
    /// clock.advance(Duration::from_millis(999));
    /// assert_eq!(bucket.available(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn available(&self) -> u64;

    /// This limit charged `cost` tokens, as a step of a hierarchy.
    ///
    /// The step borrows the limit: for a key's limit, build the steps inside
    /// the call to [`try_acquire_all`](crate::try_acquire_all), or bind the
    /// key's limit first (`let account = limiter.key(&id); let steps =
    /// [account.cost(1)];`). A `&dyn Limit` makes its step with
    /// [`Step::new`].
    ///
    /// ```
    /// # #[cfg(feature = "keyed")] {
    /// use tollgate::{KeyedLimiter, Limit, Quota, TokenBucket, try_acquire_all};
    ///
    /// let per_account = KeyedLimiter::builder(Quota::per_second(5)?).build::<u64>();
    /// let global = TokenBucket::new(Quota::per_second(100)?);
    /// try_acquire_all(&[per_account.key(&42).cost(1), global.cost(3)])?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    fn cost(&self, cost: u64) -> Step<'_>
    where
        Self: Sized,
    {
        Step::new(self, cost)
    }

    /// Takes `cost` tokens and waits until they may be used: the async form
    /// of [`reserve`](Self::reserve), for callers that prefer delay to
    /// denial (feature `tokio`). If the tokens exist within `max_wait`, they
    /// are reserved at once and the future completes after the wait (on
    /// tokio's timer); otherwise it refuses at once, spending nothing, with
    /// the exact `retry_after`.
    ///
    /// Cancellation-safe: dropping the future before its wait ends gives the
    /// reservation back by the rule that never mints credit: exactly, if
    /// nothing else reserved since; nothing, while a later reservation holds
    /// the limit's future (its start was promised); otherwise the cost less
    /// the time held ([`docs/semantics.md`](crate::guide::semantics),
    /// "Giving back").
    ///
    /// Fairness: first come, first served. A caller's slot is fixed when it
    /// calls, and every later call, however small, is scheduled after it, so
    /// a large request is never starved by a stream of small ones; it is only
    /// refused when its own slot lies beyond its `max_wait`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limit, ManualClock, Quota, TokenBucket};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
    /// bucket.acquire(2, Duration::ZERO).await?;
    /// let started = tokio::time::Instant::now(); // tokio's paused clock: simulated time
    /// bucket.acquire(1, Duration::from_secs(1)).await?; // waits 500 ms
    /// assert_eq!(started.elapsed(), Duration::from_millis(500));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tokio")]
    fn acquire(
        &self,
        cost: u64,
        max_wait: Duration,
    ) -> impl Future<Output = Result<(), AcquireError>> + Send + '_
    where
        Self: Sized,
    {
        crate::waiting::acquire(self, cost, max_wait)
    }
}

pub(crate) mod sealed {
    use std::time::Duration;

    use crate::error::AcquireError;

    /// What one admission took, enough to undo it by the one rule that
    /// never mints credit: the data of a [`Receipt`](crate::Receipt).
    #[derive(Clone, Copy, Debug)]
    pub struct Taken {
        pub(crate) record: Record,
        /// The tokens admitted.
        pub(crate) tokens: u64,
        /// Whether a keyed limiter served it from its overflow bucket
        /// (always false, and so never read, without feature `keyed`).
        #[cfg_attr(not(feature = "keyed"), allow(dead_code))]
        pub(crate) overflow: bool,
    }

    /// What the limit's own word recorded of an admission: a bucket's
    /// compare-and-swap, or the window a window counter counted it in.
    #[derive(Clone, Copy, Debug)]
    pub(crate) enum Record {
        Bucket(crate::state::Admission),
        Window(u64),
    }

    impl Taken {
        /// `tokens` admitted by `admission` from a limit's own bucket.
        #[inline]
        pub(crate) fn own(admission: crate::state::Admission, tokens: u64) -> Taken {
            Taken {
                record: Record::Bucket(admission),
                tokens,
                overflow: false,
            }
        }

        /// `tokens` counted in the window numbered `index`.
        #[inline]
        pub(crate) fn window(index: u64, tokens: u64) -> Taken {
            Taken {
                record: Record::Window(index),
                tokens,
                overflow: false,
            }
        }

        /// The bucket admission this records. A record reaches only the
        /// limit that made it (receipts and steps hold their limit), so a
        /// bucket never sees a window's record; were it to, `None` makes
        /// its undo give back nothing, which mints nothing.
        #[inline]
        pub(crate) fn admission(&self) -> Option<&crate::state::Admission> {
            match &self.record {
                Record::Bucket(admission) => Some(admission),
                _ => None,
            }
        }

        /// This record with `tokens` in place of what it admitted: what an
        /// undo of part of the admission gives back.
        #[inline]
        pub(crate) fn part(&self, tokens: u64) -> Taken {
            Taken { tokens, ..*self }
        }

        /// The window this records, by the same argument.
        #[inline]
        pub(crate) fn window_index(&self) -> Option<u64> {
            match self.record {
                Record::Window(index) => Some(index),
                _ => None,
            }
        }
    }

    /// Which tokens a limit decides on: two handles of one identity (a
    /// bucket and a `Counted`, `&`, `Box` or `Arc` around it, a striped
    /// bucket and its bucket, two views of one key of a keyed limiter)
    /// spend from one state, so steps of a chain that name it charge it
    /// their combined cost.
    ///
    /// The address of the state decided on (no limit of the crate holds
    /// another limit at its own address but one it decides through), and
    /// for a key of a keyed limit, the key's hash under the table's hasher.
    /// Two keys whose hashes collide (about 2^-64 for a pair, the hasher
    /// keyed per limiter by default) are taken for one: read only once a
    /// chain is refused, that can only overstate the refusal (a longer
    /// wait, or `ExceedsCapacity` for a chain that would not otherwise
    /// exceed it until its tokens return), never admit or refuse a request
    /// differently nor shorten a wait (`hierarchy::refusal` asks each
    /// step's own limit).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Identity {
        state: usize,
        key: u64,
    }

    impl Identity {
        /// No limit's: nothing lives at address 0.
        pub(crate) const NONE: Identity = Identity { state: 0, key: 0 };

        /// The identity of the limit whose state is `state`.
        pub(crate) fn of<T: ?Sized>(state: &T) -> Identity {
            Identity::of_key(state, 0)
        }

        /// The identity of the key whose hash is `key` in the keyed limit
        /// whose state is `state`.
        pub(crate) fn of_key<T: ?Sized>(state: &T, key: u64) -> Identity {
            Identity {
                state: std::ptr::from_ref(state).addr(),
                key,
            }
        }
    }

    /// The operations of a [`Limit`](super::Limit), kept out of reach.
    pub trait Sealed {
        /// Takes `cost` now, or refuses without spending.
        fn take(&self, cost: u64) -> Result<Taken, AcquireError>;
        /// Takes `cost` now to be used after a wait of at most `max_wait`,
        /// or refuses without spending: what was taken, and the wait.
        fn take_within(
            &self,
            cost: u64,
            max_wait: Duration,
        ) -> Result<(Taken, Duration), AcquireError>;
        /// Gives back what `taken` took, by the rule of `Tat::undo`.
        fn undo(&self, taken: &Taken);
        /// Charges `tokens` more, whether or not they fit: a settled cost's
        /// excess over its estimate, into debt that later admissions wait
        /// out (`Tat::debit`). No receipt: the excess is charged to the
        /// limit as it is now, whatever admission it settles (one of an
        /// estimate of zero took nothing).
        fn debit(&self, tokens: u64);
        /// Settles the admission `taken` records to its actual cost: the
        /// excess debited, or the rest given back by the rule of
        /// `Tat::undo`.
        fn settle(&self, taken: &Taken, actual: u64) {
            match actual.cmp(&taken.tokens) {
                std::cmp::Ordering::Less => self.undo(&taken.part(taken.tokens - actual)),
                std::cmp::Ordering::Greater => self.debit(actual - taken.tokens),
                std::cmp::Ordering::Equal => {}
            }
        }
        /// The most one decision can take: a bucket's capacity, a window's
        /// limit (what a hierarchy reports a chain that can never fit
        /// against).
        fn capacity(&self) -> u64;
        /// Which limit this is: see [`Identity`].
        fn identity(&self) -> Identity;
    }
}

pub(crate) use sealed::{Identity, Taken};

/// Implements [`Limit`] for a pointer to a limit, so that a receipt can hold
/// its limit borrowed (`&L`) or shared (`Arc<L>`, for a receipt that
/// outlives the caller's borrow, such as one kept until a response), and
/// `Counted` can count a borrowed limit.
macro_rules! forward_limit {
    ($($pointer:ty where $($bound:path)?);*) => {$(
        impl<L: Limit + ?Sized $(+ $bound)?> sealed::Sealed for $pointer {
            #[inline]
            fn take(&self, cost: u64) -> Result<Taken, AcquireError> {
                (**self).take(cost)
            }
            #[inline]
            fn take_within(&self, cost: u64, max_wait: Duration) -> Result<(Taken, Duration), AcquireError> {
                (**self).take_within(cost, max_wait)
            }
            fn undo(&self, taken: &Taken) {
                (**self).undo(taken);
            }
            fn debit(&self, tokens: u64) {
                (**self).debit(tokens);
            }
            fn settle(&self, taken: &Taken, actual: u64) {
                (**self).settle(taken, actual);
            }
            fn capacity(&self) -> u64 {
                (**self).capacity()
            }
            fn identity(&self) -> sealed::Identity {
                (**self).identity()
            }
        }
        impl<L: Limit + ?Sized $(+ $bound)?> Limit for $pointer {
            #[inline]
            fn try_acquire(&self, cost: u64) -> Result<(), AcquireError> {
                (**self).try_acquire(cost)
            }
            fn retry_after(&self, cost: u64) -> Result<Duration, AcquireError> {
                (**self).retry_after(cost)
            }
            fn available(&self) -> u64 {
                (**self).available()
            }
        }
    )*};
}
forward_limit!(&L where; Box<L> where; crate::sync::unmodelled::Arc<L> where Send);
