//! A keyed limiter's quota generations: the quota every key gets, changed at
//! run time without locking the decisions out.
//!
//! Each change of quota starts a generation, numbered from 0. Every key's
//! entry carries the generation its state is kept in, and a decision reads
//! the quota of that generation, under the key's shard lock. At most two
//! generations are live (the current one, and during a change the one
//! before it), so their quotas are kept in two slots indexed by the
//! generation's parity. A change writes the next generation's slot,
//! publishes it as current, then walks every entry, converting those of the
//! old generation by the continuity rule (`Gcra::carry`) one shard at a time;
//! changes are serialised, so a slot is never rewritten while an entry of its
//! generation exists. [`docs/design.md`](crate::guide::design), "Changing a
//! keyed limiter's quota", has the argument.
//!
//! Written on the `crate::sync` shim so that the loom model in `loom-tests/`
//! runs this very code against a stand-in table (dashmap is not loom-aware).

use crossbeam_utils::CachePadded;

use crate::gcra::{Gcra, WORDS};
use crate::state::{Admission, Tat};
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering, fence, lock};
use crate::{AcquireError, InitialCredit, Quota};

/// One key's bucket as a table keeps it: its state, and the quota
/// generation the state is kept in. Sixteen bytes: the generation is a whole
/// word, where a parity bit would pad to the same size, and it is what a
/// receipt's undo compares its admission's against.
///
/// Public only to the loom models (`--cfg tollgate_loom`); otherwise private
/// to the keyed limiter.
#[derive(Debug)]
pub struct Entry {
    /// Written only under the shard's write lock (an insert, a change's
    /// walk), read under its read lock: the lock orders it.
    generation: u64,
    tat: Tat,
}

/// One generation's quota, in words a change may rewrite while decisions
/// on the other generation read theirs.
#[derive(Debug)]
struct Slot {
    gcra: [AtomicU64; WORDS],
    tokens: AtomicU64,
    period_nanos: AtomicU64,
    initial: AtomicU64,
}

/// [`InitialCredit`] in a word: a credit of tokens is at most the capacity,
/// itself below `2^63` (a full refill is at most half the tick range, and a
/// token at least one tick), so the two largest words are free.
const FULL_CREDIT: u64 = u64::MAX;
const EMPTY_CREDIT: u64 = u64::MAX - 1;

impl Slot {
    fn new(quota: &Quota) -> Self {
        let slot = Slot {
            gcra: std::array::from_fn(|_| AtomicU64::new(0)),
            tokens: AtomicU64::new(0),
            period_nanos: AtomicU64::new(0),
            initial: AtomicU64::new(0),
        };
        slot.store(quota);
        slot
    }

    fn store(&self, quota: &Quota) {
        for (word, value) in self.gcra.iter().zip(quota.gcra().to_words()) {
            word.store(value, Ordering::Relaxed);
        }
        let (tokens, period) = quota.refill();
        self.tokens.store(tokens, Ordering::Relaxed);
        // Validated: a quota's period fits 64 bits of nanoseconds.
        self.period_nanos
            .store(period.as_nanos() as u64, Ordering::Relaxed);
        let initial = match quota.initial_credit() {
            InitialCredit::Full => FULL_CREDIT,
            InitialCredit::Empty => EMPTY_CREDIT,
            InitialCredit::Tokens(k) => k,
        };
        self.initial.store(initial, Ordering::Relaxed);
    }

    #[inline]
    fn gcra(&self) -> Gcra {
        Gcra::from_words(std::array::from_fn(|i| {
            self.gcra[i].load(Ordering::Relaxed)
        }))
    }

    #[inline]
    fn initial(&self) -> InitialCredit {
        match self.initial.load(Ordering::Relaxed) {
            FULL_CREDIT => InitialCredit::Full,
            EMPTY_CREDIT => InitialCredit::Empty,
            k => InitialCredit::Tokens(k),
        }
    }

    fn quota(&self) -> Quota {
        let refill = (
            self.tokens.load(Ordering::Relaxed),
            std::time::Duration::from_nanos(self.period_nanos.load(Ordering::Relaxed)),
        );
        Quota::from_parts(self.gcra(), refill, self.initial())
    }
}

