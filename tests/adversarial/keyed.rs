//! Attacks on the keyed layer.
