//! Keyed window counters against an exact per-key model, and the key
//! table's rules for them: the cap, sweeps that change no decision, and a
//! swept key that never regains a window it spent in.
//!
//! The model keeps, per key, the cost admitted (and not given back) per
//! window index in a map, knowing nothing of words, tables or sweeps: a
//! fixed window admits while `cur + cost <= N`, a sliding one while
//! `prev · (W - pos) + (cur + cost) · W <= N · W` (exact integers). Sweeps
//! are interleaved at random and must change nothing.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroUsize;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::window::{KeyedWindow, WindowKind};
use tollgate::{
    AcquireError, AtCapacity, KeyedFixedWindow, KeyedSlidingWindow, Limit, ManualClock, QuotaError,
    Receipt, WindowQuota,
};

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    Acquire { key: u8, cost: u64 },
    TakeAndUndo { key: u8, cost: u64 },
    Sweep,
}

fn op(window: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..window * 3 / 2).prop_map(Op::Advance),
        6 => (0u8..4, 1u64..=4).prop_map(|(key, cost)| Op::Acquire { key, cost }),
        2 => (0u8..4, 1u64..=4).prop_map(|(key, cost)| Op::TakeAndUndo { key, cost }),
        1 => Just(Op::Sweep),
    ]
}

/// The exact per-key model: counts per window index.
struct Model {
    limit: u64,
    window: u64,
    sliding: bool,
    counts: HashMap<u8, BTreeMap<u64, u64>>,
}

impl Model {
    fn counts(&self, key: u8, t: u64) -> (u64, u64, u64) {
        let index = t / self.window;
        let of = |i: u64| {
            self.counts
                .get(&key)
                .and_then(|c| c.get(&i))
                .copied()
                .unwrap_or(0)
        };
        let prev = if self.sliding && index > 0 {
            of(index - 1)
        } else {
            0
        };
        (index, prev, of(index))
    }

    fn fits(&self, key: u8, t: u64, cost: u64) -> bool {
        let (_, prev, cur) = self.counts(key, t);
        let pos = t % self.window;
        let (w, n) = (u128::from(self.window), u128::from(self.limit));
        u128::from(prev) * (w - u128::from(pos)) + u128::from(cur + cost) * w <= n * w
    }

    fn available(&self, key: u8, t: u64) -> u64 {
        (0..=self.limit)
            .rev()
            .find(|&k| k == 0 || self.fits(key, t, k))
            .unwrap_or(0)
    }

    fn add(&mut self, key: u8, t: u64, cost: u64) {
        *self
            .counts
            .entry(key)
            .or_default()
            .entry(t / self.window)
            .or_default() += cost;
    }
}

