//! A key's bucket as the table stores it: inline beside the key, or, once
//! a thread caches the key as hot, on the heap, shared between the table
//! and the caches that decide on it without the shard lock.
//!
//! A shared entry leaves the table only sealed: a drop seals it if full (a
//! cached decision that came first keeps it), and a quota change's walk
//! seals it as it converts it into an inline entry of the new generation.
//! A seal is permanent, so a cached decision whose compare-and-swap
//! succeeds on an unsealed word linearized while the entry was the key's
//! bucket in the table, and one that meets the seal wrote nothing and goes
//! to the table. The argument is in [`docs/proofs.md`](crate::guide::proofs),
//! "Hot keys".

use std::ops::Deref;

use super::generations::{Change, Entry, Generations, Held};
use crate::gcra::Gcra;
use crate::sync::Arc;

/// A key's bucket in the table.
#[derive(Debug)]
pub(crate) enum Stored {
    /// Decided on only under the shard's lock.
    Inline(Entry),
    /// Cached by at least one thread, which decides on it without the lock.
    Shared(Arc<Entry>),
}

impl Deref for Stored {
    type Target = Entry;

    #[inline]
    fn deref(&self) -> &Entry {
        match self {
            Stored::Inline(entry) => entry,
            Stored::Shared(entry) => entry,
        }
    }
}

impl Stored {
    /// The entry to share with a thread's cache, moved to the heap if it
    /// was inline: under the shard's write lock, so no decision runs on it
    /// while it moves.
    pub(crate) fn share(&mut self) -> Arc<Entry> {
        match self {
            Stored::Shared(entry) => Arc::clone(entry),
            Stored::Inline(entry) => {
                let shared = Arc::new(entry.copy());
                *self = Stored::Shared(Arc::clone(&shared));
                shared
            }
        }
    }

    /// Moves a shared entry no thread's cache holds any more back inline,
    /// so that the heap holds only entries some cache still decides on:
    /// under the shard's write lock, where no cache can take a new
    /// reference (caches take theirs under the shard's lock) and none is
    /// left to decide on it.
    pub(crate) fn unshare_if_uncached(&mut self) {
        if let Stored::Shared(entry) = self
            && Arc::strong_count(entry) == 1
        {
            *self = Stored::Inline(entry.copy());
        }
    }

    /// Converts the entry to `change`'s generation, at a clock reading
    /// `nanos` takes under the shard's write lock: in place if inline; if
    /// shared, sealed, and an inline entry of the new generation takes its
    /// place (a cache that held it goes back to the table, and caches the
    /// key again if it stays hot).
    pub(crate) fn convert(&mut self, change: &Change<'_>, nanos: impl Fn() -> u64) {
        match self {
            Stored::Inline(entry) => change.convert(entry, nanos()),
            Stored::Shared(shared) => {
                if let Some(converted) = change.convert_shared(shared, nanos) {
                    *self = Stored::Inline(converted);
                }
            }
        }
    }

    /// Whether a drop at the clock reading `nanos` may take the entry (held
    /// for writing), given that it is full and in the generation dropped
    /// from: an inline one may, a shared one only if it is sealed full
    /// first, so that no cached decision lands on it after.
    pub(crate) fn leaves_sealed(&self, generations: &Generations, nanos: u64) -> bool {
        match self {
            Stored::Inline(_) => true,
            Stored::Shared(shared) => shared.seal_if_full(generations, nanos),
        }
    }
}

/// A shared entry as a thread's cache keeps it, with the quota of its
/// generation read while the entry was held: right for as long as the entry
/// is unsealed (a change seals it before its walk ends, and only a later
/// change rewrites its generation's slot).
///
/// Public only to the loom models (`--cfg tollgate_loom`); otherwise private
/// to the keyed limiter.
#[derive(Debug)]
pub struct SharedEntry {
    entry: Arc<Entry>,
    gcra: Gcra,
}

impl SharedEntry {
    /// `entry`, with its generation's quota read now: while its shard is
    /// held.
    pub(crate) fn new(entry: Arc<Entry>, generations: &Generations) -> Self {
        let gcra = generations.gcra(entry.generation());
        SharedEntry { entry, gcra }
    }

    /// The bucket, for a decision outside the lock.
    #[inline]
    pub(crate) fn held(&self) -> Held<'_> {
        self.entry.held_with(self.gcra)
    }

    /// Whether the entry has left the table.
    #[inline]
    pub(crate) fn is_sealed(&self) -> bool {
        self.entry.is_sealed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_entry_no_cache_holds_goes_back_inline_with_its_state() {
        let mut stored = Stored::Inline(Entry::new(3, 42));
        let cached = stored.share();
        stored.unshare_if_uncached();
        assert!(
            matches!(stored, Stored::Shared(_)),
            "a cache still holds it"
        );
        drop(cached);
        stored.unshare_if_uncached();
        let Stored::Inline(entry) = &stored else {
            panic!("no cache holds it: back inline");
        };
        assert_eq!((entry.generation(), entry.copy().generation()), (3, 3));
        assert_eq!(stored.share().copy().generation(), 3);
    }

    #[test]
    fn a_stored_entry_is_as_small_as_an_inline_one() {
        assert_eq!(std::mem::size_of::<Entry>(), 16);
        assert_eq!(std::mem::size_of::<Stored>(), 16);
    }
}
