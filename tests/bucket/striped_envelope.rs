//! The striped bucket: exact accounting on a frozen clock, the envelope
//! `B + r·t` over every interval against random traces on many stripes, on
//! real threads racing a moving clock, and on the real clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::{Clock, Limit, ManualClock, Quota, StripedBucket};

use common::{Envelope, Interleaving, race, race_beside, until_interleaved};
use tollgate_test_support::common;

/// On a frozen clock, however threads and stripes race, what they admitted
/// plus what the pools hold plus what the bucket holds is exactly the
/// capacity: no token minted or lost. A flush then moves pooled tokens back
/// into the bucket, dropping only those of older leases.
#[test]
fn frozen_clock_accounting_is_exact() {
    const CAPACITY: u64 = 5_000;
    for (threads, stripes) in [(2, 2), (4, 2), (8, 4), (8, 8)] {
        // Shown to race: a run counts only if two threads' admissions
        // interleaved (`common::Interleaving`).
        until_interleaved(1, |_| {
            let clock = ManualClock::new();
            clock.set(Duration::from_secs(3));
            let bucket =
                StripedBucket::with_clock(Quota::per_second(CAPACITY).unwrap(), clock, stripes, 64);
            let order = Interleaving::default();
            let tallies = race(threads, |_| {
                let mut me = order.worker();
                let mut admitted = 0;
                for _ in 0..2_000 {
                    if bucket.try_acquire(1).is_ok() {
                        me.step();
                        admitted += 1;
                    }
                }
                (admitted, me.interleaved())
            });
            let admitted: u64 = tallies.iter().map(|t| t.0).sum();
            let pooled = bucket.pooled();
            assert_eq!(
                admitted + pooled + bucket.bucket().available(),
                CAPACITY,
                "{threads} threads, {stripes} stripes: {admitted} admitted, {pooled} pooled"
            );
            let returned = bucket.flush();
            assert!(returned <= pooled);
            assert_eq!(bucket.pooled(), 0);
            let available = bucket.bucket().available();
            assert!(admitted + available <= CAPACITY);
            assert!(admitted + available + stripes as u64 * 64 >= CAPACITY);
            tallies.iter().any(|t| t.1)
        });
    }
}

/// On the real clock, admissions stay within `B + r·t` over the run.
#[test]
fn real_clock_admissions_stay_within_the_envelope() {
    let (capacity, rate) = (100, 50_000);
    for threads in [2, 4, 8] {
        until_interleaved(1, |_| {
            let bucket = StripedBucket::new(
                Quota::new(capacity, rate, Duration::from_secs(1)).unwrap(),
                4,
                16,
            );
            let order = Interleaving::default();
            let start = bucket.bucket().clock().now_nanos();
            let tallies = race(threads, |_| {
                let mut me = order.worker();
                let mut admitted = 0;
                for _ in 0..20_000 {
                    if bucket.try_acquire(1).is_ok() {
                        me.step();
                        admitted += 1;
                    }
                }
                (admitted, me.interleaved())
            });
            let admitted: u64 = tallies.iter().map(|t| t.0).sum();
            let elapsed = bucket.bucket().clock().now_nanos() - start;
            let envelope = Envelope {
                capacity,
                tokens: rate,
                period_ns: 1_000_000_000,
            };
            assert!(admitted >= capacity / 2, "{threads} threads: {admitted}");
            assert!(
                envelope.admits(u128::from(admitted), elapsed),
                "{admitted} in {elapsed} ns"
            );
            tallies.iter().any(|t| t.1)
        });
    }
}

#[test]
fn a_cost_above_the_lease_goes_to_the_bucket_and_bad_costs_are_typed() {
    let bucket =
        StripedBucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new(), 2, 2);
    bucket.try_acquire(5).unwrap();
    assert_eq!(bucket.try_acquire(0), Err(tollgate::AcquireError::ZeroCost));
    assert!(matches!(
        bucket.try_acquire(11),
        Err(tollgate::AcquireError::ExceedsCapacity { .. })
    ));
}

/// A cost above the lease can never come from a pool, so it must not lease
/// first: the tokens leased would be missing from the bucket it goes to. A
/// full bucket of 3 with a lease of 2 admits a cost of 3, every time it is
/// full again, and never refuses it with a wait after which it would refuse
/// again.
#[test]
fn a_full_bucket_admits_a_cost_above_the_lease() {
    let clock = ManualClock::new();
    let quota = Quota::new(3, 1, Duration::from_millis(4)).unwrap();
    let bucket = StripedBucket::with_clock(quota, &clock, 2, 2);
    for _ in 0..3 {
        assert_eq!(bucket.retry_after(3), Ok(Duration::ZERO));
        assert_eq!(bucket.try_acquire(3), Ok(()));
        assert_eq!(
            bucket.try_acquire(3),
            Err(tollgate::AcquireError::Insufficient {
                retry_after: Duration::from_millis(12)
            })
        );
        clock.advance(Duration::from_millis(12));
    }
    // Spent through a pool first, the rest of the bucket still serves it
    // once the refill has covered the pool's lease.
    bucket.try_acquire(1).unwrap();
    clock.advance(Duration::from_millis(12));
    assert_eq!(bucket.try_acquire(3), Ok(()));
}

