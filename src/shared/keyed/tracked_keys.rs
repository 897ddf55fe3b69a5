//! The keys a keyed allowance tracks: each one's measured demand and, for
//! hot keys, its lease pool; bounded in keys, bytes and hot keys.

use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

use tokio::time::Instant;

use super::batch::Batched;
use super::config::KeyedAllowanceConfig;
use super::demand::{Demand, Switch};
use super::receipt::Pool;
use super::stats::{Counters, KeyedAllowanceStats, sum};
use crate::error::AcquireError;
use crate::keyed::{KeyCap, KeyTableStats, TableCounters};
use crate::shared::BudgetError;
use crate::shared::allowance::{EmptyUntil, add};
use crate::shared::{AllowanceStats, LocalAllowance, Source, Store};
use crate::sync::unmodelled::{Arc, Weak};
use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// The fewest samples a key keeps its pool once installed (1 s at the
/// default `sample_every`): a promotion costs a lease and a demotion a
/// return, so a key whose demand wavers across both thresholds costs at
/// most two extra store calls per this many samples.
const MIN_HOT_SAMPLES: u32 = 10;

/// What a table slot costs beyond the entry itself (hash and control bytes,
/// load-factor slack): part of the byte bound's estimate.
const SLOT_OVERHEAD: usize = 16;

/// One tracked key.
#[derive(Debug)]
struct Tracked<S: Store> {
    /// The key's lease pool while it is hot.
    pool: Option<Arc<LocalAllowance<Batched<S>>>>,
    /// Tokens receipts gave back to `pool`, spent before the pool's own:
    /// each was taken from it, so with them the pool never holds more than
    /// the store granted it. The pool cannot take tokens in but from a
    /// lease, so they wait here; they are kept spent (stranded) when the
    /// pool goes, since no store receipt covers them. Changed only under
    /// the map's lock for this key (shared, for takes and gives; exclusive,
    /// for a demotion), so a give never lands after its pool went.
    credit: AtomicU64,
    /// A pool is being warmed for it; the hot reservation is held.
    promoting: bool,
    /// Tokens asked for since the last sample that the pool's books do not
    /// show: every cold request, and refusals of a hot one.
    asked: AtomicU64,
    /// Tokens the pool had spent at the last sample.
    spent_then: u64,
    demand: Demand,
    /// How long the key has asked for nothing.
    idle_for: Duration,
    /// Samples since the key's pool was installed.
    hot_samples: u32,
    /// The key's capacity as the store last told it (`u64::MAX`: unknown).
    capacity: AtomicU64,
    /// The store's last word that the key had no token, in time since
    /// the table's epoch: requests while it holds are refused here, with
    /// the store's wait, without a round trip.
    empty: EmptyUntil,
}

impl<S: Store> Tracked<S> {
    fn holds_hot_slot(&self) -> bool {
        self.pool.is_some() || self.promoting
    }
}

/// The tracked keys, by the store's name for them.
#[derive(Debug)]
pub(crate) struct TrackedKeys<S: Store> {
    keys: DashMap<Box<str>, Tracked<S>, ahash::RandomState>,
    /// Keys tracked or about to be (a place taken before inserting, so
    /// concurrent inserts never overshoot the cap): the key cap of every
    /// keyed limit, never swept at the cap (forgetting is the sampler's).
    cap: KeyCap,
    bytes: AtomicUsize,
    hot: AtomicUsize,
    max_bytes: usize,
    max_hot: usize,
    /// What `empty` counts from.
    epoch: Instant,
    counters: Arc<Counters>,
    /// Keys tracked, samples and sweeps, keys forgotten.
    table_counters: TableCounters,
}

/// Tokens a pool has spent: leased, less what is pooled, returned or
/// stranded; plus what its failure policy admitted.
fn spent(stats: &AllowanceStats) -> u64 {
    stats
        .leased
        .saturating_sub(stats.returned)
        .saturating_sub(stats.stranded)
        .saturating_sub(stats.pooled)
        .saturating_add(stats.failed_open)
        .saturating_add(stats.fallback)
}

/// What tracking a key named `name` counts against the byte bound.
fn entry_bytes<S: Store>(name: &str) -> usize {
    name.len() + size_of::<(Box<str>, Tracked<S>)>() + SLOT_OVERHEAD
}

/// Adds `n` to `counter` if it stays within `max`.
fn reserve(counter: &AtomicUsize, n: usize, max: usize) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
            c.checked_add(n).filter(|&next| next <= max)
        })
        .is_ok()
}

