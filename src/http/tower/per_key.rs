//! The keyed limiters a keyed rule can charge: one trait over the keyed
//! bucket and the keyed window counters, so the rule is written once.

use std::hash::{BuildHasher, Hash};

use crate::limit::{Limit, Shape};
use crate::window::{KeyedWindow, WindowKind};
use crate::{Clock, KeyedLimiter};

/// A limiter with a [`Limit`] per key, which
/// [`Rule::keyed`](super::Rule::keyed) charges: a
/// [`KeyedLimiter`] (advertised as its quota), a
/// [`KeyedFixedWindow`](crate::KeyedFixedWindow) or a
/// [`KeyedSlidingWindow`](crate::KeyedSlidingWindow) (advertised as
/// `q = N; w = W`). Sealed.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::http::tower::{PerKey, Rule};
/// use tollgate::http::PolicyName;
/// use tollgate::{KeyedLimiter, KeyedSlidingWindow, Quota, WindowQuota};
///
/// fn per_user<L: PerKey<String>>(limiter: Arc<L>) -> Result<Rule, Box<dyn std::error::Error>> {
///     Ok(Rule::keyed(PolicyName::new("per-user")?, limiter, |parts: &http::request::Parts| {
///         parts.headers.get("x-user")?.to_str().ok().map(str::to_owned)
///     }))
/// }
/// per_user(Arc::new(KeyedLimiter::<String>::new(Quota::per_second(5)?)))?;
/// let hourly = KeyedSlidingWindow::builder(WindowQuota::per_minute(600)?).build_sliding::<String>()?;
/// let rule = per_user(Arc::new(hourly))?;
/// assert_eq!((rule.policy().quota(), rule.policy().window_seconds()), (600, Some(60)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait PerKey<K>: sealed::PerKey<K> + Send + Sync + 'static {}

pub(super) mod sealed {
    use super::*;

    pub trait PerKey<K> {
        /// `key`'s limit.
        fn limit_of<'a>(&'a self, key: &'a K) -> impl Limit + 'a;
        /// What every key's limit advertises now.
        fn shape(&self) -> Shape;
    }
}

impl<K, C, S> PerKey<K> for KeyedLimiter<K, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
}

impl<K, C, S> sealed::PerKey<K> for KeyedLimiter<K, C, S>
where
    K: Hash + Eq + Clone + Send + Sync,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync,
{
    fn limit_of<'a>(&'a self, key: &'a K) -> impl Limit + 'a {
        self.key(key)
    }
    fn shape(&self) -> Shape {
        Shape::of_quota(&self.quota())
    }
}

impl<K, Kind, C, S> PerKey<K> for KeyedWindow<K, Kind, C, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    Kind: WindowKind,
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
}

impl<K, Kind, C, S> sealed::PerKey<K> for KeyedWindow<K, Kind, C, S>
where
    K: Hash + Eq + Clone + Send + Sync,
    Kind: WindowKind,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync,
{
    fn limit_of<'a>(&'a self, key: &'a K) -> impl Limit + 'a {
        self.key(key)
    }
    fn shape(&self) -> Shape {
        Shape::of_window_quota(self.quota())
    }
}
