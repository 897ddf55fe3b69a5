//! Rules that limit work in flight per key: a permit of a
//! [`KeyedConcurrencyLimiter`] taken for each request the rule applies to,
//! held until the inner service has answered (or the request is dropped),
//! released exactly when it is dropped.

use std::hash::{BuildHasher, Hash};

use http::request::Parts;

use super::cost::CostError;
use super::key::NoKey;
use super::local::WithKey;
use crate::concurrency::{InFlightError, KeyedConcurrencyLimiter};

/// A permit held for a request, its key type erased: dropping it releases
/// its units.
pub(super) type InFlightPermit = Box<dyn Send>;

/// What an in-flight rule's limiter answers for a request.
pub(super) enum InFlightAnswer {
    /// The request has no key: why.
    NoKey(NoKey),
    /// The cost could not be read from the request.
    Cost(CostError),
    /// A cost of 0: nothing to hold, as nothing is charged.
    Nothing,
    /// The permit, held until the inner service answers.
    Permit(InFlightPermit),
    /// No permit: why.
    Refused(InFlightError),
}

/// An in-flight limiter as the layer uses it, its key type erased so that
/// rules over different keys sit in one list.
pub(super) trait InFlightLimiter: Send + Sync {
    /// A permit of the request's cost for its key, the key read first (as
    /// every rule reads it: a request with no key is never asked its
    /// cost).
    fn acquire(
        &self,
        parts: &Parts,
        cost: &dyn Fn(&Parts) -> Result<u64, CostError>,
    ) -> InFlightAnswer;
}

impl<K, S> InFlightLimiter for WithKey<KeyedConcurrencyLimiter<K, S>, K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    fn acquire(
        &self,
        parts: &Parts,
        cost: &dyn Fn(&Parts) -> Result<u64, CostError>,
    ) -> InFlightAnswer {
        let key = match self.key_of(parts) {
            Ok(key) => key,
            Err(missing) => return InFlightAnswer::NoKey(missing),
        };
        match cost(parts) {
            Err(error) => InFlightAnswer::Cost(error),
            Ok(0) => InFlightAnswer::Nothing,
            Ok(weight) => match self.limiter().try_acquire(&key, weight) {
                Ok(permit) => InFlightAnswer::Permit(Box::new(permit)),
                Err(error) => InFlightAnswer::Refused(error),
            },
        }
    }
}
