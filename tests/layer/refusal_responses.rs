//! The HTTP side of a refusal: Retry-After rounding, headers, the
//! problem+json body, the RateLimit fields (serialised, then parsed back
//! with sfv and with this crate's parser), partition keys and jitter, and a
//! parser that ignores whatever is malformed without ever panicking.
use std::time::Duration;

use proptest::prelude::*;
use serde_json::Value;
use tollgate::http::{
    Jitter, PartitionKeys, PolicyName, ProblemType, QuotaUnit, RateLimitPolicy, Refusal,
    ServiceLimit, delay_seconds, parse_rate_limit, parse_rate_limit_policy,
    rate_limit_policy_value, rate_limit_value, rate_limit_wait,
};
use tollgate::{
    AcquireError, HierarchyError, Limit, ManualClock, Quota, TokenBucket, try_acquire_all,
};

fn name(text: &str) -> PolicyName {
    PolicyName::new(text).unwrap()
}

fn insufficient(wait: Duration) -> AcquireError {
    AcquireError::Insufficient { retry_after: wait }
}

fn problem(response: &http::Response<bytes::Bytes>) -> Value {
    serde_json::from_slice(response.body()).expect("the body is JSON")
}

#[test]
fn retry_after_rounds_up_to_whole_seconds() {
    let policy = RateLimitPolicy::new(name("burst"), 5);
    for (wait, expected) in [
        (Duration::from_nanos(1), "1"),
        (Duration::from_millis(1500), "2"),
        (Duration::from_secs(2), "2"),
        (Duration::from_nanos(2_000_000_001), "3"),
    ] {
        let response = Refusal::from_acquire(&insufficient(wait), &policy).into_response();
        assert_eq!(response.headers()["retry-after"], expected, "{wait:?}");
    }
    assert_eq!(delay_seconds(Duration::MAX), u64::MAX);
}

#[test]
fn a_429_carries_every_header_and_a_problem_body() {
    let policy = RateLimitPolicy::new(name("burst"), 5);
    let response =
        Refusal::from_acquire(&insufficient(Duration::from_millis(300)), &policy).into_response();
    assert_eq!(response.status(), 429);
    let headers = response.headers();
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(headers["ratelimit-policy"], r#""burst";q=5"#);
    let doc = problem(&response);
    assert_eq!(doc["type"], ProblemType::QuotaExceeded.uri());
    assert_eq!(doc["status"], 429);
    assert!(doc["title"].is_string() && doc["detail"].is_string());
    assert_eq!(doc["violated-policies"], serde_json::json!(["burst"]));
}

#[test]
fn shedding_and_unavailable_stores_are_503() {
    let policy = RateLimitPolicy::new(name("shared"), 100);
    // Only shared budgets (feature `tokio`) add the store's refusals.
    #[cfg_attr(not(feature = "tokio"), allow(unused_mut))]
    let mut responses = vec![
        Refusal::load_shed(None).into_response(),
        Refusal::from_acquire(&AcquireError::TooManyKeys { max_keys: 4 }, &policy).into_response(),
    ];
    #[cfg(feature = "tokio")]
    for store in [
        tollgate::shared::BudgetError::StoreUnavailable,
        tollgate::shared::BudgetError::StoreRefused,
    ] {
        responses.push(Refusal::from_budget(&store, &policy).into_response());
    }
    for response in responses {
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["retry-after"], "1");
        assert_eq!(response.headers()["cache-control"], "no-store");
        assert_eq!(
            problem(&response)["type"],
            ProblemType::TemporaryReducedCapacity.uri()
        );
        assert_eq!(problem(&response)["status"], 503);
    }
}

#[test]
fn refusals_no_wait_can_cure_have_no_retry_after() {
    let policy = RateLimitPolicy::new(name("upload"), 10);
    let too_big = AcquireError::ExceedsCapacity {
        cost: 11,
        capacity: 10,
    };
    let response = Refusal::from_acquire(&too_big, &policy).into_response();
    assert_eq!(response.status(), 413);
    assert!(response.headers().get("retry-after").is_none());
    let response = Refusal::from_acquire(&AcquireError::ZeroCost, &policy).into_response();
    assert_eq!(response.status(), 500);
    assert_eq!(problem(&response)["type"], "about:blank");
    assert!(problem(&response).get("violated-policies").is_none());
}

