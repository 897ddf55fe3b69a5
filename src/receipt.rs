//! Receipts: what one admission took, and the one way to give it back.

use std::fmt;

use crate::error::AcquireError;
use crate::hierarchy::Taken;
use crate::limit::Limit;

/// Tokens one admission took from a [`Limit`], and the only way to give them
/// back that never mints credit.
///
/// [`undo`](Self::undo) applies the rule of [`docs/semantics.md`](crate::guide::semantics) ("Giving
/// back"): if it can prove nothing was admitted from the limit since (the
/// clock has not moved, or a reservation's slot still lies ahead), the
/// tokens go back exactly; otherwise the cost less the time the receipt was
/// held goes back, because returning all of it could hand out refill the
/// bucket wasted while it was full. A receipt undoes once (`undo` consumes it) and only on
/// the limit that issued it (it holds that limit). Dropping a receipt keeps
/// the tokens spent, as [`keep`](Self::keep) says explicitly.
///
/// A window counter's receipt follows the windows' rule instead: all of
/// the cost back while the window it was counted in lasts, nothing after
/// ([`docs/semantics.md`](crate::guide::semantics), "Windows").
///
/// The limit is held by any pointer to it: `&TokenBucket` for a receipt
/// within a call, `Arc<TokenBucket>` for one kept across awaits (until a
/// response arrives, say), or a key of a keyed limiter.
///
/// ```
/// use tollgate::{Limit, ManualClock, Quota, Receipt, TokenBucket};
///
/// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
/// let receipt = Receipt::take(&bucket, 2)?;
/// assert_eq!(bucket.available(), 0);
/// receipt.undo(); // the work was not done: nothing admitted since, so exact
/// assert_eq!(bucket.available(), 2);
///
/// # #[cfg(feature = "keyed")] {
/// let per_user = tollgate::KeyedLimiter::<u32>::new(Quota::per_second(1)?);
/// Receipt::take(per_user.key(&7), 1)?.keep();
/// assert!(per_user.try_acquire(&7, 1).is_err());
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "dropping a receipt keeps its tokens spent: call `keep` to say so, or `undo`"]
pub struct Receipt<L: Limit> {
    limit: L,
    taken: Taken,
}

impl<L: Limit> Receipt<L> {
    /// Takes `cost` tokens from `limit` now, or refuses without spending
    /// anything (the same outcomes as `try_acquire`).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Quota, Receipt, TokenBucket};
    ///
    /// let bucket = Arc::new(TokenBucket::new(Quota::per_second(10)?));
    /// // An owned receipt, to keep while the work runs elsewhere.
    /// let receipt: Receipt<Arc<TokenBucket>> = Receipt::take(Arc::clone(&bucket), 3)?;
    /// assert_eq!(receipt.tokens(), 3);
    /// receipt.keep();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take(limit: L, cost: u64) -> Result<Self, AcquireError> {
        let taken = limit.take(cost)?;
        Ok(Receipt { limit, taken })
    }

    /// The tokens this receipt took.
    ///
    /// ```
    /// use tollgate::{Quota, Receipt, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Quota::per_second(10)?);
    /// let receipt = Receipt::take(&bucket, 4)?;
    /// assert_eq!(receipt.tokens(), 4);
    /// receipt.keep();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tokens(&self) -> u64 {
        self.taken.tokens
    }

    /// The limit the tokens were taken from.
    ///
    /// ```
    /// use tollgate::{Quota, Receipt, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Quota::per_second(10)?);
    /// let receipt = Receipt::take(&bucket, 1)?;
    /// assert_eq!(receipt.limit().quota().capacity(), 10);
    /// receipt.keep();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limit(&self) -> &L {
        &self.limit
    }

    /// Gives the tokens back by the rule that never mints credit: exactly,
    /// if it can prove nothing was admitted since; otherwise the cost less
    /// the time held (nothing, once the cost has refilled).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limit, ManualClock, Quota, Receipt, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, clock.clone());
    /// let mine = Receipt::take(&bucket, 1)?;
    /// bucket.try_acquire(1)?; // someone else, after me
    /// clock.advance(Duration::from_millis(200));
    /// mine.undo(); // 500 ms of refill owed, less the 200 ms held: 300 ms back
    /// assert_eq!(bucket.available(), 1); // 2 - (1000 - 300 - 200) / 500
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn undo(self) {
        self.limit.undo(&self.taken);
    }

    /// Settles the admission to its actual cost, once it is known (the
    /// tokens an LLM response used, the bytes a response streamed): an
    /// `actual` above what was taken charges the excess now, whether or
    /// not it fits, into debt that later admissions wait out; one below
    /// gives the rest back by the rule of [`undo`](Self::undo) (exactly if
    /// nothing was admitted since, otherwise less the time held), never
    /// minting credit. Take an estimate at admission (`Receipt::take(limit,
    /// estimate)`), settle at the end.
    ///
    /// The envelope with settlement ([`docs/semantics.md`](crate::guide::semantics),
    /// "Settling to the actual cost"): over any interval `[s, e]`, the
    /// actual costs settled in it add up to at most `B + r·(e − s)`, plus
    /// the estimates still outstanding at `s` (taken before it, settled in
    /// it), plus the excess debited in it after its last admission (a debt
    /// no admission has waited out yet). A window counter counts the
    /// excess in the window of the settlement, up to what its count holds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{AcquireError, Limit, ManualClock, Quota, Receipt, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// // 1000 tokens a minute: one every 60 ms.
    /// let tokens = TokenBucket::with_clock(Quota::per_minute(1000)?, clock.clone());
    /// let receipt = Receipt::take(&tokens, 100)?; // estimated at admission
    /// receipt.settle(1500); // the response used 1500: 1400 more, into debt
    /// assert_eq!(tokens.available(), 0);
    /// // 1500 taken from a full bucket of 1000: 500 in debt, 30 s to repay,
    /// // and 60 ms more before a token fits.
    /// let wait = Duration::from_millis(30_060);
    /// assert_eq!(tokens.try_acquire(1), Err(AcquireError::Insufficient { retry_after: wait }));
    ///
    /// let small = TokenBucket::with_clock(Quota::per_minute(1000)?, clock.clone());
    /// Receipt::take(&small, 100)?.settle(40); // nothing admitted since: 60 back, exactly
    /// assert_eq!(small.available(), 960);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn settle(self, actual: u64) {
        self.limit.settle(&self.taken, actual);
    }

    /// Keeps the tokens spent: what dropping the receipt does, said
    /// explicitly.
    ///
    /// ```
    /// use tollgate::{Limit, Quota, Receipt, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Quota::per_second(1)?);
    /// Receipt::take(&bucket, 1)?.keep();
    /// assert_eq!(bucket.available(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn keep(self) {}
}

impl<L: Limit> fmt::Debug for Receipt<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receipt")
            .field("tokens", &self.taken.tokens)
            .finish_non_exhaustive()
    }
}
