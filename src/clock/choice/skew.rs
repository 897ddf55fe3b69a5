//! The check that every CPU reads the time-stamp counter alike: a
//! ping-pong of readings between two pinned threads, against the first CPU,
//! and the bounds it is held to.

use std::thread;
use std::time::{Duration, Instant};

use super::Reason;
use super::machine::Machine;
use crate::sync::Ordering;
use crate::sync::unmodelled::AtomicU64;

/// The largest disagreement between two CPUs' counters the default clock
/// accepts, as bounded by the check at calibration. Far below any emission
/// interval a limiter is built for, and far above what the check can
/// resolve (twice a cache line's trip between two cores, a few hundred
/// nanoseconds on a virtual machine), so that a machine whose counters
/// agree passes even when the check runs on a busy machine.
pub(crate) const MAX_SKEW: Duration = Duration::from_micros(10);

/// What the check may spend: round trips per CPU, and time in all.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    pub(crate) rounds: u32,
    pub(crate) time: Duration,
}

/// The default clock's budget: 256 round trips against each CPU, the
/// whole check 2.7 to 4.8 ms on the development machine's two CPUs; the
/// time bound keeps a machine too busy to answer from delaying the first
/// limiter by more than quanta's own calibration may (200 ms).
pub(crate) const BUDGET: Budget = Budget {
    rounds: 256,
    time: Duration::from_millis(100),
};

/// Bounds how far apart the counters of `cpus` are, in nanoseconds.
///
/// Against the first CPU, each other one plays ping-pong: a thread pinned
/// to the first reads `t1` and hands the turn over, one pinned to the
/// other reads `t2` and hands it back, the first reads `t3`. With the
/// other's counter ahead by `d`, `t1 < t2 - d < t3` in the first's time, so
/// `t2 - t3 < d < t2 - t1`: every round narrows an interval around `d`,
/// and the tightest is kept. A round's interval is as wide as its round
/// trip, so the bound is honest whatever the scheduler did, and tight once
/// one round ran undisturbed. The disagreement of any two CPUs is within
/// the spread of all the intervals, the first CPU's `[0, 0]` included.
pub(super) fn skew(machine: &impl Machine, cpus: &[usize], budget: Budget) -> Result<u64, Reason> {
    let deadline = Instant::now() + budget.time;
    let max = u64::try_from(MAX_SKEW.as_nanos()).unwrap_or(u64::MAX);
    let nanos =
        |ticks: i128| machine.nanos(u64::try_from(ticks.unsigned_abs()).unwrap_or(u64::MAX));
    let (&first, others) = cpus.split_first().ok_or(Reason::CpusUnknown)?;
    let (mut lowest, mut highest) = (0i128, 0i128);
    for &cpu in others {
        let (low, high) = offset(machine, first, cpu, budget.rounds, deadline)?;
        // An interval that excludes zero by more than the bound proves the
        // skew; one that straddles it bounds it.
        let apart = if low > 0 { low } else { -high.min(0) };
        if nanos(apart) > max {
            return Err(Reason::Skewed {
                cpu,
                at_least_ns: nanos(apart),
            });
        }
        lowest = lowest.min(low.min(high));
        highest = highest.max(high.max(low));
    }
    let bound_ns = nanos(highest - lowest);
    if bound_ns > max {
        return Err(Reason::Unbounded { bound_ns });
    }
    Ok(bound_ns)
}

/// The ping-pong of [`skew`] between `first` and `other`: the tightest
/// `(max(t2 - t3), min(t2 - t1))` over `rounds` rounds, in ticks.
///
/// Hand-written: no maintained crate measures cross-CPU counter offsets.
/// Both sides run on threads of their own, so that the caller's thread is
/// never pinned.
fn offset(
    machine: &impl Machine,
    first: usize,
    other: usize,
    rounds: u32,
    deadline: Instant,
) -> Result<(i128, i128), Reason> {
    // The turn: `2k + 1` when round `k`'s `t1` is read and `t2` is due,
    // `2k + 2` when `t2` is in `reading`; `STOPPED` once either side gives
    // up (a refused pin, the deadline), which ends the other's wait.
    const STOPPED: u64 = u64::MAX;
    let turn = AtomicU64::new(0);
    let reading = AtomicU64::new(0);
    // Waits for the turn to reach `value`; false if the check stopped.
    let wait_for = |value: u64| {
        let mut spins = 0u32;
        loop {
            match turn.load(Ordering::Acquire) {
                STOPPED => return false,
                now if now >= value => return true,
                _ => {}
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && Instant::now() > deadline {
                turn.store(STOPPED, Ordering::Release);
                return false;
            }
            std::hint::spin_loop();
        }
    };
    // Passes the turn on from `from`; false if the other side stopped the
    // check meanwhile (a store would hide that from it).
    let hand_over = |from: u64| {
        turn.compare_exchange(from, from + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    };
    thread::scope(|scope| {
        let spawn = |name: &str| thread::Builder::new().name(format!("tollgate-clock-{name}"));
        let answering = spawn("peer")
            .spawn_scoped(scope, || {
                if !machine.pin(other) {
                    turn.store(STOPPED, Ordering::Release);
                    return false;
                }
                for round in 0..u64::from(rounds) {
                    if !wait_for(2 * round + 1) {
                        return true;
                    }
                    reading.store(machine.counter(), Ordering::Relaxed);
                    if !hand_over(2 * round + 1) {
                        return true;
                    }
                }
                true
            })
            .map_err(|error| Reason::NoThread(error.kind()))?;
        let asking = spawn("probe").spawn_scoped(scope, || {
            if !machine.pin(first) {
                turn.store(STOPPED, Ordering::Release);
                return Err(Reason::PinRefused { cpu: first });
            }
            let (mut low, mut high) = (i128::MIN, i128::MAX);
            for round in 0..u64::from(rounds) {
                if Instant::now() > deadline {
                    turn.store(STOPPED, Ordering::Release);
                    return Err(Reason::OutOfTime);
                }
                let t1 = machine.counter();
                if !hand_over(2 * round) || !wait_for(2 * round + 2) {
                    return Err(Reason::OutOfTime);
                }
                let t3 = machine.counter();
                let t2 = i128::from(reading.load(Ordering::Relaxed));
                low = low.max(t2 - i128::from(t3));
                high = high.min(t2 - i128::from(t1));
            }
            Ok((low, high))
        });
        let asked = match asking {
            Ok(asking) => asking.join().unwrap_or(Err(Reason::OutOfTime)),
            Err(error) => {
                turn.store(STOPPED, Ordering::Release);
                Err(Reason::NoThread(error.kind()))
            }
        };
        let pinned = answering.join().unwrap_or(false);
        match asked {
            // The peer's refusal stopped the asking side too.
            Err(_) if !pinned => Err(Reason::PinRefused { cpu: other }),
            asked => asked,
        }
    })
}