#[test]
fn a_hierarchy_refusal_names_the_refusing_policy_and_the_longest_wait() {
    let clock = ManualClock::new();
    let (burst, daily) = (
        Quota::per_second(2).unwrap(),
        Quota::new(3, 3, Duration::from_secs(86_400)).unwrap(),
    );
    let burst_bucket = TokenBucket::with_clock(burst, &clock);
    let daily_bucket = TokenBucket::with_clock(daily, &clock);
    let policies = [
        RateLimitPolicy::from_quota(name("burst"), &burst),
        RateLimitPolicy::from_quota(name("daily"), &daily),
    ];
    let steps = || [burst_bucket.cost(1), daily_bucket.cost(1)];
    for _ in 0..2 {
        try_acquire_all(&steps()).unwrap();
    }
    clock.advance(Duration::from_secs(1));
    try_acquire_all(&steps()).unwrap();
    let refused: HierarchyError = try_acquire_all(&steps()).unwrap_err();
    let response = Refusal::from_hierarchy(&refused, &policies).into_response();
    assert_eq!(response.status(), 429);
    assert_eq!(
        problem(&response)["violated-policies"],
        serde_json::json!(["daily"])
    );
    // A third of a day per token, less the second that has passed.
    assert_eq!(response.headers()["retry-after"], "28799");
    assert_eq!(
        response.headers()["ratelimit-policy"],
        r#""burst";q=2;w=1, "daily";q=3;w=86400"#
    );
}

#[test]
fn policies_from_quotas_map_capacity_and_full_refill_time() {
    let quota = Quota::new(20, 10, Duration::from_secs(1)).unwrap();
    let policy = RateLimitPolicy::from_quota(name("p"), &quota);
    assert_eq!((policy.quota(), policy.window_seconds()), (20, Some(2)));
    // 7 tokens refilled at 3 per second: 2.33 s, rounded up.
    let quota = Quota::new(7, 3, Duration::from_secs(1)).unwrap();
    assert_eq!(
        RateLimitPolicy::from_quota(name("p"), &quota).window_seconds(),
        Some(3)
    );
    // Sub-second refills still advertise a non-zero window.
    let quota = Quota::new(1, 1000, Duration::from_secs(1)).unwrap();
    assert_eq!(
        RateLimitPolicy::from_quota(name("p"), &quota).window_seconds(),
        Some(1)
    );
}

