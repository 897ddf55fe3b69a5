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
use crate::http::{PartitionKey, PartitionKeys, PolicyName};
use crate::quota::Quota;
use crate::shared::{BudgetError, HotAnswer};
use crate::shared::{KeyedAllowance, KeyedReceipt, Store};
use crate::sync::unmodelled::Arc;

/// A shared admission's receipt, its store type erased.
pub(super) type SharedReceipt = Box<dyn GiveBack>;

/// The future of a store decision.
type StoreDecision = Pin<Box<dyn Future<Output = Result<SharedReceipt, BudgetError>> + Send>>;

/// A [`KeyedReceipt`] as the layer uses it, its store type erased.
pub(super) trait GiveBack: Send {
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
/// its drop.
fn finish_in_background(runtime: &Handle, work: impl Future<Output = ()> + Send + 'static) {
    let mut work = Box::pin(work);
    // Inside the runtime, so that a store call may start its timers here.
    let _inside = runtime.enter();
    if work
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_pending()
    {
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

/// A shared limit with its key extractor.
#[derive(Clone)]
pub(super) struct SharedLimiter {
    limit: Arc<dyn ErasedAllowance>,
    key: Arc<KeyFn<String>>,
    /// Put before each key to name it in the store ([`store_key`]).
    scope: Arc<str>,
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
            limit: Arc::new(allowance),
            key: Arc::new(move |parts: &Parts| key(parts).into_key().map(|key| key.to_string())),
            scope: rule_scope(name).into(),
        }
    }

    /// The quota the store gives every key now.
    pub(super) fn quota(&self) -> Quota {
        self.limit.quota()
    }

    /// This limit bound to the request's key, or why it has none.
    pub(super) fn bind(&self, parts: &Parts) -> Result<SharedKey, NoKey> {
        let key = (self.key)(parts)?;
        Ok(SharedKey {
            limit: Arc::clone(&self.limit),
            stored: format!("{}{key}", self.scope),
            key,
        })
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

/// A shared limit bound to one request's key.
pub(super) struct SharedKey {
    limit: Arc<dyn ErasedAllowance>,
    /// The key as extracted: what partitions the RateLimit fields.
    key: String,
    /// The key as the store names it: scoped by rule.
    stored: String,
}

impl SharedKey {
    /// Takes `cost` from this node's lease of the key, or refuses with
    /// answers [`HotAnswer::AskStore`] when only the store can decide.
    pub(super) fn try_take(&self, cost: u64) -> Result<HotAnswer<SharedReceipt>, BudgetError> {
        self.limit.try_take(&self.stored, cost)
    }

    /// Takes `cost`, from the store if need be, within `max_wait`.
    pub(super) fn take(&self, cost: u64, max_wait: Duration) -> StoreDecision {
        self.limit.take(self.stored.clone(), cost, max_wait)
    }

    /// Tokens this node holds leased for the key: a lower bound of what the
    /// fleet has left, and all this node can vouch for.
    pub(super) fn pooled(&self) -> u64 {
        self.limit.pooled(&self.stored)
    }

    /// The quota the store gives every key now.
    pub(super) fn quota(&self) -> Quota {
        self.limit.quota()
    }

    /// The runtime the key's store calls run on: where what a receipt
    /// leaves to the store finishes.
    pub(super) fn runtime(&self) -> &Handle {
        self.limit.runtime()
    }

    /// Charges `tokens` to the key in the background, into debt: a settled
    /// cost that came with no admission (an estimate of 0).
    pub(super) fn debit_in_background(&self, tokens: u64) {
        self.limit.debit_in_background(&self.stored, tokens);
    }

    pub(super) fn partition(&self, keys: &PartitionKeys, name: &PolicyName) -> PartitionKey {
        keys.key(name, self.key.as_str())
    }
}

/// What charging a shared limit came to, for the fields and the refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SharedOutcome {
    /// Not charged: a rule before it refused, or its cost is 0.
    Untried,
    /// Taken, from a lease or by the store, or let through by the
    /// failure policy while the store is down.
    Taken,
    /// Refused.
    Refused(BudgetError),
}
