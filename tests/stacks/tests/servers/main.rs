//! Each server stack end to end over real connections: axum and hyper with
//! the peer address, settlement after the response, actix-web, and gRPC
//! through tonic's and grpcio's clients; and the example servers of
//! `examples/stacks/` on theirs.

mod actix;
mod example_servers;
mod grpc;
mod peer_identity;
mod tower_e2e;
mod tower_settle;
