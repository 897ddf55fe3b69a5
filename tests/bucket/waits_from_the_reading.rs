//! A clock reading earlier than a limiter's creation (a counter of another
//! core behind the creating one's, a clock set back) is decided at the
//! creation instant, the origin: the limiter sees less credit, never more.
//! The waits it reports must still be measured from the reading itself: a
//! caller told to wait `w` reads the clock again `w` later, so a wait
//! computed from the origin would be short by the gap and send it back too
//! early, again and again.
//!
//! What every test here asserts, for every limiter that reads a timeline,
//! with two twin limiters on their own `ManualClock`s given the same history
//! at the origin, one then read at the origin and the other at the origin
//! less a gap `g`:
//!
//! - **exact**: a wait the twin at the origin reports as `w0 > 0` is reported
//!   behind it as `g + w0` (a `retry_after`, a refusal's wait, a
//!   reservation's wait); a zero wait (credit there now) stays zero, and
//!   what is admitted is what the twin at the origin admits;
//! - **never early**: a caller who waits exactly the reported wait (from the
//!   reading it was given at) succeeds, and one who waits a nanosecond less
//!   is still refused;
//! - **bounded by the caller's budget**: a reservation whose wait, gap
//!   included, exceeds `max_wait` is refused, and its refusal's wait is,
//!   again, exactly when the same reservation succeeds.

use std::time::Duration;

use proptest::prelude::*;
use tollgate::{
    AcquireError, FixedWindow, Limit, ManualClock, Pacer, Quota, SlidingWindow, StripedBucket,
    TokenBucket, WindowQuota,
};
#[cfg(feature = "keyed")]
use tollgate::{KeyedFixedWindow, KeyedLimiter, KeyedSlidingWindow};

/// Where every limiter is created: far enough from zero that any gap below
/// it is a reading the clock can give.
const ORIGIN: Duration = Duration::from_secs(1_000);
const NS: Duration = Duration::from_nanos(1);

/// The wait a caller behind the origin by `gap` must be told, given the
/// wait `at_origin` at the origin.
fn expected(at_origin: Duration, gap: Duration) -> Duration {
    if at_origin.is_zero() {
        at_origin
    } else {
        at_origin + gap
    }
}

fn insufficient(outcome: Result<(), AcquireError>) -> Option<Duration> {
    match outcome {
        Err(AcquireError::Insufficient { retry_after }) => Some(retry_after),
        _ => None,
    }
}

/// The reproduction: a bucket of 5 at 1/s built at 10 s, emptied, read at
/// 4 s. It must say 7 s (6 s to come back to its creation, 1 s of refill),
/// and a caller who waits it out gets through at once.
#[test]
fn a_bucket_read_before_its_creation_reports_the_whole_wait() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(10));
    let bucket = TokenBucket::with_clock(Quota::new(5, 1, Duration::from_secs(1)).unwrap(), &clock);
    bucket.try_acquire(5).unwrap();
    clock.set(Duration::from_secs(4));
    let wait = bucket.retry_after(1).unwrap();
    assert_eq!(wait, Duration::from_secs(7));
    assert_eq!(insufficient(bucket.try_acquire(1)), Some(wait));
    clock.set(Duration::from_secs(4) + wait - NS);
    assert!(
        bucket.try_acquire(1).is_err(),
        "admitted before the wait ended"
    );
    clock.set(Duration::from_secs(4) + wait);
    assert_eq!(bucket.try_acquire(1), Ok(()), "refused once the wait ended");
}

/// The reservation's half of the reproduction: a wait of 7 s does not fit
/// a budget of 3 s (the wait at the origin, 1 s, would); its refusal says
/// when a budget of 3 s does fit, and that is exact.
#[test]
fn a_reservation_before_creation_counts_the_gap_against_its_budget() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(10));
    let bucket = TokenBucket::with_clock(Quota::new(5, 1, Duration::from_secs(1)).unwrap(), &clock);
    bucket.try_acquire(5).unwrap();
    clock.set(Duration::from_secs(4));
    let budget = Duration::from_secs(3);
    assert_eq!(
        bucket.reserve(1, budget),
        Err(AcquireError::Insufficient {
            retry_after: Duration::from_secs(4)
        })
    );
    clock.set(Duration::from_secs(8) - NS);
    assert!(bucket.reserve(1, budget).is_err());
    clock.set(Duration::from_secs(8));
    assert_eq!(bucket.reserve(1, budget), Ok(budget));
    assert_eq!(bucket.reserve(1, Duration::MAX), Ok(Duration::from_secs(4)));
}

