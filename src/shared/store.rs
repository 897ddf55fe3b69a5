//! The authoritative side of a shared budget.

use std::future::Future;
use std::time::Duration;

use crate::quota::Quota;

/// What a [`Store`] granted for one lease request.
///
/// ```
/// use std::time::Duration;
/// use tollgate::shared::{Grant, Lease};
///
/// let nothing = Grant::nothing(Duration::from_millis(20), 100);
/// assert!(nothing.is_empty());
/// assert_eq!((nothing.lease, nothing.capacity), (Lease::NONE, 100));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Tokens granted, at most what was asked for. They are already debited
    /// from the shared budget: the caller may spend them, or give them back.
    pub tokens: u64,
    /// When nothing was granted, how long until at least one token could
    /// be; zero otherwise.
    pub retry_after: Duration,
    /// The store's receipt for this grant, needed to give unused tokens back.
    pub lease: Lease,
    /// The key's capacity `B`, the most its bucket ever holds: a cost above
    /// it can never be granted, so a caller refuses it as such
    /// ([`AcquireError::ExceedsCapacity`](crate::AcquireError::ExceedsCapacity))
    /// instead of waiting for a grant that cannot come. Every grant carries
    /// it, empty ones included; `u64::MAX` from a store that cannot tell.
    pub capacity: u64,
    /// How long the store takes to refill one token of this key (the
    /// quota's `1/r`). A node whose grant came back short uses it to wait
    /// until its share of the refill is worth a round trip, instead of
    /// asking again on a fixed beat ([`docs/distributed.md`](crate::guide::distributed), "Pacing");
    /// `Duration::ZERO` from a store that cannot tell.
    pub refill_interval: Duration,
    /// Whole tokens the key's bucket still holds right after this grant,
    /// on the store's clock: `Some(0)` when it was emptied (or nothing was
    /// granted), `None` from a store that cannot tell (a custom store
    /// built on [`Grant::nothing`] says `None` until it sets this) and for
    /// an ask of zero tokens, answered without looking. A
    /// grant of everything asked that left little behind tells a node the
    /// key is near exhaustion as surely as a short grant does: pacing
    /// ([`docs/distributed.md`](crate::guide::distributed), "Pacing") reads it so that nodes asking
    /// for modest leases, always granted in full, still space their asks.
    pub remaining: Option<u64>,
}

impl Grant {
    /// A grant of nothing, with the wait until one token could be granted
    /// and the key's capacity, from a store that cannot tell its refill
    /// interval nor what the bucket holds (set
    /// [`refill_interval`](Self::refill_interval) and
    /// [`remaining`](Self::remaining) if it can).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::shared::Grant;
    ///
    /// assert_eq!(Grant::nothing(Duration::ZERO, 5).tokens, 0);
    /// ```
    pub fn nothing(retry_after: Duration, capacity: u64) -> Grant {
        Grant {
            tokens: 0,
            retry_after,
            lease: Lease::NONE,
            capacity,
            refill_interval: Duration::ZERO,
            remaining: None,
        }
    }

    /// Whether nothing was granted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::shared::{Grant, Lease};
    ///
    /// let grant = Grant {
    ///     tokens: 3,
    ///     retry_after: Duration::ZERO,
    ///     lease: Lease { granted: 3, at: 0 },
    ///     capacity: 10,
    ///     refill_interval: Duration::from_millis(100),
    ///     remaining: Some(7),
    /// };
    /// assert!(!grant.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.tokens == 0
    }
}

/// A store's receipt for a grant: how many tokens it debited and when, in
/// the store's own time (its own units; only the store reads it).
///
/// Giving tokens back needs both: returning a grant's tokens long after it
/// was made must not hand out refill the shared bucket wasted while full,
/// so a store returns at most the unused tokens, and at most the grant's
/// cost less the time held since it (the one rule of [`docs/semantics.md`](crate::guide::semantics),
/// "Giving back").
///
/// ```
/// use tollgate::shared::Lease;
///
/// assert_eq!(Lease::NONE.granted, 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Tokens the grant debited.
    pub granted: u64,
    /// When the store debited them, in the store's time.
    pub at: u64,
}

impl Lease {
    /// The receipt of an empty grant: nothing to give back.
    pub const NONE: Lease = Lease { granted: 0, at: 0 };

    /// Splits off a receipt for `tokens` of this grant (at most what it
    /// still covers), leaving this one covering the rest. A receipt must be
    /// released for at most the tokens it covers, once: releasing the same
    /// receipt twice can return more than the grant's unused tokens. Split
    /// it for partial returns instead.
    ///
    /// ```
    /// use tollgate::shared::Lease;
    ///
    /// let mut lease = Lease { granted: 10, at: 7 };
    /// let part = lease.split_off(4);
    /// assert_eq!((part.granted, lease.granted), (4, 6));
    /// assert_eq!(lease.split_off(100).granted, 6);
    /// ```
    pub fn split_off(&mut self, tokens: u64) -> Lease {
        let part = tokens.min(self.granted);
        self.granted -= part;
        Lease {
            granted: part,
            at: self.at,
        }
    }
}

