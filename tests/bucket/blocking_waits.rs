//! Blocking waits for code without async: `Limit::acquire_blocking` takes
//! what `reserve` takes, sleeps the wait out, and refuses as `reserve` does.
//! Every limit here reads a `ManualClock` that stands still, so each wait
//! is exact and the thread sleeps only milliseconds.

use std::time::Duration;

use tollgate::{
    AcquireError, Counted, Limit, ManualClock, Quota, SlidingWindow, TokenBucket, WindowQuota,
};

const MS: Duration = Duration::from_millis(1);

/// A burst of 2, a token every millisecond.
fn quota() -> Quota {
    Quota::new(2, 1000, Duration::from_secs(1)).unwrap()
}

#[test]
fn a_blocking_acquire_answers_the_wait_it_slept_and_counts_as_a_delayed_admission() {
    let bucket = Counted::new(TokenBucket::with_clock(quota(), ManualClock::new()));
    let waits: Vec<Duration> = (0..4)
        .map(|_| bucket.acquire_blocking(1, Duration::from_secs(1)).unwrap())
        .collect();
    assert_eq!(waits, [Duration::ZERO, Duration::ZERO, MS, 2 * MS]);
    let stats = bucket.stats();
    assert_eq!(
        (stats.admitted, stats.delayed, stats.delay_nanos),
        (4, 2, 3_000_000)
    );
}

#[test]
fn a_blocking_acquire_beyond_its_max_wait_or_with_a_bad_cost_spends_nothing() {
    let bucket = TokenBucket::with_clock(quota(), ManualClock::new());
    bucket.try_acquire(2).unwrap();
    // The next token is 1 ms away: a max_wait of 0 refuses, exactly.
    assert_eq!(
        bucket.acquire_blocking(1, Duration::ZERO),
        Err(AcquireError::Insufficient { retry_after: MS })
    );
    assert_eq!(
        bucket.acquire_blocking(0, Duration::MAX),
        Err(AcquireError::ZeroCost)
    );
    assert_eq!(
        bucket.acquire_blocking(3, Duration::MAX),
        Err(AcquireError::ExceedsCapacity {
            cost: 3,
            capacity: 2
        })
    );
    // Nothing was reserved by the refusals: the next token is still 1 ms away.
    assert_eq!(bucket.retry_after(1), Ok(MS));
}

#[test]
fn a_sliding_window_and_a_key_block_for_what_reserve_would_wait() {
    let clock = ManualClock::new();
    // Twins with one history: what one reserves, the other sleeps out.
    let twins: [SlidingWindow<ManualClock>; 2] = std::array::from_fn(|_| {
        let quota = WindowQuota::new(2, 10 * MS).unwrap();
        SlidingWindow::with_clock(quota, clock.clone()).unwrap()
    });
    for window in &twins {
        window.try_acquire(2).unwrap();
    }
    // A new window, the last one's 2 still weighing in full: one unit fits
    // once that weight has faded by one.
    clock.advance(10 * MS);
    let reserved = twins[0].reserve(1, 10 * MS).unwrap();
    assert!(reserved > Duration::ZERO);
    assert_eq!(twins[1].acquire_blocking(1, 10 * MS), Ok(reserved));
    assert_eq!(twins[0].available(), twins[1].available());
    #[cfg(feature = "keyed")]
    {
        let keyed = tollgate::KeyedLimiter::builder(quota())
            .clock(clock.clone())
            .build::<u32>();
        keyed.try_acquire(&7, 2).unwrap();
        assert_eq!(
            keyed.key(&7).acquire_blocking(1, Duration::from_secs(1)),
            Ok(MS)
        );
        assert_eq!(
            keyed.key(&8).acquire_blocking(1, Duration::from_secs(1)),
            Ok(Duration::ZERO)
        );
    }
}
