//! Where the planner's jitter comes from.
//!
//! Jitter only has to make clients that were told the same thing at the
//! same moment disagree about when to come back; it is not a secret and
//! needs no statistical quality beyond "spread out". A 64-bit xorshift does
//! that in a few instructions, so the crate takes no `rand` dependency for
//! it. The seed mixes in the standard library's per-process random hash
//! keys as well as the clock, so a fleet started in the same instant (from
//! one image, say) still draws different sequences.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of jitter fractions for
/// [`RetryPolicy::plan`](super::RetryPolicy::plan).
///
/// Each call returns a fraction of the jitter window, meant to be uniform in
/// `[0, 1)`. The planner clamps whatever it gets into `[0, 1]` (NaN counts
/// as 0), so a faulty source can shift a retry within its window but never
/// before the server's boundary or past the deadline.
///
/// Any `FnMut() -> f64` is a source, which is the easy way to inject fixed
/// values in tests:
///
/// ```
/// use tollgate::retry::JitterSource;
///
/// let mut fixed = || 0.25;
/// assert_eq!(fixed.next_fraction(), 0.25);
/// ```
pub trait JitterSource {
    /// The next fraction, nominally in `[0, 1)`.
    fn next_fraction(&mut self) -> f64;
}

impl<F: FnMut() -> f64> JitterSource for F {
    fn next_fraction(&mut self) -> f64 {
        self()
    }
}

/// A small, fast pseudo-random jitter source (xorshift64*).
///
/// Not cryptographic, and it does not need to be: see the module notes.
/// [`XorShiftJitter::from_entropy`] (also [`Default`]) seeds it from the
/// process's random hash keys and the clock; [`XorShiftJitter::new`] takes
/// a fixed seed for reproducible runs.
///
/// ```
/// use tollgate::retry::{JitterSource, XorShiftJitter};
///
/// let mut a = XorShiftJitter::new(7);
/// let mut b = XorShiftJitter::new(7);
/// let x = a.next_fraction();
/// assert!((0.0..1.0).contains(&x));
/// assert_eq!(x, b.next_fraction()); // same seed, same sequence
/// ```
#[derive(Clone, Debug)]
pub struct XorShiftJitter {
    /// Never zero: zero is xorshift's one fixed point.
    state: u64,
}

impl XorShiftJitter {
    /// A source with a fixed seed; every seed (zero included) is usable.
    pub fn new(seed: u64) -> XorShiftJitter {
        // One splitmix64 step spreads nearby seeds (0, 1, 2, ...) far apart
        // before the first draw.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        XorShiftJitter {
            state: if z == 0 { 0x2545_F491_4F6C_DD1D } else { z },
        }
    }

    /// A source seeded from the process's random hash keys and the clock.
    pub fn from_entropy() -> XorShiftJitter {
        let mut hasher = RandomState::new().build_hasher();
        // A clock before 1970 only loses the clock's contribution.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        hasher.write_u128(nanos);
        XorShiftJitter::new(hasher.finish())
    }
}

impl Default for XorShiftJitter {
    fn default() -> XorShiftJitter {
        XorShiftJitter::from_entropy()
    }
}

impl JitterSource for XorShiftJitter {
    fn next_fraction(&mut self) -> f64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        // The top 53 bits of the scrambled output, exactly representable as
        // an f64 below 1.
        let bits = x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        bits as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_stay_in_the_unit_interval_and_spread() {
        for seed in [0, 1, u64::MAX] {
            let mut source = XorShiftJitter::new(seed);
            let draws: Vec<f64> = (0..10_000).map(|_| source.next_fraction()).collect();
            assert!(draws.iter().all(|x| (0.0..1.0).contains(x)));
            // Coarse uniformity: every tenth of the interval is hit often.
            for decile in 0..10 {
                let hits = draws
                    .iter()
                    .filter(|x| (**x * 10.0) as usize == decile)
                    .count();
                assert!(
                    (800..1200).contains(&hits),
                    "seed {seed} decile {decile}: {hits}"
                );
            }
        }
    }

    #[test]
    fn entropy_seeds_differ() {
        let a = XorShiftJitter::from_entropy().next_fraction();
        let b = XorShiftJitter::from_entropy().next_fraction();
        assert_ne!(a, b);
    }
}
