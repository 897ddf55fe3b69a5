//! Window counters as limits: counted, in hierarchies, behind receipts,
//! reserving and waiting, with the typed errors of every limit.

use std::time::Duration;

use tollgate::window::{Fixed, Sliding, WindowCounter, WindowKind};
use tollgate::{
    AcquireError, Counted, FixedWindow, Limit, ManualClock, Quota, Receipt, SlidingWindow,
    TokenBucket, WindowQuota, try_acquire_all,
};

use common::RefusedBy;
use tollgate_test_support::common;

const SECOND: Duration = Duration::from_secs(1);

fn window<K: WindowKind>(limit: u64, clock: &ManualClock) -> WindowCounter<K, ManualClock> {
    WindowCounter::with_clock(WindowQuota::new(limit, SECOND).unwrap(), clock.clone()).unwrap()
}

fn insufficient(retry_after: Duration) -> AcquireError {
    AcquireError::Insufficient { retry_after }
}

#[test]
fn a_counted_window_counts_admissions_refusals_rejections_and_give_backs() {
    let clock = ManualClock::new();
    let limiter = Counted::new(window::<Fixed>(3, &clock));
    limiter.try_acquire(2).unwrap();
    assert_eq!(limiter.try_acquire(2), Err(insufficient(SECOND)));
    assert_eq!(
        limiter.try_acquire(4),
        Err(AcquireError::ExceedsCapacity {
            cost: 4,
            capacity: 3
        })
    );
    assert_eq!(limiter.try_acquire(0), Err(AcquireError::ZeroCost));
    Receipt::take(&limiter, 1).unwrap().undo();
    let stats = limiter.stats();
    assert_eq!(
        (
            stats.admitted,
            stats.admitted_cost,
            stats.denied,
            stats.denied_cost,
            stats.rejected,
            stats.abandoned
        ),
        (2, 3, 1, 2, 2, 1)
    );
    assert_eq!(limiter.available(), 1);
}

#[test]
fn a_counted_sliding_window_counts_a_reservation_and_its_wait() {
    let clock = ManualClock::new();
    let limiter = Counted::new(window::<Sliding>(4, &clock));
    limiter.try_acquire(4).unwrap();
    clock.advance(SECOND);
    assert_eq!(limiter.reserve(1, SECOND), Ok(SECOND / 4));
    let stats = limiter.stats();
    assert_eq!(
        (stats.admitted, stats.delayed, stats.delay_nanos),
        (2, 1, 250_000_000)
    );
}

fn receipts_give_back_within_their_window_only<K: WindowKind>() {
    let clock = ManualClock::new();
    let limiter = window::<K>(4, &clock);
    clock.set(SECOND / 2);
    let receipt = Receipt::take(&limiter, 3).unwrap();
    assert_eq!((receipt.tokens(), limiter.available()), (3, 1));
    receipt.undo();
    assert_eq!(limiter.available(), 4, "within the window: exactly back");

    let late = Receipt::take(&limiter, 4).unwrap();
    clock.set(SECOND + SECOND / 2);
    let before = limiter.available();
    late.undo();
    assert_eq!(
        limiter.available(),
        before,
        "its window ended: nothing back"
    );
    limiter.try_acquire(before).unwrap();
    assert_eq!(
        limiter
            .try_acquire(1)
            .map_err(|e| e.retry_after().is_some()),
        Err(true)
    );
}

#[test]
fn fixed_receipts_give_back_within_their_window_only() {
    receipts_give_back_within_their_window_only::<Fixed>();
}

#[test]
fn sliding_receipts_give_back_within_their_window_only() {
    receipts_give_back_within_their_window_only::<Sliding>();
}

#[test]
fn a_receipt_undone_after_others_counted_returns_only_its_own_cost() {
    let clock = ManualClock::new();
    let limiter = window::<Fixed>(5, &clock);
    let mine = Receipt::take(&limiter, 2).unwrap();
    limiter.try_acquire(3).unwrap();
    mine.undo();
    assert_eq!(limiter.available(), 2);
    limiter.try_acquire(2).unwrap();
    assert_eq!(limiter.try_acquire(1), Err(insufficient(SECOND)));
}

#[test]
fn a_hierarchy_with_a_window_and_a_bucket_is_all_or_nothing() {
    let clock = ManualClock::new();
    let fixed = window::<Fixed>(2, &clock);
    let scarce = TokenBucket::with_clock(Quota::per_second(1).unwrap(), clock.clone());
    let plenty = TokenBucket::with_clock(Quota::per_second(10).unwrap(), clock.clone());

    try_acquire_all(&[fixed.cost(1), scarce.cost(1)]).unwrap();
    // The bucket refuses: the window's unit goes back.
    let refused = try_acquire_all(&[fixed.cost(1), scarce.cost(1)]).refused_by();
    assert_eq!((refused.limit, refused.error), (1, insufficient(SECOND)));
    assert_eq!(fixed.available(), 1);

    // The window refuses: the bucket's token goes back.
    fixed.try_acquire(1).unwrap();
    clock.set(SECOND / 4);
    let refused = try_acquire_all(&[plenty.cost(1), fixed.cost(1)]).refused_by();
    assert_eq!(
        (refused.limit, refused.error),
        (1, insufficient(SECOND * 3 / 4))
    );
    assert_eq!((plenty.available(), fixed.available()), (10, 0));
}

