//! Who the client is and how a client waits: addresses behind trusted
//! proxies, and Retry-After parsing and retry planning.

mod client_identity_behind_proxies;
mod retry_after_parsing;
