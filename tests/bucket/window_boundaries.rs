//! Window counters, call by call on a `ManualClock`: their errors, where
//! their windows fall, what a stale or backward reading sees, the end of
//! the index's range, and the give-back rule of their receipts.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tollgate::window::{WindowCounter, WindowKind};
use tollgate::{
    AcquireError, FixedWindow, Limit, ManualClock, QuotaError, Receipt, SlidingWindow, WindowQuota,
};

use common::insufficient;
use tollgate_test_support::common;

const SECOND: Duration = Duration::from_secs(1);
/// The wait of a request that can never fit again: past the range's end.
const NEVER: Duration = Duration::from_nanos(u64::MAX);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn per_second(limit: u64) -> WindowQuota {
    WindowQuota::per_second(limit).unwrap()
}

/// A counter of `quota`'s kind on a manual clock standing at `at`.
fn counter<K: WindowKind>(quota: WindowQuota, at: Duration) -> WindowCounter<K, ManualClock> {
    let clock = ManualClock::new();
    clock.set(at);
    WindowCounter::with_clock(quota, clock).unwrap()
}

fn fixed(limit: u64) -> FixedWindow<ManualClock> {
    counter(per_second(limit), Duration::ZERO)
}

fn sliding(limit: u64) -> SlidingWindow<ManualClock> {
    counter(per_second(limit), Duration::ZERO)
}

#[test]
fn bad_quotas_are_typed_errors() {
    assert_eq!(WindowQuota::new(0, SECOND), Err(QuotaError::ZeroCapacity));
    assert_eq!(
        WindowQuota::new(1, Duration::ZERO),
        Err(QuotaError::ZeroPeriod)
    );
    assert_eq!(
        WindowQuota::new(1, Duration::from_secs(u64::MAX)),
        Err(QuotaError::PeriodTooLong)
    );
    // The largest limit each kind packs with one-second windows is accepted,
    // the next refused with that largest in the error.
    for (sliding, max) in [(false, (1u64 << 33) - 1), (true, (1 << 16) - 1)] {
        let build = |limit| {
            let quota = per_second(limit);
            if sliding {
                SlidingWindow::with_clock(quota, ManualClock::new()).map(drop)
            } else {
                FixedWindow::with_clock(quota, ManualClock::new()).map(drop)
            }
        };
        assert_eq!(build(max), Ok(()));
        assert_eq!(
            build(max + 1),
            Err(QuotaError::LimitTooLarge {
                limit: max + 1,
                max
            })
        );
    }
    // A one-nanosecond window still takes a limit of one.
    let tiny = WindowQuota::new(1, Duration::from_nanos(1)).unwrap();
    assert!(SlidingWindow::with_clock(tiny, ManualClock::new()).is_ok());
}

#[test]
fn bad_costs_are_typed_errors_and_count_nothing() {
    fn check<K: WindowKind>(limiter: WindowCounter<K, ManualClock>) {
        assert_eq!(limiter.try_acquire(0), Err(AcquireError::ZeroCost));
        assert_eq!(
            limiter.try_acquire(4),
            Err(AcquireError::ExceedsCapacity {
                cost: 4,
                capacity: 3
            })
        );
        assert_eq!(limiter.retry_after(0), Err(AcquireError::ZeroCost));
        assert!(Receipt::take(&limiter, 4).is_err());
        assert_eq!(limiter.available(), 3);
        limiter.try_acquire(3).unwrap();
    }
    check(fixed(3));
    check(sliding(3));
}

#[test]
fn a_fixed_window_refuses_until_the_next_window_and_then_resets() {
    let limiter = fixed(3);
    limiter.clock().set(ms(250));
    limiter.try_acquire(2).unwrap();
    limiter.try_acquire(1).unwrap();
    assert_eq!(limiter.try_acquire(1), insufficient(ms(750)));
    assert_eq!(limiter.retry_after(1), Ok(ms(750)));
    limiter.clock().set(ms(999));
    assert_eq!(limiter.try_acquire(1), insufficient(ms(1)));
    limiter.clock().set(ms(1000));
    assert_eq!(limiter.retry_after(3), Ok(Duration::ZERO));
    limiter.try_acquire(3).unwrap();
    // Far later: empty again, whatever the count was.
    limiter.clock().set(Duration::from_secs(3600));
    assert_eq!(limiter.available(), 3);
}

