//! A keyed limiter's decisions: admissions, reservations, grants, undos,
//! refunds and the reads of a key's credit, each looked up in the table
//! that keeps its key.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use super::KeyedLimiter;
use super::generations::Held;
use super::hot_keys::Missed;
use super::key_ref::{Find, KeyRef};
use super::key_table::{Located, in_table};
use super::shared_entry::{SharedEntry, Stored};
use crate::clock::Clock;
use crate::error::AcquireError;
use crate::gcra::Gcra;
use crate::limit::Taken;
use crate::state::Admission;
use crate::sync::{Arc, read};
use crate::timeline::Reading;

/// One decision as it was made: the admission, the quota it was decided
/// under, the clock reading, and whether the overflow bucket served it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyDecision {
    pub(crate) admission: Admission,
    pub(crate) gcra: Gcra,
    pub(crate) nanos: u64,
    /// The reading it was decided at: a reading before the limiter's
    /// creation (decided at the creation, `nanos` zero) reports its waits
    /// from the reading.
    reading: Reading,
    overflow: bool,
}

impl KeyDecision {
    pub(super) fn new(admission: Admission, gcra: Gcra, reading: Reading, overflow: bool) -> Self {
        KeyDecision {
            admission,
            gcra,
            nanos: reading.nanos(),
            reading,
            overflow,
        }
    }
}

