//! Rules that limit work in flight per key: a permit of a
//! [`KeyedConcurrencyLimiter`] taken for each request the rule applies to,
//! held until the inner service has answered (or the request is dropped),
//! released exactly when it is dropped. A permit charges no token: it
//! gives nothing back, settles nothing and advertises nothing.

use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use super::key::NoKey;
use super::kind::{Held, Now, RuleKind, Stage};
use super::stash::Stash;
use super::token::WithKey;
use crate::advertised::Shape;
use crate::concurrency::KeyedConcurrencyLimiter;
use crate::error::AcquireError;
use crate::http::refusal::Cause;
use crate::http::{PartitionKey, PartitionKeys, PolicyName};
use crate::limit::Identity;
use http::request::Parts;

/// An in-flight rule's limiter with its key extractor.
pub(super) struct InFlight<K, S>(pub(super) WithKey<KeyedConcurrencyLimiter<K, S>, K>);

impl<K, S> RuleKind for InFlight<K, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    fn stage(&self) -> Stage {
        Stage::InFlight
    }

    fn bind(&self, parts: &Parts) -> Result<Held, NoKey> {
        self.0.key_of(parts).map(Held::key)
    }

    fn take(&self, held: &mut Held, cost: u64, _: Duration) -> Now {
        let Some(key) = held.key.get::<K>() else {
            return Now::Refused(Cause::Misconfigured);
        };
        match self.0.limiter.try_acquire(key, cost) {
            Ok(permit) => {
                held.more = Stash::put(permit);
                Now::Taken
            }
            Err(error) => Now::Refused(Cause::InFlight(error)),
        }
    }

    /// Releases the permit: the work it counted is no longer in flight.
    fn give_back(&self, held: &mut Held) {
        held.more = Stash::Empty;
    }

    fn settle(&self, _: &mut Held, _: u64, _: u64) {}

    fn settles(&self) -> bool {
        false
    }

    fn advertises(&self) -> bool {
        false
    }

    fn held_until_response(&self) -> bool {
        true
    }

    fn live(&self, _: &Held) -> Option<(u64, Duration)> {
        None
    }

    fn shape(&self, _: &Held) -> Option<Shape> {
        None
    }

    fn look(&self, _: &Held, _: u64) -> Option<Result<Duration, AcquireError>> {
        // Work in flight ends when it ends: no wait is known.
        None
    }

    fn identity(&self, _: &Held) -> Option<Identity> {
        None
    }

    fn partition(&self, _: &Held, _: &PartitionKeys, _: &PolicyName) -> Option<PartitionKey> {
        None
    }
}
