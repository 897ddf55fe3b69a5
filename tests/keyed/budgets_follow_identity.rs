//! The identity cases of the seed articles, run against real limiters: which
//! requests share a budget depends on which identity the key stands for.

use std::net::IpAddr;

use tollgate::identity::{AddrKey, ForwardedResolver, HeaderSource, PrefixPolicy, TrustedProxies};
use tollgate::{KeyedLimiter, ManualClock, Quota};

/// A request as the limiter sees it after authentication and routing:
/// `verified` comes from authentication; `claimed_account` is a header the
/// client sent, which no key may use.
#[derive(Clone)]
struct Request {
    verified: (&'static str, &'static str),
    operation: &'static str,
    peer: &'static str,
    credential: &'static str,
    claimed_account: &'static str,
}

type AccountKey = (&'static str, &'static str, &'static str);

fn account_key(request: &Request) -> AccountKey {
    let (tenant, account) = request.verified;
    (tenant, account, request.operation)
}

fn address_key(request: &Request) -> AddrKey {
    let peer: IpAddr = request.peer.parse().unwrap();
    AddrKey::from(peer)
}

/// Two requests per identity, with no refill during a test.
fn limiter<K: std::hash::Hash + Eq + Send>() -> KeyedLimiter<K, ManualClock> {
    KeyedLimiter::builder(Quota::per_second(2).unwrap())
        .clock(ManualClock::new())
        .build()
}

fn alice() -> Request {
    Request {
        verified: ("north", "alice"),
        operation: "export",
        peer: "198.51.100.8",
        credential: "key-a",
        claimed_account: "alice",
    }
}

fn bob() -> Request {
    Request {
        verified: ("north", "bob"),
        credential: "key-b",
        ..alice()
    }
}

#[test]
fn two_accounts_behind_one_address_share_the_address_budget_only() {
    let (by_address, by_account) = (limiter::<AddrKey>(), limiter::<AccountKey>());
    let admitted = |limiter: &dyn Fn(&Request) -> bool| {
        [alice(), alice(), bob()]
            .iter()
            .map(limiter)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        admitted(&|r| by_address.try_acquire(&address_key(r), 1).is_ok()),
        [true, true, false]
    );
    assert_eq!(
        admitted(&|r| by_account.try_acquire(&account_key(r), 1).is_ok()),
        [true, true, true]
    );
}

#[test]
fn a_roaming_client_gets_a_new_address_budget_but_not_a_new_account_budget() {
    let (by_address, by_account) = (limiter::<AddrKey>(), limiter::<AccountKey>());
    for request in [alice(), alice()] {
        by_address.try_acquire(&address_key(&request), 1).unwrap();
        by_account.try_acquire(&account_key(&request), 1).unwrap();
    }
    let roaming = Request {
        peer: "203.0.113.9",
        credential: "key-a-rotated",
        ..alice()
    };
    assert_ne!(roaming.credential, alice().credential);
    assert!(by_address.try_acquire(&address_key(&roaming), 1).is_ok());
    assert!(by_account.try_acquire(&account_key(&roaming), 1).is_err());
}

#[test]
fn forged_account_claims_change_nothing() {
    let by_account = limiter::<AccountKey>();
    by_account.try_acquire(&account_key(&alice()), 2).unwrap();
    for claim in ["bob", "new-account", "admin"] {
        let forged = Request {
            claimed_account: claim,
            ..alice()
        };
        assert_ne!(forged.claimed_account, alice().claimed_account);
        assert_eq!(account_key(&forged), account_key(&alice()));
        assert!(by_account.try_acquire(&account_key(&forged), 1).is_err());
    }
}

#[test]
fn tenant_and_operation_are_separate_dimensions() {
    let by_account = limiter::<AccountKey>();
    by_account.try_acquire(&account_key(&alice()), 2).unwrap();
    let other_tenant = Request {
        verified: ("south", "alice"),
        ..alice()
    };
    let other_operation = Request {
        operation: "thumbnail",
        ..alice()
    };
    assert!(
        by_account
            .try_acquire(&account_key(&other_tenant), 1)
            .is_ok()
    );
    assert!(
        by_account
            .try_acquire(&account_key(&other_operation), 1)
            .is_ok()
    );
}

#[test]
fn component_boundaries_cannot_collide() {
    let by_account = limiter::<AccountKey>();
    let glued = Request {
        verified: ("a:b", "c"),
        ..alice()
    };
    let split = Request {
        verified: ("a", "b:c"),
        ..alice()
    };
    by_account.try_acquire(&account_key(&glued), 2).unwrap();
    assert!(by_account.try_acquire(&account_key(&split), 1).is_ok());
}

#[test]
fn equivalent_address_spellings_share_one_budget() {
    let by_address = limiter::<AddrKey>();
    let spellings = ["2001:0db8:0:0::1", "2001:db8::1", "2001:DB8:0000::0001"];
    for text in &spellings[..2] {
        by_address
            .try_acquire(&AddrKey::parse(text, PrefixPolicy::EXACT).unwrap(), 1)
            .unwrap();
    }
    let third = AddrKey::parse(spellings[2], PrefixPolicy::EXACT).unwrap();
    assert!(by_address.try_acquire(&third, 1).is_err());
    // An IPv4-mapped address is its IPv4 address.
    let v4 = AddrKey::parse("192.0.2.1", PrefixPolicy::EXACT).unwrap();
    by_address.try_acquire(&v4, 2).unwrap();
    let mapped = AddrKey::parse("::ffff:192.0.2.1", PrefixPolicy::EXACT).unwrap();
    assert!(by_address.try_acquire(&mapped, 1).is_err());
}

#[test]
fn an_untrusted_peer_cannot_choose_its_address_budget() {
    let resolver = ForwardedResolver::new(
        HeaderSource::XForwardedFor,
        TrustedProxies::parse(["192.0.2.10"]).unwrap(),
    );
    let by_address = limiter::<AddrKey>();
    let direct: IpAddr = "198.51.100.8".parse().unwrap();
    // Each request names a fresh address; none of them is believed.
    for claimed in ["203.0.113.77", "203.0.113.78", "not-an-address"] {
        let client = resolver.resolve(direct, [claimed.as_bytes()]).unwrap();
        assert_eq!(client.addr(), direct);
        let _ = by_address.try_acquire(&client.key(), 1);
    }
    assert_eq!(by_address.len(), 1);
    assert_eq!(by_address.available(&AddrKey::from(direct)), 0);
    // Through the trusted proxy, the client it names gets its own budget.
    let proxy: IpAddr = "192.0.2.10".parse().unwrap();
    let via_proxy = resolver.resolve(proxy, [&b"198.51.100.9"[..]]).unwrap();
    assert!(by_address.try_acquire(&via_proxy.key(), 1).is_ok());
}
