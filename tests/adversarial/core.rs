//! Attacks on the bucket, receipts and hierarchies.

use std::time::Duration;

#[cfg(feature = "keyed")]
use tollgate::KeyedLimiter;
use tollgate::{
    AcquireError, Clock, HierarchyError, Limit, MAX_STEPS, ManualClock, Quota, Receipt,
    TokenBucket, try_acquire_all,
};

#[cfg(feature = "tokio")]
use crate::common::poll_once;
use crate::common::{Envelope, RefusedBy};

const SECOND: Duration = Duration::from_secs(1);

fn bucket(capacity: u64, clock: &ManualClock) -> TokenBucket<ManualClock> {
    let quota = Quota::new(capacity, 1, SECOND).expect("valid quota");
    TokenBucket::with_clock(quota, clock.clone())
}

/// A chain of limits, however long, never overflows the stack: a caller
/// who builds one from client input (a step per tag, say) gets a typed
/// refusal that spends nothing. It recursed once per step before, and
/// 100 000 steps aborted the process; here on a 256 KiB stack, smaller
/// than a tokio worker's.
#[test]
fn a_chain_of_100_000_steps_is_refused_without_overflowing_a_small_stack() {
    let refused = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let clock = ManualClock::new();
            let limit = bucket(1_000_000, &clock);
            let steps = vec![limit.cost(1); 100_000];
            let refused = try_acquire_all(&steps);
            (refused, limit.available())
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(
        refused.0,
        Err(HierarchyError::TooManySteps { max: MAX_STEPS })
    );
    assert_eq!(refused.1, 1_000_000, "a refused chain spent something");
}

/// The longest chain allowed is all or nothing: when its last step refuses,
/// every one of the others gets its token back exactly (nothing moved the
/// clock or the buckets meanwhile).
#[test]
fn a_chain_of_max_steps_refused_at_its_last_step_spends_nothing() {
    let clock = ManualClock::new();
    let buckets: Vec<_> = (0..MAX_STEPS).map(|_| bucket(1, &clock)).collect();
    buckets[MAX_STEPS - 1].try_acquire(1).unwrap();
    let steps: Vec<_> = buckets.iter().map(|b| b.cost(1)).collect();
    let refused = try_acquire_all(&steps).refused_by();
    assert_eq!(refused.limit, MAX_STEPS - 1);
    for b in &buckets[..MAX_STEPS - 1] {
        assert_eq!(b.available(), 1);
    }
    buckets[MAX_STEPS - 1].reset();
    try_acquire_all(&steps).unwrap();
    assert!(buckets.iter().all(|b| b.available() == 0));
}

/// A receipt held until its cost has refilled gives nothing back: a caller
/// who "cancels" long-finished work cannot buy back a full bucket's worth
/// of credit on top of the refill.
#[test]
fn a_receipt_undone_after_its_cost_refilled_gives_nothing_back() {
    let clock = ManualClock::new();
    let limit = bucket(2, &clock);
    let receipt = Receipt::take(&limit, 2).unwrap();
    clock.advance(2 * SECOND);
    receipt.undo();
    // Full again by refill alone; a full return would not show here, so
    // spend and check the undo did not leave credit beyond the capacity.
    assert_eq!(limit.available(), 2);
    limit.try_acquire(2).unwrap();
    assert!(limit.try_acquire(1).is_err());
}

/// The hang-up attack on a bucket: take from a full bucket, hold the
/// tokens while it would have refilled anyway, let others spend, then give
/// back, over and over. Every window of what is admitted stays within
/// `B + r·t`; giving whole costs back would hand out the refill the full
/// bucket wasted (three admissions at one instant on `B = 2`).
#[test]
fn repeated_late_undos_never_break_the_envelope() {
    let clock = ManualClock::new();
    let limit = bucket(2, &clock);
    let mut events = Vec::new();
    let at = |clock: &ManualClock| clock.now_nanos();
    for round in 0..50u64 {
        let held = Duration::from_millis(250 * (round % 5 + 1));
        match Receipt::take(&limit, 1) {
            Ok(receipt) => {
                clock.advance(held);
                if limit.try_acquire(1).is_ok() {
                    events.push((at(&clock), 1));
                }
                receipt.undo();
            }
            Err(_) => clock.advance(held),
        }
        while limit.try_acquire(1).is_ok() {
            events.push((at(&clock), 1));
        }
    }
    let envelope = Envelope {
        capacity: 2,
        tokens: 1,
        period_ns: 1_000_000_000,
    };
    envelope.assert_holds_over(&events, 0);
}

