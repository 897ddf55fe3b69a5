//! Loom models of `ConcurrencyLimiter`'s compare-and-swap loop and its
//! permits' releases.
//!
//! Each model builds its limiter inside `loom::model`, so every execution
//! starts from a fresh word. Holders add their weight to a separate loom
//! atomic after a grant and take it off before the drop: that sum is never
//! below what the limiter's word truly holds, so the bound asserted on it is
//! the limiter's own. A refusal must report a state in which the weight
//! really did not fit, and every model ends with nothing in flight.
//!
//! The keyed limiter is not modelled: dashmap's shard locks are not
//! loom-aware (a loom thread spinning on one would hang the model). Its
//! per-key counters run the same `counter.rs` code as the models below;
//! entry removal is argued in `docs/concurrency.md` and stress-tested on
//! real threads in `tests/bucket/in_flight_bound.rs`. The async waiting of feature
//! `tokio` is likewise not modelled (neither tokio's timer nor
//! event-listener's mutex is loom-aware).
//!
//! Without `--cfg tollgate_loom` the file is empty; the docs stand before the
//! cfg so that the empty crate still has them.

#![cfg(tollgate_loom)]

use std::collections::BTreeSet;
// The limiter's owned permits hold std's `Arc` (a method receiver cannot be
// loom's); loom threads need `'static` captures, so models share it that way.
use std::sync::Arc;

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use loom_tests::{gather, model};
use tollgate::concurrency::{ConcurrencyLimiter, InFlightError};

/// A limiter of `max` units and the independent tally of units held.
#[derive(Clone)]
struct Shared {
    limiter: Arc<ConcurrencyLimiter>,
    held: loom::sync::Arc<AtomicU64>,
}

impl Shared {
    fn new(max: u64) -> Self {
        Shared {
            limiter: Arc::new(ConcurrencyLimiter::new(max).expect("models use valid limits")),
            held: loom::sync::Arc::new(AtomicU64::new(0)),
        }
    }

    /// Tries for `weight`; if granted, holds it (checking the bound while
    /// held) and drops it. Returns the refusal's `in_flight`, if refused.
    fn hold_once(&self, weight: u64) -> Result<(), u64> {
        let max = self.limiter.max();
        match self.limiter.try_acquire(weight) {
            Ok(permit) => {
                let held = self.held.fetch_add(weight, Ordering::SeqCst) + weight;
                assert!(held <= max, "{held} units held under a limit of {max}");
                self.held.fetch_sub(weight, Ordering::SeqCst);
                drop(permit);
                Ok(())
            }
            Err(refused) => Err(assert_could_not_fit(refused, weight)),
        }
    }

    fn assert_drained(&self) {
        assert_eq!(self.limiter.in_flight(), 0);
        assert_eq!(self.held.load(Ordering::SeqCst), 0);
    }
}

/// Asserts `refused` is a `Full` for a state in which `weight` did not fit,
/// and returns that state's units in flight.
fn assert_could_not_fit(refused: InFlightError, weight: u64) -> u64 {
    match refused {
        InFlightError::Full { in_flight, max } => {
            assert!(in_flight <= max, "{in_flight} in flight under {max}");
            assert!(
                in_flight + weight > max,
                "{weight} fitted in {in_flight} of {max}"
            );
            in_flight
        }
        other => panic!("models make valid requests: {other}"),
    }
}

#[test]
fn three_threads_race_for_two_units() {
    // Each thread's outcome: `None` if granted, else the `in_flight` its
    // refusal reported. Permits are kept until after the joins, so exactly
    // two grants fit.
    let runs = gather(|| {
        let limiter = Arc::new(ConcurrencyLimiter::new(2).unwrap());
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                thread::spawn(move || limiter.try_acquire_owned(1))
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(limiter.in_flight(), 2);
        let outcomes: Vec<_> = results
            .iter()
            .map(|r| r.as_ref().err().map(|&e| assert_could_not_fit(e, 1)))
            .collect();
        drop(results);
        assert_eq!(limiter.in_flight(), 0);
        outcomes
    });
    // One refusal per run, on both other units held; each thread is the
    // loser in some run.
    let expected = |loser: usize| {
        (0..3)
            .map(|t| (t == loser).then_some(2))
            .collect::<Vec<_>>()
    };
    assert_eq!(runs, (0..3).map(expected).collect());
}

#[test]
fn holders_that_let_go_never_exceed_the_limit() {
    // Two threads take a unit, hold it (checking the tally) and let go,
    // under a limit of one: either may be refused, or neither.
    let runs = gather(|| {
        let shared = Shared::new(1);
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let shared = shared.clone();
                thread::spawn(move || shared.hold_once(1).err())
            })
            .collect();
        let outcomes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        shared.assert_drained();
        outcomes
    });
    assert_eq!(
        runs,
        BTreeSet::from([vec![None, None], vec![None, Some(1)], vec![Some(1), None]])
    );
}

#[test]
fn three_threads_mixing_weights_grant_and_release() {
    // Weights 1, 1 and 2 under a limit of 2, each released in its thread.
    // A holder reads the word itself while holding: it must never show more
    // than the limit (nor less than the holder's own weight).
    let runs = gather(|| {
        let limiter = Arc::new(ConcurrencyLimiter::new(2).unwrap());
        let threads: Vec<_> = [1, 1, 2]
            .into_iter()
            .map(|weight| {
                let limiter = Arc::clone(&limiter);
                thread::spawn(move || match limiter.try_acquire(weight) {
                    Ok(permit) => {
                        let in_flight = limiter.in_flight();
                        assert!((weight..=2).contains(&in_flight), "{in_flight} in flight");
                        drop(permit);
                        None
                    }
                    Err(refused) => Some(assert_could_not_fit(refused, weight)),
                })
            })
            .collect();
        let outcomes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(limiter.in_flight(), 0);
        outcomes
    });
    // A light thread is refused only while the heavy permit is held (2 in
    // flight); the heavy one on one light permit (1) or both (2). Any other
    // outcome would be a refusal of a weight that fitted.
    let run = |outcomes: [Option<u64>; 3]| outcomes.to_vec();
    let expected = BTreeSet::from([
        run([None, None, None]),
        run([None, None, Some(1)]),
        run([None, None, Some(2)]),
        run([None, Some(2), None]),
        run([Some(2), None, None]),
        run([Some(2), Some(2), None]),
    ]);
    assert_eq!(runs, expected);
}

