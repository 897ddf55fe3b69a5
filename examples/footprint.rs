//! Heap bytes per key of a keyed limiter, beside governor's keyed limiter.
//!
//! For each key type and count, builds the limiter, creates that many keys
//! (one decision each), and reports the heap bytes the limiter holds per key,
//! counted by an instrumented global allocator.
//!
//! ```text
//! cargo run --release --example footprint
//! ```

use std::alloc::System;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;

use governor::{Quota as GovernorQuota, RateLimiter};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tollgate::identity::AddrKey;
use tollgate::{KeyedLimiter, Quota};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Net heap bytes allocated while `work` runs, and what it returned.
fn heap_bytes<T>(work: impl FnOnce() -> T) -> (T, usize) {
    let region = Region::new(GLOBAL);
    let value = work();
    let change = region.change();
    let net = change.bytes_allocated as isize - change.bytes_deallocated as isize
        + change.bytes_reallocated;
    (value, net.max(0) as usize)
}

/// Bytes per key of tollgate's keyed limiter over `ours` and governor's over
/// `theirs` (the same identities, perhaps in another key type).
fn compare<K: Hash + Eq + Clone, G: Hash + Eq + Clone>(label: &str, ours: &[K], theirs: &[G]) {
    assert_eq!(ours.len(), theirs.len());
    let per_key = |bytes: usize| bytes as f64 / ours.len() as f64;
    let (tollgate, tollgate_bytes) = heap_bytes(|| {
        let limiter = KeyedLimiter::<K>::new(Quota::per_second(10).expect("valid"));
        for key in ours {
            limiter.try_acquire(key, 1).expect("a new key has credit");
        }
        limiter
    });
    let (governor, governor_bytes) = heap_bytes(|| {
        let limiter = RateLimiter::keyed(GovernorQuota::per_second(NonZeroU32::new(10).unwrap()));
        for key in theirs {
            limiter.check_key(key).expect("a new key has credit");
        }
        limiter
    });
    assert_eq!(tollgate.len(), ours.len());
    assert_eq!(governor.len(), theirs.len());
    println!(
        "| {label} | {} | {:.1} | {:.1} | {:.2} |",
        ours.len(),
        per_key(tollgate_bytes),
        per_key(governor_bytes),
        governor_bytes as f64 / tollgate_bytes as f64,
    );
}

fn main() {
    println!(
        "| key type (tollgate / governor) | keys | tollgate B/key | governor B/key | governor / tollgate |"
    );
    println!("|---|---|---|---|---|");
    for count in [100_000u64, 1_000_000] {
        let ids: Vec<u64> = (0..count)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        compare("u64 / u64", &ids, &ids);
        // Distinct IPv6 clients in 2001:db8::/32, one per /64 so that the
        // default key policy keeps them apart too.
        let v6 = |i: u64| Ipv6Addr::from((0x2001_0db8u128 << 96) | u128::from(i) << 64 | 1);
        let addrs: Vec<IpAddr> = (0..count).map(|i| IpAddr::V6(v6(i))).collect();
        compare("IpAddr / IpAddr", &addrs, &addrs);
        let keys: Vec<AddrKey> = addrs.iter().map(|&a| AddrKey::from(a)).collect();
        compare("AddrKey / IpAddr", &keys, &addrs);
    }
}
