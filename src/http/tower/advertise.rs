//! What a request's charges tell the client: the RateLimit fields of an
//! admitted response, and the refusal's response.

use bytes::Bytes;
use http::{HeaderValue, Response};

use super::charge::{Charge, ChargeRefusal, violated};
use super::config::Config;
use super::protocol::Protocol;
use crate::advertised::Shape;
use crate::http::fields::ListWriter;
use crate::http::{PartitionKey, RateLimitPolicy, Refusal, ServiceLimit, delay_seconds};

impl Config {
    /// What a charge advertises: the request's partition key under its
    /// rule, if keyed, and the live limit this node can vouch for (the
    /// tokens left, the jittered effective window in seconds), if any.
    fn advert(&self, charge: &Charge<'_>) -> Advert {
        let pk = charge.partition(&self.keys, self.rules[charge.rule].policy().name());
        let live = charge
            .live()
            .map(|(remaining, next)| (remaining, self.jitter.apply(delay_seconds(next))));
        // Read only for a policy that follows its limit: one whose quota
        // the caller set says what the caller said.
        let shape = self.texts[charge.rule].shape.and_then(|_| charge.shape());
        Advert {
            rule: charge.rule,
            pk,
            live,
            shape,
        }
    }

    /// The policies of the charged rules and the live limits this node can
    /// vouch for, each tagged with the request's partition key: what a
    /// refusal carries. In-flight permits are left out (their limit has no
    /// window to advertise), as [`violated`] leaves them out.
    fn advertised(&self, charges: &[Charge<'_>]) -> (Vec<RateLimitPolicy>, Vec<ServiceLimit>) {
        let mut policies = Vec::with_capacity(charges.len());
        let mut limits = Vec::with_capacity(charges.len());
        for charge in advertised(charges) {
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
    pub(super) fn fields(
        &self,
        charges: &[Charge<'_>],
    ) -> (Option<HeaderValue>, Option<HeaderValue>) {
        let mut policies = ListWriter::default();
        let mut limits = ListWriter::default();
        let mut as_built = None;
        let mut count = 0;
        for charge in advertised(charges) {
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

    pub(super) fn refusal(
        &self,
        charges: &[Charge<'_>],
        refused: ChargeRefusal,
        protocol: Protocol,
    ) -> Response<Bytes> {
        let (policies, limits) = self.advertised(charges);
        // The refusing charge among the advertised ones (a token or shared
        // limit's: an in-flight refusal has an answer of its own).
        let refusing = refused
            .charge
            .map(|index| advertised(&charges[..index.min(charges.len())]).count());
        let refusal = Refusal::of_chain(refusing, refused.cause, &policies);
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
        let violated = violated(charges)
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

/// What one charge advertises ([`Config::advert`]).
struct Advert {
    rule: usize,
    pk: Option<PartitionKey>,
    /// The tokens left and the effective window in seconds.
    live: Option<(u64, u64)>,
    /// The limit's shape now, if the rule's policy follows it.
    shape: Option<Shape>,
}

/// The charges that advertise ([`Charge::advertises`]).
fn advertised<'c, 'a>(charges: &'c [Charge<'a>]) -> impl Iterator<Item = &'c Charge<'a>> {
    charges.iter().filter(|charge| charge.advertises())
}
