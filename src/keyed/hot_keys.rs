//! Each thread's cache of a keyed limiter's hot keys: a decision on a key
//! the thread decided on just before takes no shard lock, only the
//! bucket's own compare-and-swap, as a [`TokenBucket`](crate::TokenBucket)
//! does.
//!
//! A thread's cache is a small direct-mapped array of slots, indexed by
//! a one-multiply hash of the key. A key missing its slot twice in a row
//! (no other key missing it between) takes the slot if it is empty; a
//! cached key earns standing by its hits, and a challenger must wear that
//! off by repeated misses first. So a walk over many keys seen once leaves
//! the cache alone, and a skewed mix keeps its head cached.
//! A cached key holds its entry shared ([`SharedEntry`]), its own copy of
//! the key, and nothing else: the table stays the key's one authority, and
//! an entry that left it (dropped full, or converted by a quota change) is
//! sealed, so its cache goes back to the table.

use std::cell::{RefCell, RefMut};

use thread_local::ThreadLocal;

use super::key_ref::Find;
use super::shared_entry::SharedEntry;

/// Every thread's cache of one limiter's hot keys.
pub(super) struct HotKeys<K: Send> {
    threads: ThreadLocal<RefCell<Box<[Slot<K>]>>>,
    /// Slots per thread: a power of two, or zero for no cache.
    slots: usize,
}

/// One slot of a thread's cache.
struct Slot<K> {
    /// The hash of the last key that missed this slot: each further miss
    /// in a row by the same key wears the cached key's standing down, and
    /// one with none left gives the slot to it.
    missed: Option<u64>,
    /// The cached key's standing: raised by its hits, up to
    /// [`MAX_STANDING`], and lowered by each repeated miss of a challenger.
    standing: u8,
    cached: Option<Cached<K>>,
}

/// A cached key and its entry.
struct Cached<K> {
    hash: u64,
    key: K,
    shared: SharedEntry,
}

/// The most standing a cached key earns by its hits: a challenger then
/// needs that many repeated misses, with no other key missing the slot
/// between them, to take its place. Without it a skewed mix of many keys
/// (Zipf over 100 000) trades its head keys in and out, each trade a write
/// lock (`docs/benchmarks.md`, "Hot keys").
const MAX_STANDING: u8 = 3;

/// The most slots a thread's cache has: a few MiB per thread for `u64`
/// keys, far past where a cache stops paying (`docs/benchmarks.md`, "Hot
/// keys").
const MAX_SLOTS: usize = 1 << 16;

/// A cached key's slot, borrowed from its thread's cache.
pub(super) struct Hit<'a, K> {
    cache: RefMut<'a, Box<[Slot<K>]>>,
    index: usize,
}

impl<K> Hit<'_, K> {
    /// The key's entry.
    #[inline]
    pub(super) fn shared(&self) -> &SharedEntry {
        match &self.cache[self.index].cached {
            Some(cached) => &cached.shared,
            None => unreachable!("a hit is of a cached slot"),
        }
    }

    /// The entry was found sealed: empties the slot, so that the key is
    /// cached again, with the entry that replaced it, once decided in the
    /// table.
    pub(super) fn evict(mut self) -> Missed {
        let slot = &mut self.cache[self.index];
        slot.missed = slot.cached.as_ref().map(|cached| cached.hash);
        slot.standing = 0;
        let stale = slot.cached.take();
        drop(self);
        // Last, the key's copy, whose `Drop` may panic.
        drop(stale);
        Missed::Twice
    }
}

/// How a lookup in the cache ended without a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Missed {
    /// Decide in the table.
    Once,
    /// Cache the key ([`HotKeys::fill`]), then decide in the table.
    Twice,
}

impl<K: Send> HotKeys<K> {
    /// A cache of `slots` per thread (rounded up to a power of two, at most
    /// [`MAX_SLOTS`]; zero for none). Each thread's slots are allocated at
    /// its first decision.
    pub(super) fn new(slots: usize) -> Self {
        HotKeys {
            threads: ThreadLocal::new(),
            slots: match slots {
                0 => 0,
                slots => slots.min(MAX_SLOTS).next_power_of_two(),
            },
        }
    }

    /// Slots per thread.
    pub(super) fn slots(&self) -> usize {
        self.slots
    }

    /// `key`'s entry if this thread caches it, or how the lookup missed.
    #[inline(always)]
    pub(super) fn find<Q>(&self, hash: u64, key: &Q) -> Result<Hit<'_, K>, Missed>
    where
        Q: Find<K> + ?Sized,
    {
        if self.slots == 0 {
            return Err(Missed::Once);
        }
        let Some(cache) = self.threads.get() else {
            self.start(hash);
            return Err(Missed::Once);
        };
        // A key's `Hash` or `Eq` deciding on this limiter from inside a
        // decision finds the cache borrowed, and goes to the table.
        let Ok(mut cache) = cache.try_borrow_mut() else {
            return Err(Missed::Once);
        };
        let index = hash as usize & (self.slots - 1);
        let slot = &mut cache[index];
        match &slot.cached {
            Some(cached) if cached.hash == hash && key.is(&cached.key) => {
                if slot.standing < MAX_STANDING {
                    slot.standing += 1;
                }
                Ok(Hit { cache, index })
            }
            _ if slot.missed != Some(hash) => {
                slot.missed = Some(hash);
                Err(Missed::Once)
            }
            _ if slot.standing == 0 => Err(Missed::Twice),
            _ => {
                slot.standing -= 1;
                Err(Missed::Once)
            }
        }
    }

    /// Caches `key` (which missed twice) in this thread's slot with the
    /// entry `share` finds for it in the table, if any (a key the table
    /// does not hold, or holds only in the overflow bucket, is not cached).
    /// `cached` is told once the slot holds it.
    ///
    /// The key's own code runs here (`Clone`, and the evicted copy's
    /// `Drop`, last), so a caller fills before it decides: a panic then
    /// spends nothing.
    pub(super) fn fill<Q>(
        &self,
        hash: u64,
        key: &Q,
        share: impl FnOnce() -> Option<SharedEntry>,
        cached: impl FnOnce(),
    ) where
        Q: ToOwned<Owned = K> + ?Sized,
    {
        let Some(cache) = self.threads.get() else {
            return;
        };
        let Ok(mut cache) = cache.try_borrow_mut() else {
            return;
        };
        let index = hash as usize & (self.slots - 1);
        let Some(shared) = share() else {
            // Not in the table (refused at the cap, or in the overflow
            // bucket): its misses start over, so it asks no more than
            // every other miss.
            cache[index].missed = None;
            return;
        };
        let filled = Cached {
            hash,
            key: key.to_owned(),
            shared,
        };
        let slot = &mut cache[index];
        slot.missed = None;
        slot.standing = 0;
        let evicted = slot.cached.replace(filled);
        drop(cache);
        cached();
        // Last, the evicted key's copy, whose `Drop` may panic.
        drop(evicted);
    }

    /// This thread's first decision on the limiter: allocates its slots,
    /// the key `hash` missed once.
    #[cold]
    fn start(&self, hash: u64) {
        let mut slots: Box<[Slot<K>]> = (0..self.slots)
            .map(|_| Slot {
                missed: None,
                standing: 0,
                cached: None,
            })
            .collect();
        slots[hash as usize & (self.slots - 1)].missed = Some(hash);
        self.threads.get_or(|| RefCell::new(slots));
    }
}