#[test]
fn a_weighted_race_for_the_last_units() {
    // One unit held by the main thread; two threads race for the other two,
    // each wanting both. Permits are kept until after the joins.
    let winners = gather(|| {
        let limiter = Arc::new(ConcurrencyLimiter::new(3).unwrap());
        let setup = limiter.try_acquire_owned(1).unwrap();
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                thread::spawn(move || limiter.try_acquire_owned(2))
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(limiter.in_flight(), 3);
        let winner = results.iter().position(Result::is_ok).expect("nobody won");
        let loser = &results[1 - winner];
        // The loser decided on the winner's state: 1 + 2 of 3 held. Having
        // loaded the initial 1 is no excuse, since 2 fitted there.
        assert_eq!(
            loser.as_ref().unwrap_err(),
            &InFlightError::Full {
                in_flight: 3,
                max: 3
            }
        );
        drop((setup, results));
        assert_eq!(limiter.in_flight(), 0);
        winner
    });
    assert_eq!(winners, BTreeSet::from([0, 1]));
}

#[test]
fn weights_that_fit_together_are_both_granted() {
    model(|| {
        let limiter = Arc::new(ConcurrencyLimiter::new(3).unwrap());
        let threads: Vec<_> = [2, 1]
            .into_iter()
            .map(|weight| {
                let limiter = Arc::clone(&limiter);
                thread::spawn(move || limiter.try_acquire_owned(weight).map(|p| p.weight()))
            })
            .collect();
        // A lost compare-and-swap re-decides on the winner's state and still
        // fits. Each permit is dropped inside its thread.
        for (thread, weight) in threads.into_iter().zip([2, 1]) {
            assert_eq!(thread.join().unwrap(), Ok(weight));
        }
        assert_eq!(limiter.in_flight(), 0);
    });
}

#[test]
fn grants_and_releases_churn_within_the_limit() {
    // Two threads each take a heavy and a light permit in turn, in opposite
    // orders, releasing each before the next.
    let outcomes = gather(|| {
        let shared = Shared::new(3);
        let threads: Vec<_> = [[2, 1], [1, 2]]
            .into_iter()
            .map(|weights| {
                let shared = shared.clone();
                thread::spawn(move || weights.map(|w| shared.hold_once(w).err()))
            })
            .collect();
        let outcomes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        shared.assert_drained();
        outcomes
    });
    // A refusal needs both heavy permits (2 + 2 > 3) held at once, so only
    // a heavy request is ever refused, having seen the other's 2.
    for run in &outcomes {
        for (thread, weights) in run.iter().zip([[2, 1], [1, 2]]) {
            for (outcome, weight) in thread.iter().zip(weights) {
                assert!(
                    outcome.is_none() || (weight == 2 && *outcome == Some(2)),
                    "{run:?}"
                );
            }
        }
    }
    assert!(
        outcomes
            .iter()
            .any(|run| run.iter().flatten().any(Option::is_some))
    );
}

#[test]
fn a_limit_of_one_orders_the_work_it_guards() {
    // Relaxed accesses to `data`, guarded only by the limiter: a grant must
    // see everything done under the permit released before it, or an
    // increment is lost.
    model(|| {
        let limiter = Arc::new(ConcurrencyLimiter::new(1).unwrap());
        let data = loom::sync::Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (limiter, data) = (Arc::clone(&limiter), loom::sync::Arc::clone(&data));
                thread::spawn(move || {
                    let Ok(permit) = limiter.try_acquire(1) else {
                        return 0;
                    };
                    let seen = data.load(Ordering::Relaxed);
                    data.store(seen + 1, Ordering::Relaxed);
                    drop(permit);
                    1
                })
            })
            .collect();
        let granted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(granted >= 1);
        assert_eq!(data.load(Ordering::Relaxed), granted);
        assert_eq!(limiter.in_flight(), 0);
    });
}

#[test]
fn split_permits_return_their_shares_from_other_threads() {
    // The main thread takes all 3 units, splits off 1 and hands both parts
    // to threads that drop them, while a third thread asks for 2.
    let outcomes = gather(|| {
        let limiter = Arc::new(ConcurrencyLimiter::new(3).unwrap());
        let mut two = limiter.try_acquire_owned(3).unwrap();
        let one = two.split(1).unwrap();
        let droppers = [
            thread::spawn(move || drop(one)),
            thread::spawn(move || drop(two)),
        ];
        let asker = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || match limiter.try_acquire(2) {
                Ok(_) => None,
                Err(refused) => Some(assert_could_not_fit(refused, 2)),
            })
        };
        for dropper in droppers {
            dropper.join().unwrap();
        }
        let outcome = asker.join().unwrap();
        assert_eq!(limiter.in_flight(), 0);
        outcome
    });
    // Refused while both parts are held (3) or only the 2-unit part is (2);
    // granted once the 2-unit part is back. Had the split moved the wrong
    // weight, the refusal on 2 would be a refusal on 1, where 2 fits.
    assert_eq!(outcomes, BTreeSet::from([None, Some(2), Some(3)]));
}
