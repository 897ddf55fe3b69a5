//! The Retry-After field value (RFC 9110 section 10.2.3) as a wait.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::date;

/// The longest wait [`parse_retry_after`] returns: `u64::MAX` seconds.
///
/// Larger delay-seconds saturate here rather than fail: a long value is
/// still a valid instruction ("not for a very long time"), and any deadline
/// a caller can hold is shorter, so the planner stops on it either way.
/// Every value up to `u64::MAX` seconds is returned exactly, never
/// shortened.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use tollgate::retry::{RETRY_AFTER_CAP, parse_retry_after};
///
/// let huge = "9".repeat(5000);
/// assert_eq!(parse_retry_after(&huge, SystemTime::now()), Some(RETRY_AFTER_CAP));
/// assert_eq!(RETRY_AFTER_CAP, Duration::from_secs(u64::MAX));
/// ```
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(u64::MAX);

/// Receive times further than this from 1970 (about 8.9 million years) are
/// clamped before the calendar arithmetic, so it cannot overflow. No real
/// clock gets there; the clamp only keeps absurd inputs panic-free.
const RECEIVED_CLAMP_SECS: i64 = 1 << 48;

/// How long a Retry-After field value asks the client to wait, counted from
/// `received_at`, the wall-clock time the response was received.
///
/// `value` is the field value as bytes (a `&str`, `&[u8]` or an HTTP
/// library's header value all work): headers need not be UTF-8, and a
/// non-ASCII value is simply invalid. Leading and trailing spaces and tabs
/// (optional whitespace) are ignored. Two forms are accepted:
///
/// - **delay-seconds**: one or more ASCII digits and nothing else (no sign,
///   fraction, exponent or unit). Leading zeros are fine. Values beyond
///   [`RETRY_AFTER_CAP`] saturate to it.
/// - **HTTP-date**, in any of its three forms: IMF-fixdate
///   (`Sun, 06 Nov 1994 08:49:37 GMT`), the obsolete RFC 850 form
///   (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime
///   (`Sun Nov  6 08:49:37 1994`, also with a single space before a
///   one-digit day). Names and `GMT` are case-sensitive and the day name
///   must agree with the date. The RFC 850 two-digit year is the latest year
///   with those digits that is at most 50 years after `received_at`. A leap
///   second (`23:59:60`) is the instant after `23:59:59`. The wait is the
///   date minus `received_at`; a date at or before it is a zero wait.
///
/// Anything else, including an empty value or a list (`120, 60`: the field
/// is a single value), is `None`. This never panics, whatever the bytes or
/// the receive time.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use tollgate::retry::parse_retry_after;
///
/// // The RFC 9110 examples, received two minutes before the date.
/// let received = UNIX_EPOCH + Duration::from_secs(946_684_799 - 120);
/// assert_eq!(parse_retry_after("120", received), Some(Duration::from_secs(120)));
/// assert_eq!(
///     parse_retry_after("Fri, 31 Dec 1999 23:59:59 GMT", received),
///     Some(Duration::from_secs(120)),
/// );
/// // Optional whitespace, raw bytes, a past date, and invalid values.
/// assert_eq!(parse_retry_after(b" 3\t", received), Some(Duration::from_secs(3)));
/// assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", received), Some(Duration::ZERO));
/// assert_eq!(parse_retry_after("1.5", received), None);
/// assert_eq!(parse_retry_after("-1", received), None);
/// ```
pub fn parse_retry_after(value: impl AsRef<[u8]>, received_at: SystemTime) -> Option<Duration> {
    let value = trim_ows(value.as_ref());
    match value.first() {
        None => None,
        // A date starts with a day name, so a leading digit means
        // delay-seconds or nothing.
        Some(b'0'..=b'9') => delay_seconds(value),
        Some(_) => {
            let received = unix_nanos(received_at);
            let floor_secs = received.div_euclid(1_000_000_000);
            let clamped = floor_secs.clamp(
                i128::from(-RECEIVED_CLAMP_SECS),
                i128::from(RECEIVED_CLAMP_SECS),
            );
            // In range after the clamp.
            let received_secs = i64::try_from(clamped).ok()?;
            let target = date::unix_seconds(value, received_secs)?;
            Some(nanos_to_duration(
                i128::from(target) * 1_000_000_000 - received,
            ))
        }
    }
}

