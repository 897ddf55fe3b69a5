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
//! changes are serialised, and a walk cut short (a clock that panicked) is
//! finished before the next change rewrites a slot, so a slot is never
//! rewritten while an entry of its generation exists. Beside each
//! generation's quota is its drop watermark: the state of a bucket full at
//! the latest drop, carried into the next generation by the same rule.
//! [`docs/proofs.md`](crate::guide::proofs), "Changing a keyed limiter's
//! quota", has the argument.
//!
//! Written on the `crate::sync` shim so that the loom model in `loom-tests/`
//! runs this very code against a stand-in table (dashmap is not loom-aware).

use std::num::NonZeroU64;

use crossbeam_utils::CachePadded;

use crate::error::AcquireError;
use crate::gcra::{Gcra, LAST, WORDS};
use crate::quota::{InitialCredit, Quota};
use crate::state::{Admission, Tat};
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering, fence, lock};

#[cfg(tollgate_loom)]
use super::shared_entry::SharedEntry;

/// One key's bucket as a table keeps it: its state, and the quota
/// generation the state is kept in. Sixteen bytes: the generation is a whole
/// word, where a parity bit would pad to the same size, and it is what a
/// receipt's undo compares its admission's against. Kept one above the
/// generation, never zero, so that the table's slot, inline or shared
/// (`Stored`), takes no tag of its own: 16 bytes, not 24.
///
/// Public only to the loom models (`--cfg tollgate_loom`); otherwise private
/// to the keyed limiter.
#[derive(Debug)]
pub struct Entry {
    /// Written only under the shard's write lock (an insert, a change's
    /// walk), read under its read lock: the lock orders it.
    generation_above: NonZeroU64,
    tat: Tat,
}

/// One generation's quota, in words a change may rewrite while decisions
/// on the other generation read theirs, and its drop watermark.
#[derive(Debug)]
struct Slot {
    gcra: [AtomicU64; WORDS],
    tokens: AtomicU64,
    period_nanos: AtomicU64,
    initial: AtomicU64,
    /// The state, in this generation's ticks, of a bucket full at the
    /// latest drop of a bucket (a sweep's, an eviction's) in this
    /// generation or, carried, an earlier one, as [`Marked`]: a new bucket
    /// of the generation starts no fuller. Raised only under the overflow
    /// bucket's read lock while this generation is current, and written
    /// for the next generation under its write lock (`Change::publish`),
    /// so that no raise is lost to a change.
    dropped: AtomicU64,
}

/// A state that may be none, in a word: `0` is none, any other word the
/// state one below it. None differs from every state, the state 0 (a full
/// bucket on a clock still at its first reading) included: a carry of it
/// may hold less than the next quota's capacity, and none constrains
/// nothing.
pub(crate) struct Marked;

impl Marked {
    pub(crate) const NONE: u64 = 0;

    /// The mark of `state`, a state no later than [`LAST`] (a full bucket
    /// at a clock reading saturated past the range is taken as `LAST`:
    /// either admits nothing more).
    #[inline]
    pub(crate) fn of(state: u64) -> u64 {
        state.min(LAST) + 1
    }

    /// The state marked, or `None`.
    #[inline]
    pub(crate) fn state(mark: u64) -> Option<u64> {
        mark.checked_sub(1)
    }

    /// The state marked as a floor: none floors nothing, as the earliest
    /// state (a full bucket at reading 0) does.
    #[inline]
    pub(crate) fn floor(mark: u64) -> u64 {
        mark.saturating_sub(1)
    }
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
            dropped: AtomicU64::new(Marked::NONE),
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
    /// Held for the whole of each change, and of each sweep: the
    /// generation every entry has been walked into. Below `current` only
    /// while a change walks, or after a walk was cut short by a panic (a
    /// clock's): then whoever takes it next finishes that walk first.
    /// Written only once a walk has converted every entry, so a panic
    /// leaves it true.
    walked: Mutex<u64>,
    /// The earliest clock reading (nanoseconds) from which every store
    /// lease was granted under its bucket's generation; `u64::MAX` while a
    /// change walks the tables. Leases granted before it are not given
    /// back.
    leases_from: AtomicU64,
}

