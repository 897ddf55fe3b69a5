//! The key table every keyed limit keeps its per-key states in: keys kept
//! as they are or as fingerprints, bounded by the key cap, and the
//! bookkeeping that is the same whatever a key's state is (finding or
//! inserting a key under the cap, dropping idle states, the counters).
//!
//! A keyed limit (the keyed bucket, the keyed window counters) owns one
//! and adds what is its own: how a new key's state starts, and the
//! watermarks that keep a dropped-and-recreated key from regaining credit.

use std::hash::{BuildHasher, Hash};

use crossbeam_utils::CachePadded;
use dashmap::DashMap;
use dashmap::mapref::entry::{Entry as Slot, VacantEntry};
use dashmap::mapref::one::Ref;

use super::cap::{KeyCap, Place};
use super::config::KeyBound;
use super::fingerprint::{Fingerprint, Fingerprinter, PassThrough, hashed_len};
use super::key_ref::{Find, KeyRef};
use super::stats::{KeyTableStats, TableCounters};
use crate::clock::saturating_nanos;
use crate::error::AcquireError;

/// A key's state as a key table keeps it: one that can tell, given its
/// limit's context `Cx` (a quota, a window's frame), whether dropping it
/// would change no decision.
pub(crate) trait KeyState<Cx> {
    /// Whether nothing this state holds still weighs at the reading `at`:
    /// a state created afresh then (with the owner's watermarks) would
    /// decide as this one does.
    fn is_idle(&self, cx: &Cx, at: u64) -> bool;

    /// Tidies a state a sweep keeps, held for writing (a shared entry no
    /// cache holds any more goes back inline).
    fn tidy(&mut self) {}
}

/// Where a key is kept: in the table of exact keys as itself, or in the
/// fingerprint table as its fingerprint.
pub(crate) enum Located<'q, Q: ?Sized> {
    Exact(&'q Q),
    Fingerprint(Fingerprint),
}

/// Evaluates `$body` with `$table` bound to the map of the [`Table`]
/// `$tables` that keeps `$key`, and `$key` rebound to its form there
/// (itself, or its fingerprint). The body is written once and compiled for
/// each map.
macro_rules! in_table {
    ($tables:expr, $key:ident, |$table:ident| $body:expr) => {
        match $tables.locate($key) {
            $crate::keyed::Located::Exact($key) => {
                let $table = &$tables.exact;
                $body
            }
            $crate::keyed::Located::Fingerprint(print) => {
                let $key = &print;
                let $table = &$tables.fingerprints;
                $body
            }
        }
    };
}
pub(crate) use in_table;

