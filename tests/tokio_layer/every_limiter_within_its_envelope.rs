//! Random operation sequences through every limiter type, each checked
//! against the exact envelope of its quota: over every window between two
//! events, the cost admitted is at most `B + r·t`.
//!
//! The operations are the ones a client or a caller can drive: admissions,
//! reservations (counted at their due times), receipts kept or undone,
//! async acquires cancelled mid-wait, trusted refunds and resets, sweeps,
//! and clock moves forwards and back. Refunds and resets return credit by
//! definition, and an undo after the clock was set back may return up to the
//! step back (`docs/semantics.md`, "Giving back"), so each starts a new epoch
//! and windows are checked within an epoch. Exact integer arithmetic
//! throughout (`common::Envelope`).
//!
//! And the other half: a limiter that refused everything would keep every
//! envelope, so each trace ends with an idle stretch far longer than any
//! refill or reservation, after which each limit must admit its whole
//! burst ([`IDLE`]).

use std::time::Duration;

use proptest::prelude::*;
use tollgate::shared::{AllowanceConfig, FailurePolicy, LocalAllowance, LocalStore, Source};
use tollgate::{
    AtCapacity, Clock, KeyedLimiter, Limit, ManualClock, Quota, Receipt, StripedBucket,
    TokenBucket, try_acquire_all,
};

use common::{Envelope, admitted_at_first_poll};
use tollgate_test_support::common;

/// One operation; `key` picks one of a few keys where the limiter has keys.
#[derive(Clone, Copy, Debug)]
enum Op {
    Admit {
        key: u8,
        cost: u64,
    },
    Reserve {
        key: u8,
        cost: u64,
        max_wait_ms: u64,
    },
    /// Takes a receipt, held until an `Undo` or `Keep` names it.
    Take {
        key: u8,
        cost: u64,
    },
    Undo(usize),
    Keep(usize),
    /// An async acquire polled into its wait, then dropped.
    Cancel {
        key: u8,
        cost: u64,
    },
    Refund {
        key: u8,
        cost: u64,
    },
    Reset,
    Sweep,
    Advance(u64),
    Back(u64),
}

fn op(capacity: u64) -> impl Strategy<Value = Op> {
    let key = 0u8..3;
    let cost = 1..=capacity + 1;
    prop_oneof![
        4 => (key.clone(), cost.clone()).prop_map(|(key, cost)| Op::Admit { key, cost }),
        2 => (key.clone(), cost.clone(), 0u64..3_000)
            .prop_map(|(key, cost, max_wait_ms)| Op::Reserve { key, cost, max_wait_ms }),
        3 => (key.clone(), cost.clone()).prop_map(|(key, cost)| Op::Take { key, cost }),
        2 => (0usize..8).prop_map(Op::Undo),
        1 => (0usize..8).prop_map(Op::Keep),
        1 => (key.clone(), cost.clone()).prop_map(|(key, cost)| Op::Cancel { key, cost }),
        1 => (key, cost).prop_map(|(key, cost)| Op::Refund { key, cost }),
        1 => Just(Op::Reset),
        1 => Just(Op::Sweep),
        4 => (0u64..2_000_000_000).prop_map(Op::Advance),
        1 => (0u64..500_000_000).prop_map(Op::Back),
    ]
}

/// Longer than any trace's refills and reservations (a burst of at most 6
/// tokens at one token per 700 ms at worst, reservations of 3 s, clock
/// moves of 2 s): after it, every limit is full.
const IDLE: Duration = Duration::from_secs(3600);

/// The keys receipts borrow: they live as long as the test.
const KEYS: [u8; 3] = [0, 1, 2];

/// A quota (capacity, tokens per period) and a sequence of operations.
fn trace() -> impl Strategy<Value = (u64, u64, u64, Vec<Op>)> {
    (
        1u64..6,
        1u64..4,
        prop_oneof![Just(1u64), Just(1_000), Just(700)],
    )
        .prop_flat_map(|(capacity, tokens, period_ms)| {
            let ops = prop::collection::vec(op(capacity), 1..80);
            (Just(capacity), Just(tokens), Just(period_ms), ops)
        })
}

