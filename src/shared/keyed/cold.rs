//! A cold key's decision: one store call for exactly the cost, all or
//! nothing, that no cancellation can turn into lost or minted tokens.
//!
//! `Store::acquire` grants *up to* what it is asked. A cold request needs
//! its whole cost or nothing, so a grant short of it is returned to the
//! store at once (`Store::release` against its receipt, by the one rule)
//! and the request is refused. The call runs as its own task, so a caller that stops
//! waiting (a timeout, a dropped future) does not abandon a grant in
//! flight: the task returns whatever nobody will admit.

use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use super::stats::Counters;
use crate::shared::allowance::add;
use crate::shared::{Lease, Store};
use crate::sync::unmodelled::Arc;

/// What the store decided on a cold request.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ColdAnswer {
    /// The whole cost was debited; the receipt covers what may be returned
    /// should nobody admit it.
    Granted(Lease),
    /// Fewer tokens than the cost (already returned).
    Refused {
        /// Tokens the store had (and granted, and got back).
        had: u64,
        /// The store's wait until one token exists (zero if it had some).
        first_token: Duration,
        /// The store's refill of one token (zero if it cannot tell).
        refill_interval: Duration,
        capacity: u64,
    },
    /// The call failed or timed out: it may have debited, and whatever it
    /// did is stranded. `unavailable` tells an unreachable store (a
    /// timeout, or [`Store::unavailable`]) from one that refused this key.
    Failed { unavailable: bool },
}

/// The store, the key and the books a cold call and its returns need,
/// owned so that they outlive the caller.
pub(crate) struct ColdKey<S: Store> {
    pub(crate) store: Arc<S>,
    pub(crate) key: String,
    pub(crate) timeout: Duration,
    pub(crate) counters: Arc<Counters>,
}

/// A cold call in flight. Dropping it before its answer was taken (the
/// caller's future cancelled) returns a grant that arrived, or arrives
/// later, to the store.
pub(crate) struct ColdCall<S: Store> {
    reply: oneshot::Receiver<ColdAnswer>,
    key: Arc<ColdKey<S>>,
    runtime: Handle,
    cost: u64,
    answered: bool,
}

impl<S: Store> ColdCall<S> {
    /// Starts the call for `cost` tokens on `runtime`.
    pub(crate) fn start(key: ColdKey<S>, cost: u64, runtime: &Handle) -> ColdCall<S> {
        let key = Arc::new(key);
        let (send, reply) = oneshot::channel();
        runtime.spawn(decide(Arc::clone(&key), cost, send));
        ColdCall {
            reply,
            key,
            runtime: runtime.clone(),
            cost,
            answered: false,
        }
    }

    /// The store's decision. The call is bounded by the store timeout, so
    /// this ends within it.
    pub(crate) async fn answer(mut self) -> ColdAnswer {
        let decided = (&mut self.reply)
            .await
            .unwrap_or(ColdAnswer::Failed { unavailable: true });
        self.answered = true;
        decided
    }
}

impl<S: Store> Drop for ColdCall<S> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        // Closed first: from now on the task cannot hand a grant over and
        // returns it itself; one handed over before is returned here.
        self.reply.close();
        if let Ok(ColdAnswer::Granted(lease)) = self.reply.try_recv() {
            let key = Arc::clone(&self.key);
            let cost = self.cost;
            self.runtime
                .spawn(async move { return_to_store(&key, lease, cost).await });
        }
    }
}

/// The task of one cold call.
async fn decide<S: Store>(key: Arc<ColdKey<S>>, cost: u64, reply: oneshot::Sender<ColdAnswer>) {
    add(&key.counters.cold_calls, 1);
    let call = tokio::time::timeout(key.timeout, key.store.acquire(&key.key, cost)).await;
    let grant = match call {
        Ok(Ok(grant)) => grant,
        failed => {
            let unavailable = match &failed {
                Ok(Err(error)) => S::unavailable(error),
                _ => true,
            };
            add(&key.counters.store_errors, 1);
            let _ = reply.send(ColdAnswer::Failed { unavailable });
            return;
        }
    };
    // Nothing beyond the ask is trusted: the excess is stranded, and the
    // receipt kept covers at most the tokens accepted.
    let kept = grant.tokens.min(cost);
    let lease = Lease {
        granted: grant.lease.granted.min(kept),
        at: grant.lease.at,
    };
    add(&key.counters.stranded, grant.tokens - kept);
    if kept == cost {
        if let Err(ColdAnswer::Granted(lease)) = reply.send(ColdAnswer::Granted(lease)) {
            return_to_store(&key, lease, kept).await;
        }
        return;
    }
    // Returned before the refusal is told, so a caller who sees it sees
    // the store as it left it.
    return_to_store(&key, lease, kept).await;
    add(&key.counters.cold_refused, 1);
    let _ = reply.send(ColdAnswer::Refused {
        had: kept,
        first_token: grant.retry_after,
        refill_interval: grant.refill_interval,
        capacity: grant.capacity,
    });
}

/// Returns `tokens` nobody will admit to the store against their receipt
/// `lease`, once (the store credits them by the one rule); the result is
/// the tokens the store confirmed taking back (the rule may keep part of
/// them). What the receipt does not cover, or a return that fails, is
/// stranded.
pub(super) async fn return_to_store<S: Store>(key: &ColdKey<S>, lease: Lease, tokens: u64) -> u64 {
    return_part_to_store(key, lease, tokens, tokens).await
}

/// Returns `unused` of the `tokens` a cold grant's `lease` covers (a
/// settlement below its estimate): the whole lease is released for them,
/// so the store applies the one rule to the grant as it was made (at most
/// `unused`, and at most the grant's cost less the time held), not to a
/// smaller grant of its own. What the lease does not cover is stranded.
pub(super) async fn return_part_to_store<S: Store>(
    key: &ColdKey<S>,
    lease: Lease,
    tokens: u64,
    unused: u64,
) -> u64 {
    add(&key.counters.stranded, tokens.saturating_sub(lease.granted));
    let unused = unused.min(lease.granted);
    if unused == 0 {
        return 0;
    }
    let sent = tokio::time::timeout(key.timeout, key.store.release(&key.key, lease, unused)).await;
    if let Ok(Ok(())) = sent {
        add(&key.counters.returned, unused);
        unused
    } else {
        add(&key.counters.store_errors, 1);
        add(&key.counters.stranded, unused);
        0
    }
}
