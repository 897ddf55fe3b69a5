//! Charging one request's rules, all or nothing: the in-flight rules'
//! permits first, then the in-process rules in one chain, then the shared
//! ones in order; if any refuses, every charge taken so far, in-process or
//! shared, is given back through its own receipt, and every permit is
//! released.

use std::cell::Cell;
use std::time::Duration;

use smallvec::SmallVec;

use super::in_flight::InFlightPermit;
use super::local::RequestLimit;
use super::shadow::Role;
use super::shared::{SharedKey, SharedOutcome, SharedReceipt};
use crate::advertised::Shape;
use crate::error::AcquireError;
use crate::hierarchy::{HierarchyError, Step, try_acquire_all};
use crate::hierarchy::{Taken, combined_cost, take_all};
use crate::http::refusal::Cause;
use crate::http::{PartitionKey, PartitionKeys, PolicyName};
use crate::limit::Identity;
use crate::limit::Limit;
use crate::shared::{BudgetError, HotAnswer};

/// The charges of one request, on the stack for a layer of up to four
/// rules (a heap allocation per request beyond that).
pub(super) type Charges<'a> = SmallVec<[Charge<'a>; 4]>;

/// A rule bound to one request: which rule, its limit, the cost, and once
/// charged, the receipt. `'a` is the length of the call that bound it: an
/// in-process limit is borrowed until the charge is kept past the call
/// ([`into_owned`](Self::into_owned)).
pub(super) struct Charge<'a> {
    pub(super) rule: usize,
    pub(super) cost: u64,
    pub(super) limit: Target<'a>,
    /// Whether the rule's refusal refuses the request, or is only counted.
    pub(super) role: Role,
    /// A shadow rule's charge that its limit refused: left out (it takes
    /// nothing), and counted if the request is admitted
    /// ([`count_shadowed`]).
    pub(super) shadowed: bool,
}

/// A charge's limit and what charging it came to.
pub(super) enum Target<'a> {
    /// An in-process limit, with what charging took, kept until the
    /// response says whether to give it back; `None` for a cost of 0 or a
    /// charge not (yet) taken.
    Local {
        bound: LocalHandle<'a>,
        taken: Option<Taken>,
    },
    /// A shared limit, with what charging it came to and, once taken, its
    /// receipt, kept until the response says whether to give it back.
    /// Boxed: it owns its key twice over, and keeps the in-process
    /// charges, the common ones, small.
    Shared {
        bound: Box<SharedKey>,
        outcome: SharedOutcome,
        receipt: Option<SharedReceipt>,
    },
    /// An in-flight limit's permit, held until the inner service answers
    /// (or the request is dropped): dropping it releases its units. It
    /// charges no token, so it gives nothing back and advertises nothing.
    InFlight(InFlightPermit),
}

/// An in-process limit bound to a request: borrowed from the call that
/// bound it, or owned by a charge that outlives that call.
pub(super) enum LocalHandle<'a> {
    Borrowed(&'a dyn RequestLimit),
    Owned(Box<dyn RequestLimit>),
}

impl LocalHandle<'_> {
    fn get(&self) -> &dyn RequestLimit {
        match self {
            LocalHandle::Borrowed(bound) => *bound,
            LocalHandle::Owned(bound) => &**bound,
        }
    }
}

