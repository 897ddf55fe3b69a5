//! Attacks on the striped layer.
