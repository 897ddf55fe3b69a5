//! Attacks on the http layer.