/// A pool's tokens must not outlive the refill of the
/// slots they were leased in. Take 5 at t = 0 on B = 10 (one stripe, a lease
/// of the whole capacity), let 100 s pass: one instant then admits at most
/// B = 10, as a plain bucket would, and never the 5 pooled tokens on top.
#[test]
fn pooled_tokens_expire_as_the_bucket_refills() {
    let clock = ManualClock::new();
    let bucket = StripedBucket::with_clock(Quota::per_second(10).unwrap(), clock.clone(), 1, 10);
    for _ in 0..5 {
        bucket.try_acquire(1).unwrap();
    }
    clock.advance(Duration::from_secs(100));
    assert!(
        bucket.bucket().available() + bucket.pooled() <= 10,
        "{} available beside {} pooled",
        bucket.bucket().available(),
        bucket.pooled()
    );
    let at_one_instant = (0..100).filter(|_| bucket.try_acquire(1).is_ok()).count();
    assert_eq!(at_one_instant, 10);
}

/// A few threads that each keep their own stripe and take from one striped
/// bucket on request, one request at a time: a deterministic trace over many
/// stripes. Dropping it ends the threads.
struct Takers {
    requests: Vec<mpsc::Sender<u64>>,
    admitted: mpsc::Receiver<bool>,
}

impl Takers {
    fn spawn<'scope>(
        scope: &'scope thread::Scope<'scope, '_>,
        bucket: &'scope StripedBucket<ManualClock>,
        count: usize,
    ) -> Self {
        let (reply, admitted) = mpsc::channel();
        let requests = (0..count)
            .map(|_| {
                let (request, costs) = mpsc::channel::<u64>();
                let reply = reply.clone();
                scope.spawn(move || {
                    for cost in costs {
                        reply.send(bucket.try_acquire(cost).is_ok()).unwrap();
                    }
                });
                request
            })
            .collect();
        Takers { requests, admitted }
    }

    /// Whether taker `index` was admitted `cost`.
    fn take(&self, index: usize, cost: u64) -> bool {
        self.requests[index % self.requests.len()]
            .send(cost)
            .unwrap();
        self.admitted.recv().unwrap()
    }
}

/// One step of a trace.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Taker `.0` asks for `.1 % capacity + 1` tokens.
    Take(usize, u64),
    /// The clock moves forward by this many 64ths of an emission interval.
    Sixtyfourths(u64),
    /// The clock moves forward by this many 64ths of a whole refill.
    Refills(u64),
    /// The clock moves back by this many 64ths of a whole refill.
    Back(u64),
    /// A flush, unless the clock has gone back: a flush gives back by the
    /// undo rule, which assumes a clock that does not go backwards
    /// (`docs/proofs.md`, "Hierarchies: undo without minting"), while takes
    /// and leases assume nothing of it.
    Flush,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => (0usize..4, 0u64..64).prop_map(|(taker, k)| Step::Take(taker, k)),
        3 => (0u64..=128).prop_map(Step::Sixtyfourths),
        2 => (0u64..=256).prop_map(Step::Refills),
        1 => (1u64..=64).prop_map(Step::Back),
        1 => Just(Step::Flush),
    ]
}

/// A quota, the striping and a trace.
#[derive(Clone, Copy, Debug)]
struct Shape {
    capacity: u64,
    tokens: u64,
    period_ns: u64,
    stripes: usize,
    takers: usize,
    /// The lease, as `.lease % capacity + 1`.
    lease: u64,
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        1u64..=24,
        1u64..=9,
        prop::sample::select(&[1_000_000_000u64, 7_000_000_000, 1_000_000, 333, 12_345][..]),
        1usize..=4,
        1usize..=4,
        0u64..64,
    )
        .prop_map(
            |(capacity, tokens, period_ns, stripes, takers, lease)| Shape {
                capacity,
                tokens,
                period_ns,
                stripes,
                takers,
                lease,
            },
        )
}

impl Shape {
    fn envelope(&self) -> Envelope {
        Envelope {
            capacity: self.capacity,
            tokens: self.tokens,
            period_ns: self.period_ns,
        }
    }