#[test]
fn a_hierarchy_reports_the_window_step_that_can_never_admit() {
    let clock = ManualClock::new();
    let sliding = window::<Sliding>(2, &clock);
    let bucket = TokenBucket::with_clock(Quota::per_second(10).unwrap(), clock.clone());
    let refused = try_acquire_all(&[bucket.cost(3), sliding.cost(3)]).refused_by();
    assert_eq!(
        (refused.limit, refused.error),
        (
            1,
            AcquireError::ExceedsCapacity {
                cost: 3,
                capacity: 2
            }
        )
    );
    assert_eq!(bucket.available(), 10);
}

fn bad_costs_are_typed_errors_everywhere<K: WindowKind>() {
    let clock = ManualClock::new();
    let limiter = window::<K>(3, &clock);
    let above = AcquireError::ExceedsCapacity {
        cost: 4,
        capacity: 3,
    };
    assert_eq!(limiter.try_acquire(0), Err(AcquireError::ZeroCost));
    assert_eq!(limiter.try_acquire(4), Err(above));
    assert_eq!(limiter.reserve(0, SECOND), Err(AcquireError::ZeroCost));
    assert_eq!(limiter.reserve(4, SECOND), Err(above));
    assert_eq!(limiter.retry_after(0), Err(AcquireError::ZeroCost));
    assert_eq!(limiter.retry_after(4), Err(above));
    assert_eq!(
        Receipt::take(&limiter, 0).unwrap_err(),
        AcquireError::ZeroCost
    );
    assert_eq!(Receipt::take(&limiter, 4).unwrap_err(), above);
    assert_eq!(
        try_acquire_all(&[limiter.cost(0)]).refused_by().error,
        AcquireError::ZeroCost
    );
    assert_eq!(limiter.available(), 3, "no bad request counted anything");
}

#[test]
fn bad_costs_on_a_fixed_window_are_typed_errors() {
    bad_costs_are_typed_errors_everywhere::<Fixed>();
}

#[test]
fn bad_costs_on_a_sliding_window_are_typed_errors() {
    bad_costs_are_typed_errors_everywhere::<Sliding>();
}

#[test]
fn a_fixed_window_never_reserves_into_the_next_window() {
    let clock = ManualClock::new();
    let limiter = FixedWindow::with_clock(WindowQuota::per_second(2).unwrap(), &clock).unwrap();
    clock.set(SECOND / 4);
    assert_eq!(limiter.reserve(2, SECOND), Ok(Duration::ZERO));
    // The room is in the next window, 750 ms away: within the longest wait,
    // but a count cannot go into a window that has not begun. The same call
    // succeeds when that window does.
    assert_eq!(
        limiter.reserve(1, 10 * SECOND),
        Err(insufficient(SECOND * 3 / 4))
    );
    assert_eq!(limiter.available(), 0);
}

#[test]
fn a_sliding_window_reserves_within_its_window_and_counts_the_reservation_there() {
    let clock = ManualClock::new();
    let limiter = SlidingWindow::with_clock(WindowQuota::per_second(4).unwrap(), &clock).unwrap();
    limiter.try_acquire(4).unwrap();
    clock.set(SECOND);
    // The 4 weigh 3 a quarter in: one unit due then.
    assert_eq!(
        limiter.reserve(1, SECOND / 8),
        Err(insufficient(SECOND / 8))
    );
    assert_eq!(limiter.reserve(1, SECOND / 4), Ok(SECOND / 4));
    // Counted already: the next unit is due when the 4 weigh 2, half way.
    assert_eq!(limiter.retry_after(1), Ok(SECOND / 2));
    assert_eq!(limiter.reserve(1, SECOND), Ok(SECOND / 2));
    // Room for 2 more comes at the next window's start, where the 4 have
    // faded and the 2 reserved here weigh 2: not in this window, so
    // refused, with the wait until the same call succeeds, in that window.
    assert_eq!(limiter.reserve(2, 3 * SECOND), Err(insufficient(SECOND)));
}

#[tokio::test(start_paused = true)]
async fn an_async_acquire_on_a_sliding_window_waits_out_its_reservation() {
    let clock = ManualClock::new();
    let limiter = SlidingWindow::with_clock(WindowQuota::per_second(4).unwrap(), &clock).unwrap();
    limiter.try_acquire(4).unwrap();
    clock.set(SECOND);
    let started = tokio::time::Instant::now();
    limiter.acquire(1, SECOND).await.unwrap();
    assert_eq!(started.elapsed(), SECOND / 4);
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_acquire_on_a_sliding_window_gives_its_count_back() {
    let clock = ManualClock::new();
    let limiter = SlidingWindow::with_clock(WindowQuota::per_second(4).unwrap(), &clock).unwrap();
    limiter.try_acquire(4).unwrap();
    clock.set(SECOND);
    let waiting = limiter.acquire(1, SECOND);
    let timed_out = tokio::time::timeout(SECOND / 8, waiting).await;
    assert!(timed_out.is_err());
    // Dropped within the window it was counted in: the count is back, and
    // the unit is due a quarter in again.
    assert_eq!(limiter.retry_after(1), Ok(SECOND / 4));
}

#[tokio::test(start_paused = true)]
async fn an_async_acquire_on_a_fixed_window_refuses_at_once_with_the_wait() {
    let clock = ManualClock::new();
    let limiter = FixedWindow::with_clock(WindowQuota::per_second(1).unwrap(), &clock).unwrap();
    limiter.acquire(1, Duration::ZERO).await.unwrap();
    assert_eq!(
        limiter.acquire(1, 5 * SECOND).await,
        Err(insufficient(SECOND))
    );
}
