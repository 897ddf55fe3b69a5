//! Attacks on the identity layer.
