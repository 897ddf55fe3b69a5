//! The keyed family: one trait over every limiter with a limit per key, so
//! what wraps or serves keyed limiters ([`Counted`](crate::Counted), the
//! tower layer's keyed rules) is written once for all of them.

use std::hash::{BuildHasher, Hash};

use crate::advertised::{Advertised, Shape};
use crate::clock::Clock;
use crate::keyed::{KeyRef, KeyedLimiter};

/// A limiter with a [`Limit`](crate::Limit) per key: a [`KeyedLimiter`], a
/// [`KeyedFixedWindow`](crate::KeyedFixedWindow) or a
/// [`KeyedSlidingWindow`](crate::KeyedSlidingWindow), or any of them
/// [`Counted`](crate::Counted). A key's limit is looked up by any form of
/// the key [`KeyRef`] allows, and every key advertises one [`Shape`].
///
/// Open to implement: a collection of limits of your own (buckets made
/// ahead for a fixed set of tenants, say) becomes a keyed limiter by
/// implementing it, countable per key and servable by the tower layer's
/// keyed rules. Its limits are the crate's ([`Limit`](crate::Limit) is sealed), and it
/// looks a key up from any [`KeyRef`] form by `key.to_owned()` (for
/// `Copy` keys, free; for `String` keys, an allocation a lookup).
///
/// ```
/// use tollgate::{Advertised, KeyRef, Limit, PerKey, Quota, Shape, TokenBucket};
///
/// /// Two plans, a bucket each, shared by every tenant on the plan.
/// struct Plans {
///     free: TokenBucket,
///     paid: TokenBucket,
/// }
///
/// impl PerKey for Plans {
///     type Key = u32; // tenant ids; the paid ones are even
///
///     fn key<'a, Q>(&'a self, tenant: &'a Q) -> impl Advertised + 'a
///     where
///         Q: KeyRef<u32> + Sync + ?Sized,
///     {
///         if tenant.to_owned() % 2 == 0 { &self.paid } else { &self.free }
///     }
///
///     fn shape(&self) -> Shape {
///         self.free.shape()
///     }
/// }
///
/// let plans = Plans {
///     free: TokenBucket::new(Quota::per_second(1)?),
///     paid: TokenBucket::new(Quota::per_second(100)?),
/// };
/// assert!(plans.key(&3).try_acquire(1).is_ok());
/// assert!(plans.key(&5).try_acquire(1).is_err()); // the free plan's bucket is shared
/// assert!(plans.key(&4).try_acquire(50).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Written once for any keyed limiter:
///
/// ```
/// use tollgate::{KeyedLimiter, KeyedSlidingWindow, Limit, PerKey, Quota, WindowQuota};
///
/// // Written once, for any keyed limiter.
/// fn charge<L: PerKey<Key = String>>(limiter: &L, user: &str) -> bool {
///     limiter.key(user).try_acquire(1).is_ok()
/// }
/// let buckets = KeyedLimiter::<String>::new(Quota::per_second(1)?);
/// assert!(charge(&buckets, "ann"));
/// assert!(!charge(&buckets, "ann"));
/// let windows = KeyedSlidingWindow::builder(WindowQuota::per_minute(600)?).build_sliding::<String>()?;
/// assert!(charge(&windows, "ann"));
/// assert_eq!(windows.shape().quota(), 600);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait PerKey: Send + Sync {
    /// The key its limits are told apart by.
    type Key;

    /// `key`'s limit: decisions on it are the key's decisions. It must be
    /// the same limit at every call for the same key: a receipt, a
    /// settlement or an [`OwnedKey`](crate::OwnedKey) finds its limit again
    /// by the key, and giving back to another limit than the one that took
    /// would credit it what it never charged.
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, Limit, PerKey, Quota};
    ///
    /// let limiter = KeyedLimiter::<u32>::new(Quota::per_second(1)?);
    /// PerKey::key(&limiter, &7).try_acquire(1)?;
    /// assert!(PerKey::key(&limiter, &7).try_acquire(1).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn key<'a, Q>(&'a self, key: &'a Q) -> impl Advertised + 'a
    where
        Q: KeyRef<Self::Key> + Sync + ?Sized;

    /// What every key's limit advertises now (after a quota change, the new
    /// quota).
    ///
    /// ```
    /// use tollgate::{KeyedLimiter, PerKey, Quota};
    ///
    /// let limiter = KeyedLimiter::<u32>::new(Quota::per_second(5)?);
    /// assert_eq!(limiter.shape().quota(), 5);
    /// limiter.set_quota(Quota::per_second(8)?);
    /// assert_eq!(limiter.shape().quota(), 8);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn shape(&self) -> Shape;
}

impl<K, C, S> PerKey for KeyedLimiter<K, C, S>
where
    K: Hash + Eq + Send + Sync,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync,
{
    type Key = K;

    fn key<'a, Q>(&'a self, key: &'a Q) -> impl Advertised + 'a
    where
        Q: KeyRef<K> + Sync + ?Sized,
    {
        KeyedLimiter::key(self, key)
    }

    fn shape(&self) -> Shape {
        Shape::from(&self.quota())
    }
}
