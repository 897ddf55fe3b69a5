//! Serialising the `RateLimit-Policy` and `RateLimit` fields with `sfv`.

use http::HeaderValue;
use sfv::{KeyRef, ListSerializer, StringRef};

use super::seconds::sf_integer;
use super::{PartitionKey, PolicyName, QuotaUnit, RateLimitPolicy};

/// The field name of the policies: `ratelimit-policy`.
pub const RATELIMIT_POLICY: &str = "ratelimit-policy";
/// The field name of the live service limits: `ratelimit`.
pub const RATELIMIT: &str = "ratelimit";

const Q: &KeyRef = KeyRef::constant("q");
const QU: &KeyRef = KeyRef::constant("qu");
const W: &KeyRef = KeyRef::constant("w");
const PK: &KeyRef = KeyRef::constant("pk");
const R: &KeyRef = KeyRef::constant("r");
const T: &KeyRef = KeyRef::constant("t");

/// One member of the `RateLimit` field: what is left of a policy's quota
/// for this client now.
///
/// For a token bucket, `r` is the whole tokens available now and `t` the
/// whole seconds (rounded up) until the next token arrives: within `t` the
/// client can spend no more than `r`, which is the draft's "effective
/// window". [`docs/http.md`](crate::guide::http) has the mapping.
///
/// ```
/// use tollgate::http::{PolicyName, ServiceLimit};
///
/// let limit = ServiceLimit::new(PolicyName::new("burst")?, 0).with_reset_seconds(3);
/// assert_eq!((limit.remaining(), limit.reset_seconds()), (0, Some(3)));
/// # Ok::<(), tollgate::http::HttpError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServiceLimit {
    name: PolicyName,
    remaining: u64,
    reset: Option<u64>,
    partition_key: Option<PartitionKey>,
}

impl ServiceLimit {
    /// `remaining` units left under the policy `name`, with no `t`.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, ServiceLimit};
    ///
    /// assert_eq!(ServiceLimit::new(PolicyName::new("daily")?, 7).reset_seconds(), None);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn new(name: PolicyName, remaining: u64) -> ServiceLimit {
        ServiceLimit {
            name,
            remaining,
            reset: None,
            partition_key: None,
        }
    }

    /// The same limit with an effective window `t` of `seconds`.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, ServiceLimit};
    ///
    /// let limit = ServiceLimit::new(PolicyName::new("daily")?, 7).with_reset_seconds(60);
    /// assert_eq!(limit.reset_seconds(), Some(60));
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn with_reset_seconds(mut self, seconds: u64) -> ServiceLimit {
        self.reset = Some(seconds);
        self
    }

    /// The same limit tagged with a partition key.
    ///
    /// ```
    /// use tollgate::http::{PartitionKeys, PolicyName, ServiceLimit};
    ///
    /// let name = PolicyName::new("per-address")?;
    /// let pk = PartitionKeys::random().key(&name, "198.51.100.20");
    /// let limit = ServiceLimit::new(name, 3).with_partition_key(pk);
    /// assert_eq!(limit.partition_key(), Some(pk));
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn with_partition_key(mut self, key: PartitionKey) -> ServiceLimit {
        self.partition_key = Some(key);
        self
    }

    /// The policy's name.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, ServiceLimit};
    ///
    /// assert_eq!(ServiceLimit::new(PolicyName::new("g")?, 1).name().as_str(), "g");
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn name(&self) -> &PolicyName {
        &self.name
    }

    /// The available quota `r`.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, ServiceLimit};
    ///
    /// assert_eq!(ServiceLimit::new(PolicyName::new("g")?, 4).remaining(), 4);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// The effective window `t`, in seconds, if set.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, ServiceLimit};
    ///
    /// assert_eq!(ServiceLimit::new(PolicyName::new("g")?, 4).reset_seconds(), None);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn reset_seconds(&self) -> Option<u64> {
        self.reset
    }

    /// The partition key, if set.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, ServiceLimit};
    ///
    /// assert_eq!(ServiceLimit::new(PolicyName::new("g")?, 4).partition_key(), None);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn partition_key(&self) -> Option<PartitionKey> {
        self.partition_key
    }
}

/// The `RateLimit-Policy` field value for `policies`, or `None` if there
/// are none (an empty List is not sent at all). Names are Strings; `qu` is
/// omitted for the default unit, requests. Integers above 10^15 - 1, the
/// largest a Structured Field carries, are capped there.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
/// use tollgate::http::{PolicyName, RateLimitPolicy, rate_limit_policy_value};
///
/// let burst = RateLimitPolicy::from_quota(PolicyName::new("burst")?, &Quota::per_second(10)?);
/// let daily = RateLimitPolicy::from_quota(
///     PolicyName::new("daily")?,
///     &Quota::new(1000, 1000, Duration::from_secs(86_400))?,
/// );
/// let value = rate_limit_policy_value(&[burst, daily]).unwrap();
/// assert_eq!(value, r#""burst";q=10;w=1, "daily";q=1000;w=86400"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn rate_limit_policy_value(policies: &[RateLimitPolicy]) -> Option<HeaderValue> {
    let mut list = ListSerializer::new();
    for policy in policies {
        let mut params = list
            .bare_item(name_item(policy.name()))
            .parameter(Q, sf_integer(policy.quota()));
        if policy.unit() != QuotaUnit::Requests {
            params = params.parameter(QU, StringRef::constant(policy.unit().as_str()));
        }
        if let Some(window) = policy.window_seconds() {
            params = params.parameter(W, sf_integer(window));
        }
        if let Some(pk) = policy.partition_key() {
            params = params.parameter(PK, &pk.as_bytes()[..]);
        }
        params.finish();
    }
    header_value(list.finish().ok()?)
}

/// The `RateLimit` field value for `limits`, or `None` if there are none.
///
/// ```
/// use tollgate::http::{PolicyName, ServiceLimit, rate_limit_value};
///
/// let burst = ServiceLimit::new(PolicyName::new("burst")?, 0).with_reset_seconds(1);
/// let daily = ServiceLimit::new(PolicyName::new("daily")?, 990).with_reset_seconds(87);
/// assert_eq!(rate_limit_value(&[burst, daily]).unwrap(), r#""burst";r=0;t=1, "daily";r=990;t=87"#);
/// # Ok::<(), tollgate::http::HttpError>(())
/// ```
pub fn rate_limit_value(limits: &[ServiceLimit]) -> Option<HeaderValue> {
    let mut list = ListSerializer::new();
    for limit in limits {
        let mut params = list
            .bare_item(name_item(limit.name()))
            .parameter(R, sf_integer(limit.remaining()));
        if let Some(reset) = limit.reset_seconds() {
            params = params.parameter(T, sf_integer(reset));
        }
        if let Some(pk) = limit.partition_key() {
            params = params.parameter(PK, &pk.as_bytes()[..]);
        }
        params.finish();
    }
    header_value(list.finish().ok()?)
}

/// A policy name as an sf-string. `PolicyName` admits only what an
/// sf-string admits, so the fallback is unreachable; it keeps this total.
fn name_item(name: &PolicyName) -> &StringRef {
    StringRef::from_str(name.as_str()).unwrap_or(StringRef::empty())
}

/// sfv writes only visible ASCII and spaces, so this always succeeds.
fn header_value(text: String) -> Option<HeaderValue> {
    HeaderValue::from_str(&text).ok()
}
