//! Loom models of tollgate's lock-free state machines.
//!
//! Run them with the project cfg that swaps tollgate's atomics for loom's:
//!
//! ```text
//! RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test -p loom-tests --release
//! ```
//!
//! Without the cfg this crate is empty, so a plain `cargo test --workspace`
//! neither builds loom nor runs the (slow) models.

#![cfg(tollgate_loom)]

/// Explores every interleaving of `f` up to the preemption bound.
///
/// The bound defaults to 3 (enough for every race in these models: each needs
/// at most two forced switches) and `LOOM_MAX_PREEMPTIONS` overrides it, as
/// loom's own builder reads it.
pub fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}