/// The authoritative bucket of each key of a shared budget.
///
/// Implementations make each operation atomic on the store's side (refill,
/// compare and deduct in one step), keep integer arithmetic, and take time
/// from one clock of their own, never from their callers. The in-process
/// `LocalStore` is the embedded default;
/// `RedisStore` (feature `redis`) shares a budget across processes.
///
/// A call that fails may or may not have reached the store. Callers
/// (`LocalAllowance`) therefore treat a
/// failed `acquire` as possibly spent (its tokens stranded, never
/// re-requested as if lost) and never retry a `release` blindly.
pub trait Store: Send + Sync + 'static {
    /// Why a call failed (unreachable, timed out, refused).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Whether `error` means the store is unreachable (down, timed out, not
    /// answering as a store at all) rather than refusing one key. Only an
    /// unreachable store puts callers under their [`FailurePolicy`](crate::shared::FailurePolicy):
    /// a refusal about one key (a key the store cannot track, a stored
    /// value it did not write) refuses that key alone
    /// ([`BudgetError::StoreRefused`](crate::shared::BudgetError::StoreRefused)),
    /// so a client sending keys the store refuses can neither open other
    /// keys under `Open` nor close them under `Closed`. The default, for a
    /// store that cannot tell, is `true`.
    ///
    /// ```
    /// use tollgate::{AcquireError, Quota};
    /// use tollgate::shared::{LocalStore, Store};
    ///
    /// let full = AcquireError::TooManyKeys { max_keys: 2 };
    /// assert!(!<LocalStore as Store>::unavailable(&full));
    /// ```
    fn unavailable(error: &Self::Error) -> bool {
        let _ = error;
        true
    }

    /// The quota this store gives every key, as this handle knows it now
    /// (after a quota change, the new one): what a rule over the store
    /// advertises, so the quota is given once, to the store.
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate::shared::{LocalStore, Store};
    ///
    /// let store = LocalStore::new(Quota::per_minute(100)?);
    /// assert_eq!(store.quota().capacity(), 100);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn quota(&self) -> Quota;

    /// Refills `key`'s bucket to the store's now and grants up to `want`
    /// tokens of it (`want >= 1`), in one atomic step, telling the key's
    /// capacity ([`Grant::capacity`]) whatever it grants.
    fn acquire(
        &self,
        key: &str,
        want: u64,
    ) -> impl Future<Output = Result<Grant, Self::Error>> + Send;

    /// Gives back `unused` tokens (at most `lease.granted`) of the grant
    /// `lease`, by the one rule of [`docs/semantics.md`](crate::guide::semantics) ("Giving back"): at
    /// most the unused part, and at most the grant's cost less the time
    /// held since it, so refill the shared bucket wasted while full is never
    /// handed out again.
    /// Release a receipt at most once; for partial returns, give each its
    /// own part ([`Lease::split_off`]).
    fn release(
        &self,
        key: &str,
        lease: Lease,
        unused: u64,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Charges `tokens` to `key`'s bucket now, whether or not they fit: the
    /// excess of a cost settled above what was taken for it
    /// ([`KeyedReceipt::settle`](crate::shared::KeyedReceipt::settle)),
    /// into debt that every node's later grants for the key wait out. An
    /// absent key is a full bucket charged the tokens. Never refused for
    /// want of tokens: a debt is how the store learns what was spent.
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate::shared::{LocalStore, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = LocalStore::new(Quota::per_second(10)?);
    /// store.debit("a", 25).await?;
    /// assert_eq!(store.acquire("a", 1).await?.tokens, 0); // 15 in debt
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn debit(&self, key: &str, tokens: u64)
    -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// [`acquire`](Self::acquire) for many keys at once: one outcome per
    /// request, in order. Each request is decided atomically on its own
    /// (never all or nothing across keys). A node with many hot keys
    /// refills them through this, so a store that can batch (Redis:
    /// pipelined calls) answers in one round trip; the default asks one key
    /// after the other.
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate::shared::{LocalStore, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = LocalStore::new(Quota::per_second(10)?);
    /// let grants = store.acquire_many(&[("a", 4), ("b", 20)]).await;
    /// assert_eq!(grants[0].as_ref().map(|g| g.tokens), Ok(4));
    /// assert_eq!(grants[1].as_ref().map(|g| g.tokens), Ok(10));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn acquire_many<'a>(
        &'a self,
        requests: &'a [(&'a str, u64)],
    ) -> impl Future<Output = Vec<Result<Grant, Self::Error>>> + Send + 'a {
        async move {
            let mut grants = Vec::with_capacity(requests.len());
            for &(key, want) in requests {
                grants.push(self.acquire(key, want).await);
            }
            grants
        }
    }
}
