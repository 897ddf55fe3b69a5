//! A keyed limiter's give-backs and evictions on one key table, written
//! once for both of its tables: an undo, the drop of a key it left full,
//! sweeps, and the watermarks raised before any bucket goes so that no
//! eviction ever mints credit.

use std::cell::Cell;
use std::hash::{BuildHasher, Hash};

use super::KeyedLimiter;
use super::admission::BucketMap;
use super::key_ref::Find;
use super::key_table::KeyState;
use super::shared_entry::Stored;
use crate::clock::Clock;
use crate::state::Admission;
use crate::sync::read;

/// A drop of buckets (a sweep, or the eviction of one key) in one quota
/// generation: the one whose watermarks it raises, once, before the first
/// bucket goes.
pub(super) struct Dropping<'a, K: Send, C, S> {
    limiter: &'a KeyedLimiter<K, C, S>,
    generation: u64,
    /// Whether the watermarks are raised (`Some(true)`), or could not be
    /// because a change published the next generation first.
    raised: Cell<Option<bool>>,
}

/// A bucket is idle when full, in the generation being dropped from: a new
/// one, with that generation's watermarks raised, starts no fuller. One of
/// another generation (a change's walk has not reached it, or has converted
/// it since the drop began) is left for later.
impl<K: Hash + Eq + Send, C: Clock, S: BuildHasher + Clone> KeyState<Dropping<'_, K, C, S>>
    for Stored
{
    fn is_idle(&self, dropping: &Dropping<'_, K, C, S>, nanos: u64) -> bool {
        let limiter = dropping.limiter;
        if self.generation() != dropping.generation || !self.is_full(&limiter.generations, nanos) {
            return false;
        }
        // Run under the entry's shard write lock: whoever recreates the key
        // reads the watermarks under the same lock, after this.
        let raised = dropping.raised.get().unwrap_or_else(|| {
            let raised = limiter.raise_watermarks(dropping.generation, nanos);
            dropping.raised.set(Some(raised));
            raised
        });
        // A shared entry goes sealed, after the raise: a cached decision
        // that meets the seal decides again in the table, on a bucket
        // created from the raised watermarks.
        raised && self.leaves_sealed(&limiter.generations, nanos)
    }

    fn tidy(&mut self) {
        self.unshare_if_uncached();
    }
}

impl<K: Hash + Eq + Send, C: Clock, S: BuildHasher + Clone> KeyedLimiter<K, C, S> {
    /// Gives back `tokens` of `admission` to `key`'s bucket in `table` by
    /// the one rule that never mints credit (`Tat::undo`): nothing if the
    /// bucket's quota changed since. A key no longer tracked was full when
    /// dropped: nothing is owed. Drops the key's bucket if the undo left it
    /// full.
    pub(super) fn undo_in<M, Q, H>(
        &self,
        table: &BucketMap<M, H>,
        key: &Q,
        admission: &Admission,
        tokens: u64,
    ) where
        M: Hash + Eq,
        Q: Find<M> + ?Sized,
        H: BuildHasher + Clone,
    {
        if let Some(entry) = key.find_in(table) {
            let held = entry.held(&self.generations);
            let ticks = held.gcra.returned_ticks(admission.tokens, tokens);
            held.tat
                .undo(&held.gcra, admission, ticks, held.generation, || {
                    held.gcra.ticks(self.timeline.nanos())
                });
        }
        // The guard above is dropped: the map may be written now.
        self.forget_if_full_in(table, key);
    }

    /// Drops `key`'s bucket if it is full, as a sweep would (losslessly,
    /// with the same watermarks), so that a key created by a request a later
    /// limit refused leaves no trace in the table: refusals elsewhere must
    /// not fill this limiter's key cap. Only a bucket of the current
    /// generation is dropped: a change's walk owns the others.
    fn forget_if_full_in<M, Q, H>(&self, table: &BucketMap<M, H>, key: &Q)
    where
        M: Hash + Eq,
        Q: Find<M> + ?Sized,
        H: BuildHasher + Clone,
    {
        let nanos = self.timeline.nanos();
        let dropping = self.dropping(self.generations.current());
        self.table.forget_if_idle_in(table, key, &dropping, nanos);
    }

    /// A drop of buckets of `generation`.
    fn dropping(&self, generation: u64) -> Dropping<'_, K, C, S> {
        Dropping {
            limiter: self,
            generation,
            raised: Cell::new(None),
        }
    }

    /// Makes every bucket of `generation` created from now on, the overflow
    /// bucket included, no fuller than one full at the clock reading
    /// `nanos`, and so every bucket of a later generation no fuller than
    /// that one carried: done before a bucket full at `nanos` is dropped,
    /// since whoever recreates it reads them under the same shard lock (see
    /// `fresh_tat`). Under the overflow bucket's read lock, so either
    /// before the next generation's publication, which carries the raise,
    /// or, if that came first, not at all (`false`): the bucket is then
    /// not dropped.
    fn raise_watermarks(&self, generation: u64, nanos: u64) -> bool {
        let overflow = read(&self.overflow);
        if self.generations.current() != generation {
            return false;
        }
        let held = self.overflow_held(&overflow);
        let full = held.gcra.ticks(nanos);
        self.generations.raise_dropped(generation, full);
        // A dropped key may come back through the overflow bucket, so that
        // bucket, too, must be no fuller than one full at `nanos`: otherwise
        // a decision on an older reading would credit it the refill the
        // dropped bucket wasted while full.
        held.tat.raise_to(full);
        true
    }

    /// Drops every bucket full at the clock reading `nanos` from both
    /// tables; how many. Run only as a sweep of the cap, which it uncounts
    /// them from. Changes are held off meanwhile, and a walk a panic cut
    /// short is finished first, so every bucket is in one generation.
    pub(super) fn drop_full_at(&self, nanos: u64) -> usize {
        let steady = self.generations.steady(|pending| self.walk(pending));
        self.table
            .drop_idle(&self.dropping(steady.generation()), nanos)
    }
}
