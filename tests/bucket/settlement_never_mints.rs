//! Settling an admission to its actual cost (`Receipt::settle`), against
//! an ideal bucket kept in exact rationals (credit refilled as
//! `min(B, credit + elapsed / T)`, a debt is negative credit):
//!
//! - settled at once (nothing admitted between), a receipt is the ideal
//!   bucket charged the actual cost, every observable equal;
//! - settled at any later time, among other admissions, the bucket lies
//!   between the ideal bucket that never gets anything back and the one
//!   that gets back all that is asked: it refuses nothing the first
//!   admits, and admits nothing the second refuses;
//! - the envelope of `docs/semantics.md` ("Settling to the actual cost")
//!   holds over every interval of the trace.

use std::time::Duration;

use proptest::prelude::*;
use tollgate::{AcquireError, Limit, ManualClock, Quota, Receipt, TokenBucket};

use common::{Q, q};
use tollgate_test_support::common;

/// An ideal bucket of capacity `B` refilling one token every `T` ns.
#[derive(Clone, Copy, Debug)]
struct Ideal {
    capacity: u64,
    interval_ns: u64,
    credit: Q,
    at_ns: u64,
}

impl Ideal {
    fn new(capacity: u64, interval_ns: u64) -> Ideal {
        Ideal {
            capacity,
            interval_ns,
            credit: q(capacity),
            at_ns: 0,
        }
    }

    fn refill(&mut self, now_ns: u64) {
        let gained = Q::new(
            i128::from(now_ns - self.at_ns),
            i128::from(self.interval_ns),
        );
        self.credit = (self.credit + gained).min(q(self.capacity));
        self.at_ns = now_ns;
    }

    fn admits(&self, cost: u64) -> bool {
        q(cost) <= self.credit
    }

    fn charge(&mut self, tokens: u64) {
        self.credit -= q(tokens);
    }

    fn give_back(&mut self, tokens: u64) {
        self.credit = (self.credit + q(tokens)).min(q(self.capacity));
    }

    /// Whole tokens available: none in debt.
    fn available(&self) -> u64 {
        let whole = self.credit.floor().to_integer();
        u64::try_from(whole.max(0)).unwrap()
    }

    /// The wait until one token fits, rounded up to the nanosecond.
    fn wait_for_one(&self) -> Duration {
        let missing = (q(1) - self.credit).max(q(0));
        let ns = (missing * q(self.interval_ns)).ceil().to_integer();
        Duration::from_nanos(u64::try_from(ns).unwrap())
    }
}

/// Exact quotas: a whole number of nanoseconds per token.
fn quota(capacity: u64, interval_ns: u64) -> Quota {
    Quota::new(capacity, 1, Duration::from_nanos(interval_ns)).unwrap()
}

const INTERVALS_NS: [u64; 4] = [1_000, 7_000, 1_000_000, 60_000_000];

proptest! {
    /// Settled at once, a receipt is the ideal bucket charged its actual
    /// cost: below the estimate the rest comes back exactly, above it the
    /// excess is debt the next admissions wait out, to the nanosecond.
    #[test]
    fn settled_at_once_is_the_ideal_bucket_charged_the_actual_cost(
        capacity in 1_u64..20,
        interval in 0..INTERVALS_NS.len(),
        steps in proptest::collection::vec((0_u64..40, 1_u64..20, 0_u64..60), 1..80),
    ) {
        let interval_ns = INTERVALS_NS[interval];
        let clock = ManualClock::new();
        let bucket = TokenBucket::with_clock(quota(capacity, interval_ns), clock.clone());
        let mut ideal = Ideal::new(capacity, interval_ns);
        let mut now = 0;
        for (advance, estimate, actual) in steps {
            // Advances in tenths of a token's interval.
            now += advance * interval_ns / 10;
            clock.set(Duration::from_nanos(now));
            ideal.refill(now);
            let estimate = estimate.min(capacity);
            match Receipt::take(&bucket, estimate) {
                Ok(receipt) => {
                    prop_assert!(ideal.admits(estimate), "admitted {estimate} beyond {:?}", ideal);
                    ideal.charge(estimate);
                    receipt.settle(actual);
                    if actual < estimate {
                        ideal.give_back(estimate - actual);
                    } else {
                        ideal.charge(actual - estimate);
                    }
                }
                Err(AcquireError::Insufficient { .. }) => {
                    prop_assert!(!ideal.admits(estimate), "refused {estimate} within {:?}", ideal);
                }
                Err(other) => prop_assert!(false, "{other:?}"),
            }
            prop_assert_eq!(bucket.available(), ideal.available());
            prop_assert_eq!(bucket.retry_after(1).unwrap(), ideal.wait_for_one());
        }
    }
}

