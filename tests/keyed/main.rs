//! Keyed limiters: exactness per key, bounded memory, sweeps, quota changes
//! by generation, the hot-key caches, keyed windows, panicking key code,
//! and keys by client address.

#[cfg(feature = "identity")]
mod identity_budgets;
mod keyed;
mod keyed_churn;
mod keyed_hot;
mod keyed_panics;
mod keyed_quota_change;
mod keyed_window;
mod window_stress;