impl<K: Hash + Eq + Send, C: Clock, S: BuildHasher + Clone> KeyedLimiter<K, C, S> {
    /// Takes `cost` tokens from `key`'s bucket now, or refuses without
    /// spending anything; see [`Limit::try_acquire`](crate::Limit::try_acquire).
    /// A new key at the cap gets the [`AtCapacity`](super::AtCapacity) policy.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(1)?)
    ///     .clock(ManualClock::new())
    ///     .build::<u32>();
    /// limiter.try_acquire(&1, 1)?;
    /// assert!(limiter.try_acquire(&1, 1).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q, cost: u64) -> Result<(), AcquireError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        self.acquire_within(key, cost, Duration::ZERO, drop)
    }

    /// Takes `cost` tokens from `key`'s bucket now and returns how long to
    /// wait before using them, if that wait is at most `max_wait`; see
    /// [`Limit::reserve`](crate::Limit::reserve).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(2)?)
    ///     .clock(ManualClock::new())
    ///     .build::<u32>();
    /// limiter.try_acquire(&1, 2)?;
    /// assert_eq!(limiter.reserve(&1, 1, Duration::from_secs(1))?, Duration::from_millis(500));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve<Q>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Duration, AcquireError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        self.acquire_within(key, cost, max_wait, |decided| decided.wait())
    }

    /// Takes `cost` tokens from `key`'s bucket and waits until they may be
    /// used; see [`Limit::acquire`](crate::Limit::acquire)
    /// (first come, first served; dropping the future gives the
    /// reservation back).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
    /// let limiter = KeyedLimiter::builder(Quota::per_second(4)?).clock(ManualClock::new()).build::<u32>();
    /// limiter.acquire(&1, 4, Duration::ZERO).await?;
    /// let started = tokio::time::Instant::now();
    /// limiter.acquire(&1, 1, Duration::from_secs(1)).await?;
    /// assert_eq!(started.elapsed(), Duration::from_millis(250));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tokio")]
    pub async fn acquire<Q>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Duration,
    ) -> Result<(), AcquireError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        crate::waiting::acquire(&self.key(key), cost, max_wait).await
    }

    /// The one admission path: `cost` tokens with up to `max_wait` of
    /// delay, on the key's cached entry if this thread caches it (see
    /// `hot_keys.rs`), in the table otherwise; `done` makes the caller's
    /// outcome of it (see `decide_in`).
    // Always inlined, as `decide_in` and the lookup in the cache are: out of
    // line, each hands its decision back through memory.
    #[inline(always)]
    pub(super) fn acquire_within<Q, R>(
        &self,
        key: &Q,
        cost: u64,
        max_wait: Duration,
        done: impl Fn(KeyDecision) -> R,
    ) -> Result<R, AcquireError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        let Located::Exact(key) = self.table.locate(key) else {
            return in_table!(self.table, key, |table| self.decide_in(
                table,
                key,
                cost,
                #[inline(always)]
                |held, now, reading| admit_within(held, now, reading, cost, max_wait),
                &done
            ));
        };
        let hash = rustc_hash::FxBuildHasher.hash_one(key);
        let missed = match self.hot.find(hash, key) {
            Ok(hit) => {
                let reading = self.timeline.read();
                let held = hit.shared().held();
                match admit_within(
                    held,
                    held.gcra.ticks(reading.nanos()),
                    reading,
                    cost,
                    max_wait,
                ) {
                    Ok(admission) => {
                        return Ok(done(KeyDecision::new(admission, held.gcra, reading, false)));
                    }
                    // Refused on a sealed word: the entry left the table.
                    Err(_) if hit.shared().is_sealed() => hit.evict(),
                    Err(refused) => return Err(refused),
                }
            }
            Err(missed) => missed,
        };
        // Cached before the decision, not after: filling runs the key's
        // code (`Hash`, `Eq`, `Clone`, an evicted copy's `Drop`), and a
        // panic after the decision would lose its outcome.
        if missed == Missed::Twice {
            let counters = &self.table.counters;
            self.hot
                .fill(hash, key, || self.share(key), || counters.cached());
        }
        self.decide_in(
            &self.table.exact,
            key,
            cost,
            #[inline(always)]
            |held, now, reading| admit_within(held, now, reading, cost, max_wait),
            done,
        )
    }

    /// `key`'s entry in the table of exact keys, shared with a thread's
    /// cache (moved to the heap if it was inline, under the shard's write
    /// lock), with its generation's quota read under the lock. None for a
    /// key the table does not hold.
    #[cold]
    fn share<Q: Find<K> + ?Sized>(&self, key: &Q) -> Option<SharedEntry> {
        // A key the table does not hold (refused at the cap, or served by
        // the overflow bucket) costs a read lock, not a write lock.
        if let Stored::Shared(entry) = &*key.find_in(&self.table.exact)? {
            return Some(SharedEntry::new(Arc::clone(entry), &self.generations));
        }
        // No guard of ours is alive: the shard may be locked for writing.
        let mut stored = key.find_mut_in(&self.table.exact)?;
        let entry = stored.share();
        Some(SharedEntry::new(entry, &self.generations))
    }

    /// Grants as many of `want` tokens to `key` as its bucket holds now:
    /// the grant and its decision (the lease's clock reading, the quota it
    /// was granted under), or the wait for one token.
    pub(crate) fn grant_up_to<Q>(
        &self,
        key: &Q,
        want: u64,
    ) -> Result<(u64, KeyDecision), AcquireError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        let mut granted = 0;
        let decided = self.decide(key, 1, |held, now, reading| {
            let (n, admission) = held
                .tat
                .admit_up_to(&held.gcra, now, want, held.generation)
                .map_err(|wait| {
                    let wait = held.gcra.duration(wait);
                    AcquireError::Insufficient {
                        retry_after: reading.behind().map_or(wait, |behind| behind.wait(wait)),
                    }
                })?;
            granted = n;
            Ok(admission)
        })?;
        Ok((granted, decided))
    }

    /// Makes one admission on `key`'s bucket (created if new and `cost` is
    /// within its quota's capacity, or the overflow bucket at the cap) with
    /// `admit(bucket, now)`.
    #[inline]
    fn decide<Q>(
        &self,
        key: &Q,
        cost: u64,
        admit: impl FnOnce(Held<'_>, u64, Reading) -> Result<Admission, AcquireError>,
    ) -> Result<KeyDecision, AcquireError>
    where
        Q: KeyRef<K> + ?Sized,
    {
        in_table!(self.table, key, |table| self.decide_in(
            table,
            key,
            cost,
            admit,
            std::convert::identity
        ))
    }

    /// Gives back `tokens` of what `taken` took from `key`'s bucket (or the
    /// overflow bucket) by the one rule that never mints credit
    /// (`Tat::undo`): nothing if the quota changed since. A key no longer
    /// tracked was full when dropped: nothing is owed. Drops the key's
    /// bucket if the undo left it full.
    pub(crate) fn undo<Q: Find<K> + ?Sized>(&self, key: &Q, taken: &Taken, tokens: u64) {
        let Some(admission) = taken.admission() else {
            return;
        };
        if taken.overflow {
            let overflow = read(&self.overflow);
            let held = self.overflow_held(&overflow);
            let ticks = held.gcra.returned_ticks(admission.tokens, tokens);
            held.tat
                .undo(&held.gcra, admission, ticks, held.generation, || {
                    held.gcra.ticks(self.timeline.nanos())
                });
            return;
        }
        in_table!(self.table, key, |table| {
            self.undo_in(table, key, admission, tokens);
        });
    }

    /// Charges `tokens` to `key`'s bucket whether or not they fit, into
    /// debt (`Tat::debit`), under the quota in force: a settled excess, in
    /// process or at a [`LocalStore`](crate::shared::LocalStore). Decided
    /// as any decision of the key is, so a key dropped since (full when
    /// dropped) is tracked again, in debt, and a key at the cap under
    /// `AtCapacity::SharedOverflow` debits the overflow bucket and raises
    /// the key's overflow floor (a bucket of its own made later starts in
    /// the debt). Whichever bucket the admission came from, the key pays
    /// now where it decides now. False when a new key was refused at the
    /// cap (`AtCapacity::Deny`): the debt is lost, the one case.
    pub(crate) fn debit_key<Q: KeyRef<K> + ?Sized>(&self, key: &Q, tokens: u64) -> bool {
        if tokens == 0 {
            return true;
        }
        // Decided like an admission of one token (which a new key's bucket
        // always has room for), so that the key is found or created, or the
        // overflow bucket chosen, as for any decision; the debit replaces
        // the admission. A new key the table refuses (at its cap, under
        // `AtCapacity::Deny`) cannot be debited.
        self.decide(key, 1, |held, now, _| {
            let ticks = held.gcra.debt_ticks(tokens);
            // A keyed bucket's word is never sealed (a quota change
            // converts it under the shard's write lock): the debit lands.
            let (before, after) = held.tat.debit(ticks, || now).unwrap_or((0, 0));
            Ok(Admission {
                before,
                after,
                at: now,
                tokens,
                cost_ticks: ticks,
                generation: held.generation,
            })
        })
        .is_ok()
    }

    /// Gives back `unused` of a store lease of `granted` tokens admitted at
    /// the clock reading `at_nanos` to `key`'s bucket, by the inexact half
    /// of the same rule (a lease does not record the state its admission
    /// wrote); nothing if it may have been granted under an earlier quota.
    pub(crate) fn undo_lease(&self, key: &str, granted: u64, at_nanos: u64, unused: u64)
    where
        K: Borrow<str>,
    {
        in_table!(
            self.table,
            key,
            |table| if let Some(entry) = table.get(key) {
                // Read under the shard lock, after any conversion of the bucket.
                if !self.generations.lease_is_current(at_nanos) {
                    return;
                }
                let Held { tat, gcra, .. } = entry.held(&self.generations);
                let granted = granted.min(gcra.capacity());
                let (cost, returned) = (
                    gcra.returned_ticks(granted, granted),
                    gcra.returned_ticks(granted, unused.min(granted)),
                );
                tat.undo_inexact(&gcra, gcra.ticks(at_nanos), cost, returned, || {
                    gcra.ticks(self.timeline.nanos())
                });
            }
        );
    }

    /// Returns `cost` tokens to `key`'s bucket unconditionally: a trusted
    /// operation, like [`TokenBucket::refund`](crate::TokenBucket::refund),
    /// for a caller who knows what it holds. To give back an admission,
    /// take it as a [`Receipt`](crate::Receipt) of
    /// [`key`](Self::key) and undo it, the rule that never mints credit.
    /// A key no longer tracked was full when it was dropped, so there is
    /// nothing to return to and this is a no-op (as it is for tokens taken
    /// from the overflow bucket).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(3)?)
    ///     .clock(ManualClock::new())
    ///     .build::<u32>();
    /// limiter.try_acquire(&1, 3)?;
    /// limiter.refund(&1, 2);
    /// assert_eq!(limiter.available(&1), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund<Q>(&self, key: &Q, cost: u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        in_table!(
            self.table,
            key,
            |table| if let Some(entry) = table.get(key) {
                let held = entry.held(&self.generations);
                held.tat.refund(&held.gcra, cost);
            }
        );
    }

    /// Whole tokens available to `key` now. A key not tracked reports the
    /// credit a new bucket would start with; asking creates nothing.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(5)?).build::<u32>();
    /// assert_eq!(limiter.available(&9), 5);
    /// assert!(limiter.is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn available<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.available_of(key)
    }

    /// [`Self::available`] for any lookup form, the key's limit's included.
    pub(crate) fn available_of<Q: Find<K> + ?Sized>(&self, key: &Q) -> u64 {
        in_table!(self.table, key, |table| match key.find_in(table) {
            Some(entry) => {
                let held = entry.held(&self.generations);
                held.tat
                    .available(&held.gcra, held.gcra.ticks(self.timeline.nanos()))
            }
            None => {
                let (gcra, tat, now) = self.unknown_in(table, key, self.timeline.nanos());
                gcra.available(tat, now)
            }
        })
    }

    /// How long until `key` could take `cost` tokens, zero if it could now.
    /// Spends and creates nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(2)?)
    ///     .clock(ManualClock::new())
    ///     .build::<u32>();
    /// limiter.try_acquire(&1, 2)?;
    /// assert_eq!(limiter.retry_after(&1, 1)?, Duration::from_millis(500));
    /// assert_eq!(limiter.retry_after(&2, 1)?, Duration::ZERO);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retry_after<Q>(&self, key: &Q, cost: u64) -> Result<Duration, AcquireError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.retry_after_of(key, cost)
    }

    /// [`Self::retry_after`] for any lookup form, the key's limit's included.
    pub(crate) fn retry_after_of<Q: Find<K> + ?Sized>(
        &self,
        key: &Q,
        cost: u64,
    ) -> Result<Duration, AcquireError> {
        in_table!(self.table, key, |table| {
            let found = key.find_in(table);
            let reading = self.timeline.read();
            let nanos = reading.nanos();
            let wait = match found {
                Some(entry) => {
                    let Held { tat, gcra, .. } = entry.held(&self.generations);
                    let now = gcra.ticks(nanos);
                    gcra.duration(tat.wait_for(&gcra, now, gcra.cost_ticks(cost)?))
                }
                None => {
                    let (gcra, tat, now) = self.unknown_in(table, key, nanos);
                    let wait = gcra.decide(tat, now, gcra.cost_ticks(cost)?, 0);
                    gcra.duration(wait.err().unwrap_or(0))
                }
            };
            Ok(reading.behind().map_or(wait, |behind| behind.wait(wait)))
        })
    }
}

