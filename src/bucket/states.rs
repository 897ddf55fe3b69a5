//! A bucket's states across changes of quota: the first one inline, the
//! seal that says a state moved, and the states after it on the heap.
//!
//! Before any change every operation runs on the inline state exactly as a
//! bucket without changes would: the same word, the same quota beside it,
//! no extra load. A change seals the word of the state in force
//! ([`SEALED`](crate::state::SEALED)) and puts a successor in its place;
//! sealing is permanent, so a compare-and-swap that succeeds on a word
//! loaded unsealed linearizes before the change (no ABA, no generation on
//! the hot path), and an operation that meets the seal wrote nothing and is
//! run again on the successor. The protocol, its orderings and its
//! linearization points are in [`docs/proofs.md`](crate::guide::proofs),
//! "Changing a bucket's quota".

use crossbeam_utils::CachePadded;

use crate::gcra::Gcra;
use crate::quota::Quota;
use crate::state::{FIRST, Tat};
use crate::sync::swap::{Loaded, Swap};
use crate::sync::{Arc, Mutex, lock};

/// One quota's state: the word, the quota it is kept under, and that
/// quota's generation. The quota and generation never change; the word is
/// sealed when the state moves on.
#[derive(Debug)]
pub(super) struct State {
    pub(super) tat: CachePadded<Tat>,
    pub(super) quota: Quota,
    pub(super) generation: u64,
    /// Where this state moved: stored before the seal (so whoever sees the
    /// seal finds it) and cleared once [`States::current`] points at it or
    /// later, so that the states of past changes are freed rather than
    /// chained from the first one for the bucket's lifetime.
    next: Swap<State>,
}

impl State {
    fn new(quota: Quota, tat: u64, generation: u64) -> Self {
        State {
            tat: CachePadded::new(Tat::new(tat)),
            quota,
            generation,
            next: Swap::empty(),
        }
    }

    #[inline(always)]
    pub(super) fn gcra(&self) -> &Gcra {
        self.quota.gcra()
    }
}

/// The inline first state, and the current one once the quota has changed.
#[derive(Debug)]
pub(super) struct States {
    first: State,
    /// The latest state, once there was a change: stored right after the
    /// seal that made it current. Read only by operations that met a seal.
    current: Swap<State>,
    /// Serialises changes, which are rare administrative operations; every
    /// decision stays lock-free.
    changing: Mutex<()>,
}

impl States {
    pub(super) fn new(quota: Quota, tat: u64) -> Self {
        States {
            first: State::new(quota, tat, FIRST),
            current: Swap::empty(),
            changing: Mutex::new(()),
        }
    }

    /// Runs `op` on the state in force and returns its outcome.
    ///
    /// The one path of every operation of the bucket. `op` runs on the
    /// inline state first; only an outcome for which `maybe_moved` holds
    /// (one a sealed word produces: a refusal, zero tokens) costs a second
    /// load of the word, and only a sealed word sends `op` on to the
    /// successor, as many times as there were changes since. A successful
    /// decision never looks again: its compare-and-swap on an unsealed word
    /// already linearized it before any later seal.
    #[inline(always)]
    pub(super) fn on_state<R>(
        &self,
        op: impl Fn(&State) -> R,
        maybe_moved: impl Fn(&R) -> bool,
    ) -> R {
        let outcome = op(&self.first);
        if maybe_moved(&outcome) && self.first.tat.is_sealed() {
            // The outcome is not handed over: a value passed to the cold
            // path would be built in memory on every call.
            return self.follow(&self.first, op, maybe_moved);
        }
        outcome
    }

    /// [`Self::on_state`] past the sealed state `from`: a loop of its own,
    /// out of line, so that the guards it holds on the states it visits
    /// cost the inline state's path nothing (not even a drop flag).
    #[cold]
    #[inline(never)]
    fn follow<R>(
        &self,
        from: &State,
        op: impl Fn(&State) -> R,
        maybe_moved: impl Fn(&R) -> bool,
    ) -> R {
        let mut loaded = self.successor(from);
        loop {
            // `successor` always finds one; were none, the sealed state's
            // refusal would be the safe answer.
            let Some(state) = loaded.as_deref() else {
                return op(from);
            };
            let outcome = op(state);
            if !(maybe_moved(&outcome) && state.tat.is_sealed()) {
                return outcome;
            }
            let next = self.successor(state);
            loaded = next;
        }
    }

    /// The state a sealed `state` moved to, or a later one: `current`,
    /// unless it still holds `state` (the change that sealed it has not
    /// stored it yet), and then `state.next`. A `state` that was sealed was
    /// current before (the change that sealed it stored it first, and this
    /// thread saw that seal), so `current` is never older than it. Loops
    /// at most twice: `next` is cleared only after `current` moved on.
    fn successor(&self, state: &State) -> Loaded<State> {
        loop {
            let current = self.current.load();
            if current
                .as_deref()
                .is_some_and(|current| !std::ptr::eq(current, state))
            {
                return current;
            }
            let next = state.next.load();
            if next.is_some() {
                return next;
            }
        }
    }

    /// Changes the quota at the instant `nanos()` (nanoseconds since the
    /// timeline's origin, read after each load of the state it carries):
    /// seals the state in force and makes its carry ([`Gcra::carry`]) the
    /// state of the new quota, one generation later. A quota with the same
    /// arithmetic as the one in force changes nothing. Linearizes at the
    /// seal.
    pub(super) fn change(&self, quota: Quota, nanos: impl Fn() -> u64) {
        let _serialised = lock(&self.changing);
        // Under the lock `current` is the state in force: only changers
        // store it.
        let loaded = self.current.load();
        let old = loaded.as_deref().unwrap_or(&self.first);
        if old.gcra() == quota.gcra() {
            return;
        }
        // 2^64 changes would take centuries at one a nanosecond.
        let new = Arc::new(State::new(quota, 0, old.generation + 1));
        // Published before the seal: an operation that meets the seal
        // follows `next` and must find the successor without waiting.
        old.next.store(Some(Arc::clone(&new)));
        old.tat
            .seal(|tat| new.tat.set(old.gcra().carry(tat, nanos(), new.gcra())));
        self.current.store(Some(new));
        old.next.store(None);
    }

    /// The quota in force and its generation.
    pub(super) fn in_force(&self) -> (Quota, u64) {
        // Read from a state that was still unsealed afterwards: in force at
        // that load.
        self.on_state(|state| (state.quota, state.generation), |_| true)
    }
}