/// The quotas of a keyed limiter's live generations, and the number of the
/// current one.
///
/// Public only to the loom models (`--cfg tollgate_loom`); otherwise private
/// to the keyed limiter.
#[derive(Debug)]
pub struct Generations {
    slots: [CachePadded<Slot>; 2],
    /// The generation new entries are born in. Written only by a change,
    /// under `changes` (and under the overflow bucket's write lock: see
    /// `KeyedLimiter::set_quota`).
    current: AtomicU64,
    /// Held for the whole of each change.
    changes: Mutex<()>,
    /// The earliest clock reading (nanoseconds) from which every store
    /// lease was granted under its bucket's generation; `u64::MAX` while a
    /// change walks the tables. Leases granted before it are not given
    /// back.
    leases_from: AtomicU64,
}

/// A change in progress: the next generation's quota is written, not yet
/// published. Changes are serialised while it lives.
#[derive(Debug)]
#[must_use = "a change is made by publishing it"]
pub struct Change<'a> {
    generations: &'a Generations,
    next: u64,
    _serialised: MutexGuard<'a, ()>,
}

/// What a decision reads of a key's bucket under its shard lock: the state
/// and the quota generation it is kept in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Held<'a> {
    pub(crate) tat: &'a Tat,
    pub(crate) gcra: Gcra,
    pub(crate) generation: u64,
}

impl Entry {
    /// A new key's bucket in `generation`, in state `tat`.
    pub(crate) fn new(generation: u64, tat: u64) -> Self {
        Entry {
            generation,
            tat: Tat::new(tat),
        }
    }

    /// The bucket and its generation's quota, for a decision made while
    /// the entry's shard is held (for reading or writing): the lock keeps
    /// the generation's slot from being rewritten meanwhile.
    #[inline]
    pub(crate) fn held<'a>(&'a self, generations: &Generations) -> Held<'a> {
        Held {
            tat: &self.tat,
            gcra: generations.gcra(self.generation),
            generation: self.generation,
        }
    }

    /// Whether the bucket holds its full capacity at the clock reading
    /// `nanos`, under its own generation's quota.
    pub(crate) fn is_full(&self, generations: &Generations, nanos: u64) -> bool {
        let gcra = generations.gcra(self.generation);
        self.tat.is_full(gcra.ticks(nanos))
    }
}

impl Held<'_> {
    /// Admits `cost` tokens with up to `slack` ticks of delay at the tick
    /// `now`; see `Tat::admit`.
    #[inline]
    pub(crate) fn admit(&self, now: u64, cost: u64, slack: u64) -> Result<Admission, AcquireError> {
        let cost_ticks = self.gcra.cost_ticks(cost)?;
        self.tat
            .admit(&self.gcra, now, cost, cost_ticks, slack, self.generation)
    }
}

impl Generations {
    /// Generation 0, of `quota`.
    pub fn new(quota: &Quota) -> Self {
        Generations {
            slots: [
                CachePadded::new(Slot::new(quota)),
                CachePadded::new(Slot::new(quota)),
            ],
            current: AtomicU64::new(0),
            changes: Mutex::new(()),
            leases_from: AtomicU64::new(0),
        }
    }

    #[inline]
    fn slot(&self, generation: u64) -> &Slot {
        &self.slots[(generation & 1) as usize]
    }

    /// The quota of a live `generation`: read while an entry of it is held
    /// (or while the current generation cannot change), so that its slot
    /// is not being rewritten.
    #[inline]
    pub(crate) fn gcra(&self, generation: u64) -> Gcra {
        self.slot(generation).gcra()
    }

    /// The whole quota of a live `generation`, read as [`Self::gcra`] is.
    pub(crate) fn quota_of(&self, generation: u64) -> Quota {
        self.slot(generation).quota()
    }

    /// The initial credit of a live `generation`'s quota, read as
    /// [`Self::gcra`] is.
    #[inline]
    pub(crate) fn initial(&self, generation: u64) -> InitialCredit {
        self.slot(generation).initial()
    }

    /// The generation new entries are born in.
    #[inline]
    pub(crate) fn current(&self) -> u64 {
        self.current.load(Ordering::Acquire)
    }

