//! Client-side Retry-After parsing and retry planning. The seed fixture's
//! vectors come first (parser, then planner), then RFC 9110's examples and
//! syntax edges, the choices the module documents (saturation, leap second,
//! the 50-year rule, precedence, jitter), and property tests.
//!
//! No test reads a clock to assert timing: wall-clock times are fixed, and
//! monotonic instants are offsets from one `Instant` taken at the start.

use std::num::NonZeroU32;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use tollgate::retry::{
    Attempt, Decision, IDEMPOTENT_METHODS, JitterGenerator, JitterSource, RETRY_AFTER_CAP,
    Received, RetryPolicy, StopReason, parse_retry_after, parse_retry_after_lines,
};

/// 2026-09-08T12:00:00Z, the fixture's reference time.
const REFERENCE_SECS: u64 = 1_788_868_800;

fn wall(unix_secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(unix_secs)
}

fn reference() -> SystemTime {
    wall(REFERENCE_SECS)
}

fn secs(n: u64) -> Option<Duration> {
    Some(Duration::from_secs(n))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The RFC 850 spelling of an instant (years 1970-9999), built from
/// httpdate's IMF-fixdate: "Sunday, 06-Nov-94 08:49:37 GMT".
fn rfc850(time: SystemTime) -> String {
    let imf = httpdate::fmt_http_date(time);
    let long = match &imf[..3] {
        "Mon" => "Monday",
        "Tue" => "Tuesday",
        "Wed" => "Wednesday",
        "Thu" => "Thursday",
        "Fri" => "Friday",
        "Sat" => "Saturday",
        _ => "Sunday",
    };
    format!(
        "{long}, {}-{}-{} {} GMT",
        &imf[5..7],
        &imf[8..11],
        &imf[14..16],
        &imf[17..25]
    )
}

/// The asctime spelling: "Sun Nov  6 08:49:37 1994".
fn asctime(time: SystemTime) -> String {
    let imf = httpdate::fmt_http_date(time);
    let day = imf[5..7].trim_start_matches('0');
    format!(
        "{} {} {day:>2} {} {}",
        &imf[..3],
        &imf[8..11],
        &imf[17..25],
        &imf[12..16]
    )
}

// ---------------------------------------------------------------------------
// The seed fixture's parser vectors (received at the reference time unless
// noted).

#[test]
fn seed_all_three_date_forms_give_the_same_wait() {
    for value in [
        "Tue, 08 Sep 2026 12:00:07 GMT",
        "Tuesday, 08-Sep-26 12:00:07 GMT",
        "Tue Sep  8 12:00:07 2026",
        // As the fixture prints it, with one space before the day.
        "Tue Sep 8 12:00:07 2026",
    ] {
        assert_eq!(parse_retry_after(value, reference()), secs(7), "{value}");
    }
}

#[test]
fn seed_old_rfc850_date_is_in_the_past() {
    assert_eq!(
        parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", reference()),
        Some(Duration::ZERO)
    );
}

#[test]
fn seed_two_digit_year_70_is_2070_when_received_in_2026() {
    // 2070-09-08T12:00:00Z is 3 177 403 200; a fixed 1970 pivot would make
    // this a past date, and its day name (Monday) would not even match.
    assert_eq!(
        parse_retry_after("Monday, 08-Sep-70 12:00:00 GMT", reference()),
        secs(3_177_403_200 - REFERENCE_SECS)
    );
}

#[test]
fn seed_leap_second_is_the_instant_after_23_59_59() {
    // Received at 2016-12-31T23:59:59Z.
    let received = wall(1_483_228_799);
    assert_eq!(
        parse_retry_after("Sat, 31 Dec 2016 23:59:60 GMT", received),
        secs(1)
    );
    // The same in the obsolete forms.
    assert_eq!(
        parse_retry_after("Saturday, 31-Dec-16 23:59:60 GMT", received),
        secs(1)
    );
    assert_eq!(
        parse_retry_after("Sat Dec 31 23:59:60 2016", received),
        secs(1)
    );
    // Received at the leap second's Unix time (the next midnight): no wait.
    assert_eq!(
        parse_retry_after("Sat, 31 Dec 2016 23:59:60 GMT", wall(1_483_228_800)),
        Some(Duration::ZERO)
    );
}

#[test]
fn seed_invalid_values_are_none() {
    for value in [
        "-1",
        "1.5",
        "later",
        "",
        "٣",
        "Tue, 31 Feb 2026 12:00:00 GMT",
    ] {
        assert_eq!(parse_retry_after(value, reference()), None, "{value:?}");
    }
}

#[test]
fn seed_optional_whitespace_and_leading_zeros() {
    assert_eq!(parse_retry_after(" 0003\t", reference()), secs(3));
}

#[test]
fn seed_extremely_long_number_saturates() {
    let huge = "9".repeat(5000);
    assert_eq!(parse_retry_after(&huge, reference()), Some(RETRY_AFTER_CAP));
    assert_eq!(RETRY_AFTER_CAP, Duration::from_secs(u64::MAX));
}

// ---------------------------------------------------------------------------
// RFC 9110 examples.

#[test]
fn rfc9110_retry_after_examples() {
    // 1999-12-31T23:59:59Z is 946 684 799.
    let two_minutes_before = wall(946_684_799 - 120);
    assert_eq!(
        parse_retry_after("Fri, 31 Dec 1999 23:59:59 GMT", two_minutes_before),
        secs(120)
    );
    assert_eq!(parse_retry_after("120", two_minutes_before), secs(120));
    // After the date, the date form means no wait; "120" still means 120 s.
    assert_eq!(
        parse_retry_after("Fri, 31 Dec 1999 23:59:59 GMT", reference()),
        Some(Duration::ZERO)
    );
    assert_eq!(parse_retry_after("120", reference()), secs(120));
}

#[test]
fn rfc9110_date_examples_name_one_instant() {
    // 1994-11-06T08:49:37Z is 784 111 777; received 37 s before.
    let received = wall(784_111_740);
    for value in [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
    ] {
        assert_eq!(parse_retry_after(value, received), secs(37), "{value}");
    }
}

// ---------------------------------------------------------------------------
// Syntax edges.

#[test]
fn optional_whitespace_is_spaces_and_tabs_around_the_value_only() {
    for value in ["3", " 3", "3 ", "\t3", "3\t", " \t 3 \t "] {
        assert_eq!(parse_retry_after(value, reference()), secs(3), "{value:?}");
    }
    for value in [
        " Tue, 08 Sep 2026 12:00:07 GMT\t",
        "\t\tTue Sep  8 12:00:07 2026  ",
    ] {
        assert_eq!(parse_retry_after(value, reference()), secs(7), "{value:?}");
    }
    // Not OWS: line breaks, vertical tab, form feed, no-break space.
    for value in ["\r3", "3\n", "\x0b3", "3\x0c", "\u{a0}3", "3\u{a0}"] {
        assert_eq!(parse_retry_after(value, reference()), None, "{value:?}");
    }
    // Whitespace inside is not optional whitespace.
    for value in [
        "3 4",
        "1 000",
        "Tue,  08 Sep 2026 12:00:07 GMT",
        "Tue, 08 Sep 2026 12:00:07  GMT",
    ] {
        assert_eq!(parse_retry_after(value, reference()), None, "{value:?}");
    }
    for value in [" ", "\t", " \t "] {
        assert_eq!(parse_retry_after(value, reference()), None, "{value:?}");
    }
}

#[test]
fn signs_fractions_units_and_words_are_rejected() {
    for value in [
        "+3",
        "-0",
        "- 3",
        "3.0",
        "3.",
        ".5",
        "1e3",
        "0x10",
        "3s",
        "3 seconds",
        "three",
        "３",
        "3,4",
        "120, 120",
        "NaN",
        "inf",
        "\"3\"",
        "3;q=1",
    ] {
        assert_eq!(parse_retry_after(value, reference()), None, "{value:?}");
    }
}

#[test]
fn zero_is_zero_and_u64_max_is_exact() {
    assert_eq!(parse_retry_after("0", reference()), Some(Duration::ZERO));
    assert_eq!(parse_retry_after("000", reference()), Some(Duration::ZERO));
    assert_eq!(
        parse_retry_after(u64::MAX.to_string(), reference()),
        secs(u64::MAX)
    );
    assert_eq!(
        parse_retry_after("18446744073709551616", reference()),
        Some(RETRY_AFTER_CAP)
    );
}

#[test]
fn raw_bytes_are_accepted_and_non_ascii_is_invalid() {
    assert_eq!(parse_retry_after(b"42", reference()), secs(42));
    assert_eq!(
        parse_retry_after(&b"Tue, 08 Sep 2026 12:00:07 GMT"[..], reference()),
        secs(7)
    );
    assert_eq!(parse_retry_after(vec![b'5'], reference()), secs(5));
    for value in [
        &b"\xff3"[..],
        b"3\xff",
        b"\x80",
        b"Tue, 08 Sep 2026 12:00:07 GMT\xa0",
    ] {
        assert_eq!(parse_retry_after(value, reference()), None, "{value:?}");
    }
}

#[test]
fn names_and_zone_are_case_sensitive_and_must_be_gmt() {
    for value in [
        "tue, 08 Sep 2026 12:00:07 GMT",
        "Tue, 08 sep 2026 12:00:07 GMT",
        "Tue, 08 Sep 2026 12:00:07 gmt",
        "Tue, 08 Sep 2026 12:00:07 UTC",
        "Tue, 08 Sep 2026 12:00:07 +0000",
        "Tue, 08 Sep 2026 12:00:07",
        "TUESDAY, 08-Sep-26 12:00:07 GMT",
        "Tue sep  8 12:00:07 2026",
        "Tue Sep  8 12:00:07 2026 GMT",
    ] {
        assert_eq!(parse_retry_after(value, reference()), None, "{value}");
    }
}

#[test]
fn the_day_name_must_agree_with_the_date() {
    for value in [
        "Mon, 08 Sep 2026 12:00:07 GMT",
        "Monday, 08-Sep-26 12:00:07 GMT",
        "Wed Sep  8 12:00:07 2026",
        // 1970-09-08 was a Tuesday, but received in 2026 "70" is 2070.
        "Tuesday, 08-Sep-70 12:00:00 GMT",
        // A short name in the RFC 850 form, a long one in IMF-fixdate.
        "Tue, 08-Sep-26 12:00:07 GMT",
        "Tuesday, 08 Sep 2026 12:00:07 GMT",
    ] {
        assert_eq!(parse_retry_after(value, reference()), None, "{value}");
    }
}

#[test]
fn impossible_dates_and_times_are_rejected() {
    for value in [
        "Sun, 29 Feb 2026 12:00:00 GMT", // 2026 is not a leap year
        "Tue, 00 Sep 2026 12:00:00 GMT",
        "Thu, 31 Sep 2026 12:00:00 GMT",
        "Tue, 08 Sep 2026 24:00:00 GMT",
        "Tue, 08 Sep 2026 12:60:00 GMT",
        "Tue, 08 Sep 2026 12:00:61 GMT",
        "Tue, 08 Sep 2026 12:00:60 GMT", // a leap second only at 23:59
        "Tue, 8 Sep 2026 12:00:07 GMT",  // IMF-fixdate's day is two digits
        "Tue, 08 Sep 26 12:00:07 GMT",
        "Tue, 08 Sep 2026 12:00 GMT",
        "Tuesday, 08-Sep-2026 12:00:07 GMT",
        "Tue Sep 123 12:00:07 2026",
    ] {
        assert_eq!(parse_retry_after(value, reference()), None, "{value}");
    }
    // 29 February in a leap year is fine, in the past here.
    assert_eq!(
        parse_retry_after("Thu, 29 Feb 2024 00:00:00 GMT", reference()),
        Some(Duration::ZERO)
    );
}

#[test]
fn past_and_present_dates_mean_no_wait() {
    let now = httpdate::fmt_http_date(reference());
    assert_eq!(parse_retry_after(&now, reference()), Some(Duration::ZERO));
    assert_eq!(
        parse_retry_after(&now, reference() + ms(1)),
        Some(Duration::ZERO)
    );
    // Before 1970, which httpdate refuses: still a valid, past date.
    assert_eq!(
        parse_retry_after("Wed, 31 Dec 1969 23:59:59 GMT", reference()),
        Some(Duration::ZERO)
    );
    assert_eq!(
        parse_retry_after("Mon Jan  1 00:00:00 1900", reference()),
        Some(Duration::ZERO)
    );
    // ... and in the future for a receive time before it.
    assert_eq!(
        parse_retry_after(
            "Wed, 31 Dec 1969 23:59:59 GMT",
            UNIX_EPOCH - Duration::from_secs(10)
        ),
        secs(9)
    );
}

#[test]
fn a_date_wait_counts_the_receive_time_to_the_nanosecond() {
    // Received 0.25 s after 12:00:00: a date of 12:00:07 is 6.75 s away.
    let received = reference() + ms(250);
    assert_eq!(
        parse_retry_after("Tue, 08 Sep 2026 12:00:07 GMT", received),
        Some(ms(6750))
    );
    // Delay-seconds do not depend on the receive time at all.
    assert_eq!(parse_retry_after("7", received), secs(7));
}

#[test]
fn the_latest_date_is_year_9999() {
    // 9999-12-31T23:59:59Z is 253 402 300 799.
    assert_eq!(
        parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", reference()),
        secs(253_402_300_799 - REFERENCE_SECS)
    );
}

#[test]
fn absurd_receive_times_do_not_panic() {
    let far_future = UNIX_EPOCH + Duration::from_secs(1 << 62);
    let far_past = UNIX_EPOCH
        .checked_sub(Duration::from_secs(1 << 62))
        .unwrap_or(UNIX_EPOCH);
    for received in [far_future, far_past, UNIX_EPOCH] {
        for value in [
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sat, 31 Dec 2016 23:59:60 GMT",
            "Mon Jan  1 00:00:00 1900",
            "12",
        ] {
            let _ = parse_retry_after(value, received);
        }
    }
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", far_future),
        Some(Duration::ZERO)
    );
}