/// The longest wait any of a response's Retry-After field lines asks for,
/// each line parsed on its own by [`parse_retry_after`]; `None` if no line
/// is valid.
///
/// Retry-After is a single value, so a response with several lines is
/// already broken (a misconfigured server, or a proxy adding its own). The
/// longest valid wait is the one reading that never brings the client back
/// earlier than some line asked; invalid lines are ignored, as a single
/// invalid value is. Pass the lines as received
/// (`headers.get_all("retry-after")`): a `HeaderMap`'s `get` would see only
/// the first. Lines combined into one value (`5, 3600`) are one invalid
/// value: HTTP-dates contain commas, so such a list cannot be split without
/// guessing.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use tollgate::retry::parse_retry_after_lines;
///
/// let now = SystemTime::now();
/// assert_eq!(parse_retry_after_lines(["5", "3600"], now), Some(Duration::from_secs(3600)));
/// assert_eq!(parse_retry_after_lines(["later", "7"], now), Some(Duration::from_secs(7)));
/// assert_eq!(parse_retry_after_lines(["5, 3600"], now), None);
/// assert_eq!(parse_retry_after_lines::<&str>([], now), None);
/// ```
pub fn parse_retry_after_lines<V: AsRef<[u8]>>(
    lines: impl IntoIterator<Item = V>,
    received_at: SystemTime,
) -> Option<Duration> {
    lines
        .into_iter()
        .filter_map(|line| parse_retry_after(line, received_at))
        .max()
}

/// `value` without leading or trailing spaces and tabs (RFC 9110 OWS).
fn trim_ows(value: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !is_ows(b)).unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |i| i + 1);
    &value[start..end]
}

/// `1*DIGIT` as seconds, saturating at `u64::MAX`.
fn delay_seconds(digits: &[u8]) -> Option<Duration> {
    // `u8::is_ascii_digit` only: Unicode digits such as '٣' are not
    // delay-seconds.
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // Once saturated, `MAX * 10` saturates again, so the result is
    // min(value, u64::MAX) however many digits follow.
    let seconds = digits.iter().fold(0u64, |acc, d| {
        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    });
    Some(Duration::from_secs(seconds))
}

/// Nanoseconds since the Unix epoch, negative before it.
fn unix_nanos(time: SystemTime) -> i128 {
    // A `SystemTime` is at most about 2^64 seconds from the epoch, so its
    // nanoseconds fit an i128 comfortably either way.
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX),
        Err(before) => i128::try_from(before.duration().as_nanos()).map_or(i128::MIN, |n| -n),
    }
}

/// A non-negative wait from a signed nanosecond difference: zero if the
/// target is not after receipt, saturating at the cap.
fn nanos_to_duration(nanos: i128) -> Duration {
    let Ok(nanos) = u128::try_from(nanos) else {
        return Duration::ZERO;
    };
    let Ok(secs) = u64::try_from(nanos / 1_000_000_000) else {
        return RETRY_AFTER_CAP;
    };
    // The remainder is below 10^9, so it fits a u32.
    Duration::new(secs, u32::try_from(nanos % 1_000_000_000).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_only_spaces_and_tabs() {
        assert_eq!(trim_ows(b" \t 3 \t"), b"3");
        assert_eq!(trim_ows(b" \t "), b"");
        assert_eq!(trim_ows(b""), b"");
        assert_eq!(trim_ows(b"\r3\n"), b"\r3\n");
    }

    #[test]
    fn delay_seconds_saturates_instead_of_failing() {
        assert_eq!(
            delay_seconds(b"18446744073709551615"),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(
            delay_seconds(b"18446744073709551616"),
            Some(RETRY_AFTER_CAP)
        );
        assert_eq!(
            delay_seconds(b"000000000000000000000000000000007"),
            Some(Duration::from_secs(7))
        );
    }

    #[test]
    fn nanosecond_arithmetic_is_total() {
        assert_eq!(nanos_to_duration(-1), Duration::ZERO);
        assert_eq!(nanos_to_duration(0), Duration::ZERO);
        assert_eq!(
            nanos_to_duration(1_500_000_000),
            Duration::from_millis(1500)
        );
        assert_eq!(nanos_to_duration(i128::MAX), RETRY_AFTER_CAP);
        assert_eq!(unix_nanos(UNIX_EPOCH), 0);
        assert_eq!(unix_nanos(UNIX_EPOCH - Duration::from_nanos(5)), -5);
    }
}
