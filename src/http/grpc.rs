//! Refusals as gRPC clients understand them (feature `tonic`): a status
//! code a client can act on, the exact wait in a `google.rpc.RetryInfo`
//! detail (what gRPC clients read to back off), the policies in a
//! `google.rpc.QuotaFailure`, and the RateLimit fields as metadata, sent
//! trailers-only (one HEADERS frame that ends the stream, no body): what a
//! gRPC server answers a call it rejects before running it.

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderValue, Response, StatusCode};
use tonic::Code;
use tonic_types::{ErrorDetail, QuotaFailure, QuotaViolation, RetryInfo, StatusExt};

use super::{RateLimitPolicy, Refusal};

/// The media type of a gRPC message stream: what marks a call as gRPC,
/// alone or with a `+proto`-style suffix.
pub(crate) const GRPC_CONTENT_TYPE: &str = "application/grpc";

impl Refusal {
    /// The refusal as a gRPC status: `RESOURCE_EXHAUSTED` for a quota
    /// refused (429) or a cost above the capacity (413), `UNAVAILABLE` for
    /// the server's own shortage (503: a full key table, a store down, load
    /// shed), with the detail as its message. Its details: a
    /// `google.rpc.RetryInfo` whose `retry_delay` is the exact wait the
    /// limit decided ([`retry_after`](Self::retry_after), to the
    /// nanosecond, not the rounded Retry-After), when a wait helps; and for
    /// a refused quota a `google.rpc.QuotaFailure` with one violation per
    /// violated policy, its name as the subject.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{AcquireError, Quota};
    /// use tollgate::http::{PolicyName, RateLimitPolicy, Refusal};
    /// use tonic_types::StatusExt;
    ///
    /// let quota = Quota::per_minute(5)?;
    /// let policy = RateLimitPolicy::from_quota(PolicyName::new("per-caller")?, &quota);
    /// let refused = AcquireError::Insufficient { retry_after: Duration::from_millis(1500) };
    /// let status = Refusal::from_acquire(&refused, &policy).to_grpc_status();
    /// assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    /// let details = status.get_error_details();
    /// assert_eq!(details.retry_info().unwrap().retry_delay, Some(Duration::from_millis(1500)));
    /// assert_eq!(details.quota_failure().unwrap().violations[0].subject, "per-caller");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_grpc_status(&self) -> tonic::Status {
        let code = match self.status() {
            StatusCode::TOO_MANY_REQUESTS | StatusCode::PAYLOAD_TOO_LARGE => {
                Code::ResourceExhausted
            }
            StatusCode::SERVICE_UNAVAILABLE => Code::Unavailable,
            _ => Code::Unknown,
        };
        let mut details = Vec::new();
        if let Some(wait) = self.retry_after() {
            // RetryInfo caps its delay (at some 10 000 years) itself.
            details.push(ErrorDetail::RetryInfo(RetryInfo::new(Some(wait))));
        }
        // The server's own shortage (503) is no quota of the client's. A
        // violated limit without a policy in the fields (work in flight,
        // which has no window to advertise) is a violation all the same.
        let policies = self.policies();
        let quoted = policies
            .iter()
            .filter(|policy| self.violated().contains(policy.name()))
            .map(|policy| QuotaViolation::new(policy.name().as_str(), describe(policy)));
        let unquoted = self
            .violated()
            .iter()
            .filter(|name| !policies.iter().any(|policy| policy.name() == *name))
            .map(|name| {
                QuotaViolation::new(
                    name.as_str(),
                    "limit of work in flight: no room for the request",
                )
            });
        let violations: Vec<QuotaViolation> = quoted.chain(unquoted).collect();
        if code == Code::ResourceExhausted && !violations.is_empty() {
            details.push(ErrorDetail::QuotaFailure(QuotaFailure::new(violations)));
        }
        tonic::Status::with_error_details_vec(code, self.detail(), details)
    }

    /// The refusal as a trailers-only gRPC response: HTTP status 200,
    /// `content-type: application/grpc`, the status of
    /// [`to_grpc_status`](Self::to_grpc_status) in `grpc-status`,
    /// `grpc-message` and `grpc-status-details-bin`, and as metadata the
    /// headers [`into_response`](Self::into_response) sends (`retry-after`,
    /// `ratelimit`, `ratelimit-policy`, `cache-control`); no body.
    ///
    /// ```
    /// use tollgate::http::Refusal;
    ///
    /// let response = Refusal::load_shed(Some(std::time::Duration::from_secs(2))).into_grpc_response();
    /// assert_eq!(response.status(), 200);
    /// assert_eq!(response.headers()["grpc-status"], "14"); // UNAVAILABLE
    /// assert_eq!(response.headers()["retry-after"], "2");
    /// assert!(response.body().is_empty());
    /// ```
    pub fn into_grpc_response(self) -> Response<Bytes> {
        let status = self.to_grpc_status();
        trailers_only(&status, self.into_response())
    }
}

/// What a violated policy's `QuotaViolation` says: its quota and window.
fn describe(policy: &RateLimitPolicy) -> String {
    match policy.window_seconds() {
        Some(window) => format!("quota of {} per {window} s exhausted", policy.quota()),
        None => format!("limit of {} exhausted", policy.quota()),
    }
}

/// `http`, an answer of the layer's own, as `status` in a trailers-only
/// gRPC response that keeps its headers as metadata.
pub(crate) fn trailers_only(status: &tonic::Status, http: Response<Bytes>) -> Response<Bytes> {
    let (mut parts, _body) = http.into_parts();
    parts.status = StatusCode::OK;
    parts.headers.remove(CONTENT_LENGTH);
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static(GRPC_CONTENT_TYPE));
    // A status whose message or details cannot be headers (tonic
    // percent-encodes the message and base64-encodes the details, so this
    // does not happen) keeps its code alone.
    if status.add_header(&mut parts.headers).is_err() {
        let bare = tonic::Status::new(status.code(), "");
        let _ = bare.add_header(&mut parts.headers);
    }
    Response::from_parts(parts, Bytes::new())
}
