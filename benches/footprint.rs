//! Heap bytes per key of a keyed limiter, beside governor's keyed limiter.
//!
//! For each key type and count, builds the limiter, creates that many keys
//! (one decision each), and reports the heap bytes the limiter holds per key,
//! counted by an instrumented global allocator. Hostile keys (4 KiB strings,
//! as a client sending long request paths makes them) are built one at a
//! time in one reused buffer, so the only bytes they leave are the
//! limiter's; the run fails if a million of them take more than the bound
//! the default configuration promises for keys kept as fingerprints.
//!
//! ```text
//! cargo run --release -p tollgate-benches --example footprint
//! ```

use std::alloc::System;
use std::fmt::Write as _;
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
fn compare<K: Hash + Eq + Clone + Send, G: Hash + Eq + Clone>(
    label: &str,
    ours: &[K],
    theirs: &[G],
) {
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

/// What the default configuration promises a key kept as a fingerprint
/// costs at most: a 32-byte entry (the 16-byte fingerprint, the state and
/// its quota generation) and its control byte, over the lowest load a table
/// has just after it grows (7/16: 75 bytes), with room to spare for the
/// shards' own allocations.
const FINGERPRINT_BYTES_PER_KEY: f64 = 80.0;

/// Rewrites `key` in place as the `i`-th hostile key: distinct in its first
/// 16 bytes, then `padding`.
fn hostile_key(key: &mut String, i: u64, padding: &str) {
    key.clear();
    write!(key, "{i:016x}").expect("a String takes any write");
    key.push_str(padding);
}

/// Bytes per key of `count` hostile keys of `len` bytes each, in tollgate's
/// limiter and, when that stays under a GiB, governor's, which copies every
/// key. Returns tollgate's bytes per key.
fn hostile(count: u64, len: usize) -> f64 {
    let padding = "p".repeat(len - 16);
    let mut key = String::with_capacity(len);
    let (tollgate, tollgate_bytes) = heap_bytes(|| {
        let limiter = KeyedLimiter::<String>::new(Quota::per_second(10).expect("valid"));
        for i in 0..count {
            hostile_key(&mut key, i, &padding);
            limiter
                .try_acquire(key.as_str(), 1)
                .expect("a new key has credit");
        }
        limiter
    });
    let per_key = tollgate_bytes as f64 / count as f64;
    assert_eq!(tollgate.len() as u64, count);
    drop(tollgate);
    let governor = (count * len as u64 <= 1 << 30).then(|| {
        let (governor, bytes) = heap_bytes(|| {
            let limiter =
                RateLimiter::keyed(GovernorQuota::per_second(NonZeroU32::new(10).unwrap()));
            for i in 0..count {
                hostile_key(&mut key, i, &padding);
                limiter.check_key(&key).expect("a new key has credit");
            }
            limiter
        });
        assert_eq!(governor.len() as u64, count);
        bytes as f64 / count as f64
    });
    let (theirs, ratio) = governor.map_or(("(not run)".to_owned(), "—".to_owned()), |g| {
        (format!("{g:.1}"), format!("{:.2}", g / per_key))
    });
    println!("| String, {len} B, hostile / String | {count} | {per_key:.1} | {theirs} | {ratio} |");
    per_key
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
        drop((addrs, keys));
        // Account-like names, and the longest string kept as a copy by
        // default (63 bytes and a terminator: 64 hashed bytes).
        for len in [21, 63] {
            let names: Vec<String> = ids
                .iter()
                .map(|id| format!("{id:016x}{}", "n".repeat(len - 16)))
                .collect();
            compare(&format!("String, {len} B / String"), &names, &names);
        }
        let per_key = hostile(count, 4096);
        assert!(
            per_key <= FINGERPRINT_BYTES_PER_KEY,
            "{count} hostile keys take {per_key:.1} bytes each, over the bound of {FINGERPRINT_BYTES_PER_KEY}"
        );
    }
}
