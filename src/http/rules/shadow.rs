//! Shadow mode: a rule that is decided and counted like any other, but
//! whose limit never refuses. How a new limit is rolled out: run it in
//! shadow, watch what it would refuse, then enforce it.

use crate::http::PolicyName;
use crate::sync::unmodelled::Arc;
use crate::sync::{AtomicU64, Ordering};

/// Whether a rule in shadow mode ([`Rule::shadow`](super::Rule::shadow))
/// shows itself to clients.
///
/// ```
/// use tollgate::http::rules::Shadow;
///
/// assert_ne!(Shadow::Quiet, Shadow::Advertised);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Shadow {
    /// Nothing of the rule reaches the client: no RateLimit fields, no
    /// name in a refusal. The rule is only counted.
    Quiet,
    /// The rule's policy and live limit are in the RateLimit fields as an
    /// enforced rule's are (so clients can adapt before it is enforced),
    /// but it is never named violated and never moves Retry-After.
    Advertised,
}

/// How a charge's rule takes part in the decision.
#[derive(Clone, Debug)]
pub(super) enum Role {
    /// A refusal refuses the request.
    Enforced,
    /// A refusal is counted, and the request goes on without the rule.
    Shadow(ShadowCount),
}

impl Role {
    pub(super) fn is_shadow(&self) -> bool {
        matches!(self, Role::Shadow(_))
    }

    /// Whether the client sees this rule in the fields.
    pub(super) fn advertised(&self) -> bool {
        match self {
            Role::Enforced => true,
            Role::Shadow(count) => count.shown == Shadow::Advertised,
        }
    }
}

/// A shadow rule's running total of the requests it would have refused,
/// shared by every clone of the rule.
#[derive(Clone, Debug)]
pub(super) struct ShadowCount {
    shown: Shadow,
    #[cfg(feature = "metrics")]
    policy: PolicyName,
    refusals: Arc<AtomicU64>,
}

impl ShadowCount {
    pub(super) fn new(shown: Shadow, policy: PolicyName) -> ShadowCount {
        #[cfg(not(feature = "metrics"))]
        let _ = policy;
        ShadowCount {
            shown,
            #[cfg(feature = "metrics")]
            policy,
            refusals: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Counts one request the rule would have refused: in its total and,
    /// with feature `metrics`, in counter `tollgate_shadow_refusals_total`
    /// labelled with the rule's policy.
    pub(super) fn refused(&self) {
        self.refusals.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!("tollgate_shadow_refusals_total", "policy" => self.policy.as_str().to_owned())
            .increment(1);
    }

    pub(super) fn total(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }
}
