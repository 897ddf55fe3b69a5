//! A window counter's arithmetic, free of atomics: the packing of its word,
//! where a reading falls against the window the word shows, and what fits.
//!
//! The word is `[index | prev | cur]`, high bits to low: `cur` is the cost
//! admitted in the window numbered `index` (counted from the limiter's first
//! window), `prev` the cost of the window before it (sliding windows only;
//! fixed windows have no `prev` field). Each count takes `c` bits, where
//! `c` is the bit length of the limit (a count never exceeds the limit), and
//! the index takes the `k = 64 - c` (fixed) or `64 - 2c` (sliding) bits
//! left. A limiter is built only if `2^k` windows last at least
//! [`MIN_RANGE_NANOS`]; past its `2^k`-th window time freezes in the last
//! one (the index saturates, never wraps), so the counts only grow and the
//! limiter fails closed, as a bucket does at the end of its range.

use std::marker::PhantomData;
use std::time::Duration;

use super::{WindowKind, WindowQuota};
use crate::error::{AcquireError, QuotaError};
use crate::timeline::Behind;

/// The shortest span, in nanoseconds, that a window counter's index must
/// cover before it saturates: 2^60 ns, 36.5 years, the shortest range of a
/// token bucket (2^63 ticks of 1/8 ns).
pub(crate) const MIN_RANGE_NANOS: u128 = 1 << 60;

/// The retry time of a request that can never fit any more: the clock has
/// reached the end of the limiter's range.
const NEVER: Duration = Duration::from_nanos(u64::MAX);

/// The packing of a window counter's word and the span its index covers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Frame<K> {
    limit: u64,
    /// `W` in nanoseconds.
    window: u64,
    /// `c`: the bits of one count.
    count_bits: u32,
    /// The bit at which the index starts: `c` (fixed) or `2c` (sliding).
    index_shift: u32,
    /// The last nanosecond, since the start of the first window, that the
    /// index can name: time freezes there.
    last: u64,
    /// The limiter's creation reading, and how far into its window it lies:
    /// a reading `t` is `t - origin + lead` nanoseconds after the start of
    /// window 0.
    origin: u64,
    lead: u64,
    kind: PhantomData<fn() -> K>,
}

/// The counts a decision sees: the word's window rolled forward to the
/// reading's, or the word's own window for a reading behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct View {
    pub(crate) index: u64,
    pub(crate) prev: u64,
    pub(crate) cur: u64,
    /// Nanoseconds into the window `index`: the reading's, or 0 for a
    /// reading behind the word's window (the start of that window, where
    /// the previous window weighs most).
    pub(crate) pos: u64,
}

impl<K: WindowKind> Frame<K> {
    /// Validates the packing of `quota` for this kind of window and places
    /// window 0 around the clock reading `origin`.
    pub(crate) fn new(quota: &WindowQuota, origin: u64) -> Result<Self, QuotaError> {
        let (limit, window) = (quota.limit(), quota.window_nanos());
        let count_bits = bit_length(limit);
        let index_shift = fields::<K>() * count_bits;
        if !covers_range::<K>(count_bits, window) {
            return Err(QuotaError::LimitTooLarge {
                limit,
                max: max_limit::<K>(window),
            });
        }
        // 2^k windows of W ns, the last nanosecond of the last one; beyond
        // 2^64 - 1 every reading fits and nothing saturates.
        let span = u128::from(window) << (64 - index_shift);
        let last = u64::try_from(span - 1).unwrap_or(u64::MAX);
        Ok(Frame {
            limit,
            window,
            count_bits,
            index_shift,
            last,
            origin,
            lead: quota.position_of(origin),
            kind: PhantomData,
        })
    }

    /// Nanoseconds from the start of window 0 to `reading`, frozen at the
    /// end of the range. A reading before the limiter's creation counts as
    /// its creation: it can only see its first window.
    #[inline]
    pub(crate) fn elapsed(&self, reading: u64) -> u64 {
        reading
            .saturating_sub(self.origin)
            .saturating_add(self.lead)
            .min(self.last)
    }

