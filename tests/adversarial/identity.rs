//! Attacks on the identity layer: address keys, the forwarded-header trust
//! walk, and the client-side Retry-After parser.

use std::net::{IpAddr, Ipv6Addr};

use tollgate::identity::{AddrKey, ForwardedResolver, HeaderSource, PrefixPolicy, TrustedProxies};
use tollgate::{KeyedLimiter, ManualClock, Quota};

/// The burst of every limiter here; the clock never moves, so no refill.
const BURST: u64 = 5;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// A limiter per address key with the crate's default key cap.
fn per_address() -> KeyedLimiter<AddrKey, ManualClock> {
    KeyedLimiter::builder(Quota::per_second(BURST).unwrap())
        .clock(ManualClock::new())
        .build()
}

/// How many of `keys` the limiter admits, one token each.
fn admitted(
    limiter: &KeyedLimiter<AddrKey, ManualClock>,
    keys: impl Iterator<Item = AddrKey>,
) -> u64 {
    keys.map(|key| u64::from(limiter.try_acquire(&key, 1).is_ok()))
        .sum()
}

/// `count` distinct addresses inside `net`/64, spread over all 64 host bits
/// (an odd multiplier is a bijection on them), as a rotating client would
/// pick them.
fn rotation(net: u128, count: u64) -> impl Iterator<Item = IpAddr> {
    (0..count).map(move |i| {
        let host = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        IpAddr::V6(Ipv6Addr::from_bits(net | u128::from(host)))
    })
}

// ---------------------------------------------------------------------------
// Address keys.

/// A client rotating through its own /64 (it holds 2^64 addresses) gets one
/// budget by default, and cannot fill the key table: a million distinct
/// addresses of one /64 make one key and are admitted `BURST` times in all.
#[test]
fn a_client_rotating_through_its_64_gets_one_budget() {
    let limiter = per_address();
    let subnet = 0x2001_0db8_0001_0002_u128 << 64;
    let keys = rotation(subnet, 1_000_000).map(AddrKey::from);
    assert_eq!(admitted(&limiter, keys), BURST);
    assert_eq!(limiter.len(), 1);
    // The same through a resolver left at its defaults.
    let resolver = ForwardedResolver::new(HeaderSource::XForwardedFor, TrustedProxies::none());
    let keys = rotation(subnet, 1000).map(|peer| resolver.resolve(peer, []).unwrap().key());
    assert_eq!(admitted(&limiter, keys), 0);
    assert_eq!(limiter.len(), 1);
}

/// Clients in different /64s are different clients: each gets its own
/// budget, so aggregation never makes neighbours pay for each other.
#[test]
fn different_64s_keep_separate_budgets() {
    let limiter = per_address();
    let subnets = (0..1000_u128).map(|i| (0x2001_0db8_0001_0000_u128 | i) << 64);
    let keys = subnets.map(|net| AddrKey::from(IpAddr::V6(Ipv6Addr::from_bits(net | 1))));
    assert_eq!(admitted(&limiter, keys), 1000);
    assert_eq!(limiter.len(), 1000);
}

/// The defaults agree everywhere an address becomes a key: IPv4 by address,
/// IPv6 by /64, and `EXACT` still available by name.
#[test]
fn every_default_keys_ipv6_by_64() {
    assert_eq!(PrefixPolicy::default(), PrefixPolicy::new(32, 64).unwrap());
    assert_eq!(PrefixPolicy::default(), PrefixPolicy::SUBSCRIBER);
    assert!(PrefixPolicy::EXACT.is_exact());
    let resolver = ForwardedResolver::new(HeaderSource::Forwarded, TrustedProxies::none());
    assert_eq!(resolver.prefix_policy(), PrefixPolicy::default());
    let (a, b) = (ip("2001:db8:1:2::a"), ip("2001:db8:1:2:ffff::b"));
    assert_eq!(AddrKey::from(a), AddrKey::from(b));
    assert_eq!("2001:db8:1:2::a".parse::<AddrKey>(), Ok(AddrKey::from(b)));
    assert_ne!(
        AddrKey::new(a, PrefixPolicy::EXACT),
        AddrKey::new(b, PrefixPolicy::EXACT)
    );
    assert_ne!(
        AddrKey::from(ip("192.0.2.1")),
        AddrKey::from(ip("192.0.2.2"))
    );
}

