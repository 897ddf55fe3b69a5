//! What a limit advertises about itself: the RateLimit-Policy member.

use std::num::NonZeroU64;
use std::str::FromStr;

use super::{HttpError, PartitionKey};
use crate::advertised::Shape;
use crate::quota::Quota;
use crate::window::WindowQuota;

/// The name of a quota policy, as sent in the RateLimit fields and the
/// problem body's `violated-policies`.
///
/// The draft makes the name a Structured Field String, so it must be
/// printable ASCII; it is checked once, here, so serialising never fails.
///
/// ```
/// use tollgate::http::PolicyName;
///
/// let name = PolicyName::new("per-address")?;
/// assert_eq!(name.as_str(), "per-address");
/// assert!(PolicyName::new("").is_err());
/// # Ok::<(), tollgate::http::HttpError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyName(String);

impl PolicyName {
    /// `name` if it is non-empty printable ASCII (space to `~`).
    ///
    /// ```
    /// use tollgate::http::PolicyName;
    ///
    /// assert!(PolicyName::new("daily").is_ok());
    /// assert!(PolicyName::new("täglich").is_err());
    /// ```
    pub fn new(name: impl Into<String>) -> Result<PolicyName, HttpError> {
        let name = name.into();
        if name.is_empty() || !name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(HttpError::InvalidPolicyName);
        }
        Ok(PolicyName(name))
    }

    /// The name.
    ///
    /// ```
    /// use tollgate::http::PolicyName;
    ///
    /// assert_eq!(PolicyName::new("burst")?.as_str(), "burst");
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PolicyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a policy's quota counts (the draft's `qu` parameter).
///
/// ```
/// use tollgate::http::QuotaUnit;
///
/// assert_eq!(QuotaUnit::default(), QuotaUnit::Requests);
/// assert_eq!(QuotaUnit::ContentBytes.as_str(), "content-bytes");
/// assert_eq!("concurrent-requests".parse(), Ok(QuotaUnit::ConcurrentRequests));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuotaUnit {
    /// Requests (the draft's default, so it is not sent).
    #[default]
    Requests,
    /// Bytes of request content.
    ContentBytes,
    /// Requests in flight at once.
    ConcurrentRequests,
}

impl QuotaUnit {
    /// The unit as the `qu` parameter spells it.
    ///
    /// ```
    /// use tollgate::http::QuotaUnit;
    ///
    /// assert_eq!(QuotaUnit::Requests.as_str(), "requests");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            QuotaUnit::Requests => "requests",
            QuotaUnit::ContentBytes => "content-bytes",
            QuotaUnit::ConcurrentRequests => "concurrent-requests",
        }
    }
}

impl FromStr for QuotaUnit {
    type Err = ();

    /// A registered unit. The draft's registry table spells the first unit
    /// `request` where its text says `requests`; both are accepted.
    fn from_str(s: &str) -> Result<QuotaUnit, ()> {
        match s {
            "requests" | "request" => Ok(QuotaUnit::Requests),
            "content-bytes" => Ok(QuotaUnit::ContentBytes),
            "concurrent-requests" => Ok(QuotaUnit::ConcurrentRequests),
            _ => Err(()),
        }
    }
}

/// One quota policy as the `RateLimit-Policy` field advertises it: a name,
/// a quota `q` in units `qu`, and a window `w` in seconds.
///
/// [`RateLimitPolicy::from_quota`] maps a token bucket onto the draft's
/// quota-per-window model: `q` is the capacity (the largest burst) and `w`
/// the time the bucket takes to refill from empty to full, rounded up to
/// whole seconds, so `q / w` is the sustained rate (a little under it when
/// `w` was rounded) and `q` the most a client can spend at once.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
/// use tollgate::http::{PolicyName, RateLimitPolicy};
///
/// // A burst of 20, refilled at 10 per second: full again 2 s after empty.
/// let quota = Quota::new(20, 10, Duration::from_secs(1))?;
/// let policy = RateLimitPolicy::from_quota(PolicyName::new("burst")?, &quota);
/// assert_eq!((policy.quota(), policy.window_seconds()), (20, Some(2)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RateLimitPolicy {
    name: PolicyName,
    quota: u64,
    window: Option<NonZeroU64>,
    unit: QuotaUnit,
    partition_key: Option<PartitionKey>,
}

