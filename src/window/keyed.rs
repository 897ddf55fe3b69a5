//! Keyed window counters: one window word per key, in the key table the
//! keyed bucket uses.

use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use super::frame::{Frame, View};
use super::keys::WindowKeys;
use super::state::WindowState;
use super::{Fixed, Sliding, WindowKind, WindowQuota};
use crate::advertised::{Advertised, Shape};
use crate::clock::{Clock, DefaultClock};
use crate::error::{AcquireError, QuotaError};
use crate::keyed::{
    AtCapacity, Find, Found, KeyRef, KeyTable, KeyTableStats, KeyedBuilder, PerKey, Table, in_table,
};
use crate::limit::{Identity, Limit, Taken, sealed};

/// A window counter per key ([`FixedWindow`](super::FixedWindow) or
/// [`SlidingWindow`](super::SlidingWindow) by its kind `Kind`), in the same
/// bounded key table as [`KeyedLimiter`](crate::KeyedLimiter): at most
/// [`max_keys`](KeyedBuilder::max_keys) keys, long keys kept as
/// fingerprints, idle keys dropped by sweeps. A key's state is one 8-byte
/// word beside the key.
///
/// A key is idle, and a sweep drops it, when nothing it counted still
/// weighs: a fixed window's once its window has ended, a sliding window's
/// once the window after it has ended too. A key created after a sweep
/// starts empty in the window of the sweep's reading or a later one, never
/// in a window it already spent in. At the cap new keys are refused with
/// [`AcquireError::TooManyKeys`]: keyed windows support
/// [`AtCapacity::Deny`] only, and a builder asking for
/// [`AtCapacity::SharedOverflow`] gets
/// [`QuotaError::SharedOverflowUnsupported`].
///
/// Its decisions are those of [`key`](Self::key), a [`Limit`].
///
/// Linearization points: a decision on a key is its word's (the
/// compare-and-swap or load, as for a [`WindowCounter`](super::WindowCounter)),
/// made while holding the key's shard for reading; a sweep drops a word
/// while holding its shard for writing, so no decision on it is in flight.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{KeyedFixedWindow, Limit, ManualClock, WindowQuota};
///
/// let clock = ManualClock::new();
/// let limiter = KeyedFixedWindow::builder(WindowQuota::per_second(2)?)
///     .clock(clock.clone())
///     .build_fixed::<String>()?;
/// limiter.key("alice").try_acquire(2)?;
/// assert!(limiter.key("alice").try_acquire(1).is_err());
/// assert!(limiter.key("bob").try_acquire(1).is_ok());
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(limiter.sweep(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyedWindow<K, Kind: WindowKind, C = DefaultClock, S = ahash::RandomState> {
    table: Table<K, WindowState, S>,
    /// The frame of every key's word and the sweep watermark.
    keys: WindowKeys<Kind>,
    quota: WindowQuota,
    clock: C,
}

/// A fixed-window counter per key: see [`KeyedWindow`].
///
/// ```
/// use tollgate::{KeyedFixedWindow, Limit, WindowQuota};
///
/// let limiter: KeyedFixedWindow<u64> =
///     KeyedFixedWindow::builder(WindowQuota::per_minute(60)?).build_fixed()?;
/// assert_eq!(limiter.key(&7).available(), 60);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub type KeyedFixedWindow<K, C = DefaultClock, S = ahash::RandomState> =
    KeyedWindow<K, Fixed, C, S>;

/// A sliding-window counter per key: see [`KeyedWindow`].
///
/// ```
/// use std::time::Duration;
/// use tollgate::{KeyedSlidingWindow, Limit, ManualClock, WindowQuota};
///
/// let clock = ManualClock::new();
/// let limiter = KeyedSlidingWindow::builder(WindowQuota::per_second(10)?)
///     .clock(clock.clone())
///     .build_sliding::<u32>()?;
/// limiter.key(&1).try_acquire(10)?;
/// clock.advance(Duration::from_millis(1500));
/// // Half of the last window still counts.
/// assert_eq!(limiter.key(&1).available(), 5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type KeyedSlidingWindow<K, C = DefaultClock, S = ahash::RandomState> =
    KeyedWindow<K, Sliding, C, S>;

impl<K, Kind: WindowKind, C, S> std::fmt::Debug for KeyedWindow<K, Kind, C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedWindow")
            .field("quota", &self.quota)
            .field("keys", &self.table.len())
            .field("bound", &self.table.bound)
            .finish_non_exhaustive()
    }
}

