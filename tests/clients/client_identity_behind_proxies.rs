//! Client identity: address keys, prefix aggregation and the forwarded-header
//! trust walk. The seed fixture's cases come first, then RFC 7239 and
//! X-Forwarded-For syntax, the failure outcomes and their fallbacks, and
//! property tests of the properties the trust walk exists for.

use std::net::IpAddr;
use std::num::NonZeroUsize;

use proptest::prelude::*;
use tollgate::identity::{
    AddrKey, ChainPolicy, ForwardedError, ForwardedResolver, HeaderSource, IdentityError, Origin,
    PrefixPolicy, Resolved, TrustedProxies, client_addr,
};

const BOTH_SOURCES: [HeaderSource; 2] = [HeaderSource::Forwarded, HeaderSource::XForwardedFor];
const BOTH_CHAINS: [ChainPolicy; 2] = [ChainPolicy::Recursive, ChainPolicy::SingleAddress];

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn resolver(source: HeaderSource, trusted: &[&str]) -> ForwardedResolver {
    ForwardedResolver::new(source, TrustedProxies::parse(trusted).unwrap())
}

fn xff(trusted: &[&str]) -> ForwardedResolver {
    resolver(HeaderSource::XForwardedFor, trusted)
}

fn fwd(trusted: &[&str]) -> ForwardedResolver {
    resolver(HeaderSource::Forwarded, trusted)
}

/// Resolves with each `&str` as one header line.
fn resolve(r: &ForwardedResolver, peer: &str, lines: &[&str]) -> Result<Resolved, ForwardedError> {
    r.resolve(ip(peer), lines.iter().map(|line| line.as_bytes()))
}

/// The address and origin of a successful resolution.
fn found(r: &ForwardedResolver, peer: &str, lines: &[&str]) -> (IpAddr, Origin) {
    let resolved = resolve(r, peer, lines).expect("the header should resolve");
    (resolved.addr(), resolved.origin())
}

fn hops(trusted_hops: usize) -> Origin {
    Origin::Forwarded { trusted_hops }
}

/// The variant of a refusal, for tables of expected outcomes.
fn kind(err: &ForwardedError) -> &'static str {
    match err {
        ForwardedError::Malformed { .. } => "Malformed",
        ForwardedError::Obfuscated { .. } => "Obfuscated",
        ForwardedError::Unknown { .. } => "Unknown",
        ForwardedError::NotSingleAddress { .. } => "NotSingleAddress",
        ForwardedError::TooManyEntries { .. } => "TooManyEntries",
        _ => "another variant",
    }
}

/// The header line a client or proxy would write for `addr` in `source`.
fn entry(source: HeaderSource, addr: &str) -> String {
    match (source, ip(addr)) {
        (HeaderSource::XForwardedFor, _) => addr.to_owned(),
        (HeaderSource::Forwarded, IpAddr::V4(_)) => format!("for={addr}"),
        (HeaderSource::Forwarded, IpAddr::V6(_)) => format!("for=\"[{addr}]\""),
    }
}

// ---------------------------------------------------------------------------
// The seed fixture: one trusted proxy (192.0.2.10) that overwrites the field
// with a single address.

const SEED_PROXY: &str = "192.0.2.10";

#[test]
fn seed_untrusted_peer_with_a_replacement_claim_keeps_the_peer() {
    for source in BOTH_SOURCES {
        for chain in BOTH_CHAINS {
            let r = resolver(source, &[SEED_PROXY]).with_chain_policy(chain);
            let claim = entry(source, "203.0.113.77");
            assert_eq!(
                found(&r, "198.51.100.8", &[&claim]),
                (ip("198.51.100.8"), Origin::Peer),
                "{source:?} {chain:?}"
            );
        }
    }
}

#[test]
fn seed_untrusted_peer_with_junk_keeps_the_peer() {
    for source in BOTH_SOURCES {
        for chain in BOTH_CHAINS {
            let r = resolver(source, &[SEED_PROXY]).with_chain_policy(chain);
            assert_eq!(
                found(&r, "198.51.100.8", &["not-an-address"]),
                (ip("198.51.100.8"), Origin::Peer)
            );
        }
    }
}

#[test]
fn seed_the_trusted_proxys_single_replacement_is_used() {
    for source in BOTH_SOURCES {
        for chain in BOTH_CHAINS {
            let r = resolver(source, &[SEED_PROXY]).with_chain_policy(chain);
            let line = entry(source, "198.51.100.8");
            assert_eq!(
                found(&r, SEED_PROXY, &[&line]),
                (ip("198.51.100.8"), hops(0)),
                "{source:?} {chain:?}"
            );
        }
    }
}

