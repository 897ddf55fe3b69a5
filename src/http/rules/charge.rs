//! Charging one request's rules, all or nothing, each through its kind
//! ([`RuleKind`](super::kind::RuleKind)): the enforced rules first, by
//! stage (permits, in-process limits, shared budgets); once they all took
//! their cost, each shadow rule apart. If an enforced rule refuses, every
//! charge taken so far is given back through its own receipt (in reverse
//! of the order bound: latest first within a stage), and the refusal
//! reports the longest wait among the limits that would refuse now what
//! the request charges them.

use std::time::Duration;

use smallvec::SmallVec;

use super::engine::Engine;
use super::kind::{Held, Now, RuleKind};
use crate::error::AcquireError;
use crate::http::refusal::Cause;
use crate::limit::Identity;

/// The charges of one request, on the stack for a layer of up to four
/// rules (a heap allocation per request beyond that).
pub(crate) type Charges = SmallVec<[Charge; 4]>;

/// A rule bound to one request: which rule, its cost, and what its kind
/// holds of the request (its key and, once charged, what charging took).
pub(crate) struct Charge {
    pub(crate) rule: usize,
    pub(crate) cost: u64,
    /// A shadow rule's charge that its limit refused: it takes nothing,
    /// and is counted if the request is admitted.
    pub(crate) shadowed: bool,
    /// A shadow rule's charge on a limit an enforced rule of the request
    /// charges: it takes nothing, and settles and gives back nothing (the
    /// enforced rule's charge is the limit's).
    pub(crate) beside: bool,
    pub(crate) held: Held,
}

/// Why a request's charges were refused: the cause, and the index of the
/// charge whose limit refused.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChargeRefusal {
    pub(crate) charge: usize,
    pub(crate) cause: Cause,
}

/// How far charging got without awaiting.
pub(crate) enum Progress {
    /// Every rule took its cost (or, in shadow, was decided).
    Admitted,
    /// The charge at this step of [`Engine::order`] is worth waiting for:
    /// charge it, and the ones after it, with [`Engine::charge_waiting`].
    Waits(usize),
    /// An enforced rule refused, and every charge is given back.
    Refused(ChargeRefusal),
}

impl Engine {
    /// The kind of the charge's rule.
    pub(crate) fn kind(&self, charge: &Charge) -> &dyn RuleKind {
        self.rules[charge.rule].kind()
    }

    /// The order the charges are taken in, as indices into `charges`:
    /// every enforced one by its kind's stage (permits, in-process limits,
    /// shared budgets), then every shadow one the same way, so that a
    /// shadow rule never takes, undoes or retakes what an enforced rule
    /// holds. Without a shadow rule or a permit beside token rules, the
    /// charges' own order.
    fn order(&self, charges: &[Charge]) -> SmallVec<[usize; 4]> {
        let mut order: SmallVec<[usize; 4]> = (0..charges.len()).collect();
        if self.reorders {
            order.sort_by_key(|&index| {
                let charge = &charges[index];
                (self.is_shadow(charge), self.rules[charge.rule].stage())
            });
        }
        order
    }

    /// Whether the charge at `index` is taken: one with a cost, unless it
    /// is a shadow rule's on a limit an enforced rule of the request
    /// charges, which takes nothing and refuses nothing (the enforced
    /// rule's decision is the limit's, and a second charge of it would
    /// refuse what the enforced rule alone admits).
    #[inline(always)]
    fn takes(&self, charges: &mut [Charge], index: usize) -> bool {
        let charge = &charges[index];
        if charge.cost == 0 {
            return false;
        }
        if !self.shadows || !self.is_shadow(charge) {
            return true;
        }
        let identity = self.kind(charge).identity(&charge.held);
        let shares = identity.is_some()
            && charges.iter().any(|other| {
                !self.is_shadow(other) && self.kind(other).identity(&other.held) == identity
            });
        if shares {
            charges[index].cost = 0;
            charges[index].beside = true;
        }
        !shares
    }

    /// What a charge's refusal means for the request: a shadow rule's
    /// marks it (it takes nothing, and is counted if the request is
    /// admitted); an enforced rule's gives every charge back.
    fn refused_by(
        &self,
        charges: &mut [Charge],
        index: usize,
        cause: Cause,
    ) -> Result<(), ChargeRefusal> {
        if self.is_shadow(&charges[index]) {
            charges[index].shadowed = true;
            charges[index].cost = 0;
            return Ok(());
        }
        for charge in charges.iter_mut().rev() {
            self.rules[charge.rule].kind().give_back(&mut charge.held);
        }
        Err(self.refused(charges, index, cause))
    }

    /// Charges the request's rules without awaiting, all or nothing; stops
    /// at the first charge only waiting can decide.
    pub(crate) fn charge_now(&self, charges: &mut [Charge]) -> Progress {
        if self.reorders {
            for (step, index) in self.order(charges).into_iter().enumerate() {
                if let Some(progress) = self.charge_step(charges, step, index) {
                    return progress;
                }
            }
        } else {
            // The charges' own order: nothing to sort.
            for index in 0..charges.len() {
                if let Some(progress) = self.charge_step(charges, index, index) {
                    return progress;
                }
            }
        }
        Progress::Admitted
    }

