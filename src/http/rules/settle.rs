//! Settling a rule's charge to the request's actual cost, read from its
//! response: the tokens an LLM answer used, the rows a query scanned.

use http::{HeaderName, Response};

use crate::http::PolicyName;

/// The actual cost of a request, placed in its response's extensions by
/// the handler, for rules settled by [`Settlement::Extension`].
///
/// ```
/// use tollgate::http::rules::ActualCost;
///
/// let mut response = http::Response::new(());
/// response.extensions_mut().insert(ActualCost(1_234));
/// assert_eq!(response.extensions().get::<ActualCost>(), Some(&ActualCost(1_234)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ActualCost(pub u64);

/// Where a rule's actual cost is read from the response
/// ([`Rule::settled_by`](super::Rule::settled_by)). A response that does
/// not say (no extension, no header, a header that is not one plain
/// integer) leaves the estimate charged: the request cost what it was
/// estimated to.
///
/// ```
/// use http::HeaderName;
/// use tollgate::http::rules::Settlement;
///
/// let upstream = Settlement::Header(HeaderName::from_static("x-usage-tokens"));
/// assert_ne!(upstream, Settlement::Extension);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settlement {
    /// The response's [`ActualCost`] extension, set by the handler.
    Extension,
    /// A response header holding the cost as one plain integer (what an
    /// upstream reports, such as an LLM backend's usage).
    Header(HeaderName),
    /// The bytes of the response body's data as it streams (a download's
    /// size, unknown until its end): settled when the body ends, or to the
    /// bytes sent so far when it is dropped before. Counted by the default
    /// body ([`RateLimitBody`](crate::http::tower::RateLimitBody)); behind a layer that
    /// keeps the inner body type
    /// ([`with_inner_body`](crate::http::tower::RateLimitLayer::with_inner_body)), and
    /// on actix, nothing is counted and the estimate stands.
    BodyBytes,
}

impl Settlement {
    /// The actual cost `response` reports, if it does.
    pub(super) fn actual<B>(&self, response: &Response<B>) -> Option<u64> {
        match self {
            Settlement::Extension => response.extensions().get::<ActualCost>().map(|cost| cost.0),
            Settlement::BodyBytes => None,
            Settlement::Header(name) => {
                let mut lines = response.headers().get_all(name).iter();
                let value = lines.next()?;
                let digits = value.as_bytes();
                let plain = lines.next().is_none()
                    && !digits.is_empty()
                    && digits.iter().all(u8::is_ascii_digit);
                plain.then(|| value.to_str().ok()?.parse().ok()).flatten()
            }
        }
    }
}

/// A rule that cannot settle to an actual cost: an in-flight rule, which
/// charges no tokens.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::concurrency::KeyedConcurrencyLimiter;
/// use tollgate::http::PolicyName;
/// use tollgate::http::rules::{Rule, Settlement};
///
/// let slots = Arc::new(KeyedConcurrencyLimiter::<()>::new(4)?);
/// let rule = Rule::in_flight(PolicyName::new("slots")?, slots, |_: &http::request::Parts| Some(()));
/// assert!(rule.settled_by(Settlement::Extension).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rate-limit rule \"{policy}\" limits work in flight: it has no cost to settle")]
pub struct NotSettleable {
    /// The rule's policy name.
    pub policy: PolicyName,
}
