//! The keyed limiter's memory is bounded in bytes, not only in keys.

use std::fmt::Write as _;

use stats_alloc::Region;
use tollgate::{KeyedLimiter, ManualClock, Quota};

/// Keys as long as a client can make them (request paths of up to 64 KiB;
/// 4 KiB here) cost the table a bounded number of bytes each, whatever
/// their length: with the default configuration, tens of thousands of
/// hostile 4 KiB keys take well under 128 bytes each, not 4 KiB.
#[test]
fn hostile_long_keys_cost_a_bounded_number_of_bytes_each() {
    const KEYS: usize = 20_000;
    const LEN: usize = 4_096;
    const BYTES_PER_KEY: usize = 128;
    let limiter = KeyedLimiter::builder(Quota::per_second(1).unwrap())
        .clock(ManualClock::new())
        .build::<String>();
    let padding = "p".repeat(LEN - 16);
    // One buffer rewritten in place: the only bytes that stay allocated are
    // the limiter's.
    let mut key = String::with_capacity(LEN);
    let _alone = crate::alone();
    let region = Region::new(crate::GLOBAL);
    for i in 0..KEYS {
        key.clear();
        write!(key, "{i:016x}").unwrap();
        key.push_str(&padding);
        assert_eq!(limiter.try_acquire(key.as_str(), 1), Ok(()));
    }
    let change = region.change();
    let held = (change.bytes_allocated as isize - change.bytes_deallocated as isize
        + change.bytes_reallocated)
        .max(0) as usize;
    assert_eq!(limiter.len(), KEYS);
    assert!(
        held < KEYS * BYTES_PER_KEY,
        "{KEYS} keys of {LEN} bytes hold {held} bytes, {} per key",
        held / KEYS
    );
}
