//! The problem+json body (RFC 9457) of a refusal.

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Response, StatusCode};
use serde_json::{Map, Value, json};

use super::PolicyName;

/// The media type of the body: `application/problem+json`.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Which problem a refusal reports, as its `type` URI says.
///
/// The two rate-limit types are the ones the RateLimit draft registers
/// with IANA; anything else is `about:blank`, whose meaning is the status
/// code's (RFC 9457 §4.2.1).
///
/// ```
/// use tollgate::http::ProblemType;
///
/// assert_eq!(
///     ProblemType::QuotaExceeded.uri(),
///     "https://iana.org/assignments/http-problem-types#quota-exceeded",
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProblemType {
    /// The client's requests exceed one or more quota policies (429).
    QuotaExceeded,
    /// The server's capacity is temporarily reduced (503): the client did
    /// nothing wrong.
    TemporaryReducedCapacity,
    /// No more specific type than the status code.
    Blank,
}

impl ProblemType {
    /// The `type` member.
    ///
    /// ```
    /// use tollgate::http::ProblemType;
    ///
    /// assert_eq!(ProblemType::Blank.uri(), "about:blank");
    /// ```
    pub const fn uri(self) -> &'static str {
        match self {
            ProblemType::QuotaExceeded => {
                "https://iana.org/assignments/http-problem-types#quota-exceeded"
            }
            ProblemType::TemporaryReducedCapacity => {
                "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
            }
            ProblemType::Blank => "about:blank",
        }
    }
}

/// Serialises a problem document. `violated` becomes the draft's
/// `violated-policies` member for the two rate-limit types only.
pub(crate) fn body(
    kind: ProblemType,
    title: &str,
    status: u16,
    detail: &str,
    violated: &[PolicyName],
) -> Bytes {
    let mut doc = Map::new();
    doc.insert("type".into(), json!(kind.uri()));
    doc.insert("title".into(), json!(title));
    doc.insert("status".into(), json!(status));
    doc.insert("detail".into(), json!(detail));
    if kind != ProblemType::Blank {
        let names: Vec<&str> = violated.iter().map(PolicyName::as_str).collect();
        doc.insert("violated-policies".into(), json!(names));
    }
    // Serialising a map of strings and numbers cannot fail; an empty body
    // is the harmless answer if it somehow did.
    serde_json::to_vec(&Value::Object(doc))
        .map(Bytes::from)
        .unwrap_or_default()
}

/// A problem document as a response: `status`, the problem+json media
/// type, and `Cache-Control: no-store` (a problem is about one request at
/// one moment, and a cache must not replay it to anyone).
pub(crate) fn response(status: StatusCode, content: Bytes) -> Response<Bytes> {
    let mut response = Response::new(content);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// An answer of the layer's own for a request it cannot charge (a 4xx for
/// no key or no readable cost, the 500 for no peer address):
/// `about:blank`, titled with the status's reason phrase.
#[cfg(feature = "rules")]
pub(crate) fn problem_response(status: StatusCode, detail: &str) -> Response<Bytes> {
    let title = status.canonical_reason().unwrap_or("Error");
    let content = body(ProblemType::Blank, title, status.as_u16(), detail, &[]);
    response(status, content)
}