impl<'a> Charge<'a> {
    pub(super) fn local(
        rule: usize,
        bound: &'a dyn RequestLimit,
        cost: u64,
        role: Role,
    ) -> Charge<'a> {
        Charge {
            rule,
            cost,
            limit: Target::Local {
                bound: LocalHandle::Borrowed(bound),
                taken: None,
            },
            role,
            shadowed: false,
        }
    }

    pub(super) fn shared(rule: usize, bound: SharedKey, cost: u64, role: Role) -> Charge<'a> {
        Charge {
            rule,
            cost,
            limit: Target::Shared {
                bound: Box::new(bound),
                outcome: SharedOutcome::Untried,
                receipt: None,
            },
            role,
            shadowed: false,
        }
    }

    pub(super) fn in_flight(rule: usize, permit: InFlightPermit, role: Role) -> Charge<'a> {
        Charge {
            rule,
            cost: 0,
            limit: Target::InFlight(permit),
            role,
            shadowed: false,
        }
    }

    /// Whether this charge is an in-flight permit, kept until the response
    /// whatever the rule gives back.
    pub(super) fn is_in_flight(&self) -> bool {
        matches!(self.limit, Target::InFlight(_))
    }

    /// Whether this charge is advertised to the client: every charge but an
    /// in-flight permit, whose limit has no window for the fields, and a
    /// quiet shadow rule's. The policies of a refusal and its violated
    /// flags ([`violated`]) both follow this, so they stay in step.
    pub(super) fn advertises(&self) -> bool {
        !self.is_in_flight() && self.role.advertised()
    }

    /// This charge, owning its limit: to keep past the call that bound it.
    pub(super) fn into_owned(self) -> Charge<'static> {
        let limit = match self.limit {
            Target::Local { bound, taken } => Target::Local {
                bound: match bound {
                    LocalHandle::Borrowed(bound) => LocalHandle::Owned(bound.to_owned()),
                    LocalHandle::Owned(bound) => LocalHandle::Owned(bound),
                },
                taken,
            },
            Target::Shared {
                bound,
                outcome,
                receipt,
            } => Target::Shared {
                bound,
                outcome,
                receipt,
            },
            Target::InFlight(permit) => Target::InFlight(permit),
        };
        Charge {
            rule: self.rule,
            cost: self.cost,
            limit,
            role: self.role,
            shadowed: self.shadowed,
        }
    }

    /// Gives back what this charge took, through its receipt, once: an
    /// in-process limit's by the one rule that never mints credit; a
    /// shared limit's into the key's lease pool it came from, or to the
    /// store by the same rule (see `KeyedReceipt`).
    pub(super) fn give_back(&mut self) {
        match &mut self.limit {
            Target::Local { bound, taken } => {
                if let Some(taken) = taken.take() {
                    bound.get().undo(&taken);
                }
            }
            Target::Shared { bound, receipt, .. } => {
                if let Some(receipt) = receipt.take() {
                    receipt.undo(bound.runtime());
                }
            }
            // Released when the charge is dropped, response or not.
            Target::InFlight(_) => {}
        }
    }

    /// Settles this charge to `actual`, once: an in-process limit's by the
    /// rule of [`Receipt::settle`](crate::Receipt::settle), a shared
    /// limit's by its receipt's ([`KeyedReceipt::settle`](crate::shared::KeyedReceipt::settle),
    /// in the background). A rule that settles is one of these
    /// (`Rule::settled_by`).
    pub(super) fn settle(&mut self, actual: u64) {
        match &mut self.limit {
            Target::Local { bound, taken } => match taken.take() {
                Some(taken) => bound.get().settle(&taken, actual),
                // A cost of 0 took nothing: an actual cost is all excess,
                // charged as any excess is.
                None if actual > 0 && self.cost == 0 => bound.get().debit(actual),
                None => {}
            },
            Target::Shared { bound, receipt, .. } => match receipt.take() {
                Some(receipt) => receipt.settle(actual, bound.runtime()),
                None if actual > 0 && self.cost == 0 => bound.debit_in_background(actual),
                None => {}
            },
            Target::InFlight(_) => {}
        }
    }

    /// What this node can tell a client of the limit's live state: the
    /// tokens left and the wait until the next one. A shared limit's node
    /// knows only the tokens it holds leased for the key and, once refused,
    /// the store's wait; with neither (a cold key) it says nothing rather
    /// than a number it cannot back.
    pub(super) fn live(&self) -> Option<(u64, Duration)> {
        match &self.limit {
            Target::Local { bound, .. } => {
                let bound = bound.get();
                let available = bound.available();
                Some((available, next_unit(bound, available)))
            }
            Target::Shared { bound, outcome, .. } => match outcome {
                SharedOutcome::Refused(BudgetError::Limit(AcquireError::Insufficient {
                    retry_after,
                })) => Some((0, *retry_after)),
                _ => {
                    let pooled = bound.pooled();
                    (pooled > 0).then(|| (pooled, bound.quota().refill_interval()))
                }
            },
            Target::InFlight(_) => None,
        }
    }

    /// The quota and window this charge's limit advertises now: an
    /// in-process limit's own, a shared limit's store's quota; none for a
    /// permit.
    pub(super) fn shape(&self) -> Option<Shape> {
        match &self.limit {
            Target::Local { bound, .. } => Some(bound.get().shape()),
            Target::Shared { bound, .. } => Some(Shape::from(&bound.quota())),
            Target::InFlight(_) => None,
        }
    }

    /// The wait until this charge's limit would take `cost` (what the
    /// request charges it in all), if this node can tell: zero if it fits
    /// now.
    fn wait(&self, cost: u64) -> Option<Duration> {
        match &self.limit {
            Target::Local { bound, .. } => bound.get().retry_after(cost).ok(),
            Target::Shared { outcome, .. } => match outcome {
                SharedOutcome::Refused(BudgetError::Limit(AcquireError::Insufficient {
                    retry_after,
                })) => Some(*retry_after),
                _ => None,
            },
            Target::InFlight(_) => None,
        }
    }

    /// Which limit this charge's is: a shared limit's charge is its own
    /// (its wait is the store's answer, whatever else the request charges).
    fn identity(&self) -> Identity {
        match &self.limit {
            Target::Local { bound, .. } => bound.get().identity(),
            Target::Shared { bound, .. } => Identity::of(&**bound),
            // No token limit's: its wait is never asked.
            Target::InFlight(_) => Identity::NONE,
        }
    }

    /// The partition key this charge is advertised under, if keyed.
    pub(super) fn partition(
        &self,
        keys: &PartitionKeys,
        name: &PolicyName,
    ) -> Option<PartitionKey> {
        match &self.limit {
            Target::Local { bound, .. } => bound.get().partition(keys, name),
            Target::Shared { bound, .. } => Some(bound.partition(keys, name)),
            Target::InFlight(_) => None,
        }
    }
}