/// One step of an interleaved trace.
#[derive(Clone, Debug)]
enum Step {
    /// Advance the clock by this many tenths of a token's interval.
    Advance(u64),
    /// Take a receipt for this estimate.
    Admit(u64),
    /// Settle the outstanding receipt at this index (modulo their number)
    /// to this actual cost.
    Settle(usize, u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0_u64..30).prop_map(Step::Advance),
        (1_u64..20).prop_map(Step::Admit),
        (0_usize..8, 0_u64..60).prop_map(|(i, actual)| Step::Settle(i, actual)),
    ]
}

/// A settled request: when it was admitted and settled, its estimate and
/// its actual cost.
#[derive(Clone, Copy, Debug)]
struct Settled {
    admitted_ns: u64,
    settled_ns: u64,
    /// Its place in the trace, to order it against admissions at the same
    /// instant.
    order: usize,
    estimate: u64,
    actual: u64,
}

proptest! {
    /// Settled later, among other admissions: never below the bucket that
    /// gets nothing back, never above the one that gets back all it asks;
    /// and over every interval `[s, e]` of the trace, the actual costs
    /// settled in it are at most `B + (e - s) / T`, plus the estimates
    /// outstanding at `s`, plus the excess debited after the interval's
    /// last admission.
    #[test]
    fn settled_later_stays_between_the_bounds_and_within_the_envelope(
        capacity in 1_u64..20,
        interval in 0..INTERVALS_NS.len(),
        steps in proptest::collection::vec(step(), 1..150),
    ) {
        let interval_ns = INTERVALS_NS[interval];
        let clock = ManualClock::new();
        let bucket = TokenBucket::with_clock(quota(capacity, interval_ns), clock.clone());
        // Driven by the bucket's own decisions: `never_back` gets nothing
        // back, `all_back` all that is asked.
        let (mut never_back, mut all_back) = (Ideal::new(capacity, interval_ns), Ideal::new(capacity, interval_ns));
        let mut outstanding: Vec<(Receipt<&TokenBucket<ManualClock>>, u64)> = Vec::new();
        // When each admission was made, and its place in the trace.
        let mut admissions: Vec<(u64, usize)> = Vec::new();
        let mut settled: Vec<Settled> = Vec::new();
        let mut now = 0;
        for (order, step) in steps.into_iter().enumerate() {
            match step {
                Step::Advance(tenths) => {
                    now += tenths * interval_ns / 10;
                    clock.set(Duration::from_nanos(now));
                }
                Step::Admit(estimate) => {
                    let estimate = estimate.min(capacity);
                    never_back.refill(now);
                    all_back.refill(now);
                    match Receipt::take(&bucket, estimate) {
                        Ok(receipt) => {
                            prop_assert!(all_back.admits(estimate), "admitted {estimate} beyond {:?}", all_back);
                            never_back.charge(estimate);
                            all_back.charge(estimate);
                            outstanding.push((receipt, now));
                            admissions.push((now, order));
                        }
                        Err(_) => prop_assert!(!never_back.admits(estimate), "refused {estimate} within {:?}", never_back),
                    }
                }
                Step::Settle(index, actual) => {
                    if outstanding.is_empty() {
                        continue;
                    }
                    let (receipt, admitted_ns) = outstanding.swap_remove(index % outstanding.len());
                    let estimate = receipt.tokens();
                    never_back.refill(now);
                    all_back.refill(now);
                    receipt.settle(actual);
                    if actual > estimate {
                        never_back.charge(actual - estimate);
                        all_back.charge(actual - estimate);
                    } else {
                        all_back.give_back(estimate - actual);
                    }
                    settled.push(Settled { admitted_ns, settled_ns: now, order, estimate, actual });
                }
            }
            never_back.refill(now);
            all_back.refill(now);
            let available = bucket.available();
            prop_assert!(never_back.available() <= available && available <= all_back.available(),
                "{available} outside [{:?}, {:?}]", never_back, all_back);
        }
        assert_envelope(capacity, interval_ns, &settled, &admissions);
    }
}

/// The envelope with settlement over every interval between two event
/// times.
fn assert_envelope(
    capacity: u64,
    interval_ns: u64,
    settled: &[Settled],
    admissions: &[(u64, usize)],
) {
    let mut times: Vec<u64> = settled
        .iter()
        .flat_map(|s| [s.admitted_ns, s.settled_ns])
        .chain(admissions.iter().map(|&(at, _)| at))
        .collect();
    times.sort_unstable();
    times.dedup();
    for (i, &start) in times.iter().enumerate() {
        for &end in &times[i..] {
            let within = |s: &&Settled| (start..=end).contains(&s.settled_ns);
            let actual: u64 = settled.iter().filter(within).map(|s| s.actual).sum();
            let outstanding: u64 = settled
                .iter()
                .filter(within)
                .filter(|s| s.admitted_ns < start)
                .map(|s| s.estimate)
                .sum();
            let last_admission = admissions
                .iter()
                .filter(|(at, _)| (start..=end).contains(at))
                .map(|&(_, order)| order)
                .max();
            let trailing_debt: u64 = settled
                .iter()
                .filter(within)
                .filter(|s| last_admission.is_none_or(|order| s.order > order))
                .map(|s| s.actual.saturating_sub(s.estimate))
                .sum();
            // B + (e - s) / T, in units of 1/T ns.
            let bound = u128::from(capacity + outstanding + trailing_debt)
                * u128::from(interval_ns)
                + u128::from(end - start);
            assert!(
                u128::from(actual) * u128::from(interval_ns) <= bound,
                "{actual} settled in [{start}, {end}] ns: beyond B = {capacity}, T = {interval_ns} ns, \
                 {outstanding} outstanding, {trailing_debt} trailing debt"
            );
        }
    }
}

