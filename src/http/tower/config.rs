//! What a layer is configured with, shared by every service it wraps.

use std::fmt;
use std::time::Duration;

use super::rule::Rule;
use crate::http::fields::PolicyText;
use crate::http::{Jitter, PartitionKeys};

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
    pub(super) keys: PartitionKeys,
    pub(super) jitter: Jitter,
    pub(super) on_success: bool,
    pub(super) store_wait: Duration,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("rules", &self.rules)
            .field("jitter", &self.jitter)
            .field("on_success", &self.on_success)
            .field("store_wait", &self.store_wait)
            .finish_non_exhaustive()
    }
}
