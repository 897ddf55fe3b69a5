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
use crate::concurrency::{KeyedConcurrencyLimiter, KeyedPermit};
use crate::error::AcquireError;
use crate::http::refusal::Cause;
use crate::http::{PartitionKey, PartitionKeys, PolicyName};
use crate::limit::Identity;
use http::request::Parts;

/// A request's key of an in-flight rule, and its permit once taken
/// (dropping it releases its units).
struct Slot<K, S>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    key: K,
    permit: Option<KeyedPermit<K, S>>,
}

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

    fn bind(&self, parts: &Parts, held: &mut Held) -> Result<(), NoKey> {
        held.key = Stash::put(Slot::<K, S> {
            key: self.0.key_of(parts)?,
            permit: None,
        });
        Ok(())
    }

    fn take(&self, held: &mut Held, cost: u64, _: Duration) -> Now {
        let Some(slot) = held.key.get_mut::<Slot<K, S>>() else {
            return Now::Refused(Cause::Misconfigured);
        };
        match self.0.limiter.try_acquire(&slot.key, cost) {
            Ok(permit) => {
                slot.permit = Some(permit);
                Now::Taken
            }
            Err(error) => Now::Refused(Cause::InFlight(error)),
        }
    }

    /// Releases the permit: the work it counted is no longer in flight.
    fn give_back(&self, held: &mut Held) {
        if let Some(slot) = held.key.get_mut::<Slot<K, S>>() {
            slot.permit = None;
        }
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