    /// Runs `steps` and returns the admissions as `(reading_ns, cost)`,
    /// asserting after every step that the bucket's credit and the usable
    /// pooled tokens together never exceed the capacity.
    fn run(&self, steps: &[Step]) -> Vec<(u64, u64)> {
        let quota = Quota::new(
            self.capacity,
            self.tokens,
            Duration::from_nanos(self.period_ns),
        )
        .unwrap();
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(1));
        let bucket = StripedBucket::with_clock(
            quota,
            clock.clone(),
            self.stripes,
            self.lease % self.capacity + 1,
        );
        let interval_ns = (self.period_ns / self.tokens).max(1);
        let refill_ns = interval_ns * self.capacity;
        let (mut admitted, mut gone_back) = (Vec::new(), false);
        thread::scope(|scope| {
            let takers = Takers::spawn(scope, &bucket, self.takers);
            for &step in steps {
                let now = clock.now_nanos();
                match step {
                    Step::Take(taker, k) => {
                        let cost = k % self.capacity + 1;
                        if takers.take(taker, cost) {
                            admitted.push((now, cost));
                        }
                    }
                    Step::Sixtyfourths(n) => {
                        clock.advance(Duration::from_nanos(interval_ns * n / 64));
                    }
                    Step::Refills(n) => clock.advance(Duration::from_nanos(refill_ns * n / 64)),
                    Step::Back(n) => {
                        clock.set(Duration::from_nanos(now.saturating_sub(refill_ns * n / 64)));
                        gone_back = true;
                    }
                    Step::Flush if gone_back => {}
                    Step::Flush => {
                        bucket.flush();
                    }
                }
                let (available, pooled) = (bucket.bucket().available(), bucket.pooled());
                assert!(
                    available + pooled <= self.capacity,
                    "after {step:?}: {available} available beside {pooled} pooled"
                );
            }
            // The other half: a bucket that refused everything would keep
            // the envelope. Idle for four refills past anything the trace
            // did (what the pools held has expired), it admits its whole
            // burst, a lease at a time.
            clock.advance(Duration::from_nanos(4 * refill_ns + 1_000_000_000));
            let lease = self.lease % self.capacity + 1;
            let mut taken = 0;
            while taken < self.capacity {
                let cost = lease.min(self.capacity - taken);
                assert!(
                    takers.take(0, cost),
                    "idle and full, refused after {taken} of {}",
                    self.capacity
                );
                taken += cost;
            }
        });
        admitted
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        // Regression files would land outside the files this suite owns.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random takes by up to four threads on up to four stripes, idle gaps,
    /// long jumps, flushes and the clock going back: over every pair of
    /// event times, the cost admitted is at most `B + r·(t_e − t_s)`,
    /// computed exactly, and after every step the bucket's credit plus the
    /// usable pooled tokens is at most `B`; idle at the end, the whole burst
    /// is admitted.
    #[test]
    fn random_traces_on_many_stripes_stay_within_the_envelope(
        shape in shape(),
        steps in prop::collection::vec(step(), 1..96),
    ) {
        shape.envelope().assert_holds_over(&shape.run(&steps), 0);
    }
}

/// Checks the envelope for admissions known only up to the bracket of clock
/// readings around each call: every interval `[s, e]` between two bracket
/// ends holds at most `B + r·(e − s)` of the calls bracketed inside it.
fn assert_bracketed_envelope(envelope: &Envelope, admitted: &mut [(u64, u64, u64)]) {
    admitted.sort_unstable_by_key(|&(_, after, _)| after);
    let mut starts: Vec<u64> = admitted.iter().map(|&(before, ..)| before).collect();
    starts.sort_unstable();
    starts.dedup();
    for &start in &starts {
        let mut spent = 0u128;
        for &(before, after, cost) in admitted.iter() {
            if after < start {
                continue;
            }
            if before >= start {
                spent += u128::from(cost);
                assert!(
                    envelope.admits(spent, after - start),
                    "{spent} tokens in [{start}, {after}] ns exceed {envelope:?}"
                );
            }
        }
    }
}

