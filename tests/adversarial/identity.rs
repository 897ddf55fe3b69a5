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
