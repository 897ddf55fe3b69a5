//! All-or-nothing admission through several limits (per address, per
//! account, global …).

use std::time::Duration;

use crate::error::AcquireError;
use crate::limit::Identity;
use crate::limit::Limit;
pub(crate) use crate::limit::Taken;

/// One limit of a hierarchy and what a request costs in it.
///
/// Costs may differ per limit: a request may cost one token of a
/// per-request limit and its size of a per-byte one.
///
/// ```
/// use tollgate::{Quota, Step, TokenBucket};
///
/// let bytes = TokenBucket::new(Quota::per_second(1 << 20)?);
/// let step = Step::new(&bytes, 4096);
/// assert_eq!(step.cost_of(), 4096);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy)]
pub struct Step<'a> {
    limit: &'a dyn Limit,
    cost: u64,
}

impl<'a> Step<'a> {
    /// `limit` charged `cost` tokens.
    ///
    /// ```
    /// use tollgate::{Quota, Step, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Quota::per_second(1)?);
    /// let _step = Step::new(&bucket, 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(limit: &'a dyn Limit, cost: u64) -> Self {
        Step { limit, cost }
    }

    /// What this step charges.
    ///
    /// ```
    /// use tollgate::{Limit, Quota, TokenBucket};
    ///
    /// let bucket = TokenBucket::new(Quota::per_second(5)?);
    /// assert_eq!(bucket.cost(2).cost_of(), 2);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn cost_of(&self) -> u64 {
        self.cost
    }
}

impl std::fmt::Debug for Step<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Step")
            .field("cost", &self.cost)
            .finish_non_exhaustive()
    }
}

/// Why [`try_acquire_all`] refused: which limit refused and why, or a chain
/// too long to take.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{AcquireError, HierarchyError, Limit, ManualClock, Quota, TokenBucket, try_acquire_all};
///
/// let clock = ManualClock::new();
/// let per_account = TokenBucket::with_clock(Quota::per_second(10)?, &clock);
/// let global = TokenBucket::with_clock(Quota::per_second(1)?, &clock);
/// try_acquire_all(&[per_account.cost(1), global.cost(1)])?;
/// let denied = try_acquire_all(&[per_account.cost(1), global.cost(1)]).unwrap_err();
/// let HierarchyError::Refused { limit, error } = denied else { panic!("{denied}") };
/// assert_eq!(limit, 1);
/// assert_eq!(error, AcquireError::Insufficient { retry_after: Duration::from_secs(1) });
/// assert_eq!(per_account.available(), 9); // the denial spent nothing there
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HierarchyError {
    /// A step's limit refused, and nothing stays spent anywhere.
    #[error("limit {limit} of the hierarchy refused: {error}")]
    Refused {
        /// The index, in the steps given, of the limit that refused: the
        /// first that refused in evaluation order; or, when no wait can
        /// cure the chain, the first step whose limit it charges beyond its
        /// capacity (or at a cost of zero).
        limit: usize,
        /// The refusal. Steps that name one limit, through one handle or
        /// several (a bucket and a [`Counted`](crate::Counted) around it,
        /// two views of one key), charge it their combined cost: a chain
        /// whose combined cost on a limit exceeds its capacity is
        /// [`AcquireError::ExceedsCapacity`], with that combined cost
        /// (`u64::MAX` for a sum past it). For
        /// [`AcquireError::Insufficient`], `retry_after` is the longest
        /// wait among the limits for what the chain charges each in all,
        /// looked at once the taken steps are undone: a client that waits
        /// it out is admitted, unless others spend the tokens first.
        error: AcquireError,
    },
    /// The chain had more than `max` steps ([`MAX_STEPS`]): a server
    /// misconfiguration, not the client's doing. Nothing was charged.
    #[error("a chain of limits may have at most {max} steps")]
    TooManySteps {
        /// The most steps a chain may have.
        max: usize,
    },
}

impl HierarchyError {
    /// The wait after which the same chain would be admitted, if one
    /// exists: a refusal's [`AcquireError::retry_after`].
    ///
    /// ```
    /// use tollgate::{HierarchyError, MAX_STEPS};
    ///
    /// assert_eq!(HierarchyError::TooManySteps { max: MAX_STEPS }.retry_after(), None);
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            HierarchyError::Refused { error, .. } => error.retry_after(),
            HierarchyError::TooManySteps { .. } => None,
        }
    }
}

