//! Rules over in-process limits: a global [`Limit`](crate::Limit) (a
//! bucket, a window counter, a striped bucket) as it is, or one key of a
//! keyed limiter ([`PerKey`]: buckets or windows per key). A window is a
//! limit like a bucket, so both live here: taking, undoing, settling and
//! waiting are the limit's own.

use std::hash::Hash;
use std::time::Duration;

use http::request::Parts;

use super::key::{IntoKey, KeyFn, NoKey};
use super::kind::{Held, Now, RuleKind, Stage};
use super::stash::Stash;
use crate::advertised::{Advertised, Shape};
use crate::error::AcquireError;
use crate::http::refusal::Cause;
use crate::http::{PartitionKey, PartitionKeys, PolicyName};
use crate::keyed::PerKey;
use crate::limit::sealed::Sealed;
use crate::limit::{Identity, Limit};
use crate::sync::unmodelled::Arc;

/// A global rule's limit: one for every request.
pub(super) struct Global<L>(pub(super) Arc<L>);

/// A limiter and the function that takes its key from a request.
pub(super) struct WithKey<L, K> {
    pub(super) limiter: Arc<L>,
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

    /// The request's key, or why it has none.
    pub(super) fn key_of(&self, parts: &Parts) -> Result<K, NoKey> {
        (self.key)(parts)
    }
}

/// A keyed in-process limiter with its key extractor.
pub(super) struct Keyed<L, K>(pub(super) WithKey<L, K>);

/// An in-process rule: the limit a binding's key names, and how it is
/// advertised. Every in-process rule is charged alike ([`RuleKind`] below).
trait InProcess: Send + Sync {
    /// The request's key, into `key`.
    fn bind(&self, parts: &Parts, key: &mut Stash) -> Result<(), NoKey>;
    /// The limit of the key `key` holds.
    fn limit<'a>(&'a self, key: &'a Stash) -> Option<impl Advertised + 'a>;
    fn partition(
        &self,
        key: &Stash,
        keys: &PartitionKeys,
        name: &PolicyName,
    ) -> Option<PartitionKey>;
}

impl<L: Advertised + Send + Sync + 'static> InProcess for Global<L> {
    fn bind(&self, _: &Parts, _: &mut Stash) -> Result<(), NoKey> {
        Ok(())
    }

    fn limit<'a>(&'a self, _: &'a Stash) -> Option<impl Advertised + 'a> {
        Some(&*self.0)
    }

    /// One partition for everyone: there is nothing to tell apart.
    fn partition(&self, _: &Stash, _: &PartitionKeys, _: &PolicyName) -> Option<PartitionKey> {
        None
    }
}

impl<L, K> InProcess for Keyed<L, K>
where
    L: PerKey<Key = K> + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    fn bind(&self, parts: &Parts, key: &mut Stash) -> Result<(), NoKey> {
        *key = Stash::put(self.0.key_of(parts)?);
        Ok(())
    }

    /// The limiter's own view of the key ([`PerKey::key`]).
    fn limit<'a>(&'a self, key: &'a Stash) -> Option<impl Advertised + 'a> {
        Some(PerKey::key(&*self.0.limiter, key.get::<K>()?))
    }

    fn partition(
        &self,
        key: &Stash,
        keys: &PartitionKeys,
        name: &PolicyName,
    ) -> Option<PartitionKey> {
        Some(keys.key(name, key.get::<K>()?))
    }
}

impl<T: InProcess> RuleKind for T {
    fn stage(&self) -> Stage {
        Stage::InProcess
    }

    fn bind(&self, parts: &Parts, held: &mut Held) -> Result<(), NoKey> {
        InProcess::bind(self, parts, &mut held.key)
    }

    fn take(&self, held: &mut Held, cost: u64, _: Duration) -> Now {
        let Some(limit) = self.limit(&held.key) else {
            return Now::Refused(Cause::Misconfigured);
        };
        match limit.take(cost) {
            Ok(taken) => {
                held.taken = Some(taken);
                Now::Taken
            }
            Err(error) => Now::Refused(Cause::Limit(error)),
        }
    }

    fn give_back(&self, held: &mut Held) {
        if let (Some(taken), Some(limit)) = (held.taken.take(), self.limit(&held.key)) {
            limit.undo(&taken);
        }
    }

    fn settle(&self, held: &mut Held, cost: u64, actual: u64) {
        let taken = held.taken.take();
        let Some(limit) = self.limit(&held.key) else {
            return;
        };
        match taken {
            Some(taken) => limit.settle(&taken, actual),
            // A cost of 0 took nothing: an actual cost is all excess,
            // charged as any excess is.
            None if actual > 0 && cost == 0 => limit.debit(actual),
            None => {}
        }
    }

    fn live(&self, held: &Held) -> Option<(u64, Duration)> {
        let limit = self.limit(&held.key)?;
        let available = limit.available();
        Some((available, next_unit(&limit, available)))
    }

    fn shape(&self, held: &Held) -> Option<Shape> {
        Some(self.limit(&held.key)?.shape())
    }

    fn look(&self, held: &Held, cost: u64) -> Option<Result<Duration, AcquireError>> {
        Some(self.limit(&held.key)?.retry_after(cost))
    }

    fn identity(&self, held: &Held) -> Option<Identity> {
        Some(self.limit(&held.key)?.identity())
    }

    fn partition(
        &self,
        held: &Held,
        keys: &PartitionKeys,
        name: &PolicyName,
    ) -> Option<PartitionKey> {
        InProcess::partition(self, &held.key, keys, name)
    }
}

/// The wait until a limit holds one more whole unit than it does: the
/// draft's effective window, within which no more than what is available
/// can be spent. A limit with all of its quota available gains nothing
/// until it moves on its own: a full bucket's next token takes one
/// emission interval once spent from, a window counter's counts move at
/// the window's end.
fn next_unit(limit: &impl Advertised, available: u64) -> Duration {
    if available < limit.shape().quota {
        return limit.retry_after(available + 1).unwrap_or(Duration::ZERO);
    }
    limit.idle_reset()
}
