//! Why a request's cost could not be read from it, and the 4xx that says
//! so.

use http::StatusCode;

use crate::http::RateLimitPolicy;

/// Why a cost function could not price a request. The layer answers the
/// request with this error's status and a problem+json body
/// (`about:blank`, titled with the status's reason phrase) and charges no
/// rule: a cost the request got wrong is never a cost of 0.
///
/// ```
/// use http::StatusCode;
/// use tollgate::http::rules::{CostError, extract};
///
/// let (parts, ()) = http::Request::post("/upload").header("content-length", "ten").body(())?.into_parts();
/// assert_eq!(extract::content_length(&parts), Err(CostError::InvalidContentLength));
/// assert_eq!(CostError::InvalidContentLength.status(), StatusCode::BAD_REQUEST);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum CostError {
    /// The request's Content-Length is not one length: not plain digits,
    /// beyond `u64`, several values that disagree, a length beside a
    /// Transfer-Encoding (the request-smuggling shape), or a length the
    /// body's own framing contradicts. Answered 400 Bad Request.
    #[error("the request's Content-Length is not one valid length")]
    InvalidContentLength,
    /// The request has a body whose length it does not declare (chunked,
    /// or an HTTP/2 body without Content-Length), and the cost is its
    /// length. Answered 411 Length Required, before the body is read.
    #[error("the request's body length is not declared")]
    LengthRequired,
}

impl CostError {
    /// The status the layer answers with.
    ///
    /// ```
    /// use http::StatusCode;
    /// use tollgate::http::rules::CostError;
    ///
    /// assert_eq!(CostError::LengthRequired.status(), StatusCode::LENGTH_REQUIRED);
    /// ```
    pub fn status(self) -> StatusCode {
        match self {
            CostError::InvalidContentLength => StatusCode::BAD_REQUEST,
            CostError::LengthRequired => StatusCode::LENGTH_REQUIRED,
        }
    }

    /// What the answer to a request that `policy` could not price says.
    pub(super) fn detail(self, policy: &RateLimitPolicy) -> String {
        match self {
            CostError::InvalidContentLength => format!(
                "The request's Content-Length is not one valid length, so rate-limit policy \"{}\" cannot charge it.",
                policy.name()
            ),
            CostError::LengthRequired => format!(
                "Rate-limit policy \"{}\" charges by length: send the body with a Content-Length.",
                policy.name()
            ),
        }
    }
}