    /// Takes the charge at `index`, step `step` of the order: `None` to go
    /// on to the next step.
    #[inline(always)]
    fn charge_step(&self, charges: &mut [Charge], step: usize, index: usize) -> Option<Progress> {
        if !self.takes(charges, index) {
            return None;
        }
        let charge = &mut charges[index];
        let kind = self.rules[charge.rule].kind();
        match kind.take(&mut charge.held, charge.cost, self.store_wait) {
            Now::Taken => None,
            Now::Waits => Some(Progress::Waits(step)),
            Now::Refused(cause) => self
                .refused_by(charges, index, cause)
                .err()
                .map(Progress::Refused),
        }
    }

    /// Charges the rules from step `from` of the order on, waiting (the
    /// layer's `store_wait` in all) for those only waiting can decide. A
    /// refusal gives every charge back. Cancelling the future leaves every
    /// charge taken so far in place: the request stays charged, as one
    /// whose client hung up.
    pub(crate) async fn charge_waiting(
        &self,
        charges: &mut [Charge],
        from: usize,
    ) -> Result<(), ChargeRefusal> {
        let deadline = tokio::time::Instant::now().checked_add(self.store_wait);
        for (step, index) in self.order(charges).into_iter().enumerate().skip(from) {
            if !self.takes(charges, index) {
                continue;
            }
            let left = deadline.map_or(Duration::MAX, |at| {
                at.saturating_duration_since(tokio::time::Instant::now())
            });
            let charge = &mut charges[index];
            let kind = self.rules[charge.rule].kind();
            let answer = kind
                .take_waiting(&mut charge.held, charge.cost, left, step == from)
                .await;
            if let Err(cause) = answer {
                self.refused_by(charges, index, cause)?;
            }
        }
        Ok(())
    }

    /// The refusal of the charge at `index` for `cause`, every charge
    /// given back: shadow charges cost nothing (they took nothing of a
    /// refused request, so they are neither violated nor counted on a
    /// limit they share). Each enforced limit is looked at (never charged)
    /// for what the request charges it in all: the first one that can
    /// never admit it is reported; otherwise, for a shortage, the longest
    /// of their waits, so a client that waits it out does not run into
    /// the next limit at once.
    #[cold]
    fn refused(&self, charges: &mut [Charge], index: usize, cause: Cause) -> ChargeRefusal {
        for charge in charges.iter_mut() {
            if self.is_shadow(charge) {
                charge.cost = 0;
            }
        }
        let Cause::Limit(error) = cause else {
            return ChargeRefusal {
                charge: index,
                cause,
            };
        };
        let mut longest = error.retry_after().unwrap_or(Duration::ZERO);
        for (look, at) in self.looks(charges).into_iter().zip(0..) {
            match look {
                Some(Ok(wait)) => longest = longest.max(wait),
                Some(Err(error)) => {
                    return ChargeRefusal {
                        charge: at,
                        cause: Cause::Limit(error),
                    };
                }
                None => {}
            }
        }
        let error = match error {
            AcquireError::Insufficient { .. } => AcquireError::Insufficient {
                retry_after: longest,
            },
            other => other,
        };
        ChargeRefusal {
            charge: index,
            cause: Cause::Limit(error),
        }
    }
}

impl Engine {
    /// For each charge with a cost, what its limit says of taking what the
    /// request charges it in all (its cost and that of every other charge
    /// on the same limit: see `Identity`), if this node can tell; `None`
    /// for a charge without a cost. Read on a refusal only.
    pub(crate) fn looks(
        &self,
        charges: &[Charge],
    ) -> SmallVec<[Option<Result<Duration, AcquireError>>; 4]> {
        let charged: SmallVec<[(Option<Identity>, u64); 4]> = charges
            .iter()
            .map(|charge| (self.kind(charge).identity(&charge.held), charge.cost))
            .collect();
        charges
            .iter()
            .enumerate()
            .map(|(index, charge)| {
                if charge.cost == 0 {
                    return None;
                }
                // Past `u64::MAX`, more than any capacity.
                let all = combined_cost(&charged, index).unwrap_or(u64::MAX);
                self.kind(charge).look(&charge.held, all)
            })
            .collect()
    }
}

/// What the charges charge the limit of the one at `index`: the costs of
/// every charge of the same identity (its own alone without one), `None`
/// past `u64::MAX`.
fn combined_cost(charged: &[(Option<Identity>, u64)], index: usize) -> Option<u64> {
    let (own, cost) = charged[index];
    if own.is_none() {
        return Some(cost);
    }
    charged
        .iter()
        .filter(|(identity, _)| *identity == own)
        .try_fold(0u64, |sum, &(_, cost)| sum.checked_add(cost))
}
