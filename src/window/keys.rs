//! What a keyed window counter's keys share: the frame every key's word is
//! packed and read by, and the sweep watermark a new key's word starts
//! from. The decisions a key table's lock surrounds are made here, so the
//! loom model in `loom-tests/` runs this very code against a stand-in
//! table (dashmap is not loom-aware).

use super::WindowKind;
use super::frame::{Frame, View};
use crate::sync::{AtomicU64, Ordering};

/// The frame of every key's word and the latest reading at which a sweep
/// (or a give-back) dropped idle words.
///
/// Public only to the loom models (`--cfg tollgate_loom`); otherwise private
/// to the keyed window counter.
#[derive(Debug)]
pub struct WindowKeys<Kind> {
    pub(crate) frame: Frame<Kind>,
    /// Nanoseconds since window 0: a new key's word starts no earlier than
    /// its window.
    swept_at: AtomicU64,
}

impl<Kind: WindowKind> WindowKeys<Kind> {
    pub(crate) fn new(frame: Frame<Kind>) -> Self {
        WindowKeys {
            frame,
            swept_at: AtomicU64::new(0),
        }
    }

    /// A new key's word at the reading `at`: empty, in the window of the
    /// later of `at` and the last drop's reading, so a key dropped and
    /// recreated never counts again in a window it spent in. Read under the
    /// key's shard write lock, after any drop from that shard published
    /// its reading.
    #[inline]
    pub(crate) fn fresh_word(&self, at: u64) -> u64 {
        self.frame
            .empty(at.max(self.swept_at.load(Ordering::Acquire)))
    }

    /// Publishes `at` as a drop's reading: done before any word idle at
    /// `at` is dropped.
    pub(crate) fn dropping_at(&self, at: u64) {
        self.swept_at.fetch_max(at, Ordering::AcqRel);
    }

    /// What a decision at `at` sees for a key not tracked.
    pub(crate) fn unknown(&self, at: u64) -> View {
        self.frame.view(self.fresh_word(at), at)
    }
}

/// A keyed window counter's decisions on a key's word, as the loom models
/// make them on a stand-in table: the calls `keyed.rs` makes under the
/// shard's lock.
#[cfg(tollgate_loom)]
impl<Kind: WindowKind> WindowKeys<Kind> {
    /// A model's keys: windows of `quota`, window 0 starting at reading 0.
    pub fn for_model(quota: &super::WindowQuota) -> Result<Self, crate::error::QuotaError> {
        Ok(WindowKeys::new(Frame::new(quota, 0)?))
    }

    /// A new key's word at the reading `at` (nanoseconds since window 0).
    pub fn fresh(&self, at: u64) -> super::state::WindowState {
        super::state::WindowState::starting(self.fresh_word(at))
    }

    /// Counts `cost` in `state` at the reading `at`: the window it was
    /// counted in.
    pub fn try_acquire(
        &self,
        state: &super::state::WindowState,
        at: u64,
        cost: u64,
    ) -> Result<u64, crate::error::AcquireError> {
        state
            .acquire(&self.frame, (at, at), cost, 0)
            .map(|(index, _)| index)
    }

    /// Publishes a sweep's reading `at`: done before any shard is
    /// locked.
    pub fn sweeping_at(&self, at: u64) {
        self.dropping_at(at);
    }

    /// Whether a sweep at `at` drops `state` (held for writing).
    pub fn is_idle(&self, state: &super::state::WindowState, at: u64) -> bool {
        crate::keyed::KeyState::is_idle(state, &self.frame, at)
    }
}
