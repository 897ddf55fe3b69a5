//! Keyed limiters: exactness per key, bounded memory, sweeps, quota changes
//! by generation, the hot-key caches, keyed windows, panicking key code,
//! keys by client address, and every keyed limiter through the one
//! `KeyTable` trait.

mod bounded_memory_under_churn;
#[cfg(feature = "identity")]
mod budgets_follow_identity;
mod hot_cache_decides_as_table;
mod keyed_quota_change_continuity;
mod keyed_windows_against_model;
mod one_key_table_contract;
mod panics_leave_it_consistent;
mod per_key_exactness;
mod windows_exact_under_contention;
