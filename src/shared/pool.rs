//! A local allowance's pool: leased tokens not yet spent, and whether a
//! refill is in flight, in one atomic word.
//!
//! Public so that a driver other than `LocalAllowance`'s
//! tokio tasks (a synchronous store, another runtime) can use the same
//! proven core.

use crate::sync::{AtomicU64, Ordering};

/// The top bit: a refill is in flight. The other 63 bits: tokens.
const REFILLING: u64 = 1 << 63;
const TOKENS: u64 = REFILLING - 1;

/// What [`LeasePool::take`] did.
///
/// ```
/// use tollgate::shared::{LeasePool, Take};
///
/// let pool = LeasePool::new();
/// assert_eq!(pool.take(1, 0), Take::Short { refill: true });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// The tokens were taken.
    Taken {
        /// This caller claimed the refill: it must run one and end it with
        /// [`LeasePool::land`].
        refill: bool,
    },
    /// Not enough tokens; nothing was taken.
    Short {
        /// As for [`Take::Taken`].
        refill: bool,
    },
}

/// Leased tokens not yet spent, and whether a refill is in flight.
///
/// Tokens and the refill bit share one word so that taking the tokens that
/// cross the low-water mark and claiming the one refill are one
/// compare-and-swap: two refills can never be in flight, and no caller can
/// see the pool low without either starting a refill or seeing one running.
/// Tokens enter only through [`land`](Self::land), with what a store
/// granted, so what is taken never exceeds what was granted.
///
/// ```
/// use tollgate::shared::{LeasePool, Take};
///
/// let pool = LeasePool::new();
/// assert!(pool.claim_refill());
/// pool.land(10); // the store granted 10
/// assert_eq!(pool.take(3, 4), Take::Taken { refill: false });
/// assert_eq!(pool.take(4, 4), Take::Taken { refill: true }); // 3 left < 4
/// pool.land(0); // that refill brought nothing
/// assert_eq!(pool.drain(), 3);
/// ```
#[derive(Debug)]
pub struct LeasePool(AtomicU64);

impl Default for LeasePool {
    fn default() -> Self {
        LeasePool::new()
    }
}

impl LeasePool {
    /// An empty pool with no refill in flight.
    ///
    /// ```
    /// assert_eq!(tollgate::shared::LeasePool::new().tokens(), 0);
    /// ```
    pub fn new() -> Self {
        LeasePool(AtomicU64::new(0))
    }

