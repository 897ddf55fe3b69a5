//! The refill task: one claimant at a time asks the store for a lease
//! sized to the smoothed demand, books the answer, and backs off after
//! failures.

use std::time::{Duration, Instant};

use super::state::{AllowanceState, Answer, POOL_LIMIT};
use super::stats::add;
use crate::clock::saturating_nanos;
#[cfg(doc)]
use crate::shared::LocalAllowance;
use crate::shared::pacing::{Reply, failure_backoff};
use crate::shared::{Grant, Lease, Store};
use crate::sync::unmodelled::Arc;
use crate::sync::{AtomicU64, Ordering};

/// A refill claim, ended exactly once: by [`Claim::land`], or on drop (a
/// failed call, or a refill cancelled or panicking before it ended), so
/// the in-flight bit can never be left set. A drop after the store call
/// started records a failure, since the call may have reached the store; a
/// drop before it (a refill cancelled in its pause) does not.
struct Claim<'a, S: Store> {
    inner: &'a AllowanceState<S>,
    store_called: bool,
    /// False once the store answered with a refusal of this key: a
    /// failure, but not an outage.
    unavailable: bool,
}

impl<S: Store> Claim<'_, S> {
    /// Ends the refill with the `granted` tokens and the store's `answer`
    /// to it, told to waiting callers only once the tokens are in the
    /// pool: a caller never reads an answer whose tokens are still on
    /// their way.
    fn land(self, granted: u64, answer: Option<Answer>) {
        let inner = self.inner;
        std::mem::forget(self);
        inner.pool.land(granted);
        if answer.is_some() {
            inner.lock_books().last_answer = answer;
        }
        inner.landed.notify_waiters();
    }
}

impl<S: Store> Drop for Claim<'_, S> {
    fn drop(&mut self) {
        if self.store_called {
            self.inner.record_failure(self.unavailable);
        }
        self.inner.pool.land(0);
        self.inner.landed.notify_waiters();
    }
}

/// Why [`LocalAllowance::refill`] brought nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RefillError<E: std::error::Error + 'static> {
    /// The store refused or could not be reached.
    #[error("store call failed: {0}")]
    Store(#[source] E),
    /// The store did not answer within the configured timeout; whatever it
    /// granted is stranded.
    #[error("store call timed out")]
    Timeout,
}

pub(super) fn spawn_refill<S: Store>(inner: &Arc<AllowanceState<S>>) {
    let inner = Arc::clone(inner);
    let runtime = inner.runtime.clone();
    runtime.spawn(async move {
        // Failures are counted in the stats and handled by the policy.
        let _ = inner.refill_claimed().await;
    });
}

impl<S: Store> AllowanceState<S> {
    /// Runs the refill this caller claimed, and always ends it: a guard
    /// lands nothing if this future is dropped or the store panics before
    /// the end. Holding the claim while waiting for the next refill time
    /// keeps every other caller from asking meanwhile.
    pub(super) async fn refill_claimed(&self) -> Result<u64, RefillError<S::Error>> {
        let mut claim = Claim {
            inner: self,
            store_called: false,
            unavailable: true,
        };
        // Until the next refill time, which a waiting caller may move
        // earlier (`hurry`): registered before reading it, so a move in
        // between wakes this.
        loop {
            let hurried = self.hurried.notified();
            let not_before = self.lock_books().next_refill;
            if not_before <= tokio::time::Instant::now() || self.closed.load(Ordering::Acquire) {
                break;
            }
            let _ = tokio::time::timeout_at(not_before, hurried).await;
        }
        // Only the claimant adds to the pool: what fits now fits at landing.
        let want = self.lease_size().min(POOL_LIMIT - self.pool.tokens());
        if want == 0 || self.closed.load(Ordering::Acquire) {
            claim.land(0, None);
            return Ok(0);
        }
        let started = Instant::now();
        let since_last_call = self.lock_books().pacer.calling(tokio::time::Instant::now());
        let call = tokio::time::timeout(self.config.timeout, self.store.acquire(&self.key, want));
        claim.store_called = true;
        add(&self.stats.leases, 1);
        match call.await {
            Ok(Ok(grant)) => {
                let (granted, answer) = self.accept(grant, want, started, since_last_call);
                claim.land(granted, Some(answer));
                Ok(granted)
            }
            // Either way the store may have debited a lease we will never
            // see: counted as spent, never asked for again as if lost.
            // Dropping the claim records the failure and ends the refill.
            Ok(Err(error)) => {
                claim.unavailable = S::unavailable(&error);
                drop(claim);
                Err(RefillError::Store(error))
            }
            Err(_elapsed) => {
                drop(claim);
                Err(RefillError::Timeout)
            }
        }
    }

