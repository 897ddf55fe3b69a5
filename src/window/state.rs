//! A window counter's word and the operations on it, apart from any clock.

use crossbeam_utils::Backoff;

use super::WindowKind;
use super::frame::{Frame, View};
use crate::error::AcquireError;
use crate::sync::{AtomicU64, Ordering};

/// The packed `[index | prev | cur]` word of [`Frame`].
///
/// Public only to the loom models (`--cfg tollgate_loom`); otherwise private
/// to the window counters.
#[derive(Debug, Default)]
pub struct WindowState(AtomicU64);

impl WindowState {
    /// A state holding `word` (a frame's `empty` word).
    #[cfg(feature = "keyed")]
    pub(crate) fn starting(word: u64) -> Self {
        WindowState(AtomicU64::new(word))
    }

    /// Admits `cost` (already checked against the limit) at `at`
    /// nanoseconds since window 0, with up to `slack` nanoseconds of delay
    /// ([`Frame::reserve`]), rolling the word forward to the reading's
    /// window in the same compare-and-swap: one successful compare-and-swap
    /// per admission, none per refusal. Returns the index of the window the
    /// cost was counted in, and the wait before it may be used; both waits
    /// are measured from the clock `reading` that `at` was taken from (a
    /// reading before the limiter's creation is decided at the creation).
    #[inline]
    pub(crate) fn acquire<K: WindowKind>(
        &self,
        frame: &Frame<K>,
        (at, reading): (u64, u64),
        cost: u64,
        slack: u64,
    ) -> Result<(u64, u64), AcquireError> {
        let backoff = Backoff::new();
        let mut word = self.0.load(Ordering::Acquire);
        loop {
            let view = frame.view(word, at);
            let wait = if frame.fits(&view, cost) {
                0
            } else {
                frame
                    .reserve(&view, at, cost, slack, frame.behind(reading))
                    .map_err(|retry_after| AcquireError::Insufficient { retry_after })?
            };
            let next = frame.admitted(&view, cost);
            match self
                .0
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok((view.index, wait)),
                Err(actual) => {
                    word = actual;
                    backoff.spin();
                }
            }
        }
    }

    /// What a decision at `at` would see now. Reads only.
    #[inline]
    pub(crate) fn view<K: WindowKind>(&self, frame: &Frame<K>, at: u64) -> View {
        frame.view(self.0.load(Ordering::Acquire), at)
    }

    /// Gives back `cost` admitted in window `index`, at `at` nanoseconds
    /// since window 0: the one rule by which a window counter's credit flows
    /// back. Only while that window lasts (by the reading, and by the word:
    /// once a later window shows in either, the window has ended), and never
    /// more than its count holds. Then the word is what it would be had the
    /// admission not happened: counts only add up within a window, and the
    /// word never returns to a window it left, so nothing is minted. Once
    /// the window has ended its budget is gone with it and nothing goes
    /// back: not into the next window, and not out of a sliding window's
    /// previous count, which the rolling window still covers. Returns what
    /// was given back.
    pub(crate) fn give_back<K: WindowKind>(
        &self,
        frame: &Frame<K>,
        index: u64,
        cost: u64,
        at: u64,
    ) -> u64 {
        let mut word = self.0.load(Ordering::Acquire);
        loop {
            // The word's window is at least the receipt's (it never moves
            // back), and the view's at least the word's and the reading's.
            if frame.view(word, at).index != index {
                return 0;
            }
            let (next, taken) = frame.less(word, cost);
            match self
                .0
                .compare_exchange(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return taken,
                Err(actual) => word = actual,
            }
        }
    }

    /// Counts `excess` in the window of `at` whether or not it fits (the
    /// excess of a settled cost over its estimate), up to what the count
    /// holds: the window then refuses until it ends, and a sliding one
    /// weighs the excess into the next window too. A debt beyond the
    /// window's own count ends with the window, by the windows' rule
    /// (budgets live and die with their window). Returns what was counted.
    pub(crate) fn debit<K: WindowKind>(&self, frame: &Frame<K>, excess: u64, at: u64) -> u64 {
        let backoff = Backoff::new();
        let mut word = self.0.load(Ordering::Acquire);
        loop {
            let view = frame.view(word, at);
            let counted = excess.min(frame.room(&view));
            let next = frame.admitted(&view, counted);
            match self
                .0
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return counted,
                Err(actual) => {
                    word = actual;
                    backoff.spin();
                }
            }
        }
    }
}

/// A keyed window's key is idle when nothing it counted still weighs: an
/// empty word in the window of the sweep's reading (or later) decides the
/// same.
#[cfg(feature = "keyed")]
impl<K: WindowKind> crate::keyed::KeyState<Frame<K>> for WindowState {
    fn is_idle(&self, frame: &Frame<K>, at: u64) -> bool {
        frame.is_idle(self.0.load(Ordering::Acquire), at)
    }
}