    /// Takes `cost` tokens if the pool holds them; claims the refill if the
    /// pool is (then) below `low_water` and none is in flight.
    /// Linearization point: the successful compare-and-swap, or (a refusal
    /// that claims nothing) the load it decided on.
    ///
    /// ```
    /// use tollgate::shared::{LeasePool, Take};
    ///
    /// let pool = LeasePool::new();
    /// assert_eq!(pool.take(2, 1), Take::Short { refill: true });
    /// ```
    #[inline]
    pub fn take(&self, cost: u64, low_water: u64) -> Take {
        let mut word = self.0.load(Ordering::Acquire);
        loop {
            let (tokens, in_flight) = (word & TOKENS, word & REFILLING != 0);
            let (next, outcome) = if tokens >= cost {
                let left = tokens - cost;
                let refill = !in_flight && left < low_water;
                let bit = if in_flight || refill { REFILLING } else { 0 };
                (left | bit, Take::Taken { refill })
            } else if in_flight {
                return Take::Short { refill: false };
            } else {
                (word | REFILLING, Take::Short { refill: true })
            };
            match self
                .0
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return outcome,
                Err(actual) => word = actual,
            }
        }
    }

    /// Claims the refill if none is in flight (for refills not triggered by
    /// a take, such as a first lease).
    ///
    /// ```
    /// let pool = tollgate::shared::LeasePool::new();
    /// assert!(pool.claim_refill());
    /// assert!(!pool.claim_refill());
    /// ```
    pub fn claim_refill(&self) -> bool {
        self.0.fetch_or(REFILLING, Ordering::AcqRel) & REFILLING == 0
    }

    /// Ends the refill in flight, adding the `granted` tokens it brought
    /// (zero for a refill that failed). Only the claimant calls this, once
    /// per claim.
    ///
    /// The count saturates at 2^63 - 1 tokens: a grant beyond that is cut,
    /// never carried into the refill bit, so no grant can wedge the pool or
    /// mint tokens. A land with no refill in flight (a caller's bug) changes
    /// nothing.
    ///
    /// ```
    /// let pool = tollgate::shared::LeasePool::new();
    /// assert!(pool.claim_refill());
    /// pool.land(5);
    /// assert_eq!((pool.tokens(), pool.refilling()), (5, false));
    /// ```
    pub fn land(&self, granted: u64) {
        // A compare-and-swap rather than one add: the refill path is cold,
        // and only a loop can both saturate and check the claim.
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                (word & REFILLING != 0).then(|| (word & TOKENS).saturating_add(granted).min(TOKENS))
            });
    }

    /// Takes every token out, leaving the refill bit as it is, and returns
    /// how many there were.
    ///
    /// ```
    /// let pool = tollgate::shared::LeasePool::new();
    /// assert_eq!(pool.drain(), 0);
    /// ```
    pub fn drain(&self) -> u64 {
        self.0.fetch_and(REFILLING, Ordering::AcqRel) & TOKENS
    }

    /// Tokens in the pool now.
    ///
    /// ```
    /// assert_eq!(tollgate::shared::LeasePool::new().tokens(), 0);
    /// ```
    pub fn tokens(&self) -> u64 {
        self.0.load(Ordering::Acquire) & TOKENS
    }

    /// Whether a refill is in flight now.
    ///
    /// ```
    /// assert!(!tollgate::shared::LeasePool::new().refilling());
    /// ```
    pub fn refilling(&self) -> bool {
        self.0.load(Ordering::Acquire) & REFILLING != 0
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn crossing_the_low_water_mark_claims_the_one_refill() {
        let pool = LeasePool::new();
        assert_eq!(pool.take(1, 4), Take::Short { refill: true });
        assert_eq!(pool.take(1, 4), Take::Short { refill: false });
        pool.land(10);
        assert!(!pool.refilling());
        assert_eq!(pool.take(5, 4), Take::Taken { refill: false });
        assert_eq!(pool.take(2, 4), Take::Taken { refill: true });
        assert_eq!(pool.take(1, 4), Take::Taken { refill: false });
        assert_eq!(pool.tokens(), 2);
        assert_eq!(pool.drain(), 2);
        assert!(pool.refilling());
        pool.land(0);
        assert_eq!((pool.tokens(), pool.refilling()), (0, false));
    }

    /// Grants that would overflow the token count
    /// saturate it instead of spilling into the refill bit, so no sequence
    /// of lands wedges the pool (a refill can always be claimed and landed
    /// again) and none mints tokens beyond the count.
    #[test]
    fn huge_grants_saturate_and_never_wedge_the_pool() {
        let pool = LeasePool::new();
        for _ in 0..3 {
            assert!(pool.claim_refill());
            pool.land(1 << 62);
            assert!(!pool.refilling());
        }
        assert_eq!(pool.tokens(), TOKENS);
        assert!(pool.claim_refill());
        pool.land(u64::MAX);
        assert_eq!((pool.tokens(), pool.refilling()), (TOKENS, false));
        assert_eq!(pool.take(TOKENS, 1), Take::Taken { refill: true });
        pool.land(0);
        assert_eq!((pool.tokens(), pool.refilling()), (0, false));
    }

    /// A land without a claimed refill is a caller's bug; in every build it
    /// leaves the word as it was instead of wrapping the count.
    #[test]
    fn a_land_without_a_claim_changes_nothing() {
        let pool = LeasePool::new();
        assert!(pool.claim_refill());
        pool.land(3);
        pool.land(5);
        assert_eq!((pool.tokens(), pool.refilling()), (3, false));
        assert_eq!(pool.take(1, 0), Take::Taken { refill: false });
    }
}