// ---------------------------------------------------------------------------
// The 50-year rule for RFC 850 years, relative to the receive time.

#[test]
fn fifty_years_ahead_is_the_future_and_one_second_more_is_the_past() {
    // Received 2026-09-08T12:00:00Z; 2076-09-08T12:00:00Z is 3 366 871 200.
    let exactly_fifty = wall(3_366_792_000);
    assert_eq!(
        parse_retry_after(rfc850(exactly_fifty), reference()),
        secs(3_366_792_000 - REFERENCE_SECS)
    );
    // One second later "appears to be more than 50 years in the future", so
    // it is 1976: past, no wait. (The day name is 2076's, so check the
    // 1976 reading with its own day name.)
    assert_eq!(
        parse_retry_after(rfc850(exactly_fifty + Duration::from_secs(1)), reference()),
        None
    );
    assert_eq!(
        parse_retry_after("Wednesday, 08-Sep-76 12:00:01 GMT", reference()),
        Some(Duration::ZERO)
    );
}

#[test]
fn two_digit_years_follow_the_receive_time_not_a_fixed_century() {
    // Received in 1994: "30" is 2030 (36 years ahead), "50" is 1950.
    let in_1994 = wall(784_111_777);
    let in_2030 = wall(1_906_545_600); // 2030-06-01T12:00:00Z
    assert_eq!(
        parse_retry_after(rfc850(in_2030), in_1994),
        secs(1_906_545_600 - 784_111_777)
    );
    assert_eq!(
        parse_retry_after("Thursday, 01-Jun-50 12:00:00 GMT", in_1994),
        Some(Duration::ZERO)
    );
    // Received in 2090: "10" is 2110, not 2010 (which a pivot would give).
    let in_2090 = wall(3_786_912_000); // 2090-01-01T00:00:00Z
    let in_2110 = wall(4_417_977_600); // 2110-01-01T00:00:00Z
    assert_eq!(
        parse_retry_after(rfc850(in_2110), in_2090),
        secs(4_417_977_600 - 3_786_912_000)
    );
}

