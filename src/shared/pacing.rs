//! When a local allowance asks its store again: after a grant that says
//! the shared budget is exhausted or nearly so (short of its ask, or
//! leaving less than a batch in the store), and after a failed call.
//!
//! The rule ([`docs/distributed.md`](crate::guide::distributed), "Pacing"): a node whose grant was
//! scarce waits until its *share* of the key's refill has grown to a batch
//! worth a round trip. It does not know how many nodes share the key, so it
//! measures its share: of the `interval / refill_interval` tokens the store
//! refilled since this node's previous call, it was granted `granted`. With
//! `n` nodes asking at the same pace, that share is about `1/n`, and a
//! node waiting `batch · refill_interval / share` makes the whole fleet ask
//! once per `batch` tokens of refill, however many nodes there are: round
//! trips per admission stay flat as the fleet grows. Each pause is spread
//! by jitter, so nodes refused at the same moment drift apart instead of
//! coming back together.
//!
//! Nothing here can break the shared bound: pacing only decides *when* a
//! node asks. A store's absurd reply (a `retry_after` or interval of zero or
//! `Duration::MAX`, a grant above the ask) moves the pause within
//! [`MIN_PAUSE`]..=[`LONGEST_PACE`], never outside.

use std::time::Duration;

use tokio::time::Instant;

use crate::jitter::{JitterGenerator, JitterSource};

/// The shortest pause between two store calls of one allowance, the least
/// `retry_after` it reports and the shortest idle check, whatever the
/// configuration or the store says: a zero would turn every refused caller
/// into a store call, or the idle watcher into a spinning task.
pub(crate) const MIN_PAUSE: Duration = Duration::from_millis(1);

/// The longest pause after a failure, for a store's `retry_after`, or
/// from the configured floor: a node sees a store back up within this, and
/// a `retry_after` of `Duration::MAX` cannot stall it for ever.
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(1);

/// The longest paced pause, whatever share a node estimates or refill
/// interval its store reports. Longer than [`MAX_PAUSE`]: a key refilling
/// 1000 tokens a second in batches of 125, shared by 16 nodes, has each
/// node wait 2 s, while the fleet still asks every 125 ms; a cap of 1 s
/// there would double the fleet's round trips. Bounded all the same, so a
/// node notices within this that the others have gone.
pub(crate) const LONGEST_PACE: Duration = Duration::from_secs(10);

/// A batch is at most this fraction of the key's capacity `B`. Paced
/// nodes ask the store about once per batch of refill, at random moments:
/// refill beyond `B` between two asks is lost, and a gap between two asks
/// of eight times the mean is rare (about `e^-8` of the time for asks at
/// random), so almost nothing is.
const BATCHES_PER_CAPACITY: u64 = 8;

/// After a scarce grant, the next ask is for at least one batch, and up to
/// this many as the node's demand spends within [`LONGEST_HOLD`] (a batch
/// is at most this fraction of `max_lease`): a node with the demand to
/// spend them sweeps up refill the fleet left behind in one call instead
/// of leaving it for a round trip more. A node's demand, measured by what
/// it spends, is only its share of the refill while the budget is
/// exhausted: asks sized by it alone would shrink as the fleet grows,
/// hence the floor of a batch.
const BATCHES_PER_ASK: u64 = 4;

/// A lease asks for at least what the node's demand spends in this long
/// (up to a batch while the key has plenty, up to [`BATCHES_PER_ASK`]
/// batches while it is scarce), not only `lease_period`'s worth: a node
/// spending 40 tokens a second on a key of `B = 1000` asks for 40, not 4,
/// so a burst drained by modest nodes costs one round trip per 40
/// admissions, not per 4. Short, because tokens a node holds are tokens
/// the rest of the fleet is refused: a modest node granted four batches
/// of an exhausted key would sit on them for seconds.
pub(crate) const LONGEST_HOLD: Duration = Duration::from_secs(1);

/// The most a node's share estimate falls at one grant: a single empty
/// grant (two nodes asking within one token's refill of each other) does
/// not send a node to the longest pause, and a fleet of 64 is still found
/// within two grants.
const MOST_FALL: f64 = 8.0;

/// The smallest share a node estimates for itself: a share below it (more
/// than 1024 nodes, or a run of empty grants) waits as long as it would,
/// bounded by [`MAX_PAUSE`] anyway.
const LEAST_SHARE: f64 = 1.0 / 1024.0;

