//! Typed outcomes for bad HTTP-side configuration.

/// Why a policy name or another advertised value could not be built.
///
/// ```
/// use tollgate::http::{HttpError, PolicyName};
///
/// assert_eq!(PolicyName::new("per\naddress"), Err(HttpError::InvalidPolicyName));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// A policy name must be a non-empty Structured Field String: printable
    /// ASCII (space to `~`), since it is sent in a header.
    #[error("a policy name must be non-empty printable ASCII")]
    InvalidPolicyName,
}
