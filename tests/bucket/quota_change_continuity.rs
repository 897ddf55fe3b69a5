//! Quota changes at run time (`TokenBucket::set_quota`), against an ideal
//! token bucket kept in exact rationals whose quota changes by the rule of
//! `docs/semantics.md`, "Changing a quota".
//!
//! The model keeps credit (negative in debt) and refills it at the quota in
//! force. At a change it carries `min(floor(credit), B')` tokens, or, in
//! debt, keeps the instant the debt is paid, rounded up to the new quota's
//! tick (`1/d'` ns, `d'` the reduced denominator of its emission interval).
//! While every quota so far is exact, every observable must equal the
//! model's. Once a rounded quota has been in force, the bucket may only be
//! more conservative: the model is then driven by the bucket's decisions
//! (without the tick rounding at a change, so it only gains on the bucket),
//! and must never find the bucket admitting what it could not afford.
//!
//! Each stretch of constant quota (from one change to the next) is checked
//! against its envelope, counting the start times of the admissions
//! decided in it: over every `[s, e]`, at most `B + r·(e - s)`; and from
//! the change instant `t`, at most `c + r·(e - t)`, `c` the tokens the
//! model carried over (the whole capacity at creation).

use std::time::Duration;

use num_rational::Ratio;
use proptest::prelude::*;
use tollgate::{AcquireError, Limit, ManualClock, Quota, Receipt, StripedBucket, TokenBucket};

use common::{
    Envelope, FAST_RATES, Interleaving, PERIODS_NS, Q, ceil_nanos, nanos, q, race, race_beside,
    until_interleaved,
};
use tollgate_test_support::common;

