//! The weighted admission both limiters share: a compare-and-swap loop that
//! adds a weight to a count of units in flight only if the sum stays within
//! the limit, and a `fetch_sub` that takes it back.
//!
//! Kept apart from the limiters so the per-key counters of the keyed limiter
//! run the very code the loom models check on `ConcurrencyLimiter`.

use crossbeam_utils::Backoff;

use super::InFlightError;
use crate::sync::{AtomicU64, Ordering};

/// Refuses the weights no limit of `max` can ever grant.
#[inline]
pub(crate) fn validate(weight: u64, max: u64) -> Result<(), InFlightError> {
    if weight == 0 {
        Err(InFlightError::ZeroWeight)
    } else if weight > max {
        Err(InFlightError::ExceedsLimit { weight, max })
    } else {
        Ok(())
    }
}

/// Adds `weight` (already validated against `max`) to `count` if the sum
/// stays at most `max`; otherwise writes nothing and reports the count it
/// decided on.
///
/// `load` orders the first read: `Acquire` normally, `SeqCst` for a waiter's
/// re-check after registering (see `wait.rs`). The successful swap is the
/// linearization point of an acquire; a refusal linearizes at the load or
/// failed swap whose value it refused on.
#[inline]
pub(crate) fn try_add(
    count: &AtomicU64,
    weight: u64,
    max: u64,
    load: Ordering,
) -> Result<(), InFlightError> {
    let backoff = Backoff::new();
    let mut current = count.load(load);
    loop {
        // `current <= max` always holds (only this loop adds), so the
        // subtraction cannot wrap, and unlike `current + weight` it cannot
        // overflow for limits near `u64::MAX`.
        if max - current < weight {
            return Err(InFlightError::Full {
                in_flight: current,
                max,
            });
        }
        // Acquire on success pairs with the Release of `sub`: the work done
        // under a permit happens before the work of whoever reuses its
        // units. A failed swap only needs the newer value, which coherence
        // guarantees at any ordering.
        match count.compare_exchange_weak(
            current,
            current + weight,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => return Ok(()),
            Err(actual) => {
                current = actual;
                backoff.spin();
            }
        }
    }
}

/// Takes `weight` back from `count` and returns the units left in flight.
/// The `fetch_sub` is the linearization point of a release.
#[inline]
pub(crate) fn sub(count: &AtomicU64, weight: u64, order: Ordering) -> u64 {
    let before = count.fetch_sub(weight, order);
    // Only a permit's drop subtracts, and a permit holds what it added.
    debug_assert!(before >= weight, "released {weight} of {before} in flight");
    before - weight
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn validate_refuses_zero_and_oversized_weights() {
        assert_eq!(validate(0, 3), Err(InFlightError::ZeroWeight));
        assert_eq!(
            validate(4, 3),
            Err(InFlightError::ExceedsLimit { weight: 4, max: 3 })
        );
        assert_eq!(validate(3, 3), Ok(()));
    }

    #[test]
    fn try_add_fills_exactly_to_the_limit() {
        let count = AtomicU64::new(0);
        try_add(&count, 2, 3, Ordering::Acquire).unwrap();
        assert_eq!(
            try_add(&count, 2, 3, Ordering::Acquire),
            Err(InFlightError::Full {
                in_flight: 2,
                max: 3
            })
        );
        try_add(&count, 1, 3, Ordering::Acquire).unwrap();
        assert_eq!(count.load(Ordering::Relaxed), 3);
        assert_eq!(sub(&count, 3, Ordering::Release), 0);
    }

    #[test]
    fn limits_near_the_top_of_the_range_do_not_overflow() {
        let count = AtomicU64::new(u64::MAX - 1);
        assert_eq!(
            try_add(&count, 2, u64::MAX, Ordering::Acquire),
            Err(InFlightError::Full {
                in_flight: u64::MAX - 1,
                max: u64::MAX
            })
        );
        try_add(&count, 1, u64::MAX, Ordering::Acquire).unwrap();
        assert_eq!(count.load(Ordering::Relaxed), u64::MAX);
    }
}