// ---------------------------------------------------------------------------
// The planner: the seed fixture's cases. Monotonic time 100 s in the
// fixture is `t0` here; its absolute jitter of 0.25 s is a fraction 0.25 of
// the default 1 s window.

struct Fixture {
    t0: Instant,
    policy: RetryPolicy,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            t0: Instant::now(),
            policy: RetryPolicy::new(),
        }
    }

    fn received(&self) -> Received {
        Received::new(self.t0, reference())
    }

    fn at(&self, millis: u64) -> Instant {
        self.t0 + ms(millis)
    }

    /// The fixture's `retry_at(status, method, value, ..., remaining, attempt, jitter)`.
    fn plan(
        &self,
        status: u16,
        method: &str,
        value: Option<&str>,
        remaining_secs: u64,
        number: u32,
        fraction: f64,
    ) -> Decision {
        let attempt = Attempt::new(number, method, status, self.received()).with_retry_after(value);
        self.policy.plan(
            &attempt,
            self.t0 + Duration::from_secs(remaining_secs),
            &mut || fraction,
        )
    }
}

#[test]
fn seed_planned_times_for_each_response_kind() {
    let f = Fixture::new();
    let date = httpdate::fmt_http_date(reference() + Duration::from_secs(7));
    assert_eq!(
        f.plan(429, "GET", Some("3"), 10, 1, 0.25),
        Decision::Retry { at: f.at(3250) }
    );
    assert_eq!(
        f.plan(503, "GET", Some(&date), 10, 1, 0.25),
        Decision::Retry { at: f.at(7250) }
    );
    // Invalid or missing: the local backoff (1 s for the first attempt).
    assert_eq!(
        f.plan(503, "GET", Some("later"), 10, 1, 0.25),
        Decision::Retry { at: f.at(1250) }
    );
    assert_eq!(
        f.plan(503, "GET", None, 10, 1, 0.25),
        Decision::Retry { at: f.at(1250) }
    );
    // A redirect is not a retry.
    assert_eq!(
        f.plan(307, "GET", Some("3"), 10, 1, 0.25),
        Decision::Stop(StopReason::NotRetryableStatus { status: 307 })
    );
}