#[test]
fn fields_round_trip_through_sfv_and_the_parser() {
    let keys = PartitionKeys::random();
    let pk = keys.key(&name("per-user"), "alice");
    let policies = [
        RateLimitPolicy::from_quota(name("burst"), &Quota::per_second(10).unwrap()),
        RateLimitPolicy::new(name("per-user"), 65_535)
            .with_unit(QuotaUnit::ContentBytes)
            .with_window(10.try_into().unwrap())
            .with_partition_key(pk),
    ];
    let limits = [
        ServiceLimit::new(name("burst"), 0).with_reset_seconds(1),
        ServiceLimit::new(name("per-user"), 4096)
            .with_reset_seconds(7)
            .with_partition_key(pk),
    ];
    let policy_value = rate_limit_policy_value(&policies).unwrap();
    let limit_value = rate_limit_value(&limits).unwrap();

    // sfv's own parser reads both as Lists of String items.
    let list = sfv::Parser::new(policy_value.as_bytes())
        .parse_list()
        .unwrap();
    assert_eq!(list.len(), 2);
    let sfv::ListEntry::Item(item) = &list[1] else {
        panic!("not an item")
    };
    assert_eq!(
        item.bare_item.as_string().map(|s| s.as_str()),
        Some("per-user")
    );
    assert_eq!(
        item.params.get("pk").and_then(|v| v.as_byte_sequence()),
        Some(&pk.as_bytes()[..])
    );
    let list = sfv::Parser::new(limit_value.as_bytes())
        .parse_list()
        .unwrap();
    assert_eq!(list.len(), 2);

    let parsed = parse_rate_limit_policy([policy_value.as_bytes()]);
    assert_eq!(parsed.len(), 2);
    assert_eq!((parsed[0].policy.as_str(), parsed[0].quota), ("burst", 10));
    assert_eq!(parsed[0].window, Some(Duration::from_secs(1)));
    assert_eq!(parsed[1].quota_unit(), Some(QuotaUnit::ContentBytes));
    assert_eq!(parsed[1].partition_key.as_deref(), Some(&pk.as_bytes()[..]));

    let parsed = parse_rate_limit([limit_value.as_bytes()]);
    assert_eq!(parsed.len(), 2);
    assert_eq!(
        (parsed[1].remaining, parsed[1].reset),
        (4096, Some(Duration::from_secs(7)))
    );
    assert_eq!(rate_limit_wait(&parsed), Some(Duration::from_secs(1)));

    // A List split over two lines reads as one.
    let lines: [&[u8]; 2] = [br#""burst";r=0;t=1"#, br#""daily";r=0;t=9"#];
    assert_eq!(
        rate_limit_wait(&parse_rate_limit(lines)),
        Some(Duration::from_secs(9))
    );
}

#[test]
fn partition_keys_hide_the_key_and_are_stable_per_key() {
    let keys = PartitionKeys::random();
    let policy = name("per-address");
    let raw = "198.51.100.20";
    let pk = keys.key(&policy, raw);
    assert_eq!(pk, keys.key(&policy, raw));
    assert_ne!(pk, keys.key(&policy, "198.51.100.21"));
    assert_ne!(pk, keys.key(&name("other"), raw));
    assert!(
        !pk.as_bytes()
            .windows(3)
            .any(|w| raw.as_bytes().windows(3).any(|r| r == w))
    );
    // Another process (another random key) advertises something else.
    assert_ne!(pk, PartitionKeys::random().key(&policy, raw));
    // A shared secret makes nodes agree.
    let (a, b) = (
        PartitionKeys::with_secret([1; 16]),
        PartitionKeys::with_secret([1; 16]),
    );
    assert_eq!(a.key(&policy, raw), b.key(&policy, raw));
    assert_ne!(
        a.key(&policy, raw),
        PartitionKeys::with_secret([2; 16]).key(&policy, raw)
    );
}

/// Counts, windows and waits of any size are advertised, never refused nor
/// overflowed: each field carries at most the largest Structured Field
/// Integer (a wait that long is "not in any client's lifetime"), and the
/// quotas at the ends of the accepted range advertise their own shape.
#[test]
fn extreme_counts_and_waits_are_capped_at_the_largest_field_integer() {
    const MOST: &str = "999999999999999";
    let policy = RateLimitPolicy::new(name("p"), u64::MAX).with_window(std::num::NonZeroU64::MAX);
    assert_eq!(
        rate_limit_policy_value(&[policy]).unwrap(),
        format!(r#""p";q={MOST};w={MOST}"#).as_str()
    );
    let limit = ServiceLimit::new(name("p"), u64::MAX).with_reset_seconds(u64::MAX);
    assert_eq!(
        rate_limit_value(&[limit]).unwrap(),
        format!(r#""p";r={MOST};t={MOST}"#).as_str()
    );
    for wait in [Duration::from_secs(u64::MAX), Duration::MAX] {
        let shed = Refusal::load_shed(Some(wait)).into_response();
        assert_eq!(shed.headers()["retry-after"], MOST, "{wait:?}");
        let refused =
            Refusal::from_acquire(&insufficient(wait), &RateLimitPolicy::new(name("p"), 1));
        assert_eq!(
            refused.with_retry_after(wait).retry_after_seconds(),
            Some(999_999_999_999_999)
        );
    }
    assert_eq!(Jitter::up_to(u64::MAX).apply(u64::MAX), u64::MAX);
    assert_eq!(Jitter::up_to(0).apply(u64::MAX), u64::MAX);
    let fastest = Quota::new(u64::MAX, u64::MAX, Duration::from_nanos(1)).unwrap();
    let slowest = Quota::new(1, 1, Duration::from_nanos((1 << 63) - 1)).unwrap();
    let advertised = |quota: &Quota| {
        let policy = RateLimitPolicy::from_quota(name("p"), quota);
        (policy.quota(), policy.window_seconds())
    };
    assert_eq!(advertised(&fastest), (u64::MAX, Some(1)));
    assert_eq!(advertised(&slowest), (1, Some(9_223_372_037)));
}

#[test]
fn jitter_is_non_negative_bounded_and_moves_retry_after() {
    let jitter = Jitter::up_to(5);
    for _ in 0..10_000 {
        assert!((10..=15).contains(&jitter.apply(10)));
    }
    for fraction in [-3.0, 0.0, 0.5, 0.999, 1.0, 7.0, f64::NAN, f64::INFINITY] {
        let applied = Jitter::with_source(4, move || fraction).apply(100);
        assert!((100..=104).contains(&applied), "{fraction}: {applied}");
    }
    assert_eq!(Jitter::with_source(4, || 1.0).apply(1), 5);

    let policy = RateLimitPolicy::new(name("burst"), 5);
    let t = Jitter::with_source(4, || 0.5).apply(1);
    let refusal = Refusal::from_acquire(&insufficient(Duration::from_millis(10)), &policy)
        .with_service_limits([ServiceLimit::new(name("burst"), 0).with_reset_seconds(t)]);
    assert_eq!(refusal.into_response().headers()["retry-after"], "3");
}

#[test]
fn the_parser_skips_malformed_members_and_ignores_malformed_fields() {
    // Whole field malformed: nothing.
    for bad in [
        &b"\"a\";r=1,"[..],
        b"\"a\";r=1;;",
        b"\xff",
        b"(",
        b"\"unterminated",
    ] {
        assert!(parse_rate_limit([bad]).is_empty(), "{bad:?}");
    }
    // Members that are not service limits are skipped, the rest kept.
    let value =
        br#"("x" "y");r=1, 5;r=1, "neg";r=-1, "nor", "badt";r=1;t=-2, "tok";r=2;t="x", ok;r=3;t=4"#;
    let parsed = parse_rate_limit([&value[..]]);
    assert_eq!(parsed.len(), 1);
    assert_eq!((parsed[0].policy.as_str(), parsed[0].remaining), ("ok", 3));
    let value = br#""noq";w=1, "zero-w";q=1;w=0, "badpk";q=1;pk="x", "fine";q=1"#;
    let parsed = parse_rate_limit_policy([&value[..]]);
    assert_eq!(parsed.len(), 1);
    assert_eq!(parsed[0].policy, "fine");
    assert_eq!(rate_limit_wait(&[]), None);
}

proptest! {
    #[test]
    fn the_parser_never_panics(lines in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..4)) {
        let refs: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
        let limits = parse_rate_limit(refs.iter().copied());
        let _ = parse_rate_limit_policy(refs.iter().copied());
        let _ = rate_limit_wait(&limits);
    }

    #[test]
    fn serialised_fields_always_parse_back(remaining in any::<u64>(), reset in any::<u64>(), quota in any::<u64>()) {
        let limit = ServiceLimit::new(name("p"), remaining).with_reset_seconds(reset);
        let value = rate_limit_value(&[limit]).unwrap();
        let parsed = parse_rate_limit([value.as_bytes()]);
        prop_assert_eq!(parsed.len(), 1);
        // Values beyond what a Structured Field Integer holds are capped.
        prop_assert_eq!(parsed[0].remaining, remaining.min(999_999_999_999_999));
        let policy = RateLimitPolicy::new(name("p"), quota);
        let value = rate_limit_policy_value(&[policy]).unwrap();
        prop_assert_eq!(parse_rate_limit_policy([value.as_bytes()])[0].quota, quota.min(999_999_999_999_999));
    }

    #[test]
    fn retry_after_is_never_early(nanos in 1u64..u64::MAX) {
        let wait = Duration::from_nanos(nanos);
        let seconds = delay_seconds(wait);
        prop_assert!(seconds >= 1);
        prop_assert!(Duration::from_secs(seconds) >= wait);
        prop_assert!(Duration::from_secs(seconds) < wait + Duration::from_secs(1));
    }
}
