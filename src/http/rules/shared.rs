//! Rules whose limit is a budget shared by a fleet: one key of a
//! [`KeyedAllowance`] per request, decided without awaiting when this node
//! holds the key's lease, and by the store (within the layer's longest
//! wait) when it does not.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::Duration;

use http::request::Parts;
use tokio::runtime::Handle;

use super::key::{IntoKey, KeyFn, NoKey};
use super::kind::{Held, Now, RuleKind, Stage, Waiting};
use super::stash::Stash;
use crate::advertised::Shape;
use crate::error::AcquireError;
use crate::http::refusal::Cause;
use crate::http::{PartitionKey, PartitionKeys, PolicyName};
use crate::limit::Identity;
use crate::quota::Quota;
use crate::shared::{BudgetError, HotAnswer};
use crate::shared::{KeyedAllowance, KeyedReceipt, Store};

/// A shared admission's receipt, its store type erased.
type SharedReceipt = Box<dyn GiveBack>;

/// The future of a store decision.
type StoreDecision = Pin<Box<dyn Future<Output = Result<SharedReceipt, BudgetError>> + Send>>;

/// A [`KeyedReceipt`] as the layer uses it, its store type erased.
trait GiveBack: Send {
    /// Gives the tokens back by the receipt's rule, without waiting: what
    /// goes back into the key's pool goes at once, a return to the store
    /// runs on `runtime`.
    fn undo(self: Box<Self>, runtime: &Handle);
    /// Settles the admission to `actual` by the receipt's rule, without
    /// waiting (a store call runs on `runtime`).
    fn settle(self: Box<Self>, actual: u64, runtime: &Handle);
}

impl<S: Store> GiveBack for KeyedReceipt<S> {
    fn undo(self: Box<Self>, runtime: &Handle) {
        finish_in_background(runtime, async move {
            (*self).undo().await;
        });
    }

    fn settle(self: Box<Self>, actual: u64, runtime: &Handle) {
        finish_in_background(runtime, async move {
            // A failed store call leaves the grant as it was charged: the
            // response is gone, and nobody is left to tell.
            let _ = (*self).settle(actual).await;
        });
    }
}

/// Runs `work` here as far as it goes without waiting (a receipt's tokens
/// go back into the key's pool before the response is done), and the rest
/// (a store call) on `runtime`: the layer's give-backs and settlements
/// happen where nothing can await, such as a response body's last frame or
/// its drop. A `Store` that panics in that first poll (user code) loses
/// that call, as a panic in the spawned rest would, and never unwinds into
/// the response: a give-back is lost (nothing minted), and a settlement's
/// excess goes uncharged, as when the store fails the call.
fn finish_in_background(runtime: &Handle, work: impl Future<Output = ()> + Send + 'static) {
    let mut work = Box::pin(work);
    // Inside the runtime, so that a store call may start its timers here.
    let _inside = runtime.enter();
    let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        work.as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
    }));
    if let Ok(true) = first {
        // Polled again at once by the runtime, which registers its waker.
        runtime.spawn(work);
    }
}

/// A keyed shared budget as the layer uses it, its store type erased so
/// that rules over different stores sit in one list.
trait ErasedAllowance: Send + Sync + 'static {
    /// Takes `cost` from the key's local lease now, or refuses; never
    /// awaits. [`HotAnswer::AskStore`] means only the store can decide.
    fn try_take(&self, key: &str, cost: u64) -> Result<HotAnswer<SharedReceipt>, BudgetError>;
    /// Takes `cost`, going to the store if need be, waiting at most
    /// `max_wait`.
    fn take(&self, key: String, cost: u64, max_wait: Duration) -> StoreDecision;
    /// Tokens this node holds leased for `key` now.
    fn pooled(&self, key: &str) -> u64;
    /// The quota the store gives every key, as its handle knows it now.
    fn quota(&self) -> Quota;
    /// Charges `tokens` to `key` in the background, into debt.
    fn debit_in_background(&self, key: &str, tokens: u64);
    /// The runtime the allowance's store calls run on.
    fn runtime(&self) -> &Handle;
}