/// One IPv4 client is one budget however its address is spelt in IPv6:
/// mapped, translated, compatible, through the NAT64 well-known prefix, as
/// a 6to4 site (its whole /48) or a Teredo client (whatever Teredo server,
/// flags and port it claims).
#[test]
fn ipv4_spellings_of_one_client_share_its_budget() {
    let limiter = per_address();
    let client = ip("192.0.2.1");
    let spellings = [
        "192.0.2.1",
        "::ffff:192.0.2.1",
        "::ffff:c000:201",
        "0:0:0:0:0:ffff:192.0.2.1",
        "::ffff:0:192.0.2.1", // IPv4-translated (RFC 2765)
        "::192.0.2.1",        // IPv4-compatible (RFC 4291, deprecated)
        "64:ff9b::192.0.2.1", // NAT64 well-known prefix (RFC 6052)
        "2002:c000:201::1",   // 6to4 (RFC 3056)
        "2002:c000:201:ffff:1234::9",
        // Teredo (RFC 4380): server 203.0.113.1 or 198.51.100.2, any flags
        // and port, client 192.0.2.1 stored inverted.
        "2001:0:cb00:7101:8000:f227:3fff:fdfe",
        "2001:0:c633:6402:0:1:3fff:fdfe",
    ];
    for spelling in spellings {
        let key = AddrKey::from(ip(spelling));
        assert_eq!(key, AddrKey::from(client), "{spelling}");
        assert_eq!(key.addr(), client, "{spelling}");
        assert_eq!(
            key,
            AddrKey::new(ip(spelling), PrefixPolicy::EXACT),
            "{spelling}"
        );
    }
    let keys = spellings.iter().map(|s| AddrKey::from(ip(s)));
    assert_eq!(admitted(&limiter, keys), BURST);
    assert_eq!(limiter.len(), 1);
}

/// The IPv6 addresses that only look like IPv4 embeddings stay IPv6 and
/// never share an IPv4 client's budget: the unspecified and loopback
/// addresses, NAT64's local-use prefix, and neighbours of each prefix.
#[test]
fn near_embeddings_are_ipv6_keys() {
    for text in [
        "::",
        "::1",
        "64:ff9b:1::c000:201",
        "64:ff9b::1:c000:201",
        "2003:c000:201::1",
        "2001:1:cb00:7101::3fff:fdfe",
        "::1:ffff:c000:201",
    ] {
        let key = AddrKey::from(ip(text));
        assert!(!key.is_ipv4(), "{text} keyed as IPv4");
    }
}

/// Link-local peers: an `IpAddr` carries no zone id, so one link-local /64
/// is one budget whichever interface it arrives on; a zone id written in a
/// header or a key is refused, never stripped and believed.
#[test]
fn link_local_peers_share_one_defined_key() {
    let key = AddrKey::from(ip("fe80::1234:5678:9abc:def0"));
    assert_eq!(key, AddrKey::from(ip("fe80::1")));
    assert_eq!(key.to_string(), "fe80::");
    assert!("fe80::1%eth0".parse::<AddrKey>().is_err());
    let resolver = ForwardedResolver::new(
        HeaderSource::XForwardedFor,
        TrustedProxies::parse(["10.0.0.0/8"]).unwrap(),
    );
    let err = resolver
        .resolve(ip("10.0.0.1"), [&b"fe80::1%eth0"[..]])
        .unwrap_err();
    assert_eq!(err.fallback().addr(), ip("10.0.0.1"));
}

