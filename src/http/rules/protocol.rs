//! The protocol a request speaks, and so the one the layer's own answers
//! (refusals, unchargeable requests) are written in: HTTP with a
//! problem+json body, or, with feature `tonic`, gRPC for a call whose
//! `content-type` is `application/grpc` (alone or with a `+proto`-style
//! suffix). The content-type only chooses the answer's form: what is
//! decided is the same for every request.

use bytes::Bytes;
use http::{HeaderMap, Response};

use crate::http::Refusal;

/// How the layer answers a request it does not pass on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Http,
    /// A gRPC call: trailers-only gRPC statuses.
    #[cfg(feature = "tonic")]
    Grpc,
}

impl Protocol {
    /// The protocol of a request with these headers.
    pub(crate) fn of(headers: &HeaderMap) -> Protocol {
        #[cfg(feature = "tonic")]
        if is_grpc(headers) {
            return Protocol::Grpc;
        }
        let _ = headers;
        Protocol::Http
    }

    /// A refusal's own response in this protocol.
    pub(crate) fn refusal(self, refusal: Refusal) -> Response<Bytes> {
        match self {
            Protocol::Http => refusal.into_response(),
            #[cfg(feature = "tonic")]
            Protocol::Grpc => refusal.into_grpc_response(),
        }
    }
}

/// Whether the content-type is gRPC's: `application/grpc`, then nothing,
/// `+` (a message format) or `;` (parameters), compared as ASCII without
/// case, as media types are.
#[cfg(feature = "tonic")]
fn is_grpc(headers: &HeaderMap) -> bool {
    use crate::http::grpc::GRPC_CONTENT_TYPE;
    let Some(value) = headers.get(http::header::CONTENT_TYPE) else {
        return false;
    };
    let value = value.as_bytes();
    let prefix = GRPC_CONTENT_TYPE.len();
    value.len() >= prefix
        && value[..prefix].eq_ignore_ascii_case(GRPC_CONTENT_TYPE.as_bytes())
        && matches!(value.get(prefix), None | Some(b'+' | b';'))
}
