//! What a layer is configured with, shared by every service it wraps.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::Response;

use super::protocol::Protocol;
use super::rule::Rule;
use crate::http::fields::PolicyText;
use crate::http::{Jitter, PartitionKeys, Refusal};
use crate::sync::unmodelled::Arc;

/// What shapes a refusal's response instead of the layer's default
/// ([`RateLimitLayerBuilder::on_refusal`](super::RateLimitLayerBuilder::on_refusal)).
pub(super) type RefusalHook = dyn Fn(&Refusal) -> Option<Response<Bytes>> + Send + Sync;

pub(super) struct Config {
    pub(super) rules: Vec<Rule>,
    /// Each rule's policy as the fields write it, serialised once.
    pub(super) texts: Vec<PolicyText>,
    /// Whether a rule has a cost function, which may read the body's
    /// framing.
    pub(super) reads_costs: bool,
    /// Whether a charge may be kept past `call`: to give it back on some
    /// status, or to advertise it.
    pub(super) keeps: bool,
    /// Whether a rule is in shadow mode: without one, the enforced chain
    /// is every rule's, and charging it asks no rule its role.
    pub(super) shadows: bool,
    pub(super) keys: PartitionKeys,
    pub(super) jitter: Jitter,
    pub(super) on_success: bool,
    pub(super) store_wait: Duration,
    pub(super) on_refusal: Option<Arc<RefusalHook>>,
}

impl Config {
    /// The response a refusal answers: the hook's, if it has one for it,
    /// else the refusal's own in the request's protocol.
    pub(super) fn respond(&self, refusal: Refusal, protocol: Protocol) -> Response<Bytes> {
        self.on_refusal
            .as_ref()
            .and_then(|hook| hook(&refusal))
            .unwrap_or_else(|| protocol.refusal(refusal))
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("rules", &self.rules)
            .field("jitter", &self.jitter)
            .field("on_success", &self.on_success)
            .field("store_wait", &self.store_wait)
            .field("on_refusal", &self.on_refusal.is_some())
            .finish_non_exhaustive()
    }
}
