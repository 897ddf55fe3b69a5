//! What `call` decides for a request: the answer each rule's binding
//! hands back up to the service.

use bytes::Bytes;
use http::Response;

use super::charge::Charge;

/// What `call` decided for a request, once every rule that applies is
/// bound (and, unless a store must be asked, charged).
pub(super) enum CallDecision {
    /// Every rule took its cost; these charges are kept until the response.
    Admitted(Vec<Charge<'static>>),
    /// The request's answer, without calling the inner service: a refusal,
    /// or the 4xx of a request no rule can charge as it stands.
    Refused(Response<Bytes>),
    /// The in-process rules took their cost; the shared rule at `from` (and
    /// those after it) waits for its store.
    Waits {
        charges: Vec<Charge<'static>>,
        from: usize,
    },
}
