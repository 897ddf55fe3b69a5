//! Property tests of the window counters against exact models.
//!
//! The models know nothing of the packed word: they keep the cost admitted
//! (and not given back) per absolute window, numbered from the clock's
//! epoch less the offset, in a map, and decide in exact rationals. A fixed
//! counter must make exactly the decisions of an exact fixed-window
//! counter, and a sliding counter exactly those of the weighted estimate
//! (`prev · (W - p) / W + cur`), with the same `retry_after` (the model
//! searches for the first nanosecond at which the request fits) and the
//! same `available()`, and the same reservations: counted in the current
//! window for use later in it, never in a window not yet begun.
//!
//! Beside them, an exact sliding log of every admission still kept checks
//! the approximation bound of `docs/semantics.md` ("Windows") at every
//! decision: an admission at position `p` of its window finds at most
//! `N + P · p / W` (`P` the previous window's count) in the rolling window
//! ending at it, itself included, so never `2N`; a refusal finds more
//! than `N - P · (W - p) / W` there.

use std::collections::BTreeMap;
use std::time::Duration;

use num_rational::Ratio;
use proptest::prelude::*;
use tollgate::window::{Fixed, Sliding, WindowCounter, WindowKind};
use tollgate::{AcquireError, Limit, ManualClock, Receipt, WindowQuota};

type Q = Ratio<i128>;

/// Window lengths: odd and tiny (every nanosecond a boundary case), and the
/// lengths contracts are written in.
const WINDOWS_NS: [u64; 5] = [17, 1_000, 333_333, 1_000_000_000, 60_000_000_000];

#[derive(Clone, Copy, Debug)]
struct Spec {
    limit: u64,
    window_ns: u64,
    offset_64ths: u64,
    created_64ths: u64,
}

impl Spec {
    fn window(&self) -> i128 {
        i128::from(self.window_ns)
    }

    fn scaled(&self, sixty_fourths: u64) -> u64 {
        self.window_ns * sixty_fourths / 64
    }

    fn quota(&self) -> WindowQuota {
        WindowQuota::new(self.limit, Duration::from_nanos(self.window_ns))
            .unwrap()
            .with_offset(Duration::from_nanos(self.scaled(self.offset_64ths)))
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        1u64..=12,
        prop::sample::select(&WINDOWS_NS[..]),
        0u64..64,
        0u64..=256,
    )
        .prop_map(|(limit, window_ns, offset_64ths, created_64ths)| Spec {
            limit,
            window_ns,
            offset_64ths,
            created_64ths,
        })
}

/// How far the clock moves before an operation.
#[derive(Clone, Copy, Debug)]
enum Gap {
    Nanos(u64),
    /// This many 64ths of a window.
    Sixtyfourths(u64),
    /// Exactly this many windows: from a boundary, onto the next ones.
    Windows(u64),
    /// The `retry_after` of the last refusal.
    LastRetry,
}

