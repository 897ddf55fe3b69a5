//! A quota's arithmetic as plain words, for a limiter whose quota changes
//! at run time: it keeps them in atomics (`keyed/generations.rs`), which a
//! `Gcra` cannot be without `unsafe`.

use super::Gcra;

/// How many words [`Gcra::to_words`] writes.
pub(crate) const WORDS: usize = 4;

impl Gcra {
    /// The quota's fields, the small ones packed into the first word.
    pub(crate) fn to_words(self) -> [u64; WORDS] {
        let packed = self.ticks_per_nano | u64::from(self.shift) << 8 | u64::from(self.exact) << 16;
        [packed, self.interval, self.tolerance, self.capacity]
    }

    /// The quota [`Self::to_words`] wrote. Only ever given words it wrote:
    /// any other words make a quota whose arithmetic is not validated.
    #[inline]
    pub(crate) fn from_words([packed, interval, tolerance, capacity]: [u64; WORDS]) -> Gcra {
        Gcra {
            ticks_per_nano: packed & 0xff,
            interval,
            // Eight bits hold every shift (at most 64).
            shift: (packed >> 8 & 0xff) as u32,
            tolerance,
            capacity,
            exact: packed >> 16 & 1 == 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn every_kind_of_quota_comes_back_as_it_went() {
        for (capacity, tokens, period) in [
            (10, 10, Duration::from_secs(1)),
            (1, 7, Duration::from_secs(1)),
            (5, 11, Duration::from_secs(1)),
            (1 << 30, 64 << 20, Duration::from_secs(1)),
            (3, 3_000_000_007, Duration::from_secs(1)),
        ] {
            let gcra = Gcra::new(capacity, tokens, period).unwrap();
            assert_eq!(Gcra::from_words(gcra.to_words()), gcra);
        }
    }
}