/// One twin's clock and the reading its limiter is asked at.
struct Twin {
    clock: ManualClock,
    reading: Duration,
}

impl Twin {
    fn at_origin() -> Self {
        let clock = ManualClock::new();
        clock.set(ORIGIN);
        Twin {
            clock,
            reading: ORIGIN,
        }
    }

    /// Moves to the reading `gap` before the origin.
    fn behind(self, gap: Duration) -> Self {
        self.clock.set(ORIGIN - gap);
        Twin {
            reading: ORIGIN - gap,
            ..self
        }
    }

    /// Sets the clock `waited` after the reading.
    fn after(&self, waited: Duration) {
        self.clock.set(self.reading + waited);
    }
}

/// A history applied at the origin, a request, and a reservation's budget.
#[derive(Clone, Debug)]
struct Case {
    spends: Vec<u64>,
    cost: u64,
    gap: Duration,
    max_wait: Duration,
}

fn case(capacity: u64) -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(1..=capacity, 0..4),
        1..=capacity,
        // From a nanosecond to minutes, and a few round values.
        prop_oneof![
            (1u64..=200_000_000_000).prop_map(Duration::from_nanos),
            Just(NS),
            Just(Duration::from_secs(6)),
        ],
        prop_oneof![
            Just(Duration::ZERO),
            (1u64..=300_000_000_000).prop_map(Duration::from_nanos),
            Just(Duration::MAX),
        ],
    )
        .prop_map(|(spends, cost, gap, max_wait)| Case {
            spends,
            cost,
            gap,
            max_wait,
        })
}

/// Every assertion of the module on one kind of limit: `make` builds a
/// limiter on a clock, `view` is the limit to decide on.
fn check<L>(
    make: impl Fn(&ManualClock) -> L,
    view: for<'a> fn(&'a L) -> Box<dyn Limit + 'a>,
    case: &Case,
) {
    let history = |twin: &Twin| {
        let limiter = make(&twin.clock);
        for &spend in &case.spends {
            let _ = view(&limiter).try_acquire(spend);
        }
        limiter
    };
    let cost = case.cost;
    let gap = case.gap;

    // retry_after and try_acquire.
    let origin = Twin::at_origin();
    let reference = history(&origin);
    let at_origin = view(&reference).retry_after(cost).unwrap();
    let refused_at_origin = view(&reference).try_acquire(cost).err();
    let behind = Twin::at_origin();
    let limiter = history(&behind);
    let behind = behind.behind(gap);
    let wait = view(&limiter).retry_after(cost).unwrap();
    assert_eq!(wait, expected(at_origin, gap), "retry_after");
    let outcome = view(&limiter).try_acquire(cost);
    assert_eq!(
        outcome.is_ok(),
        refused_at_origin.is_none(),
        "decided as at the origin"
    );
    if let Some(AcquireError::Insufficient { retry_after }) = refused_at_origin {
        let wait = expected(retry_after, gap);
        assert_eq!(insufficient(outcome), Some(wait), "the refusal's wait");
        behind.after(wait - NS);
        assert!(
            view(&limiter).try_acquire(cost).is_err(),
            "a nanosecond early"
        );
        // On a twin the early try left untouched: a refusal of a striped
        // bucket may lease into its pool.
        let on_time = Twin::at_origin();
        let limiter = history(&on_time);
        let on_time = on_time.behind(gap);
        on_time.after(wait);
        assert_eq!(view(&limiter).try_acquire(cost), Ok(()), "on time");
    }

    // reserve.
    let origin = Twin::at_origin();
    let reference = history(&origin);
    let unbounded = view(&reference).reserve(cost, Duration::MAX);
    let behind = Twin::at_origin();
    let limiter = history(&behind);
    let behind = behind.behind(gap);
    match view(&limiter).reserve(cost, case.max_wait) {
        Ok(wait) => {
            assert!(wait <= case.max_wait, "{wait:?} over the budget");
            let at_origin = unbounded.expect("reserved behind, not at the origin");
            assert_eq!(wait, expected(at_origin, gap), "the reservation's wait");
        }
        Err(AcquireError::Insufficient { retry_after }) => {
            if let Ok(at_origin) = unbounded {
                assert!(
                    expected(at_origin, gap) > case.max_wait,
                    "refused a wait of {:?} within {:?}",
                    expected(at_origin, gap),
                    case.max_wait
                );
            }
            // A wait that never ends (the end of the range) cannot be
            // waited out.
            if retry_after < Duration::from_secs(1 << 40) {
                behind.after(retry_after.saturating_sub(NS));
                if !retry_after.is_zero() {
                    assert!(
                        view(&limiter).reserve(cost, case.max_wait).is_err(),
                        "reserved a nanosecond before the refusal's wait"
                    );
                }
                let on_time = Twin::at_origin();
                let limiter = history(&on_time);
                let on_time = on_time.behind(gap);
                on_time.after(retry_after);
                let wait = view(&limiter).reserve(cost, case.max_wait);
                assert!(
                    wait.is_ok_and(|wait| wait <= case.max_wait),
                    "still refused after the refusal's wait: {wait:?}"
                );
            }
        }
        Err(other) => panic!("{other:?}"),
    }
}

