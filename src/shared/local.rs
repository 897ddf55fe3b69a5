//! The in-process store: the shared budget as this process's own keyed
//! limiter.

use std::hash::BuildHasher;
use std::time::Duration;

use crate::clock::{Clock, DefaultClock};
use crate::error::AcquireError;
use crate::keyed::KeyedLimiter;
use crate::quota::Quota;
use crate::shared::{Grant, Lease, Store};

/// A [`Store`] in this process: one lock-free bucket per key, from a
/// [`KeyedLimiter`]. The embedded default: everything works with no server,
/// and threads of one process can share a hot budget through local
/// allowances striped over it.
///
/// Tokens granted from the keyed limiter's overflow bucket
/// ([`AtCapacity::SharedOverflow`](crate::AtCapacity::SharedOverflow)) are
/// never given back to it by [`release`](Store::release): under-admission,
/// never over-admission.
///
/// ```
/// use tollgate::Quota;
/// use tollgate::shared::{LocalStore, Store};
///
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let store = LocalStore::new(Quota::per_second(10)?);
/// let grant = store.acquire("customer-7", 4).await?;
/// assert_eq!(grant.tokens, 4);
/// store.release("customer-7", grant.lease, 4).await?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct LocalStore<C = DefaultClock, S = ahash::RandomState> {
    buckets: KeyedLimiter<String, C, S>,
}

impl LocalStore {
    /// A store giving every key `quota`, on the [`DefaultClock`].
    ///
    /// ```
    /// use tollgate::{Quota, shared::LocalStore};
    ///
    /// let store = LocalStore::new(Quota::per_second(100)?);
    /// assert_eq!(store.limiter().quota().capacity(), 100);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota) -> Self {
        LocalStore::from_limiter(KeyedLimiter::new(quota))
    }
}

impl<C: Clock, S: BuildHasher + Clone> LocalStore<C, S> {
    /// A store over a configured keyed limiter (its clock, key cap, sweeps).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota, shared::LocalStore};
    ///
    /// let limiter = KeyedLimiter::builder(Quota::per_second(5)?).clock(ManualClock::new()).build();
    /// let store = LocalStore::from_limiter(limiter);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn from_limiter(buckets: KeyedLimiter<String, C, S>) -> Self {
        LocalStore { buckets }
    }

    /// The keyed limiter holding the budget.
    ///
    /// ```
    /// use tollgate::{Quota, shared::LocalStore};
    ///
    /// let store = LocalStore::new(Quota::per_second(3)?);
    /// assert!(store.limiter().is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn limiter(&self) -> &KeyedLimiter<String, C, S> {
        &self.buckets
    }

    /// Gives every key `quota` from now on, each keeping what it has spent
    /// ([`KeyedLimiter::set_quota`]: the continuity rule of
    /// [`docs/semantics.md`](crate::guide::semantics), "Changing a quota").
    /// Every grant from then on carries the new capacity and refill
    /// interval, which the allowances over this store follow; a lease
    /// granted before the change gives nothing back after it. Unlike
    /// `RedisStore::set_quota`, no generation is needed: the store is this
    /// process, and the change reaches every key before it returns.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, ManualClock, Quota};
    /// use tollgate::shared::{LocalStore, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = KeyedLimiter::builder(Quota::per_second(10)?).clock(ManualClock::new()).build();
    /// let store = LocalStore::from_limiter(limiter);
    /// let before = store.acquire("customer-7", 4).await?;
    /// store.set_quota(Quota::per_second(50)?);
    /// store.release("customer-7", before.lease, 4).await?; // nothing comes back
    /// let after = store.acquire("customer-7", 50).await?;
    /// assert_eq!((after.capacity, after.tokens), (50, 6));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        self.buckets.set_quota(quota);
    }

    /// The grant of [`Store::acquire`], without the future.
    fn grant(&self, key: &str, want: u64) -> Result<Grant, AcquireError> {
        // Every key of the limiter has its quota's capacity and refill (a
        // key not yet converted by a change in progress still has the old
        // quota's capacity, which its grant reports).
        let quota = self.buckets.quota();
        // Nothing granted: the bucket holds less than one token.
        let nothing = |retry_after, capacity| Grant {
            refill_interval: quota.refill_interval(),
            remaining: Some(0),
            ..Grant::nothing(retry_after, capacity)
        };
        if want == 0 {
            // Answered without looking at the bucket.
            return Ok(Grant {
                remaining: None,
                ..nothing(Duration::ZERO, quota.capacity())
            });
        }
        match self.buckets.grant_up_to(key, want) {
            Ok((tokens, decided)) => Ok(Grant {
                tokens,
                retry_after: Duration::ZERO,
                // The clock reading in nanoseconds, which every quota
                // shares: a lease from before a change is told apart by it.
                lease: Lease {
                    granted: tokens,
                    at: decided.nanos,
                },
                // Exact: the state this grant wrote, read at its own tick.
                remaining: Some(
                    decided
                        .gcra
                        .available(decided.admission.after, decided.admission.at),
                ),
                ..nothing(Duration::ZERO, decided.gcra.capacity())
            }),
            Err(AcquireError::Insufficient { retry_after }) => {
                Ok(nothing(retry_after, quota.capacity()))
            }
            Err(other) => Err(other),
        }
    }
}

impl<C, S> Store for LocalStore<C, S>
where
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// A key the limiter cannot track ([`AcquireError::TooManyKeys`]).
    type Error = AcquireError;

    /// Never: the store is this process, so every error it returns (a key
    /// the limiter cannot track) is about one key.
    fn unavailable(_: &AcquireError) -> bool {
        false
    }

    fn quota(&self) -> Quota {
        self.limiter().quota()
    }

    async fn acquire(&self, key: &str, want: u64) -> Result<Grant, AcquireError> {
        self.grant(key, want)
    }

    /// Gives back by the one rule (`KeyedLimiter`'s lease undo, the same
    /// arithmetic as `RedisStore`'s script): at most `unused`, at most
    /// `lease.granted` (itself at most the capacity, as every lease of this
    /// store), and at most the grant's cost less the time held since.
    /// A lease granted before a quota change ([`LocalStore::set_quota`])
    /// gives nothing back, as with `RedisStore`.
    async fn release(&self, key: &str, lease: Lease, unused: u64) -> Result<(), AcquireError> {
        self.buckets
            .undo_lease(key, lease.granted, lease.at, unused);
        Ok(())
    }

    /// Charges the key's bucket into debt (`KeyedLimiter`'s debit, the
    /// arithmetic of `RedisStore`'s script): a key dropped full is tracked
    /// again; at the key cap the overflow bucket takes the debt, or, under
    /// `AtCapacity::Deny`, the debit is refused
    /// ([`AcquireError::TooManyKeys`]) and its tokens counted undebited.
    async fn debit(&self, key: &str, tokens: u64) -> Result<(), AcquireError> {
        if self.buckets.debit_key(key, tokens) {
            Ok(())
        } else {
            Err(AcquireError::TooManyKeys {
                max_keys: self.buckets.max_keys(),
            })
        }
    }
}