fn floor_tokens(x: Q) -> u64 {
    u64::try_from(x.floor().to_integer().max(0)).unwrap()
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Spec {
    capacity: u64,
    tokens: u64,
    period_ns: u64,
}

impl Spec {
    fn quota(&self) -> Quota {
        Quota::new(
            self.capacity,
            self.tokens,
            Duration::from_nanos(self.period_ns),
        )
        .unwrap()
    }

    /// The emission interval in nanoseconds, exactly.
    fn interval(&self) -> Q {
        Q::new(i128::from(self.period_ns), i128::from(self.tokens))
    }

    /// Ticks per nanosecond of an exact quota: the reduced denominator.
    fn ticks_per_nano(&self) -> i128 {
        *self.interval().denom()
    }

    fn interval_ns(&self) -> u64 {
        (self.period_ns / self.tokens).max(1)
    }

    fn full_refill_ns(&self) -> u64 {
        ceil_nanos(self.interval() * q(self.capacity)).max(1)
    }

    fn envelope(&self, capacity: u64) -> Envelope {
        Envelope {
            capacity,
            tokens: self.tokens,
            period_ns: self.period_ns,
        }
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    let slow = (
        1u64..=40,
        (1u64..=20, prop::sample::select(&PERIODS_NS[..])),
    );
    let fast = (
        prop_oneof![1u64..=40, 1u64 << 10..=1 << 20],
        prop::sample::select(&FAST_RATES[..]),
    );
    prop_oneof![4 => slow, 1 => fast].prop_map(|(capacity, (tokens, period_ns))| Spec {
        capacity,
        tokens,
        period_ns,
    })
}

#[derive(Clone, Copy, Debug)]
enum Gap {
    /// 64ths of the interval of the quota in force.
    Sixtyfourths(u64),
    /// 64ths of its full refill.
    Refills(u64),
}

fn gap() -> impl Strategy<Value = Gap> {
    prop_oneof![
        3 => Just(Gap::Sixtyfourths(0)),
        3 => (0u64..64).prop_map(Gap::Sixtyfourths),
        2 => (0u64..=96).prop_map(Gap::Refills),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// `try_acquire` of `min(k, B)` (at least 1).
    Acquire(u64),
    /// `reserve` of `min(k, B)` within this many 64ths of a full refill
    /// (`None`: unbounded).
    Reserve(u64, Option<u64>),
    /// A receipt of `min(k, B)`, kept for a later `Undo`.
    Take(u64),
    /// Undoes the `i % n`-th receipt still held.
    Undo(usize),
    SetQuota(Spec),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..=8).prop_map(Op::Acquire),
        2 => (1u64..=8, prop::option::of(0u64..=160)).prop_map(|(k, w)| Op::Reserve(k, w)),
        2 => (1u64..=8).prop_map(Op::Take),
        2 => any::<usize>().prop_map(Op::Undo),
        2 => spec().prop_map(Op::SetQuota),
    ]
}

/// The ideal bucket, with credit in tokens (negative in debt).
struct Model {
    spec: Spec,
    credit: Q,
    /// Nanoseconds since the bucket's creation.
    now: u64,
}

impl Model {
    fn advance(&mut self, to: u64) {
        let refilled = self.credit + q(to - self.now) / self.spec.interval();
        self.credit = refilled.min(q(self.spec.capacity));
        self.now = to;
    }

    /// Nanoseconds until `cost` fits (zero or less: it fits).
    fn wait(&self, cost: u64) -> Q {
        (q(cost) - self.credit) * self.spec.interval()
    }

    fn available(&self) -> u64 {
        floor_tokens(self.credit)
    }

    /// Changes to `to` by the rule; returns the tokens carried over.
    fn change(&mut self, to: Spec, round_to_ticks: bool) -> u64 {
        let now = q(self.now);
        let carried = if self.credit >= q(0) {
            let carried = self.available().min(to.capacity);
            self.credit = q(carried);
            carried
        } else {
            let mut paid = now - self.credit * self.spec.interval();
            if round_to_ticks {
                let d = to.ticks_per_nano();
                paid = (paid * d).ceil() / d;
            }
            self.credit = -(paid - now) / to.interval();
            0
        };
        self.spec = to;
        carried
    }
}

/// A stretch of constant quota: when it began, what it carried, and the
/// start times of the admissions decided in it.
struct Stretch {
    spec: Spec,
    from: u64,
    carried: u64,
    starts: Vec<(u64, u64)>,
}

struct Held {
    receipt: Receipt<&'static TokenBucket<ManualClock>>,
    cost: u64,
    stretch: usize,
    /// The operation count when it was taken, and the credit before it.
    taken_at_op: usize,
    credit_before: Q,
}

struct Harness {
    clock: ManualClock,
    bucket: &'static TokenBucket<ManualClock>,
    model: Model,
    /// Whether every quota so far was exact.
    exact: bool,
    stretches: Vec<Stretch>,
    held: Vec<Held>,
    /// Operations run, and the last one that changed the state.
    ops: usize,
}

impl Harness {
    fn new(spec: Spec) -> Self {
        let clock = ManualClock::new();
        // Leaked: receipts borrow the bucket for the length of a case.
        let bucket = Box::leak(Box::new(TokenBucket::with_clock(
            spec.quota(),
            clock.clone(),
        )));
        Harness {
            exact: spec.quota().is_exact(),
            clock,
            bucket,
            model: Model {
                spec,
                credit: q(spec.capacity),
                now: 0,
            },
            stretches: vec![Stretch {
                spec,
                from: 0,
                carried: spec.capacity,
                starts: Vec::new(),
            }],
            held: Vec::new(),
            ops: 0,
        }
    }

    fn spec(&self) -> Spec {
        self.model.spec
    }

    fn cost(&self, k: u64) -> u64 {
        k.min(self.spec().capacity)
    }

    fn advance(&mut self, gap: Gap) {
        let by = match gap {
            Gap::Sixtyfourths(n) => self.spec().interval_ns() * n / 64,
            Gap::Refills(n) => self.spec().full_refill_ns() * n / 64,
        };
        let now = self.model.now + by;
        self.clock.set(Duration::from_nanos(now));
        self.model.advance(now);
    }

    fn run(spec: Spec, events: &[(Gap, Op)]) -> Self {
        let mut h = Harness::new(spec);
        for &(gap, op) in events {
            h.advance(gap);
            h.ops += 1;
            match op {
                Op::Acquire(k) => {
                    let cost = h.cost(k);
                    let got = h.bucket.try_acquire(cost).map(|()| Duration::ZERO);
                    h.decided(cost, Duration::ZERO, got);
                }
                Op::Reserve(k, budget) => {
                    let cost = h.cost(k);
                    let max_wait = budget.map_or(Duration::MAX, |n| {
                        Duration::from_nanos(h.spec().full_refill_ns() * n / 64)
                    });
                    let got = h.bucket.reserve(cost, max_wait);
                    h.decided(cost, max_wait, got);
                }
                Op::Take(k) => h.take(h.cost(k)),
                Op::Undo(i) => h.undo(i),
                Op::SetQuota(to) => h.set_quota(to),
            }
            h.check_available();
        }
        h
    }

    /// Checks a decision against the model, and records it.
    fn decided(&mut self, cost: u64, max_wait: Duration, got: Result<Duration, AcquireError>) {
        let wait = self.model.wait(cost);
        let budget = q(nanos(max_wait));
        if self.exact {
            let expected = if wait <= budget {
                Ok(Duration::from_nanos(ceil_nanos(wait)))
            } else {
                Err(AcquireError::Insufficient {
                    retry_after: Duration::from_nanos(ceil_nanos(wait - budget)),
                })
            };
            assert_eq!(got, expected, "cost {cost} at {} ns", self.model.now);
        } else {
            match got {
                Ok(w) => assert!(
                    q(nanos(w)) >= wait,
                    "cost {cost} admitted to start after {w:?}; the ideal bucket \
                     holds {} at {} ns",
                    self.model.credit,
                    self.model.now
                ),
                Err(AcquireError::Insufficient { retry_after }) => {
                    assert!(q(nanos(retry_after)) + budget >= wait);
                }
                Err(other) => panic!("cost {cost} refused with {other:?}"),
            }
        }
        if let Ok(w) = got {
            self.model.credit -= q(cost);
            let start = self.model.now + nanos(w);
            self.stretches
                .last_mut()
                .unwrap()
                .starts
                .push((start, cost));
        }
    }

    fn take(&mut self, cost: u64) {
        let credit_before = self.model.credit;
        let got = Receipt::take(self.bucket, cost);
        self.decided(
            cost,
            Duration::ZERO,
            got.as_ref().map(|_| Duration::ZERO).map_err(|e| *e),
        );
        if let Ok(receipt) = got {
            self.held.push(Held {
                receipt,
                cost,
                stretch: self.stretches.len() - 1,
                taken_at_op: self.ops,
                credit_before,
            });
        }
    }

    /// Undoes a receipt whose give-back the model can tell exactly: one
    /// taken before a change (nothing comes back), or one taken by the
    /// operation just before at the same instant (all of it comes back).
    /// Any other receipt is kept.
    fn undo(&mut self, i: usize) {
        if self.held.is_empty() {
            return;
        }
        let held = self.held.remove(i % self.held.len());
        let current = self.stretches.len() - 1;
        if held.stretch != current {
            let before = (self.bucket.available(), self.bucket.retry_after(1));
            held.receipt.undo();
            assert_eq!(
                (self.bucket.available(), self.bucket.retry_after(1)),
                before,
                "an undo across a change gave something back"
            );
        } else if held.taken_at_op + 1 == self.ops
            && self.stretches[current].starts.last() == Some(&(self.model.now, held.cost))
        {
            held.receipt.undo();
            self.model.credit = held.credit_before;
            self.stretches[current].starts.pop();
        } else {
            held.receipt.keep();
        }
    }

    fn set_quota(&mut self, to: Spec) {
        let before = self.bucket.quota();
        let available = self.bucket.available();
        self.bucket.set_quota(to.quota());
        if self.bucket.quota() == before {
            // The quota in force again, or one of the same arithmetic:
            // nothing changed (the model must not carry, which would drop
            // the refill under way).
            assert_eq!(self.bucket.available(), available);
            return;
        }
        assert_eq!(self.bucket.quota(), to.quota());
        self.exact &= to.quota().is_exact();
        let carried = self.model.change(to, self.exact);
        let now = self.model.now;
        assert!(self.bucket.available() <= available.min(to.capacity));
        self.stretches.push(Stretch {
            spec: to,
            from: now,
            carried,
            starts: Vec::new(),
        });
    }

    fn check_available(&self) {
        let available = self.bucket.available();
        assert!(available <= self.spec().capacity);
        if self.exact {
            assert_eq!(
                available,
                self.model.available(),
                "at {} ns",
                self.model.now
            );
        } else {
            assert!(
                available <= self.model.available(),
                "at {} ns",
                self.model.now
            );
        }
    }

    /// Each stretch's envelopes, over the start times of the admissions
    /// decided in it, widened by 1 ns for waits rounded up to whole
    /// nanoseconds.
    fn assert_envelopes(&self) {
        for stretch in &self.stretches {
            stretch
                .spec
                .envelope(stretch.spec.capacity)
                .assert_holds_over(&stretch.starts, 1);
            let mut starts = stretch.starts.clone();
            starts.sort_unstable();
            let envelope = stretch.spec.envelope(stretch.carried);
            let mut spent = 0u128;
            for (start, cost) in starts {
                spent += u128::from(cost);
                assert!(
                    envelope.admits(spent, start - stretch.from + 1),
                    "{spent} started by {start} ns in a stretch from {} ns carrying {}",
                    stretch.from,
                    stretch.carried
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn quota_changes_follow_the_rule_and_keep_each_envelope(
        spec in spec(),
        events in prop::collection::vec((gap(), op()), 1..48),
    ) {
        Harness::run(spec, &events).assert_envelopes();
    }
}

fn quota(capacity: u64, tokens: u64, period: Duration) -> Quota {
    Quota::new(capacity, tokens, period).unwrap()
}

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn the_same_quota_changes_nothing() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::with_clock(quota(4, 2, SECOND), clock.clone());
    let receipt = Receipt::take(&bucket, 3).unwrap();
    // Another form of the same capacity and rate, another initial credit.
    bucket.set_quota(
        quota(4, 4, 2 * SECOND)
            .with_initial_credit(tollgate::InitialCredit::Empty)
            .unwrap(),
    );
    assert_eq!(bucket.quota(), quota(4, 2, SECOND));
    // Still the same generation: the receipt gives its tokens back.
    receipt.undo();
    assert_eq!(bucket.available(), 4);
}

#[test]
fn a_change_of_tick_unit_carries_the_tokens_exactly() {
    let clock = ManualClock::new();
    // 3 per second: ticks of a third of a nanosecond.
    let bucket = TokenBucket::with_clock(quota(6, 3, SECOND), clock.clone());
    bucket.try_acquire(6).unwrap();
    clock.advance(Duration::from_millis(1500)); // 4.5 tokens
    // 7 per second: ticks of a seventh.
    bucket.set_quota(quota(10, 7, SECOND));
    assert_eq!(bucket.available(), 4);
    // From 4, the fifth token is one seventh of a second away.
    assert_eq!(bucket.retry_after(5), Ok(Duration::from_nanos(142_857_143)));
    // Whole nanoseconds again, at one per millisecond.
    bucket.set_quota(quota(2, 1000, SECOND));
    assert_eq!(bucket.available(), 2);
}

#[test]
fn reservations_keep_their_start_times_across_a_change() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::with_clock(quota(2, 2, SECOND), clock.clone());
    bucket.try_acquire(2).unwrap();
    // Two promised starts, at 0.5 s and 1 s.
    let max = Duration::from_secs(10);
    assert_eq!(bucket.reserve(1, max), Ok(Duration::from_millis(500)));
    assert_eq!(bucket.reserve(1, max), Ok(SECOND));
    // A slower quota: the debt is paid at 1 s, whatever the rate. The next
    // token is then one new interval (2 s) after it.
    bucket.set_quota(quota(1, 1, 2 * SECOND));
    assert_eq!(bucket.available(), 0);
    assert_eq!(bucket.reserve(1, max), Ok(3 * SECOND));
    // A faster one keeps the instant as well.
    let clock = ManualClock::new();
    let bucket = TokenBucket::with_clock(quota(2, 2, SECOND), clock.clone());
    bucket.try_acquire(2).unwrap();
    bucket.reserve(2, max).unwrap(); // starts at 1 s
    bucket.set_quota(quota(100, 100, SECOND));
    assert_eq!(bucket.reserve(1, max), Ok(Duration::from_millis(1010)));
}

#[test]
fn receipts_taken_before_a_change_give_nothing_back() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::with_clock(quota(10, 10, SECOND), clock.clone());
    let before = Receipt::take(&bucket, 8).unwrap();
    bucket.set_quota(quota(10, 5, SECOND));
    assert_eq!(bucket.available(), 2);
    before.undo();
    assert_eq!(bucket.available(), 2);
    // Even with the quota changed back: another generation.
    let before = Receipt::take(&bucket, 2).unwrap();
    bucket.set_quota(quota(10, 10, SECOND));
    before.undo();
    assert_eq!(bucket.retry_after(1), Ok(Duration::from_millis(100)));
    // One taken after the change gives back as usual.
    clock.advance(SECOND);
    let receipt = Receipt::take(&bucket, 4).unwrap();
    assert_eq!(bucket.available(), 6);
    receipt.undo();
    assert_eq!(bucket.available(), 10);
}

#[test]
fn changes_back_and_forth_never_gain() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(3));
    let bucket = TokenBucket::with_clock(quota(50, 7, SECOND), clock.clone());
    bucket.try_acquire(17).unwrap();
    clock.advance(Duration::from_millis(100)); // 33.7 tokens
    let quotas = [
        quota(50, 7, SECOND),
        quota(40, 3, SECOND),
        quota(64 << 20, 3_000_000_007, SECOND),
        quota(1000, 1000, Duration::from_nanos(333)),
    ];
    let mut last = bucket.available();
    for round in 0..20 {
        bucket.set_quota(quotas[round % quotas.len()]);
        let now = bucket.available();
        assert!(now <= last, "round {round}: {now} > {last}");
        last = now;
    }
    assert!(last <= 33);
}