/// Admits `cost` tokens on `held` at the tick `now` of the clock `reading`
/// with up to `max_wait` of delay: a reading before the limiter's creation
/// is decided at the creation, with the wait's budget less the gap.
#[inline(always)]
fn admit_within(
    held: Held<'_>,
    now: u64,
    reading: Reading,
    cost: u64,
    max_wait: Duration,
) -> Result<Admission, AcquireError> {
    let slack = match reading.behind() {
        None => held.gcra.ticks_of(max_wait),
        Some(behind) => {
            std::hint::cold_path();
            held.gcra.ticks_of(behind.budget(max_wait))
        }
    };
    held.admit(now, cost, slack)
        .map_err(|refused| match reading.behind() {
            None => refused,
            Some(behind) => behind.refusal(refused, max_wait),
        })
}

impl KeyDecision {
    /// How long the caller must wait before its tokens exist, from the
    /// reading.
    pub(super) fn wait(&self) -> Duration {
        let wait = self.gcra.duration(self.admission.wait(&self.gcra));
        match self.reading.behind() {
            None => wait,
            Some(behind) => {
                std::hint::cold_path();
                behind.wait(wait)
            }
        }
    }

    /// What [`Limit`](crate::Limit)'s layers keep of it to undo it.
    pub(super) fn taken(&self, tokens: u64) -> Taken {
        Taken {
            overflow: self.overflow,
            ..Taken::own(self.admission, tokens)
        }
    }
}
