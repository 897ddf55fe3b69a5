//! A caller the pool cannot serve is refused only on the store's word: an
//! empty answer whose wait still runs, or a refill that answered while the
//! caller waited and left the store short of its cost. Otherwise it waits
//! for that word, moving a paced refill earlier so that it comes within
//! the caller's wait ([`docs/distributed.md`](crate::guide::distributed),
//! "What a refusal means").

use std::time::Duration;

use tokio::time::Instant;

use super::state::AllowanceState;
use crate::shared::Store;
use crate::shared::pacing::{MAX_PAUSE, MIN_PAUSE};

impl<S: Store> AllowanceState<S> {
    /// The store's wait for `cost` tokens, at `now`, while its last empty
    /// answer holds.
    pub(super) fn refused_by_the_store(&self, cost: u64, now: Instant) -> Option<Duration> {
        self.empty.refuses(now - self.epoch, cost)
    }

    /// The wait to tell a caller that began waiting at `began`, at `now`,
    /// if a refill answered since then that the store would not have
    /// `cost` tokens before a time still ahead: exact after an empty
    /// grant, otherwise at most one refill interval longer than the
    /// store's own wait (the part of a token it held is not told).
    pub(super) fn drained_since(
        &self,
        began: Instant,
        cost: u64,
        now: Instant,
    ) -> Option<Duration> {
        let answer = self.lock_books().last_answer?;
        if answer.at < began {
            return None;
        }
        let due = answer.due(cost)?;
        (due > now).then(|| (due - now).max(MIN_PAUSE))
    }

    /// Moves the next refill so that its answer can land by `deadline` (a
    /// caller's, seen at `now`, asking for `cost`), if it is due later: it
    /// starts twice the last call's duration before (at most half the time
    /// left; at once if the deadline has passed), and sooner, but not
    /// sooner than the configured least pause after the store's last answer
    /// (a quarter `lease_period`) nor than the next token an empty answer
    /// told, unless that answer left the cost in the store. A paced refill
    /// due in time stays as paced, and a failure's
    /// backoff is never cut short: a store that is down is not asked sooner
    /// for a waiting caller.
    pub(super) fn hurry(&self, cost: u64, deadline: Instant, now: Instant) {
        let floor = (self.config.lease_period / 4).clamp(MIN_PAUSE, MAX_PAUSE);
        let mut books = self.lock_books();
        let left = deadline.saturating_duration_since(now);
        let latest = deadline - books.last_call.saturating_mul(2).min(left / 2);
        if books.failures > 0 || books.next_refill <= latest {
            return;
        }
        // Not before the store's next token is due either, when its last
        // answer told that exactly (an empty grant).
        let soonest = match books.last_answer {
            Some(answer) => match (answer.due(cost), answer.first_token) {
                (None, _) => now,
                (Some(due), Some(_)) => due.max(answer.at + floor),
                (Some(_), None) => answer.at + floor,
            },
            None => now,
        };
        books.next_refill = soonest.min(latest).max(now);
        drop(books);
        self.hurried.notify_waiters();
    }
}
