//! The store's word that a key is empty: an empty grant's `retry_after` is
//! the store's exact wait until its next token, so until then a node can
//! refuse the key without a round trip, telling that very wait. Kept by a
//! hot key's pool and by a cold key's entry alike.

use std::time::Duration;

use crate::clock::saturating_nanos;
use crate::shared::pacing::{MAX_PAUSE, MIN_PAUSE};
use crate::sync::{AtomicU64, Ordering};

/// When a key's next token exists by the store's last empty answer, and
/// its refill interval; times in nanoseconds since an epoch of the
/// owner's (a tokio instant). Each field is written from one answer: a
/// reader racing a writer may mix two answers, refusing only while one of
/// them holds, and may then tell the other's wait (never less than 1 ms).
#[derive(Debug)]
pub(crate) struct EmptyUntil {
    /// The store's next token (0: no word).
    next_token: AtomicU64,
    /// The word is trusted until then: its next token, or 1 s
    /// ([`MAX_PAUSE`]) after the answer if sooner, since tokens another
    /// node gives back meanwhile are not seen (they are, at most that much
    /// later: under-admission, never more).
    trusted_until: AtomicU64,
    interval: AtomicU64,
}

impl Default for EmptyUntil {
    /// No word yet.
    fn default() -> Self {
        EmptyUntil {
            next_token: AtomicU64::new(0),
            trusted_until: AtomicU64::new(0),
            interval: AtomicU64::new(0),
        }
    }
}

impl EmptyUntil {
    /// The store answered at `now` that it had no token, the next one in
    /// `first_token`, then one each `interval`.
    pub(crate) fn learn(&self, now: Duration, first_token: Duration, interval: Duration) {
        let next = now.saturating_add(first_token);
        let trusted = now.saturating_add(first_token.min(MAX_PAUSE));
        self.interval
            .store(saturating_nanos(interval), Ordering::Relaxed);
        self.next_token
            .store(saturating_nanos(next), Ordering::Relaxed);
        self.trusted_until
            .store(saturating_nanos(trusted), Ordering::Relaxed);
    }

    /// The store granted tokens: its last word of emptiness no longer holds.
    pub(crate) fn forget(&self) {
        self.trusted_until.store(0, Ordering::Relaxed);
    }

    /// The store's wait, at `now`, until `cost` tokens could exist, while
    /// its word holds (at least [`MIN_PAUSE`]); `None` once it no longer
    /// does (the token is due, or the word was never given).
    pub(crate) fn refuses(&self, now: Duration, cost: u64) -> Option<Duration> {
        let trusted = Duration::from_nanos(self.trusted_until.load(Ordering::Relaxed));
        if now >= trusted {
            return None;
        }
        let next = Duration::from_nanos(self.next_token.load(Ordering::Relaxed));
        let interval = Duration::from_nanos(self.interval.load(Ordering::Relaxed));
        let first_token = next.saturating_sub(now);
        Some(wait_for(cost, 0, first_token, interval).max(MIN_PAUSE))
    }
}

impl EmptyUntil {
    /// How long the word still holds at `now`: zero once it no longer does.
    pub(crate) fn holds_for(&self, now: Duration) -> Duration {
        Duration::from_nanos(self.trusted_until.load(Ordering::Relaxed)).saturating_sub(now)
    }
}

/// The wait until `cost` tokens could fit in a bucket that `had` tokens
/// and (if it had none) would have its first in `first_token`: the rest
/// refill one `refill_interval` each after that.
pub(crate) fn wait_for(
    cost: u64,
    had: u64,
    first_token: Duration,
    refill_interval: Duration,
) -> Duration {
    let counted = had.max(1).min(cost);
    let missing = u32::try_from(cost - counted).unwrap_or(u32::MAX);
    let rest = refill_interval
        .checked_mul(missing)
        .unwrap_or(Duration::MAX);
    first_token.saturating_add(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_word_holds_until_the_next_token_and_tells_the_stores_wait() {
        let word = EmptyUntil::default();
        assert_eq!(word.refuses(Duration::ZERO, 1), None);
        // At 10 ms: the next token in 600 ms, one each 600 ms after.
        word.learn(10 * MS, 600 * MS, 600 * MS);
        assert_eq!(word.refuses(10 * MS, 1), Some(600 * MS));
        assert_eq!(word.refuses(400 * MS, 1), Some(210 * MS));
        assert_eq!(word.refuses(400 * MS, 3), Some(1410 * MS));
        assert_eq!(word.refuses(610 * MS, 1), None);
        word.learn(700 * MS, 600 * MS, 600 * MS);
        word.forget();
        assert_eq!(word.refuses(700 * MS, 1), None);
    }

    #[test]
    fn a_long_wait_is_told_whole_but_trusted_for_a_second() {
        let word = EmptyUntil::default();
        let hour = Duration::from_secs(3600);
        word.learn(Duration::ZERO, hour, hour);
        assert_eq!(word.refuses(Duration::ZERO, 1), Some(hour));
        assert_eq!(word.refuses(999 * MS, 1), Some(hour - 999 * MS));
        assert_eq!(word.holds_for(400 * MS), 600 * MS);
        assert_eq!(word.refuses(MAX_PAUSE, 1), None);
        assert_eq!(word.holds_for(MAX_PAUSE), Duration::ZERO);
        // Absurd answers stay bounded: never zero, never an overflow.
        word.learn(Duration::MAX, Duration::MAX, Duration::MAX);
        assert_eq!(word.refuses(Duration::ZERO, u64::MAX), Some(Duration::MAX));
        word.learn(Duration::ZERO, Duration::from_nanos(1), Duration::ZERO);
        assert_eq!(word.refuses(Duration::ZERO, 5), Some(MIN_PAUSE));
    }

    #[test]
    fn the_wait_counts_the_tokens_held_and_the_missing_ones() {
        assert_eq!(wait_for(3, 0, 5 * MS, 10 * MS), 25 * MS);
        assert_eq!(wait_for(3, 2, Duration::ZERO, 10 * MS), 10 * MS);
        assert_eq!(wait_for(1, 0, 5 * MS, 10 * MS), 5 * MS);
        assert_eq!(wait_for(u64::MAX, 0, MS, Duration::MAX), Duration::MAX);
    }
}