impl<S: Store> TrackedKeys<S> {
    pub(crate) fn new(config: &KeyedAllowanceConfig, counters: Arc<Counters>) -> Self {
        TrackedKeys {
            keys: DashMap::with_hasher(ahash::RandomState::new()),
            cap: KeyCap::new(config.max_keys.get(), None),
            bytes: AtomicUsize::new(0),
            hot: AtomicUsize::new(0),
            max_bytes: config.max_bytes,
            max_hot: config.max_hot_keys,
            epoch: Instant::now(),
            counters,
            table_counters: TableCounters::default(),
        }
    }

    /// The hot path: a hot key's pool answers (tokens given back to it
    /// first), and `admitted` makes the answer from the pool and how it
    /// admitted (so that only a caller that wants a receipt pays for one);
    /// any other key is left to the store (`None`). A pool whose store is unreachable
    /// refuses (its own policy is `Closed`), and `when_down` answers in
    /// its place: the node's one failure state per key.
    #[inline]
    pub(crate) fn try_hot<R>(
        &self,
        name: &str,
        cost: u64,
        when_down: impl FnOnce() -> Result<Source, BudgetError>,
        admitted: impl FnOnce(&Arc<Pool<S>>, Source) -> R,
    ) -> Result<Option<R>, BudgetError> {
        let Some(tracked) = self.keys.get(name) else {
            return Ok(None);
        };
        let Some(pool) = &tracked.pool else {
            too_large(&tracked, cost)?;
            return match self.empty_for(&tracked, cost) {
                // Demand all the same: a key refused here may need a pool.
                Some(retry_after) => {
                    add(&tracked.asked, cost);
                    add(&self.counters.refused_locally, 1);
                    Err(AcquireError::Insufficient { retry_after }.into())
                }
                None => Ok(None),
            };
        };
        if take_credit(&tracked.credit, cost) {
            return Ok(Some(admitted(pool, Source::Lease)));
        }
        match pool.try_acquire(cost) {
            Ok(source) => Ok(Some(admitted(pool, source))),
            Err(BudgetError::StoreUnavailable) => {
                when_down().map(|source| Some(admitted(pool, source)))
            }
            // A pool short of the cost is not the store out of it: refused
            // here only on the store's word, otherwise left to `take`,
            // which waits for that word (and counts the demand if refused).
            Err(BudgetError::Limit(AcquireError::Insufficient { .. })) => {
                match pool.refused_by_the_store(cost) {
                    Some(retry_after) => {
                        add(&tracked.asked, cost);
                        add(&self.counters.refused_locally, 1);
                        Err(AcquireError::Insufficient { retry_after }.into())
                    }
                    None => Ok(None),
                }
            }
            Err(refused) => {
                add(&tracked.asked, cost);
                Err(refused)
            }
        }
    }

    /// Takes `cost` of the tokens receipts gave back to `pool`, if the key
    /// still has that pool and they suffice.
    pub(crate) fn take_given_back(&self, name: &str, pool: &Arc<Pool<S>>, cost: u64) -> bool {
        self.keys.get(name).is_some_and(|tracked| {
            tracked
                .pool
                .as_ref()
                .is_some_and(|now| Arc::ptr_eq(now, pool))
                && take_credit(&tracked.credit, cost)
        })
    }

    /// Gives `tokens` a receipt took from `pool` back to it, if the key
    /// still has that pool; false (nothing given) if it was demoted,
    /// forgotten or replaced since.
    pub(crate) fn give_to_pool(&self, name: &str, pool: &Weak<Pool<S>>, tokens: u64) -> bool {
        let Some(tracked) = self.keys.get(name) else {
            return false;
        };
        let same = tracked
            .pool
            .as_ref()
            .is_some_and(|now| std::ptr::eq(Arc::as_ptr(now), pool.as_ptr()));
        if same {
            add(&tracked.credit, tokens);
        }
        same
    }

    /// Tokens this node can spend on the key now: its pool's and those
    /// given back to it.
    pub(crate) fn pooled(&self, name: &str) -> u64 {
        self.keys.get(name).map_or(0, |tracked| {
            tracked.pool.as_ref().map_or(0, |pool| {
                pool.pooled()
                    .saturating_add(tracked.credit.load(Ordering::Acquire))
            })
        })
    }

    /// `ExceedsCapacity` for a cost above the key's capacity as the store
    /// last told it, so that no store call is made (and no grant taken and
    /// given back, emptying the bucket meanwhile) for what can never fit.
    pub(crate) fn within_known_capacity(&self, name: &str, cost: u64) -> Result<(), AcquireError> {
        match self.keys.get(name) {
            Some(tracked) => too_large(&tracked, cost),
            None => Ok(()),
        }
    }

    /// The key's pool, if it is hot.
    pub(crate) fn hot(&self, name: &str) -> Option<Arc<LocalAllowance<Batched<S>>>> {
        self.keys.get(name).and_then(|tracked| tracked.pool.clone())
    }

