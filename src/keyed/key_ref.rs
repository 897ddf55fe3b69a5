//! The one bound on the form a keyed limiter's keys are looked up by.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use dashmap::DashMap;
use dashmap::mapref::one::{Ref, RefMut};

/// A form `Q` that keys of type `K` are looked up by: `K` itself, or a
/// borrowed form of it such as `str` for `String` keys. It hashes and
/// compares as `K` does (`K: Borrow<Q>`), and makes the owned key when a
/// new key is stored (`Q: ToOwned<Owned = K>`).
///
/// One name for the bound std spells `K: Borrow<Q>, Q: Hash + Eq +
/// ToOwned<Owned = K>`: implemented for every such pair, never by hand.
///
/// ```
/// use tollgate::{KeyRef, KeyedLimiter, Quota};
///
/// // A key by any form a `String` key can be looked up by.
/// fn charge<Q: KeyRef<String> + ?Sized>(limiter: &KeyedLimiter<String>, key: &Q) -> bool {
///     limiter.try_acquire(key, 1).is_ok()
/// }
/// let limiter = KeyedLimiter::<String>::new(Quota::per_second(1)?);
/// assert!(charge(&limiter, "alice"));
/// assert!(!charge(&limiter, &"alice".to_owned()));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait KeyRef<K>: Find<K> + ToOwned<Owned = K> {}

impl<K, Q> KeyRef<K> for Q
where
    K: Hash + Eq + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
}

mod find {
    use super::*;

    /// The lookups that need `K: Borrow<Self>`, which a bound on `Self`
    /// alone cannot imply: a function bounded by [`KeyRef`](super::KeyRef)
    /// (or by this) looks keys up through these instead of through the map.
    pub trait Find<K>: Hash + Eq {
        /// `self`'s entry in `table`.
        fn find_in<'t, V, H: BuildHasher + Clone>(
            &self,
            table: &'t DashMap<K, V, H>,
        ) -> Option<Ref<'t, K, V>>;

        /// Whether `stored` is this key.
        fn is(&self, stored: &K) -> bool;

        /// `self`'s entry in `table`, held for writing.
        fn find_mut_in<'t, V, H: BuildHasher + Clone>(
            &self,
            table: &'t DashMap<K, V, H>,
        ) -> Option<RefMut<'t, K, V>>;

        /// Removes `self`'s entry from `table` if `drop` says so, and
        /// returns it (for the caller to drop: a key's `Drop` may panic).
        fn remove_in_if<V, H: BuildHasher + Clone>(
            &self,
            table: &DashMap<K, V, H>,
            drop: impl FnOnce(&K, &V) -> bool,
        ) -> Option<(K, V)>;
    }

    impl<K, Q> Find<K> for Q
    where
        K: Hash + Eq + Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        #[inline(always)]
        fn find_in<'t, V, H: BuildHasher + Clone>(
            &self,
            table: &'t DashMap<K, V, H>,
        ) -> Option<Ref<'t, K, V>> {
            table.get(self)
        }

        #[inline(always)]
        fn is(&self, stored: &K) -> bool {
            stored.borrow() == self
        }

        fn find_mut_in<'t, V, H: BuildHasher + Clone>(
            &self,
            table: &'t DashMap<K, V, H>,
        ) -> Option<RefMut<'t, K, V>> {
            table.get_mut(self)
        }

        fn remove_in_if<V, H: BuildHasher + Clone>(
            &self,
            table: &DashMap<K, V, H>,
            drop: impl FnOnce(&K, &V) -> bool,
        ) -> Option<(K, V)> {
            table.remove_if(self, drop)
        }
    }
}

pub(crate) use find::Find;
