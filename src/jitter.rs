//! The crate's one jitter generator, and uniform draws from it.
//!
//! Three places spread clients out: the client-side retry planner
//! (`retry::RetryPolicy::plan`), the server's advertised windows
//! (`http::Jitter`) and the shared budget's paced refills. It is a module
//! of its own, needing no feature, so that none of them pulls in another.
//! Each needs a draw uniform over `0..=max`, the bound included: a jitter of "up
//! to one second" that can never add the second is no jitter at all.
//!
//! Jitter only has to make clients that were told the same thing at the
//! same moment disagree about when to come back; it is not a secret. A
//! splitmix64 sequence does that in a few instructions, so the crate takes
//! no `rand` dependency for it. Its state is one atomic counter advanced by
//! a fixed odd step, so one generator can be shared by every thread that
//! refuses requests without a lock, and every output of a period of 2^64 is
//! distinct. The entropy seed mixes the standard library's per-process
//! random hash keys with the clock, so a fleet started in the same instant
//! (from one image, say) still draws different sequences.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::sync::{AtomicU64, Ordering};

/// The splitmix64 step: the fractional part of the golden ratio, odd, so
/// the counter visits every `u64` once per period.
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// A source of jitter: for the retry planner (`retry::RetryPolicy::plan`),
/// or any caller that spreads clients out.
///
/// The planner asks for [`draw_up_to`](JitterSource::draw_up_to): a whole
/// number of nanoseconds in `0..=max`, uniformly. A source implements
/// [`next_fraction`](JitterSource::next_fraction), a fraction of the window
/// meant to be uniform in `[0, 1)`, and gets `draw_up_to` from it:
/// `floor(fraction · (max + 1))`, with the fraction forced into `[0, 1]`
/// (NaN counts as 0) and the result into `0..=max`. So a faulty source can
/// shift a retry within its window but never before the server's boundary
/// or past the deadline, and `1.0` means the end of the window.
///
/// Any `FnMut() -> f64` is a source, which is the easy way to inject fixed
/// values in tests. [`JitterGenerator`] overrides `draw_up_to` with an
/// exact integer draw.
///
/// ```
/// use tollgate::jitter::JitterSource;
///
/// let mut fixed = || 0.25;
/// assert_eq!(fixed.next_fraction(), 0.25);
/// assert_eq!(fixed.draw_up_to(3), 1); // floor(0.25 · 4)
/// assert_eq!((|| 1.0).draw_up_to(3), 3);
/// assert_eq!((|| f64::NAN).draw_up_to(3), 0);
/// ```
pub trait JitterSource {
    /// The next fraction, nominally in `[0, 1)`.
    fn next_fraction(&mut self) -> f64;

    /// A draw from `0..=max`, uniform if the fractions are (to their 53
    /// bits of resolution). The planner clamps an override's answer to
    /// `max`.
    fn draw_up_to(&mut self, max: u128) -> u128 {
        scale_fraction(self.next_fraction(), max)
    }
}

impl<F: FnMut() -> f64> JitterSource for F {
    fn next_fraction(&mut self) -> f64 {
        self()
    }
}

/// `floor(fraction · (max + 1))`, with the fraction forced into `[0, 1]`
/// (NaN as 0) and the result into `0..=max`: a fraction in
/// `[k / (max + 1), (k + 1) / (max + 1))` gives `k`, and `1.0` gives `max`.
pub(crate) fn scale_fraction(fraction: f64, max: u128) -> u128 {
    let fraction = if fraction.is_nan() {
        0.0
    } else {
        fraction.clamp(0.0, 1.0)
    };
    // `as` saturates float-to-int conversions; the `min` takes `1.0`, and
    // any rounding up at the top, back to `max`.
    ((fraction * (max as f64 + 1.0)) as u128).min(max)
}

