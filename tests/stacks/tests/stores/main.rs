//! The Redis store on a private redis-server: scripts, quota changes,
//! allowances, Redis Cluster and TLS.

mod redis_allowance;
mod redis_cluster;
mod redis_quota_change;
mod redis_store;
mod redis_tls;
