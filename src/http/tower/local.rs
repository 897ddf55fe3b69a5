//! In-process limiters as a request sees them: a global limit as it is, a
//! keyed limiter bound to the request's key for the length of a call
//! (borrowing the key, so binding allocates nothing), or owning its key
//! once a charge is kept past the call.

use std::hash::Hash;
use std::time::Duration;

use http::request::Parts;

use super::key::{IntoKey, KeyFn, NoKey};
use crate::advertised::{Advertised, Shape};
use crate::error::AcquireError;
use crate::http::{PartitionKey, PartitionKeys, PolicyName};
use crate::keyed::{OwnedKey, PerKey};
use crate::limit::sealed::Sealed;
use crate::limit::{Identity, Limit, Taken};
use crate::sync::unmodelled::Arc;

/// An in-process limiter that can be bound to one request's key, for a
/// continuation answering `Out` (what the layer decides: generic, so that
/// this module knows nothing of decisions).
pub(super) trait LocalLimiter<Out>: Send + Sync {
    /// Calls `then` with this limit bound to the request's key, or with
    /// why the request has none, and answers what `then` does.
    /// The binding lives on this call's stack and borrows the key, so
    /// binding allocates nothing; a charge that must outlive the call
    /// takes an owned copy ([`RequestLimit::to_owned`]).
    fn bind(&self, parts: &Parts, then: &mut Bound<'_, Out>) -> Out;
}

/// What a bound limit is handed to: the limit, or why the request has no
/// key for it.
pub(super) type Bound<'a, Out> = dyn FnMut(Result<&dyn RequestLimit, NoKey>) -> Out + 'a;

/// A limit bound to one request: the limiter and, if keyed, the key. Its
/// take, undo, wait, availability and what it advertises are those of a
/// [`Limit`].
pub(super) trait RequestLimit: Advertised + Send {
    fn partition(&self, keys: &PartitionKeys, name: &PolicyName) -> Option<PartitionKey>;
    /// This binding, owning its key: for a charge kept until its response
    /// (to give back, or to advertise), or one that waits for a store.
    fn to_owned(&self) -> Box<dyn RequestLimit>;
}

/// A global rule binds its limit as it is: there is no key.
impl<L: Advertised + Send + 'static, Out> LocalLimiter<Out> for Arc<L> {
    fn bind(&self, _: &Parts, then: &mut Bound<'_, Out>) -> Out {
        then(Ok(self))
    }
}

impl<L: Advertised + Send + 'static> RequestLimit for Arc<L> {
    fn partition(&self, _: &PartitionKeys, _: &PolicyName) -> Option<PartitionKey> {
        // One partition for everyone: there is nothing to tell apart.
        None
    }
    fn to_owned(&self) -> Box<dyn RequestLimit> {
        Box::new(Arc::clone(self))
    }
}

/// A keyed limiter (of tokens, or of work in flight) and the function that
/// takes its key from a request.
pub(super) struct WithKey<L, K> {
    limiter: Arc<L>,
    key: Box<KeyFn<K>>,
}

impl<L, K> WithKey<L, K> {
    pub(super) fn new<R: IntoKey<K>>(
        limiter: Arc<L>,
        key: impl Fn(&Parts) -> R + Send + Sync + 'static,
    ) -> Self {
        WithKey {
            limiter,
            key: Box::new(move |parts: &Parts| key(parts).into_key()),
        }
    }

    pub(super) fn limiter(&self) -> &L {
        &self.limiter
    }

    /// The request's key, or why it has none.
    pub(super) fn key_of(&self, parts: &Parts) -> Result<K, NoKey> {
        (self.key)(parts)
    }
}

impl<L, K, Out> LocalLimiter<Out> for WithKey<L, K>
where
    L: PerKey<Key = K> + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn bind(&self, parts: &Parts, then: &mut Bound<'_, Out>) -> Out {
        match (self.key)(parts) {
            Ok(key) => then(Ok(&KeyBorrowed {
                limiter: &self.limiter,
                key: &key,
            })),
            Err(missing) => then(Err(missing)),
        }
    }
}

/// One key of a keyed limiter, borrowed for the length of a call.
struct KeyBorrowed<'a, L, K> {
    limiter: &'a Arc<L>,
    key: &'a K,
}

/// The key's limit is the keyed limiter's own view of the key
/// ([`KeyedLimiter::key`](crate::KeyedLimiter::key), [`KeyedWindow::key`](crate::window::KeyedWindow::key)):
/// taking, undoing and waiting are its.
impl<L, K> Sealed for KeyBorrowed<'_, L, K>
where
    L: PerKey<Key = K> + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn take(&self, cost: u64) -> Result<Taken, AcquireError> {
        PerKey::key(&**self.limiter, self.key).take(cost)
    }
    fn take_within(
        &self,
        cost: u64,
        max_wait: Duration,
    ) -> Result<(Taken, Duration), AcquireError> {
        PerKey::key(&**self.limiter, self.key).take_within(cost, max_wait)
    }
    fn undo(&self, taken: &Taken) {
        PerKey::key(&**self.limiter, self.key).undo(taken);
    }
    fn debit(&self, tokens: u64) {
        PerKey::key(&**self.limiter, self.key).debit(tokens);
    }
    fn settle(&self, taken: &Taken, actual: u64) {
        PerKey::key(&**self.limiter, self.key).settle(taken, actual);
    }
    fn capacity(&self) -> u64 {
        PerKey::key(&**self.limiter, self.key).capacity()
    }
    fn identity(&self) -> Identity {
        PerKey::key(&**self.limiter, self.key).identity()
    }
}

impl<L, K> Limit for KeyBorrowed<'_, L, K>
where
    L: PerKey<Key = K> + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn retry_after(&self, cost: u64) -> Result<Duration, AcquireError> {
        PerKey::key(&**self.limiter, self.key).retry_after(cost)
    }
    fn available(&self) -> u64 {
        PerKey::key(&**self.limiter, self.key).available()
    }
}

impl<L, K> Advertised for KeyBorrowed<'_, L, K>
where
    L: PerKey<Key = K> + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn shape(&self) -> Shape {
        PerKey::key(&**self.limiter, self.key).shape()
    }
    fn idle_reset(&self) -> Duration {
        PerKey::key(&**self.limiter, self.key).idle_reset()
    }
}

impl<L, K> RequestLimit for KeyBorrowed<'_, L, K>
where
    L: PerKey<Key = K> + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn partition(&self, keys: &PartitionKeys, name: &PolicyName) -> Option<PartitionKey> {
        Some(keys.key(name, self.key))
    }
    fn to_owned(&self) -> Box<dyn RequestLimit> {
        Box::new(OwnedKey::new(Arc::clone(self.limiter), self.key.clone()))
    }
}

/// A charge kept past the call owns its key ([`OwnedKey`]).
impl<L, K> RequestLimit for OwnedKey<L>
where
    L: PerKey<Key = K> + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn partition(&self, keys: &PartitionKeys, name: &PolicyName) -> Option<PartitionKey> {
        Some(keys.key(name, self.key()))
    }
    fn to_owned(&self) -> Box<dyn RequestLimit> {
        Box::new(self.clone())
    }
}