impl<S: Store> ErasedAllowance for KeyedAllowance<S> {
    fn try_take(&self, key: &str, cost: u64) -> Result<HotAnswer<SharedReceipt>, BudgetError> {
        Ok(match KeyedAllowance::try_take(self, key, cost)? {
            HotAnswer::Admitted(receipt) => HotAnswer::Admitted(Box::new(receipt)),
            HotAnswer::AskStore => HotAnswer::AskStore,
        })
    }

    fn take(&self, key: String, cost: u64, max_wait: Duration) -> StoreDecision {
        let allowance = self.clone();
        Box::pin(async move {
            let receipt = allowance.take(&key, cost, max_wait).await?;
            Ok(Box::new(receipt) as SharedReceipt)
        })
    }

    fn pooled(&self, key: &str) -> u64 {
        KeyedAllowance::pooled(self, key)
    }

    fn quota(&self) -> Quota {
        KeyedAllowance::quota(self)
    }

    fn debit_in_background(&self, key: &str, tokens: u64) {
        let (allowance, key) = (self.clone(), key.to_owned());
        finish_in_background(KeyedAllowance::runtime(self), async move {
            // As for a settlement: nobody is left to tell of a failure.
            let _ = allowance.debit(&key, tokens).await;
        });
    }

    fn runtime(&self) -> &Handle {
        KeyedAllowance::runtime(self)
    }
}

/// A shared limit with its key extractor: a rule kind charged after every
/// in-process one.
pub(super) struct SharedLimiter {
    limit: Box<dyn ErasedAllowance>,
    key: Box<KeyFn<String>>,
    /// Put before each key to name it in the store ([`rule_scope`]).
    scope: Box<str>,
}

impl SharedLimiter {
    pub(super) fn new<S, K, R, F>(
        name: &PolicyName,
        allowance: KeyedAllowance<S>,
        key: F,
    ) -> SharedLimiter
    where
        S: Store,
        K: std::fmt::Display,
        R: IntoKey<K>,
        F: Fn(&Parts) -> R + Send + Sync + 'static,
    {
        SharedLimiter {
            limit: Box::new(allowance),
            key: Box::new(move |parts: &Parts| key(parts).into_key().map(|key| key.to_string())),
            scope: rule_scope(name).into(),
        }
    }

    /// The quota the store gives every key now.
    pub(super) fn quota(&self) -> Quota {
        self.limit.quota()
    }
}

impl SharedLimiter {
    /// The key a binding holds, and what charging it came to.
    fn state(held: &Held) -> Option<&SharedKey> {
        held.key.get::<SharedKey>()
    }
}

impl RuleKind for SharedLimiter {
    fn stage(&self) -> Stage {
        Stage::Shared
    }

    fn bind(&self, parts: &Parts, held: &mut Held) -> Result<(), NoKey> {
        let key = (self.key)(parts)?;
        held.key = Stash::put(SharedKey {
            stored: format!("{}{key}", self.scope),
            key,
            outcome: SharedOutcome::Untried,
            receipt: None,
        });
        Ok(())
    }

    fn take(&self, held: &mut Held, cost: u64, max_wait: Duration) -> Now {
        let Some(state) = held.key.get_mut::<SharedKey>() else {
            return Now::Refused(Cause::Misconfigured);
        };
        match decided_now(self.limit.try_take(&state.stored, cost), max_wait) {
            None => Now::Waits,
            Some(answer) => match state.record(answer) {
                Ok(()) => Now::Taken,
                Err(cause) => Now::Refused(cause),
            },
        }
    }