/// An undo never trusts a state word that came back to its value once the
/// clock has moved: an inexact undo of an earlier receipt and a new
/// admission can put the word back (ABA), and returning the whole cost then
/// mints the refill of the time held. Found by review: 14 tokens at one
/// instant on `B = 10`.
#[test]
fn an_undo_whose_word_came_back_mints_nothing() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::with_clock(Quota::new(10, 1, SECOND).unwrap(), clock.clone());
    let a = Receipt::take(&bucket, 5).unwrap(); // 0 -> 5 s
    let b = Receipt::take(&bucket, 5).unwrap(); // 5 s -> 10 s
    a.undo(); // b came after: inexact path, 5 back (held 0): word = 5 s
    clock.advance(Duration::from_millis(4900));
    let mut admitted_now = 0;
    Receipt::take(&bucket, 5).unwrap().keep(); // word = 10 s = b's `after` again
    admitted_now += 5;
    b.undo(); // exact path: word -> 5 s, all 5 back although 4.9 s were held
    while bucket.try_acquire(1).is_ok() {
        admitted_now += 1;
    }
    // The envelope over the zero-length window [4.9 s, 4.9 s] is B = 10.
    assert!(
        admitted_now <= 10,
        "{admitted_now} tokens admitted at one instant from a bucket of capacity 10"
    );
}

/// The same with one-token receipts, one per request as the tower layer
/// takes them, undone latest first: the window `[0.9 s, 1.0 s]` stays
/// within `floor(10 + 0.1) = 10` (it admitted 11).
#[test]
fn one_token_undos_whose_words_came_back_keep_the_envelope() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::with_clock(Quota::new(10, 1, SECOND).unwrap(), clock.clone());
    let a: Vec<_> = (0..5).map(|_| Receipt::take(&bucket, 1).unwrap()).collect();
    let b: Vec<_> = (0..5).map(|_| Receipt::take(&bucket, 1).unwrap()).collect();
    for r in a {
        r.undo(); // each inexact (b came after), each fully back at t = 0
    }
    clock.advance(Duration::from_millis(900));
    let mut in_window = 0;
    for _ in 0..5 {
        Receipt::take(&bucket, 1).unwrap().keep();
        in_window += 1;
    }
    for r in b.into_iter().rev() {
        r.undo(); // each finds its own `after` again: exact, 1 back each
    }
    while bucket.try_acquire(1).is_ok() {
        in_window += 1;
    }
    clock.advance(Duration::from_millis(100));
    while bucket.try_acquire(1).is_ok() {
        in_window += 1;
    }
    assert!(
        in_window <= 10,
        "{in_window} tokens admitted in [0.9 s, 1.0 s]; the envelope is floor(10 + 0.1) = 10"
    );
}

/// A receipt of a key that was swept and created again never credits the
/// new bucket: without the ABA guard, an undo could put the word below what
/// a live receipt needs, the key was swept as full while that receipt was
/// owed, and its undo then landed on the recreated bucket (15 tokens at
/// one instant on `B = 10`).
#[cfg(feature = "keyed")]
#[test]
fn a_receipt_of_a_swept_and_recreated_key_credits_nothing() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::builder(Quota::new(10, 1, SECOND).unwrap())
        .clock(clock.clone())
        .sweep_interval(None)
        .build::<u32>();
    let key = limiter.key(&7);
    let a = Receipt::take(&key, 5).unwrap();
    let b = Receipt::take(&key, 5).unwrap();
    a.undo();
    clock.advance(Duration::from_millis(4900));
    let c = Receipt::take(&key, 5).unwrap(); // held from 4.9 s, cost 5 s
    b.undo(); // ABA: word 5 s although c needs >= 9.9 s
    clock.advance(Duration::from_millis(100));
    let swept = limiter.sweep(); // on main: 1 (word 5 s <= now 5 s) while c is owed
    let mut admitted_at_5s = 0;
    Receipt::take(&key, 5).unwrap().keep(); // recreated bucket: 5 s -> 10 s = c's `after`
    admitted_at_5s += 5;
    c.undo(); // exact path on the NEW bucket: 10 s -> 5 s
    while limiter.try_acquire(&7, 1).is_ok() {
        admitted_at_5s += 1;
    }
    assert!(
        admitted_at_5s <= 10,
        "{admitted_at_5s} tokens admitted to key 7 at one instant (capacity 10); swept {swept}"
    );
}

/// A receipt can only be given back to the limit that issued it: it holds
/// that limit. A keyed receipt returns to its own key, not to another one
/// that happens to be in debt.
#[cfg(feature = "keyed")]
#[test]
fn a_keyed_receipt_returns_to_its_own_key_only() {
    let clock = ManualClock::new();
    let per_user = KeyedLimiter::builder(Quota::new(1, 1, SECOND).unwrap())
        .clock(clock.clone())
        .build::<u32>();
    per_user.try_acquire(&2, 1).unwrap();
    let mine = Receipt::take(per_user.key(&1), 1).unwrap();
    mine.undo();
    assert_eq!(per_user.available(&1), 1);
    assert_eq!(per_user.available(&2), 0, "the undo reached another key");
}

