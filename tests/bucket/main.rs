//! The bare bucket and everything built on it without a layer: exactness
//! against the rational model, waits, quota changes, chains, windows, the
//! pacer, the striped bucket, races, bad input.

mod bad_input;
mod blocking;
mod clock_skew;
mod concurrency;
mod counted;
mod hierarchy;
mod pacer;
mod quota_change;
mod reference_model;
mod seed_traces;
mod settlement;
mod stress;
mod striped;
mod waits_before_origin;
mod window;
mod window_model;