    fn take_waiting<'s>(
        &'s self,
        held: &'s mut Held,
        cost: u64,
        max_wait: Duration,
        asked: bool,
    ) -> Waiting<'s> {
        Box::pin(async move {
            let Some(state) = held.key.get_mut::<SharedKey>() else {
                return Err(Cause::Misconfigured);
            };
            // Asked just now, the lease would count its demand twice.
            let now = if asked {
                None
            } else {
                decided_now(self.limit.try_take(&state.stored, cost), max_wait)
            };
            let answer = match now {
                Some(answer) => answer,
                None => self.limit.take(state.stored.clone(), cost, max_wait).await,
            };
            state.record(answer)
        })
    }

    fn give_back(&self, held: &mut Held) {
        let receipt = held
            .key
            .get_mut::<SharedKey>()
            .and_then(|state| state.receipt.take());
        if let Some(receipt) = receipt {
            receipt.undo(self.limit.runtime());
        }
    }

    fn settle(&self, held: &mut Held, cost: u64, actual: u64) {
        let Some(state) = held.key.get_mut::<SharedKey>() else {
            return;
        };
        match state.receipt.take() {
            Some(receipt) => receipt.settle(actual, self.limit.runtime()),
            // An estimate of 0 took nothing: the actual cost is all debt.
            None if actual > 0 && cost == 0 => {
                self.limit.debit_in_background(&state.stored, actual);
            }
            None => {}
        }
    }

    /// A node knows only the tokens it holds leased for the key and, once
    /// refused, the store's wait; with neither (a cold key) it says
    /// nothing rather than a number it cannot back.
    fn live(&self, held: &Held) -> Option<(u64, Duration)> {
        let state = Self::state(held)?;
        if let Some(wait) = state.store_wait() {
            return Some((0, wait));
        }
        let pooled = self.limit.pooled(&state.stored);
        (pooled > 0).then(|| (pooled, self.limit.quota().refill_interval()))
    }

    fn shape(&self, _: &Held) -> Option<Shape> {
        Some(Shape::from(&self.limit.quota()))
    }

    /// Only the store's refusal says when: its wait is its own answer,
    /// whatever else the request charges.
    fn look(&self, held: &Held, _: u64) -> Option<Result<Duration, AcquireError>> {
        Self::state(held)?.store_wait().map(Ok)
    }

    fn identity(&self, _: &Held) -> Option<Identity> {
        // Its own: no in-process limit is the store's.
        None
    }

    fn partition(
        &self,
        held: &Held,
        keys: &PartitionKeys,
        name: &PolicyName,
    ) -> Option<PartitionKey> {
        Some(keys.key(name, Self::state(held)?.key.as_str()))
    }
}

/// What names a rule's keys in the store: `<length of the policy name>:`
/// then the name and `:`, so that two rules over one store never share a
/// key (a client sending `x-api-key: acme` must not spend tenant `acme`'s
/// budget). The length makes it unambiguous although a policy name may
/// contain `:`: `per:a` + `b` and `per` + `a:b` are `5:per:a:b` and
/// `3:per:a:b`.
fn rule_scope(name: &PolicyName) -> String {
    let name = name.as_str();
    format!("{}:{name}:", name.len())
}

/// A shared limit's binding to one request's key, with what charging it
/// came to and, once taken, its receipt.
struct SharedKey {
    /// The key as extracted: what partitions the RateLimit fields.
    key: String,
    /// The key as the store names it: scoped by rule.
    stored: String,
    outcome: SharedOutcome,
    receipt: Option<SharedReceipt>,
}

impl SharedKey {
    /// Records what the store or the lease answered.
    fn record(&mut self, answer: Result<SharedReceipt, BudgetError>) -> Result<(), Cause> {
        match answer {
            Ok(receipt) => {
                self.outcome = SharedOutcome::Taken;
                self.receipt = Some(receipt);
                Ok(())
            }
            Err(error) => {
                self.outcome = SharedOutcome::Refused(error);
                Err(Cause::from(error))
            }
        }
    }

    /// The store's wait, once it refused for want of tokens.
    fn store_wait(&self) -> Option<Duration> {
        match self.outcome {
            SharedOutcome::Refused(BudgetError::Limit(AcquireError::Insufficient {
                retry_after,
            })) => Some(retry_after),
            _ => None,
        }
    }
}

/// A shared limit's answer without awaiting; `None` if it is worth
/// waiting on instead: only its store can decide (a key this node holds no
/// lease of), or its lease is short but a refill may land within
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

/// What charging a shared limit came to, for the fields and the refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SharedOutcome {
    /// Not charged: a rule before it refused, or its cost is 0.
    Untried,
    /// Taken, from a lease or by the store, or let through by the
    /// failure policy while the store is down.
    Taken,
    /// Refused.
    Refused(BudgetError),
}
