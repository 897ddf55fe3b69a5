//! The in-process store: the shared budget as this process's own keyed
//! limiter.

use std::hash::BuildHasher;
use std::time::Duration;

use crate::shared::{Grant, Lease, Store};
use crate::{AcquireError, Clock, DefaultClock, KeyedLimiter, Quota};

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

    /// The grant of [`Store::acquire`], without the future.
    fn grant(&self, key: &str, want: u64) -> Result<Grant, AcquireError> {
        // Every key of the limiter has its quota's capacity and refill.
        let capacity = self.buckets.quota().capacity();
        // Nothing granted: the bucket holds less than one token.
        let nothing = |retry_after| Grant {
            refill_interval: self.buckets.quota().refill_interval(),
            remaining: Some(0),
            ..Grant::nothing(retry_after, capacity)
        };
        if want == 0 {
            // Answered without looking at the bucket.
            return Ok(Grant {
                remaining: None,
                ..nothing(Duration::ZERO)
            });
        }
        match self.buckets.grant_up_to(key, want) {
            Ok((tokens, admission, _overflow)) => Ok(Grant {
                tokens,
                retry_after: Duration::ZERO,
                lease: Lease {
                    granted: tokens,
                    at: admission.at,
                },
                // Exact: the state this grant wrote, read at its own tick.
                remaining: Some(
                    self.buckets
                        .quota()
                        .gcra()
                        .available(admission.after, admission.at),
                ),
                ..nothing(Duration::ZERO)
            }),
            Err(AcquireError::Insufficient { retry_after }) => Ok(nothing(retry_after)),
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

    async fn acquire(&self, key: &str, want: u64) -> Result<Grant, AcquireError> {
        self.grant(key, want)
    }

    /// Gives back by the one rule (`KeyedLimiter`'s lease undo, the same
    /// arithmetic as `RedisStore`'s script): at most `unused`, at most
    /// `lease.granted` (itself at most the capacity, as every lease of this
    /// store), and at most the grant's cost less the time held since.
    async fn release(&self, key: &str, lease: Lease, unused: u64) -> Result<(), AcquireError> {
        let granted = lease.granted.min(self.buckets.quota().capacity());
        self.buckets
            .undo_lease(key, granted, lease.at, unused.min(granted));
        Ok(())
    }
}