/// Trust is never granted through an embedding: a peer whose IPv6 address
/// embeds a trusted proxy's IPv4 address (6to4, NAT64, Teredo, translated,
/// compatible) is a client like any other, and its forged header is not
/// read. Only the IPv4-mapped form, which is how a dual-stack socket reports
/// the proxy itself, is the proxy.
#[test]
fn an_embedding_of_a_trusted_proxy_is_not_trusted() {
    let resolver = ForwardedResolver::new(
        HeaderSource::XForwardedFor,
        TrustedProxies::parse(["10.0.0.1"]).unwrap(),
    );
    let forged = [&b"203.0.113.77"[..]];
    for impostor in [
        "2002:a00:1::1",
        "64:ff9b::10.0.0.1",
        "2001:0:cb00:7101::f5ff:fffe",
        "::ffff:0:10.0.0.1",
        "::10.0.0.1",
    ] {
        let client = resolver.resolve(ip(impostor), forged).unwrap();
        assert_eq!(client.addr(), ip(impostor), "{impostor}");
        assert_ne!(client.addr(), ip("203.0.113.77"));
    }
    let mapped = resolver.resolve(ip("::ffff:10.0.0.1"), forged).unwrap();
    assert_eq!(mapped.addr(), ip("203.0.113.77"));
}

// ---------------------------------------------------------------------------
// Forwarded headers.

/// Trusted: the edge proxy 10.0.0.2 and the ingress 10.0.0.3 (the peer).
fn behind_proxies(source: HeaderSource) -> ForwardedResolver {
    ForwardedResolver::new(source, TrustedProxies::parse(["10.0.0.0/8"]).unwrap())
}

/// The key of `lines` arriving from the trusted ingress, or of the fallback
/// when the header cannot be believed (what the tower extractor uses).
fn key_via_proxy(resolver: &ForwardedResolver, lines: &[&[u8]]) -> AddrKey {
    match resolver.resolve(ip("10.0.0.3"), lines.iter().copied()) {
        Ok(client) => client.key(),
        Err(refused) => refused.fallback().key(),
    }
}

/// A peer that is not a trusted proxy is the client, whatever it claims:
/// forged chains, a trusted proxy's own address at the right end (as if the
/// request had come through it), either header, several lines, garbage.
#[test]
fn an_untrusted_peer_cannot_pose_as_a_proxy() {
    let direct = ip("198.51.100.8");
    let forgeries: [&[&[u8]]; 6] = [
        &[b"203.0.113.1"],
        &[b"203.0.113.1, 10.0.0.2"],
        &[b"203.0.113.1", b"10.0.0.2, 10.0.0.3"],
        &[b"for=203.0.113.1;by=10.0.0.2, for=10.0.0.2"],
        &[b"unknown, _hidden, \"", b"\xff\xfe"],
        &[b"10.0.0.3"],
    ];
    for source in [HeaderSource::XForwardedFor, HeaderSource::Forwarded] {
        let resolver = behind_proxies(source);
        for lines in forgeries {
            let client = resolver.resolve(direct, lines.iter().copied()).unwrap();
            assert_eq!(client.addr(), direct, "{source:?} {lines:?}");
            assert_eq!(client.key(), AddrKey::from(direct));
        }
    }
}

/// The client writes the start of the header, on as many lines as it likes;
/// the edge proxy appends what it saw. Whatever the client wrote (trusted
/// addresses to be skipped, a chain on its own line, an unknown entry, a
/// ghost of the real client), the key is the address the edge proxy saw.
#[test]
fn forged_lines_before_the_proxies_entries_change_nothing() {
    let resolver = behind_proxies(HeaderSource::XForwardedFor);
    let real = AddrKey::from(ip("198.51.100.8"));
    let suffix: &[u8] = b"198.51.100.8, 10.0.0.2";
    let client_parts: [&[&[u8]]; 6] = [
        &[],
        &[b"1.2.3.4"],
        &[b"10.0.0.9, 10.0.0.5"],
        &[b"1.2.3.4", b"5.6.7.8, unknown"],
        &[b"[::1]:80, \"quoted\", 198.51.100.9"],
        &[b"\xc3\x28 not utf-8"],
    ];
    for part in client_parts {
        let mut lines = part.to_vec();
        lines.push(suffix);
        assert_eq!(key_via_proxy(&resolver, &lines), real, "{part:?}");
        // The same text appended to the client's last line, not on its own.
        if let Some(last) = part.last() {
            let joined = [*last, b", ", suffix].concat();
            let mut lines = part[..part.len() - 1].to_vec();
            lines.push(&joined);
            assert_eq!(key_via_proxy(&resolver, &lines), real, "{part:?} joined");
        }
    }
}

