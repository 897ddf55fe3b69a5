//! A request a rule cannot charge as it stands (no key, no peer address,
//! no readable cost), and the answer that says why, in the request's
//! protocol.

use http::StatusCode;

use super::cost::CostError;
use super::engine::Decision;
use super::protocol::Protocol;
use crate::http::RateLimitPolicy;
use crate::http::problem::problem_response;

/// Why a rule cannot charge a request as it stands: it names the rule's
/// policy.
#[derive(Clone, Copy)]
pub(super) enum Unchargeable<'a> {
    /// The rule's key extractor found nothing, and the rule rejects that.
    NoKey(&'a RateLimitPolicy),
    /// The rule keys on the peer address, and the server gave none.
    NoPeer(&'a RateLimitPolicy),
    /// The rule's cost function could not read a cost.
    Cost(&'a RateLimitPolicy, CostError),
}

impl Unchargeable<'_> {
    /// The answer: 400 for a missing key, 500 for a missing peer, the cost
    /// error's own status; in gRPC, `UNAUTHENTICATED` (the identity the
    /// rule keys on is missing), `INTERNAL` and `INVALID_ARGUMENT`.
    pub(super) fn decision(self, protocol: Protocol) -> Decision {
        let (status, detail) = match self {
            Unchargeable::NoKey(policy) => (
                StatusCode::BAD_REQUEST,
                format!(
                    "The request carries no identity for rate-limit policy \"{}\".",
                    policy.name()
                ),
            ),
            Unchargeable::NoPeer(policy) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "The server is misconfigured: rate-limit policy \"{}\" keys on the \
                     connection's peer address, and the server gave this request none.",
                    policy.name()
                ),
            ),
            Unchargeable::Cost(policy, error) => (error.status(), error.detail(policy)),
        };
        let response = problem_response(status, &detail);
        Decision::Refused(match protocol {
            Protocol::Http => response,
            #[cfg(feature = "tonic")]
            Protocol::Grpc => grpc(&self, detail, response),
        })
    }
}

#[cfg(feature = "tonic")]
fn grpc(
    unchargeable: &Unchargeable<'_>,
    detail: String,
    http: http::Response<bytes::Bytes>,
) -> http::Response<bytes::Bytes> {
    use tonic::Code;
    let code = match unchargeable {
        Unchargeable::NoKey(_) => Code::Unauthenticated,
        Unchargeable::NoPeer(_) => Code::Internal,
        Unchargeable::Cost(..) => Code::InvalidArgument,
    };
    crate::http::grpc::trailers_only(&tonic::Status::new(code, detail), http)
}