/// A thread changing the quota over and over while others take one token
/// at a time, on a clock the changer steps: every admission is bounded by
/// the first capacity plus what each quota refilled while in force, since
/// a change carries tokens and never adds any.
#[test]
fn decisions_racing_changes_never_exceed_the_refills() {
    let quotas = [
        quota(100, 100, SECOND),
        quota(30, 7, SECOND),
        quota(500, 3, Duration::from_millis(1)),
        quota(1 << 20, 64 << 20, SECOND),
    ];
    let step = Duration::from_micros(300);
    for threads in [2, 4] {
        let clock = ManualClock::new();
        let bucket = TokenBucket::with_clock(quotas[0], clock.clone());
        let refilled = std::sync::Mutex::new(Ratio::from_integer(0u128));
        let changes = std::sync::atomic::AtomicUsize::new(0);
        // Each decider runs through at least every quota twice.
        let admitted: u64 = race_beside(
            threads,
            20_000,
            2 * quotas.len() as u64,
            |_, _, admitted: &mut u64| *admitted += u64::from(bucket.try_acquire(1).is_ok()),
            || {
                let i = changes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let quota = quotas[i % quotas.len()];
                bucket.set_quota(quota);
                // What this quota refills while in force.
                let (tokens, period) = quota.refill();
                let rate = Ratio::new(u128::from(tokens), period.as_nanos());
                *refilled.lock().unwrap() += rate * step.as_nanos();
                clock.advance(step);
            },
        )
        .into_iter()
        .sum();
        let bound = refilled.into_inner().unwrap() + u128::from(quotas[0].capacity());
        assert!(
            Ratio::from_integer(u128::from(admitted)) <= bound,
            "{threads} threads: {admitted} admitted, bound {bound}"
        );
        assert!(changes.into_inner() >= 2 * quotas.len());
    }
}

