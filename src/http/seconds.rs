//! Durations as the whole seconds HTTP fields carry.

use std::time::Duration;

/// `wait` as HTTP delay-seconds, rounded **up**: a client that waits the
/// advertised number of seconds is never early, so any wait above zero, even
/// a nanosecond, is at least `1`. Zero stays zero.
///
/// ```
/// use std::time::Duration;
/// use tollgate::http::delay_seconds;
///
/// assert_eq!(delay_seconds(Duration::from_nanos(1)), 1);
/// assert_eq!(delay_seconds(Duration::from_millis(1500)), 2);
/// assert_eq!(delay_seconds(Duration::from_secs(2)), 2);
/// assert_eq!(delay_seconds(Duration::ZERO), 0);
/// ```
pub fn delay_seconds(wait: Duration) -> u64 {
    // `Duration::MAX` rounds up past u64::MAX seconds: saturate instead.
    wait.as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0))
}

/// The largest Integer a Structured Field can carry (RFC 9651 §3.3.1):
/// advertised values above it are capped rather than refused.
pub(crate) const SF_INTEGER_MAX: u64 = 999_999_999_999_999;
