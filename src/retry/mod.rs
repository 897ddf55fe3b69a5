//! Client-side waiting: parsing Retry-After and planning retries.
//!
//! The other side of a rate limit. A client that was refused with 429 or 503
//! needs two things, and this module provides both without any HTTP stack:
//!
//! - [`parse_retry_after`]: the Retry-After field (delay-seconds or any of
//!   the three HTTP-date forms, from raw header bytes) as a wait from the
//!   moment the response was received.
//! - [`RetryPolicy::plan`]: given the failed [`Attempt`] (status, method,
//!   Retry-After, an optional RateLimit hint, the receive time on both
//!   clocks), the caller's deadline and a [`JitterSource`], either
//!   [`Decision::Retry`] at a monotonic instant or [`Decision::Stop`] with a
//!   typed [`StopReason`]. It retries only idempotent methods, never earlier
//!   than the server asked, adds jitter only after that boundary, keeps time
//!   for the attempt itself before the deadline, and always stops after a
//!   bounded number of attempts.
//!
//! Retry-After is a scheduling signal, not a promise that the next attempt
//! succeeds and not a licence to replay a request that may already have
//! taken effect. [`docs/retry.md`](crate::guide::retry) has the details and the choices made.
//!
//! ```
//! use std::time::{Duration, Instant, SystemTime};
//! use tollgate::retry::{Attempt, Decision, Received, RetryPolicy, StopReason, JitterGenerator};
//!
//! // A stand-in for the network: two refusals, then success.
//! let mut replies = [(503, Some("2")), (429, None), (200, None)].into_iter();
//! let start = Instant::now();
//! let mut now = start; // a simulated clock, so the example does not sleep
//!
//! let policy = RetryPolicy::new();
//! let deadline = start + Duration::from_secs(30);
//! let mut jitter = JitterGenerator::from_entropy();
//! let mut number = 1;
//! let status = loop {
//!     let (status, retry_after) = replies.next().unwrap();
//!     if status < 400 {
//!         break status;
//!     }
//!     let received = Received::new(now, SystemTime::now());
//!     let attempt = Attempt::new(number, "GET", status, received).with_retry_after(retry_after);
//!     match policy.plan(&attempt, deadline, &mut jitter) {
//!         // A real client sleeps until `at` (and checks the deadline again).
//!         Decision::Retry { at } => now = at,
//!         Decision::Stop(reason) => return Err(reason.into()),
//!     }
//!     number += 1;
//! };
//! assert_eq!(status, 200);
//! // At least the server's 2 s, then the local backoff's 2 s for attempt 2.
//! assert!(now >= start + Duration::from_secs(4));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod date;
mod header;
mod policy;

pub use header::{RETRY_AFTER_CAP, parse_retry_after, parse_retry_after_lines};
// The planner's jitter comes from the crate's one generator; named here too
// so a client needs one import.
pub use crate::jitter::{JitterGenerator, JitterSource};
pub use policy::{Attempt, Decision, IDEMPOTENT_METHODS, Received, RetryPolicy, StopReason};