/// On a frozen clock nothing refills: whatever the changes, at most the
/// first capacity is ever admitted, by a plain bucket or a striped one.
#[test]
fn changes_on_a_frozen_clock_never_mint() {
    let quotas = [
        quota(1000, 1000, SECOND),
        quota(300, 7, SECOND),
        quota(5000, 3, SECOND),
    ];
    for threads in [2, 4] {
        let clock = ManualClock::new();
        clock.set(SECOND);
        let bucket = TokenBucket::with_clock(quotas[0], clock.clone());
        let striped = StripedBucket::with_clock(quotas[0], clock.clone(), threads, 16);
        let changes = std::sync::atomic::AtomicUsize::new(0);
        let admitted: Vec<(u64, u64)> = race_beside(
            threads,
            3000,
            2 * quotas.len() as u64,
            |_, _, taken: &mut (u64, u64)| {
                taken.0 += u64::from(bucket.try_acquire(1).is_ok());
                taken.1 += u64::from(striped.try_acquire(1).is_ok());
            },
            || {
                let i = changes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                bucket.set_quota(quotas[i % quotas.len()]);
                striped.set_quota(quotas[i % quotas.len()]);
            },
        );
        let plain: u64 = admitted.iter().map(|a| a.0).sum();
        let pooled: u64 = admitted.iter().map(|a| a.1).sum();
        assert!(plain <= 1000, "{threads} threads: {plain} admitted");
        assert!(
            pooled <= 1000,
            "{threads} threads, striped: {pooled} admitted"
        );
    }
}

