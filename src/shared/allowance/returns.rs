//! Returns: unused tokens go back to the store after the pool sat idle, on
//! shutdown, and when the allowance is dropped.

use std::time::Duration;

use super::state::AllowanceState;
use super::stats::add;
use crate::shared::Store;
use crate::shared::pacing::MIN_PAUSE;
use crate::sync::Ordering;
use crate::sync::unmodelled::Weak;

/// Returns the pool's tokens once it has sat unchanged for `idle`.
pub(super) async fn watch_idle<S: Store>(inner: Weak<AllowanceState<S>>, idle: Duration) {
    let idle = idle.max(MIN_PAUSE);
    let mut last = None;
    loop {
        tokio::time::sleep(idle).await;
        let Some(inner) = inner.upgrade() else { return };
        let now = (
            inner.pool.tokens(),
            inner.stats.leases.load(Ordering::Relaxed),
        );
        if last == Some(now) && now.0 > 0 {
            inner.return_unused().await;
        }
        last = Some((
            inner.pool.tokens(),
            inner.stats.leases.load(Ordering::Relaxed),
        ));
    }
}

impl<S: Store> AllowanceState<S> {
    /// Drains the pool and returns the tokens to the store, once, against
    /// the last lease's receipt. Which lease a pooled token came from does not matter
    /// to the store, which only sees grants; what matters is that no receipt
    /// is used for more than it granted, so the tokens returned are taken off
    /// the receipt. Tokens beyond it came from older leases, whose
    /// receipts are not kept: they are stranded. The drained tokens count as
    /// stranded until the store confirms the return, so a return cancelled
    /// while in flight (which may or may not have reached the store) leaves
    /// the books whole.
    pub(super) async fn return_unused(&self) -> u64 {
        let drained = self.pool.drain();
        if drained == 0 {
            return 0;
        }
        add(&self.stats.stranded, drained);
        let lease = self.lock_books().last_lease.split_off(drained);
        if lease.granted == 0 {
            return 0;
        }
        let sent = tokio::time::timeout(
            self.config.timeout,
            self.store.release(&self.key, lease, lease.granted),
        )
        .await;
        let Ok(Ok(())) = sent else {
            self.stats.store_errors.fetch_add(1, Ordering::Relaxed);
            return 0;
        };
        // Returned before no longer stranded: a snapshot in between may
        // count them twice, never as spent.
        add(&self.stats.returned, lease.granted);
        self.stats
            .stranded
            .fetch_sub(lease.granted, Ordering::Relaxed);
        lease.granted
    }

    /// The final return of a dropped allowance: the pool's tokens go back
    /// at once (a dropped pool is a demoted key, whose tokens the rest of
    /// the fleet is refused while they sit here); a refill still waiting
    /// out its pause ends without asking the store, and one already asking
    /// is waited for (bounded by the store timeout), so that its lease goes
    /// back too instead of landing in a pool nobody reads.
    pub(super) async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.hurried.notify_waiters();
        self.return_unused().await;
        loop {
            // Registered before the check, so a landing in between wakes it.
            let landed = self.landed.notified();
            if !self.pool.refilling() {
                break;
            }
            landed.await;
        }
        self.return_unused().await;
    }
}
