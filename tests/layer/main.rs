//! The HTTP side without a server stack: responses and RateLimit fields,
//! and the tower layer's rules, shadow rules, shared rules, windows,
//! settlement and byte-rate bodies.

mod http;
mod shared_settlement;
mod throttled_body;
mod tower_layer;
mod tower_policy;
mod tower_shadow;
mod tower_shared;
mod tower_window;