/// Admits a request through every step, or through none.
///
/// The steps are taken in order. When one refuses, the steps already taken
/// are undone in reverse order, so a refusal spends nothing anywhere; then
/// every step's limit is looked at (never charged) for what the whole chain
/// charges it: steps naming one limit, through whichever handle, charge it
/// their sum. A sum above the limit's capacity can never be admitted
/// ([`AcquireError::ExceedsCapacity`]); otherwise the refusal carries the
/// longest wait, after which every limit holds what the chain charges it
/// ([`HierarchyError`]). A refused request's cost counts in no limit. Nothing is allocated: the
/// receipts of a chain live on the stack, one small frame per step, so a
/// chain has at most [`MAX_STEPS`] steps, and a longer one is refused,
/// spending nothing, with [`HierarchyError::TooManySteps`].
///
/// Order the steps from the most selective to the most shared (per address,
/// per account, then global): a request refused early never touches the
/// global limit's contended word.
///
/// An undo is a receipt's undo ([`docs/semantics.md`](crate::guide::semantics), "Giving back"): exact
/// at the step's own clock reading, otherwise the cost less the time
/// elapsed since it was taken: with other requests in between, returning it
/// all could hand out refill the bucket would have wasted while full, and
/// after the clock moved the undo cannot prove none came. Concurrent
/// hierarchies therefore never admit more than any one limit's envelope;
/// the price is that a denied request's undo may return a little less than
/// it took, a few nanoseconds of refill ([`docs/proofs.md`](crate::guide::proofs),
/// "Hierarchies: undo without minting", has the argument).
///
/// ```
/// # #[cfg(feature = "keyed")] {
/// use tollgate::{AcquireError, HierarchyError, KeyedLimiter, Limit, ManualClock, Quota, TokenBucket, try_acquire_all};
///
/// let clock = ManualClock::new();
/// let per_address = KeyedLimiter::builder(Quota::per_second(2)?).clock(&clock).build::<u32>();
/// let global = TokenBucket::with_clock(Quota::per_second(3)?, &clock);
/// for address in [1, 1, 2] {
///     try_acquire_all(&[per_address.key(&address).cost(1), global.cost(1)])?;
/// }
/// // Address 3 passes its own limit but not the global one: nothing stays spent.
/// assert!(try_acquire_all(&[per_address.key(&3).cost(1), global.cost(1)]).is_err());
/// assert_eq!(per_address.available(&3), 2);
/// // Two steps on one key cost it 3, more than it can ever hold.
/// let key = per_address.key(&4);
/// assert_eq!(
///     try_acquire_all(&[key.cost(2), global.cost(1), per_address.key(&4).cost(1)]),
///     Err(HierarchyError::Refused {
///         limit: 0,
///         error: AcquireError::ExceedsCapacity { cost: 3, capacity: 2 },
///     }),
/// );
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
// Inlined so that the caller builds the result in place instead of
// receiving it through memory, a copy on every call.
#[inline]
pub fn try_acquire_all(steps: &[Step<'_>]) -> Result<(), HierarchyError> {
    take_all(steps, |_, _| {})
}

/// The most steps [`try_acquire_all`] takes in one chain.
///
/// ```
/// use tollgate::{HierarchyError, Limit, MAX_STEPS, Quota, TokenBucket, try_acquire_all};
///
/// let bucket = TokenBucket::new(Quota::per_second(1000)?);
/// let steps = vec![bucket.cost(1); MAX_STEPS + 1];
/// assert_eq!(try_acquire_all(&steps), Err(HierarchyError::TooManySteps { max: MAX_STEPS }));
/// assert_eq!(bucket.available(), 1000);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub const MAX_STEPS: usize = 32;

/// Takes every step in order, all or nothing; once all are taken, hands
/// each receipt to `keep` with its step's index (for a caller that may give
/// them back later, such as the tower layer). If one refuses, the taken
/// ones are undone latest first and the refusal reported.
///
/// Recursion keeps the receipts on the stack, one frame per step, so a
/// short chain pays for its own steps only (an array of `MAX_STEPS`
/// receipts would be initialised whole on every call); the chain's length
/// is checked first, so the depth is at most `MAX_STEPS`.
#[inline]
pub(crate) fn take_all(
    steps: &[Step<'_>],
    mut keep: impl FnMut(usize, &Taken),
) -> Result<(), HierarchyError> {
    if steps.len() > MAX_STEPS {
        return Err(HierarchyError::TooManySteps { max: MAX_STEPS });
    }
    let mut refused = None;
    take_from(steps, 0, &mut refused, &mut keep).map_err(|limit| {
        let error = refused.expect("a refusing step leaves its error");
        refusal(steps, limit, error)
    })
}

/// Takes `steps[0]`, then the rest; undoes `steps[0]` if the rest refuse,
/// or hands its receipt to `keep` if they pass. Returns the index of the
/// step that refused, and leaves its error in `refused`: a result that fits
/// in registers, where one carrying the error would go through memory.
fn take_from(
    steps: &[Step<'_>],
    index: usize,
    refused: &mut Option<AcquireError>,
    keep: &mut impl FnMut(usize, &Taken),
) -> Result<(), usize> {
    let Some((step, rest)) = steps.split_first() else {
        return Ok(());
    };
    // Matched in place and undone by reference, so the receipt is never
    // copied out of this frame.
    match &step.limit.take(step.cost) {
        Ok(taken) => match take_from(rest, index + 1, refused, keep) {
            Ok(()) => {
                keep(index, taken);
                Ok(())
            }
            Err(limit) => {
                step.limit.undo(taken);
                Err(limit)
            }
        },
        Err(error) => {
            *refused = Some(*error);
            Err(index)
        }
    }
}

/// The refusal to report once `steps[index]` refused with `error` and every
/// taken step is undone. Each step's limit is looked at (never charged) for
/// what the whole chain charges it, the costs of every step naming the same
/// limit ([`Identity`]): the first step whose limit that can never admit
/// (the chain charges it beyond its capacity, or a cost of zero) is
/// reported; otherwise `error`, a shortage carrying the longest of those
/// waits, after which every limit holds what the chain charges it.
///
/// Identities are read here only, on a refusal: the admitted path pays
/// nothing for them. Each step asks its own limit, so two limits taken for
/// one (a hash collision of two keys) are each asked for at least their
/// own cost: the wait is never shortened.
#[cold]
#[inline(never)]
fn refusal(steps: &[Step<'_>], index: usize, error: AcquireError) -> HierarchyError {
    // On the stack (the chain's length was checked against `MAX_STEPS`),
    // so that each identity is read once, a key's being a hash
    // (`docs/benchmarks.md`, "Measured design choices").
    let mut charged = [(Identity::NONE, 0); MAX_STEPS];
    for (slot, step) in charged.iter_mut().zip(steps) {
        *slot = (step.limit.identity(), step.cost);
    }
    let charged = &charged[..steps.len()];
    // Refused for now without a wait (a keyed limiter's key cap): still
    // report a step that can never admit.
    let mut longest = error.retry_after().unwrap_or(Duration::ZERO);
    for (limit, step) in steps.iter().enumerate() {
        // A cost of zero is refused as it is, whatever else the chain charges.
        let look = match combined_cost(charged, limit) {
            Some(_) if step.cost == 0 => step.limit.retry_after(0),
            Some(cost) => step.limit.retry_after(cost),
            None => Err(AcquireError::ExceedsCapacity {
                cost: u64::MAX,
                capacity: step.limit.capacity(),
            }),
        };
        match look {
            Ok(wait) => longest = longest.max(wait),
            Err(error) => return HierarchyError::Refused { limit, error },
        }
    }
    // The limit that refused may have changed quota since: its own error
    // stands.
    HierarchyError::Refused {
        limit: index,
        error: match error {
            AcquireError::Insufficient { .. } => AcquireError::Insufficient {
                retry_after: longest,
            },
            other => other,
        },
    }
}

/// What a chain of `(identity, cost)` charges charges the limit of the one
/// at `index`: the costs of every charge of the same identity, `None` past
/// `u64::MAX` (more than any capacity).
pub(crate) fn combined_cost(charges: &[(Identity, u64)], index: usize) -> Option<u64> {
    let own = charges[index].0;
    charges
        .iter()
        .filter(|(identity, _)| *identity == own)
        .try_fold(0u64, |sum, &(_, cost)| sum.checked_add(cost))
}
