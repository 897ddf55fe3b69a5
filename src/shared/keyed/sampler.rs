//! The demand sampler of a keyed allowance: the task that measures every
//! tracked key's demand, switches keys between cold and hot, and warms a
//! new hot key's pool.

use std::time::Duration;

use super::KeyedAllowanceState;
use crate::shared::{AllowanceConfig, FailurePolicy, LocalAllowance, Store};
use crate::sync::unmodelled::{Arc, Weak};

/// Samples every tracked key's demand each `every`, switching keys
/// between cold and hot and forgetting idle ones, until the allowance is
/// dropped.
pub(super) async fn sample_demand<S: Store>(inner: Weak<KeyedAllowanceState<S>>, every: Duration) {
    let mut last = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else { return };
        let now = tokio::time::Instant::now();
        let promoted = inner.table.sample(now.duration_since(last), &inner.config);
        last = now;
        for name in promoted {
            inner.runtime.spawn(promote(Arc::downgrade(&inner), name));
        }
    }
}

/// Gives the key named `name` a lease pool, warmed by one lease before it
/// serves, so the switch never refuses callers the store would admit.
async fn promote<S: Store>(inner: Weak<KeyedAllowanceState<S>>, name: String) {
    let pool = {
        let Some(inner) = inner.upgrade() else { return };
        // The configuration was validated when the allowance was built, so
        // this fails only outside a runtime, which a task is not.
        // `Closed`: an outage is answered by the node's per-key failure
        // state (`KeyedAllowanceState::when_down`), not by a fallback bucket of the pool
        // that would start full at each promotion.
        let config = AllowanceConfig {
            on_failure: FailurePolicy::Closed,
            ..inner.config.allowance
        };
        LocalAllowance::new(Arc::clone(&inner.batched), name.clone(), config)
            .ok()
            .map(Arc::new)
    };
    if let Some(pool) = &pool {
        // A failed warm-up leaves the pool to its own failure policy.
        let _ = pool.refill().await;
    }
    if let Some(inner) = inner.upgrade() {
        inner.table.install(&name, pool);
    }
    // Otherwise the pool drops here and gives its lease back.
}