/// What a store answered to one lease request, as pacing needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reply {
    /// Tokens asked for.
    pub(crate) asked: u64,
    /// Tokens granted (more is read as `asked`).
    pub(crate) granted: u64,
    /// Whole tokens the key's bucket held after the grant; `None` from a
    /// store that cannot tell.
    pub(crate) remaining: Option<u64>,
    /// The store's wait until one token exists (for an empty grant).
    pub(crate) retry_after: Duration,
    /// The store's time to refill one token; zero when it cannot tell.
    pub(crate) refill_interval: Duration,
    /// The key's capacity `B`.
    pub(crate) capacity: u64,
}

/// One allowance's pacing state: its estimated share of the key's refill,
/// when it last called the store, the batch it paces for, and its jitter
/// (the crate's generator; fixed fractions in tests).
#[derive(Debug)]
pub(crate) struct Pacer<J = JitterGenerator> {
    /// This node's share of the key's refill, in `LEAST_SHARE..=1`; 1
    /// until a scarce grant tells otherwise.
    share: f64,
    /// Tokens granted to this node, and tokens the store refilled over
    /// the same intervals (each the time since this node's previous call),
    /// both halved at every scarce grant: their ratio is the share,
    /// weighted by time, so a grant after a long wait counts for more than
    /// one right after another node's.
    received: f64,
    refilled: f64,
    /// When this node's last store call started.
    last_call: Option<Instant>,
    /// The allowance's `max_lease`.
    max_lease: u64,
    /// The batch of the last scarce grant; 0 once a grant left plenty.
    batch: u64,
    /// The batch of the key as the last grant that left plenty told its
    /// capacity; 0 before.
    key_batch: u64,
    jitter: J,
}

impl Pacer {
    /// A pacer for leases of at most `max_lease` tokens, that assumes it is
    /// alone until a scarce grant says otherwise.
    pub(crate) fn new(max_lease: u64) -> Pacer {
        Pacer::with_jitter(max_lease, JitterGenerator::from_entropy())
    }
}

impl<J: JitterSource> Pacer<J> {
    /// [`Pacer::new`] with its jitter drawn from `jitter`.
    pub(crate) fn with_jitter(max_lease: u64, jitter: J) -> Pacer<J> {
        Pacer {
            share: 1.0,
            received: 0.0,
            refilled: 0.0,
            last_call: None,
            max_lease,
            batch: 0,
            key_batch: 0,
            jitter,
        }
    }

    /// The fewest tokens the next lease should ask for, for a node whose
    /// smoothed demand is `demand` tokens a second: what it spends in
    /// [`LONGEST_HOLD`], at least one batch and at most
    /// [`BATCHES_PER_ASK`] while the budget is exhausted; at most a batch
    /// otherwise (nothing before the first grant told the key's
    /// capacity).
    pub(crate) fn least_ask(&self, demand: f64) -> u64 {
        // `as` saturates (NaN reads as 0): a bounded ask whatever the rate.
        let held = (demand * LONGEST_HOLD.as_secs_f64()).ceil() as u64;
        if self.batch > 0 {
            return held.clamp(self.batch, self.batch.saturating_mul(BATCHES_PER_ASK));
        }
        held.min(self.key_batch)
    }

    /// Whether `reply` says the key is exhausted or about to be: fewer
    /// tokens than asked, or (from a store that tells) less than a batch
    /// left behind. A node asking for a modest lease is granted it in full
    /// from the refill others leave, so a short grant alone would never
    /// pace it: it would ask once per few requests while the key is as
    /// exhausted for the fleet as for anyone.
    pub(crate) fn is_scarce(&self, reply: &Reply) -> bool {
        reply.granted < reply.asked
            || reply
                .remaining
                .is_some_and(|left| left < self.batch_of(reply.capacity))
    }

    /// The batch a node paces for on a key of `capacity`: an eighth of
    /// the capacity, a quarter of `max_lease`, at least one token.
    fn batch_of(&self, capacity: u64) -> u64 {
        (capacity / BATCHES_PER_CAPACITY)
            .min(self.max_lease / BATCHES_PER_ASK)
            .max(1)
    }

    /// Notes a grant that left the key of `capacity` plenty: the budget
    /// had enough, and the next ask follows demand, at least the batch
    /// demand spends within [`LONGEST_HOLD`].
    pub(crate) fn after_full(&mut self, capacity: u64) {
        self.batch = 0;
        self.key_batch = self.batch_of(capacity);
    }

