//! The permits of a `ConcurrencyLimiter`: RAII owners of units in flight.
//!
//! Every unit in flight is owned by exactly one live permit, and a permit's
//! drop returns exactly its weight. `split` moves units between permits
//! without touching the limiter, so it keeps that invariant. There is no
//! `merge` (two permits can simply both be held) and no `forget`: a leaked
//! unit shrinks the limit for the limiter's lifetime, which `mem::forget`
//! still allows for whoever means it.

use std::fmt;

use super::ConcurrencyLimiter;
use crate::sync::unmodelled::Arc;

/// Units in flight on a [`ConcurrencyLimiter`], borrowed from it; dropping
/// the permit returns them.
///
/// The release runs in `Drop`, so it also happens when the holder unwinds
/// from a panic. Leaking the permit (`std::mem::forget`, a reference cycle)
/// leaks its units for the limiter's lifetime.
///
/// ```
/// use tollgate::concurrency::ConcurrencyLimiter;
///
/// let limiter = ConcurrencyLimiter::new(3)?;
/// {
///     let permit = limiter.try_acquire(2)?;
///     assert_eq!(permit.weight(), 2);
///     assert_eq!(limiter.in_flight(), 2);
/// } // dropped here
/// assert_eq!(limiter.in_flight(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "dropping a permit releases its units at once"]
pub struct Permit<'a> {
    limiter: &'a ConcurrencyLimiter,
    weight: u64,
}

impl<'a> Permit<'a> {
    /// Wraps units already taken from `limiter`.
    pub(super) fn new(limiter: &'a ConcurrencyLimiter, weight: u64) -> Self {
        Permit { limiter, weight }
    }

    /// The units this permit holds (always at least one).
    ///
    /// ```
    /// use tollgate::concurrency::ConcurrencyLimiter;
    ///
    /// let limiter = ConcurrencyLimiter::new(8)?;
    /// assert_eq!(limiter.try_acquire(5)?.weight(), 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn weight(&self) -> u64 {
        self.weight
    }

    /// The limiter this permit's units are in flight on.
    ///
    /// ```
    /// use tollgate::concurrency::ConcurrencyLimiter;
    ///
    /// let limiter = ConcurrencyLimiter::new(8)?;
    /// let permit = limiter.try_acquire(5)?;
    /// assert!(std::ptr::eq(permit.limiter(), &limiter));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limiter(&self) -> &'a ConcurrencyLimiter {
        self.limiter
    }

    /// Moves `weight` of this permit's units into a new permit, for
    /// returning part of them early. The limiter does not change: the units
    /// stay in flight, now owned by two permits that each return their own
    /// share.
    ///
    /// Returns `None`, changing nothing, unless `0 < weight < self.weight()`:
    /// every permit holds at least one unit.
    ///
    /// ```
    /// use tollgate::concurrency::ConcurrencyLimiter;
    ///
    /// let limiter = ConcurrencyLimiter::new(8)?;
    /// // Reserved for the worst case; the work turned out to need 2 units.
    /// let mut permit = limiter.try_acquire(6)?;
    /// let surplus = permit.split(4).expect("4 of 6 units");
    /// drop(surplus);
    /// assert_eq!((permit.weight(), limiter.in_flight()), (2, 2));
    /// assert!(permit.split(2).is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn split(&mut self, weight: u64) -> Option<Permit<'a>> {
        if weight == 0 || weight >= self.weight {
            return None;
        }
        self.weight -= weight;
        Some(Permit::new(self.limiter, weight))
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.limiter.release(self.weight);
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("weight", &self.weight)
            .field("max", &self.limiter.max())
            .finish()
    }
}

/// Units in flight on a [`ConcurrencyLimiter`] held through an `Arc`, so the
/// permit is `'static` and can move into a spawned thread or task; dropping
/// it returns them.
///
/// Otherwise the same as [`Permit`]: released exactly once, on drop,
/// unwinding included.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::concurrency::{ConcurrencyLimiter, OwnedPermit};
///
/// fn hand_off(permit: OwnedPermit) -> std::thread::JoinHandle<u64> {
///     std::thread::spawn(move || permit.weight())
/// }
///
/// let limiter = Arc::new(ConcurrencyLimiter::new(4)?);
/// assert_eq!(hand_off(limiter.try_acquire_owned(3)?).join().unwrap(), 3);
/// assert_eq!(limiter.in_flight(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "dropping a permit releases its units at once"]
pub struct OwnedPermit {
    limiter: Arc<ConcurrencyLimiter>,
    weight: u64,
}

impl OwnedPermit {
    /// Wraps units already taken from `limiter`.
    pub(super) fn new(limiter: Arc<ConcurrencyLimiter>, weight: u64) -> Self {
        OwnedPermit { limiter, weight }
    }

    /// The units this permit holds (always at least one).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::concurrency::ConcurrencyLimiter;
    ///
    /// let limiter = Arc::new(ConcurrencyLimiter::new(8)?);
    /// assert_eq!(limiter.try_acquire_owned(5)?.weight(), 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn weight(&self) -> u64 {
        self.weight
    }

    /// The limiter this permit's units are in flight on.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::concurrency::ConcurrencyLimiter;
    ///
    /// let limiter = Arc::new(ConcurrencyLimiter::new(8)?);
    /// let permit = limiter.try_acquire_owned(5)?;
    /// assert!(Arc::ptr_eq(permit.limiter(), &limiter));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limiter(&self) -> &Arc<ConcurrencyLimiter> {
        &self.limiter
    }

    /// Moves `weight` of this permit's units into a new permit, as
    /// [`Permit::split`] does; `None`, changing nothing, unless
    /// `0 < weight < self.weight()`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::concurrency::ConcurrencyLimiter;
    ///
    /// let limiter = Arc::new(ConcurrencyLimiter::new(8)?);
    /// let mut permit = limiter.try_acquire_owned(6)?;
    /// let half = permit.split(3).expect("3 of 6 units");
    /// std::thread::spawn(move || drop(half)).join().unwrap();
    /// assert_eq!((permit.weight(), limiter.in_flight()), (3, 3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn split(&mut self, weight: u64) -> Option<OwnedPermit> {
        if weight == 0 || weight >= self.weight {
            return None;
        }
        self.weight -= weight;
        Some(OwnedPermit::new(Arc::clone(&self.limiter), weight))
    }
}

impl Drop for OwnedPermit {
    fn drop(&mut self) {
        self.limiter.release(self.weight);
    }
}

impl fmt::Debug for OwnedPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedPermit")
            .field("weight", &self.weight)
            .field("max", &self.limiter.max())
            .finish()
    }
}