    /// How far `reading` lies before the limiter's creation, if it does: a
    /// decision made at the creation reports its waits from the reading
    /// ([`Behind`]).
    #[inline]
    pub(crate) fn behind(&self, reading: u64) -> Option<Behind> {
        (reading < self.origin).then(|| Behind::of(reading, self.origin))
    }

    /// Refuses a cost of zero and a cost no window can hold.
    #[inline]
    pub(crate) fn check_cost(&self, cost: u64) -> Result<(), AcquireError> {
        AcquireError::check_cost(cost, self.limit)
    }

    #[inline]
    fn unpack(&self, word: u64) -> (u64, u64, u64) {
        let mask = (1u64 << self.count_bits) - 1;
        let prev = if K::SLIDING {
            (word >> self.count_bits) & mask
        } else {
            0
        };
        (word >> self.index_shift, prev, word & mask)
    }

    /// The word for `view` with `cost` more admitted: the counts are at most
    /// the limit, so each fits its field, and the index at most what a
    /// reading within the range names.
    #[inline]
    pub(crate) fn admitted(&self, view: &View, cost: u64) -> u64 {
        let prev = if K::SLIDING {
            view.prev << self.count_bits
        } else {
            0
        };
        (view.index << self.index_shift) | prev | (view.cur + cost)
    }

    /// What the current count of `view` can still hold: its field's
    /// largest value less what it holds.
    #[inline]
    pub(crate) fn room(&self, view: &View) -> u64 {
        ((1u64 << self.count_bits) - 1).saturating_sub(view.cur)
    }

    /// `word` with `cost` less in its current count (at most what is there).
    #[inline]
    pub(crate) fn less(&self, word: u64, cost: u64) -> (u64, u64) {
        let taken = cost.min(word & ((1u64 << self.count_bits) - 1));
        (word - taken, taken)
    }

    /// What a decision at `at` (nanoseconds since window 0) sees in `word`.
    ///
    /// The common cases divide nothing: the reading in the word's window, or
    /// in the next one (the first decision of each window). Only a reading
    /// two or more windows on divides.
    #[inline]
    pub(crate) fn view(&self, word: u64, at: u64) -> View {
        let (index, prev, cur) = self.unpack(word);
        // The index was named by a reading within the range, so its start
        // is at most `last`: no overflow.
        let start = index * self.window;
        let Some(into) = at.checked_sub(start) else {
            // A stale reading or a clock gone back: decided in the word's
            // window, never in one already passed.
            return View {
                index,
                prev,
                cur,
                pos: 0,
            };
        };
        if into < self.window {
            return View {
                index,
                prev,
                cur,
                pos: into,
            };
        }
        let after = into - self.window;
        let (ahead, pos) = if after < self.window {
            (1, after)
        } else {
            (into / self.window, into % self.window)
        };
        View {
            index: index + ahead,
            // A sliding window's count becomes the previous one when the next
            // window opens; two windows on, nothing of it is left.
            prev: if K::SLIDING && ahead == 1 { cur } else { 0 },
            cur: 0,
            pos,
        }
    }

    /// A word with nothing counted, in the window of `at` (nanoseconds
    /// since window 0, within the range): a new key's state.
    #[cfg(feature = "keyed")]
    #[inline]
    pub(crate) fn empty(&self, at: u64) -> u64 {
        (at / self.window) << self.index_shift
    }

    /// Whether nothing counted in `word` still weighs at `at`, seen from a
    /// reading not behind the word's window: then an [`empty`](Self::empty)
    /// word in the window of `at`, or of any later reading, decides as
    /// `word` does. A word a reading has not yet reached is never idle to
    /// it, so a state recreated after it is dropped never starts in a
    /// window before the one it was dropped in.
    #[cfg(feature = "keyed")]
    pub(crate) fn is_idle(&self, word: u64, at: u64) -> bool {
        let (index, _, _) = self.unpack(word);
        let view = self.view(word, at);
        index * self.window <= at && view.cur == 0 && view.prev == 0
    }