impl<Kind: WindowKind> KeyedWindow<(), Kind> {
    /// Starts configuring a keyed window counter that gives every key
    /// `quota`; the memory bound and clock are set as for a
    /// [`KeyedLimiter`](crate::KeyedLimiter), then
    /// [`build_fixed`](KeyedBuilder::build_fixed) or
    /// [`build_sliding`](KeyedBuilder::build_sliding) makes it.
    ///
    /// ```
    /// use tollgate::MaxKeys;
    /// use tollgate::{KeyedSlidingWindow, WindowQuota};
    ///
    /// let limiter = KeyedSlidingWindow::builder(WindowQuota::per_minute(600)?)
    ///     .max_keys(MaxKeys::new(1000)?)
    ///     .build_sliding::<String>()?;
    /// assert_eq!(limiter.max_keys(), 1000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(
        quota: WindowQuota,
    ) -> KeyedBuilder<DefaultClock, ahash::RandomState, WindowQuota> {
        KeyedBuilder::new(quota)
    }
}

impl<C: Clock, S: BuildHasher + Clone> KeyedBuilder<C, S, WindowQuota> {
    /// A fixed-window counter per key of type `K`. Refuses a limit too
    /// large to pack ([`QuotaError::LimitTooLarge`]) and the overflow
    /// policy ([`QuotaError::SharedOverflowUnsupported`]).
    ///
    /// ```
    /// use tollgate::{AtCapacity, KeyedFixedWindow, QuotaError, WindowQuota};
    ///
    /// let overflow = KeyedFixedWindow::builder(WindowQuota::per_second(5)?)
    ///     .at_capacity(AtCapacity::SharedOverflow)
    ///     .build_fixed::<u32>();
    /// assert_eq!(overflow.unwrap_err(), QuotaError::SharedOverflowUnsupported);
    /// # Ok::<(), QuotaError>(())
    /// ```
    pub fn build_fixed<K: Hash + Eq>(self) -> Result<KeyedFixedWindow<K, C, S>, QuotaError> {
        self.build_window()
    }

    /// A sliding-window counter per key of type `K`; refuses what
    /// [`build_fixed`](Self::build_fixed) refuses.
    ///
    /// ```
    /// use tollgate::{KeyedSlidingWindow, QuotaError, WindowQuota};
    ///
    /// let too_large = KeyedSlidingWindow::builder(WindowQuota::per_second(1 << 20)?)
    ///     .build_sliding::<u32>();
    /// assert!(matches!(too_large, Err(QuotaError::LimitTooLarge { .. })));
    /// # Ok::<(), QuotaError>(())
    /// ```
    pub fn build_sliding<K: Hash + Eq>(self) -> Result<KeyedSlidingWindow<K, C, S>, QuotaError> {
        self.build_window()
    }

    fn build_window<K: Hash + Eq, Kind: WindowKind>(
        self,
    ) -> Result<KeyedWindow<K, Kind, C, S>, QuotaError> {
        if self.bound.at_capacity != AtCapacity::Deny {
            return Err(QuotaError::SharedOverflowUnsupported);
        }
        Ok(KeyedWindow {
            keys: WindowKeys::new(Frame::new(&self.quota, self.clock.now_nanos())?),
            table: Table::new(self.hasher, self.bound),
            quota: self.quota,
            clock: self.clock,
        })
    }
}

impl<K: Hash + Eq, Kind: WindowKind, C: Clock, S: BuildHasher + Clone> KeyedWindow<K, Kind, C, S> {
    /// Nanoseconds since the start of the first window.
    #[inline]
    fn now(&self) -> u64 {
        self.keys.frame.elapsed(self.clock.now_nanos())
    }

    /// Counts `cost` for `key` at the clock's reading now, with up to
    /// `slack` nanoseconds of delay: the window it was counted in, and the
    /// wait. A bad cost creates nothing.
    #[inline]
    fn admit<Q: KeyRef<K> + ?Sized>(
        &self,
        key: &Q,
        cost: u64,
        slack: u64,
    ) -> Result<(u64, u64), AcquireError> {
        self.keys.frame.check_cost(cost)?;
        in_table!(self.table, key, |table| {
            // As in the keyed bucket: the clock is read after the lookup,
            // and the guard holds the shard for reading until the decision
            // is made, so no sweep falls between them for a tracked key.
            let found = key.find_in(table);
            let reading = self.clock.now_nanos();
            let at = self.keys.frame.elapsed(reading);
            let state = match found {
                Some(state) => state,
                None => self.insert_in(table, key, at)?,
            };
            state.acquire(&self.keys.frame, (at, reading), cost, slack)
        })
    }

