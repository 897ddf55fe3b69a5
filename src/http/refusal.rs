//! A refused request as an HTTP response: status, Retry-After, the
//! RateLimit fields and a problem+json body.

use std::time::Duration;

use bytes::Bytes;
use http::header::RETRY_AFTER;
use http::{HeaderValue, Response, StatusCode};

use super::fields::{
    RATELIMIT_NAME, RATELIMIT_POLICY_NAME, rate_limit_policy_value, rate_limit_value,
};
use super::problem::{self, body};
use super::seconds::SF_INTEGER_MAX;
use super::{PolicyName, ProblemType, RateLimitPolicy, ServiceLimit, delay_seconds};
use crate::concurrency::InFlightError;
use crate::error::AcquireError;
use crate::hierarchy::HierarchyError;

/// The Retry-After of a 503 whose cause has no wait of its own (a store
/// that is down, a key table that is full): long enough not to hammer a
/// struggling server, short enough to recover quickly. Override with
/// [`Refusal::with_retry_after`].
pub const DEFAULT_UNAVAILABLE_RETRY: Duration = Duration::from_secs(1);

/// Why a request was refused, as the HTTP side answers it: a limit's own
/// refusal, or what surrounds the limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// A limit refused.
    Limit(AcquireError),
    /// A shared budget's store is unreachable, or refused the key.
    // Only shared budgets (feature `tokio`) are refused so.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    Store,
    /// The server's configuration cannot charge the request (a chain too
    /// long to take).
    Misconfigured,
    /// An in-flight limit refused a permit.
    InFlight(InFlightError),
}

impl Cause {
    /// The wait after which the request would fit, if one exists.
    #[cfg(feature = "rules")]
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            Cause::Limit(error) => error.retry_after(),
            // Work in flight ends when it ends: no wait is known.
            Cause::Store | Cause::Misconfigured | Cause::InFlight(_) => None,
        }
    }
}

#[cfg(feature = "tokio")]
impl From<crate::shared::BudgetError> for Cause {
    fn from(error: crate::shared::BudgetError) -> Cause {
        use crate::shared::BudgetError;
        match error {
            BudgetError::Limit(error) => Cause::Limit(error),
            BudgetError::StoreUnavailable | BudgetError::StoreRefused => Cause::Store,
        }
    }
}

/// A refusal, ready to become a response.
///
/// | refusal | status | problem type | Retry-After |
/// |---|---|---|---|
/// | `Insufficient { retry_after }` | 429 | quota-exceeded | `retry_after`, rounded up |
/// | `ExceedsCapacity` | 413 | quota-exceeded | none: waiting cannot help |
/// | `TooManyKeys`, a shared budget's `StoreUnavailable` and `StoreRefused`, load shedding | 503 | temporary-reduced-capacity | 1 s unless set |
/// | `ZeroCost` (a mis-computed cost), a chain's `TooManySteps`: the server's bug | 500 | about:blank | none |
/// | in flight: `Full` | 429 | quota-exceeded | none: work in flight ends when it ends |
/// | in flight: `ExceedsLimit` | 413 | quota-exceeded | none |
/// | in flight: `TooManyKeys` | 503 | temporary-reduced-capacity | 1 s |
///
/// Every response carries `Cache-Control: no-store` (a refusal is about this
/// client at this moment, and a cache must not replay it to anyone) and a
/// problem+json body with `type`, `title`, `status`, `detail` and, for the
/// rate-limit types, `violated-policies`. The RateLimit fields are added
/// when policies or service limits are given. Retry-After is never earlier
/// than the effective window `t` of a violated policy, as the draft asks.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{AcquireError, Quota};
/// use tollgate::http::{PolicyName, RateLimitPolicy, Refusal};
///
/// let policy = RateLimitPolicy::from_quota(PolicyName::new("burst")?, &Quota::per_second(10)?);
/// let refused = AcquireError::Insufficient { retry_after: Duration::from_millis(1500) };
/// let response = Refusal::from_acquire(&refused, &policy).into_response();
/// assert_eq!(response.status(), 429);
/// assert_eq!(response.headers()["retry-after"], "2");
/// assert_eq!(response.headers()["cache-control"], "no-store");
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Refusal {
    status: StatusCode,
    kind: ProblemType,
    title: &'static str,
    detail: String,
    retry_after: Option<Duration>,
    violated: Vec<PolicyName>,
    policies: Vec<RateLimitPolicy>,
    limits: Vec<ServiceLimit>,
}