    /// How long after `at` a `cost` refused in `view` would fit if nothing
    /// else were admitted; zero if it fits now. From a reading `behind` the
    /// creation, the gap comes first.
    pub(crate) fn retry_after(
        &self,
        view: &View,
        at: u64,
        cost: u64,
        behind: Option<Behind>,
    ) -> Duration {
        if self.fits(view, cost) {
            Duration::ZERO
        } else {
            let wait = self.wait(view, at, cost);
            behind.map_or(wait, |behind| behind.wait(wait))
        }
    }

    /// Whether `cost` fits in `view`: `cur + cost <= N` for a fixed window;
    /// for a sliding one, the previous count weighted by the part of the
    /// rolling window it still covers, `prev · (W - pos) / W + cur + cost
    /// <= N`, compared exactly (both sides times `W`, in 128 bits).
    #[inline]
    pub(crate) fn fits(&self, view: &View, cost: u64) -> bool {
        let Some(room) = self.limit.checked_sub(view.cur + cost) else {
            return false;
        };
        !K::SLIDING || wide(view.prev, self.window - view.pos) <= wide(room, self.window)
    }

    /// Whole units that fit in `view` now.
    #[inline]
    pub(crate) fn available(&self, view: &View) -> u64 {
        let carried = wide(view.prev, self.window - view.pos).div_ceil(u128::from(self.window));
        // `carried <= prev <= limit`.
        (self.limit - carried as u64).saturating_sub(view.cur)
    }

    /// How long after `at` a refused `cost` would fit in `view` if nothing
    /// else were admitted (see [`Self::due`]); beyond the end of the range,
    /// a wait that never ends.
    pub(crate) fn wait(&self, view: &View, at: u64, cost: u64) -> Duration {
        self.due(view, cost)
            .map_or(NEVER, |due| Duration::from_nanos(due.saturating_sub(at)))
    }

    /// The wait from `at` until the end of `view`'s window.
    pub(crate) fn until_end(&self, view: &View, at: u64) -> Duration {
        let end = u128::from(view.index + 1) * u128::from(self.window);
        u64::try_from(end - u128::from(at)).map_or(NEVER, Duration::from_nanos)
    }

    /// Decides a `cost` that does not fit in `view` now, with up to `slack`
    /// nanoseconds of delay: the wait, if the cost fits within the slack
    /// *and within the view's window*. A count can only go into the window
    /// the word holds, so a reservation is counted there and used later in
    /// it: only a sliding window, whose previous count fades as its window
    /// goes on, ever reserves; a fixed window's refused cost fits only in
    /// the next one. Otherwise the refusal's wait: until the same call
    /// would succeed, when the instant the cost fits is at most `slack`
    /// ahead and in the window then current.
    ///
    /// For a reading `behind` the creation (`at` is then the creation's),
    /// every wait starts with the gap. A refusal's wait is not the one at
    /// the creation plus the gap, because the gap and the window's edge
    /// fall differently: in the view's window, the caller still behind
    /// spends the rest of the gap from its slack, so the call succeeds
    /// once `gap + (due - at)` has shrunk to the slack; in a later window,
    /// it must first come back to the creation and then reach that window.
    #[inline]
    pub(crate) fn reserve(
        &self,
        view: &View,
        at: u64,
        cost: u64,
        slack: u64,
        behind: Option<Behind>,
    ) -> Result<u64, Duration> {
        let Some(due) = self.due(view, cost) else {
            return Err(NEVER);
        };
        // The due instant lies in the view's window, the next, or exactly
        // at the start of the one after (a previous count that fades out
        // only at the end of the next window). The view's start is at most
        // `last`: no overflow.
        let start = view.index * self.window;
        let in_window = due - start < self.window;
        // Instants as far from `at` as they are from the reading.
        let gap = behind.map_or(0, Behind::nanos);
        let wait = due.saturating_add(gap).saturating_sub(at);
        if in_window && wait <= slack {
            return Ok(wait);
        }
        let from = due.saturating_add(gap).saturating_sub(slack);
        let from = if in_window {
            from
        } else {
            // The start of the due instant's window: the next or the one
            // after, both at most `due` (no overflow).
            let next = start + self.window;
            let due_window_start = if due - next >= self.window {
                next + self.window
            } else {
                next
            };
            from.max(due_window_start.saturating_add(gap))
        };
        Err(Duration::from_nanos(from.saturating_sub(at)))
    }