#[test]
fn seed_huge_wait_beyond_the_deadline_stops() {
    let f = Fixture::new();
    let huge = "9".repeat(5000);
    assert_eq!(
        f.plan(503, "GET", Some(&huge), 10, 1, 0.25),
        Decision::Stop(StopReason::WaitExceedsDeadline {
            wait: RETRY_AFTER_CAP
        })
    );
}

#[test]
fn seed_wait_longer_than_what_is_left_stops() {
    // The fixture's "exhausted deadline": 2 s left, 3 s asked. Here that is
    // a wait exceeding the deadline; `DeadlineExhausted` is for a deadline
    // with no room even for an immediate attempt (below).
    let f = Fixture::new();
    assert_eq!(
        f.plan(503, "GET", Some("3"), 2, 1, 0.25),
        Decision::Stop(StopReason::WaitExceedsDeadline {
            wait: Duration::from_secs(3)
        })
    );
}

#[test]
fn seed_post_is_not_replayed() {
    let f = Fixture::new();
    assert_eq!(
        f.plan(503, "POST", Some("3"), 10, 1, 0.25),
        Decision::Stop(StopReason::NonIdempotentMethod)
    );
}

#[test]
fn seed_attempt_cap() {
    let f = Fixture::new();
    assert_eq!(
        f.plan(503, "GET", Some("3"), 10, 3, 0.25),
        Decision::Stop(StopReason::AttemptCapReached { max: 3 })
    );
    // Attempt 2 still retries: max(3 s asked, 2 s backoff) + jitter.
    assert_eq!(
        f.plan(503, "GET", Some("3"), 10, 2, 0.25),
        Decision::Retry { at: f.at(3250) }
    );
}

#[test]
fn seed_identical_waits_synchronize_and_jitter_spreads_them() {
    let f = Fixture::new();
    let boundary = f.at(3000);
    let same: Vec<_> = (0..4)
        .map(|_| f.plan(429, "GET", Some("3"), 10, 1, 0.0))
        .collect();
    assert!(same.iter().all(|d| *d == Decision::Retry { at: boundary }));

    let spread: Vec<Instant> = [0.1, 0.2, 0.3, 0.4]
        .iter()
        .map(|&j| f.plan(429, "GET", Some("3"), 10, 1, j).retry_at().unwrap())
        .collect();
    assert_eq!(spread, [f.at(3100), f.at(3200), f.at(3300), f.at(3400)]);

    // The default source: many clients, one wait, spread out after it.
    let mut source = JitterGenerator::new(2026);
    let attempt = Attempt::new(1, "GET", 429, f.received()).with_retry_after(Some("3"));
    let deadline = f.t0 + Duration::from_secs(10);
    let fleet: Vec<Instant> = (0..100)
        .map(|_| {
            f.policy
                .plan(&attempt, deadline, &mut source)
                .retry_at()
                .unwrap()
        })
        .collect();
    assert!(
        fleet
            .iter()
            .all(|at| *at >= boundary && *at < boundary + Duration::from_secs(1))
    );
    let first = fleet[0];
    assert!(fleet.iter().any(|at| *at != first));
}

// ---------------------------------------------------------------------------
// Planner: methods, statuses, attempts, deadline, backoff, precedence.

#[test]
fn rfc9110_idempotent_methods_are_retried_case_sensitively() {
    let f = Fixture::new();
    for method in IDEMPOTENT_METHODS {
        assert!(
            matches!(
                f.plan(503, method, None, 10, 1, 0.0),
                Decision::Retry { .. }
            ),
            "{method}"
        );
    }
    for method in [
        "POST", "PATCH", "CONNECT", "get", "Get", "put", "", "PROPFIND",
    ] {
        assert_eq!(
            f.plan(503, method, None, 10, 1, 0.0),
            Decision::Stop(StopReason::NonIdempotentMethod),
            "{method:?}"
        );
    }
}

#[test]
fn more_methods_by_configuration_or_per_request() {
    let f = Fixture::new();
    let deadline = f.t0 + Duration::from_secs(10);
    let propfind = Attempt::new(1, "PROPFIND", 503, f.received());
    let policy = RetryPolicy::new().with_idempotent_method("PROPFIND");
    assert!(
        policy
            .plan(&propfind, deadline, &mut || 0.0)
            .retry_at()
            .is_some()
    );

    // A POST with an idempotency key, declared replay-safe by the caller.
    let post = Attempt::new(1, "POST", 503, f.received());
    assert_eq!(
        f.policy.plan(&post, deadline, &mut || 0.0),
        Decision::Stop(StopReason::NonIdempotentMethod)
    );
    let keyed = post.with_replay_safe(true);
    assert_eq!(
        f.policy.plan(&keyed, deadline, &mut || 0.0),
        Decision::Retry { at: f.at(1000) }
    );
}

#[test]
fn only_429_and_503_by_default() {
    let f = Fixture::new();
    for status in [
        0,
        200,
        301,
        307,
        400,
        404,
        408,
        425,
        500,
        502,
        504,
        599,
        u16::MAX,
    ] {
        assert_eq!(
            f.plan(status, "GET", Some("1"), 10, 1, 0.0),
            Decision::Stop(StopReason::NotRetryableStatus { status })
        );
    }
    let policy = RetryPolicy::new().with_retry_statuses([502, 504]);
    let attempt = |status| Attempt::new(1, "GET", status, f.received());
    let deadline = f.t0 + Duration::from_secs(10);
    assert!(
        policy
            .plan(&attempt(502), deadline, &mut || 0.0)
            .retry_at()
            .is_some()
    );
    assert_eq!(
        policy.plan(&attempt(503), deadline, &mut || 0.0),
        Decision::Stop(StopReason::NotRetryableStatus { status: 503 })
    );
}

