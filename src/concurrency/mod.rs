//! Limits on work in flight, as opposed to its rate.
//!
//! A [`TokenBucket`](crate::TokenBucket) bounds how much work *starts* per
//! unit of time; it says nothing about how much is running at once, which is
//! what exhausts memory, connections or threads when work slows down. A
//! [`ConcurrencyLimiter`] bounds that: at most `max` units in flight, each
//! permit weighing one or more units, returned when the permit is dropped.
//! [`KeyedConcurrencyLimiter`] applies the bound per key, keeping an entry
//! only while its key has work in flight.
//!
//! ```
//! use tollgate::concurrency::{ConcurrencyLimiter, InFlightError};
//!
//! let limiter = ConcurrencyLimiter::new(100)?; // e.g. MiB of request bodies
//! match limiter.try_acquire(30) {
//!     Ok(permit) => { /* handle the request; the 30 return when `permit` drops */ drop(permit) }
//!     Err(InFlightError::Full { .. }) => { /* 503, or wait with `acquire` (feature `tokio`) */ }
//!     Err(other) => return Err(other.into()),
//! }
//! assert_eq!(limiter.in_flight(), 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every grant and release is one atomic operation on one word; waiting
//! (feature `tokio`) costs nothing until some task waits. The contract
//! (weights, RAII, panics, fairness, linearization points, combining with a
//! rate limit) is in [`docs/concurrency.md`](crate::guide::concurrency).

mod counter;
mod error;
#[cfg(feature = "keyed")]
mod in_flight;
#[cfg(feature = "keyed")]
mod keyed;
#[cfg(feature = "keyed")]
mod keyed_permit;
mod limiter;
mod permit;
#[cfg(feature = "tokio")]
mod wait;

pub use error::{InFlightError, LimitError};
#[cfg(feature = "keyed")]
pub use keyed::KeyedConcurrencyLimiter;
#[cfg(feature = "keyed")]
pub use keyed_permit::KeyedPermit;
pub use limiter::ConcurrencyLimiter;
pub use permit::{OwnedPermit, Permit};