/// For each of `charges`, the wait until its limit would take what the
/// request charges it in all (its cost and that of every other charge on
/// the same limit, through whichever rule: see `Identity`), if this node
/// can tell: zero if it fits now. Read on a refusal only.
fn waits(charges: &[Charge<'_>]) -> SmallVec<[Option<Duration>; 4]> {
    let charged: SmallVec<[(Identity, u64); 4]> = charges
        .iter()
        .map(|charge| (charge.identity(), charge.cost))
        .collect();
    charges
        .iter()
        .enumerate()
        .map(|(index, charge)| {
            // Past `u64::MAX`, more than any capacity: no wait.
            charge.wait(combined_cost(&charged, index).unwrap_or(u64::MAX))
        })
        .collect()
}

/// For each advertised charge, whether its limit would refuse what the
/// request charges it in all now: every such limit is violated, not only
/// the first one that refused. A shadow rule's never is: it refuses
/// nothing.
pub(super) fn violated(charges: &[Charge<'_>]) -> SmallVec<[bool; 4]> {
    charges
        .iter()
        .zip(waits(charges))
        // In the order of the advertised policies, which leave permits out.
        .filter(|(charge, _)| charge.advertises())
        .map(|(charge, wait)| {
            !charge.role.is_shadow()
                && charge.cost > 0
                && wait.is_some_and(|wait| wait > Duration::ZERO)
        })
        .collect()
}

/// An in-process rule bound for the length of `call`: its index, its limit
/// bound to the request, its cost, and the rules bound before it (each on
/// a stack frame of the binding, which holds its key).
pub(super) struct BoundRule<'a> {
    pub(super) rule: usize,
    pub(super) limit: &'a dyn RequestLimit,
    pub(super) cost: u64,
    pub(super) role: &'a Role,
    pub(super) before: Option<&'a BoundRule<'a>>,
}

impl<'a> BoundRule<'a> {
    /// What `f` makes of each link of `chain`, first bound first, leaving
    /// out the links it makes nothing of. The links run from the last bound
    /// back to the first, so they are pushed that way and turned round:
    /// pushes onto the stack, where an iterator chain collected (twice, to
    /// turn it round) measured a quarter of the layer's bookkeeping.
    fn collect<T>(
        chain: Option<&'a BoundRule<'a>>,
        mut f: impl FnMut(&'a BoundRule<'a>) -> Option<T>,
    ) -> SmallVec<[T; 4]> {
        let mut out = SmallVec::new();
        let mut link = chain;
        while let Some(this) = link {
            if let Some(item) = f(this) {
                out.push(item);
            }
            link = this.before;
        }
        out.reverse();
        out
    }

    /// A charge per link of `chain`, in the order the rules were bound,
    /// none taken yet.
    pub(super) fn charges(chain: Option<&'a BoundRule<'a>>) -> Charges<'a> {
        BoundRule::collect(chain, |link| {
            Some(Charge::local(
                link.rule,
                link.limit,
                link.cost,
                link.role.clone(),
            ))
        })
    }
}