    /// Books what the store answered to a request for `want` tokens and
    /// returns the tokens for the pool, and the answer for waiting callers. Nothing the store says is trusted
    /// beyond what was asked: at most `want` tokens enter the pool (any
    /// excess is stranded), the receipt kept for returns covers at most
    /// those, and the pause a scarce grant sets (`pacing`) is at least 1 ms
    /// and at most 10 s, whatever its `retry_after` or refill interval. The
    /// store's capacity bounds every later cost.
    fn accept(
        &self,
        grant: Grant,
        want: u64,
        started: Instant,
        since_last_call: Option<Duration>,
    ) -> (u64, Answer) {
        self.degraded.store(false, Ordering::Release);
        self.refused.store(false, Ordering::Release);
        let largest = self.config.max_lease.min(grant.capacity).min(POOL_LIMIT);
        self.largest_cost.store(largest, Ordering::Relaxed);
        let tokens = grant.tokens.min(want);
        add(&self.stats.leased, grant.tokens);
        add(&self.stats.stranded, grant.tokens - tokens);
        self.stats
            .largest_lease
            .fetch_max(tokens, Ordering::Relaxed);
        let now = tokio::time::Instant::now();
        // The store's word, for callers the pool cannot serve: an empty
        // grant's wait is exact; any grant ends an earlier word.
        if tokens == 0 {
            self.empty
                .learn(now - self.epoch, grant.retry_after, grant.refill_interval);
        } else {
            self.empty.forget();
        }
        let mut books = self.lock_books();
        books.failures = 0;
        books.last_call = started.elapsed();
        if tokens > 0 {
            books.last_lease = Lease {
                granted: grant.lease.granted.min(tokens),
                at: grant.lease.at,
            };
        }
        let reply = Reply {
            asked: want,
            granted: tokens,
            remaining: grant.remaining,
            retry_after: grant.retry_after,
            refill_interval: grant.refill_interval,
            capacity: grant.capacity,
        };
        let hint = if books.pacer.is_scarce(&reply) {
            let pause =
                books
                    .pacer
                    .after_scarce(since_last_call, reply, self.config.lease_period / 4);
            books.next_refill = tokio::time::Instant::now() + pause;
            // Callers are told the store's own wait when it is longer: the
            // node asks again sooner only to notice a change early.
            pause.max(grant.retry_after)
        } else {
            books.pacer.after_full(grant.capacity);
            started.elapsed()
        };
        self.retry_hint
            .store(saturating_nanos(hint), Ordering::Relaxed);
        let answer = Answer {
            at: now,
            left: grant
                .remaining
                .unwrap_or(if tokens < want { 0 } else { u64::MAX }),
            first_token: (tokens == 0).then_some(grant.retry_after),
            refill_interval: grant.refill_interval,
        };
        (tokens, answer)
    }

    /// Records a failed refill: the failure policy comes into force, and
    /// the next attempt waits a backoff that doubles with each failure in a
    /// row, from a quarter lease period up to 1 s, so a store that fails
    /// fast is not asked once per request.
    /// A refusal of this key (`unavailable` false) backs off the same way
    /// but refuses callers instead of applying the failure policy.
    fn record_failure(&self, unavailable: bool) {
        // Flagged first, so that whoever sees the error counted also sees
        // the failure policy (or the refusal) in force.
        if unavailable {
            self.refused.store(false, Ordering::Release);
            self.degraded.store(true, Ordering::Release);
        } else {
            // The store answered: it is up.
            self.refused.store(true, Ordering::Release);
            self.degraded.store(false, Ordering::Release);
        }
        self.stats.store_errors.fetch_add(1, Ordering::Release);
        let mut books = self.lock_books();
        books.failures = books.failures.saturating_add(1);
        let backoff = failure_backoff(self.config.lease_period, books.failures);
        books.next_refill = tokio::time::Instant::now() + backoff;
    }

    /// The next lease's size from the smoothed demand, or what pacing asks
    /// for if more (a second of demand up to a batch, and at least a batch
    /// while the budget is exhausted), within the bounds; also moves the
    /// low-water mark to half the demand-sized lease (not the paced ask: a
    /// node whose demand is below its share of an exhausted budget refills
    /// when its pool runs low, instead of piling up batches it cannot
    /// spend while other nodes refuse).
    fn lease_size(&self) -> u64 {
        let spent = self.spent();
        let (demand, least) = {
            let mut books = self.lock_books();
            let elapsed = books.sampled_at.elapsed().as_secs_f64();
            let rate = spent.saturating_sub(books.spent_by_then) as f64 / elapsed.max(1e-6);
            books.sampled_at = tokio::time::Instant::now();
            books.spent_by_then = spent;
            // Half old, half new: follows a change of demand within a few
            // leases without chasing every burst.
            let old = self.demand.load(Ordering::Relaxed);
            let smoothed = if old == 0.0 {
                rate
            } else {
                0.5 * old + 0.5 * rate
            };
            self.demand.store(smoothed, Ordering::Relaxed);
            (smoothed, books.pacer.least_ask(smoothed))
        };
        let wanted = (demand * self.config.lease_period.as_secs_f64()).ceil();
        // `as` saturates for floats; the clamp bounds it either way. (Not
        // by the store's capacity: a grant of less than asked is what tells
        // an exhausted budget, and sets the pause before the next request.)
        let (min, max) = (self.config.min_lease, self.config.max_lease);
        let by_demand = (wanted as u64)
            .max(self.shortfall.swap(0, Ordering::Relaxed))
            .clamp(min, max);
        self.low_water
            .store(by_demand.div_ceil(2), Ordering::Relaxed);
        by_demand.max(least).clamp(min, max)
    }

    /// Tokens spent from leases so far (granted, less pooled and returned
    /// and stranded ones). An estimate while refills and returns run.
    fn spent(&self) -> u64 {
        let s = &self.stats;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        load(&s.leased)
            .saturating_sub(load(&s.returned))
            .saturating_sub(load(&s.stranded))
            .saturating_sub(self.pool.tokens())
    }
}
