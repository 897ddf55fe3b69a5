//! Jitter on the advertised effective window `t`.
//!
//! Every client refused at the same moment would otherwise be told the same
//! `t` and come back in the same second. A few whole seconds of spread, added
//! (never subtracted, so nobody is told to come back early) and bounded,
//! breaks that up. The draws come from the crate's one jitter generator,
//! `jitter::JitterGenerator`, shared with the client-side retry planner.

use std::fmt;

use crate::jitter::JitterGenerator;
use crate::jitter::scale_fraction;
use crate::sync::unmodelled::Arc;

/// A bounded, non-negative addition to advertised `t` values, in whole
/// seconds.
///
/// Each draw adds a whole number of seconds uniform over `0..=max`, both
/// ends included: `Jitter::up_to(1)` adds 0 or 1 with equal odds. The
/// built-in source is a [`JitterGenerator`] (exact, lock-free, seeded from
/// the process's random hash keys); [`Jitter::with_generator`] takes a
/// seeded one for reproducible runs, and [`Jitter::with_source`] injects
/// fractions for tests.
///
/// ```
/// use tollgate::http::Jitter;
/// use tollgate::jitter::JitterGenerator;
///
/// assert_eq!(Jitter::none().apply(30), 30);
/// let fixed = Jitter::with_source(4, || 0.5);
/// assert_eq!(fixed.apply(30), 32);
/// let spread = Jitter::with_generator(3, JitterGenerator::new(1));
/// let seen: std::collections::BTreeSet<u64> = (0..200).map(|_| spread.apply(30)).collect();
/// assert_eq!(seen.into_iter().collect::<Vec<_>>(), [30, 31, 32, 33]);
/// ```
#[derive(Clone)]
pub struct Jitter {
    max: u64,
    draws: Draws,
}

/// Where a [`Jitter`]'s additions come from.
#[derive(Clone)]
enum Draws {
    Nothing,
    Generator(Arc<JitterGenerator>),
    Fractions(Arc<dyn Fn() -> f64 + Send + Sync>),
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
            draws: Draws::Nothing,
        }
    }

    /// Up to `max_seconds` extra, uniform over `0..=max_seconds`, from a
    /// generator seeded from the process's random hash keys and the clock.
    ///
    /// ```
    /// use tollgate::http::Jitter;
    ///
    /// let jitter = Jitter::up_to(5);
    /// assert!((0..100).all(|_| jitter.apply(0) <= 5));
    /// ```
    pub fn up_to(max_seconds: u64) -> Jitter {
        Jitter::with_generator(max_seconds, JitterGenerator::from_entropy())
    }

    /// Up to `max_seconds` extra, uniform over `0..=max_seconds`, from
    /// `generator` (a fixed seed gives a reproducible sequence). Clones of
    /// the jitter share the generator.
    ///
    /// ```
    /// use tollgate::http::Jitter;
    /// use tollgate::jitter::JitterGenerator;
    ///
    /// let a = Jitter::with_generator(9, JitterGenerator::new(7));
    /// let b = Jitter::with_generator(9, JitterGenerator::new(7));
    /// assert_eq!(a.apply(0), b.apply(0));
    /// ```
    pub fn with_generator(max_seconds: u64, generator: JitterGenerator) -> Jitter {
        Jitter {
            max: max_seconds,
            draws: Draws::Generator(Arc::new(generator)),
        }
    }

    /// Up to `max_seconds` extra, from fractions supplied by `source`: a
    /// fraction `f` adds `floor(f · (max + 1))` seconds, with `f` forced
    /// into `[0, 1]` (NaN counts as 0) and the result into `0..=max`, so
    /// `1.0` adds `max` and a faulty source cannot leave the bounds.
    ///
    /// ```
    /// use tollgate::http::Jitter;
    ///
    /// assert_eq!(Jitter::with_source(10, || 7.0).apply(1), 11);
    /// assert_eq!(Jitter::with_source(10, || -1.0).apply(1), 1);
    /// assert_eq!(Jitter::with_source(10, || f64::NAN).apply(1), 1);
    /// assert_eq!(Jitter::with_source(1, || 0.5).apply(1), 2);
    /// ```
    pub fn with_source(
        max_seconds: u64,
        source: impl Fn() -> f64 + Send + Sync + 'static,
    ) -> Jitter {
        Jitter {
            max: max_seconds,
            draws: Draws::Fractions(Arc::new(source)),
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
    /// assert!(Jitter::up_to(u64::MAX).apply(1) >= 1);
    /// ```
    pub fn apply(&self, seconds: u64) -> u64 {
        seconds.saturating_add(self.draw())
    }

    fn draw(&self) -> u64 {
        let max = u128::from(self.max);
        let drawn = match &self.draws {
            Draws::Nothing => 0,
            Draws::Generator(generator) => generator.draw(max),
            Draws::Fractions(source) => scale_fraction(source(), max),
        };
        // Both draws stay within `0..=max`, which fits a u64.
        u64::try_from(drawn).unwrap_or(self.max)
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