/// A new key's lookup under the cap.
pub(crate) enum Found<'t, M, V> {
    /// The key's own state: found, or inserted now.
    Own(Ref<'t, M, V>),
    /// At the cap under [`AtCapacity::SharedOverflow`](super::AtCapacity):
    /// the key's absence, holding its shard for writing until dropped.
    Absent(VacantEntry<'t, M, V>),
}

/// The maps, the key cap and the counters of one keyed limit.
pub(crate) struct Table<K, V, S> {
    /// Keys whose `Hash` writes at most `bound.max_exact_key_bytes` bytes,
    /// kept as they are.
    pub(crate) exact: DashMap<K, V, S>,
    /// Longer keys, kept as fingerprints: a client's key length costs the
    /// table nothing.
    pub(crate) fingerprints: DashMap<Fingerprint, V, PassThrough>,
    fingerprinter: Fingerprinter,
    pub(crate) bound: KeyBound,
    /// Keys in the table and the sweeps at the cap. Counted here because
    /// `DashMap::len` locks every shard; reserved before an insertion so the
    /// cap is never overshot.
    pub(crate) cap: KeyCap,
    /// Creations, sweeps, evictions and overflow admissions.
    pub(crate) counters: CachePadded<TableCounters>,
}

impl<K, V, S> Table<K, V, S> {
    /// Keys currently tracked.
    pub(crate) fn len(&self) -> usize {
        self.cap.counted()
    }

    /// The counters with the keys tracked now.
    pub(crate) fn stats(&self) -> KeyTableStats {
        self.counters
            .snapshot(self.len() as u64, self.bound.max_keys as u64)
    }
}

impl<K: Hash + Eq, V, S: BuildHasher + Clone> Table<K, V, S> {
    /// An empty table under `bound`, hashing exact keys with `hasher`.
    pub(crate) fn new(hasher: S, bound: KeyBound) -> Self {
        Table {
            exact: DashMap::with_hasher(hasher),
            fingerprints: DashMap::with_hasher(PassThrough),
            fingerprinter: Fingerprinter::new(),
            bound,
            cap: KeyCap::new(bound.max_keys, bound.sweep_interval.map(saturating_nanos)),
            counters: CachePadded::default(),
        }
    }

    /// Where `key` is kept. `K: Borrow<Q>` promises that `Q` hashes as `K`
    /// does, so a key is found in the same map whichever form it is looked
    /// up by. For a fixed-size key the length is a constant and this is one
    /// predictable branch.
    #[inline]
    pub(crate) fn locate<'q, Q: Hash + ?Sized>(&self, key: &'q Q) -> Located<'q, Q> {
        if hashed_len(key) <= self.bound.max_exact_key_bytes {
            Located::Exact(key)
        } else {
            Located::Fingerprint(self.fingerprinter.of(key))
        }
    }

    /// Puts a key not found in `table` in: with a `place` under the cap, a
    /// state made by `make` (run under the key's shard write lock, so no
    /// sweep of that shard falls between it and the insertion); without
    /// one, under [`AtCapacity::Deny`](super::AtCapacity), the refusal
    /// (`check` first, so a bad request is refused as such), and under the
    /// overflow policy the key's absence. A state another thread inserted
    /// meanwhile is the key's own.
    #[inline]
    pub(crate) fn insert_in<'t, M, Q, H>(
        &'t self,
        table: &'t DashMap<M, V, H>,
        key: &Q,
        place: Option<Place<'t>>,
        check: impl FnOnce() -> Result<(), AcquireError>,
        make: impl FnOnce() -> Result<V, AcquireError>,
    ) -> Result<Found<'t, M, V>, AcquireError>
    where
        M: Hash + Eq,
        Q: KeyRef<M> + ?Sized,
        H: BuildHasher + Clone,
    {
        if place.is_none() && self.bound.at_capacity == super::AtCapacity::Deny {
            // Refusing needs no write lock and no owned key; only a state
            // created for this key meanwhile is worth a second look.
            return match key.find_in(table) {
                Some(raced) => Ok(Found::Own(raced)),
                None => {
                    check()?;
                    Err(AcquireError::TooManyKeys {
                        max_keys: self.bound.max_keys,
                    })
                }
            };
        }
        match (table.entry(key.to_owned()), place) {
            // Another thread created it between our `get` and `entry`; our
            // place, if any, goes back as it drops.
            (Slot::Occupied(raced), _) => Ok(Found::Own(raced.into_ref().downgrade())),
            (Slot::Vacant(vacant), Some(place)) => {
                let entry = vacant.insert(make()?);
                place.keep();
                self.counters.created();
                Ok(Found::Own(entry.downgrade()))
            }
            (Slot::Vacant(absent), None) => Ok(Found::Absent(absent)),
        }
    }

    /// Drops `key`'s state from `table` if it is idle at `at`, as a sweep
    /// would (the owner's `is_idle` raises its watermarks first).
    pub(crate) fn forget_if_idle_in<M, Q, H, Cx>(
        &self,
        table: &DashMap<M, V, H>,
        key: &Q,
        cx: &Cx,
        at: u64,
    ) where
        M: Hash + Eq,
        Q: Find<M> + ?Sized,
        H: BuildHasher + Clone,
        V: KeyState<Cx>,
    {
        let removed = key.remove_in_if(table, |_, state| state.is_idle(cx, at));
        if removed.is_some() {
            self.cap.forget(1);
            self.counters.evicted(1);
        }
        // Only now the key's `Drop`, which may panic: the count is right.
        drop(removed);
    }

    /// Drops every state idle at `at` from both maps; how many. Run only as
    /// a sweep of the cap, and uncounts them from it when it ends, a key's
    /// `Drop` panicking in it or not.
    pub(crate) fn drop_idle<Cx>(&self, cx: &Cx, at: u64) -> usize
    where
        V: KeyState<Cx>,
    {
        self.counters.swept();
        let mut dropped = Dropped {
            cap: &self.cap,
            counters: &self.counters,
            count: 0,
        };
        drop_idle_in(&self.exact, cx, at, &mut dropped.count);
        drop_idle_in(&self.fingerprints, cx, at, &mut dropped.count);
        dropped.count
    }
}

/// The states a sweep has taken out of the table so far, uncounted from the
/// cap (and counted as evicted) as the sweep ends, by return or by unwind:
/// each key's `Drop` runs inside the sweep, and without this a panicking one
/// would leave a count for every key dropped before it, holding places
/// under the cap for good.
struct Dropped<'a> {
    cap: &'a KeyCap,
    counters: &'a TableCounters,
    count: usize,
}

impl Drop for Dropped<'_> {
    fn drop(&mut self) {
        self.cap.forget(self.count);
        self.counters.evicted(self.count);
    }
}

/// Drops every state of `table` idle at `at`, counting each in `dropped`
/// before it goes.
fn drop_idle_in<M, V, H, Cx>(table: &DashMap<M, V, H>, cx: &Cx, at: u64, dropped: &mut usize)
where
    M: Hash + Eq,
    H: BuildHasher + Clone,
    V: KeyState<Cx>,
{
    // `retain` write-locks one shard at a time; no guard of ours is alive.
    // A state it is told to drop is taken out of the map before its key and
    // state are dropped, so a count made here is never of a key still in.
    table.retain(|_, state| {
        let idle = state.is_idle(cx, at);
        *dropped += usize::from(idle);
        if !idle {
            state.tidy();
        }
        !idle
    });
}