#[test]
fn concurrent_changes_leave_one_of_them_in_force() {
    // Shown to race: a run counts only if two threads' changes interleaved.
    until_interleaved(1, |_| {
        let clock = ManualClock::new();
        let bucket = TokenBucket::with_clock(quota(10, 10, SECOND), clock.clone());
        let quotas: Vec<Quota> = (1..=8).map(|n| quota(n, n, SECOND)).collect();
        let order = Interleaving::default();
        let interleaved = race(8, |i| {
            let mut me = order.worker();
            for _ in 0..200 {
                bucket.set_quota(quotas[i]);
                me.step();
            }
            me.interleaved()
        });
        assert!(quotas.contains(&bucket.quota()));
        assert!(bucket.available() <= bucket.quota().capacity());
        interleaved.into_iter().any(|shown| shown)
    });
}

#[test]
fn a_striped_change_returns_the_pools_and_keeps_the_new_capacity() {
    let clock = ManualClock::new();
    let bucket = StripedBucket::with_clock(quota(100, 100, SECOND), clock.clone(), 1, 20);
    bucket.try_acquire(1).unwrap(); // leases 20: 19 pooled, 80 in the bucket
    assert_eq!((bucket.pooled(), bucket.bucket().available()), (19, 80));
    // The pool's tokens go back before the change: 99 carried, clipped to 50.
    bucket.set_quota(quota(50, 10, SECOND));
    assert_eq!(
        (bucket.pooled(), bucket.available(), bucket.lease()),
        (0, 50, 20)
    );
    assert_eq!(
        (0..100).filter(|_| bucket.try_acquire(1).is_ok()).count(),
        50
    );
    // The new pools lease in the new quota's ticks, which refill at 10/s.
    clock.advance(SECOND);
    assert_eq!(
        (0..100).filter(|_| bucket.try_acquire(1).is_ok()).count(),
        10
    );
    // A lease larger than the new capacity is clamped to it.
    bucket.set_quota(quota(4, 4, SECOND));
    assert_eq!(bucket.lease(), 4);
}

#[test]
fn a_change_made_on_a_striped_buckets_bucket_stops_its_pools_leasing() {
    let clock = ManualClock::new();
    let striped = StripedBucket::with_clock(quota(100, 100, SECOND), clock.clone(), 1, 10);
    striped.try_acquire(1).unwrap(); // 9 pooled, 90 in the bucket
    striped.bucket().set_quota(quota(100, 10, SECOND));
    // The pool spends what it holds, then leases nothing more: the leases
    // are in the new quota's ticks, and go straight back.
    let taken = (0..200).filter(|_| striped.try_acquire(1).is_ok()).count();
    assert_eq!(taken, 9 + 90);
    assert_eq!(striped.pooled(), 0);
}
