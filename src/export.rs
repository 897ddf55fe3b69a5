//! Publishing snapshots through the `metrics` facade (feature `metrics`).
//!
//! Every statistic in this crate is a running total or a level kept by the
//! limiter itself; exporting copies it out whole, so an exporter that runs
//! twice, or late, never double-counts.

/// Sets counter `{prefix}_{name}` to each absolute `value`.
pub(crate) fn counters(prefix: &str, values: &[(&str, u64)]) {
    for &(name, value) in values {
        metrics::counter!(format!("{prefix}_{name}")).absolute(value);
    }
}

/// Sets gauge `{prefix}_{name}` to each `value`. Only levels have gauges:
/// a key table's size, an allowance's pool (both need feature `keyed`).
#[cfg(feature = "keyed")]
pub(crate) fn gauges(prefix: &str, values: &[(&str, u64)]) {
    for &(name, value) in values {
        // A gauge is an f64: exact for every count below 2^53.
        metrics::gauge!(format!("{prefix}_{name}")).set(value as f64);
    }
}