    #[cold]
    fn insert_in<'t, M, Q, H>(
        &'t self,
        table: &'t dashmap::DashMap<M, WindowState, H>,
        key: &Q,
        at: u64,
    ) -> Result<dashmap::mapref::one::Ref<'t, M, WindowState>, AcquireError>
    where
        M: Hash + Eq,
        Q: KeyRef<M> + ?Sized,
        H: BuildHasher + Clone,
    {
        let place = self.table.cap.take_place(
            at,
            || self.now(),
            |at| {
                self.drop_idle_at(at);
            },
        );
        // Made under the shard's write lock: a sweep that dropped this key
        // from the shard published its reading first.
        let make = || Ok(WindowState::starting(self.keys.fresh_word(at)));
        match self.table.insert_in(table, key, place, || Ok(()), make)? {
            Found::Own(state) => Ok(state),
            // Only under the overflow policy, which the builder refuses.
            Found::Absent(_) => Err(AcquireError::TooManyKeys {
                max_keys: self.table.bound.max_keys,
            }),
        }
    }

    /// What a decision on `key` at `at` sees; a key not tracked is seen as
    /// a new word would be. Creates nothing.
    fn view<Q: KeyRef<K> + ?Sized>(&self, key: &Q, at: u64) -> View {
        in_table!(self.table, key, |table| match key.find_in(table) {
            Some(state) => state.view(&self.keys.frame, at),
            None => self.keys.unknown(at),
        })
    }

    /// Gives back `cost` counted for `key` in window `index`, by the one
    /// rule of the window counter (only while that window lasts), then
    /// drops the key if nothing it counted weighs any more, so refusals
    /// elsewhere do not fill this table's cap.
    fn give_back<Q: KeyRef<K> + ?Sized>(&self, key: &Q, index: u64, cost: u64) {
        in_table!(self.table, key, |table| {
            if let Some(state) = key.find_in(table) {
                state.give_back(&self.keys.frame, index, cost, self.now());
            }
            // The guard above is dropped: the map may be written now.
            let at = self.now();
            self.keys.dropping_at(at);
            self.table
                .forget_if_idle_in(table, key, &self.keys.frame, at);
        })
    }

    /// Counts `tokens` for `key` in the window of now whether or not they
    /// fit (`WindowState::debit`), creating its word if it was dropped as
    /// idle. A key the table has no room for (at its cap) is refused every
    /// decision until room appears, and then starts a fresh window, as the
    /// debt's own window would have ended by then at the latest, unless
    /// room comes back within it: the one case a debt is not recorded.
    fn debit<Q: KeyRef<K> + ?Sized>(&self, key: &Q, tokens: u64) {
        if tokens == 0 {
            return;
        }
        in_table!(self.table, key, |table| {
            let found = key.find_in(table);
            let at = self.now();
            let state = match found {
                Some(state) => state,
                None => match self.insert_in(table, key, at) {
                    Ok(state) => state,
                    Err(_) => return,
                },
            };
            state.debit(&self.keys.frame, tokens, at);
        })
    }

    /// Drops every idle word at the reading `at`, publishing the reading
    /// first so that a key recreated after its word is dropped starts no
    /// earlier than `at`'s window.
    fn drop_idle_at(&self, at: u64) -> usize {
        self.keys.dropping_at(at);
        self.table.drop_idle(&self.keys.frame, at)
    }

    /// Counts `cost` for `key` now, or refuses without counting anything;
    /// the decision of [`key`](Self::key)`(key).try_acquire(cost)`, as
    /// [`KeyedLimiter::try_acquire`](crate::KeyedLimiter::try_acquire) is.
    ///
    /// ```
    /// use tollgate::{KeyedSlidingWindow, ManualClock, WindowQuota};
    ///
    /// let limiter = KeyedSlidingWindow::builder(WindowQuota::per_second(2)?)
    ///     .clock(ManualClock::new())
    ///     .build_sliding::<String>()?;
    /// limiter.try_acquire("alice", 2)?;
    /// assert!(limiter.try_acquire("alice", 1).is_err());
    /// assert!(limiter.try_acquire(&"bob".to_owned(), 1).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q, cost: u64) -> Result<(), AcquireError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        self.admit(key, cost, 0).map(drop)
    }

    /// `key`'s window counter: a [`Limit`] (decisions, reservations,
    /// [`Receipt`](crate::Receipt)s, steps of a hierarchy).
    ///
    /// ```
    /// use tollgate::{KeyedFixedWindow, Limit, ManualClock, Receipt, WindowQuota};
    ///
    /// let limiter = KeyedFixedWindow::builder(WindowQuota::per_second(3)?)
    ///     .clock(ManualClock::new())
    ///     .build_fixed::<String>()?;
    /// let alice = limiter.key("alice");
    /// Receipt::take(&alice, 3)?.undo();
    /// assert_eq!(limiter.key("alice").available(), 3);
    /// // Nothing it counted weighs any more: the key is dropped.
    /// assert!(limiter.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key<'a, Q>(&'a self, key: &'a Q) -> KeyWindow<'a, Q, K, Kind, C, S>
    where
        Q: KeyRef<K> + ?Sized,
    {
        KeyWindow { limiter: self, key }
    }

    /// Drops every key nothing of which still weighs, and returns how many.
    /// Each shard is write-locked while it is swept.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedSlidingWindow, Limit, ManualClock, WindowQuota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedSlidingWindow::builder(WindowQuota::per_second(1)?)
    ///     .clock(clock.clone())
    ///     .build_sliding::<u32>()?;
    /// limiter.key(&1).try_acquire(1)?;
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(limiter.sweep(), 0); // its count still weighs in this window
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(limiter.sweep(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sweep(&self) -> usize {
        self.table.cap.sweep(|| self.drop_idle_at(self.now()))
    }

    /// What the key table holds and has dropped so far (`overflowed` stays
    /// zero: keyed windows refuse at the cap).
    ///
    /// ```
    /// use tollgate::{KeyedFixedWindow, Limit, WindowQuota};
    ///
    /// let limiter = KeyedFixedWindow::builder(WindowQuota::per_second(1)?).build_fixed::<u32>()?;
    /// limiter.key(&1).try_acquire(1)?;
    /// assert_eq!((limiter.table_stats().created, limiter.table_stats().keys), (1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn table_stats(&self) -> KeyTableStats {
        self.table.stats()
    }

    /// Keys currently tracked, as counted against the cap: for a moment the
    /// count may run above the table (a place is reserved before each
    /// insertion, and a sweep uncounts what it dropped when it ends), never
    /// below it, so the cap is never overshot.
    ///
    /// ```
    /// use tollgate::{KeyedFixedWindow, Limit, WindowQuota};
    ///
    /// let limiter = KeyedFixedWindow::builder(WindowQuota::per_second(1)?).build_fixed::<u32>()?;
    /// limiter.key(&1).try_acquire(1)?;
    /// assert_eq!(limiter.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no key is tracked.
    ///
    /// ```
    /// use tollgate::{KeyedFixedWindow, WindowQuota};
    ///
    /// assert!(KeyedFixedWindow::builder(WindowQuota::per_second(1)?).build_fixed::<u32>()?.is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys tracked at once.
    ///
    /// ```
    /// use tollgate::{KeyedFixedWindow, WindowQuota};
    ///
    /// let limiter = KeyedFixedWindow::builder(WindowQuota::per_second(1)?).build_fixed::<u32>()?;
    /// assert_eq!(limiter.max_keys(), 1 << 20);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn max_keys(&self) -> usize {
        self.table.bound.max_keys
    }

    /// The limit every key gets, by value (a [`WindowQuota`] is `Copy`, as
    /// [`KeyedLimiter::quota`](crate::KeyedLimiter::quota)'s [`Quota`](crate::Quota) is).
    ///
    /// ```
    /// use tollgate::{KeyedFixedWindow, WindowQuota};
    ///
    /// let limiter = KeyedFixedWindow::builder(WindowQuota::per_second(4)?).build_fixed::<u32>()?;
    /// assert_eq!(limiter.quota().limit(), 4);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> WindowQuota {
        self.quota
    }

    /// The hasher of the table of exact keys (see
    /// [`KeyedLimiter::hasher`](crate::KeyedLimiter::hasher)).
    ///
    /// ```
    /// use std::hash::BuildHasher;
    /// use tollgate::{KeyedFixedWindow, WindowQuota};
    ///
    /// let a = KeyedFixedWindow::builder(WindowQuota::per_second(1)?).build_fixed::<u64>()?;
    /// let b = KeyedFixedWindow::builder(WindowQuota::per_second(1)?).build_fixed::<u64>()?;
    /// assert_ne!(a.hasher().hash_one(7u64), b.hasher().hash_one(7u64));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn hasher(&self) -> &S {
        self.table.exact.hasher()
    }

    /// The clock every key's window reads.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedFixedWindow, ManualClock, WindowQuota};
    ///
    /// let limiter = KeyedFixedWindow::builder(WindowQuota::per_second(1)?)
    ///     .clock(ManualClock::new())
    ///     .build_fixed::<u32>()?;
    /// limiter.clock().advance(Duration::from_secs(1));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