/// Exact quotas (a refill interval whose reduced denominator is at most 8
/// ns) and rounded ones: 11 or 13 a period, and byte rates charged per
/// request, which the bucket represents only up to its stated rounding.
fn quota() -> impl Strategy<Value = Quota> {
    let tokens = prop_oneof![4 => 1u64..=5, 1 => Just(11u64), 1 => Just(13), 1 => Just(1_000_003)];
    (1u64..=8, tokens, 1u64..=5_000).prop_map(|(capacity, tokens, millis)| {
        Quota::new(capacity, tokens, Duration::from_millis(millis)).unwrap()
    })
}

fn window_quota() -> impl Strategy<Value = WindowQuota> {
    (1u64..=8, 1u64..=5_000)
        .prop_map(|(limit, millis)| WindowQuota::new(limit, Duration::from_millis(millis)).unwrap())
}

fn bucket_case() -> impl Strategy<Value = (Quota, Case)> {
    quota().prop_flat_map(|quota| (Just(quota), case(quota.capacity())))
}

fn window_case() -> impl Strategy<Value = (WindowQuota, Case)> {
    window_quota().prop_flat_map(|quota| (Just(quota), case(quota.limit())))
}

/// The limit itself, as `check`'s view.
fn itself<L: Limit>(limiter: &L) -> Box<dyn Limit + '_> {
    Box::new(limiter)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_token_bucket_behind_its_origin_is_never_early((quota, case) in bucket_case()) {
        check(|clock| TokenBucket::with_clock(quota, clock.clone()), itself, &case);
    }

    #[test]
    fn a_striped_bucket_behind_its_origin_is_never_early((quota, case) in bucket_case()) {
        check(|clock| StripedBucket::with_clock(quota, clock.clone(), 2, 2), itself, &case);
    }

    #[test]
    fn a_fixed_window_behind_its_origin_is_never_early((quota, case) in window_case()) {
        check(|clock| FixedWindow::with_clock(quota, clock.clone()).unwrap(), itself, &case);
    }

    #[test]
    fn a_sliding_window_behind_its_origin_is_never_early((quota, case) in window_case()) {
        check(|clock| SlidingWindow::with_clock(quota, clock.clone()).unwrap(), itself, &case);
    }

    #[cfg(feature = "keyed")]
    #[test]
    fn a_keyed_limiter_behind_its_origin_is_never_early((quota, case) in bucket_case()) {
        check(
            |clock| KeyedLimiter::builder(quota).clock(clock.clone()).build::<u32>(),
            |limiter| Box::new(limiter.key(&7)),
            &case,
        );
    }

    #[cfg(feature = "keyed")]
    #[test]
    fn a_keyed_fixed_window_behind_its_origin_is_never_early((quota, case) in window_case()) {
        check(
            |clock| KeyedFixedWindow::builder(quota).clock(clock.clone()).build_fixed::<u32>().unwrap(),
            |limiter| Box::new(limiter.key(&7)),
            &case,
        );
    }

    #[cfg(feature = "keyed")]
    #[test]
    fn a_keyed_sliding_window_behind_its_origin_is_never_early((quota, case) in window_case()) {
        check(
            |clock| KeyedSlidingWindow::builder(quota).clock(clock.clone()).build_sliding::<u32>().unwrap(),
            |limiter| Box::new(limiter.key(&7)),
            &case,
        );
    }

    /// A pacer is a bucket of one used through reservations: its waits and
    /// its refusals' waits, behind its origin, by the same two rules.
    #[test]
    fn a_pacer_behind_its_origin_is_never_early(
        starts in 1u64..=5,
        millis in 1u64..=5_000,
        max_wait in 0u64..=20_000_000_000,
        queued in 0usize..4,
        gap in 1u64..=200_000_000_000,
    ) {
        let (period, max_wait, gap) =
            (Duration::from_millis(millis), Duration::from_nanos(max_wait), Duration::from_nanos(gap));
        let twin = || {
            let twin = Twin::at_origin();
            let pacer = Pacer::with_clock(starts, period, max_wait, twin.clock.clone()).unwrap();
            for _ in 0..queued {
                let _ = pacer.reserve();
            }
            (twin, pacer)
        };
        let (_origin, reference) = twin();
        // The wait at the origin, budget or not: a refusal there says how
        // far past the budget it lies.
        let unbounded = match reference.reserve() {
            Ok(wait) => wait,
            Err(AcquireError::Insufficient { retry_after }) => retry_after + max_wait,
            Err(other) => panic!("{other:?}"),
        };
        let (behind, pacer) = twin();
        let behind = behind.behind(gap);
        match pacer.reserve() {
            Ok(wait) => {
                prop_assert!(wait <= max_wait);
                prop_assert_eq!(wait, expected(unbounded, gap));
            }
            Err(AcquireError::Insufficient { retry_after }) => {
                prop_assert!(expected(unbounded, gap) > max_wait);
                prop_assert!(!retry_after.is_zero());
                behind.after(retry_after - NS);
                prop_assert!(pacer.reserve().is_err(), "a nanosecond early");
                behind.after(retry_after);
                prop_assert!(pacer.reserve().is_ok(), "refused on time");
            }
            Err(other) => panic!("{other:?}"),
        }
    }
}