#[test]
fn the_status_is_checked_before_the_method_and_the_cap() {
    let f = Fixture::new();
    assert_eq!(
        f.plan(500, "POST", None, 0, 99, 0.0),
        Decision::Stop(StopReason::NotRetryableStatus { status: 500 })
    );
    assert_eq!(
        f.plan(503, "POST", None, 0, 99, 0.0),
        Decision::Stop(StopReason::NonIdempotentMethod)
    );
    assert_eq!(
        f.plan(503, "GET", None, 0, 99, 0.0),
        Decision::Stop(StopReason::AttemptCapReached { max: 3 })
    );
    assert_eq!(
        f.plan(503, "GET", None, 0, 1, 0.0),
        Decision::Stop(StopReason::DeadlineExhausted)
    );
}

#[test]
fn attempt_caps() {
    let f = Fixture::new();
    let once = RetryPolicy::new().with_max_attempts(NonZeroU32::MIN);
    let attempt = Attempt::new(1, "GET", 503, f.received());
    assert_eq!(
        once.plan(&attempt, f.t0 + Duration::from_secs(10), &mut || 0.0),
        Decision::Stop(StopReason::AttemptCapReached { max: 1 })
    );
    // Attempt 0 is read as attempt 1.
    assert_eq!(
        f.plan(503, "GET", None, 10, 0, 0.0),
        f.plan(503, "GET", None, 10, 1, 0.0)
    );
    assert_eq!(
        f.plan(503, "GET", None, 10, u32::MAX, 0.0),
        Decision::Stop(StopReason::AttemptCapReached { max: 3 })
    );
}

#[test]
fn deadline_exhausted_when_no_room_is_left_for_the_attempt() {
    let f = Fixture::new();
    let attempt = Attempt::new(1, "GET", 503, f.received()).with_retry_after(Some("0"));
    let plan = |policy: &RetryPolicy, deadline| policy.plan(&attempt, deadline, &mut || 0.0);
    let exhausted = Decision::Stop(StopReason::DeadlineExhausted);
    // Passed, reached, or less than the 1 s attempt budget away.
    assert_eq!(
        plan(&f.policy, f.t0.checked_sub(ms(1)).unwrap_or(f.t0)),
        exhausted
    );
    assert_eq!(plan(&f.policy, f.t0), exhausted);
    assert_eq!(plan(&f.policy, f.at(999)), exhausted);
    // Exactly the budget away: room for an immediate attempt, but the 1 s
    // backoff does not fit.
    assert_eq!(
        plan(&f.policy, f.at(1000)),
        Decision::Stop(StopReason::WaitExceedsDeadline {
            wait: Duration::from_secs(1)
        })
    );
    // With no backoff and no budget, an immediate retry fits just before
    // the deadline; at the deadline itself nothing does.
    let eager = RetryPolicy::new()
        .with_backoff(Duration::ZERO, Duration::ZERO)
        .with_attempt_budget(Duration::ZERO);
    assert_eq!(plan(&eager, f.at(1)), Decision::Retry { at: f.t0 });
    assert_eq!(plan(&eager, f.t0), exhausted);
}

#[test]
fn the_attempt_budget_is_reserved_before_the_deadline() {
    let f = Fixture::new();
    let attempt = Attempt::new(1, "GET", 503, f.received()).with_retry_after(Some("3"));
    let policy = RetryPolicy::new().with_attempt_budget(Duration::from_secs(2));
    // 3 s wait + 2 s budget = 5 s: fits a 5 s deadline exactly, not 4.999 s.
    assert_eq!(
        policy.plan(&attempt, f.at(5000), &mut || 0.9),
        Decision::Retry { at: f.at(3000) } // no slack, so no jitter
    );
    assert_eq!(
        policy.plan(&attempt, f.at(4999), &mut || 0.0),
        Decision::Stop(StopReason::WaitExceedsDeadline {
            wait: Duration::from_secs(3)
        })
    );
}

#[test]
fn jitter_shrinks_to_the_slack_before_the_deadline() {
    let f = Fixture::new();
    let attempt = Attempt::new(1, "GET", 503, f.received()).with_retry_after(Some("3"));
    // Deadline 4.5 s, budget 1 s: 0.5 s of slack after the 3 s boundary, so
    // the 1 s window becomes 0.5 s, scaled rather than clipped.
    let deadline = f.at(4500);
    assert_eq!(
        f.policy.plan(&attempt, deadline, &mut || 0.5),
        Decision::Retry { at: f.at(3250) }
    );
    assert_eq!(
        f.policy.plan(&attempt, deadline, &mut || 1.0),
        Decision::Retry { at: f.at(3500) }
    );
}

#[test]
fn a_faulty_jitter_source_cannot_move_a_retry_out_of_its_window() {
    let f = Fixture::new();
    for (fraction, expected) in [
        (f64::NAN, 3000),
        (-1.0, 3000),
        (f64::NEG_INFINITY, 3000),
        (1.0, 4000),
        (2.0, 4000),
        (f64::INFINITY, 4000),
    ] {
        assert_eq!(
            f.plan(429, "GET", Some("3"), 10, 1, fraction),
            Decision::Retry { at: f.at(expected) }
        );
    }
}

#[test]
fn backoff_doubles_and_is_capped_without_server_guidance() {
    let f = Fixture::new();
    let policy = RetryPolicy::new().with_max_attempts(NonZeroU32::new(10).unwrap());
    let deadline = f.t0 + Duration::from_secs(3600);
    let waits: Vec<u64> = (1..=9)
        .map(|n| {
            let attempt = Attempt::new(n, "GET", 503, f.received());
            let at = policy
                .plan(&attempt, deadline, &mut || 0.0)
                .retry_at()
                .unwrap();
            at.duration_since(f.t0).as_secs()
        })
        .collect();
    assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30, 30]);
}