    /// The first instant (nanoseconds since window 0) at which `cost` fits
    /// in `view` if nothing else were admitted: the first at which the
    /// previous count's weight has shrunk enough, in this window or the
    /// next (a sliding window; a fixed one resets at the next), two windows
    /// on at the latest. Exact, in whole nanoseconds (the first whole
    /// nanosecond at which the cost fits). `None` beyond the end of the
    /// range.
    pub(crate) fn due(&self, view: &View, cost: u64) -> Option<u64> {
        let window = u128::from(self.window);
        let start = u128::from(view.index) * window;
        let due = match self.limit.checked_sub(view.cur + cost) {
            Some(room) => start + self.settled(view.prev, room),
            // Next window: `cur` becomes the previous count of a sliding
            // window, and a fixed one starts empty.
            None => {
                let carried = if K::SLIDING { view.cur } else { 0 };
                start + window + self.settled(carried, self.limit - cost)
            }
        };
        u64::try_from(due).ok().filter(|&due| due <= self.last)
    }

    /// The first position in a window at which `weight` from the window
    /// before leaves `room`: `prev · (W - pos) <= room · W`.
    fn settled(&self, weight: u64, room: u64) -> u128 {
        if room >= weight {
            return 0;
        }
        // `floor(room · W / weight)` without a 128-bit division (a library
        // call, several times the rest of a refusal): with
        // `W = q · weight + r`, it is `room · q + floor(room · r / weight)`,
        // where `room · r < weight² < 2^64` (a sliding window's counts have
        // at most 31 bits) and the sum is below `W`.
        let (q, r) = (self.window / weight, self.window % weight);
        u128::from(self.window - (room * q + room * r / weight))
    }
}

fn wide(a: u64, b: u64) -> u128 {
    u128::from(a) * u128::from(b)
}

/// Bits needed to hold `n`.
fn bit_length(n: u64) -> u32 {
    u64::BITS - n.leading_zeros()
}

/// Counts in the word: one for a fixed window, two for a sliding one.
fn fields<K: WindowKind>() -> u32 {
    1 + u32::from(K::SLIDING)
}

/// Whether counts of `count_bits` leave an index of at least one bit that
/// names windows of `window` ns for at least [`MIN_RANGE_NANOS`].
fn covers_range<K: WindowKind>(count_bits: u32, window: u64) -> bool {
    let shift = fields::<K>() * count_bits;
    shift < 64 && u128::from(window) << (64 - shift) >= MIN_RANGE_NANOS
}