#[test]
fn windows_start_at_the_clock_epoch_not_at_creation() {
    // Created 1.3 s after the clock's epoch: its first window ends at 2 s.
    let limiter: FixedWindow<ManualClock> = counter(per_second(1), ms(1300));
    limiter.try_acquire(1).unwrap();
    assert_eq!(limiter.try_acquire(1), insufficient(ms(700)));
    // With an offset, at 0.5 s past each second.
    let offset = per_second(1).with_offset(ms(2500));
    let limiter: FixedWindow<ManualClock> = counter(offset, ms(1300));
    limiter.try_acquire(1).unwrap();
    assert_eq!(limiter.try_acquire(1), insufficient(ms(200)));
}

#[test]
fn calendar_windows_end_where_unix_time_is_a_multiple_of_the_window() {
    let minute = Duration::from_secs(60);
    let before = SystemTime::now();
    let limiter = FixedWindow::with_clock(
        WindowQuota::per_minute(1).unwrap().calendar(),
        ManualClock::new(),
    )
    .unwrap();
    let after = SystemTime::now();
    limiter.try_acquire(1).unwrap();
    let wait = limiter.retry_after(1).unwrap();
    // The limiter read the wall clock somewhere in [before, after], and its
    // clock has not moved since: the boundary it waits for, seen from
    // `before`, is a minute boundary less at most that uncertainty.
    let unix = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos();
    let boundary = unix(before) + wait.as_nanos();
    let past_boundary = boundary % minute.as_nanos();
    let slack = unix(after) - unix(before);
    assert!(
        past_boundary == 0 || minute.as_nanos() - past_boundary <= slack,
        "{past_boundary} ns from a minute boundary, read within {slack} ns"
    );
    assert!(wait > Duration::ZERO && wait <= minute);
}

#[test]
fn a_sliding_window_weighs_the_previous_window_by_what_it_still_covers() {
    let limiter = sliding(10);
    limiter.try_acquire(10).unwrap();
    // 400 ms into the next window the last one weighs 10 · 0.6 = 6.
    limiter.clock().set(ms(1400));
    assert_eq!(limiter.available(), 4);
    limiter.try_acquire(4).unwrap();
    // 6 + 4 = 10: the next unit fits once 10 · (1 - p) <= 5, at p = 0.5.
    assert_eq!(limiter.try_acquire(1), insufficient(ms(100)));
    limiter.clock().set(ms(1500));
    limiter.try_acquire(1).unwrap();
    // Two windows on nothing of the first is left, and the second's 5
    // weigh 5 · 0.5 at 2.5 s.
    limiter.clock().set(ms(2500));
    assert_eq!(limiter.available(), 7);
    limiter.clock().set(ms(4000));
    assert_eq!(limiter.available(), 10);
}

#[test]
fn a_sliding_wait_past_the_current_window_counts_its_count_as_the_previous() {
    let limiter = sliding(4);
    limiter.clock().set(ms(900));
    limiter.try_acquire(4).unwrap();
    // Nothing fits before 1 s, where the 4 weigh 4 · (1 - p): a cost of 3
    // fits once that is at most 1, at p = 0.75.
    assert_eq!(limiter.try_acquire(3), insufficient(ms(100 + 750)));
    // The whole limit needs the 4 to have faded out: at 2 s.
    assert_eq!(limiter.retry_after(4), Ok(ms(1100)));
}

#[test]
fn stale_and_backward_readings_count_in_the_newest_window() {
    fn check<K: WindowKind>(limiter: WindowCounter<K, ManualClock>) {
        limiter.clock().set(ms(1500));
        limiter.try_acquire(2).unwrap();
        // Back into the first window: the word is in the second, where
        // nothing more fits; the wait runs to the second's end (at least),
        // counted from the backward reading.
        limiter.clock().set(ms(500));
        let retry = limiter.try_acquire(1).unwrap_err().retry_after().unwrap();
        assert!(retry >= ms(1500), "{retry:?}");
        assert_eq!(limiter.available(), 0);
        // Before the limiter was created counts as its creation.
        limiter.clock().set(Duration::ZERO);
        assert!(limiter.try_acquire(1).is_err());
    }
    let fixed: FixedWindow<ManualClock> = counter(per_second(2), ms(200));
    check(fixed);
    let sliding: SlidingWindow<ManualClock> = counter(per_second(2), ms(200));
    check(sliding);
}