/// Extreme arguments get typed answers, never a panic, and spend nothing:
/// costs of 0 and `u64::MAX`, waits of `Duration::MAX`, in every entry point
/// of the bucket.
#[test]
fn extreme_costs_and_waits_are_typed_answers() {
    let clock = ManualClock::new();
    let limit = bucket(3, &clock);
    let too_big = AcquireError::ExceedsCapacity {
        cost: u64::MAX,
        capacity: 3,
    };
    assert_eq!(limit.try_acquire(0), Err(AcquireError::ZeroCost));
    assert_eq!(limit.try_acquire(u64::MAX), Err(too_big));
    assert_eq!(limit.reserve(u64::MAX, Duration::MAX), Err(too_big));
    assert_eq!(limit.retry_after(u64::MAX), Err(too_big));
    assert_eq!(Receipt::take(&limit, u64::MAX).unwrap_err(), too_big);
    assert_eq!(
        try_acquire_all(&[limit.cost(1), limit.cost(u64::MAX)])
            .refused_by()
            .error,
        too_big
    );
    assert_eq!(limit.available(), 3);
    // The longest wait is accepted and is a real reservation.
    assert_eq!(limit.reserve(3, Duration::MAX), Ok(Duration::ZERO));
    assert_eq!(limit.reserve(3, Duration::MAX), Ok(3 * SECOND));
    limit.refund(u64::MAX);
    assert_eq!(limit.available(), 3, "a refund is clipped at the capacity");
}

/// A clock at the end of its range fails closed (nothing more is admitted,
/// and the refusal says so with a finite wait), and a clock set back never
/// shows more credit than it had.
#[test]
fn clocks_at_the_end_of_their_range_or_going_back_never_mint() {
    let clock = ManualClock::new();
    let limit = bucket(2, &clock);
    limit.try_acquire(2).unwrap();
    clock.set(Duration::from_secs(1));
    clock.set(Duration::ZERO);
    assert!(limit.try_acquire(1).is_err(), "a clock set back refilled");
    clock.set(Duration::MAX);
    // Time is frozen at the end of the range: refill stops.
    assert_eq!(limit.available(), 0);
    assert!(matches!(
        limit.try_acquire(1),
        Err(AcquireError::Insufficient { .. })
    ));
    assert!(Receipt::take(&limit, 1).is_err());
}

/// An async acquire dropped at any point of its wait gives its reservation
/// back by the one rule: with the clock frozen, exactly; the next caller
/// waits no longer than if the dropped one had never come.
#[cfg(feature = "tokio")]
#[tokio::test(start_paused = true)]
async fn a_dropped_acquire_at_every_point_gives_back_by_the_rule() {
    let clock = ManualClock::new();
    let limit = bucket(1, &clock);
    limit.try_acquire(1).unwrap();
    for polls in 0..3 {
        let mut waiting = Box::pin(limit.acquire(1, 10 * SECOND));
        for _ in 0..polls {
            let _ = poll_once(&mut waiting.as_mut());
        }
        drop(waiting);
        assert_eq!(limit.retry_after(1), Ok(SECOND), "after {polls} polls");
    }
    // `Duration::MAX` is a wait like any other.
    assert_eq!(limit.reserve(1, Duration::MAX), Ok(SECOND));
}

/// A waiting `acquire` dropped before its due time, with nothing reserved
/// after it, gives its reservation back exactly, however long it waited:
/// its slot still lies ahead, so the matching word proves nothing came
/// between. (It gave nothing back once it had waited longer than its cost's
/// refill: budget lost for every caller of the bucket.)
#[cfg(feature = "tokio")]
#[tokio::test(start_paused = true)]
async fn a_dropped_acquire_that_nothing_followed_keeps_its_slot() {
    let clock = ManualClock::new();
    let bucket = TokenBucket::with_clock(Quota::new(1, 1, SECOND).unwrap(), clock.clone());
    bucket.try_acquire(1).unwrap(); // word = 1 s
    assert_eq!(bucket.reserve(1, 10 * SECOND), Ok(SECOND)); // kept, due 1 s; word 2 s
    let mut waiting = Box::pin(bucket.acquire(1, 10 * SECOND)); // due 2 s; word 3 s
    assert!(poll_once(&mut waiting.as_mut()).is_pending());
    clock.advance(Duration::from_millis(1500)); // still 500 ms before its due time
    drop(waiting); // nothing admitted since: should be exact (word back to 2 s)
    assert_eq!(
        bucket.retry_after(1),
        Ok(Duration::from_millis(500)),
        "the abandoned reservation is still charged"
    );
}

/// A cancelled wait must not hand its slot to a later reservation while an
/// intermediate one still holds a promised start: dropping the first of
/// two waiting acquires gives nothing back (the top of the bucket belongs
/// to the second), so a third caller is scheduled after the second, never
/// beside it. Giving the cost back here put two starts at one instant on a
/// bucket of one.
#[cfg(feature = "tokio")]
#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_never_double_books_a_later_reservation() {
    let clock = ManualClock::new();
    let quota = Quota::new(1, 2, SECOND).unwrap(); // one token per 500 ms
    let limit = TokenBucket::with_clock(quota, clock.clone());
    limit.try_acquire(1).unwrap();
    let mut first = Box::pin(limit.acquire(1, 10 * SECOND)); // due at 500 ms
    assert!(poll_once(&mut first.as_mut()).is_pending());
    let second = limit.reserve(1, 10 * SECOND).unwrap();
    assert_eq!(second, Duration::from_millis(1000));
    drop(first);
    let third = limit.reserve(1, 10 * SECOND).unwrap();
    assert_eq!(
        third,
        Duration::from_millis(1500),
        "the third shares a start"
    );
}
