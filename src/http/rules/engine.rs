//! The engine every adapter drives: a request's rules bound once into a
//! small vector, then charged in one pass, all or nothing
//! ([`charge`](super::charge)); a refusal answered in the request's
//! protocol; the charges a response may change kept for it
//! ([`kept`](super::kept)). It knows no framework: an adapter hands it a
//! request head and gets a [`Decision`].

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http::request::Parts;

use super::charge::{Charge, Charges, Progress};
use super::key::NoKey;
use super::kind::Held;
use super::protocol::Protocol;
use super::rule::{MissingKey, Rule};
use super::shadow::Role;
use super::unchargeable::Unchargeable;
use crate::http::fields::PolicyText;
use crate::http::{Jitter, PartitionKeys, Refusal};
use crate::sync::unmodelled::Arc;

/// What shapes a refusal's response instead of the engine's default
/// ([`RulesBuilder::on_refusal`](super::RulesBuilder::on_refusal)).
pub(crate) type RefusalHook = dyn Fn(&Refusal) -> Option<Response<Bytes>> + Send + Sync;

/// The rules and how their answers are written, shared by every service
/// an adapter wraps.
pub(crate) struct Engine {
    /// Sorted in the order they are bound (`Stage::bound`), each kind in
    /// the order added.
    pub(crate) rules: Vec<Rule>,
    /// Each rule's policy as the fields write it, serialised once.
    pub(crate) texts: Vec<PolicyText>,
    /// Whether a rule has a cost function, which may read the body's
    /// framing (which only the tower layer reads of its body type).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) reads_costs: bool,
    /// Whether a rule is in shadow mode: without one, the charges are
    /// taken in their order, and no rule is asked its role.
    pub(crate) shadows: bool,
    /// Whether the charges are taken in another order than they are bound
    /// (a shadow rule, or permits beside token rules).
    pub(crate) reorders: bool,
    /// Whether an admitted request may keep a charge until its response
    /// (to give it back, settle it, advertise it, or hold a permit):
    /// without one, nothing is kept and no rule is asked.
    pub(crate) keeps: bool,
    pub(crate) keys: PartitionKeys,
    pub(crate) jitter: Jitter,
    pub(crate) on_success: bool,
    pub(crate) store_wait: Duration,
    pub(crate) on_refusal: Option<Arc<RefusalHook>>,
}

/// What the engine decided for a request, once every rule that applies is
/// bound (and, unless a store must be asked, charged).
pub(crate) enum Decision {
    /// Every rule took its cost; these charges are kept until the response.
    Admitted(Vec<Charge>),
    /// The request's answer, without calling the inner service: a refusal,
    /// or the 4xx of a request no rule can charge as it stands.
    Refused(Response<Bytes>),
    /// The charges before step `from` are taken; that one (and those after
    /// it) waits for its store: [`Engine::charge_waiting`].
    Waits { charges: Vec<Charge>, from: usize },
}

impl Engine {
    /// Binds every rule that applies to the request, with its cost, then
    /// charges them; or the 4xx for a request no rule can charge as it
    /// stands (no key, no readable cost), which charges nothing. Every
    /// rule is bound before any is charged, so a request answered with a
    /// 4xx never holds a permit or a token, even briefly.
    pub(crate) fn decide(&self, parts: &Parts) -> Decision {
        let mut charges = Charges::new();
        for (index, rule) in self.rules.iter().enumerate() {
            if !rule.applies_to(parts) {
                continue;
            }
            // Bound in place: a charge is large (it holds a receipt), and
            // each move of it is a copy.
            charges.push(Charge {
                rule: index,
                cost: 0,
                shadowed: false,
                beside: false,
                held: Held::default(),
            });
            let Some(charge) = charges.last_mut() else {
                continue;
            };
            if let Err(missing) = rule.kind().bind(parts, &mut charge.held) {
                charges.pop();
                match missing_key(rule, missing, parts) {
                    Some(answer) => return answer,
                    None => continue,
                }
            }
            match rule.cost_of(parts) {
                Ok(cost) => charge.cost = cost,
                Err(error) => {
                    return Unchargeable::Cost(rule.policy(), error)
                        .decision(Protocol::of(&parts.headers));
                }
            }
        }
        match self.charge_now(&mut charges) {
            Progress::Admitted => {
                self.count_shadowed(&charges);
                Decision::Admitted(self.kept(&mut charges))
            }
            Progress::Refused(refused) => {
                Decision::Refused(self.refusal(&charges, refused, Protocol::of(&parts.headers)))
            }
            Progress::Waits(from) => Decision::Waits {
                charges: charges.into_vec(),
                from,
            },
        }
    }

    /// The charges an admitted request keeps until its response: those a
    /// response may change (a status that gives back, a cost to settle),
    /// every one when the fields are advertised, and every permit. None in
    /// the common case, which allocates nothing.
    fn kept(&self, charges: &mut Charges) -> Vec<Charge> {
        let keeps = |charge: &Charge| {
            self.on_success
                || self.kind(charge).held_until_response()
                || self.rules[charge.rule].answers_to_response()
        };
        if !self.keeps {
            return Vec::new();
        }
        charges.drain(..).filter(keeps).collect()
    }

    /// Counts, for each shadow rule whose limit refused its charge, a
    /// request it would have refused: called once the request is
    /// admitted, so a shadow rule counts exactly the requests that
    /// enforcing it would add to the refusals, whatever the rules' order.
    pub(crate) fn count_shadowed(&self, charges: &[Charge]) {
        for charge in charges.iter().filter(|charge| charge.shadowed) {
            if let Role::Shadow(count) = self.rules[charge.rule].role() {
                count.refused();
            }
        }
    }

    /// Whether a charge's rule is in shadow mode.
    pub(crate) fn is_shadow(&self, charge: &Charge) -> bool {
        self.rules[charge.rule].role().is_shadow()
    }

    /// The response a refusal answers: the hook's, if it has one for it,
    /// else the refusal's own in the request's protocol.
    pub(crate) fn respond(&self, refusal: Refusal, protocol: Protocol) -> Response<Bytes> {
        self.on_refusal
            .as_ref()
            .and_then(|hook| hook(&refusal))
            .unwrap_or_else(|| protocol.refusal(refusal))
    }
}

/// What a request without a key for `rule` comes to: the 500 of a server
/// that gave it no peer address (reported once per rule), the 400 if the
/// rule rejects a request without its key, or `None` to go on without the
/// rule.
fn missing_key(rule: &Rule, missing: NoKey, parts: &Parts) -> Option<Decision> {
    let protocol = || Protocol::of(&parts.headers);
    if missing == NoKey::NoPeer {
        rule.no_peer_report().report(rule.policy().name());
        return Some(Unchargeable::NoPeer(rule.policy()).decision(protocol()));
    }
    match rule.missing_key() {
        MissingKey::Skip => None,
        MissingKey::Reject => Some(Unchargeable::NoKey(rule.policy()).decision(protocol())),
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rules")
            .field("rules", &self.rules)
            .field("jitter", &self.jitter)
            .field("on_success", &self.on_success)
            .field("store_wait", &self.store_wait)
            .field("on_refusal", &self.on_refusal.is_some())
            .finish_non_exhaustive()
    }
}