impl Refusal {
    /// The refusal of one limit, advertised as `policy` (which goes into
    /// `violated-policies` and the `RateLimit-Policy` field).
    ///
    /// ```
    /// use tollgate::AcquireError;
    /// use tollgate::http::{PolicyName, RateLimitPolicy, Refusal};
    ///
    /// let policy = RateLimitPolicy::new(PolicyName::new("global")?, 100);
    /// let refusal = Refusal::from_acquire(&AcquireError::TooManyKeys { max_keys: 10 }, &policy);
    /// assert_eq!(refusal.status(), 503);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn from_acquire(error: &AcquireError, policy: &RateLimitPolicy) -> Refusal {
        Refusal::of_policy(Cause::Limit(*error), policy)
    }

    /// The refusal of a shared budget, advertised as `policy`: a limit's
    /// refusal as [`from_acquire`](Self::from_acquire) answers it; a store
    /// that is down or refuses the key a 503, the client having done
    /// nothing wrong.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, RateLimitPolicy, Refusal};
    /// use tollgate::shared::BudgetError;
    ///
    /// let policy = RateLimitPolicy::new(PolicyName::new("fleet")?, 100);
    /// let refusal = Refusal::from_budget(&BudgetError::StoreUnavailable, &policy);
    /// assert_eq!(refusal.status(), 503);
    /// assert_eq!(refusal.retry_after_seconds(), Some(1));
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    #[cfg(feature = "tokio")]
    pub fn from_budget(error: &crate::shared::BudgetError, policy: &RateLimitPolicy) -> Refusal {
        Refusal::of_policy(Cause::from(*error), policy)
    }

    /// The refusal of an in-flight limit named `name`: too much of its work
    /// in progress is a 429 without Retry-After (no wait is known: work
    /// ends when it ends), a weight above the limit a 413, a full table of
    /// keys in flight a 503. The name goes into `violated-policies`; no
    /// `RateLimit-Policy` is written, since an in-flight limit has no
    /// window for its `w`.
    ///
    /// ```
    /// use tollgate::concurrency::ConcurrencyLimiter;
    /// use tollgate::http::{PolicyName, Refusal};
    ///
    /// let uploads = ConcurrencyLimiter::new(1)?;
    /// let _first = uploads.try_acquire(1)?;
    /// let refused = uploads.try_acquire(1).unwrap_err();
    /// let refusal = Refusal::from_in_flight(&refused, &PolicyName::new("uploads")?);
    /// assert_eq!(refusal.status(), 429);
    /// assert_eq!(refusal.retry_after_seconds(), None);
    /// assert_eq!(refusal.violated()[0].as_str(), "uploads");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_in_flight(error: &InFlightError, name: &PolicyName) -> Refusal {
        Refusal::of(Cause::InFlight(*error), name)
    }

    fn of_policy(cause: Cause, policy: &RateLimitPolicy) -> Refusal {
        let mut refusal = Refusal::of(cause, policy.name());
        refusal.policies.push(policy.clone());
        refusal
    }

    /// The refusal of a hierarchy whose limits are advertised as
    /// `policies`, in the order of the steps. The limit that refused is the
    /// violated policy; add others with [`with_violated`](Self::with_violated).
    /// Every policy goes into the `RateLimit-Policy` field.
    ///
    /// ```
    /// use tollgate::{Limit, ManualClock, Quota, TokenBucket, try_acquire_all};
    /// use tollgate::http::{PolicyName, RateLimitPolicy, Refusal};
    ///
    /// let clock = ManualClock::new();
    /// let (per_user, global) = (Quota::per_second(5)?, Quota::per_second(1)?);
    /// let user = TokenBucket::with_clock(per_user, &clock);
    /// let all = TokenBucket::with_clock(global, &clock);
    /// let policies = [
    ///     RateLimitPolicy::from_quota(PolicyName::new("per-user")?, &per_user),
    ///     RateLimitPolicy::from_quota(PolicyName::new("global")?, &global),
    /// ];
    /// try_acquire_all(&[user.cost(1), all.cost(1)])?;
    /// let refused = try_acquire_all(&[user.cost(1), all.cost(1)]).unwrap_err();
    /// let response = Refusal::from_hierarchy(&refused, &policies).into_response();
    /// assert_eq!(response.status(), 429);
    /// assert_eq!(response.headers()["retry-after"], "1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_hierarchy(error: &HierarchyError, policies: &[RateLimitPolicy]) -> Refusal {
        match *error {
            HierarchyError::Refused { limit, error } => {
                Refusal::of_chain(Some(limit), Cause::Limit(error), policies)
            }
            HierarchyError::TooManySteps { .. } => {
                Refusal::of_chain(None, Cause::Misconfigured, policies)
            }
        }
    }

    /// The refusal of a chain whose limits are advertised as `policies`:
    /// `cause`, at the limit of index `limit` if one refused.
    pub(crate) fn of_chain(
        limit: Option<usize>,
        cause: Cause,
        policies: &[RateLimitPolicy],
    ) -> Refusal {
        let mut refusal = match limit.and_then(|limit| policies.get(limit)) {
            Some(policy) => Refusal::of(cause, policy.name()),
            None => Refusal::of_unnamed(cause),
        };
        refusal.policies.extend(policies.iter().cloned());
        refusal
    }

    /// A 503 for load shedding: the server is refusing work it cannot take
    /// now, whoever sends it. `retry_after` defaults to
    /// [`DEFAULT_UNAVAILABLE_RETRY`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::http::Refusal;
    ///
    /// let response = Refusal::load_shed(Some(Duration::from_secs(5))).into_response();
    /// assert_eq!(response.status(), 503);
    /// assert_eq!(response.headers()["retry-after"], "5");
    /// ```
    pub fn load_shed(retry_after: Option<Duration>) -> Refusal {
        Refusal {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: ProblemType::TemporaryReducedCapacity,
            title: "Temporary Reduced Capacity",
            detail: "The server is shedding load; retry later.".into(),
            retry_after: Some(retry_after.unwrap_or(DEFAULT_UNAVAILABLE_RETRY)),
            violated: Vec::new(),
            policies: Vec::new(),
            limits: Vec::new(),
        }
    }

    pub(crate) fn of(cause: Cause, policy: &PolicyName) -> Refusal {
        let mut refusal = Refusal::of_unnamed(cause);
        if refusal.kind != ProblemType::Blank {
            refusal.violated.push(policy.clone());
            refusal.detail = format!(
                "{} (policy \"{policy}\").",
                refusal.detail.trim_end_matches('.')
            );
        }
        refusal
    }

    fn of_unnamed(cause: Cause) -> Refusal {
        let (status, kind, title, detail, retry_after) = match cause {
            Cause::Limit(AcquireError::Insufficient { retry_after }) => (
                StatusCode::TOO_MANY_REQUESTS,
                ProblemType::QuotaExceeded,
                "Quota Exceeded",
                "The request exceeds the quota; retry after the advertised delay.",
                Some(retry_after),
            ),
            Cause::Limit(AcquireError::ExceedsCapacity { .. }) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                ProblemType::QuotaExceeded,
                "Quota Exceeded",
                "The request costs more than the quota can ever hold; retrying cannot help.",
                None,
            ),
            Cause::InFlight(InFlightError::Full { .. }) => (
                StatusCode::TOO_MANY_REQUESTS,
                ProblemType::QuotaExceeded,
                "Quota Exceeded",
                "Too many of these requests are in progress; retry once one has completed.",
                None,
            ),
            Cause::InFlight(InFlightError::ExceedsLimit { .. }) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                ProblemType::QuotaExceeded,
                "Quota Exceeded",
                "The request weighs more than the in-flight limit can ever hold; retrying cannot help.",
                None,
            ),
            Cause::Limit(AcquireError::ZeroCost) | Cause::Misconfigured => (
                StatusCode::INTERNAL_SERVER_ERROR,
                ProblemType::Blank,
                "Internal Server Error",
                "The server's rate-limit configuration could not charge this request.",
                None,
            ),
            // A full key table, an unreachable or refusing store: the
            // client did nothing wrong, so 503.
            // A zero weight is the in-flight form of a zero cost: the
            // server's bug, answered as `ZeroCost` is.
            Cause::InFlight(InFlightError::ZeroWeight) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                ProblemType::Blank,
                "Internal Server Error",
                "The server's rate-limit configuration could not charge this request.",
                None,
            ),
            // The in-flight limit's full table of keys (or, for an async
            // acquire, a wait that ran out) likewise.
            Cause::Limit(AcquireError::TooManyKeys { .. }) | Cause::Store | Cause::InFlight(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                ProblemType::TemporaryReducedCapacity,
                "Temporary Reduced Capacity",
                "The server cannot take this request now; retry later.",
                Some(DEFAULT_UNAVAILABLE_RETRY),
            ),
        };
        Refusal {
            status,
            kind,
            title,
            detail: detail.into(),
            retry_after,
            violated: Vec::new(),
            policies: Vec::new(),
            limits: Vec::new(),
        }
    }

    /// Adds `names` to `violated-policies` (each once).
    ///
    /// ```
    /// use tollgate::http::{PolicyName, Refusal};
    ///
    /// let refusal = Refusal::load_shed(None).with_violated([PolicyName::new("hourly")?]);
    /// assert_eq!(refusal.violated()[0].as_str(), "hourly");
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn with_violated(mut self, names: impl IntoIterator<Item = PolicyName>) -> Refusal {
        for name in names {
            if !self.violated.contains(&name) {
                self.violated.push(name);
            }
        }
        self
    }

    /// Replaces the policies advertised in `RateLimit-Policy`.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, RateLimitPolicy, Refusal};
    ///
    /// let policy = RateLimitPolicy::new(PolicyName::new("reduced")?, 10);
    /// let response = Refusal::load_shed(None).with_policies([policy]).into_response();
    /// assert_eq!(response.headers()["ratelimit-policy"], r#""reduced";q=10"#);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn with_policies(mut self, policies: impl IntoIterator<Item = RateLimitPolicy>) -> Refusal {
        self.policies = policies.into_iter().collect();
        self
    }

    /// Sets the live service limits sent in `RateLimit`.
    ///
    /// ```
    /// use tollgate::http::{PolicyName, Refusal, ServiceLimit};
    ///
    /// let limit = ServiceLimit::new(PolicyName::new("burst")?, 0).with_reset_seconds(4);
    /// let response = Refusal::load_shed(None).with_service_limits([limit]).into_response();
    /// assert_eq!(response.headers()["ratelimit"], r#""burst";r=0;t=4"#);
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn with_service_limits(
        mut self,
        limits: impl IntoIterator<Item = ServiceLimit>,
    ) -> Refusal {
        self.limits = limits.into_iter().collect();
        self
    }

    /// Replaces the human-readable `detail`.
    ///
    /// ```
    /// use tollgate::http::Refusal;
    ///
    /// let refusal = Refusal::load_shed(None).with_detail("Maintenance until 14:00.");
    /// assert_eq!(refusal.detail(), "Maintenance until 14:00.");
    /// ```
    pub fn with_detail(mut self, detail: impl Into<String>) -> Refusal {
        self.detail = detail.into();
        self
    }

    /// Replaces the wait before Retry-After's rounding (for the 503s whose
    /// cause has no wait of its own, say).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::AcquireError;
    /// use tollgate::http::{PolicyName, RateLimitPolicy, Refusal};
    ///
    /// let policy = RateLimitPolicy::new(PolicyName::new("per-key")?, 100);
    /// let refusal = Refusal::from_acquire(&AcquireError::TooManyKeys { max_keys: 10 }, &policy)
    ///     .with_retry_after(Duration::from_secs(10));
    /// assert_eq!(refusal.retry_after_seconds(), Some(10));
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn with_retry_after(mut self, wait: Duration) -> Refusal {
        self.retry_after = Some(wait);
        self
    }

    /// The status code.
    ///
    /// ```
    /// use tollgate::http::Refusal;
    ///
    /// assert_eq!(Refusal::load_shed(None).status(), 503);
    /// ```
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The problem type.
    ///
    /// ```
    /// use tollgate::http::{ProblemType, Refusal};
    ///
    /// assert_eq!(Refusal::load_shed(None).problem_type(), ProblemType::TemporaryReducedCapacity);
    /// ```
    pub fn problem_type(&self) -> ProblemType {
        self.kind
    }

    /// The violated policies.
    ///
    /// ```
    /// use tollgate::http::Refusal;
    ///
    /// assert!(Refusal::load_shed(None).violated().is_empty());
    /// ```
    pub fn violated(&self) -> &[PolicyName] {
        &self.violated
    }

    /// The policies the response advertises in `RateLimit-Policy`: every
    /// limit the refused request was charged on, the violated ones among
    /// them.
    ///
    /// ```
    /// use tollgate::{AcquireError, Quota};
    /// use tollgate::http::{PolicyName, RateLimitPolicy, Refusal};
    ///
    /// let policy = RateLimitPolicy::from_quota(PolicyName::new("burst")?, &Quota::per_second(5)?);
    /// let refusal = Refusal::from_acquire(&AcquireError::ZeroCost, &policy);
    /// assert_eq!(refusal.policies()[0].quota(), 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn policies(&self) -> &[RateLimitPolicy] {
        &self.policies
    }

    /// The `detail` member.
    ///
    /// ```
    /// use tollgate::http::Refusal;
    ///
    /// assert!(!Refusal::load_shed(None).detail().is_empty());
    /// ```
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The exact wait after which the refused request would fit, as the
    /// limit decided it (to the nanosecond, before the rounding and jitter
    /// of Retry-After): what a response of another protocol carries, such
    /// as a gRPC `RetryInfo`. `None` when no wait would help.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::AcquireError;
    /// use tollgate::http::{PolicyName, RateLimitPolicy, Refusal};
    ///
    /// let policy = RateLimitPolicy::new(PolicyName::new("burst")?, 5);
    /// let refused = AcquireError::Insufficient { retry_after: Duration::from_millis(1500) };
    /// let refusal = Refusal::from_acquire(&refused, &policy);
    /// assert_eq!(refusal.retry_after(), Some(Duration::from_millis(1500)));
    /// assert_eq!(refusal.retry_after_seconds(), Some(2));
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The Retry-After value that will be sent, in seconds: the wait rounded
    /// up, raised to the largest `t` among the violated policies' service
    /// limits, and capped at 10^15 - 1 (the largest value the RateLimit
    /// fields carry, some 31 million years: a wait no client can act on
    /// still parses as an integer everywhere); `None` when no retry time
    /// exists.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::AcquireError;
    /// use tollgate::http::{PolicyName, RateLimitPolicy, Refusal, ServiceLimit};
    ///
    /// let name = PolicyName::new("burst")?;
    /// let refused = AcquireError::Insufficient { retry_after: Duration::from_nanos(1) };
    /// let refusal = Refusal::from_acquire(&refused, &RateLimitPolicy::new(name.clone(), 5));
    /// assert_eq!(refusal.retry_after_seconds(), Some(1));
    /// // A jittered t of 3 s for the violated policy moves Retry-After too.
    /// let refusal = refusal.with_service_limits([ServiceLimit::new(name, 0).with_reset_seconds(3)]);
    /// assert_eq!(refusal.retry_after_seconds(), Some(3));
    /// // A wait no client can act on stays an integer every parser reads.
    /// let never = Refusal::load_shed(Some(Duration::MAX));
    /// assert_eq!(never.retry_after_seconds(), Some(999_999_999_999_999));
    /// # Ok::<(), tollgate::http::HttpError>(())
    /// ```
    pub fn retry_after_seconds(&self) -> Option<u64> {
        let wait = delay_seconds(self.retry_after?);
        let window = self
            .limits
            .iter()
            .filter(|limit| self.violated.contains(limit.name()))
            .filter_map(ServiceLimit::reset_seconds)
            .max()
            .unwrap_or(0);
        Some(wait.max(window).min(SF_INTEGER_MAX))
    }

    /// The response: status, headers and problem+json body.
    ///
    /// ```
    /// use tollgate::http::Refusal;
    ///
    /// let response = Refusal::load_shed(None).into_response();
    /// let doc: serde_json::Value = serde_json::from_slice(response.body())?;
    /// assert_eq!(doc["status"], 503);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn into_response(self) -> Response<Bytes> {
        let retry_after = self.retry_after_seconds();
        let content = body(
            self.kind,
            self.title,
            self.status.as_u16(),
            &self.detail,
            &self.violated,
        );
        let mut response = problem::response(self.status, content);
        let headers = response.headers_mut();
        if let Some(seconds) = retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(value) = rate_limit_policy_value(&self.policies) {
            headers.insert(RATELIMIT_POLICY_NAME, value);
        }
        if let Some(value) = rate_limit_value(&self.limits) {
            headers.insert(RATELIMIT_NAME, value);
        }
        response
    }
}