    /// Notes a store call starting at `now`; returns the time since the
    /// previous one, over which the store refilled what this call can get.
    pub(crate) fn calling(&mut self, now: Instant) -> Option<Duration> {
        let since = self.last_call.map(|at| now.saturating_duration_since(at));
        self.last_call = Some(now);
        since
    }

    /// This node's share of the key's refill, as estimated so far.
    #[cfg(test)]
    fn share(&self) -> f64 {
        self.share
    }

    /// The pause after `reply`, a scarce grant ([`is_scarce`](Self::is_scarce))
    /// received `since` the previous call (`None` for the first call): the fair
    /// pause of [`fair_pause`](Self::fair_pause), spread by jitter.
    pub(crate) fn after_scarce(
        &mut self,
        since: Option<Duration>,
        reply: Reply,
        floor: Duration,
    ) -> Duration {
        let (pause, longest) = self.fair_pause(since, reply, floor);
        spread(pause, longest, &mut self.jitter)
    }

    /// The pause after `reply` before jitter, and the longest it may be
    /// once jittered: until this node's share of the refill has grown to a
    /// batch (an eighth of the capacity, a quarter of `max_lease`, at least
    /// one token), at most [`LONGEST_PACE`]; at least `floor` (the
    /// configured least pause) and the store's `retry_after`, each taken
    /// up to [`MAX_PAUSE`].
    ///
    /// Updates the share first: the tokens granted over the tokens
    /// refilled (`since / refill_interval`), both summed over this node's
    /// recent scarce grants (halved at each), at most 1, and at least an
    /// eighth of the previous estimate. An empty grant adds refill and no
    /// tokens (other nodes took them): a node crowded out waits longer next
    /// time.
    fn fair_pause(
        &mut self,
        since: Option<Duration>,
        reply: Reply,
        floor: Duration,
    ) -> (Duration, Duration) {
        // Guards against an absurd store or configuration: neither can
        // hold a node more than MAX_PAUSE, nor make it spin.
        let least = reply.retry_after.max(floor).clamp(MIN_PAUSE, MAX_PAUSE);
        let interval = reply.refill_interval;
        // A store that cannot tell its interval is paced by the floor and
        // its retry_after alone.
        if interval.is_zero() {
            return (least, MAX_PAUSE);
        }
        // Nanoseconds as floats: exact for every whole number of them
        // below 2^53 (104 days), close enough beyond.
        let interval_ns = interval.as_nanos() as f64;
        if let Some(since) = since {
            let granted = reply.granted.min(reply.asked);
            self.received = 0.5 * self.received + granted as f64;
            self.refilled = 0.5 * self.refilled + since.as_nanos() as f64 / interval_ns;
            // Nothing refilled yet (calls at one instant) says nothing;
            // tokens over a tiny refill read as inf, then 1.
            let measured = if self.refilled > 0.0 {
                self.received / self.refilled
            } else {
                self.share
            };
            self.share = measured.clamp(self.share / MOST_FALL, 1.0).max(LEAST_SHARE);
        }
        let batch = self.batch_of(reply.capacity);
        self.batch = batch;
        let fair_ns = interval_ns * batch as f64 / self.share;
        // Compared in floats first: an absurd interval gives values no
        // integer holds (`as` would saturate, but say nothing).
        let fair = if fair_ns < LONGEST_PACE.as_nanos() as f64 {
            Duration::from_nanos(fair_ns as u64)
        } else {
            LONGEST_PACE
        };
        (fair.max(least), LONGEST_PACE)
    }
}

/// `pause` spread uniformly over `pause/2 ..= 3·pause/2` (so the mean stays
/// `pause`), then bounded to [`MIN_PAUSE`]..=`longest`: nodes refused at
/// the same moment come back at different ones, and the fleet's asks stay
/// spread over time rather than in waves.
pub(crate) fn spread(
    pause: Duration,
    longest: Duration,
    source: &mut impl JitterSource,
) -> Duration {
    let nanos = pause.min(longest).as_nanos();
    // A source may answer above its bound: the min keeps the draw in range.
    let drawn = source.draw_up_to(nanos).min(nanos);
    let spread = nanos / 2 + drawn;
    // At most 3/2 of `longest` in nanoseconds: fits in a u64 for every
    // `longest` used here.
    Duration::from_nanos(u64::try_from(spread).unwrap_or(u64::MAX)).clamp(MIN_PAUSE, longest)
}