/// The largest limit whose counts pack beside an index that covers the
/// range with windows of `window` ns.
fn max_limit<K: WindowKind>(window: u64) -> u64 {
    // A one-bit count always fits (`2^62` windows of at least 1 ns); the
    // condition is monotone in the width.
    let bits = (1..64)
        .rev()
        .find(|&bits| covers_range::<K>(bits, window))
        .unwrap_or(1);
    u64::MAX >> (64 - bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::{Fixed, Sliding};

    fn at(index: u64, prev: u64, cur: u64, pos: u64) -> View {
        View {
            index,
            prev,
            cur,
            pos,
        }
    }

    fn frame<K: WindowKind>(limit: u64, window: u64) -> Frame<K> {
        let quota = WindowQuota::new(limit, Duration::from_nanos(window)).unwrap();
        Frame::new(&quota, 0).unwrap()
    }

    #[test]
    fn a_word_round_trips_through_its_fields() {
        let sliding = frame::<Sliding>(1000, 1_000_000);
        let view = at(12345, 999, 7, 0);
        let word = sliding.admitted(&view, 3);
        assert_eq!(sliding.unpack(word), (12345, 999, 10));
        let fixed = frame::<Fixed>(1000, 1_000_000);
        assert_eq!(fixed.unpack(fixed.admitted(&view, 3)), (12345, 0, 10));
    }

    #[test]
    fn the_index_gets_what_the_counts_leave() {
        // 1000 needs 10 bits: a fixed index of 54 bits, a sliding one of 44.
        assert_eq!(frame::<Fixed>(1000, 1 << 20).index_shift, 10);
        assert_eq!(frame::<Sliding>(1000, 1 << 20).index_shift, 20);
        // A limit of exactly 2^10 needs 11 bits.
        assert_eq!(frame::<Fixed>(1024, 1 << 20).count_bits, 11);
    }

    #[test]
    fn the_largest_limit_is_the_widest_count_that_leaves_the_range() {
        let second = 1_000_000_000;
        // Sliding, one second: 2^(64 - 2c) s >= 2^60 ns needs c <= 16.
        assert_eq!(max_limit::<Sliding>(second), (1 << 16) - 1);
        // Fixed, one second: 2^(64 - c) s >= 2^60 ns needs c <= 33.
        assert_eq!(max_limit::<Fixed>(second), (1 << 33) - 1);
        let quota = WindowQuota::new(1 << 16, Duration::from_secs(1)).unwrap();
        assert_eq!(
            Frame::<Sliding>::new(&quota, 0).unwrap_err(),
            QuotaError::LimitTooLarge {
                limit: 1 << 16,
                max: (1 << 16) - 1
            }
        );
        assert!(Frame::<Fixed>::new(&quota, 0).is_ok());
    }

    #[test]
    fn views_roll_forward_and_never_back() {
        let sliding = frame::<Sliding>(10, 100);
        let word = sliding.admitted(&at(5, 4, 6, 0), 0);
        let view = |at| sliding.view(word, at);
        assert_eq!(view(530), at(5, 4, 6, 30));
        assert_eq!(view(630), at(6, 6, 0, 30));
        assert_eq!(view(730), at(7, 0, 0, 30));
        // Behind: the word's own window, at its start.
        assert_eq!(view(130), at(5, 4, 6, 0));
        let fixed = frame::<Fixed>(10, 100);
        let word = fixed.admitted(&at(5, 0, 6, 0), 0);
        assert_eq!(fixed.view(word, 630), at(6, 0, 0, 30));
    }

    #[test]
    fn a_sliding_wait_ends_when_the_previous_window_has_faded_enough() {
        let sliding = frame::<Sliding>(10, 100);
        // prev 10, cur 0 at pos 0: one unit fits once 10·(100 - pos) <= 9·100,
        // at pos 10.
        let view = at(1, 10, 0, 0);
        assert!(!sliding.fits(&view, 1));
        assert_eq!(sliding.wait(&view, 100, 1), Duration::from_nanos(10));
        assert!(sliding.fits(&View { pos: 10, ..view }, 1));
        assert!(!sliding.fits(&View { pos: 9, ..view }, 1));
        // cur 10: the next window, where 10 weighs 10·(100 - pos)/100.
        let full = at(1, 0, 10, 40);
        assert_eq!(sliding.wait(&full, 140, 1), Duration::from_nanos(60 + 10));
        // A fixed window resets at the next.
        let fixed = frame::<Fixed>(10, 100);
        assert_eq!(fixed.wait(&full, 140, 1), Duration::from_nanos(60));
    }

    #[test]
    fn available_counts_the_faded_previous_window_up() {
        let sliding = frame::<Sliding>(10, 100);
        // 10 · 95/100 = 9.5 still counted: 0 left, not 0.5 rounded to 1.
        assert_eq!(sliding.available(&at(1, 10, 0, 5)), 0);
        assert_eq!(sliding.available(&at(1, 10, 0, 10)), 1);
        assert_eq!(sliding.available(&at(1, 3, 2, 50)), 6);
    }
}
