//! What `call` decides for a request: every rule that applies bound to
//! the request with its cost, then charged all or nothing (in-flight
//! permits first); or the 4xx of a request no rule can charge as it
//! stands (the 500 of one the server gave no peer address).

use http::request::Parts;

use super::charge::{
    BoundRule, Charge, SharedProgress, charge_chain, charge_local, charge_shared_now,
    count_shadowed, enforced_refusal,
};
use super::config::Config;
use super::decision::CallDecision;
use super::in_flight::InFlightAnswer;
use super::key::NoKey;
use super::protocol::Protocol;
use super::rule::{MissingKey, Rule, RuleLimit};
use super::unchargeable::Unchargeable;
use crate::http::Refusal;

impl Config {
    /// Binds every rule that applies to the request, with its cost, then
    /// charges them; or the 4xx for a request no rule can charge as it
    /// stands (no key, no readable cost), which charges nothing.
    pub(super) fn decide(&self, parts: &Parts) -> CallDecision {
        self.bind_from(parts, 0, None)
    }

    /// Binds the in-process rules from `index` on, each on a stack frame of
    /// its own (where its limiter keeps the request's key: nothing is
    /// allocated), with `bound` the bindings so far; at the first rule not
    /// in process (in-flight or shared), or past the last rule, charges
    /// them all.
    fn bind_from(
        &self,
        parts: &Parts,
        index: usize,
        bound: Option<&BoundRule<'_>>,
    ) -> CallDecision {
        let Some(rule) = self.rules.get(index) else {
            return self.charge(parts, index, bound);
        };
        // The layer sorts in-flight and shared rules after the in-process
        // ones: `charge` takes them.
        let RuleLimit::Local(limiter) = rule.limiter() else {
            return self.charge(parts, index, bound);
        };
        if !rule.applies_to(parts) {
            return self.bind_from(parts, index + 1, bound);
        }
        limiter.bind(parts, &mut |limit| {
            let limit = match limit {
                Ok(limit) => limit,
                Err(missing) => {
                    return missing_key(rule, missing, parts)
                        .unwrap_or_else(|| self.bind_from(parts, index + 1, bound));
                }
            };
            match rule.cost_of(parts) {
                Ok(cost) => {
                    let next = BoundRule {
                        rule: index,
                        limit,
                        cost,
                        role: rule.role(),
                        before: bound,
                    };
                    self.bind_from(parts, index + 1, Some(&next))
                }
                Err(error) => {
                    Unchargeable::Cost(rule.policy(), error).decision(Protocol::of(&parts.headers))
                }
            }
        })
    }

    /// Binds the shared rules from `index` on after the in-process ones in
    /// `bound`, takes the in-flight rules' permits, then charges the
    /// in-process ones in one chain and the shared ones from this node's
    /// leases, as far as it can without waiting. (The layer sorts rules
    /// in-process, in-flight, shared: past `index` none is in-process.)
    fn charge(&self, parts: &Parts, index: usize, bound: Option<&BoundRule<'_>>) -> CallDecision {
        if index == self.rules.len() && !self.keeps {
            // The common case: every rule in process, and no charge kept
            // past the call. Charged as bound, with no charge recorded
            // unless the chain refuses.
            return match charge_chain(bound, self.shadows) {
                Ok(()) => CallDecision::Admitted(Vec::new()),
                Err(refused) => {
                    let mut charges = BoundRule::charges(bound);
                    let refused = enforced_refusal(&mut charges, refused);
                    CallDecision::Refused(self.refusal(
                        &charges,
                        refused,
                        Protocol::of(&parts.headers),
                    ))
                }
            };
        }
        let mut charges = BoundRule::charges(bound);
        let rules = || {
            let applying = self.rules.iter().enumerate().skip(index);
            applying.filter(|(_, rule)| rule.applies_to(parts))
        };
        // Every token rule is bound (its key and cost read) before any
        // permit is taken, so a request a token rule answers with a 4xx
        // never holds one, even briefly.
        for (index, rule) in rules() {
            let RuleLimit::Shared(limiter) = rule.limiter() else {
                continue;
            };
            let limit = match limiter.bind(parts) {
                Ok(limit) => limit,
                Err(missing) => match missing_key(rule, missing, parts) {
                    Some(answer) => return answer,
                    None => continue,
                },
            };
            match rule.cost_of(parts) {
                Ok(cost) => charges.push(Charge::shared(index, limit, cost, rule.role().clone())),
                Err(error) => {
                    return Unchargeable::Cost(rule.policy(), error)
                        .decision(Protocol::of(&parts.headers));
                }
            }
        }
        // Then the permits, then the in-process chain: a request the chain
        // (or a shared rule) refuses drops its permits with its charges,
        // which releases them exactly, and no token is taken for a request
        // refused a permit.
        for (index, rule) in rules() {
            let RuleLimit::InFlight(limiter) = rule.limiter() else {
                continue;
            };
            match limiter.acquire(parts, &|parts| rule.cost_of(parts)) {
                InFlightAnswer::Permit(permit) => {
                    charges.push(Charge::in_flight(index, permit, rule.role().clone()));
                }
                InFlightAnswer::Nothing => {}
                InFlightAnswer::Refused(_) if rule.role().is_shadow() => {
                    // The request goes on without the rule, holding no
                    // units of it, and counts for it if admitted.
                    let mut nothing = Charge::in_flight(index, Box::new(()), rule.role().clone());
                    nothing.shadowed = true;
                    charges.push(nothing);
                }
                InFlightAnswer::Refused(error) => {
                    let refusal = Refusal::from_in_flight(&error, rule.policy().name());
                    return CallDecision::Refused(
                        self.respond(refusal, Protocol::of(&parts.headers)),
                    );
                }
                InFlightAnswer::Cost(error) => {
                    return Unchargeable::Cost(rule.policy(), error)
                        .decision(Protocol::of(&parts.headers));
                }
                InFlightAnswer::NoKey(missing) => {
                    if let Some(answer) = missing_key(rule, missing, parts) {
                        return answer;
                    }
                }
            }
        }
        if let Err(refused) = charge_local(&mut charges) {
            let refused = enforced_refusal(&mut charges, refused);
            return CallDecision::Refused(self.refusal(
                &charges,
                refused,
                Protocol::of(&parts.headers),
            ));
        }
        match charge_shared_now(&mut charges, self.store_wait) {
            SharedProgress::Admitted => CallDecision::Admitted({
                count_shadowed(&charges);
                charges
                    .into_iter()
                    .filter(|charge| {
                        charge.is_in_flight()
                            || self.on_success
                            || self.rules[charge.rule].answers_to_response()
                    })
                    .map(Charge::into_owned)
                    .collect()
            }),
            SharedProgress::Refused(refused) => {
                CallDecision::Refused(self.refusal(&charges, refused, Protocol::of(&parts.headers)))
            }
            SharedProgress::Waits(from) => CallDecision::Waits {
                charges: charges.into_iter().map(Charge::into_owned).collect(),
                from,
            },
        }
    }
}

/// What a request without a key for `rule` comes to: the 500 of a server
/// that gave it no peer address (reported once per rule), the 400 if the
/// rule rejects a request without its key, or `None` to go on without the
/// rule.
fn missing_key(rule: &Rule, missing: NoKey, parts: &Parts) -> Option<CallDecision> {
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
