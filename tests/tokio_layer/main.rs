//! The tokio layer: async waiting and pacing, the shared budget's
//! allowances and their reconciliation with a store, extreme quotas, the
//! limiters' common models.

mod allowance;
mod extremes;
mod keyed_allowance;
mod limiter_models;
mod pacing;
mod waiting;
mod window_limit;