#[test]
fn the_server_wait_is_a_floor_and_so_is_the_backoff() {
    let f = Fixture::new();
    // The server's 10 s beats the 1 s backoff of attempt 1 ...
    assert_eq!(
        f.plan(503, "GET", Some("10"), 60, 1, 0.0),
        Decision::Retry { at: f.at(10_000) }
    );
    // ... and the 2 s backoff of attempt 2 beats a "retry now".
    assert_eq!(
        f.plan(503, "GET", Some("0"), 60, 2, 0.0),
        Decision::Retry { at: f.at(2000) }
    );
}

#[test]
fn retry_after_takes_precedence_over_a_rate_limit_hint() {
    let f = Fixture::new();
    let deadline = f.t0 + Duration::from_secs(60);
    let plan = |attempt: Attempt<'_>| f.policy.plan(&attempt, deadline, &mut || 0.0);
    let base = Attempt::new(1, "GET", 429, f.received());

    // Both: Retry-After wins, whether it is shorter or longer.
    let both_shorter = base
        .with_retry_after(Some("5"))
        .with_rate_limit_wait(Some(Duration::from_secs(20)));
    assert_eq!(both_shorter.server_wait(), secs(5));
    assert_eq!(plan(both_shorter), Decision::Retry { at: f.at(5000) });
    let both_longer = base
        .with_retry_after(Some("20"))
        .with_rate_limit_wait(Some(Duration::from_secs(5)));
    assert_eq!(plan(both_longer), Decision::Retry { at: f.at(20_000) });
    // A date form wins too.
    let date = httpdate::fmt_http_date(reference() + Duration::from_secs(7));
    let dated = base
        .with_retry_after(Some(date.as_str()))
        .with_rate_limit_wait(Some(Duration::from_secs(20)));
    assert_eq!(plan(dated), Decision::Retry { at: f.at(7000) });

    // Only the hint: it is used.
    let hint = base.with_rate_limit_wait(Some(Duration::from_secs(20)));
    assert_eq!(plan(hint), Decision::Retry { at: f.at(20_000) });
    // An invalid Retry-After counts as absent, so the hint applies.
    let invalid = hint.with_retry_after(Some("soon"));
    assert_eq!(invalid.server_wait(), secs(20));
    // Neither: the local backoff.
    assert_eq!(base.server_wait(), None);
    assert_eq!(plan(base), Decision::Retry { at: f.at(1000) });
}

#[test]
fn header_bytes_go_straight_in() {
    let f = Fixture::new();
    let raw: &[u8] = b" 3 ";
    let attempt = Attempt::new(1, "GET", 503, f.received()).with_retry_after(Some(raw));
    assert_eq!(attempt.server_wait(), secs(3));
    let owned: Vec<u8> = b"4".to_vec();
    let attempt = Attempt::new(1, "GET", 503, f.received()).with_retry_after(Some(&owned));
    assert_eq!(attempt.server_wait(), secs(4));
}

#[test]
fn stop_reasons_read_well() {
    assert_eq!(
        StopReason::WaitExceedsDeadline {
            wait: Duration::from_secs(3)
        }
        .to_string(),
        "the required wait of 3s runs past the deadline"
    );
    assert_eq!(
        StopReason::AttemptCapReached { max: 3 }.to_string(),
        "3 attempts made, the policy's cap"
    );
    let boxed: Box<dyn std::error::Error> = StopReason::DeadlineExhausted.into();
    assert_eq!(
        boxed.to_string(),
        "the deadline leaves no time for another attempt"
    );
}

// ---------------------------------------------------------------------------
// Properties.

/// Values a hostile or broken server might send: date-shaped pieces glued
/// together with separators, digit runs far beyond any field width, or
/// arbitrary bytes, sometimes thousands of them.
fn hostile_value() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        prop::sample::select(vec![
            "Sun", "Sunday", "Mon", "Fri", "Friday", "Jan", "Feb", "Dec", "GMT", "UTC", "gmt",
        ])
        .prop_map(String::from),
        "[0-9]{1,30}",
        prop::sample::select(vec![", ", " ", "  ", "-", ":", ",", "\t", "+", "."])
            .prop_map(String::from),
    ];
    prop_oneof![
        proptest::collection::vec(piece, 0..16).prop_map(|pieces| pieces.concat().into_bytes()),
        "[0-9]{0,3000}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..2048),
    ]
}