/// Real threads, more of them than stripes, take while another thread moves
/// a manual clock forward in small steps and sometimes by a whole refill,
/// and one of them flushes now and then. They trickle between jumps, so that
/// pools hold tokens while the bucket refills, and burst after each jump, so
/// that anything a pool kept past its slots would show: admissions, each
/// placed between the clock readings around its call, stay within the
/// envelope over every interval.
#[test]
fn threads_racing_a_moving_clock_stay_within_the_envelope() {
    const STEPS: u64 = 1_000;
    let (capacity, tokens, period_ns) = (40, 1_000, 1_000_000_000u64);
    let refill_ns = period_ns / tokens * capacity;
    for (threads, stripes, lease) in [(2, 2, 8), (4, 2, 16), (6, 4, 40)] {
        let clock = ManualClock::new();
        let quota = Quota::new(capacity, tokens, Duration::from_nanos(period_ns)).unwrap();
        let bucket = StripedBucket::with_clock(quota, clock.clone(), stripes, lease);
        let (steps, calls, calls_seen) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
        // One round each: a worker's round runs until the clock has made
        // all its steps, which it makes only while the workers move.
        let per_thread = race_beside(
            threads,
            1,
            0,
            |thread, _, admitted: &mut Vec<(u64, u64, u64)>| {
                let mut burst_at = 0;
                // Until the clock has made all its steps, so that every
                // thread sees the whole range however they are scheduled.
                for i in 0u64.. {
                    if steps.load(Ordering::Relaxed) >= STEPS {
                        break;
                    }
                    calls.fetch_add(1, Ordering::Relaxed);
                    if thread == 0 && i % 500 == 0 {
                        bucket.flush();
                    }
                    let now = clock.now_nanos();
                    let attempts = if now >= burst_at + refill_ns {
                        burst_at = now;
                        64
                    } else {
                        u64::from(i % 32 == 0)
                    };
                    for cost in (0..attempts).map(|k| 1 + (i + k) % 3) {
                        let before = clock.now_nanos();
                        if bucket.try_acquire(cost).is_ok() {
                            admitted.push((before, clock.now_nanos(), cost));
                        }
                    }
                    thread::yield_now();
                }
            },
            // A tenth of a token per step and a whole refill every fifty
            // steps, up to a bounded number of steps so that the readings
            // stay few; a step only once the takers have moved on, so that
            // no scheduling lets the clock run out before they start.
            || {
                let seen = calls.load(Ordering::Relaxed);
                if seen == calls_seen.swap(seen, Ordering::Relaxed) {
                    thread::yield_now();
                    return;
                }
                let step = steps.fetch_add(1, Ordering::Relaxed);
                if step < STEPS {
                    let tenths = if step % 50 == 49 { capacity * 10 } else { 1 };
                    clock.advance(Duration::from_nanos(period_ns / tokens / 10 * tenths));
                }
                thread::yield_now();
            },
        );
        let mut admitted: Vec<_> = per_thread.into_iter().flatten().collect();
        let spent: u64 = admitted.iter().map(|&(.., cost)| cost).sum();
        assert!(spent >= capacity / 2, "{threads} threads: {spent} admitted");
        let envelope = Envelope {
            capacity,
            tokens,
            period_ns,
        };
        assert_bracketed_envelope(&envelope, &mut admitted);
    }
}

/// However many stripes are asked for, a striped bucket has between one
/// and `MAX_STRIPES` (more would never be used by more threads than a
/// machine runs, and would only cost memory and every `flush`'s and
/// `pooled`'s walk): asking for `usize::MAX` builds the largest, as
/// asking for 0 builds the smallest, and either decides as any other.
#[test]
fn a_stripe_count_out_of_range_is_clamped_into_it() {
    const MAX: usize = StripedBucket::MAX_STRIPES;
    let huge = |bits: u32| usize::try_from(1u64 << bits).unwrap_or(usize::MAX);
    for (asked, built) in [
        (0, 1),
        (1, 1),
        (MAX, MAX),
        (MAX + 1, MAX),
        (huge(32), MAX),
        (huge(40), MAX),
        (usize::MAX, MAX),
    ] {
        let bucket = StripedBucket::new(Quota::per_second(10).unwrap(), asked, 2);
        assert_eq!(bucket.stripes(), built, "{asked} stripes");
        let clocked =
            StripedBucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new(), asked, 2);
        assert_eq!(clocked.stripes(), built, "{asked} stripes");
        assert!(clocked.try_acquire(1).is_ok());
        clocked.set_quota(Quota::per_second(20).unwrap());
        assert_eq!(clocked.stripes(), built, "{asked} stripes after a change");
        assert_eq!(clocked.available(), 9, "what it held carries over");
    }
}

/// A lease is clamped to 1 ..= the capacity of the quota in force, at
/// construction and across a change.
#[test]
fn a_lease_out_of_range_is_clamped_into_it() {
    for (asked, built) in [(0, 1), (1, 1), (10, 10), (11, 10), (u64::MAX, 10)] {
        let bucket =
            StripedBucket::with_clock(Quota::per_second(10).unwrap(), ManualClock::new(), 2, asked);
        assert_eq!(bucket.lease(), built, "lease {asked}");
        assert!(bucket.try_acquire(1).is_ok());
        bucket.set_quota(Quota::per_second(4).unwrap());
        assert_eq!(bucket.lease(), built.min(4), "lease {asked} after a change");
    }
}
