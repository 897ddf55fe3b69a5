//! What a request's charges tell the client: the RateLimit fields of an
//! admitted response, and the refusal's response.

use bytes::Bytes;
use http::{HeaderValue, Response};

use std::time::Duration;

use smallvec::SmallVec;

use super::charge::{Charge, ChargeRefusal};
use super::engine::Engine;
use super::protocol::Protocol;
use crate::advertised::Shape;
use crate::http::fields::ListWriter;
use crate::http::{PartitionKey, RateLimitPolicy, Refusal, ServiceLimit, delay_seconds};

impl Engine {
    /// What a charge advertises: the request's partition key under its
    /// rule, if keyed, and the live limit this node can vouch for (the
    /// tokens left, the jittered effective window in seconds), if any.
    fn advert(&self, charge: &Charge) -> Advert {
        let kind = self.kind(charge);
        let pk = kind.partition(
            &charge.held,
            &self.keys,
            self.rules[charge.rule].policy().name(),
        );
        let live = kind
            .live(&charge.held)
            .map(|(remaining, next)| (remaining, self.jitter.apply(delay_seconds(next))));
        // Read only for a policy that follows its limit: one whose quota
        // the caller set says what the caller said.
        let shape = self.texts[charge.rule]
            .shape
            .and_then(|_| kind.shape(&charge.held));
        Advert {
            rule: charge.rule,
            pk,
            live,
            shape,
        }
    }

    /// The policies of the charged rules and the live limits this node can
    /// vouch for, each tagged with the request's partition key: what a
    /// refusal carries. Limits with nothing to advertise (work in flight)
    /// are left out, as [`violated`](Self::violated) leaves them out.
    fn advertised(&self, charges: &[Charge]) -> (Vec<RateLimitPolicy>, Vec<ServiceLimit>) {
        let mut policies = Vec::with_capacity(charges.len());
        let mut limits = Vec::with_capacity(charges.len());
        for charge in self.advertised_charges(charges) {
            let advert = self.advert(charge);
            let (pk, live) = (advert.pk, advert.live);
            let mut policy = self.rules[advert.rule].policy().clone();
            if let Some(shape) = advert.shape {
                policy = policy.with_shape(shape);
            }
            if let Some((remaining, reset)) = live {
                let limit =
                    ServiceLimit::new(policy.name().clone(), remaining).with_reset_seconds(reset);
                limits.push(match pk {
                    Some(pk) => limit.with_partition_key(pk),
                    None => limit,
                });
            }
            if let Some(pk) = pk {
                policy = policy.with_partition_key(pk);
            }
            policies.push(policy);
        }
        (policies, limits)
    }

    /// The fields of an admitted request's response, written from each
    /// rule's text serialised when the layer was built: the same values
    /// [`rate_limit_policy_value`](crate::http::rate_limit_policy_value) and
    /// [`rate_limit_value`](crate::http::rate_limit_value) make of
    /// [`advertised`](Self::advertised)'s policies and limits, without
    /// building them.
    pub(crate) fn fields(&self, charges: &[Charge]) -> (Option<HeaderValue>, Option<HeaderValue>) {
        let mut policies = ListWriter::default();
        let mut limits = ListWriter::default();
        let mut as_built = None;
        let mut count = 0;
        for charge in self.advertised_charges(charges) {
            count += 1;
            let Advert {
                rule,
                pk,
                live,
                shape,
            } = self.advert(charge);
            let text = &self.texts[rule];
            policies.policy_now(text, self.rules[rule].policy(), shape, pk);
            if let Some((remaining, reset)) = live {
                limits.limit_text(text, remaining, Some(reset), pk);
            }
            as_built = (pk.is_none() && shape == text.shape).then_some(rule);
        }
        let policies = match (count, as_built) {
            // One policy, no key to tag, the limit shaped as when the layer
            // was built: the value built with the layer.
            (1, Some(rule)) => self.texts[rule].alone().cloned(),
            _ => policies.finish(),
        };
        (policies, limits.finish())
    }

    /// The response to a request whose charge `refused.charge` refused,
    /// every charge given back.
    pub(crate) fn refusal(
        &self,
        charges: &[Charge],
        refused: ChargeRefusal,
        protocol: Protocol,
    ) -> Response<Bytes> {
        let refusing = &charges[refused.charge];
        if !self.advertises(refusing) {
            // A limit with nothing to advertise (work in flight) answers
            // for itself: the other rules' windows say nothing of when the
            // work it waits on ends.
            let name = self.rules[refusing.rule].policy().name();
            return self.respond(Refusal::of(refused.cause, name), protocol);
        }
        let (policies, limits) = self.advertised(charges);
        // The refusing charge among the advertised ones.
        let at = self.advertised_charges(&charges[..refused.charge]).count();
        let refusal = Refusal::of_chain(Some(at), refused.cause, &policies);
        if refused.cause.retry_after().is_none() {
            // A refusal no wait can cure (a cost above the capacity) or one
            // that is the limiter's own shortage (a full key table, a store
            // down): the policies' windows say nothing about when to come
            // back, so they neither move Retry-After nor count as violated
            // by waiting.
            return self.respond(refusal, protocol);
        }
        // Every limit that would refuse its cost now is violated, not only
        // the first one that did.
        let violated = self
            .violated(charges)
            .into_iter()
            .zip(&policies)
            .filter(|(violated, _)| *violated)
            .map(|(_, policy)| policy.name().clone())
            .collect::<Vec<_>>();
        self.respond(
            refusal.with_violated(violated).with_service_limits(limits),
            protocol,
        )
    }
}

/// What one charge advertises ([`Engine::advert`]).
struct Advert {
    rule: usize,
    pk: Option<PartitionKey>,
    /// The tokens left and the effective window in seconds.
    live: Option<(u64, u64)>,
    /// The limit's shape now, if the rule's policy follows it.
    shape: Option<Shape>,
}

impl Engine {
    /// Whether the client is told of this charge: every one but a limit's
    /// with nothing to advertise (work in flight) and a quiet shadow
    /// rule's. The policies of a refusal and its violated flags both
    /// follow this, so they stay in step.
    fn advertises(&self, charge: &Charge) -> bool {
        self.kind(charge).advertises() && self.rules[charge.rule].role().advertised()
    }

    /// The charges the client is told of ([`advertises`](Self::advertises)).
    fn advertised_charges<'c>(&self, charges: &'c [Charge]) -> impl Iterator<Item = &'c Charge> {
        charges.iter().filter(|charge| self.advertises(charge))
    }

    /// For each advertised charge, whether its limit would refuse what the
    /// request charges it in all now: every such limit is violated, not
    /// only the first one that refused. A shadow rule's never is: it
    /// refuses nothing.
    fn violated(&self, charges: &[Charge]) -> SmallVec<[bool; 4]> {
        charges
            .iter()
            .zip(self.looks(charges))
            .filter(|(charge, _)| self.advertises(charge))
            .map(|(charge, look)| {
                !self.is_shadow(charge)
                    && look.is_some_and(|look| look.is_ok_and(|wait| wait > Duration::ZERO))
            })
            .collect()
    }
}