/// Optional whitespace: up to three spaces or tabs.
fn ows() -> impl Strategy<Value = String> {
    proptest::collection::vec(prop_oneof![Just(' '), Just('\t')], 0..4)
        .prop_map(|chars| chars.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any delay-seconds in the u64 range, with any OWS, is exactly that
    /// many seconds (the cap is u64::MAX seconds, so min(n, cap) = n).
    #[test]
    fn delay_seconds_in_u64_range_are_exact(n in any::<u64>(), zeros in 0usize..4, lead in ows(), trail in ows()) {
        let value = format!("{lead}{}{n}{trail}", "0".repeat(zeros));
        prop_assert_eq!(parse_retry_after(&value, reference()), secs(n));
    }

    /// Longer digit strings saturate at the cap.
    #[test]
    fn longer_delay_seconds_saturate(digits in "[0-9]{1,60}") {
        let expected = digits.parse::<u128>().map_or(u64::MAX, |v| u64::try_from(v).unwrap_or(u64::MAX));
        prop_assert_eq!(parse_retry_after(&digits, reference()), secs(expected));
        prop_assert!(parse_retry_after(&digits, reference()).unwrap() <= RETRY_AFTER_CAP);
    }

    /// Any bytes, any receive time: no panic, and any wait is within the
    /// cap.
    #[test]
    fn never_panics_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..64),
        offset in any::<i64>(),
    ) {
        let received = if offset >= 0 {
            UNIX_EPOCH.checked_add(Duration::from_secs(offset.unsigned_abs()))
        } else {
            UNIX_EPOCH.checked_sub(Duration::from_secs(offset.unsigned_abs()))
        };
        if let Some(wait) = parse_retry_after(&bytes, received.unwrap_or(UNIX_EPOCH)) {
            prop_assert!(wait <= RETRY_AFTER_CAP);
        }
    }

    /// Date-shaped garbage (day and month names, digit runs of any length,
    /// separators, signs) and long values, on several conflicting lines and
    /// at any receive time: no panic, the lines' answer is the longest of
    /// the single-line answers, and a plan from it never retries before it.
    #[test]
    fn never_panics_on_hostile_lines(
        lines in proptest::collection::vec(hostile_value(), 0..4),
        offset in any::<i64>(),
        nanos in 0u32..1_000_000_000,
        fraction in any::<f64>(),
    ) {
        let base = if offset >= 0 {
            UNIX_EPOCH.checked_add(Duration::new(offset.unsigned_abs(), nanos))
        } else {
            UNIX_EPOCH.checked_sub(Duration::new(offset.unsigned_abs(), nanos))
        };
        let received_at = base.unwrap_or(UNIX_EPOCH);
        let singles: Vec<Option<Duration>> =
            lines.iter().map(|line| parse_retry_after(line, received_at)).collect();
        let longest = singles.iter().flatten().max().copied();
        prop_assert_eq!(parse_retry_after_lines(&lines, received_at), longest);

        let t0 = Instant::now();
        let attempt = Attempt::new(1, "GET", 429, Received::new(t0, received_at))
            .with_retry_after_lines(&lines);
        prop_assert_eq!(attempt.server_wait(), longest);
        let deadline = t0 + Duration::from_secs(3600);
        if let Decision::Retry { at } = RetryPolicy::new().plan(&attempt, deadline, &mut || fraction) {
            prop_assert!(at >= t0 + longest.unwrap_or(Duration::ZERO));
            prop_assert!(at + Duration::from_secs(1) <= deadline);
        }
    }

    /// Near-miss dates (one byte of a valid date changed) never panic, and
    /// whatever they parse to is a wait within the date range.
    #[test]
    fn never_panics_on_mutated_dates(t in 0u64..253_402_300_800, form in 0usize..3, at in 0usize..40, byte in any::<u8>()) {
        let time = wall(t);
        let mut value = match form {
            0 => httpdate::fmt_http_date(time),
            1 => rfc850(time),
            _ => asctime(time),
        }.into_bytes();
        if let Some(b) = value.get_mut(at) {
            *b = byte;
        }
        if let Some(wait) = parse_retry_after(&value, reference()) {
            prop_assert!(wait <= Duration::from_secs(253_402_300_800));
        }
    }

    /// Every date form of any instant from 1970 to 9999 gives the exact
    /// wait from the receive time (RFC 850 within its 100-year window).
    #[test]
    fn dates_give_exact_waits(t in 0u64..253_402_300_800, received in 0u64..4_102_444_800, nanos in 0u32..1_000_000_000) {
        let received_at = wall(received) + Duration::from_nanos(nanos.into());
        let expected = wall(t).duration_since(received_at).unwrap_or(Duration::ZERO);
        prop_assert_eq!(parse_retry_after(httpdate::fmt_http_date(wall(t)), received_at), Some(expected));
        prop_assert_eq!(parse_retry_after(asctime(wall(t)), received_at), Some(expected));
        // 50 years either side of the receive time is inside RFC 850's window.
        let fifty_years = 50 * 365 * 86_400;
        if t.abs_diff(received) < fifty_years {
            prop_assert_eq!(parse_retry_after(rfc850(wall(t)), received_at), Some(expected));
        }
    }

    /// A retry is never before the server's boundary or the backoff, always
    /// leaves the attempt budget before the deadline, and never follows the
    /// last allowed attempt.
    #[test]
    fn planner_respects_boundary_deadline_and_cap(
        status in prop_oneof![Just(429u16), Just(503u16), any::<u16>()],
        method in prop_oneof![Just("GET"), Just("PUT"), Just("POST"), Just("get")],
        retry_after in proptest::option::of(prop_oneof![
            any::<u64>().prop_map(|n| n.to_string()),
            (0u64..100_000).prop_map(|n| n.to_string()),
            (0u64..100_000).prop_map(|n| httpdate::fmt_http_date(reference() + Duration::from_secs(n))),
            ".*",
        ]),
        hint_ms in proptest::option::of(0u64..100_000_000),
        number in 0u32..12,
        max_attempts in 1u32..8,
        remaining_ms in 0u64..200_000,
        budget_ms in 0u64..5_000,
        jitter_ms in 0u64..5_000,
        fraction in prop_oneof![0.0f64..1.0, any::<f64>()],
    ) {
        let t0 = Instant::now();
        let received = Received::new(t0, reference());
        let policy = RetryPolicy::new()
            .with_max_attempts(NonZeroU32::new(max_attempts).unwrap())
            .with_attempt_budget(ms(budget_ms))
            .with_max_jitter(ms(jitter_ms));
        let attempt = Attempt::new(number, method, status, received)
            .with_retry_after(retry_after.as_deref())
            .with_rate_limit_wait(hint_ms.map(ms));
        let deadline = t0 + ms(remaining_ms);
        match policy.plan(&attempt, deadline, &mut || fraction) {
            Decision::Retry { at } => {
                let server = attempt.server_wait().unwrap_or(Duration::ZERO);
                prop_assert!(at >= t0 + server);
                prop_assert!(at >= t0 + policy.backoff(number));
                prop_assert!(at - t0 <= server.max(policy.backoff(number)) + ms(jitter_ms));
                prop_assert!(at + ms(budget_ms) <= deadline);
                prop_assert!(number.max(1) < max_attempts);
                prop_assert!(status == 429 || status == 503);
                prop_assert!(IDEMPOTENT_METHODS.contains(&method));
            }
            Decision::Stop(StopReason::AttemptCapReached { max }) => prop_assert_eq!(max, max_attempts),
            Decision::Stop(_) => {}
        }
        if number.max(1) >= max_attempts {
            prop_assert!(policy.plan(&attempt, deadline, &mut || fraction).retry_at().is_none());
        }
    }

    /// A server that always refuses: the loop ends within the attempt cap,
    /// whatever it says and however far away the deadline is.
    #[test]
    fn a_retry_loop_always_terminates(
        max_attempts in 1u32..10,
        waits in proptest::collection::vec(proptest::option::of(0u64..5), 10),
        seed in any::<u64>(),
    ) {
        let t0 = Instant::now();
        let policy = RetryPolicy::new().with_max_attempts(NonZeroU32::new(max_attempts).unwrap());
        let deadline = t0 + Duration::from_secs(1_000_000);
        let mut jitter = JitterGenerator::new(seed);
        let mut now = t0;
        let mut wall_now = reference();
        let mut sent = 1u32;
        let reason = loop {
            let value = waits[(sent as usize - 1) % waits.len()].map(|n| n.to_string());
            let attempt = Attempt::new(sent, "GET", 503, Received::new(now, wall_now))
                .with_retry_after(value.as_deref());
            match policy.plan(&attempt, deadline, &mut jitter) {
                Decision::Retry { at } => {
                    prop_assert!(at >= now);
                    wall_now += at - now;
                    now = at;
                    sent += 1;
                }
                Decision::Stop(reason) => break reason,
            }
            prop_assert!(sent <= max_attempts);
        };
        prop_assert_eq!(sent, max_attempts);
        prop_assert_eq!(reason, StopReason::AttemptCapReached { max: max_attempts });
    }
}

