//! User code that panics in the middle of a keyed limiter's walk, sweep,
//! change, insertion or hot-key cache: a `Clock`, a key's `Hash`, `Eq`,
//! `Clone` or `Drop`. After the
//! panic is caught the limiter is consistent (its counts are true, every
//! key is kept under one quota and decided under it) and every later
//! operation keeps every promise: nothing minted, no place under the key
//! cap leaked.
//!
//! The single buckets are held to the same: a `Clock` panicking in their
//! `set_quota` mints nothing.

use std::cell::Cell;
use std::hash::{Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::concurrency::{InFlightError, KeyedConcurrencyLimiter};
use tollgate::{
    AcquireError, Clock, KeyedFixedWindow, KeyedLimiter, Limit, ManualClock, Quota, Receipt,
    StripedBucket, TokenBucket, WindowQuota,
};

const SECOND: Duration = Duration::from_secs(1);

fn per_second(n: u64) -> Quota {
    Quota::per_second(n).unwrap()
}

fn cap(n: usize) -> tollgate::MaxKeys {
    tollgate::MaxKeys::new(n).unwrap()
}

/// A manual clock whose `n`-th reading from arming panics, as a clock with
/// a bug (or a failing time source) would.
#[derive(Clone, Debug, Default)]
struct FusedClock {
    clock: ManualClock,
    /// Readings left before one panics; 0 when disarmed.
    left: Arc<AtomicU64>,
}

impl FusedClock {
    fn arm(&self, readings: u64) {
        self.left.store(readings, Ordering::SeqCst);
    }

    /// Disarms the fuse; whether it blew.
    fn disarm(&self) -> bool {
        self.left.swap(0, Ordering::SeqCst) == u64::MAX
    }
}

impl Clock for FusedClock {
    fn now_nanos(&self) -> u64 {
        match self.left.load(Ordering::SeqCst) {
            0 | u64::MAX => {}
            1 => {
                self.left.store(u64::MAX, Ordering::SeqCst);
                panic!("the clock failed");
            }
            n => self.left.store(n - 1, Ordering::SeqCst),
        }
        self.clock.now_nanos()
    }
}

/// 64 keys spend all of 1000 (1000 per second) on a still clock; a change
/// panics on its `readings`-th clock reading, wherever that falls (before
/// the publication, at any key of the walk); then another change. No key
/// gets a token: the change that follows a cut-short walk first finishes
/// it, so no key is converted from (or decided under) a quota it was not
/// kept under. The quotas count time in ticks of 1, 3 and 7 per
/// nanosecond, so a state read under the wrong one is far off.
#[test]
fn a_clock_panicking_in_a_change_mints_nothing() {
    let cut_short = [
        per_second(3),
        Quota::new(1000, 7, SECOND).unwrap(),
        Quota::new(10, 1000, Duration::from_millis(1)).unwrap(),
    ];
    let mut blown = 0;
    for cut in cut_short {
        for then in [per_second(1000), per_second(10)] {
            for readings in 1..=70 {
                let clock = FusedClock::default();
                let limiter = KeyedLimiter::builder(per_second(1000))
                    .clock(clock.clone())
                    .build::<u32>();
                for key in 0..64 {
                    limiter.try_acquire(&key, 1000).unwrap();
                }
                clock.arm(readings);
                let changed = catch_unwind(AssertUnwindSafe(|| limiter.set_quota(cut)));
                blown += u32::from(clock.disarm());
                assert_eq!(changed.is_err(), readings <= 66, "reading {readings}");
                limiter.set_quota(then);
                for key in 0..64 {
                    assert_eq!(
                        limiter.available(&key),
                        0,
                        "{cut:?} at {readings}, key {key}"
                    );
                    assert!(limiter.try_acquire(&key, 1).is_err());
                }
                // A new key, with no drop ever made, is not restricted.
                assert_eq!(limiter.available(&100), then.capacity());
            }
        }
    }
    assert_eq!(blown, 6 * 66);
}

/// A change cut short by a panicking clock leaves some keys under the old
/// quota, each still decided under it; a sweep finishes the walk, so from
/// then on every key refills at the new rate, and the table's count is
/// true.
#[test]
fn a_sweep_after_a_change_cut_short_puts_every_key_under_the_new_quota() {
    for readings in 2..=18 {
        let clock = FusedClock::default();
        let limiter = KeyedLimiter::builder(per_second(1000))
            .clock(clock.clone())
            .build::<u32>();
        for key in 0..16 {
            limiter.try_acquire(&key, 1000).unwrap();
        }
        clock.arm(readings);
        let changed = catch_unwind(AssertUnwindSafe(|| limiter.set_quota(per_second(10))));
        assert!(changed.is_err() && clock.disarm(), "reading {readings}");
        // Spent keys are kept, whatever quota they are under.
        assert_eq!(limiter.sweep(), 0);
        clock.clock.advance(SECOND);
        for key in 0..16 {
            assert_eq!(limiter.available(&key), 10, "reading {readings}, key {key}");
        }
        assert_eq!(limiter.len(), 16);
        assert_eq!(limiter.sweep(), 16);
        assert!(limiter.is_empty());
    }
}

thread_local! {
    /// Drops of a [`Brittle`] key left on this thread before one panics;
    /// `None` when disarmed.
    static DROPS: Cell<Option<u32>> = const { Cell::new(None) };
}

fn arm_drops(drops: u32) {
    DROPS.with(|fuse| fuse.set(Some(drops)));
}

fn disarm_drops() -> bool {
    DROPS.with(|fuse| fuse.replace(None)) == Some(0)
}

/// A key whose `Drop` panics on the n-th drop once armed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Brittle(u32);

impl Drop for Brittle {
    fn drop(&mut self) {
        DROPS.with(|fuse| match fuse.get() {
            Some(1) => {
                fuse.set(Some(0));
                panic!("a key's drop failed");
            }
            Some(n) if n > 1 => fuse.set(Some(n - 1)),
            _ => {}
        });
    }
}

/// A table of 100 full keys swept three times, the 31st drop of each sweep
/// panicking: every key dropped is uncounted, so the count stays the
/// table's, and once every key is gone 100 new keys all find a place.
#[test]
fn a_key_panicking_as_a_sweep_drops_it_leaks_no_place() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(per_second(1))
        .clock(clock.clone())
        .max_keys(cap(100))
        .sweep_interval(None)
        .build::<Brittle>();
    let mut next = 0;
    for round in 0..3 {
        while limiter.len() < 100 {
            limiter.try_acquire(&Brittle(next), 1).unwrap();
            next += 1;
        }
        clock.advance(SECOND);
        arm_drops(31);
        let swept = catch_unwind(AssertUnwindSafe(|| limiter.sweep()));
        assert!(swept.is_err() && disarm_drops(), "round {round}");
        assert_eq!(limiter.len(), 69, "round {round}");
        assert_eq!(limiter.table_stats().evicted, 31 * (round + 1));
    }
    assert_eq!(limiter.sweep(), 69);
    assert!(limiter.is_empty());
    for key in 0..100 {
        assert_eq!(limiter.try_acquire(&Brittle(1000 + key), 1), Ok(()));
    }
    assert_eq!(
        limiter.try_acquire(&Brittle(2000), 1),
        Err(AcquireError::TooManyKeys { max_keys: 100 })
    );
}