/// One key of a [`KeyedWindow`]: a [`Limit`], for everything written over
/// any limit ([`Counted`](crate::Counted), hierarchies, receipts, the tower
/// layer's keyed rules).
///
/// ```
/// use tollgate::{KeyedSlidingWindow, Limit, WindowQuota, try_acquire_all};
///
/// let per_user = KeyedSlidingWindow::builder(WindowQuota::per_minute(2)?).build_sliding::<u32>()?;
/// try_acquire_all(&[per_user.key(&7).cost(2)])?;
/// assert!(try_acquire_all(&[per_user.key(&7).cost(1)]).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct KeyWindow<'a, Q: ?Sized, K, Kind: WindowKind, C, S> {
    limiter: &'a KeyedWindow<K, Kind, C, S>,
    key: &'a Q,
}

impl<Q, K, Kind, C, S> sealed::Sealed for KeyWindow<'_, Q, K, Kind, C, S>
where
    K: Hash + Eq,
    Q: KeyRef<K> + ?Sized,
    Kind: WindowKind,
    C: Clock,
    S: BuildHasher + Clone,
{
    fn take(&self, cost: u64) -> Result<Taken, AcquireError> {
        let (index, _) = self.limiter.admit(self.key, cost, 0)?;
        Ok(Taken::window(index, cost))
    }

    fn take_within(
        &self,
        cost: u64,
        max_wait: Duration,
    ) -> Result<(Taken, Duration), AcquireError> {
        let slack = crate::clock::saturating_nanos(max_wait);
        let (index, wait) = self.limiter.admit(self.key, cost, slack)?;
        Ok((Taken::window(index, cost), Duration::from_nanos(wait)))
    }

    fn undo(&self, taken: &Taken) {
        if let Some(index) = taken.window_index() {
            self.limiter.give_back(self.key, index, taken.tokens);
        }
    }

    fn debit(&self, tokens: u64) {
        self.limiter.debit(self.key, tokens);
    }

    fn capacity(&self) -> u64 {
        self.limiter.quota.limit()
    }

    fn identity(&self) -> Identity {
        let key = self.limiter.table.exact.hasher().hash_one(self.key);
        Identity::of_key(self.limiter, key)
    }
}

