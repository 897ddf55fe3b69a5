//! The HTTP side without a server stack: responses and RateLimit fields,
//! and the tower layer's rules, shadow rules, shared rules, windows,
//! settlement and byte-rate bodies.

mod give_backs_and_missing_keys;
mod policy_follows_the_limiter;
mod refusal_responses;
mod shadow_never_touches_enforced;
mod shared_rules_are_exact;
mod shared_settlement_never_mints;
mod throttled_bodies_keep_the_rate;
mod window_rules;