fn run<Kind: WindowKind>(
    limiter: &KeyedWindow<u8, Kind, ManualClock>,
    clock: &ManualClock,
    model: &mut Model,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let mut t = 0u64;
    for op in ops {
        match *op {
            Op::Advance(ns) => {
                clock.advance(Duration::from_nanos(ns));
                t += ns;
            }
            Op::Acquire { key, cost } => {
                let expect = cost <= model.limit && model.fits(key, t, cost);
                let got = limiter.key(&key).try_acquire(cost);
                prop_assert_eq!(got.is_ok(), expect, "key {} cost {} at {}", key, cost, t);
                if expect {
                    model.add(key, t, cost);
                }
            }
            Op::TakeAndUndo { key, cost } => {
                let expect = cost <= model.limit && model.fits(key, t, cost);
                let limit = limiter.key(&key);
                let receipt = Receipt::take(&limit, cost);
                prop_assert_eq!(receipt.is_ok(), expect);
                if let Ok(receipt) = receipt {
                    // Given back in the same window: as if never taken.
                    receipt.undo();
                }
            }
            Op::Sweep => {
                limiter.sweep();
            }
        }
        for key in 0..4u8 {
            prop_assert_eq!(
                limiter.key(&key).available(),
                model.available(key, t),
                "available of key {} at {}",
                key,
                t
            );
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn keyed_fixed_windows_decide_as_exact_per_key_counters(
        limit in 1u64..=7,
        window in prop::sample::select(vec![7u64, 100, 1_000_000]),
        ops in prop::collection::vec(op(100), 1..80),
    ) {
        let clock = ManualClock::new();
        let quota = WindowQuota::new(limit, Duration::from_nanos(window)).unwrap();
        let limiter = KeyedFixedWindow::builder(quota).clock(clock.clone()).build_fixed::<u8>().unwrap();
        let mut model = Model { limit, window, sliding: false, counts: HashMap::new() };
        run(&limiter, &clock, &mut model, &ops)?;
    }

    #[test]
    fn keyed_sliding_windows_decide_as_exact_per_key_estimates(
        limit in 1u64..=7,
        window in prop::sample::select(vec![7u64, 100, 1_000_000]),
        ops in prop::collection::vec(op(100), 1..80),
    ) {
        let clock = ManualClock::new();
        let quota = WindowQuota::new(limit, Duration::from_nanos(window)).unwrap();
        let limiter = KeyedSlidingWindow::builder(quota).clock(clock.clone()).build_sliding::<u8>().unwrap();
        let mut model = Model { limit, window, sliding: true, counts: HashMap::new() };
        run(&limiter, &clock, &mut model, &ops)?;
    }
}

#[test]
fn at_the_cap_new_keys_are_refused_until_a_sweep_frees_places()
-> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new();
    let limiter = KeyedFixedWindow::builder(WindowQuota::per_second(2)?)
        .clock(clock.clone())
        .max_keys(NonZeroUsize::new(2).unwrap().into())
        .sweep_interval(Some(Duration::from_millis(500)))
        .build_fixed::<u32>()?;
    limiter.key(&1).try_acquire(1)?;
    limiter.key(&2).try_acquire(1)?;
    assert_eq!(
        limiter.key(&3).try_acquire(1),
        Err(AcquireError::TooManyKeys { max_keys: 2 })
    );
    // A bad cost is refused as such, and creates nothing.
    assert_eq!(
        limiter.key(&3).try_acquire(3),
        Err(AcquireError::ExceedsCapacity {
            cost: 3,
            capacity: 2
        })
    );
    // Tracked keys decide on as before.
    limiter.key(&1).try_acquire(1)?;
    // The next window: the full table sweeps itself, and key 3 gets a place.
    clock.advance(Duration::from_secs(1));
    limiter.key(&3).try_acquire(2)?;
    assert_eq!(limiter.len(), 1);
    let stats = limiter.table_stats();
    assert_eq!((stats.created, stats.evicted, stats.overflowed), (3, 2, 0));
    Ok(())
}

#[test]
fn the_overflow_policy_is_a_typed_configuration_error() -> Result<(), QuotaError> {
    let built = KeyedSlidingWindow::builder(WindowQuota::per_second(3)?)
        .at_capacity(AtCapacity::SharedOverflow)
        .build_sliding::<u32>();
    assert_eq!(built.unwrap_err(), QuotaError::SharedOverflowUnsupported);
    Ok(())
}

#[test]
fn a_sliding_key_is_kept_while_its_last_window_still_weighs()
-> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new();
    let limiter = KeyedSlidingWindow::builder(WindowQuota::per_second(4)?)
        .clock(clock.clone())
        .build_sliding::<String>()?;
    limiter.key("a").try_acquire(4)?;
    clock.advance(Duration::from_millis(1500));
    assert_eq!(limiter.sweep(), 0);
    // Half of the 4 still weighs: 2 left, whether or not a sweep ran.
    assert_eq!(limiter.key("a").available(), 2);
    assert!(limiter.key("a").try_acquire(3).is_err());
    clock.advance(Duration::from_millis(600));
    assert_eq!(limiter.sweep(), 1);
    assert_eq!(limiter.key("a").available(), 4);
    Ok(())
}

#[test]
fn long_keys_are_kept_as_fingerprints_with_the_same_decisions()
-> Result<(), Box<dyn std::error::Error>> {
    let limiter = KeyedFixedWindow::builder(WindowQuota::per_second(1)?)
        .clock(ManualClock::new())
        .max_exact_key_bytes(8)
        .build_fixed::<String>()?;
    let long = "k".repeat(100);
    limiter.key(long.as_str()).try_acquire(1)?;
    assert!(limiter.key(long.as_str()).try_acquire(1).is_err());
    assert!(limiter.key("short").try_acquire(1).is_ok());
    assert_eq!(limiter.len(), 2);
    Ok(())
}

#[test]
fn a_receipt_from_an_ended_window_gives_nothing_back() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new();
    let limiter = KeyedFixedWindow::builder(WindowQuota::per_second(2)?)
        .clock(clock.clone())
        .build_fixed::<u32>()?;
    let limit = limiter.key(&1);
    let receipt = Receipt::take(&limit, 2)?;
    clock.advance(Duration::from_secs(1));
    limiter.sweep();
    limiter.key(&1).try_acquire(2)?;
    receipt.undo();
    // The recreated key's count is its own: the old receipt took none of it.
    assert_eq!(limiter.key(&1).available(), 0);
    Ok(())
}
