//! The Redis store (to be written).