impl<Q, K, Kind, C, S> Advertised for KeyWindow<'_, Q, K, Kind, C, S>
where
    K: Hash + Eq + Send + Sync,
    Q: KeyRef<K> + Sync + ?Sized,
    Kind: WindowKind,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync,
{
    fn shape(&self) -> Shape {
        Shape::from(&self.limiter.quota)
    }

    fn idle_reset(&self) -> Duration {
        let at = self.limiter.now();
        let view = self.limiter.view(self.key, at);
        self.limiter.keys.frame.until_end(&view, at)
    }
}

impl<Q, K, Kind, C, S> Limit for KeyWindow<'_, Q, K, Kind, C, S>
where
    K: Hash + Eq + Send + Sync,
    Q: KeyRef<K> + Sync + ?Sized,
    Kind: WindowKind,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync,
{
    fn retry_after(&self, cost: u64) -> Result<Duration, AcquireError> {
        self.limiter.keys.frame.check_cost(cost)?;
        let frame = &self.limiter.keys.frame;
        let reading = self.limiter.clock.now_nanos();
        let at = frame.elapsed(reading);
        let view = self.limiter.view(self.key, at);
        Ok(frame.retry_after(&view, at, cost, frame.behind(reading)))
    }

    fn available(&self) -> u64 {
        let view = self.limiter.view(self.key, self.limiter.now());
        self.limiter.keys.frame.available(&view)
    }
}

impl<K, Kind, C, S> PerKey for KeyedWindow<K, Kind, C, S>
where
    K: Hash + Eq + Send + Sync,
    Kind: WindowKind,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync,
{
    type Key = K;

    fn key<'a, Q>(&'a self, key: &'a Q) -> impl Advertised + 'a
    where
        Q: KeyRef<K> + Sync + ?Sized,
    {
        KeyedWindow::key(self, key)
    }

    fn shape(&self) -> Shape {
        Shape::from(&self.quota)
    }
}

impl<K, Kind, C, S> KeyTable for KeyedWindow<K, Kind, C, S>
where
    K: Hash + Eq + Send + Sync,
    Kind: WindowKind,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync,
{
    fn len(&self) -> usize {
        KeyedWindow::len(self)
    }

    fn max_keys(&self) -> usize {
        KeyedWindow::max_keys(self)
    }

    fn sweep(&self) -> usize {
        KeyedWindow::sweep(self)
    }

    fn table_stats(&self) -> KeyTableStats {
        KeyedWindow::table_stats(self)
    }
}
