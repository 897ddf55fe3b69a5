//! How a keyed allowance decides which keys get leases and how much it
//! keeps.

use std::time::Duration;

use crate::keyed::MaxKeys;
use crate::shared::{AllowanceConfig, AllowanceError, FailurePolicy};

/// How a [`KeyedAllowance`](super::KeyedAllowance) serves its keys.
///
/// A key starts **cold**: each request is one store decision, and nothing
/// is leased. A key whose measured demand on this node reaches `hot_at`
/// tokens a second becomes **hot**: it gets a lease pool configured by
/// `allowance` (as a [`LocalAllowance`](crate::shared::LocalAllowance)),
/// and goes cold again, giving its pool back, once its demand falls below
/// `cold_below`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::MaxKeys;
/// use tollgate::shared::{FailurePolicy, KeyedAllowanceConfig};
///
/// let config = KeyedAllowanceConfig {
///     max_keys: MaxKeys::new(50_000)?,
///     ..KeyedAllowanceConfig::new(FailurePolicy::Closed)
/// };
/// assert_eq!((config.hot_at, config.cold_below), (50, 10));
/// assert_eq!(config.sample_every, Duration::from_millis(100));
/// # Ok::<(), tollgate::MaxKeysError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct KeyedAllowanceConfig {
    /// Every key's store timeout and failure policy, and the lease sizing
    /// of hot keys. A cost above its `max_lease` is decided by the store
    /// even for a hot key.
    pub allowance: AllowanceConfig,
    /// Tokens a second (asked for, admitted or not, on this node) at which
    /// a cold key gets a lease pool. At the default 50 with leases of 100
    /// ms of demand, a hot key costs about 10 store calls a second instead
    /// of 50 or more.
    pub hot_at: u32,
    /// Tokens a second below which a hot key gives its pool back. Must be
    /// below `hot_at` ([`AllowanceError::DemandThresholds`]): the gap keeps
    /// a key near a threshold from switching every sample.
    pub cold_below: u32,
    /// Demand is sampled (and smoothed: half old, half new) this often,
    /// which is also when keys switch and idle keys are forgotten. Not zero
    /// ([`AllowanceError::ZeroSampleInterval`]).
    pub sample_every: Duration,
    /// The most keys tracked at once. A key beyond it is served cold and
    /// untracked (its demand unmeasured) until forgetting idle keys makes
    /// room: never refused for want of local room, since the store decides
    /// it. It also bounds the keys of the fallback limiter
    /// ([`FailurePolicy::Fallback`]).
    pub max_keys: MaxKeys,
    /// The most bytes tracked keys may take (their names and entries,
    /// estimated); beyond it as beyond `max_keys`. A key's name is at most
    /// 72 bytes whatever its length (see [`store_key`](super::store_key)).
    pub max_bytes: usize,
    /// The most keys hot at once, each with a pool of up to `max_lease`
    /// tokens and a background task: bounds what a node holds leased and
    /// its tasks. A key past it stays cold.
    pub max_hot_keys: usize,
    /// A cold key asked for nothing this long is forgotten (its demand
    /// starts again from zero); hot keys go cold first.
    pub forget_after: Duration,
}

impl KeyedAllowanceConfig {
    /// Defaults with the given failure policy: hot at 50 tokens a second,
    /// cold below 10, sampled every 100 ms; at most 10 000 keys in 4 MiB,
    /// 1000 of them hot; idle keys forgotten after 10 s; hot keys leased
    /// as [`AllowanceConfig::new`].
    ///
    /// ```
    /// use tollgate::shared::{FailurePolicy, KeyedAllowanceConfig};
    ///
    /// assert_eq!(KeyedAllowanceConfig::new(FailurePolicy::Open).max_hot_keys, 1000);
    /// ```
    pub fn new(on_failure: FailurePolicy) -> Self {
        KeyedAllowanceConfig {
            allowance: AllowanceConfig::new(on_failure),
            hot_at: 50,
            cold_below: 10,
            sample_every: Duration::from_millis(100),
            max_keys: MaxKeys::new(10_000).expect("not zero"),
            max_bytes: 4 << 20,
            max_hot_keys: 1000,
            forget_after: Duration::from_secs(10),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), AllowanceError> {
        self.allowance.validate()?;
        if self.cold_below >= self.hot_at {
            return Err(AllowanceError::DemandThresholds);
        }
        if self.sample_every.is_zero() {
            return Err(AllowanceError::ZeroSampleInterval);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_thresholds_and_intervals_are_typed_errors() {
        let base = KeyedAllowanceConfig::new(FailurePolicy::Closed);
        assert_eq!(base.validate(), Ok(()));
        let equal = KeyedAllowanceConfig {
            cold_below: 50,
            ..base
        };
        assert_eq!(equal.validate(), Err(AllowanceError::DemandThresholds));
        let zero = KeyedAllowanceConfig {
            hot_at: 0,
            cold_below: 0,
            ..base
        };
        assert_eq!(zero.validate(), Err(AllowanceError::DemandThresholds));
        let never = KeyedAllowanceConfig {
            sample_every: Duration::ZERO,
            ..base
        };
        assert_eq!(never.validate(), Err(AllowanceError::ZeroSampleInterval));
        let mut leases = base;
        leases.allowance.min_lease = 0;
        assert_eq!(leases.validate(), Err(AllowanceError::LeaseBounds));
    }
}