#[test]
fn the_index_saturates_at_the_end_of_its_range_and_never_wraps() {
    // 2^33 - 1 per second packs 33-bit counts and a 31-bit index: 2^31
    // windows (68 years) from the first.
    let limit = (1 << 33) - 1;
    let limiter = fixed(limit);
    let last = Duration::from_secs((1 << 31) - 1);
    limiter.clock().set(last);
    limiter.try_acquire(limit).unwrap();
    // The last window never ends: the wait is one that never does.
    assert_eq!(limiter.try_acquire(1), insufficient(NEVER));
    // Window 2^31 would wrap to window 0 in a 31-bit field and start
    // empty; saturated, it is still the last window, full.
    limiter.clock().set(last + SECOND);
    assert_eq!(limiter.try_acquire(1), insufficient(NEVER));
    limiter.clock().set(Duration::from_nanos(u64::MAX));
    assert_eq!(limiter.available(), 0);

    // A sliding window of 65 535 per second: 32-bit index, 136 years.
    let limiter = sliding((1 << 16) - 1);
    let last = Duration::from_secs((1 << 32) - 1);
    limiter.clock().set(last - SECOND);
    limiter.try_acquire(1 << 15).unwrap();
    limiter.clock().set(last + ms(500));
    limiter.try_acquire(1 << 15).unwrap();
    // Past the end, time stands at the last nanosecond of the last window:
    // the last window's count and its predecessor's at its least weight.
    limiter.clock().set(Duration::from_nanos(u64::MAX));
    assert_eq!(limiter.available(), (1 << 16) - 1 - (1 << 15) - 1);
    limiter.try_acquire(limiter.available()).unwrap();
    assert_eq!(limiter.try_acquire(1), insufficient(NEVER));
}

#[test]
fn a_receipt_undone_in_its_window_gives_back_exactly() {
    fn check<K: WindowKind>(limiter: WindowCounter<K, ManualClock>) {
        limiter.clock().set(ms(1100));
        let mine = Receipt::take(&limiter, 3).unwrap();
        limiter.try_acquire(4).unwrap();
        assert_eq!(limiter.available(), 3);
        // Later in the same window, after someone else's admission: the
        // window's count is what it would be without mine.
        limiter.clock().set(ms(1900));
        let before = limiter.available();
        mine.undo();
        assert_eq!(limiter.available(), before + 3);
    }
    check(fixed(10));
    check(sliding(10));
}

#[test]
fn a_receipt_undone_after_its_window_gives_back_nothing() {
    // Fixed: not into the next window.
    let limiter = fixed(10);
    let mine = Receipt::take(&limiter, 10).unwrap();
    limiter.clock().set(ms(1200));
    limiter.try_acquire(4).unwrap();
    mine.undo();
    assert_eq!(limiter.available(), 6);

    // Sliding: not out of the previous count either, which the rolling
    // window still covers (10 · 0.5, and the new 1), whether or not a
    // decision has rolled the counter into the new window yet.
    for roll_first in [true, false] {
        let limiter = sliding(10);
        let mine = Receipt::take(&limiter, 6).unwrap();
        limiter.try_acquire(4).unwrap();
        limiter.clock().set(ms(1500));
        if roll_first {
            limiter.try_acquire(1).unwrap();
            mine.undo();
        } else {
            mine.undo();
            limiter.try_acquire(1).unwrap();
        }
        assert_eq!(limiter.available(), 4, "rolled first: {roll_first}");
    }
}

#[test]
fn undoing_every_receipt_of_a_window_never_gives_back_more_than_was_taken() {
    let limiter = Arc::new(sliding(10));
    let receipts: Vec<_> = [3, 3, 4]
        .into_iter()
        .map(|cost| Receipt::take(Arc::clone(&limiter), cost).unwrap())
        .collect();
    assert_eq!(receipts.iter().map(Receipt::tokens).sum::<u64>(), 10);
    for receipt in receipts {
        receipt.undo();
    }
    assert_eq!(limiter.available(), 10);
    // A boxed limiter takes receipts too, and the window is whole again.
    let boxed = Box::new(fixed(2));
    Receipt::take(&boxed, 2).unwrap().keep();
    assert_eq!(boxed.available(), 0);
}