/// A key forgotten because a give-back left it full, its `Drop` panicking:
/// uncounted all the same.
#[test]
fn a_key_panicking_as_a_give_back_forgets_it_leaks_no_place() {
    let limiter = KeyedLimiter::builder(per_second(1))
        .clock(ManualClock::new())
        .max_keys(cap(1))
        .build::<Brittle>();
    let key = Brittle(1);
    let receipt = Receipt::take(limiter.key(&key), 1).unwrap();
    arm_drops(1);
    let undone = catch_unwind(AssertUnwindSafe(|| receipt.undo()));
    assert!(undone.is_err() && disarm_drops());
    assert!(limiter.is_empty());
    assert_eq!(limiter.try_acquire(&Brittle(2), 1), Ok(()));
}

/// A cached key's copy evicted by another key, its `Drop` panicking: the
/// eviction comes before the evicting decision, which is not made, the
/// cache holds the new key, and both keys decide exactly after.
#[test]
fn a_cached_key_panicking_as_it_is_evicted_loses_no_decision() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(per_second(3))
        .clock(clock.clone())
        .hot_keys_per_thread(1)
        .build::<Brittle>();
    let (a, b) = (Brittle(1), Brittle(2));
    limiter.try_acquire(&a, 1).unwrap();
    limiter.try_acquire(&a, 1).unwrap();
    limiter.try_acquire(&b, 1).unwrap();
    // `b`'s second miss in a row caches it in `a`'s place: `a`'s copy drops.
    arm_drops(1);
    let evicting = catch_unwind(AssertUnwindSafe(|| limiter.try_acquire(&b, 1)));
    assert!(evicting.is_err() && disarm_drops());
    assert_eq!((limiter.available(&a), limiter.available(&b)), (1, 2));
    assert_eq!(limiter.try_acquire(&b, 1), Ok(()));
    assert_eq!(limiter.try_acquire(&b, 1), Ok(()));
    assert!(limiter.try_acquire(&b, 1).is_err());
    assert_eq!(limiter.try_acquire(&a, 1), Ok(()));
    assert!(limiter.try_acquire(&a, 1).is_err());
    // `b`, hit since it was cached, keeps its slot against `a`'s two misses.
    assert_eq!(limiter.table_stats().cached, 2);
}