    /// Counts `cost` tokens of demand the pool's books do not show.
    pub(crate) fn asked(&self, name: &str, cost: u64) {
        if let Some(tracked) = self.keys.get(name) {
            add(&tracked.asked, cost);
        }
    }

    /// Counts `cost` tokens of demand for a cold request, tracking the key
    /// if the bounds allow; false if it could not be tracked.
    pub(crate) fn track(&self, name: &str, cost: u64) -> bool {
        if let Some(tracked) = self.keys.get(name) {
            add(&tracked.asked, cost);
            return true;
        }
        let bytes = entry_bytes::<S>(name);
        let Some(place) = self.cap.count_in() else {
            return false;
        };
        if !reserve(&self.bytes, bytes, self.max_bytes) {
            // The place goes back as it drops.
            return false;
        }
        match self.keys.entry(name.into()) {
            // Its place goes back as it drops.
            Entry::Occupied(tracked) => {
                self.bytes.fetch_sub(bytes, Ordering::AcqRel);
                add(&tracked.get().asked, cost);
            }
            Entry::Vacant(slot) => {
                place.keep();
                self.table_counters.created();
                slot.insert(Tracked {
                    pool: None,
                    credit: AtomicU64::new(0),
                    promoting: false,
                    asked: AtomicU64::new(cost),
                    spent_then: 0,
                    demand: Demand::default(),
                    idle_for: Duration::ZERO,
                    hot_samples: 0,
                    capacity: AtomicU64::new(u64::MAX),
                    empty: EmptyUntil::default(),
                });
            }
        }
        true
    }