#[test]
fn jitter_sources_are_interchangeable() {
    fn draw(source: &mut dyn JitterSource) -> f64 {
        source.next_fraction()
    }
    let mut counter = 0.0;
    let mut closure = || {
        counter += 0.1;
        counter
    };
    assert_eq!(draw(&mut closure), 0.1);
    let mut generator = JitterGenerator::default();
    assert!((0.0..1.0).contains(&draw(&mut generator)));
}

// ---------------------------------------------------------------------------
// Jitter: one generator, uniform over the whole window, both ends included.

/// The planner's jitter reaches the end of its window: a 1 ns window adds
/// 0 or 1 ns, and a 3 ns window every value of 0..=3 (before the fix the
/// end of the window was unreachable).
#[test]
fn retry_jitter_covers_its_whole_window() {
    let t0 = Instant::now();
    let attempt = Attempt::new(1, "GET", 503, Received::new(t0, reference()));
    let deadline = t0 + Duration::from_secs(1);
    for window in [1, 3] {
        let policy = RetryPolicy::new()
            .with_backoff(Duration::ZERO, Duration::ZERO)
            .with_attempt_budget(Duration::ZERO)
            .with_max_jitter(Duration::from_nanos(window));
        let mut source = JitterGenerator::new(7);
        let seen: std::collections::BTreeSet<u128> = (0..1000)
            .map(|_| {
                let at = policy
                    .plan(&attempt, deadline, &mut source)
                    .retry_at()
                    .unwrap();
                (at - t0).as_nanos()
            })
            .collect();
        assert_eq!(
            seen,
            (0..=u128::from(window)).collect(),
            "window {window} ns"
        );
    }
}

/// Extreme windows neither panic nor overflow: `Duration::MAX` of jitter
/// with a deadline as far as an `Instant` reaches, and a zero window.
#[test]
fn retry_jitter_at_extreme_windows() {
    let t0 = Instant::now();
    let attempt = Attempt::new(1, "GET", 503, Received::new(t0, reference()));
    let far = (0..64)
        .rev()
        .find_map(|shift| t0.checked_add(Duration::from_secs(1 << shift)))
        .unwrap();
    let mut source = JitterGenerator::new(11);
    for max_jitter in [Duration::MAX, Duration::ZERO] {
        let policy = RetryPolicy::new().with_max_jitter(max_jitter);
        for _ in 0..100 {
            let at = policy.plan(&attempt, far, &mut source).retry_at().unwrap();
            assert!(at >= t0 + policy.backoff(1));
            assert!(at + Duration::from_secs(1) <= far);
            if max_jitter.is_zero() {
                assert_eq!(at, t0 + policy.backoff(1));
            }
        }
    }
}

/// The server's advertised jitter is uniform over `0..=n`: `up_to(1)` adds
/// 1 as often as 0 (it never did), the documented `30..=33` reaches 33, and
/// `up_to(0)` and `up_to(u64::MAX)` neither panic nor overflow.
#[cfg(feature = "http")]
#[test]
fn http_jitter_is_uniform_over_its_bound() {
    use tollgate::http::Jitter;
    let one = Jitter::with_generator(1, JitterGenerator::new(2026));
    let ones: u64 = (0..10_000).map(|_| one.apply(0)).sum();
    // Binomial(10 000, 1/2): 5 000 ± 5 standard deviations (50 each).
    assert!((4_750..=5_250).contains(&ones), "{ones}");
    let three = Jitter::with_generator(3, JitterGenerator::new(1));
    let seen: std::collections::BTreeSet<u64> = (0..1000).map(|_| three.apply(30)).collect();
    assert_eq!(seen, (30..=33).collect());
    assert!((0..100).all(|_| Jitter::up_to(0).apply(7) == 7));
    let widest = Jitter::with_generator(u64::MAX, JitterGenerator::new(3));
    let draws: Vec<u64> = (0..1000).map(|_| widest.apply(0)).collect();
    assert!(draws.iter().any(|&d| d > u64::MAX / 2));
    assert!(draws.iter().any(|&d| d <= u64::MAX / 2));
    assert_eq!(widest.apply(u64::MAX), u64::MAX);
}