thread_local! {
    /// Whether a [`Uncopyable`] key's next clone panics.
    static CLONE_FAILS: Cell<bool> = const { Cell::new(false) };
}

/// A key whose `Clone` panics once armed.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Uncopyable(u32);

impl Clone for Uncopyable {
    fn clone(&self) -> Self {
        if CLONE_FAILS.with(|fails| fails.replace(false)) {
            panic!("a key's clone failed");
        }
        Uncopyable(self.0)
    }
}

/// Caching a key copies it, before its decision: a `Clone` that panics
/// there leaves the decision unmade (nothing spent, nothing cached), and
/// the key decides exactly after.
#[test]
fn a_key_panicking_as_it_is_cached_spends_nothing() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(per_second(3))
        .clock(clock.clone())
        .build::<Uncopyable>();
    let key = Uncopyable(1);
    limiter.try_acquire(&key, 1).unwrap();
    CLONE_FAILS.with(|fails| fails.set(true));
    let caching = catch_unwind(AssertUnwindSafe(|| limiter.try_acquire(&key, 1)));
    assert!(caching.is_err());
    assert_eq!(limiter.available(&key), 2);
    assert_eq!(limiter.table_stats().cached, 0);
    assert_eq!(limiter.try_acquire(&key, 1), Ok(()));
    assert_eq!(limiter.try_acquire(&key, 1), Ok(()));
    assert!(limiter.try_acquire(&key, 1).is_err());
}

/// Keyed windows share the key table: the same two drops, the same count.
#[test]
fn a_window_key_panicking_as_it_is_dropped_leaks_no_place() {
    let clock = ManualClock::new();
    let limiter = KeyedFixedWindow::builder(WindowQuota::per_second(1).unwrap())
        .clock(clock.clone())
        .max_keys(cap(10))
        .sweep_interval(None)
        .build_fixed::<Brittle>()
        .unwrap();
    for key in 0..10 {
        limiter.key(&Brittle(key)).try_acquire(1).unwrap();
    }
    clock.advance(SECOND);
    arm_drops(4);
    let swept = catch_unwind(AssertUnwindSafe(|| limiter.sweep()));
    assert!(swept.is_err() && disarm_drops());
    assert_eq!(limiter.len(), 6);
    let key = Brittle(50);
    let receipt = Receipt::take(limiter.key(&key), 1).unwrap();
    arm_drops(1);
    let undone = catch_unwind(AssertUnwindSafe(|| receipt.undo()));
    assert!(undone.is_err() && disarm_drops());
    assert_eq!(limiter.len(), 6);
    assert_eq!(limiter.sweep(), 6);
    for key in 100..110 {
        assert!(limiter.key(&Brittle(key)).try_acquire(1).is_ok());
    }
}

