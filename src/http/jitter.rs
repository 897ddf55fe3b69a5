//! Jitter on the advertised effective window `t`.
//!
//! Every client refused at the same moment would otherwise be told the same
//! `t` and come back in the same second. A few whole seconds of spread, added
//! (never subtracted, so nobody is told to come back early) and bounded,
//! breaks that up.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A bounded, non-negative addition to advertised `t` values, in whole
/// seconds.
///
/// Each draw adds `floor(f * max)` seconds for a fraction `f` from the
/// source, clamped into `[0, 1]` (NaN counts as 0), so the addition is
/// always within `0..=max`. The default source is a lock-free counter mixed
/// by splitmix64, seeded from the process's random hash keys; tests inject
/// their own with [`Jitter::with_source`].
///
/// ```
/// use tollgate::http::Jitter;
///
/// assert_eq!(Jitter::none().apply(30), 30);
/// let fixed = Jitter::with_source(4, || 0.5);
/// assert_eq!(fixed.apply(30), 32);
/// let spread = Jitter::up_to(3);
/// assert!((30..=33).contains(&spread.apply(30)));
/// ```
#[derive(Clone)]
pub struct Jitter {
    max: u64,
    source: Option<Arc<dyn Fn() -> f64 + Send + Sync>>,
}

impl Jitter {
    /// No jitter: `t` is advertised exactly.
    ///
    /// ```
    /// use tollgate::http::Jitter;
    ///
    /// assert_eq!(Jitter::none().max_seconds(), 0);
    /// ```
    pub fn none() -> Jitter {
        Jitter {
            max: 0,
            source: None,
        }
    }

    /// Up to `max_seconds` extra, drawn from the built-in source.
    ///
    /// ```
    /// use tollgate::http::Jitter;
    ///
    /// let jitter = Jitter::up_to(5);
    /// assert!((0..100).all(|_| jitter.apply(0) <= 5));
    /// ```
    pub fn up_to(max_seconds: u64) -> Jitter {
        let state = Arc::new(AtomicU64::new(RandomState::new().hash_one(0x6a09_e667_u64)));
        Jitter {
            max: max_seconds,
            source: Some(Arc::new(move || splitmix_fraction(&state))),
        }
    }

    /// Up to `max_seconds` extra, scaled by fractions from `source`.
    ///
    /// ```
    /// use tollgate::http::Jitter;
    ///
    /// // A faulty source cannot push the addition outside 0..=max.
    /// assert_eq!(Jitter::with_source(10, || 7.0).apply(1), 11);
    /// assert_eq!(Jitter::with_source(10, || -1.0).apply(1), 1);
    /// assert_eq!(Jitter::with_source(10, || f64::NAN).apply(1), 1);
    /// ```
    pub fn with_source(
        max_seconds: u64,
        source: impl Fn() -> f64 + Send + Sync + 'static,
    ) -> Jitter {
        Jitter {
            max: max_seconds,
            source: Some(Arc::new(source)),
        }
    }

    /// The largest addition.
    ///
    /// ```
    /// use tollgate::http::Jitter;
    ///
    /// assert_eq!(Jitter::up_to(7).max_seconds(), 7);
    /// ```
    pub fn max_seconds(&self) -> u64 {
        self.max
    }

    /// `seconds` plus one draw of jitter (saturating).
    ///
    /// ```
    /// use tollgate::http::Jitter;
    ///
    /// assert_eq!(Jitter::with_source(2, || 0.99).apply(u64::MAX), u64::MAX);
    /// ```
    pub fn apply(&self, seconds: u64) -> u64 {
        seconds.saturating_add(self.draw())
    }

    fn draw(&self) -> u64 {
        let Some(source) = &self.source else {
            return 0;
        };
        if self.max == 0 {
            return 0;
        }
        let fraction = source();
        let fraction = if fraction.is_nan() {
            0.0
        } else {
            fraction.clamp(0.0, 1.0)
        };
        // `as` saturates float-to-int conversions; the min keeps a rounding
        // error at the top from exceeding the bound.
        ((fraction * self.max as f64) as u64).min(self.max)
    }
}

impl Default for Jitter {
    fn default() -> Jitter {
        Jitter::none()
    }
}

impl fmt::Debug for Jitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jitter")
            .field("max_seconds", &self.max)
            .finish_non_exhaustive()
    }
}

/// One splitmix64 output from a shared counter, as a fraction in `[0, 1)`.
/// A `fetch_add` per draw keeps it lock-free under concurrent refusals.
fn splitmix_fraction(state: &AtomicU64) -> f64 {
    let mut z = state
        .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}