/// What one limit admitted: `(time_ns, cost)` per kept admission, grouped
/// by epoch.
#[derive(Default)]
struct Ledger {
    epochs: Vec<Vec<Option<(u64, u64)>>>,
}

impl Ledger {
    /// Records an admission; returns its handle (for an undo).
    fn admit(&mut self, at: u64, cost: u64) -> (usize, usize) {
        if self.epochs.is_empty() {
            self.epochs.push(Vec::new());
        }
        let epoch = self.epochs.len() - 1;
        self.epochs[epoch].push(Some((at, cost)));
        (epoch, self.epochs[epoch].len() - 1)
    }

    /// The admission was given back: the work it stood for never ran. An
    /// undo after a trusted refund or reset may return what they already
    /// returned (`docs/semantics.md`, "Giving back"), so it starts an epoch.
    fn forget(&mut self, (epoch, index): (usize, usize)) {
        self.epochs[epoch][index] = None;
        if epoch + 1 != self.epochs.len() {
            self.new_epoch();
        }
    }

    fn new_epoch(&mut self) {
        self.epochs.push(Vec::new());
    }

    /// Windows are widened by 1 ns: a reservation's wait is its due time
    /// rounded up to the nanosecond (`docs/semantics.md`, "Denial versus
    /// delay").
    fn assert_within(&self, envelope: &Envelope) {
        for epoch in &self.epochs {
            let events: Vec<_> = epoch.iter().flatten().copied().collect();
            envelope.assert_holds_over(&events, 1);
        }
    }
}

fn envelope(capacity: u64, tokens: u64, period_ms: u64) -> Envelope {
    Envelope {
        capacity,
        tokens,
        period_ns: period_ms * 1_000_000,
    }
}

fn quota(capacity: u64, tokens: u64, period_ms: u64) -> Quota {
    Quota::new(capacity, tokens, Duration::from_millis(period_ms)).expect("valid quota")
}

fn now(clock: &ManualClock) -> u64 {
    clock.now_nanos()
}

