//! Keyed limiters: exactness per key, bounded memory, sweeps, quota changes
//! by generation, the hot-key caches, keyed windows, panicking key code,
//! keys by client address, and every keyed limiter through the one
//! `KeyTable` trait.

#[cfg(feature = "identity")]
mod identity_budgets;
mod key_table;
mod keyed;
mod keyed_churn;
mod keyed_hot;
mod keyed_panics;
mod keyed_quota_change;
mod keyed_window;
mod window_stress;
