//! Attacks on the shared layer.