/// Moves the clock; a move back starts a new epoch in every ledger.
fn move_clock(clock: &ManualClock, op: Op, ledgers: &mut [Ledger]) {
    match op {
        Op::Advance(ns) => clock.advance(Duration::from_nanos(ns)),
        Op::Back(ns) => {
            let to = now(clock).saturating_sub(ns);
            clock.set(Duration::from_nanos(to));
            ledgers.iter_mut().for_each(Ledger::new_epoch);
        }
        _ => unreachable!("not a clock move"),
    }
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// A `TokenBucket` driven through every operation.
    #[test]
    fn a_bucket_keeps_its_envelope((capacity, tokens, period_ms, ops) in trace()) {
        let clock = ManualClock::new();
        let bucket = TokenBucket::with_clock(quota(capacity, tokens, period_ms), clock.clone());
        let mut ledger = [Ledger::default()];
        let mut held = Vec::new();
        for op in ops {
            match op {
                Op::Admit { cost, .. } => {
                    if bucket.try_acquire(cost).is_ok() {
                        ledger[0].admit(now(&clock), cost);
                    }
                }
                Op::Reserve { cost, max_wait_ms, .. } => {
                    if let Ok(wait) = bucket.reserve(cost, Duration::from_millis(max_wait_ms)) {
                        // Held over due times.
                        ledger[0].admit(now(&clock) + wait.as_nanos() as u64, cost);
                    }
                }
                Op::Take { cost, .. } => {
                    if let Ok(receipt) = Receipt::take(&bucket, cost) {
                        held.push((receipt, ledger[0].admit(now(&clock), cost)));
                    }
                }
                Op::Undo(i) if i < held.len() => {
                    let (receipt, handle) = held.swap_remove(i);
                    receipt.undo();
                    ledger[0].forget(handle);
                }
                Op::Keep(i) if i < held.len() => held.swap_remove(i).0.keep(),
                Op::Cancel { cost, .. } => {
                    if admitted_at_first_poll(bucket.acquire(cost, Duration::from_secs(5))) {
                        ledger[0].admit(now(&clock), cost);
                    }
                }
                Op::Refund { cost, .. } => {
                    bucket.refund(cost);
                    ledger[0].new_epoch();
                }
                Op::Reset => {
                    bucket.reset();
                    ledger[0].new_epoch();
                }
                Op::Advance(_) | Op::Back(_) => move_clock(&clock, op, &mut ledger),
                Op::Undo(_) | Op::Keep(_) | Op::Sweep => {}
            }
        }
        held.into_iter().for_each(|(receipt, _)| receipt.keep());
        ledger[0].assert_within(&envelope(capacity, tokens, period_ms));
        clock.advance(IDLE);
        prop_assert_eq!(bucket.try_acquire(capacity), Ok(()), "idle, full, and refused");
    }

    /// A `KeyedLimiter` with a small key cap, under either policy at the
    /// cap, with sweeps: the envelope holds per key, whether its admissions
    /// came from its own bucket, the overflow bucket, or a bucket swept and
    /// created again.
    #[test]
    fn a_keyed_limiter_keeps_each_key_within_its_envelope(
        (capacity, tokens, period_ms, ops) in trace(),
        overflow in any::<bool>(),
    ) {
        let clock = ManualClock::new();
        let policy = if overflow { AtCapacity::SharedOverflow } else { AtCapacity::Deny };
        let limiter = KeyedLimiter::builder(quota(capacity, tokens, period_ms))
            .clock(clock.clone())
            .max_keys(2.try_into().unwrap())
            .at_capacity(policy)
            .build::<u8>();
        let mut ledgers: Vec<Ledger> = (0..3).map(|_| Ledger::default()).collect();
        let mut held = Vec::new();
        for op in ops {
            match op {
                Op::Admit { key, cost } => {
                    if limiter.try_acquire(&key, cost).is_ok() {
                        ledgers[usize::from(key)].admit(now(&clock), cost);
                    }
                }
                Op::Reserve { key, cost, max_wait_ms } => {
                    if let Ok(wait) = limiter.reserve(&key, cost, Duration::from_millis(max_wait_ms)) {
                        let due = now(&clock) + wait.as_nanos() as u64;
                        ledgers[usize::from(key)].admit(due, cost);
                    }
                }
                Op::Take { key, cost } => {
                    if let Ok(receipt) = Receipt::take(limiter.key(&KEYS[usize::from(key)]), cost) {
                        let handle = ledgers[usize::from(key)].admit(now(&clock), cost);
                        held.push((receipt, key, handle));
                    }
                }
                Op::Undo(i) if i < held.len() => {
                    let (receipt, key, handle) = held.swap_remove(i);
                    receipt.undo();
                    ledgers[usize::from(key)].forget(handle);
                }
                Op::Keep(i) if i < held.len() => held.swap_remove(i).0.keep(),
                Op::Cancel { key, cost } => {
                    if admitted_at_first_poll(limiter.acquire(&key, cost, Duration::from_secs(5))) {
                        ledgers[usize::from(key)].admit(now(&clock), cost);
                    }
                }
                Op::Refund { key, cost } => {
                    limiter.refund(&key, cost);
                    ledgers[usize::from(key)].new_epoch();
                }
                Op::Sweep => {
                    limiter.sweep();
                }
                Op::Advance(_) | Op::Back(_) => move_clock(&clock, op, &mut ledgers),
                Op::Undo(_) | Op::Keep(_) | Op::Reset => {}
            }
        }
        held.into_iter().for_each(|(receipt, ..)| receipt.keep());
        for ledger in &ledgers {
            ledger.assert_within(&envelope(capacity, tokens, period_ms));
        }
        // Each key in turn, after an idle stretch and a sweep that frees
        // the table's places: the whole burst.
        for key in KEYS {
            clock.advance(IDLE);
            limiter.sweep();
            prop_assert_eq!(limiter.try_acquire(&key, capacity), Ok(()), "key {} idle and refused", key);
        }
    }

    /// A hierarchy of a per-key limit and a global bucket: each limit keeps
    /// its own envelope, and a refused chain spends nothing anywhere.
    #[test]
    fn a_hierarchy_keeps_every_limit_within_its_envelope(
        (capacity, tokens, period_ms, ops) in trace(),
    ) {
        let clock = ManualClock::new();
        let per_key = KeyedLimiter::builder(quota(capacity, tokens, period_ms))
            .clock(clock.clone())
            .build::<u8>();
        let global = TokenBucket::with_clock(quota(capacity + 1, tokens, period_ms), clock.clone());
        let mut ledgers: Vec<Ledger> = (0..4).map(|_| Ledger::default()).collect();
        let mut went_back = false;
        for op in ops {
            match op {
                Op::Admit { key, cost } | Op::Take { key, cost } | Op::Cancel { key, cost } => {
                    let before = (per_key.available(&key), global.available());
                    let limit = per_key.key(&key);
                    match try_acquire_all(&[limit.cost(cost), global.cost(cost)]) {
                        Ok(()) => {
                            ledgers[usize::from(key)].admit(now(&clock), cost);
                            ledgers[3].admit(now(&clock), cost);
                        }
                        // Nothing spent, unless the clock was set back: a
                        // key's bucket the undo drops as full then comes
                        // back no fuller than the latest drop's time, which
                        // is ahead of the clock (less credit, never more).
                        Err(_) if went_back => {
                            let after = (per_key.available(&key), global.available());
                            prop_assert!(after.0 <= before.0 && after.1 == before.1);
                        }
                        Err(_) => prop_assert_eq!(
                            (per_key.available(&key), global.available()),
                            before,
                            "a refused chain spent something"
                        ),
                    }
                }
                Op::Refund { key, cost } => {
                    per_key.refund(&key, cost);
                    global.refund(cost);
                    ledgers.iter_mut().for_each(Ledger::new_epoch);
                }
                Op::Reset => {
                    global.reset();
                    ledgers[3].new_epoch();
                }
                Op::Sweep => {
                    per_key.sweep();
                }
                Op::Advance(_) | Op::Back(_) => {
                    went_back |= matches!(op, Op::Back(_));
                    move_clock(&clock, op, &mut ledgers);
                }
                Op::Reserve { .. } | Op::Undo(_) | Op::Keep(_) => {}
            }
        }
        let own = envelope(capacity, tokens, period_ms);
        for ledger in &ledgers[..3] {
            ledger.assert_within(&own);
        }
        ledgers[3].assert_within(&envelope(capacity + 1, tokens, period_ms));
        clock.advance(IDLE);
        let limit = per_key.key(&0);
        prop_assert_eq!(
            try_acquire_all(&[limit.cost(capacity), global.cost(capacity)]),
            Ok(()),
            "idle, full, and the chain refused"
        );
    }

    /// A striped bucket: what its pools and its bucket admit together keeps
    /// the bucket's envelope, flushes and trusted resets of the bucket
    /// included (pooled tokens expire as the bucket refills past them).
    /// A flush after the clock was set back may return a token whose slot
    /// has passed (the undo rule's limit), so a move back starts an epoch.
    #[test]
    fn a_striped_bucket_keeps_its_envelope(
        (capacity, tokens, period_ms, ops) in trace(),
        lease in 1u64..4,
    ) {
        let clock = ManualClock::new();
        let striped = StripedBucket::with_clock(quota(capacity, tokens, period_ms), clock.clone(), 2, lease);
        let mut ledger = [Ledger::default()];
        for op in ops {
            match op {
                Op::Admit { cost, .. } | Op::Take { cost, .. } | Op::Cancel { cost, .. } => {
                    if striped.try_acquire(cost).is_ok() {
                        ledger[0].admit(now(&clock), cost);
                    }
                }
                Op::Reserve { cost, .. } => {
                    // The bucket beside the pools: its admissions count too.
                    if striped.bucket().try_acquire(cost).is_ok() {
                        ledger[0].admit(now(&clock), cost);
                    }
                }
                Op::Undo(_) | Op::Keep(_) | Op::Sweep => {
                    striped.flush();
                }
                // A trusted refund or reset of the bucket forgives its
                // leases too, so the pools are flushed first, as a caller
                // who resets a striped bucket's bucket should.
                Op::Refund { cost, .. } => {
                    striped.flush();
                    striped.bucket().refund(cost);
                    ledger[0].new_epoch();
                }
                Op::Reset => {
                    striped.flush();
                    striped.bucket().reset();
                    ledger[0].new_epoch();
                }
                Op::Advance(_) | Op::Back(_) => move_clock(&clock, op, &mut ledger),
            }
            prop_assert!(striped.bucket().available() + striped.pooled() <= capacity);
        }
        ledger[0].assert_within(&envelope(capacity, tokens, period_ms));
        // Idle: what the pools hold has expired and the bucket is full, so
        // a burst in leases of at most `lease` is admitted whole.
        clock.advance(IDLE);
        let mut taken = 0;
        while taken < capacity {
            let cost = lease.min(capacity - taken);
            prop_assert_eq!(striped.try_acquire(cost), Ok(()), "idle, {} of {} taken", taken, capacity);
            taken += cost;
        }
    }

    /// A local allowance over the in-process store: what it admits from
    /// leases never exceeds what the store granted net of returns, and so
    /// the envelope from the key's creation (`docs/distributed.md`: the
    /// bound is cumulative; a pool may spend, inside a window, tokens
    /// leased before it). The store's own grants are a keyed bucket's
    /// admissions, whose windows the keyed model checks.
    #[test]
    fn a_local_allowance_never_spends_beyond_the_store_grants(
        (capacity, tokens, period_ms, ops) in trace(),
        max_lease in 1u64..4,
    ) {
        let clock = ManualClock::new();
        let limiter = KeyedLimiter::builder(quota(capacity, tokens, period_ms))
            .clock(clock.clone())
            .build::<String>();
        let store = std::sync::Arc::new(LocalStore::from_limiter(limiter));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let config = AllowanceConfig {
            max_lease,
            idle_return: None,
            ..AllowanceConfig::new(FailurePolicy::Closed)
        };
        let (mut admitted, mut latest) = (0u128, 0u64);
        runtime.block_on(async {
            let node = LocalAllowance::new(std::sync::Arc::clone(&store), "k", config).unwrap();
            for op in ops {
                match op {
                    Op::Admit { cost, .. } | Op::Take { cost, .. } => {
                        if node.try_acquire(cost) == Ok(Source::Lease) {
                            admitted += u128::from(cost);
                        }
                    }
                    Op::Reserve { cost, max_wait_ms, .. } => {
                        let wait = Duration::from_millis(max_wait_ms);
                        if node.acquire(cost, wait).await == Ok(Source::Lease) {
                            admitted += u128::from(cost);
                        }
                    }
                    Op::Cancel { cost, .. } => {
                        let _ = tokio::time::timeout(Duration::ZERO, node.acquire(cost, Duration::MAX)).await;
                    }
                    Op::Undo(_) | Op::Keep(_) | Op::Refund { .. } => {
                        let _ = node.refill().await;
                    }
                    Op::Reset | Op::Sweep => {
                        node.shutdown().await;
                    }
                    Op::Advance(_) | Op::Back(_) => move_clock(&clock, op, &mut []),
                }
                latest = latest.max(now(&clock));
                let stats = node.stats();
                prop_assert!(
                    admitted <= u128::from(stats.leased - stats.returned),
                    "{admitted} admitted from {stats:?}"
                );
                let bound = quota(capacity, tokens, period_ms).envelope(Duration::from_nanos(latest));
                prop_assert!(admitted <= u128::from(bound), "{admitted} over {bound}");
            }
            Ok(())
        })?;
    }
}