/// How long a caller refused with the store's `retry_after` sleeps before
/// asking again, if that wait (at most 1 s of it, so that an endless one
/// cannot park a caller under a wait with no deadline) fits before
/// `deadline`: until the store's word ends (`word_ends`, if sooner than
/// `retry_after`: a node trusts a long wait for 1 s, not seeing tokens
/// given back meanwhile; zero for no word kept), spread by jitter, so that
/// callers refused together do not come back together, and never past the
/// deadline.
pub(crate) fn pause_before_asking_again(
    retry_after: Duration,
    word_ends: Duration,
    deadline: Option<Instant>,
    jitter: &mut JitterGenerator,
) -> Option<Duration> {
    let left = match deadline {
        Some(at) => at.saturating_duration_since(Instant::now()),
        None => Duration::MAX,
    };
    let until = match word_ends {
        Duration::ZERO => retry_after,
        ends => retry_after.min(ends),
    };
    (retry_after.min(MAX_PAUSE) <= left).then(|| spread(until, MAX_PAUSE, jitter).min(left))
}

/// The pause after `failures` failed calls in a row (at least one): it
/// doubles with each failure, from twice `lease_period / 4`, up to
/// [`MAX_PAUSE`], so a store that fails fast is not asked once per request.
/// Not jittered: "at most once a second" while a store is down is a
/// promise callers rely on, and a window around it would break it.
pub(crate) fn failure_backoff(lease_period: Duration, failures: u32) -> Duration {
    let first = (lease_period / 4).max(MIN_PAUSE);
    first.saturating_mul(1 << failures.min(16)).min(MAX_PAUSE)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn short(asked: u64, granted: u64) -> Reply {
        Reply {
            asked,
            granted,
            remaining: Some(0),
            retry_after: Duration::ZERO,
            refill_interval: MS,
            capacity: 8_000,
        }
    }

    /// Leases of at most 400 (batches of 100 under a capacity of 8000),
    /// jitter fixed at the middle of its window: exactly the fair pause
    /// for every even number of nanoseconds.
    fn paced() -> Pacer<impl JitterSource> {
        Pacer::with_jitter(400, || 0.5)
    }

    #[test]
    fn the_pause_lets_the_nodes_share_grow_to_a_batch() {
        let mut pacer = paced();
        // Alone so far: a batch of 100 at 1 ms a token is 100 ms.
        assert_eq!(pacer.after_scarce(None, short(100, 40), MS), 100 * MS);
        assert_eq!(pacer.share(), 1.0);
        // 25 of the 100 tokens refilled in 100 ms: a share of 1/4, so
        // four nodes' worth, 100 ms / (1/4) = 400 ms.
        assert_eq!(
            pacer.after_scarce(Some(100 * MS), short(100, 25), MS),
            400 * MS
        );
        assert_eq!(pacer.share(), 0.25);
        // 50 of 200 next: (25/2 + 50) / (100/2 + 200), still 1/4.
        assert_eq!(
            pacer.after_scarce(Some(200 * MS), short(100, 50), MS),
            400 * MS
        );
        // Then 75 of 100: the sums weigh it by its 100 ms, against the
        // 250 ms behind it halved: (62.5/2 + 75) / (250/2 + 100) = 0.4722..
        pacer.after_scarce(Some(100 * MS), short(100, 75), MS);
        assert_eq!(pacer.share(), 106.25 / 225.0);
    }

    #[test]
    fn fleet_round_trips_are_one_per_batch_whatever_the_fleet() {
        // n nodes, each granted 1/n of the refill: each waits n batches of
        // refill, so the fleet asks once per batch.
        for nodes in [1u32, 2, 4, 8, 16, 64] {
            let mut pacer = paced();
            let since = 100 * MS * nodes;
            let mut pause = Duration::ZERO;
            for _ in 0..60 {
                pause = pacer.after_scarce(Some(since), short(100, 99), Duration::ZERO);
            }
            // 99 of 100·n tokens: the pause is 100 ms · n · 100/99.
            let expected = (100 * MS * nodes).mul_f64(100.0 / 99.0);
            let error = pause.abs_diff(expected);
            assert!(error < Duration::from_micros(1), "{nodes}: {pause:?}");
        }
    }

    #[test]
    fn an_empty_grant_lowers_the_share_at_most_eightfold() {
        let mut pacer = paced();
        let empty = Reply {
            retry_after: 900 * MS,
            ..short(100, 0)
        };
        // Nothing of 10 tokens: a share of 0, taken as 1/8; the store's
        // longer retry_after wins over 100 ms / (1/8).
        assert_eq!(pacer.after_scarce(Some(10 * MS), empty, MS), 900 * MS);
        assert_eq!(pacer.share(), 0.125);
        let soon = Reply {
            retry_after: 30 * MS,
            ..empty
        };
        assert_eq!(pacer.after_scarce(None, soon, MS), 800 * MS);
        // A full share over the next second outweighs the empty 10 ms:
        // (0 + 1000) / (10/2 + 1000).
        pacer.after_scarce(Some(1000 * MS), short(2000, 1000), MS);
        assert_eq!(pacer.share(), 1000.0 / 1005.0);
    }

    #[test]
    fn a_batch_is_at_most_an_eighth_of_the_capacity_and_at_least_one() {
        let mut pacer = paced();
        let small = Reply {
            capacity: 80,
            ..short(100, 5)
        };
        assert_eq!(pacer.after_scarce(None, small, Duration::ZERO), 10 * MS);
        let tiny = Reply {
            capacity: 3,
            ..short(100, 1)
        };
        assert_eq!(pacer.after_scarce(None, tiny, Duration::ZERO), MS);
        // The configured floor wins over a shorter fair pause.
        assert_eq!(pacer.after_scarce(None, tiny, 25 * MS), 25 * MS);
    }

    #[test]
    fn an_exhausted_node_asks_for_a_second_of_demand_from_one_to_four_batches() {
        let mut pacer = paced();
        // Before any grant told the capacity: demand alone.
        assert_eq!(pacer.least_ask(1e9), 0);
        pacer.after_scarce(None, short(10, 5), MS);
        // Batches of 100: at least one, a second of demand up to four.
        assert_eq!(pacer.least_ask(0.0), 100);
        assert_eq!(pacer.least_ask(250.0), 250);
        assert_eq!(pacer.least_ask(1e9), 400);
        assert_eq!(pacer.least_ask(f64::NAN), 100);
        pacer.after_full(8_000);
        // Plenty: a second of demand, at most a batch (100).
        assert_eq!(pacer.least_ask(0.0), 0);
        assert_eq!(pacer.least_ask(42.5), 43);
        assert_eq!(pacer.least_ask(1e9), 100);
        assert_eq!(pacer.least_ask(f64::INFINITY), 100);
        assert_eq!(pacer.least_ask(f64::NAN), 0);
        // A batch is at most a quarter of max_lease.
        let mut small = Pacer::with_jitter(8, || 0.5);
        assert_eq!(
            small.after_scarce(None, short(8, 5), Duration::ZERO),
            2 * MS
        );
        assert_eq!(small.least_ask(0.0), 2);
        assert_eq!(small.least_ask(1e9), 8);
    }

    #[test]
    fn a_grant_is_scarce_when_short_or_when_it_left_less_than_a_batch() {
        let pacer = paced();
        // Batches of 100 (a quarter of max_lease 400, under B/8 = 1000).
        let full = |remaining| Reply {
            remaining,
            ..short(10, 10)
        };
        assert!(pacer.is_scarce(&short(10, 9)));
        assert!(pacer.is_scarce(&full(Some(0))));
        assert!(pacer.is_scarce(&full(Some(99))));
        assert!(!pacer.is_scarce(&full(Some(100))));
        // A store that cannot tell: only a short grant says it.
        assert!(!pacer.is_scarce(&full(None)));
        assert!(pacer.is_scarce(&Reply {
            remaining: None,
            ..short(10, 0)
        }));
        // A grant above the ask is not short.
        assert!(!pacer.is_scarce(&Reply {
            remaining: Some(u64::MAX),
            ..short(10, u64::MAX)
        }));
    }

    #[test]
    fn absurd_replies_stay_within_the_guards() {
        let mut pacer = paced();
        let cases = [
            // retry_after and interval of zero: the floor, then MIN_PAUSE.
            (Duration::ZERO, Duration::ZERO, 0, MIN_PAUSE),
            (Duration::ZERO, Duration::from_nanos(1), 1, MIN_PAUSE),
            // Duration::MAX anywhere: a bounded pause, never a stall or a
            // panic; MAX_PAUSE from retry_after, LONGEST_PACE from pacing.
            (Duration::MAX, MS, 0, MAX_PAUSE),
            (Duration::ZERO, Duration::MAX, 5, LONGEST_PACE),
            (Duration::MAX, Duration::MAX, u64::MAX, LONGEST_PACE),
        ];
        for (retry_after, refill_interval, granted, expected) in cases {
            let reply = Reply {
                asked: 10,
                granted,
                remaining: None,
                retry_after,
                refill_interval,
                capacity: u64::MAX,
            };
            let pause = pacer.after_scarce(Some(Duration::ZERO), reply, Duration::ZERO);
            assert_eq!(pause, expected, "{reply:?}");
            assert!((LEAST_SHARE..=1.0).contains(&pacer.share()));
        }
        // A grant above the ask counts as the ask: a share of at most 1.
        let mut pacer = paced();
        pacer.after_scarce(Some(MS), short(10, u64::MAX), MS);
        assert_eq!(pacer.share(), 1.0);
        // Empty grants in a row floor the share instead of reaching zero.
        for _ in 0..100 {
            pacer.after_scarce(Some(MS), short(10, 0), MS);
        }
        assert_eq!(pacer.share(), LEAST_SHARE);
    }

    #[test]
    fn the_spread_keeps_the_mean_and_the_bounds() {
        let at = |fraction: f64| spread(100 * MS, LONGEST_PACE, &mut || fraction);
        assert_eq!(at(0.0), 50 * MS);
        assert_eq!(at(0.5), 100 * MS);
        assert_eq!(at(1.0), 150 * MS);
        // Bounded whatever the pause or the source.
        assert_eq!(spread(Duration::ZERO, MAX_PAUSE, &mut || 0.0), MIN_PAUSE);
        assert_eq!(spread(Duration::MAX, MAX_PAUSE, &mut || 1.0), MAX_PAUSE);
        assert_eq!(spread(Duration::MAX, MAX_PAUSE, &mut || 0.0), MAX_PAUSE / 2);
        assert_eq!(
            spread(Duration::MAX, LONGEST_PACE, &mut || 1.0),
            LONGEST_PACE
        );
        assert_eq!(spread(MS, MAX_PAUSE, &mut || f64::NAN), MIN_PAUSE);
        // The crate's generator: every draw within the window, and not all
        // the same.
        let mut generator = JitterGenerator::new(7);
        let draws: Vec<Duration> = (0..100)
            .map(|_| spread(100 * MS, LONGEST_PACE, &mut generator))
            .collect();
        assert!(draws.iter().all(|d| (50 * MS..=150 * MS).contains(d)));
        assert!(draws.iter().any(|d| *d != draws[0]));
    }

    #[test]
    fn a_refused_caller_asks_again_when_the_stores_word_ends_within_its_deadline() {
        let mut jitter = JitterGenerator::new(3);
        let hour = Duration::from_secs(3600);
        for _ in 0..100 {
            // A wait of an hour trusted for 200 ms more: back by then.
            let pause = pause_before_asking_again(hour, 200 * MS, None, &mut jitter).unwrap();
            assert!((100 * MS..=300 * MS).contains(&pause), "{pause:?}");
            // No word kept: the wait itself, at most a second of it.
            let pause = pause_before_asking_again(hour, Duration::ZERO, None, &mut jitter).unwrap();
            assert!((500 * MS..=MAX_PAUSE).contains(&pause), "{pause:?}");
        }
        // A wait that does not fit the deadline is no reason to sleep.
        let soon = Instant::now() + 100 * MS;
        assert_eq!(
            pause_before_asking_again(500 * MS, 500 * MS, Some(soon), &mut jitter),
            None
        );
        let later = Instant::now() + 2 * MAX_PAUSE;
        let pause = pause_before_asking_again(hour, 300 * MS, Some(later), &mut jitter);
        assert!(pause.is_some_and(|pause| pause <= 450 * MS));
    }

    #[test]
    fn failures_back_off_doubling_up_to_the_longest_pause() {
        let period = 100 * MS;
        assert_eq!(failure_backoff(period, 1), 50 * MS);
        assert_eq!(failure_backoff(period, 2), 100 * MS);
        assert_eq!(failure_backoff(period, 5), 800 * MS);
        assert_eq!(failure_backoff(period, 6), MAX_PAUSE);
        assert_eq!(failure_backoff(period, u32::MAX), MAX_PAUSE);
        assert_eq!(failure_backoff(Duration::ZERO, 1), 2 * MIN_PAUSE);
        assert_eq!(failure_backoff(Duration::MAX, 1), MAX_PAUSE);
    }

    #[test]
    fn calls_measure_the_time_since_the_previous_one() {
        let mut pacer = paced();
        let start = Instant::now();
        assert_eq!(pacer.calling(start), None);
        assert_eq!(pacer.calling(start + 30 * MS), Some(30 * MS));
        // A clock read out of order gives zero, not a panic.
        assert_eq!(pacer.calling(start), Some(Duration::ZERO));
    }
}