thread_local! {
    /// Calls of [`Fragile`]'s `hash` or `eq` left on this thread before one
    /// panics; `None` when disarmed.
    static CALLS: Cell<Option<u32>> = const { Cell::new(None) };
}

fn arm_calls(calls: u32) {
    CALLS.with(|fuse| fuse.set(Some(calls)));
}

fn disarm_calls() -> bool {
    CALLS.with(|fuse| fuse.replace(None)) == Some(0)
}

fn burn() {
    CALLS.with(|fuse| match fuse.get() {
        Some(1) => {
            fuse.set(Some(0));
            panic!("a key's own code failed");
        }
        Some(n) if n > 1 => fuse.set(Some(n - 1)),
        _ => {}
    });
}

/// A key whose `Hash` and `Eq` fail on the n-th call once armed.
#[derive(Clone, Debug)]
struct Fragile(u32);

impl Hash for Fragile {
    fn hash<H: Hasher>(&self, state: &mut H) {
        burn();
        self.0.hash(state);
    }
}

impl PartialEq for Fragile {
    fn eq(&self, other: &Self) -> bool {
        burn();
        self.0 == other.0
    }
}

impl Eq for Fragile {}

/// A permit's release, its key's `Hash` or `Eq` panicking at any call: the
/// units come back all the same and the key's place under the cap is not
/// held for good, so the key, and another in its place, get their whole
/// limit again.
#[test]
fn a_key_panicking_as_its_permit_is_released_leaks_no_units_and_no_place() {
    for calls in 1..=6 {
        let limiter = KeyedConcurrencyLimiter::with_max_keys(2, cap(1)).unwrap();
        let permit = limiter.try_acquire(&Fragile(1), 2).unwrap();
        arm_calls(calls);
        let released = catch_unwind(AssertUnwindSafe(|| drop(permit)));
        let blew = disarm_calls();
        assert_eq!(released.is_err(), blew, "call {calls}");
        let again = limiter.try_acquire(&Fragile(1), 2);
        assert!(again.is_ok(), "call {calls}: {:?}", again.err());
        drop(again);
        let other = limiter.try_acquire(&Fragile(2), 2);
        assert!(other.is_ok(), "call {calls}: {:?}", other.err());
        assert_eq!(limiter.len(), 1, "call {calls}");
        assert!(matches!(
            limiter.try_acquire(&Fragile(3), 1),
            Err(InFlightError::TooManyKeys { max_keys: 1 })
        ));
    }
}

/// The single buckets, their clock panicking in `set_quota`: nothing is
/// minted, before or after the change that follows.
#[test]
fn a_clock_panicking_in_a_single_bucket_s_change_mints_nothing() {
    for readings in 1..=3 {
        let clock = FusedClock::default();
        let bucket = TokenBucket::with_clock(per_second(1000), clock.clone());
        bucket.try_acquire(1000).unwrap();
        clock.arm(readings);
        let changed = catch_unwind(AssertUnwindSafe(|| bucket.set_quota(per_second(10))));
        let blew = clock.disarm();
        assert_eq!(changed.is_err(), blew);
        assert_eq!(bucket.available(), 0, "reading {readings}");
        bucket.set_quota(per_second(1000));
        assert_eq!(bucket.available(), 0, "reading {readings}");

        let clock = FusedClock::default();
        let striped = StripedBucket::with_clock(per_second(1000), clock.clone(), 4, 10);
        let mut taken = 0;
        while striped.try_acquire(1).is_ok() {
            taken += 1;
        }
        assert_eq!(taken, 1000);
        clock.arm(readings);
        let changed = catch_unwind(AssertUnwindSafe(|| striped.set_quota(per_second(10))));
        let blew = clock.disarm();
        assert_eq!(changed.is_err(), blew);
        striped.set_quota(per_second(1000));
        assert!(striped.try_acquire(1).is_err(), "reading {readings}");
        assert_eq!(striped.bucket().available(), 0);
    }
}