/// The crate's jitter generator: splitmix64 over an atomic counter.
///
/// [`draw`](JitterGenerator::draw) is exactly uniform over `0..=max` for
/// every `max` up to `u128::MAX` (rejection sampling: fewer than two tries
/// on average, never a modulo bias), and takes `&self`, so one generator can
/// be shared between threads. Not cryptographic, and it does not need to be:
/// see the module notes. [`JitterGenerator::from_entropy`] (also
/// [`Default`]) seeds it from the process's random hash keys and the clock;
/// [`JitterGenerator::new`] takes a fixed seed for reproducible runs.
///
/// A clone continues from the same state, so it repeats the original's
/// sequence.
///
/// ```
/// use tollgate::jitter::{JitterGenerator, JitterSource};
///
/// let a = JitterGenerator::new(7);
/// let b = JitterGenerator::new(7);
/// let x = a.draw(3);
/// assert!(x <= 3);
/// assert_eq!(x, b.draw(3)); // same seed, same sequence
///
/// let mut source = JitterGenerator::new(7);
/// assert!((0.0..1.0).contains(&source.next_fraction()));
/// ```
pub struct JitterGenerator {
    state: AtomicU64,
}

impl JitterGenerator {
    /// A generator with a fixed seed; every seed (zero included) is usable.
    ///
    /// ```
    /// use tollgate::jitter::JitterGenerator;
    ///
    /// assert_ne!(JitterGenerator::new(0).next_u64(), JitterGenerator::new(1).next_u64());
    /// ```
    pub fn new(seed: u64) -> JitterGenerator {
        JitterGenerator {
            state: AtomicU64::new(seed),
        }
    }

    /// A generator seeded from the process's random hash keys and the
    /// clock.
    ///
    /// ```
    /// use tollgate::jitter::JitterGenerator;
    ///
    /// assert!(JitterGenerator::from_entropy().draw(10) <= 10);
    /// ```
    pub fn from_entropy() -> JitterGenerator {
        let mut hasher = RandomState::new().build_hasher();
        // A clock before 1970 only loses the clock's contribution.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        hasher.write_u128(nanos);
        JitterGenerator::new(hasher.finish())
    }

    /// The next 64 uniformly distributed bits. One `fetch_add` per call,
    /// so concurrent callers never wait for each other.
    ///
    /// ```
    /// use tollgate::jitter::JitterGenerator;
    ///
    /// let generator = JitterGenerator::new(1);
    /// assert_ne!(generator.next_u64(), generator.next_u64());
    /// ```
    pub fn next_u64(&self) -> u64 {
        let counter = self
            .state
            .fetch_add(GOLDEN_GAMMA, Ordering::Relaxed)
            .wrapping_add(GOLDEN_GAMMA);
        let mut z = counter;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A draw from `0..=max`, every value equally likely.
    ///
    /// Draws the bits `max` spans (one word up to `u64::MAX`, two above)
    /// and retries the ones above `max`: each try succeeds with probability
    /// above one half, so the expected cost is under two tries, and there is
    /// no bias at all.
    ///
    /// ```
    /// use tollgate::jitter::JitterGenerator;
    ///
    /// let generator = JitterGenerator::new(42);
    /// assert_eq!(generator.draw(0), 0);
    /// assert!((0..200).any(|_| generator.draw(1) == 1)); // the bound is reachable
    /// assert!((0..10).any(|_| generator.draw(u128::MAX) > u128::from(u64::MAX)));
    /// ```
    pub fn draw(&self, max: u128) -> u128 {
        // The bits `max` spans; none for `max == 0`, where the shift would
        // be the whole width.
        let mask = u128::MAX.checked_shr(max.leading_zeros()).unwrap_or(0);
        loop {
            let low = u128::from(self.next_u64());
            let bits = if mask > u128::from(u64::MAX) {
                (u128::from(self.next_u64()) << 64) | low
            } else {
                low
            };
            let candidate = bits & mask;
            if candidate <= max {
                return candidate;
            }
        }
    }
}

impl JitterSource for JitterGenerator {
    /// The top 53 bits of the next word, exactly representable as an `f64`
    /// below 1.
    fn next_fraction(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// [`JitterGenerator::draw`]: exact, rather than through a fraction.
    fn draw_up_to(&mut self, max: u128) -> u128 {
        self.draw(max)
    }
}

impl Default for JitterGenerator {
    fn default() -> JitterGenerator {
        JitterGenerator::from_entropy()
    }
}

impl Clone for JitterGenerator {
    fn clone(&self) -> JitterGenerator {
        JitterGenerator::new(self.state.load(Ordering::Relaxed))
    }
}

impl fmt::Debug for JitterGenerator {
    /// The state is left out: it is the whole future sequence.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JitterGenerator").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pearson's statistic of `counts` against the uniform expectation.
    fn chi_squared(counts: &[u64]) -> f64 {
        let total: u64 = counts.iter().sum();
        let expected = total as f64 / counts.len() as f64;
        counts
            .iter()
            .map(|&c| (c as f64 - expected).powi(2) / expected)
            .sum()
    }