/// Charges the in-process limits of `chain`, all or nothing, keeping no
/// receipt: for a request none of whose charges outlives the call. The
/// enforced rules are charged first, in one chain that knows nothing of
/// shadow rules; only once they admit is each shadow rule decided apart
/// ([`decide_shadow`]), so a shadow rule never takes, undoes or retakes
/// what an enforced rule holds. `shadows` is whether the layer has a
/// shadow rule at all: without one the chain is charged as it is, asking no
/// link its role. The refusal's `charge` is an index into
/// [`BoundRule::charges`].
pub(super) fn charge_chain(
    chain: Option<&BoundRule<'_>>,
    shadows: bool,
) -> Result<(), ChargeRefusal> {
    let steps = BoundRule::collect(chain, |link| {
        let enforced = !shadows || !link.role.is_shadow();
        (link.cost > 0 && enforced).then(|| Step::new(link.limit, link.cost))
    });
    if let Err(refused) = try_acquire_all(&steps) {
        return Err(ChargeRefusal::of_chain(refused, |step| {
            nth_with_cost(
                BoundRule::collect(chain, |link| Some(enforced_cost(link))),
                step,
            )
        }));
    }
    if shadows {
        let links = BoundRule::collect(chain, Some);
        let enforced = || links.iter().filter(|link| !link.role.is_shadow());
        for link in links.iter().filter(|link| link.cost > 0) {
            if let Role::Shadow(count) = link.role {
                let identity = link.limit.identity();
                let shares = enforced().any(|other| other.limit.identity() == identity);
                if decide_shadow(link.limit, link.cost, shares).is_err() {
                    count.refused();
                }
            }
        }
    }
    Ok(())
}

/// What a link charges in the enforced chain: a shadow rule nothing.
fn enforced_cost(link: &BoundRule<'_>) -> u64 {
    if link.role.is_shadow() { 0 } else { link.cost }
}

/// Decides a shadow rule apart from the enforced ones, once they admitted
/// the request: its own limit takes `cost` as enforcing it would (the
/// receipt, to keep or to give back with the request's other charges), or
/// refuses, which only counts. On a limit an enforced rule of the request
/// also charges (`shares`), it takes nothing and refuses nothing: the
/// enforced rule's decision is the limit's, and a second charge of it
/// would refuse what the enforced rule alone admits.
fn decide_shadow(limit: &dyn Limit, cost: u64, shares: bool) -> Result<Option<Taken>, ()> {
    if shares {
        return Ok(None);
    }
    limit.take(cost).map(Some).map_err(drop)
}