    /// The current quota, holding nothing: read again if a change (two, in
    /// fact) rewrote its slot meanwhile, as a sequence lock's reader does.
    pub fn quota(&self) -> Quota {
        loop {
            let generation = self.current();
            let quota = self.quota_of(generation);
            // Orders the slot's loads before the second load of `current`:
            // a load that saw a change's write sees that change published
            // (see `Change::begin`).
            fence(Ordering::Acquire);
            if self.current.load(Ordering::Relaxed) == generation {
                return quota;
            }
        }
    }

    /// Starts a change to `quota`: waits for a change in progress, and
    /// writes the next generation's slot. No entry of that generation
    /// exists: the one before the current generation has been walked away.
    pub fn begin(&self, quota: &Quota) -> Change<'_> {
        let serialised = lock(&self.changes);
        let next = self.current.load(Ordering::Relaxed) + 1;
        // Leases decided from now on may be of either generation until the
        // walk ends.
        self.leases_from.store(u64::MAX, Ordering::Release);
        // A reader of `quota` that sees one of the slot's new words sees
        // the generation before this one published (the slot's readers
        // retry on a changed `current`).
        fence(Ordering::Release);
        self.slot(next).store(quota);
        Change {
            generations: self,
            next,
            _serialised: serialised,
        }
    }

    /// Whether a store lease granted at the clock reading `at_nanos` may be
    /// given back: not if it may have been granted under an earlier
    /// generation than its bucket's.
    pub(crate) fn lease_is_current(&self, at_nanos: u64) -> bool {
        at_nanos >= self.leases_from.load(Ordering::Acquire)
    }
}

impl Change<'_> {
    /// The quotas converted from and to.
    pub(crate) fn gcras(&self) -> (Gcra, Gcra) {
        let generations = self.generations;
        (generations.gcra(self.next - 1), generations.gcra(self.next))
    }

    /// Publishes the next generation: entries born from now on are born in
    /// it.
    pub fn publish(&self) {
        self.generations.current.store(self.next, Ordering::Release);
    }

    /// Converts `entry` to the next generation at the clock reading
    /// `nanos`, if it is not there yet: under its shard's write lock, so
    /// with no decision on it in flight, and exactly once.
    pub fn convert(&self, entry: &mut Entry, nanos: u64) {
        if entry.generation == self.next {
            return;
        }
        let (from, to) = self.gcras();
        let tat = std::mem::replace(&mut entry.tat, Tat::new(0)).into_inner();
        entry.tat = Tat::new(from.carry(tat, nanos, &to));
        entry.generation = self.next;
    }

    /// Converts a bucket kept outside the tables (the overflow bucket, or a
    /// floor: a state in the old generation's ticks) at `nanos`.
    pub(crate) fn carry(&self, tat: u64, nanos: u64) -> u64 {
        let (from, to) = self.gcras();
        from.carry(tat, nanos, &to)
    }

    /// Ends the change once every entry is converted: a lease granted at or
    /// before the clock reading `nanos`, taken after the walk, may have been
    /// granted under the old generation, and is not given back.
    pub fn finish(self, nanos: u64) {
        self.generations
            .leases_from
            .store(nanos.saturating_add(1), Ordering::Release);
    }
}

/// A keyed limiter's decisions on an entry, as the loom models make them on
/// a stand-in table: the calls `table.rs` makes under the shard's lock.
#[cfg(tollgate_loom)]
impl Generations {
    /// A new key's entry, full, born in the current generation: read, as
    /// `insert_in` reads it, under the table's write lock.
    pub fn born(&self) -> Entry {
        Entry::new(self.current(), crate::gcra::FULL)
    }

    /// Takes `cost` tokens from `entry` (held for reading) at the clock
    /// reading `nanos`: the generation the admission was stamped with.
    pub fn try_acquire(&self, entry: &Entry, nanos: u64, cost: u64) -> Result<u64, AcquireError> {
        let held = entry.held(self);
        let admission = held.admit(held.gcra.ticks(nanos), cost, 0)?;
        Ok(admission.generation)
    }

    /// Whole tokens in `entry` (held for reading) at `nanos`.
    pub fn available(&self, entry: &Entry, nanos: u64) -> u64 {
        let held = entry.held(self);
        held.tat.available(&held.gcra, held.gcra.ticks(nanos))
    }
}

#[cfg(tollgate_loom)]
impl Entry {
    /// The generation the entry's state is kept in.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}
