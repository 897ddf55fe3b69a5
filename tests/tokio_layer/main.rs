//! The tokio layer: async waiting and pacing, the shared budget's
//! allowances and their reconciliation with a store, extreme quotas, the
//! limiters' common models.

mod allowances_within_the_shared_bound;
mod async_waits_first_come;
mod every_limiter_within_its_envelope;
mod extremes_get_typed_answers;
mod keyed_allowances_within_the_bound;
mod pacing_keeps_store_calls_flat;
mod windows_as_limits;