/// A refusal as the client sees it when shadow rules were charged beside
/// the enforced ones: the shadow charges' costs zeroed (they refuse
/// nothing and take nothing of a refused request, so they are neither
/// violated nor counted on a limit they share), and the wait recomputed
/// over the enforced charges alone, so that a shadow rule never moves
/// Retry-After. A refusal with no shadow charge is left as it is.
pub(super) fn enforced_refusal(
    charges: &mut [Charge<'_>],
    refused: ChargeRefusal,
) -> ChargeRefusal {
    if !charges.iter().any(|charge| charge.role.is_shadow()) {
        return refused;
    }
    for charge in charges.iter_mut().filter(|charge| charge.role.is_shadow()) {
        charge.cost = 0;
    }
    let cause = match refused.cause {
        Cause::Limit(AcquireError::Insufficient { retry_after }) => {
            let enforced = charges
                .iter()
                .zip(waits(charges))
                .filter(|(charge, _)| charge.cost > 0)
                .filter_map(|(_, wait)| wait)
                .max();
            Cause::Limit(AcquireError::Insufficient {
                retry_after: enforced
                    .filter(|wait| !wait.is_zero())
                    .unwrap_or(retry_after),
            })
        }
        other => other,
    };
    ChargeRefusal { cause, ..refused }
}

/// Counts, for each shadow rule whose limit refused its charge
/// ([`Charge::shadowed`]), a request it would have refused: called once
/// the request is admitted, so a shadow rule counts exactly the requests
/// that enforcing it would add to the refusals, whatever the rules' order.
pub(super) fn count_shadowed(charges: &[Charge<'_>]) {
    for charge in charges.iter().filter(|charge| charge.shadowed) {
        if let Role::Shadow(count) = &charge.role {
            count.refused();
        }
    }
}

/// Why a request's charges were refused: the cause, and the index of the
/// charge whose limit refused, if one did.
#[derive(Clone, Copy, Debug)]
pub(super) struct ChargeRefusal {
    pub(super) charge: Option<usize>,
    pub(super) cause: Cause,
}

impl ChargeRefusal {
    /// A chain's refusal, its step's index turned into a charge's by
    /// `charge`.
    fn of_chain(refused: HierarchyError, charge: impl FnOnce(usize) -> usize) -> ChargeRefusal {
        match refused {
            HierarchyError::Refused { limit, error } => ChargeRefusal {
                charge: Some(charge(limit)),
                cause: Cause::Limit(error),
            },
            HierarchyError::TooManySteps { .. } => ChargeRefusal {
                charge: None,
                cause: Cause::Misconfigured,
            },
        }
    }
}

/// The index, among charges of `costs`, of the `step`th one with a cost
/// (the steps of a chain leave zero costs out); 0 past the last.
fn nth_with_cost(costs: impl IntoIterator<Item = u64>, step: usize) -> usize {
    costs
        .into_iter()
        .enumerate()
        .filter(|(_, cost)| *cost > 0)
        .nth(step)
        .map_or(0, |(index, _)| index)
}

/// An in-process charge as a step: its index among the charges, its limit,
/// its cost, and the slot its receipt goes into.
type Slot<'a> = (usize, &'a dyn Limit, u64, &'a Cell<Option<Taken>>);

/// Charges every enforced in-process step with a cost, all or nothing, and
/// leaves each receipt in its charge; once they admit, decides each shadow
/// rule apart ([`decide_shadow`]): one that would refuse is marked
/// [`Charge::shadowed`] and its cost set to 0 (it takes nothing and is
/// advertised as not violated), as is one on an enforced rule's limit.
/// The refusal's `charge` is an index into `charges`.
pub(super) fn charge_local(charges: &mut [Charge<'_>]) -> Result<(), ChargeRefusal> {
    take_local(charges)?;
    for index in 0..charges.len() {
        let charge = &charges[index];
        let Target::Local { bound, .. } = &charge.limit else {
            continue;
        };
        if !charge.role.is_shadow() || charge.cost == 0 {
            continue;
        }
        let identity = bound.get().identity();
        let shares = charges.iter().any(|other| {
            !other.role.is_shadow()
                && matches!(&other.limit, Target::Local { bound, .. } if bound.get().identity() == identity)
        });
        let decided = decide_shadow(bound.get(), charge.cost, shares);
        let charge = &mut charges[index];
        match (decided, &mut charge.limit) {
            (Ok(Some(receipt)), Target::Local { taken, .. }) => *taken = Some(receipt),
            (Ok(_), _) => charge.cost = 0,
            (Err(()), _) => {
                charge.shadowed = true;
                charge.cost = 0;
            }
        }
    }
    Ok(())
}

/// The enforced in-process charges of [`charge_local`], all or nothing.
fn take_local(charges: &mut [Charge<'_>]) -> Result<(), ChargeRefusal> {
    // Zero-cost steps charge nothing (an empty body under a per-byte
    // limit), so they are left out rather than refused as `ZeroCost`.
    // Each step's receipt goes straight into its charge, through a `Cell`
    // over the charge's own slot (the steps borrow the limits while the
    // receipts arrive). The limits and the steps stay on the stack for up
    // to four rules: charging allocates nothing. `take_all` hands receipts
    // over only once every step passed, so a refused request leaves every
    // slot empty.
    let limits: SmallVec<[Slot<'_>; 4]> = charges
        .iter_mut()
        .enumerate()
        .filter(|(_, charge)| charge.cost > 0 && !charge.role.is_shadow())
        .filter_map(|(i, charge)| match &mut charge.limit {
            Target::Local { bound, taken } => {
                let limit: &dyn Limit = bound.get();
                Some((i, limit, charge.cost, Cell::from_mut(taken)))
            }
            Target::Shared { .. } | Target::InFlight(_) => None,
        })
        .collect();
    let steps: SmallVec<[Step<'_>; 4]> = limits
        .iter()
        .map(|(_, limit, cost, _)| Step::new(*limit, *cost))
        .collect();
    take_all(&steps, |index, receipt| limits[index].3.set(Some(*receipt))).map_err(|refused| {
        ChargeRefusal::of_chain(refused, |step| limits.get(step).map_or(0, |slot| slot.0))
    })
}

/// How far charging the shared limits got without awaiting.
pub(super) enum SharedProgress {
    /// Every shared limit took its cost.
    Admitted,
    /// The shared limit at this index is worth waiting for: charge it, and
    /// the ones after it, with [`charge_shared_waiting`].
    Waits(usize),
    /// A shared limit refused, and every in-process charge is given back.
    Refused(ChargeRefusal),
}

/// A shared limit's answer without awaiting, as a decision; `None` if it is
/// worth waiting on instead: only its store can decide (a key this node
/// holds no lease of), or its lease is short but a refill may land within
/// `max_wait`. A node's empty pool is not the fleet's empty budget, so it
/// is never a 429 while the wait could still admit.
fn decided_now(
    attempt: Result<HotAnswer<SharedReceipt>, BudgetError>,
    max_wait: Duration,
) -> Option<Result<SharedReceipt, BudgetError>> {
    match attempt {
        Ok(HotAnswer::Admitted(receipt)) => Some(Ok(receipt)),
        Ok(HotAnswer::AskStore) => None,
        Err(BudgetError::Limit(AcquireError::Insufficient { retry_after }))
            if retry_after <= max_wait =>
        {
            None
        }
        Err(refused) => Some(Err(refused)),
    }
}

/// Charges the shared limits in order without awaiting, from this node's
/// leases. Stops at the first worth waiting for (`max_wait` in all).
pub(super) fn charge_shared_now(charges: &mut [Charge<'_>], max_wait: Duration) -> SharedProgress {
    for index in 0..charges.len() {
        let attempt = match &charges[index].limit {
            Target::Shared { bound, .. } if charges[index].cost > 0 => {
                bound.try_take(charges[index].cost)
            }
            _ => continue,
        };
        let Some(decided) = decided_now(attempt, max_wait) else {
            return SharedProgress::Waits(index);
        };
        if let Err(refused) = record(charges, index, decided) {
            return SharedProgress::Refused(refused);
        }
    }
    SharedProgress::Admitted
}

/// Charges the shared limits from `from` on, waiting (`max_wait` in all)
/// for the store or a refill for those worth it. A refusal gives every
/// in-process charge back. Cancelling the future leaves every charge taken
/// so far in place: the request stays charged, as one whose client hung
/// up.
pub(super) async fn charge_shared_waiting(
    charges: &mut [Charge<'static>],
    from: usize,
    max_wait: Duration,
) -> Result<(), ChargeRefusal> {
    let deadline = tokio::time::Instant::now().checked_add(max_wait);
    for index in from..charges.len() {
        let cost = charges[index].cost;
        let Target::Shared { bound, .. } = &charges[index].limit else {
            continue;
        };
        if cost == 0 {
            continue;
        }
        let left = deadline.map_or(Duration::MAX, |at| {
            at.saturating_duration_since(tokio::time::Instant::now())
        });
        // The first one is known to be worth waiting for; asking its lease
        // again would count its demand twice.
        let now = if index == from {
            None
        } else {
            decided_now(bound.try_take(cost), left)
        };
        let decided = match now {
            Some(decided) => decided,
            None => bound.take(cost, left).await,
        };
        record(charges, index, decided)?;
    }
    Ok(())
}

/// Records what the shared limit at `index` answered; on a refusal, gives
/// every charge back and reports it.
fn record(
    charges: &mut [Charge<'_>],
    index: usize,
    attempt: Result<SharedReceipt, BudgetError>,
) -> Result<(), ChargeRefusal> {
    let Target::Shared {
        outcome, receipt, ..
    } = &mut charges[index].limit
    else {
        return Ok(());
    };
    match attempt {
        Ok(taken) => {
            *outcome = SharedOutcome::Taken;
            *receipt = Some(taken);
            Ok(())
        }
        Err(error) => {
            *outcome = SharedOutcome::Refused(error);
            if charges[index].role.is_shadow() {
                // The request goes on without the rule.
                charges[index].shadowed = true;
                return Ok(());
            }
            Err(give_all_back(charges, index, error))
        }
    }
}

/// Gives back every charge (latest first) once the shared limit at `index`
/// refused with `error`, and reports the refusal: for a shortage, with the
/// longest wait among the limits that would refuse now what the request
/// charges each in all, so a client that waits it out does not run into
/// the next one at once.
fn give_all_back(charges: &mut [Charge<'_>], index: usize, error: BudgetError) -> ChargeRefusal {
    for charge in charges.iter_mut().rev() {
        charge.give_back();
    }
    let cause = match Cause::from(error) {
        Cause::Limit(AcquireError::Insufficient { retry_after }) => {
            Cause::Limit(AcquireError::Insufficient {
                retry_after: charges
                    .iter()
                    .zip(waits(charges))
                    .filter(|(charge, _)| charge.cost > 0 && !charge.role.is_shadow())
                    .filter_map(|(_, wait)| wait)
                    .fold(retry_after, Duration::max),
            })
        }
        other => other,
    };
    ChargeRefusal {
        charge: Some(index),
        cause,
    }
}

/// The wait until a limit holds one more whole unit than it does: the
/// draft's effective window, within which no more than what is available
/// can be spent. A limit with all of its quota available gains nothing
/// until it moves on its own: a full bucket's next token takes one
/// emission interval once spent from, a window counter's counts move at
/// the window's end.
fn next_unit(limit: &dyn RequestLimit, available: u64) -> Duration {
    if available < limit.shape().quota {
        return limit.retry_after(available + 1).unwrap_or(Duration::ZERO);
    }
    limit.idle_reset()
}