/// Every limit settles: a key of a keyed limiter (its debt kept, even for
/// a key swept since), a counted limit (a settlement is no abandonment), a
/// striped bucket (charged to its bucket), and the window counters (the
/// excess counted in the window of the settlement).
#[cfg(feature = "keyed")]
#[test]
fn every_limit_settles() {
    use tollgate::{
        Counted, FixedWindow, KeyedFixedWindow, KeyedLimiter, StripedBucket, WindowQuota,
    };
    let clock = ManualClock::new();
    let per_second = Quota::per_second(10).unwrap();

    let keyed = KeyedLimiter::builder(per_second)
        .clock(clock.clone())
        .build::<u32>();
    Receipt::take(keyed.key(&7), 2).unwrap().settle(25);
    assert_eq!(
        keyed.key(&7).retry_after(1).unwrap(),
        Duration::from_millis(1_600)
    );
    assert_eq!(keyed.key(&8).available(), 10, "other keys are untouched");
    // A key swept full, then settled above its estimate, is tracked again
    // in debt.
    let receipt = Receipt::take(keyed.key(&9), 1).unwrap();
    clock.advance(Duration::from_secs(1));
    keyed.sweep();
    assert_eq!(keyed.len(), 1, "key 9 refilled and swept; 7 is in debt");
    receipt.settle(21);
    assert_eq!(
        keyed.key(&9).retry_after(1).unwrap(),
        Duration::from_millis(1_100)
    );

    let counted = Counted::new(TokenBucket::with_clock(per_second, clock.clone()));
    Receipt::take(&counted, 4).unwrap().settle(1);
    assert_eq!(counted.available(), 9);
    assert_eq!(
        counted.stats().abandoned,
        0,
        "a settlement is not an abandonment"
    );

    let striped = StripedBucket::with_clock(per_second, clock.clone(), 2, 2);
    Receipt::take(&striped, 5).unwrap().settle(15);
    assert_eq!(striped.retry_after(1).unwrap(), Duration::from_millis(600));

    let window =
        FixedWindow::with_clock(WindowQuota::per_second(10).unwrap(), clock.clone()).unwrap();
    Receipt::take(&window, 3).unwrap().settle(12);
    assert_eq!(window.available(), 0, "the window is spent until it ends");
    let keyed_window = KeyedFixedWindow::builder(WindowQuota::per_second(10).unwrap())
        .clock(clock.clone())
        .build_fixed::<u32>()
        .unwrap();
    Receipt::take(keyed_window.key(&1), 3).unwrap().settle(1);
    assert_eq!(keyed_window.key(&1).available(), 9);
    Receipt::take(keyed_window.key(&1), 1).unwrap().settle(30);
    assert_eq!(keyed_window.key(&1).available(), 0);
    assert_eq!(keyed_window.key(&2).available(), 10);
}

/// A key decided by the overflow bucket (at the key cap) and settled above
/// its estimate carries the debt into a bucket of its own made later: it
/// cannot leave its debt to the keys that share the overflow bucket.
#[cfg(feature = "keyed")]
#[test]
fn a_key_settled_in_the_overflow_bucket_keeps_its_debt_in_its_own() {
    use std::num::NonZeroUsize;
    use tollgate::{AtCapacity, KeyedLimiter};
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(Quota::per_second(10).unwrap())
        .clock(clock.clone())
        .max_keys(NonZeroUsize::new(1).unwrap().into())
        .at_capacity(AtCapacity::SharedOverflow)
        .sweep_interval(None)
        .build::<u32>();
    Receipt::take(limiter.key(&1), 1).unwrap().keep();
    // Key 2 has no room: decided by the overflow bucket, and settled to 30.
    Receipt::take(limiter.key(&2), 1).unwrap().settle(30);
    clock.advance(Duration::from_secs(1));
    // Key 1 refilled and is swept: key 2 gets a bucket of its own.
    assert_eq!(limiter.sweep(), 1);
    // 30 charged at 0 against a burst of 10, 10 refilled since: 10 in
    // debt, 1 s to repay and 100 ms to the next token.
    assert_eq!(
        limiter.key(&2).retry_after(1).unwrap(),
        Duration::from_millis(1_100)
    );
}