impl RateLimitPolicy {
    /// A policy of `quota` requests with no window.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, RateLimitPolicy};
    ///
    /// let trial = RateLimitPolicy::new(PolicyName::new("trial")?, 1000);
    /// assert_eq!(trial.window_seconds(), None);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn new(name: PolicyName, quota: u64) -> RateLimitPolicy {
        RateLimitPolicy {
            name,
            quota,
            window: None,
            unit: QuotaUnit::Requests,
            partition_key: None,
        }
    }

    /// The policy of a token bucket with `quota`: `q` = capacity, `w` = the
    /// time to refill the whole capacity, rounded up to whole seconds (at
    /// least 1). See the [type](RateLimitPolicy) for the reasoning.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    /// use tollgate::http::{PolicyName, RateLimitPolicy};
    ///
    /// // 1000 a day, all at once if need be.
    /// let daily = Quota::new(1000, 1000, Duration::from_secs(86_400))?;
    /// let policy = RateLimitPolicy::from_quota(PolicyName::new("daily")?, &daily);
    /// assert_eq!(policy.window_seconds(), Some(86_400));
    /// // 3 per second: the 3 tokens take exactly 1 s to refill.
    /// let policy = RateLimitPolicy::from_quota(PolicyName::new("fast")?, &Quota::per_second(3)?);
    /// assert_eq!(policy.window_seconds(), Some(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_quota(name: PolicyName, quota: &Quota) -> RateLimitPolicy {
        RateLimitPolicy::from_shape(name, Shape::from(quota))
    }

    /// The policy of a window counter with `quota`: `q` = the limit, `w` =
    /// the window, rounded up to whole seconds (at least 1). A fixed
    /// window's contract is exactly this; a sliding window's is "`q` in any
    /// window of `w`", which it keeps within the bound of
    /// [`docs/semantics.md`](crate::guide::semantics) ("Windows").
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::WindowQuota;
    /// use tollgate::http::{PolicyName, RateLimitPolicy};
    ///
    /// let hourly = WindowQuota::new(600, Duration::from_secs(3600))?;
    /// let policy = RateLimitPolicy::from_window_quota(PolicyName::new("hourly")?, &hourly);
    /// assert_eq!((policy.quota(), policy.window_seconds()), (600, Some(3600)));
    /// // A window shorter than a second is advertised as one.
    /// let burst = WindowQuota::new(5, Duration::from_millis(100))?;
    /// let policy = RateLimitPolicy::from_window_quota(PolicyName::new("burst")?, &burst);
    /// assert_eq!(policy.window_seconds(), Some(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_window_quota(name: PolicyName, quota: &WindowQuota) -> RateLimitPolicy {
        RateLimitPolicy::from_shape(name, Shape::from(quota))
    }

    /// The policy a limit advertises of itself ([`Shape`]).
    pub(crate) fn from_shape(name: PolicyName, shape: Shape) -> RateLimitPolicy {
        RateLimitPolicy::new(name, 0).with_shape(shape)
    }

    /// The same policy with the quota and window of `shape`.
    pub(crate) fn with_shape(mut self, shape: Shape) -> RateLimitPolicy {
        self.quota = shape.quota;
        self.window = NonZeroU64::new(shape.window_seconds);
        self
    }

    /// The quota and window, if the policy has a window: what the tower
    /// layer compares with its limit's shape.
    #[cfg(feature = "rules")]
    pub(crate) fn shape(&self) -> Option<Shape> {
        self.window_seconds().map(|window_seconds| Shape {
            quota: self.quota,
            window_seconds,
        })
    }

    /// The same policy with a window of `seconds`.
    ///
    /// ```
    /// use std::num::NonZeroU64;
    /// use tollgate::http::{PolicyName, RateLimitPolicy};
    ///
    /// let policy = RateLimitPolicy::new(PolicyName::new("hourly")?, 100)
    ///     .with_window(NonZeroU64::new(3600).unwrap());
    /// assert_eq!(policy.window_seconds(), Some(3600));
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn with_window(mut self, seconds: NonZeroU64) -> RateLimitPolicy {
        self.window = Some(seconds);
        self
    }

    /// The same policy counted in `unit`.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, QuotaUnit, RateLimitPolicy};
    ///
    /// let upload = RateLimitPolicy::new(PolicyName::new("upload")?, 1 << 20)
    ///     .with_unit(QuotaUnit::ContentBytes);
    /// assert_eq!(upload.unit(), QuotaUnit::ContentBytes);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn with_unit(mut self, unit: QuotaUnit) -> RateLimitPolicy {
        self.unit = unit;
        self
    }

    /// The policy's name.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, RateLimitPolicy};
    ///
    /// let policy = RateLimitPolicy::new(PolicyName::new("global")?, 10);
    /// assert_eq!(policy.name().as_str(), "global");
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn name(&self) -> &PolicyName {
        &self.name
    }

    /// The quota `q`, in [`unit`](Self::unit)s.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, RateLimitPolicy};
    ///
    /// assert_eq!(RateLimitPolicy::new(PolicyName::new("g")?, 10).quota(), 10);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// The window `w` in seconds, if the policy has one.
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate::http::{PolicyName, RateLimitPolicy};
    ///
    /// let policy = RateLimitPolicy::from_quota(PolicyName::new("g")?, &Quota::per_second(5)?);
    /// assert_eq!(policy.window_seconds(), Some(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn window_seconds(&self) -> Option<u64> {
        self.window.map(NonZeroU64::get)
    }

    /// The quota unit `qu`.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, QuotaUnit, RateLimitPolicy};
    ///
    /// assert_eq!(RateLimitPolicy::new(PolicyName::new("g")?, 1).unit(), QuotaUnit::Requests);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn unit(&self) -> QuotaUnit {
        self.unit
    }

    /// The same policy tagged with the partition key of the request it is
    /// advertised to (`pk`).
    ///
    /// ```
    /// use tollgate::http::{PartitionKeys, PolicyName, RateLimitPolicy};
    ///
    /// let name = PolicyName::new("per-account")?;
    /// let pk = PartitionKeys::random().key(&name, "alice");
    /// let policy = RateLimitPolicy::new(name, 100).with_partition_key(pk);
    /// assert_eq!(policy.partition_key(), Some(pk));
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn with_partition_key(mut self, key: PartitionKey) -> RateLimitPolicy {
        self.partition_key = Some(key);
        self
    }

    /// The partition key, if tagged.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, RateLimitPolicy};
    ///
    /// assert_eq!(RateLimitPolicy::new(PolicyName::new("g")?, 1).partition_key(), None);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn partition_key(&self) -> Option<PartitionKey> {
        self.partition_key
    }
}