/// A resolver reads one header and never the other: a client that adds the
/// field the proxies do not manage (both headers at once, in any case of
/// name) is not believed. Header names are matched case-insensitively by
/// the HTTP library, so every spelling of the name is one field.
#[cfg(feature = "tower")]
#[test]
fn both_headers_at_once_and_mixed_case_names() {
    use std::net::SocketAddr;
    use tollgate::http::tower::extract;

    let resolver = behind_proxies(HeaderSource::XForwardedFor);
    let client = extract::forwarded(resolver, extract::peer_ip);
    let request = http::Request::builder()
        .header("Forwarded", "for=203.0.113.66")
        .header("forwarded", "for=203.0.113.67")
        .header("X-FORWARDED-FOR", "203.0.113.1")
        .header("x-forwarded-for", "198.51.100.8")
        .extension("10.0.0.3:4000".parse::<SocketAddr>().unwrap())
        .body(())
        .unwrap();
    let (parts, ()) = request.into_parts();
    assert_eq!(client(&parts), Ok(AddrKey::from(ip("198.51.100.8"))));
}

/// RFC 7239 syntax the client might use to smuggle a second address into
/// the element the proxy wrote: a comma or `for=` inside a quoted string is
/// data, a repeated `for` is refused, and names and `unknown` are
/// case-insensitive, so no spelling reads as anything but what it says.
#[test]
fn forwarded_quoting_cannot_split_or_double_an_element() {
    let resolver = behind_proxies(HeaderSource::Forwarded);
    let real = AddrKey::from(ip("198.51.100.8"));
    let proxy_fallback = AddrKey::from(ip("10.0.0.3"));
    let cases: [(&[u8], AddrKey); 8] = [
        (br#"for=198.51.100.8;x="a, for=203.0.113.1""#, real),
        (br#"x="a;for=203.0.113.1";for=198.51.100.8"#, real),
        (br#"FOR="198.51.100.8:4711""#, real),
        (br#"For="[::ffff:198.51.100.8]""#, real),
        (br#"for=198.51.100.8;for=203.0.113.1"#, proxy_fallback),
        (br#"for="198.51.100.8\", for=203.0.113.1""#, proxy_fallback),
        (br#"for=UnKnOwN"#, proxy_fallback),
        (br#"for=_SECRET:_p0rt"#, proxy_fallback),
    ];
    for (line, want) in cases {
        assert_eq!(
            key_via_proxy(&resolver, &[line]),
            want,
            "{}",
            String::from_utf8_lossy(line)
        );
    }
}

/// Ports, brackets, case and IPv4-mapped spellings of one client behind the
/// proxy, and the rotation of its /64, are one key: a client that varies
/// how it is written (or its source port) gets no new budget.
#[test]
fn spellings_ports_and_rotation_behind_a_proxy_share_one_key() {
    let limiter = per_address();
    let xff = behind_proxies(HeaderSource::XForwardedFor);
    let fwd = behind_proxies(HeaderSource::Forwarded);
    let key_of =
        |resolver: &ForwardedResolver, line: String| key_via_proxy(resolver, &[line.as_bytes()]);
    let mut keys = Vec::new();
    for port in [1_u16, 80, 443, 65535] {
        keys.extend([
            key_of(&xff, format!("192.0.2.1:{port}")),
            key_of(&xff, format!("[::ffff:192.0.2.1]:{port}")),
            key_of(&fwd, format!("for=\"192.0.2.1:{port}\"")),
            key_of(&xff, format!("[2002:c000:201::{port:x}]:{port}")),
        ]);
    }
    assert!(
        keys.iter()
            .all(|key| *key == AddrKey::from(ip("192.0.2.1")))
    );
    for host in rotation(0x2001_0db8_0001_0002_u128 << 64, 200) {
        keys.extend([
            key_of(&xff, format!("[{host}]:5000")),
            key_of(&fwd, format!("for=\"[{host}]\"")),
            key_of(&xff, host.to_string().to_uppercase()),
        ]);
    }
    let admitted_count = admitted(&limiter, keys.into_iter());
    assert_eq!(admitted_count, 2 * BURST);
    assert_eq!(limiter.len(), 2);
}

/// Huge entry counts cost capped work: 100 000 header lines (trusted
/// addresses, or empty) are refused after the entry limit with the nearest
/// trusted hop as fallback, and no more lines than the limit are read.
#[test]
fn huge_entry_counts_are_capped_in_lines_read() {
    let resolver = behind_proxies(HeaderSource::XForwardedFor);
    let limit = ForwardedResolver::DEFAULT_MAX_ENTRIES.get();
    for line in [&b"10.0.0.2"[..], b"", b" , ,"] {
        let lines = vec![line.to_vec(); 100_000];
        // Counts the lines the resolver takes, from either end.
        let pulled = std::cell::Cell::new(0);
        let counting = lines.iter().map(|line| {
            pulled.set(pulled.get() + 1);
            line.as_slice()
        });
        let err = resolver.resolve(ip("10.0.0.3"), counting).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("more than {limit} forwarded elements to walk")
        );
        assert!(resolver.proxies().contains(err.fallback().addr()));
        assert!(pulled.get() <= limit + 2, "{} lines pulled", pulled.get());
    }
}

/// Overlong values are refused, not believed and not a panic: one element
/// of a megabyte, a megabyte of commas, a quoted string that never closes,
/// a megabyte of backslashes before a quote. A megabyte the client wrote
/// left of the address the proxy appended is never even read.
#[test]
fn overlong_values_are_refused_with_the_nearest_trusted_fallback() {
    let megabyte = 1 << 20;
    let values = [
        vec![b'9'; megabyte],
        vec![b','; megabyte],
        [&b"for=\""[..], &vec![b'a'; megabyte]].concat(),
        [&vec![b'\\'; megabyte][..], b"\""].concat(),
        [&vec![b'1'; megabyte][..], b"2001:db8::1"].concat(),
    ];
    for source in [HeaderSource::XForwardedFor, HeaderSource::Forwarded] {
        let resolver = behind_proxies(source);
        for value in &values {
            let key = key_via_proxy(&resolver, &[value]);
            assert_eq!(key, AddrKey::from(ip("10.0.0.3")), "{source:?}");
        }
    }
    let resolver = behind_proxies(HeaderSource::XForwardedFor);
    let garbage_then_client = [&vec![b'"'; megabyte][..], b", 198.51.100.8"].concat();
    let key = key_via_proxy(&resolver, &[&garbage_then_client]);
    assert_eq!(key, AddrKey::from(ip("198.51.100.8")));
}

// ---------------------------------------------------------------------------
// The Retry-After parser and the retry planner, fed by a hostile server.

#[cfg(feature = "retry")]
mod retry_after {
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use tollgate::retry::{
        Attempt, Decision, JitterGenerator, RETRY_AFTER_CAP, Received, RetryPolicy, StopReason,
        parse_retry_after, parse_retry_after_lines,
    };

    /// A response received at 2026-09-08T12:00:00Z.
    fn received() -> Received {
        Received::new(
            Instant::now(),
            UNIX_EPOCH + Duration::from_secs(1_788_868_800),
        )
    }

    /// A GET refused with 503 and these Retry-After lines.
    fn attempt(received: Received, lines: &[&str]) -> Attempt<'static> {
        Attempt::new(1, "GET", 503, received).with_retry_after_lines(lines.iter().copied())
    }

    /// The default policy's plan, with an hour's deadline.
    fn plan(received: Received, attempt: &Attempt<'_>) -> Decision {
        let deadline = received.instant + Duration::from_secs(3600);
        RetryPolicy::new().plan(attempt, deadline, &mut JitterGenerator::new(1))
    }

    /// A delay beyond `u64::MAX` seconds saturates at the cap rather than
    /// failing or wrapping, and a plan against it stops with the wait it
    /// could not afford: never a panic, never an early retry.
    #[test]
    fn huge_delay_seconds_saturate_and_stop_the_plan() {
        let received = received();
        for digits in ["18446744073709551616", &"9".repeat(100_000)] {
            assert_eq!(
                parse_retry_after(digits, received.wall),
                Some(RETRY_AFTER_CAP)
            );
            let decision = plan(received, &attempt(received, &[digits]));
            assert_eq!(
                decision,
                Decision::Stop(StopReason::WaitExceedsDeadline {
                    wait: RETRY_AFTER_CAP
                })
            );
        }
    }

    /// Dates at the ends of the calendar: the far past is no wait, the far
    /// future is a wait the plan cannot afford, and a year with five digits
    /// or none is invalid. Receive times at the ends of `SystemTime` do not
    /// panic either.
    #[test]
    fn dates_far_in_the_past_or_future() {
        let received = received();
        let wall = received.wall;
        for past in [
            "Mon, 01 Jan 0001 00:00:00 GMT",
            "Thu, 01 Jan 1970 00:00:00 GMT",
        ] {
            assert_eq!(
                parse_retry_after(past, wall),
                Some(Duration::ZERO),
                "{past}"
            );
        }
        let future = "Fri, 31 Dec 9999 23:59:60 GMT";
        let wait = parse_retry_after(future, wall).unwrap();
        assert_eq!(wait, Duration::from_secs(253_402_300_800 - 1_788_868_800));
        assert!(matches!(
            plan(received, &attempt(received, &[future])),
            Decision::Stop(StopReason::WaitExceedsDeadline { .. })
        ));
        for invalid in [
            "Sat, 01 Jan 10000 00:00:00 GMT",
            "Sat, 01 Jan  00:00:00 GMT",
        ] {
            assert_eq!(parse_retry_after(invalid, wall), None, "{invalid}");
        }
        let extremes = [
            UNIX_EPOCH.checked_add(Duration::from_secs(i64::MAX as u64)),
            UNIX_EPOCH.checked_sub(Duration::from_secs(i64::MAX as u64)),
            Some(SystemTime::UNIX_EPOCH),
        ];
        for at in extremes.into_iter().flatten() {
            let _ = parse_retry_after(future, at);
            let _ = parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", at);
        }
    }

    /// A response with several Retry-After lines that disagree: the client
    /// waits for the longest valid one, so it never comes back earlier than
    /// any line asked. Invalid lines are ignored; no valid line is no
    /// guidance (the local backoff). A combined value (`5, 3600`) is one
    /// invalid value: commas are part of HTTP-dates, so it cannot be split
    /// safely.
    #[test]
    fn duplicated_and_conflicting_lines_wait_for_the_longest() {
        let received = received();
        let cases: [(&[&str], Option<u64>); 6] = [
            (&["5", "3600"], Some(3600)),
            (&["3600", "5"], Some(3600)),
            (&["7", "7"], Some(7)),
            (&["garbage", "7", ""], Some(7)),
            (&["5", "Tue, 08 Sep 2026 12:01:00 GMT"], Some(60)),
            (&["-1", "1.5", "5, 3600"], None),
        ];
        for (lines, want) in cases {
            let want = want.map(Duration::from_secs);
            let parsed = parse_retry_after_lines(lines.iter().copied(), received.wall);
            assert_eq!(parsed, want, "{lines:?}");
            assert_eq!(attempt(received, lines).server_wait(), want, "{lines:?}");
        }
        let decision = plan(received, &attempt(received, &["5", "600"]));
        let at = decision
            .retry_at()
            .expect("a 600 s wait fits an hour's deadline");
        assert!(at >= received.instant + Duration::from_secs(600));
    }
}