#[test]
fn seed_equivalent_ipv6_text_shares_a_key() {
    let exact = PrefixPolicy::EXACT;
    let long = AddrKey::parse("2001:0db8:0:0::1", exact).unwrap();
    let short = AddrKey::parse("2001:db8::1", exact).unwrap();
    assert_eq!(long, short);
    assert_eq!(long.to_string(), "2001:db8::1");

    // The same through the resolver: untrusted peers, and forwarded spellings.
    let r = xff(&[SEED_PROXY]).with_prefix_policy(exact);
    let peer_key = |peer: &str| resolve(&r, peer, &["ignored"]).unwrap().key();
    assert_eq!(peer_key("2001:0db8:0:0::1"), peer_key("2001:db8::1"));
    let forwarded_key = |line: &str| resolve(&r, SEED_PROXY, &[line]).unwrap().key();
    assert_eq!(forwarded_key("2001:0db8:0:0::1"), short);
    assert_eq!(forwarded_key("[2001:DB8::1]:8080"), short);
    let r = fwd(&[SEED_PROXY]).with_prefix_policy(exact);
    let forwarded_key = |line: &str| resolve(&r, SEED_PROXY, &[line]).unwrap().key();
    assert_eq!(forwarded_key(r#"for="[2001:0db8:0000::0001]:443""#), short);
    // A different address is a different key.
    assert_ne!(forwarded_key(r#"for="[2001:db8::2]""#), short);
}

#[test]
fn seed_the_single_address_contract_rejects_a_chain() {
    let peer = ip(SEED_PROXY);
    for source in BOTH_SOURCES {
        let r = resolver(source, &[SEED_PROXY]).with_chain_policy(ChainPolicy::SingleAddress);
        let (a, b) = (entry(source, "198.51.100.8"), entry(source, "203.0.113.9"));
        let one_line = format!("{a}, {b}");
        for lines in [vec![one_line.as_str()], vec![a.as_str(), b.as_str()]] {
            let err = resolve(&r, SEED_PROXY, &lines).unwrap_err();
            assert!(
                matches!(err, ForwardedError::NotSingleAddress { .. }),
                "{err:?}"
            );
            assert_eq!(
                (err.fallback().addr(), err.fallback().origin()),
                (peer, Origin::Peer)
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Keys and prefix policy.

#[test]
fn ipv4_mapped_ipv6_is_its_ipv4_address() {
    let mapped = AddrKey::from(ip("::ffff:192.0.2.1"));
    assert_eq!(mapped, AddrKey::from(ip("192.0.2.1")));
    assert_eq!(mapped.addr(), ip("192.0.2.1"));
    assert!(mapped.is_ipv4());
    assert_eq!(mapped.to_string(), "192.0.2.1");
    assert_eq!(format!("{mapped:?}"), "AddrKey(192.0.2.1)");

    // A dual-stack socket reports IPv4 peers mapped: trusted all the same,
    // and resolved to IPv4.
    let r = xff(&["10.0.0.0/8"]);
    assert_eq!(
        found(&r, "::ffff:10.0.0.1", &["::ffff:198.51.100.8"]),
        (ip("198.51.100.8"), hops(0))
    );
    assert_eq!(
        found(&r, "::ffff:198.51.100.9", &["1.2.3.4"]),
        (ip("198.51.100.9"), Origin::Peer)
    );
}

#[test]
fn ipv4_and_ipv6_keys_never_collide() {
    // IPv6's own loopback and unspecified addresses, and IPv4 bits in an
    // ordinary IPv6 address, are IPv6.
    let distinct = [
        ("0.0.0.1", "::1"),
        ("0.0.0.0", "::"),
        ("192.0.2.1", "2001:db8::c000:201"),
        ("192.0.2.1", "::1:0:c000:201"),
    ];
    for policy in [PrefixPolicy::EXACT, PrefixPolicy::SUBSCRIBER] {
        for (v4, v6) in distinct {
            let (v4, v6) = (AddrKey::new(ip(v4), policy), AddrKey::new(ip(v6), policy));
            assert_ne!(v4, v6, "{v4} vs {v6}");
            assert!(!v6.is_ipv4());
        }
    }
    // The IPv6 spellings of an IPv4 host are that host.
    for embedding in [
        "::ffff:ffff:ffff",
        "::ffff:0:ffff:ffff",
        "::255.255.255.255",
    ] {
        assert_eq!(
            AddrKey::from(ip("255.255.255.255")),
            AddrKey::from(ip(embedding))
        );
    }
    // Aggregated to nothing, each family is still its own key.
    let all = PrefixPolicy::new(0, 0).unwrap();
    assert_ne!(
        AddrKey::new(ip("1.2.3.4"), all),
        AddrKey::new(ip("::1"), all)
    );
}

#[test]
fn ipv6_aggregation_by_64_and_56() {
    let by_64 = PrefixPolicy::new(32, 64).unwrap();
    let key = |text: &str, policy| AddrKey::new(ip(text), policy);
    // One /64: one key, whatever the interface identifier.
    assert_eq!(
        key("2001:db8:1:2::1", by_64),
        key("2001:db8:1:2:ffff:ffff:ffff:ffff", by_64)
    );
    // Neighbouring /64s: different keys.
    assert_ne!(key("2001:db8:1:2::1", by_64), key("2001:db8:1:3::1", by_64));
    assert_eq!(
        key("2001:db8:1:2::1", by_64).network(by_64).to_string(),
        "2001:db8:1:2::/64"
    );

    let by_56 = PrefixPolicy::new(32, 56).unwrap();
    // 2001:db8:1:200::/56 holds 2001:db8:1:200:: to 2001:db8:1:2ff:ffff:...
    assert_eq!(
        key("2001:db8:1:200::1", by_56),
        key("2001:db8:1:2ff::1", by_56)
    );
    assert_ne!(
        key("2001:db8:1:2ff::1", by_56),
        key("2001:db8:1:300::1", by_56)
    );
    assert_eq!(
        key("2001:db8:1:2ab::9", by_56).network(by_56).to_string(),
        "2001:db8:1:200::/56"
    );

    // IPv4 clients are untouched by an IPv6 length.
    assert_ne!(key("192.0.2.1", by_64), key("192.0.2.2", by_64));
    assert_eq!(
        key("192.0.2.1", by_64).network(by_64).to_string(),
        "192.0.2.1/32"
    );
}

#[test]
fn ipv4_aggregation() {
    let by_24 = PrefixPolicy::new(24, 128).unwrap();
    let key = |text: &str| AddrKey::new(ip(text), by_24);
    assert_eq!(key("198.51.100.1"), key("198.51.100.254"));
    assert_ne!(key("198.51.100.1"), key("198.51.101.1"));
    assert_eq!(key("::ffff:198.51.100.77"), key("198.51.100.1"));
    assert_eq!(key("198.51.100.77").to_string(), "198.51.100.0");
    assert_eq!(
        key("198.51.100.77").network(by_24).to_string(),
        "198.51.100.0/24"
    );
}

#[test]
fn resolved_keys_follow_the_resolvers_policy() {
    let policy = PrefixPolicy::new(24, 64).unwrap();
    let r = xff(&["10.0.0.0/8"]).with_prefix_policy(policy);
    let a = resolve(&r, "10.0.0.1", &["2001:db8:1:2::a"]).unwrap();
    let b = resolve(&r, "10.0.0.1", &["2001:db8:1:2::b"]).unwrap();
    assert_eq!(a.key(), b.key());
    assert_ne!(a.addr(), b.addr());
    assert_eq!(a.network().to_string(), "2001:db8:1:2::/64");
    let err = resolve(&r, "10.0.0.1", &["_x"]).unwrap_err();
    assert_eq!(err.fallback().network().to_string(), "10.0.0.0/24");
    // A client spelt in IPv6 for an IPv4 host is keyed and shown as that
    // host's IPv4 network, and keeps its own address.
    let six_to_four = resolve(&r, "10.0.0.1", &["2002:c000:201:7::9"]).unwrap();
    assert_eq!(six_to_four.addr(), ip("2002:c000:201:7::9"));
    assert_eq!(six_to_four.network().to_string(), "192.0.2.0/24");
    assert_eq!(six_to_four.key(), AddrKey::new(ip("192.0.2.77"), policy));
}

#[test]
fn prefix_lengths_are_validated() {
    assert_eq!(
        PrefixPolicy::new(33, 64),
        Err(IdentityError::PrefixTooLong { len: 33, max: 32 })
    );
    assert_eq!(
        PrefixPolicy::new(32, 129),
        Err(IdentityError::PrefixTooLong { len: 129, max: 128 })
    );
    assert_eq!(PrefixPolicy::new(32, 128), Ok(PrefixPolicy::EXACT));
    assert!(PrefixPolicy::new(0, 0).is_ok());
}

#[test]
fn address_parsing_is_strict() {
    for bad in [
        "[2001:db8::1]",
        "[2001:db8::1]:80",
        "192.0.2.1:80",
        "fe80::1%eth0",
        " 192.0.2.1",
        "192.0.2.1 ",
        "192.0.2.01",
        "192.0.2",
        "",
        "localhost",
    ] {
        assert_eq!(
            AddrKey::parse(bad, PrefixPolicy::EXACT),
            Err(IdentityError::InvalidAddress),
            "{bad:?}"
        );
    }
    assert_eq!(
        "192.0.2.1".parse::<AddrKey>(),
        Ok(AddrKey::from(ip("192.0.2.1")))
    );
}

#[test]
fn trusted_networks_parse_with_typed_errors() {
    for bad in [
        "10.0.0.0/33",
        "::/129",
        "10.0.0.0/",
        "proxy",
        "10.0.0.0/8 ",
        "",
    ] {
        assert_eq!(
            TrustedProxies::parse([bad]),
            Err(IdentityError::InvalidNetwork),
            "{bad:?}"
        );
    }
    let proxies = TrustedProxies::parse(["10.1.2.3/8", "192.0.2.10", "2001:db8::/32"]).unwrap();
    assert!(proxies.contains(ip("10.255.0.1")));
    assert!(proxies.contains(ip("::ffff:10.255.0.1"))); // canonicalised
    assert!(proxies.contains(ip("192.0.2.10")));
    assert!(!proxies.contains(ip("192.0.2.11")));
    assert!(proxies.contains(ip("2001:db8:ffff::1")));
    assert!(!proxies.contains(ip("2001:db9::1")));
}

// ---------------------------------------------------------------------------
// The trust walk.

#[test]
fn trusted_peer_without_a_header_is_the_client() {
    for source in BOTH_SOURCES {
        for chain in BOTH_CHAINS {
            let r = resolver(source, &["10.0.0.0/8"]).with_chain_policy(chain);
            assert_eq!(found(&r, "10.0.0.1", &[]), (ip("10.0.0.1"), Origin::Peer));
            assert_eq!(found(&r, "10.0.0.1", &[""]), (ip("10.0.0.1"), Origin::Peer));
            assert_eq!(
                found(&r, "10.0.0.1", &[" , \t", ""]),
                (ip("10.0.0.1"), Origin::Peer)
            );
        }
    }
}

#[test]
fn the_leftmost_spoof_is_not_believed() {
    // The client sends `X-Forwarded-For: 1.2.3.4`; the proxy appends the
    // address it really saw.
    let r = xff(&["10.0.0.0/8"]);
    assert_eq!(
        found(&r, "10.0.0.1", &["1.2.3.4, 198.51.100.8"]),
        (ip("198.51.100.8"), hops(0))
    );
    // Through two proxies, and with the client's claim on its own line.
    assert_eq!(
        found(&r, "10.0.0.1", &["1.2.3.4", "198.51.100.8, 10.0.0.2"]),
        (ip("198.51.100.8"), hops(1))
    );
    let r = fwd(&["10.0.0.0/8"]);
    assert_eq!(
        found(
            &r,
            "10.0.0.1",
            &["for=1.2.3.4, for=198.51.100.8", "for=10.0.0.2"]
        ),
        (ip("198.51.100.8"), hops(1))
    );
}

#[test]
fn a_trusted_client_address_is_skipped_like_any_proxy() {
    // nginx `real_ip_recursive on`: a trusted address is never the client
    // while an untrusted one lies further left.
    let r = xff(&["10.0.0.0/8"]);
    assert_eq!(
        found(&r, "10.0.0.1", &["203.0.113.5, 10.9.9.9, 10.0.0.2"]),
        (ip("203.0.113.5"), hops(2))
    );
}

#[test]
fn an_all_trusted_chain_resolves_to_its_leftmost_entry() {
    let r = xff(&["10.0.0.0/8"]);
    assert_eq!(
        found(&r, "10.0.0.1", &["10.0.0.4, 10.0.0.3 ,10.0.0.2"]),
        (ip("10.0.0.4"), hops(2))
    );
    assert_eq!(
        found(&r, "10.0.0.1", &["10.0.0.4,", "", "10.0.0.2"]),
        (ip("10.0.0.4"), hops(1))
    );
    let r = fwd(&["10.0.0.0/8"]);
    assert_eq!(
        found(&r, "10.0.0.1", &["for=10.0.0.3, for=10.0.0.2"]),
        (ip("10.0.0.3"), hops(1))
    );
}

#[test]
fn garbage_left_of_the_client_is_never_read() {
    let r = xff(&["10.0.0.0/8"]);
    assert_eq!(
        found(
            &r,
            "10.0.0.1",
            &["\"[_unknown, \u{0}:::, 198.51.100.8, 10.0.0.2"]
        ),
        (ip("198.51.100.8"), hops(1))
    );
    let r = fwd(&["10.0.0.0/8"]);
    // An unbalanced quote on the client's own line cannot reach the proxy's
    // line, nor, on one line, the element the proxy appended.
    assert_eq!(
        found(&r, "10.0.0.1", &["for=\"[oops", "for=198.51.100.8"]),
        (ip("198.51.100.8"), hops(0))
    );
    assert_eq!(
        found(
            &r,
            "10.0.0.1",
            &["for=\"[oops\\\", host=x, for=198.51.100.8"]
        ),
        (ip("198.51.100.8"), hops(0))
    );
    // Non-UTF-8 on the left, too.
    let lines: [&[u8]; 2] = [b"\xff\xfe,\x80for=", b"for=198.51.100.8"];
    assert_eq!(
        r.resolve(ip("10.0.0.1"), lines).unwrap().addr(),
        ip("198.51.100.8")
    );
}

#[test]
fn a_bad_entry_stops_the_walk_at_the_nearest_trusted_address() {
    let r = xff(&["10.0.0.0/8"]);
    let cases = [
        ("not-an-address", "Malformed"),
        ("unknown", "Unknown"),
        ("fe80::1%eth0", "Malformed"),
        ("_hidden", "Malformed"), // no obfuscated identifiers in XFF
    ];
    for (bad, want) in cases {
        // Right next to the peer: the fallback is the peer.
        let err = resolve(&r, "10.0.0.1", &[&format!("198.51.100.8, {bad}")]).unwrap_err();
        assert_eq!(kind(&err), want, "{bad}");
        assert_eq!(err.position(), Some(1));
        assert_eq!(
            (err.fallback().addr(), err.fallback().origin()),
            (ip("10.0.0.1"), Origin::Peer)
        );
        // Behind a trusted hop: the fallback is that hop, never the client's
        // 198.51.100.8 to the left of the bad entry.
        let err =
            resolve(&r, "10.0.0.1", &[&format!("198.51.100.8, {bad}, 10.0.0.2")]).unwrap_err();
        assert_eq!(kind(&err), want, "{bad}");
        assert_eq!(err.position(), Some(2));
        assert_eq!(
            (err.fallback().addr(), err.fallback().origin()),
            (ip("10.0.0.2"), hops(0))
        );
    }
}

#[test]
fn forwarded_obfuscated_and_unknown_nodes_stop_the_walk() {
    let r = fwd(&["10.0.0.0/8"]);
    let err = resolve(
        &r,
        "10.0.0.1",
        &[r#"for=198.51.100.8, for="_gazonk:_port", for=10.0.0.2"#],
    )
    .unwrap_err();
    assert!(
        matches!(err, ForwardedError::Obfuscated { position: 2, .. }),
        "{err:?}"
    );
    assert_eq!(err.fallback().addr(), ip("10.0.0.2"));
    let err = resolve(&r, "10.0.0.1", &["for=198.51.100.8, for=UNKNOWN"]).unwrap_err();
    assert!(
        matches!(err, ForwardedError::Unknown { position: 1, .. }),
        "{err:?}"
    );
    assert_eq!(err.fallback().addr(), ip("10.0.0.1"));
}

#[test]
fn single_address_failures_fall_back_to_the_peer() {
    let cases = [
        (HeaderSource::XForwardedFor, "garbage", "Malformed"),
        (HeaderSource::XForwardedFor, "unknown", "Unknown"),
        (HeaderSource::XForwardedFor, "_hidden", "Malformed"),
        (HeaderSource::Forwarded, "for=garbage", "Malformed"),
        (HeaderSource::Forwarded, "for=unknown", "Unknown"),
        (HeaderSource::Forwarded, "for=_hidden", "Obfuscated"),
    ];
    for (source, line, want) in cases {
        let r = resolver(source, &["10.0.0.0/8"]).with_chain_policy(ChainPolicy::SingleAddress);
        let err = resolve(&r, "10.0.0.1", &[line]).unwrap_err();
        assert_eq!(kind(&err), want, "{source:?} {line}");
        assert_eq!(err.position(), Some(1));
        assert_eq!(err.fallback().addr(), ip("10.0.0.1"));
    }
    for source in BOTH_SOURCES {
        // A trusted address is believed too: the proxy vouches for it.
        let r = resolver(source, &["10.0.0.0/8"]).with_chain_policy(ChainPolicy::SingleAddress);
        let line = entry(source, "10.0.0.7");
        assert_eq!(found(&r, "10.0.0.1", &[&line]), (ip("10.0.0.7"), hops(0)));
    }
    let r = xff(&["10.0.0.0/8"]).with_chain_policy(ChainPolicy::SingleAddress);
    // Empty elements around the one address are not a chain.
    assert_eq!(
        found(&r, "10.0.0.1", &[" , 198.51.100.8 ,"]),
        (ip("198.51.100.8"), hops(0))
    );
}

// ---------------------------------------------------------------------------
// Syntax.

#[test]
fn rfc7239_examples() {
    let r = fwd(&["203.0.113.0/24"]);
    let peer = "203.0.113.43";
    assert_eq!(
        found(&r, peer, &[r#"For="[2001:db8:cafe::17]:4711""#]),
        (ip("2001:db8:cafe::17"), hops(0))
    );
    assert_eq!(
        found(&r, peer, &["for=192.0.2.60;proto=http;by=203.0.113.43"]),
        (ip("192.0.2.60"), hops(0))
    );
    assert_eq!(
        found(&r, peer, &["for=192.0.2.43, for=198.51.100.17"]),
        (ip("198.51.100.17"), hops(0))
    );
    assert_eq!(
        found(&r, peer, &[r#"for="192.0.2.43:47011""#]),
        (ip("192.0.2.43"), hops(0))
    );
    assert!(matches!(
        resolve(&r, peer, &[r#"for="_gazonk""#]),
        Err(ForwardedError::Obfuscated { position: 1, .. })
    ));
    // Section 7.4: the same list as one line or split over two.
    let r = fwd(&["203.0.113.0/24", "198.51.100.17"]);
    let split = [
        "for=192.0.2.43",
        r#"FOR="[2001:db8:cafe::17]", for=198.51.100.17;by=203.0.113.60;proto=http;host=example.com"#,
    ];
    let joined = split.join(", ");
    assert_eq!(found(&r, peer, &split), (ip("2001:db8:cafe::17"), hops(1)));
    assert_eq!(
        found(&r, peer, &[&joined]),
        (ip("2001:db8:cafe::17"), hops(1))
    );
}

#[test]
fn forwarded_quoting_and_strictness() {
    let r = fwd(&["10.0.0.0/8"]);
    let peer = "10.0.0.1";
    // Commas, semicolons and escaped quotes inside quoted values.
    assert_eq!(
        found(
            &r,
            peer,
            &[r#"for=198.51.100.8;host="a,b;c\"d, for=1.1.1.1" ; proto=https"#]
        ),
        (ip("198.51.100.8"), hops(0))
    );
    assert_eq!(
        found(&r, peer, &[r#"for="\[2001:db8::5\]""#]),
        (ip("2001:db8::5"), hops(0))
    );
    for bad in [
        "for=192.0.2.1:80",            // ports must be quoted
        "for=2001:db8::1",             // IPv6 must be quoted and bracketed
        r#"for="2001:db8::1""#,        // bracketed
        r#"for="[fe80::1%eth0]""#,     // no zone ids
        "proto=https",                 // no for=
        "for=192.0.2.1;for=192.0.2.2", // two for=
        "for = 192.0.2.1",
        r#"for="192.0.2.1"#,
    ] {
        let err = resolve(&r, peer, &[bad]).unwrap_err();
        assert!(
            matches!(err, ForwardedError::Malformed { position: 1, .. }),
            "{bad}: {err:?}"
        );
        assert_eq!(err.fallback().addr(), ip(peer));
    }
}

#[test]
fn x_forwarded_for_ports_whitespace_and_lines() {
    let r = xff(&["10.0.0.0/8"]);
    let peer = "10.0.0.1";
    assert_eq!(
        found(&r, peer, &["198.51.100.8:51234"]),
        (ip("198.51.100.8"), hops(0))
    );
    assert_eq!(
        found(&r, peer, &["[2001:db8::8]:443"]),
        (ip("2001:db8::8"), hops(0))
    );
    assert_eq!(
        found(&r, peer, &["[2001:db8::8]"]),
        (ip("2001:db8::8"), hops(0))
    );
    assert_eq!(
        found(&r, peer, &["2001:db8::8 \t"]),
        (ip("2001:db8::8"), hops(0))
    );
    assert_eq!(
        found(&r, peer, &["  198.51.100.8\t,\t10.0.0.9:80  "]),
        (ip("198.51.100.8"), hops(1))
    );
    // A bare IPv6 address is taken whole: a port needs brackets.
    assert_eq!(
        found(&r, peer, &["2001:db8::1:80"]),
        (ip("2001:db8::1:80"), hops(0))
    );
    // Lines concatenate in order received: the last line is nearest.
    assert_eq!(
        found(&r, peer, &["198.51.100.8", "203.0.113.1"]),
        (ip("203.0.113.1"), hops(0))
    );
    assert_eq!(
        found(&r, peer, &["203.0.113.1", "198.51.100.8, 10.0.0.5"]),
        (ip("198.51.100.8"), hops(1))
    );
    // Whitespace inside an entry, or a quoted entry, is malformed.
    for bad in [
        "198.51.100.8 203.0.113.1",
        "\"198.51.100.8\"",
        "198.51.100.8:",
        "[2001:db8::8]:99999",
    ] {
        assert!(
            matches!(
                resolve(&r, peer, &[bad]),
                Err(ForwardedError::Malformed { .. })
            ),
            "{bad}"
        );
    }
}

// ---------------------------------------------------------------------------
// Bounded work.

#[test]
fn long_trusted_chains_hit_the_entry_limit() {
    let r = xff(&["10.0.0.0/8"]);
    // 10 000 trusted hops, 10.0.x.y numbered from the right.
    let hop = |i: usize| format!("10.0.{}.{}", i / 256, i % 256);
    let chain: Vec<String> = (1..=10_000).rev().map(hop).collect();
    let err = resolve(&r, "10.0.0.1", &[&chain.join(", ")]).unwrap_err();
    assert!(
        matches!(err, ForwardedError::TooManyEntries { limit: 32, .. }),
        "{err:?}"
    );
    assert_eq!(
        (err.fallback().addr(), err.fallback().origin()),
        (ip(&hop(32)), hops(31))
    );

    // Exactly at the limit: the walk completes.
    let r = r.with_max_entries(NonZeroUsize::new(3).unwrap());
    assert_eq!(
        found(&r, "10.0.0.1", &["10.0.0.4, 10.0.0.3, 10.0.0.2"]),
        (ip("10.0.0.4"), hops(2))
    );
    let err = resolve(
        &r,
        "10.0.0.1",
        &["198.51.100.8, 10.0.0.4, 10.0.0.3, 10.0.0.2"],
    )
    .unwrap_err();
    assert!(matches!(
        err,
        ForwardedError::TooManyEntries { limit: 3, .. }
    ));
    assert_eq!(err.fallback().addr(), ip("10.0.0.4"));
    // Empty elements count: they cost work too.
    assert!(matches!(
        resolve(&r, "10.0.0.1", &[",,,,,,,,,"]),
        Err(ForwardedError::TooManyEntries { .. })
    ));
    // So do many lines.
    let empty_lines = vec![""; 10_000];
    assert!(matches!(
        resolve(&r, "10.0.0.1", &empty_lines),
        Err(ForwardedError::TooManyEntries { .. })
    ));
}

#[test]
fn a_huge_client_prefix_does_not_matter() {
    // A megabyte of commas and quotes written by the client, then the
    // proxies' entries: the walk stops at the client and never reads it.
    let junk = "\",;=[".repeat(200_000);
    for source in BOTH_SOURCES {
        let r = resolver(source, &["10.0.0.0/8"]);
        let line = format!(
            "{junk}, {}, {}",
            entry(source, "198.51.100.8"),
            entry(source, "10.0.0.2")
        );
        assert_eq!(
            found(&r, "10.0.0.1", &[&line]),
            (ip("198.51.100.8"), hops(1))
        );
    }
}

// ---------------------------------------------------------------------------
// Properties.

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn any_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|bits| IpAddr::V4(bits.into())),
        any::<u128>().prop_map(|bits| IpAddr::V6(bits.into())),
        // Mapped addresses, which canonicalise to IPv4.
        any::<u32>().prop_map(|bits| IpAddr::V6(std::net::Ipv4Addr::from(bits).to_ipv6_mapped())),
        // 6to4, NAT64 and Teredo addresses, which stand for IPv4 hosts.
        any::<u128>().prop_map(|bits| IpAddr::V6(((0x2002 << 112) | (bits >> 16)).into())),
        any::<u32>().prop_map(|bits| IpAddr::V6(((0x64_ff9b << 96) | u128::from(bits)).into())),
        any::<u128>().prop_map(|bits| IpAddr::V6(((0x2001_0000 << 96) | (bits >> 32)).into())),
    ]
}

/// The proxies of the property tests.
fn test_proxies() -> TrustedProxies {
    TrustedProxies::parse(["10.0.0.0/8", "2001:db8:ffff::/48"]).unwrap()
}

/// An address inside `test_proxies()`.
fn proxy_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|bits| IpAddr::V4(((10 << 24) | (bits >> 8)).into())),
        any::<u128>().prop_map(|bits| {
            let net = 0x2001_0db8_ffff_u128 << 80;
            IpAddr::V6((net | (bits >> 48)).into())
        }),
    ]
}

/// An address outside `test_proxies()`.
fn client_ip() -> impl Strategy<Value = IpAddr> {
    any_ip().prop_filter("outside the trusted networks", |ip| {
        !test_proxies().contains(*ip)
    })
}

/// How an entry for `ip` is written in `source`, in one of the accepted
/// forms picked by `form`.
fn write_entry(source: HeaderSource, ip: IpAddr, form: u8) -> String {
    let port = 1 + u16::from(form) * 255; // 1 to 65026
    match (source, ip) {
        (HeaderSource::XForwardedFor, IpAddr::V4(v4)) if form.is_multiple_of(2) => format!("{v4}"),
        (HeaderSource::XForwardedFor, IpAddr::V4(v4)) => format!("{v4}:{port}"),
        (HeaderSource::XForwardedFor, IpAddr::V6(v6)) => match form % 3 {
            0 => format!("{v6}"),
            1 => format!("[{v6}]"),
            _ => format!("[{v6}]:{port}"),
        },
        (HeaderSource::Forwarded, ip) => {
            let node = match (ip, form % 2) {
                (IpAddr::V4(v4), 0) => format!("{v4}"),
                (IpAddr::V4(v4), _) => format!("\"{v4}:{port}\""),
                (IpAddr::V6(v6), 0) => format!("\"[{v6}]\""),
                (IpAddr::V6(v6), _) => format!("\"[{v6}]:_p{form}\""),
            };
            match form % 4 {
                0 => format!("for={node}"),
                1 => format!("proto=https;For={node}"),
                2 => format!("for={node}; host=\"a,b;\\\"c\\\\\""),
                _ => format!("by=\"[2001:db8::1]:80\";FOR={node};x=y"),
            }
        }
    }
}

fn any_source() -> impl Strategy<Value = HeaderSource> {
    prop::sample::select(BOTH_SOURCES.to_vec())
}

fn any_chain() -> impl Strategy<Value = ChainPolicy> {
    prop::sample::select(BOTH_CHAINS.to_vec())
}

/// Header lines of arbitrary bytes, half the time drawn from the characters
/// the parsers care about so that near-valid syntax is common.
fn header_lines() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let syntax = prop::sample::select(b"0123456789abcdef.:[]%\",; \t=\\_forFORunknwUNKN".to_vec());
    let line = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..80),
        prop::collection::vec(syntax, 0..80),
    ];
    prop::collection::vec(line, 0..5)
}

/// A separator between list elements, with optional whitespace.
fn separator() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![", ", ",", " ,\t", "\t, "])
}

proptest! {
    #![proptest_config(config(1024))]

    /// (a) A peer that is not a trusted proxy is the client, whatever the
    /// header holds.
    #[test]
    fn untrusted_peers_are_the_client(
        peer in client_ip(),
        lines in header_lines(),
        source in any_source(),
        chain in any_chain(),
    ) {
        let r = ForwardedResolver::new(source, test_proxies()).with_chain_policy(chain);
        let resolved = r.resolve(peer, lines.iter().map(Vec::as_slice)).unwrap();
        prop_assert_eq!(resolved.addr(), peer.to_canonical());
        prop_assert_eq!(resolved.key(), AddrKey::from(peer));
        prop_assert_eq!(resolved.origin(), Origin::Peer);
    }

    /// (b) Whatever the client writes before the entries the trusted proxies
    /// append, the recursive walk finds the address the first proxy saw.
    #[test]
    fn the_client_prefix_cannot_change_the_result(
        prefix in prop::collection::vec(any::<u8>().prop_filter("no CR/LF", |b| *b != b'\r' && *b != b'\n'), 0..60),
        real in client_ip(),
        proxies in prop::collection::vec(proxy_ip(), 0..4),
        peer in proxy_ip(),
        forms in prop::collection::vec(any::<u8>(), 5),
        own_line in any::<bool>(),
        sep in separator(),
        source in any_source(),
    ) {
        let r = ForwardedResolver::new(source, test_proxies());
        // The proxies' suffix: the real client, then each proxy but the last.
        let mut suffix = write_entry(source, real, forms[0]);
        for (proxy, form) in proxies.iter().zip(&forms[1..]) {
            suffix.push_str(sep);
            suffix.push_str(&write_entry(source, *proxy, *form));
        }
        let peer_lines = |prefix: &[u8]| -> Vec<Vec<u8>> {
            if own_line {
                vec![prefix.to_vec(), suffix.as_bytes().to_vec()]
            } else {
                let mut line = prefix.to_vec();
                line.extend_from_slice(sep.as_bytes());
                line.extend_from_slice(suffix.as_bytes());
                vec![line]
            }
        };
        let with_prefix = peer_lines(&prefix);
        let got = r.resolve(peer, with_prefix.iter().map(Vec::as_slice));
        let want = r.resolve(peer, peer_lines(b"").iter().map(Vec::as_slice)).unwrap();
        prop_assert_eq!(got, Ok(want));
        prop_assert_eq!(want.addr(), real.to_canonical());
        prop_assert_eq!(want.origin(), Origin::Forwarded { trusted_hops: proxies.len() });
    }

    /// (c) No bytes make the resolver panic, and a refusal's fallback is
    /// always a trusted address when the peer is trusted.
    #[test]
    fn arbitrary_headers_never_panic(
        lines in header_lines(),
        source in any_source(),
        chain in any_chain(),
        trust_everything in any::<bool>(),
        peer in proxy_ip(),
    ) {
        let proxies = if trust_everything {
            TrustedProxies::parse(["0.0.0.0/0", "::/0"]).unwrap()
        } else {
            test_proxies()
        };
        let r = ForwardedResolver::new(source, proxies.clone()).with_chain_policy(chain);
        match r.resolve(peer, lines.iter().map(Vec::as_slice)) {
            Ok(resolved) if resolved.origin() == Origin::Peer => prop_assert_eq!(resolved.addr(), peer),
            Ok(_) => {}
            Err(err) => prop_assert!(proxies.contains(err.fallback().addr()), "{err:?}"),
        }
    }

    /// (c) Address and network parsing never panic either, and a parsed key
    /// prints as text that parses back to it.
    #[test]
    fn address_parsing_never_panics(text in ".{0,50}", v4_len in 0..=32u8, v6_len in 0..=128u8) {
        let policy = PrefixPolicy::new(v4_len, v6_len).unwrap();
        if let Ok(key) = AddrKey::parse(&text, policy) {
            prop_assert_eq!(AddrKey::parse(&key.to_string(), policy), Ok(key));
        }
        let _ = TrustedProxies::parse([&text]);
    }

    /// Valid lists, written every accepted way, walk to the boundary of the
    /// trusted suffix: the parser reads them as they were written.
    #[test]
    fn written_lists_walk_to_the_trust_boundary(
        addrs in prop::collection::vec(any_ip(), 1..8),
        trusted_count in 0..8usize,
        forms in prop::collection::vec(any::<u8>(), 8),
        breaks in prop::collection::vec(any::<bool>(), 8),
        sep in separator(),
        source in any_source(),
    ) {
        // Distinct canonical addresses, so trust is decided per element.
        let mut seen = std::collections::HashSet::new();
        let addrs: Vec<IpAddr> = addrs.into_iter().filter(|ip| seen.insert(ip.to_canonical())).collect();
        let trusted_count = trusted_count.min(addrs.len());
        let first_trusted = addrs.len() - trusted_count;
        let peer = ip("192.0.2.1");
        let proxies = TrustedProxies::new(
            addrs[first_trusted..].iter().chain([&peer]).map(|ip| ipnet::IpNet::from(ip.to_canonical())),
        );
        // Elements joined by separators, some turned into line breaks.
        let mut lines = vec![String::new()];
        for (i, addr) in addrs.iter().enumerate() {
            if i > 0 {
                if breaks[i] { lines.push(String::new()) } else { lines.last_mut().unwrap().push_str(sep) }
            }
            lines.last_mut().unwrap().push_str(&write_entry(source, *addr, forms[i]));
        }
        let r = ForwardedResolver::new(source, proxies);
        let got = r.resolve(peer, lines.iter().map(String::as_bytes)).unwrap();
        // The element just left of the trusted suffix, or the leftmost if
        // everything is trusted.
        let client = first_trusted.saturating_sub(1);
        prop_assert_eq!(got.addr(), addrs[client].to_canonical());
        prop_assert_eq!(got.origin(), Origin::Forwarded { trusted_hops: addrs.len() - 1 - client });
    }

    /// A key is its host's network: hosts agreeing on the prefix share it,
    /// any difference inside the prefix separates them.
    #[test]
    fn keys_are_networks(addr in any_ip(), v4_len in 0..=32u8, v6_len in 0..=128u8, bit in 0..128u32) {
        let policy = PrefixPolicy::new(v4_len, v6_len).unwrap();
        let canonical = client_addr(addr);
        let key = AddrKey::new(addr, policy);
        let network = key.network(policy);
        prop_assert!(network.contains(&canonical));
        prop_assert_eq!(network.prefix_len(), policy.len_for(addr));
        prop_assert_eq!(key.is_ipv4(), canonical.is_ipv4());
        // Flip one bit of the canonical address.
        let flipped = match canonical {
            IpAddr::V4(v4) => IpAddr::V4((v4.to_bits() ^ (1 << (bit % 32))).into()),
            IpAddr::V6(v6) => IpAddr::V6((v6.to_bits() ^ (1 << bit)).into()),
        };
        let width = if canonical.is_ipv4() { 32 } else { 128 };
        let inside_prefix = width - 1 - (if canonical.is_ipv4() { bit % 32 } else { bit }) < u32::from(policy.len_for(addr));
        // Flipping an IPv6 bit can land in a range that stands for an IPv4
        // host (mapped, 6to4, ...).
        if client_addr(flipped).is_ipv4() == canonical.is_ipv4() {
            prop_assert_eq!(AddrKey::new(flipped, policy) == key, !inside_prefix);
        } else {
            prop_assert_ne!(AddrKey::new(flipped, policy), key);
        }
    }
}
