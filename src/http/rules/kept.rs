//! What an admitted request's charges come to once its response head is
//! known: give-backs by status, settlement to the actual cost, the
//! RateLimit fields; and for the rules settled by the body's bytes, the
//! [`Meter`] an adapter's body settles when it ends.

use http::{Response, StatusCode};

use super::charge::Charge;
use super::engine::Engine;
use super::settle::Settlement;
use crate::http::fields::{RATELIMIT_NAME, RATELIMIT_POLICY_NAME};
use crate::sync::unmodelled::Arc;

/// The charges kept past the decision (those a status may give back, or
/// every one when the fields are advertised, and every permit), until the
/// response. It has no `Drop` of its own: a request whose response never
/// arrives (a client gone, an outer timeout, an inner error or panic)
/// keeps every token charge, because its handler may have done the work
/// and no response said otherwise; its permits are released with it, the
/// work being no longer in flight.
pub(crate) struct KeptCharges {
    pub(crate) engine: Arc<Engine>,
    pub(crate) charges: Vec<Charge>,
}

impl KeptCharges {
    /// Gives back the charges of the rules configured to give back this
    /// status, each through its receipt (the one rule that never mints
    /// credit), settles those of the rules that settle to the actual cost
    /// the response reports, then adds the fields if configured (never to
    /// 401 or 403). The charges of rules settled by the body's bytes are
    /// handed back in a [`Meter`], to be settled when the body ends.
    pub(crate) fn finish<B>(mut self, response: &mut Response<B>) -> Option<Meter> {
        let status = response.status();
        let mut by_bytes = false;
        for charge in &mut self.charges {
            let rule = &self.engine.rules[charge.rule];
            if rule.gives_back(status) {
                rule.kind().give_back(&mut charge.held);
            } else if charge.shadowed || charge.beside {
                // A shadow rule that would have refused the request took
                // nothing for it: enforced, it would have cost nothing. One
                // beside an enforced rule on its limit took nothing either:
                // the enforced rule settles the limit.
            } else if let Some(how) = rule.settlement() {
                if *how == Settlement::BodyBytes {
                    by_bytes = true;
                } else if let Some(actual) = how.actual(response) {
                    rule.kind().settle(&mut charge.held, charge.cost, actual);
                }
            }
        }
        let private = status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN;
        if self.engine.on_success && !private && !self.charges.is_empty() {
            let (policies, limits) = self.engine.fields(&self.charges);
            let headers = response.headers_mut();
            if let Some(value) = policies {
                headers.insert(RATELIMIT_POLICY_NAME, value);
            }
            if let Some(value) = limits {
                headers.insert(RATELIMIT_NAME, value);
            }
        }
        if !by_bytes {
            return None;
        }
        let engine = &self.engine;
        let metered = self
            .charges
            .into_iter()
            .filter(|charge| {
                let rule = &engine.rules[charge.rule];
                !charge.shadowed
                    && !charge.beside
                    && !rule.gives_back(status)
                    && rule.settlement() == Some(&Settlement::BodyBytes)
            })
            .collect();
        Some(Meter {
            engine: self.engine,
            charges: metered,
            counted: 0,
        })
    }
}

/// What a response body settles when it ends: the charges of the rules
/// settled by its bytes, and the bytes counted so far. Only the tower
/// layer's body counts them; elsewhere the estimate stands.
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) struct Meter {
    engine: Arc<Engine>,
    charges: Vec<Charge>,
    counted: u64,
}

#[cfg_attr(not(feature = "tower"), allow(dead_code))]
impl Meter {
    /// Counts `bytes` more of the body's data.
    pub(crate) fn count(&mut self, bytes: u64) {
        self.counted = self.counted.saturating_add(bytes);
    }

    /// Settles every charge to the bytes counted.
    pub(crate) fn settle(mut self) {
        for charge in &mut self.charges {
            let kind = self.engine.rules[charge.rule].kind();
            kind.settle(&mut charge.held, charge.cost, self.counted);
        }
    }
}