    fn release(&self, bytes: usize) {
        self.cap.forget(1);
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Remembers what a refusal by the store told about the key: its
    /// capacity and, if it had no token at all, when the next one refills.
    pub(crate) fn learn_refusal(
        &self,
        name: &str,
        capacity: u64,
        had: u64,
        first_token: Duration,
        refill_interval: Duration,
    ) {
        let Some(tracked) = self.keys.get(name) else {
            return;
        };
        tracked.capacity.store(capacity, Ordering::Relaxed);
        if had == 0 {
            tracked
                .empty
                .learn(Instant::now() - self.epoch, first_token, refill_interval);
        }
    }

    /// The store granted the key's cost: its last word of emptiness no
    /// longer holds.
    pub(crate) fn learn_grant(&self, name: &str) {
        if let Some(tracked) = self.keys.get(name) {
            tracked.empty.forget();
        }
    }

    /// The wait until `cost` fits for a key the store said was empty, if
    /// that is still ahead (at least 1 ms).
    pub(crate) fn refused_for(&self, name: &str, cost: u64) -> Option<Duration> {
        let wait = self
            .keys
            .get(name)
            .and_then(|tracked| self.empty_for(&tracked, cost));
        if wait.is_some() {
            add(&self.counters.refused_locally, 1);
        }
        wait
    }

    /// How long the store's last word that the key was empty still holds
    /// (zero for an untracked key or no such word).
    pub(crate) fn word_holds_for(&self, name: &str) -> Duration {
        self.keys.get(name).map_or(Duration::ZERO, |tracked| {
            tracked.empty.holds_for(Instant::now() - self.epoch)
        })
    }

    fn empty_for(&self, tracked: &Tracked<S>, cost: u64) -> Option<Duration> {
        tracked.empty.refuses(Instant::now() - self.epoch, cost)
    }

    /// One demand sample over `over`: switches keys, forgets idle ones, and
    /// returns the keys to promote (their hot slots reserved).
    pub(crate) fn sample(&self, over: Duration, config: &KeyedAllowanceConfig) -> Vec<String> {
        let counters = &self.counters;
        let mut promote = Vec::new();
        self.table_counters.swept();
        // Inside `retain` the shard is locked: nothing here touches the
        // map, and a pool dropped here gives its tokens back on a task.
        self.keys.retain(|name, tracked| {
            let mut asked = tracked.asked.swap(0, Ordering::Relaxed);
            if let Some(pool) = &tracked.pool {
                let now = spent(&pool.stats());
                asked = asked.saturating_add(now.saturating_sub(tracked.spent_then));
                tracked.spent_then = now;
            }
            tracked.demand = tracked.demand.sample(asked, over);
            tracked.idle_for = if asked == 0 {
                tracked.idle_for.saturating_add(over)
            } else {
                Duration::ZERO
            };
            let hot = tracked.holds_hot_slot();
            if tracked.pool.is_some() {
                tracked.hot_samples = tracked.hot_samples.saturating_add(1);
            }
            match tracked.demand.switch(hot, config.hot_at, config.cold_below) {
                Switch::ToHot if reserve(&self.hot, 1, self.max_hot) => {
                    tracked.promoting = true;
                    promote.push(name.to_string());
                }
                // A pool is kept a while once it has its lease: a demand
                // that wavers around the thresholds must not cost a lease
                // and a return every few samples.
                Switch::ToCold if tracked.promoting || tracked.hot_samples >= MIN_HOT_SAMPLES => {
                    tracked.pool = None;
                    add(&counters.stranded, tracked.credit.swap(0, Ordering::AcqRel));
                    tracked.promoting = false;
                    self.hot.fetch_sub(1, Ordering::AcqRel);
                    add(&counters.became_cold, 1);
                }
                Switch::ToHot | Switch::ToCold | Switch::Stay => {}
            }
            let forget =
                asked == 0 && !tracked.holds_hot_slot() && tracked.idle_for >= config.forget_after;
            if forget {
                self.release(entry_bytes::<S>(name));
                add(&counters.forgotten, 1);
                self.table_counters.evicted(1);
            }
            !forget
        });
        promote
    }

    /// Forgets every key the last sample found idle for `forget_after`
    /// (cold, and asking for nothing since); how many. Demand is left to
    /// the sampler.
    pub(crate) fn sweep(&self, forget_after: Duration) -> usize {
        self.table_counters.swept();
        let mut forgotten = 0;
        // Inside `retain` the shard is locked: nothing here touches the map.
        self.keys.retain(|name, tracked| {
            let forget = tracked.asked.load(Ordering::Relaxed) == 0
                && !tracked.holds_hot_slot()
                && tracked.idle_for >= forget_after;
            if forget {
                self.release(entry_bytes::<S>(name));
                forgotten += 1;
            }
            !forget
        });
        add(&self.counters.forgotten, forgotten as u64);
        self.table_counters.evicted(forgotten);
        forgotten
    }

    /// Keys tracked, as counted against the cap (reserved before each
    /// insertion, so for a moment above the table, never below).
    pub(crate) fn len(&self) -> usize {
        self.cap.counted()
    }

    /// The most keys tracked at once.
    pub(crate) fn max_keys(&self) -> usize {
        self.cap.max_keys()
    }

    /// What the table holds and has dropped.
    pub(crate) fn table_stats(&self) -> KeyTableStats {
        self.table_counters
            .snapshot(self.len() as u64, self.max_keys() as u64)
    }

    /// Ends the promotion of the key named `name` with its warmed `pool`
    /// (`None`: none could be built). A key that went cold meanwhile drops
    /// the pool, which gives its lease back.
    pub(crate) fn install(&self, name: &str, pool: Option<Arc<LocalAllowance<Batched<S>>>>) {
        let counters = &self.counters;
        let Some(mut tracked) = self.keys.get_mut(name) else {
            return;
        };
        if !tracked.promoting {
            return;
        }
        tracked.promoting = false;
        match pool {
            Some(pool) => {
                tracked.spent_then = spent(&pool.stats());
                tracked.hot_samples = 0;
                tracked.pool = Some(pool);
                add(&counters.became_hot, 1);
            }
            None => {
                self.hot.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Makes every key cold and hands over their pools.
    pub(crate) fn cool_all(&self) -> Vec<Arc<LocalAllowance<Batched<S>>>> {
        let counters = &self.counters;
        let mut pools = Vec::new();
        for mut tracked in self.keys.iter_mut() {
            if let Some(pool) = tracked.pool.take() {
                pools.push(pool);
                add(&counters.stranded, tracked.credit.swap(0, Ordering::AcqRel));
                self.hot.fetch_sub(1, Ordering::AcqRel);
                add(&counters.became_cold, 1);
            }
        }
        pools
    }

    /// The table's part of a snapshot.
    pub(crate) fn fill_stats(&self, stats: &mut KeyedAllowanceStats) {
        let mut hot = AllowanceStats::default();
        for tracked in self.keys.iter() {
            if let Some(pool) = &tracked.pool {
                sum(&mut hot, &pool.stats());
                stats.hot_keys += 1;
            }
        }
        stats.tracked_keys = self.keys.len() as u64;
        stats.tracked_bytes = self.bytes.load(Ordering::Acquire) as u64;
        stats.hot = hot;
    }
}

/// Takes `cost` of `credit` if it holds that many.
fn take_credit(credit: &AtomicU64, cost: u64) -> bool {
    credit
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            held.checked_sub(cost)
        })
        .is_ok()
}

/// `ExceedsCapacity` if `cost` is above the key's known capacity.
fn too_large<S: Store>(tracked: &Tracked<S>, cost: u64) -> Result<(), AcquireError> {
    let capacity = tracked.capacity.load(Ordering::Relaxed);
    if cost > capacity {
        return Err(AcquireError::ExceedsCapacity { cost, capacity });
    }
    Ok(())
}
