//! The bare bucket and everything built on it without a layer: exactness
//! against the rational model, waits, quota changes, chains, windows, the
//! pacer, the striped bucket, races, bad input.

mod all_or_nothing;
mod blocking_waits;
mod clock_jitter_never_mints;
mod counts_are_exact;
mod exact_against_model;
mod exact_on_seed_traces;
mod exact_under_contention;
mod in_flight_bound;
mod pacer_spacing;
mod quota_change_continuity;
mod settlement_never_mints;
mod striped_envelope;
mod typed_errors;
mod waits_from_the_reading;
mod window_boundaries;
mod windows_against_model;