fn gap() -> impl Strategy<Value = Gap> {
    prop_oneof![
        3 => (0u64..=2).prop_map(Gap::Nanos),
        3 => (0u64..=96).prop_map(Gap::Sixtyfourths),
        1 => (1u64..=3).prop_map(Gap::Windows),
        1 => Just(Gap::LastRetry),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Cost {
    /// `k % (limit + 2)`: zero, every valid cost, and one past the limit.
    Any(u64),
    /// `min(k, limit)`.
    Small(u64),
}

fn cost() -> impl Strategy<Value = Cost> {
    prop_oneof![
        (0u64..=13).prop_map(Cost::Any),
        (1u64..=3).prop_map(Cost::Small),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Acquire(Cost),
    /// An admission kept as a receipt.
    Take(Cost),
    /// Undoes the receipt at this index (modulo those held), if any.
    Undo(usize),
    RetryAfter(Cost),
    /// A reservation with a longest wait of this many 64ths of a window.
    Reserve(Cost, u64),
    Available,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => cost().prop_map(Op::Acquire),
        2 => cost().prop_map(Op::Take),
        2 => (0usize..8).prop_map(Op::Undo),
        1 => cost().prop_map(Op::RetryAfter),
        2 => (cost(), 0u64..=96).prop_map(|(cost, slack)| Op::Reserve(cost, slack)),
        1 => Just(Op::Available),
    ]
}

/// An admission still kept: when, how much, in which window.
#[derive(Clone, Copy, Debug)]
struct Kept {
    at: i128,
    cost: u64,
    window: i128,
}

/// The exact counters and the sliding log, on absolute windows.
struct Model {
    spec: Spec,
    sliding: bool,
    offset: i128,
    /// Cost kept per window.
    counts: BTreeMap<i128, u64>,
    /// Every admission kept, with its receipt's id if it has one.
    log: Vec<(Option<usize>, Kept)>,
}

impl Model {
    fn new(spec: Spec, sliding: bool) -> Self {
        Model {
            spec,
            sliding,
            offset: i128::from(spec.scaled(spec.offset_64ths)),
            counts: BTreeMap::new(),
            log: Vec::new(),
        }
    }

    /// The window of `at` and how far into it `at` lies.
    fn place(&self, at: i128) -> (i128, i128) {
        let since = at - self.offset;
        (
            since.div_euclid(self.spec.window()),
            since.rem_euclid(self.spec.window()),
        )
    }

    fn count(&self, window: i128) -> u64 {
        self.counts.get(&window).copied().unwrap_or(0)
    }

    /// What counts against a request at `at`: the current window's count,
    /// and for a sliding window the previous one's weighted by the part of
    /// the rolling window it still covers.
    fn estimate(&self, at: i128) -> Q {
        let (window, pos) = self.place(at);
        let previous = if self.sliding {
            Q::new(
                i128::from(self.count(window - 1)) * (self.spec.window() - pos),
                self.spec.window(),
            )
        } else {
            Q::from_integer(0)
        };
        previous + Q::from_integer(i128::from(self.count(window)))
    }

    fn fits(&self, at: i128, cost: u64) -> bool {
        self.estimate(at) + Q::from_integer(i128::from(cost))
            <= Q::from_integer(i128::from(self.spec.limit))
    }

    fn check(&self, cost: u64) -> Result<(), AcquireError> {
        match cost {
            0 => Err(AcquireError::ZeroCost),
            cost if cost > self.spec.limit => Err(AcquireError::ExceedsCapacity {
                cost,
                capacity: self.spec.limit,
            }),
            _ => Ok(()),
        }
    }

    /// The first nanosecond from `at` on at which `cost` fits, by search:
    /// the estimate only falls as time passes, and two windows on it is 0.
    fn retry_after(&self, at: i128, cost: u64) -> Duration {
        let (window, _) = self.place(at);
        let (mut refused, mut fits) = (at, self.offset + (window + 2) * self.spec.window());
        if self.fits(at, cost) {
            return Duration::ZERO;
        }
        while fits - refused > 1 {
            let mid = refused + (fits - refused) / 2;
            if self.fits(mid, cost) {
                fits = mid;
            } else {
                refused = mid;
            }
        }
        Duration::from_nanos(u64::try_from(fits - at).unwrap())
    }

    fn available(&self, at: i128) -> u64 {
        let left = Q::from_integer(i128::from(self.spec.limit)) - self.estimate(at);
        u64::try_from(left.floor().to_integer().max(0)).unwrap()
    }

    fn acquire(&mut self, at: i128, cost: u64, receipt: Option<usize>) -> Result<(), AcquireError> {
        self.check(cost)?;
        self.assert_log_bound(at, cost);
        if !self.fits(at, cost) {
            return Err(AcquireError::Insufficient {
                retry_after: self.retry_after(at, cost),
            });
        }
        let (window, _) = self.place(at);
        *self.counts.entry(window).or_insert(0) += cost;
        self.log.push((receipt, Kept { at, cost, window }));
        Ok(())
    }

    /// A reservation of `cost` at `at` waiting at most `slack`: admitted
    /// now if it fits; else counted in the current window, to be used at
    /// the first instant it fits, if that instant is in this window and at
    /// most `slack` away; else refused with the wait until the same call
    /// would succeed: when that instant is at most `slack` ahead and in the
    /// window then current.
    fn reserve(&mut self, at: i128, cost: u64, slack: i128) -> Result<Duration, AcquireError> {
        self.check(cost)?;
        if self.fits(at, cost) {
            return self.acquire(at, cost, None).map(|()| Duration::ZERO);
        }
        let wait = i128::try_from(self.retry_after(at, cost).as_nanos()).unwrap();
        let due = at + wait;
        let (window, _) = self.place(at);
        let (due_window, due_pos) = self.place(due);
        if due_window == window && wait <= slack {
            *self.counts.entry(window).or_insert(0) += cost;
            // Logged when decided: the log bounds what each window counted.
            self.log.push((None, Kept { at, cost, window }));
            return Ok(Duration::from_nanos(u64::try_from(wait).unwrap()));
        }
        let from = (due - slack).max(due - due_pos);
        Err(AcquireError::Insufficient {
            retry_after: Duration::from_nanos(u64::try_from(from - at).unwrap()),
        })
    }

    /// A receipt's undo: its cost leaves its window's count while that
    /// window lasts, and nothing happens after.
    fn undo(&mut self, at: i128, receipt: usize) {
        let i = self
            .log
            .iter()
            .position(|&(id, _)| id == Some(receipt))
            .expect("a receipt undone once");
        let (_, kept) = self.log[i];
        if self.place(at).0 == kept.window {
            self.log.remove(i);
            *self.counts.get_mut(&kept.window).unwrap() -= kept.cost;
        }
    }

    /// The bound against the exact sliding log (sliding windows), or the
    /// `2N` of two adjacent windows (fixed ones), for a decision of `cost`
    /// at `at` about to be made.
    fn assert_log_bound(&self, at: i128, cost: u64) {
        let w = self.spec.window();
        let logged: i128 = self
            .log
            .iter()
            .filter(|(_, kept)| at - w < kept.at && kept.at <= at)
            .map(|(_, kept)| i128::from(kept.cost))
            .sum();
        let (window, pos) = self.place(at);
        let (n, k) = (i128::from(self.spec.limit), i128::from(cost));
        let admits = self.fits(at, cost);
        if !self.sliding {
            assert!(
                !admits || logged + k <= 2 * n,
                "fixed: {logged} + {k} at {at}"
            );
            return;
        }
        let previous = i128::from(self.count(window - 1));
        let excess = (logged + k - n) * w;
        if admits {
            assert!(
                excess <= previous * pos,
                "admitted {k} with {logged} in the rolling window at {at} (P {previous}, p {pos})"
            );
        } else {
            assert!(
                excess > -(previous * (w - pos)),
                "refused {k} with {logged} in the rolling window at {at} (P {previous}, p {pos})"
            );
        }
    }
}

fn run<K: WindowKind>(spec: Spec, sliding: bool, gaps_and_ops: &[(Gap, Op)]) {
    let clock = ManualClock::new();
    let mut now = spec.scaled(spec.created_64ths);
    clock.set(Duration::from_nanos(now));
    let limiter: WindowCounter<K, ManualClock> =
        WindowCounter::with_clock(spec.quota(), clock.clone()).unwrap();
    let mut model = Model::new(spec, sliding);
    let mut receipts: Vec<(usize, Receipt<&WindowCounter<K, ManualClock>>)> = Vec::new();
    let mut last_retry = Duration::ZERO;
    let resolve = |cost: Cost| match cost {
        Cost::Any(k) => k % (spec.limit + 2),
        Cost::Small(k) => k.min(spec.limit),
    };
    for (step, &(gap, op)) in gaps_and_ops.iter().enumerate() {
        now += match gap {
            Gap::Nanos(n) => n,
            Gap::Sixtyfourths(k) => spec.scaled(k),
            Gap::Windows(n) => n * spec.window_ns,
            Gap::LastRetry => u64::try_from(last_retry.as_nanos()).unwrap(),
        };
        clock.set(Duration::from_nanos(now));
        let at = i128::from(now);
        let context = format!("step {step}: {op:?} at {now} ns, {spec:?}");
        match op {
            Op::Acquire(cost) | Op::Take(cost) => {
                let cost = resolve(cost);
                let keep = matches!(op, Op::Take(_)).then_some(step);
                let got = match keep {
                    Some(id) => Receipt::take(&limiter, cost).map(|r| receipts.push((id, r))),
                    None => limiter.try_acquire(cost),
                };
                let expected = model.acquire(at, cost, keep);
                assert_eq!(got, expected, "{context}");
                if let Err(AcquireError::Insufficient { retry_after }) = got {
                    last_retry = retry_after;
                }
            }
            Op::Undo(i) if !receipts.is_empty() => {
                let (id, receipt) = receipts.swap_remove(i % receipts.len());
                receipt.undo();
                model.undo(at, id);
            }
            Op::Undo(_) => {}
            Op::RetryAfter(cost) => {
                let cost = resolve(cost);
                let expected = model.check(cost).map(|()| model.retry_after(at, cost));
                assert_eq!(limiter.retry_after(cost), expected, "{context}");
            }
            Op::Reserve(cost, slack) => {
                let cost = resolve(cost);
                let slack = spec.scaled(slack);
                let got = limiter.reserve(cost, Duration::from_nanos(slack));
                assert_eq!(got, model.reserve(at, cost, i128::from(slack)), "{context}");
                if let Err(AcquireError::Insufficient { retry_after }) = got {
                    last_retry = retry_after;
                }
            }
            Op::Available => assert_eq!(limiter.available(), model.available(at), "{context}"),
        }
    }
    for (_, receipt) in receipts {
        receipt.keep();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_fixed_window_decides_as_an_exact_fixed_window_counter(
        spec in spec(),
        gaps_and_ops in prop::collection::vec((gap(), op()), 1..80),
    ) {
        run::<Fixed>(spec, false, &gaps_and_ops);
    }

    #[test]
    fn a_sliding_window_decides_as_its_exact_estimate_within_the_bound_of_a_sliding_log(
        spec in spec(),
        gaps_and_ops in prop::collection::vec((gap(), op()), 1..80),
    ) {
        run::<Sliding>(spec, true, &gaps_and_ops);
    }
}

/// The bound is tight: a previous window spent at its last nanosecond and
/// a current one filled just before its own last lets `2N - 1` into one
/// rolling window, which an exact sliding log would cap at `N`.
#[test]
fn a_sliding_window_can_admit_2n_minus_1_in_a_rolling_window_and_no_more() {
    const N: u64 = 10;
    let window = Duration::from_secs(1);
    let clock = ManualClock::new();
    let limiter =
        WindowCounter::<Sliding, _>::with_clock(WindowQuota::new(N, window).unwrap(), &clock)
            .unwrap();
    let first = window - Duration::from_nanos(1);
    clock.set(first);
    limiter.try_acquire(N).unwrap();
    // Two nanoseconds before the next window ends, the first window's N
    // weigh N · 2 ns / 1 s, which rounds up to one unit: N - 1 fit.
    let second = 2 * window - Duration::from_nanos(2);
    clock.set(second);
    assert_eq!(limiter.available(), N - 1);
    limiter.try_acquire(N - 1).unwrap();
    assert!(limiter.try_acquire(1).is_err());
    // Both admissions lie in the rolling window ending at the second.
    assert!(second - first < window);
}
