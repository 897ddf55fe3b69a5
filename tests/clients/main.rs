//! Who the client is and how a client waits: addresses behind trusted
//! proxies, and Retry-After parsing and retry planning.

mod identity;
mod retry;