/// A change in progress: the next generation's quota is written, not yet
/// published; or a walk cut short, being finished. Changes and sweeps are
/// serialised while it lives.
#[derive(Debug)]
#[must_use = "a change is made by publishing it"]
pub struct Change<'a> {
    generations: &'a Generations,
    next: u64,
    walked: MutexGuard<'a, u64>,
}

/// Changes held off, every entry in the current generation: what a sweep
/// runs under, so that it drops entries of one generation only, whose
/// watermark it raised.
#[derive(Debug)]
pub struct Steady<'a> {
    generation: u64,
    _walked: MutexGuard<'a, u64>,
}

impl Steady<'_> {
    /// The generation of every entry, and of every entry born meanwhile.
    pub fn generation(&self) -> u64 {
        self.generation
    }
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
            // 2^64 - 1 changes would take centuries at one a nanosecond.
            generation_above: NonZeroU64::MIN.saturating_add(generation),
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
            gcra: generations.gcra(self.generation()),
            generation: self.generation(),
        }
    }

    /// The bucket with the quota `gcra` of its generation, copied while
    /// the entry was held: for a decision on a shared entry made outside
    /// the shard lock (a thread's cached hot key). The quota is right for
    /// as long as the word is unsealed: a change seals the entry before its
    /// walk ends, and only then may its generation's slot be rewritten.
    #[inline]
    pub(crate) fn held_with(&self, gcra: Gcra) -> Held<'_> {
        Held {
            tat: &self.tat,
            gcra,
            generation: self.generation(),
        }
    }

    /// A copy of the entry, to be shared with the threads that cache its
    /// key: made under the shard's write lock, so no decision runs on the
    /// original meanwhile, and the copy takes its place in the table.
    pub(crate) fn copy(&self) -> Entry {
        Entry::new(self.generation(), self.tat.load())
    }

    /// The generation the entry's state is kept in.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation_above.get() - 1
    }

    /// Whether a sealed word stopped a decision on a shared entry: the
    /// entry left the table (dropped, or replaced by its conversion), and
    /// the decision must be made again on what the table holds now.
    #[inline]
    pub(crate) fn is_sealed(&self) -> bool {
        self.tat.is_sealed()
    }

    /// Seals a shared entry if its bucket is full at the clock reading
    /// `nanos` under its own generation's quota, as a drop takes it out of
    /// the table: whether it did. A decision on it that a thread's cache
    /// made first leaves it unsealed, and then it is not dropped.
    pub(crate) fn seal_if_full(&self, generations: &Generations, nanos: u64) -> bool {
        let now = generations.gcra(self.generation()).ticks(nanos);
        self.tat.seal_if(|tat| tat <= now)
    }

    /// Whether the bucket holds its full capacity at the clock reading
    /// `nanos`, under its own generation's quota.
    pub(crate) fn is_full(&self, generations: &Generations, nanos: u64) -> bool {
        let gcra = generations.gcra(self.generation());
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
            walked: Mutex::new(0),
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
    pub fn current(&self) -> u64 {
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

    /// Takes the change lock, waiting for a change or sweep in progress;
    /// if a walk was cut short, finishes it first with `walk` (which
    /// converts every entry and returns a clock reading taken after).
    fn settle(&self, walk: impl FnOnce(&Change<'_>) -> u64) -> MutexGuard<'_, u64> {
        let walked = lock(&self.walked);
        let current = self.current.load(Ordering::Relaxed);
        if *walked == current {
            return walked;
        }
        let pending = Change {
            generations: self,
            next: current,
            walked,
        };
        let nanos = walk(&pending);
        pending.complete(nanos)
    }

    /// Starts a change to `quota`: waits for a change or sweep in
    /// progress, finishes a walk cut short (`walk`), and writes the next
    /// generation's slot. No entry of that generation exists: the one
    /// before the current generation has been walked away.
    pub fn begin(&self, quota: &Quota, walk: impl FnOnce(&Change<'_>) -> u64) -> Change<'_> {
        let walked = self.settle(walk);
        let next = self.current.load(Ordering::Relaxed) + 1;
        // A reader of `quota` that sees one of the slot's new words sees
        // the generation before this one published (the slot's readers
        // retry on a changed `current`).
        fence(Ordering::Release);
        self.slot(next).store(quota);
        Change {
            generations: self,
            next,
            walked,
        }
    }

    /// Holds changes off for a sweep, once a walk cut short is finished
    /// (`walk`, as for [`Self::begin`]): every entry is then in the
    /// current generation until the hold ends.
    pub fn steady(&self, walk: impl FnOnce(&Change<'_>) -> u64) -> Steady<'_> {
        let walked = self.settle(walk);
        Steady {
            generation: *walked,
            _walked: walked,
        }
    }

    /// Raises `generation`'s drop watermark to `state`, a bucket full at a
    /// drop: called while `generation` is current, under the overflow
    /// bucket's read lock, before the bucket is dropped.
    pub fn raise_dropped(&self, generation: u64, state: u64) {
        self.slot(generation)
            .dropped
            .fetch_max(Marked::of(state), Ordering::AcqRel);
    }

    /// The state a new bucket of a live `generation` (quota `gcra`) starts
    /// from at the clock reading `nanos`: its quota's initial credit, but no
    /// fuller than the drop watermark. Read as [`Self::gcra`] is, under the
    /// shard lock the bucket is inserted under, so after any drop from that
    /// shard raised the watermark.
    #[inline]
    pub(crate) fn fresh(&self, generation: u64, gcra: &Gcra, nanos: u64) -> u64 {
        let dropped = Marked::floor(self.slot(generation).dropped.load(Ordering::Acquire));
        gcra.ticks(nanos)
            .saturating_add(gcra.initial_tat(self.initial(generation)))
            .max(dropped)
    }

    /// Whether a store lease granted at the clock reading `at_nanos` may be
    /// given back: not if it may have been granted under an earlier
    /// generation than its bucket's.
    pub(crate) fn lease_is_current(&self, at_nanos: u64) -> bool {
        at_nanos >= self.leases_from.load(Ordering::Acquire)
    }
}

impl<'a> Change<'a> {
    /// The quotas converted from and to.
    pub(crate) fn gcras(&self) -> (Gcra, Gcra) {
        let generations = self.generations;
        (generations.gcra(self.next - 1), generations.gcra(self.next))
    }

    /// Publishes the next generation at the clock reading `nanos`: carries
    /// the drop watermark into it, and entries born from now on are born in
    /// it. Called under the overflow bucket's write lock, so no raise of
    /// the old watermark falls after its carry.
    pub fn publish(&self, nanos: u64) {
        let generations = self.generations;
        let dropped = generations
            .slot(self.next - 1)
            .dropped
            .load(Ordering::Acquire);
        let carried = Marked::state(dropped)
            .map_or(Marked::NONE, |state| Marked::of(self.carry(state, nanos)));
        generations
            .slot(self.next)
            .dropped
            .store(carried, Ordering::Release);
        // Leases decided from now on may be of either generation until the
        // walk ends.
        generations.leases_from.store(u64::MAX, Ordering::Release);
        generations.current.store(self.next, Ordering::Release);
    }

    /// Converts `entry` to the next generation at the clock reading
    /// `nanos`, if it is not there yet: under its shard's write lock, so
    /// with no decision on it in flight, and exactly once.
    pub fn convert(&self, entry: &mut Entry, nanos: u64) {
        if entry.generation() == self.next {
            return;
        }
        let (from, to) = self.gcras();
        let tat = std::mem::replace(&mut entry.tat, Tat::new(0)).into_inner();
        *entry = Entry::new(self.next, from.carry(tat, nanos, &to));
    }

    /// Converts a shared entry (one that threads' caches may decide on
    /// outside the shard lock) to the next generation: seals it and returns
    /// the converted entry that takes its place in the table, or `None` if
    /// it is there already. The clock is read after each load the seal may
    /// replace, so no earlier than any decision that linearized before it.
    /// Under the shard's write lock, exactly once.
    pub fn convert_shared(&self, entry: &Entry, nanos: impl Fn() -> u64) -> Option<Entry> {
        if entry.generation() == self.next {
            return None;
        }
        let (from, to) = self.gcras();
        let mut carried = 0;
        entry
            .tat
            .seal(|tat| carried = from.carry(tat, nanos(), &to));
        Some(Entry::new(self.next, carried))
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
        drop(self.complete(nanos));
    }

    /// [`Self::finish`], keeping the lock.
    fn complete(self, nanos: u64) -> MutexGuard<'a, u64> {
        let Change {
            generations,
            next,
            mut walked,
        } = self;
        generations
            .leases_from
            .store(nanos.saturating_add(1), Ordering::Release);
        *walked = next;
        walked
    }
}

/// A keyed limiter's decisions on an entry, as the loom models make them on
/// a stand-in table: the calls `admission.rs` and `eviction.rs` make under the shard's lock.
#[cfg(tollgate_loom)]
impl Generations {
    /// A new key's entry at the clock reading `nanos`, born in the current
    /// generation (its initial credit, no fuller than the drop watermark):
    /// read, as `insert_in` reads it, under the table's write lock.
    pub fn born(&self, nanos: u64) -> Entry {
        let generation = self.current();
        let gcra = self.gcra(generation);
        Entry::new(generation, self.fresh(generation, &gcra, nanos))
    }

    /// Whether a drop at `nanos` may take `entry` (held for writing): in
    /// `generation`, the one being dropped from, and full.
    pub fn droppable(&self, entry: &Entry, generation: u64, nanos: u64) -> bool {
        entry.generation() == generation && entry.is_full(self, nanos)
    }

    /// The state of a bucket full at `nanos` in `generation`'s ticks: what
    /// a drop at `nanos` raises the watermark to.
    pub fn full_at(&self, generation: u64, nanos: u64) -> u64 {
        self.gcra(generation).ticks(nanos)
    }

    /// Takes `cost` tokens from `entry` (held for reading) at the clock
    /// reading `nanos`: the generation the admission was stamped with.
    pub fn try_acquire(&self, entry: &Entry, nanos: u64, cost: u64) -> Result<u64, AcquireError> {
        let held = entry.held(self);
        let admission = held.admit(held.gcra.ticks(nanos), cost, 0)?;
        Ok(admission.generation)
    }

    /// `entry` (held for writing) shared with a thread's cache, as
    /// `Stored::share` shares it, with its generation's quota read now.
    pub fn share(&self, entry: crate::sync::Arc<Entry>) -> SharedEntry {
        SharedEntry::new(entry, self)
    }

    /// Takes `cost` tokens from `shared` outside any lock, at the clock
    /// reading `nanos`, as a thread's cache of hot keys does: `None` if its
    /// entry was sealed (the decision goes to the table).
    pub fn try_acquire_shared(
        &self,
        shared: &SharedEntry,
        nanos: u64,
        cost: u64,
    ) -> Option<Result<u64, AcquireError>> {
        let held = shared.held();
        match held.admit(held.gcra.ticks(nanos), cost, 0) {
            Err(_) if shared.is_sealed() => None,
            decided => Some(decided.map(|admission| admission.generation)),
        }
    }

    /// Whether a drop at `nanos` takes the shared `entry` (held for
    /// writing): in `generation` and full, sealed as it goes.
    pub fn drop_shared(&self, entry: &Entry, generation: u64, nanos: u64) -> bool {
        entry.generation() == generation && entry.seal_if_full(self, nanos)
    }

    /// Whole tokens in `entry` (held for reading) at `nanos`.
    pub fn available(&self, entry: &Entry, nanos: u64) -> u64 {
        let held = entry.held(self);
        held.tat.available(&held.gcra, held.gcra.ticks(nanos))
    }
}