    fn histogram(max: u128, draws: usize, mut draw: impl FnMut(u128) -> u128) -> Vec<u64> {
        let mut counts = vec![0u64; usize::try_from(max).unwrap() + 1];
        for _ in 0..draws {
            counts[usize::try_from(draw(max)).unwrap()] += 1;
        }
        counts
    }

    #[test]
    fn every_value_including_the_bound_is_reached_uniformly() {
        // Critical values of the chi-squared distribution at p = 1e-6 for
        // 1, 3, 9 and 32 degrees of freedom: a fair generator exceeds them
        // once in a million seeds, and the seeds are fixed.
        for (max, critical) in [(1u128, 23.9), (3, 30.6), (9, 44.8), (32, 85.2)] {
            for seed in [0, 1, 2026, u64::MAX] {
                let generator = JitterGenerator::new(seed);
                let counts = histogram(max, 20_000, |max| generator.draw(max));
                assert!(
                    counts.iter().all(|&c| c > 0),
                    "seed {seed}, max {max}: {counts:?}"
                );
                let statistic = chi_squared(&counts);
                assert!(statistic < critical, "seed {seed}, max {max}: {statistic}");
            }
        }
    }

    #[test]
    fn wide_ranges_use_both_halves_and_stay_in_range() {
        let generator = JitterGenerator::new(9);
        let max = (1u128 << 94) + 12_345; // about Duration::MAX in nanoseconds
        let draws: Vec<u128> = (0..10_000).map(|_| generator.draw(max)).collect();
        assert!(draws.iter().all(|&d| d <= max));
        // Uniform over [0, max]: about half the draws fall in the top half.
        let upper = draws.iter().filter(|&&d| d > max / 2).count();
        assert!((4_700..5_300).contains(&upper), "{upper}");
        // The widest range uses both words.
        assert!((0..10).any(|_| generator.draw(u128::MAX) > u128::from(u64::MAX)));
        assert_eq!(generator.draw(0), 0);
    }

    #[test]
    fn fractions_scale_onto_the_whole_inclusive_range() {
        assert_eq!(scale_fraction(0.0, 3), 0);
        assert_eq!(scale_fraction(0.249, 3), 0);
        assert_eq!(scale_fraction(0.25, 3), 1);
        assert_eq!(scale_fraction(0.75, 3), 3);
        assert_eq!(scale_fraction(0.999_999, 3), 3);
        assert_eq!(scale_fraction(1.0, 3), 3);
        assert_eq!(scale_fraction(7.0, 3), 3);
        assert_eq!(scale_fraction(f64::INFINITY, 3), 3);
        assert_eq!(scale_fraction(-1.0, 3), 0);
        assert_eq!(scale_fraction(f64::NAN, 3), 0);
        assert_eq!(scale_fraction(0.5, 0), 0);
        assert_eq!(scale_fraction(1.0, u128::MAX), u128::MAX);
        assert_eq!(scale_fraction(0.5, u128::from(u64::MAX)), 1 << 63);
    }

    #[test]
    fn fractions_stay_in_the_unit_interval_and_entropy_seeds_differ() {
        let mut source = JitterGenerator::new(3);
        assert!((0..10_000).all(|_| (0.0..1.0).contains(&source.next_fraction())));
        let a = JitterGenerator::from_entropy().next_u64();
        let b = JitterGenerator::from_entropy().next_u64();
        assert_ne!(a, b);
    }

    #[test]
    fn a_clone_repeats_the_sequence_from_where_it_was_taken() {
        let original = JitterGenerator::new(5);
        original.next_u64();
        let copy = original.clone();
        assert_eq!(original.next_u64(), copy.next_u64());
    }
}