#[cfg(feature = "keyed")]
mod store {
    use super::*;
    use tollgate::shared::{LocalStore, Store};

    fn grant(store: &LocalStore<ManualClock>, want: u64) -> tollgate::shared::Grant {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(store.acquire("k", want))
            .unwrap()
    }

    proptest! {
        /// A store's empty grant says when a token will be there: from the
        /// reading, behind the origin too, and exactly then.
        #[test]
        fn a_local_store_behind_its_origin_is_never_early(
            (quota, case) in bucket_case(),
        ) {
            let twin = |twin: &Twin| {
                let store = LocalStore::from_limiter(
                    KeyedLimiter::builder(quota).clock(twin.clock.clone()).build::<String>(),
                );
                for &spend in &case.spends {
                    grant(&store, spend);
                }
                store
            };
            let origin = Twin::at_origin();
            let at_origin = grant(&twin(&origin), case.cost);
            let behind = Twin::at_origin();
            let store = twin(&behind);
            let behind = behind.behind(case.gap);
            let granted = grant(&store, case.cost);
            prop_assert_eq!(granted.tokens, at_origin.tokens);
            prop_assert_eq!(granted.retry_after, expected(at_origin.retry_after, case.gap));
            if granted.tokens == 0 {
                behind.after(granted.retry_after - NS);
                prop_assert_eq!(grant(&store, 1).tokens, 0, "a nanosecond early");
                behind.after(granted.retry_after);
                prop_assert_eq!(grant(&store, 1).tokens, 1, "nothing on time");
            }
        }
    }
}
