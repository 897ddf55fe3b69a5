//! A gRPC service behind the tollgate layer: tonic's generated health
//! service (no protoc, no build step), each caller limited by its address
//! (`per_client.rs`: bursts of 5, refilled at 1 a second). A refused call is
//! RESOURCE_EXHAUSTED with the exact wait in `google.rpc.RetryInfo`, the
//! policy in `QuotaFailure`, and Retry-After and the RateLimit fields as
//! metadata.
//!
//!     cargo run -p tollgate-examples --example tonic_server [-- PORT]
//!
//! With grpcio's health client (`pip install grpcio-health-checking`),
//! the sixth call of a quick run is refused:
//!
//!     python3 -c 'import grpc; from grpc_health.v1.health_pb2 import HealthCheckRequest as R
//!     from grpc_health.v1.health_pb2_grpc import HealthStub
//!     check = HealthStub(grpc.insecure_channel("127.0.0.1:50051")).Check
//!     for _ in range(6):
//!         try: print(check(R()).status)
//!         except grpc.RpcError as e: print(e.code(), dict(e.trailing_metadata())["retry-after"])'
//!
//! prints `1` (SERVING) five times, then `StatusCode.RESOURCE_EXHAUSTED 1`.

use std::net::{IpAddr, SocketAddr};

use tokio::net::TcpListener;
use tollgate::Quota;
use tollgate::http::tower::RateLimitLayer;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

#[path = "per_client.rs"]
mod per_client;

/// Serves the health service on `listener`, `quota` per caller address.
/// The layer reads the caller from the `TcpConnectInfo` tonic's server
/// gives every call (tollgate's feature `tonic`), and answers gRPC calls
/// in gRPC.
pub async fn serve(listener: TcpListener, quota: Quota) -> Result<(), tonic::transport::Error> {
    // The health service reports the server ("") as SERVING from the start;
    // nothing here changes it, so the reporter is not kept.
    let (_, health) = tonic_health::server::health_reporter();
    Server::builder()
        .layer(RateLimitLayer::from(per_client::rules(quota)))
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener))
        .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = match std::env::args().nth(1) {
        Some(arg) => arg.parse()?,
        None => 50051,
    };
    let listener = TcpListener::bind(SocketAddr::new(IpAddr::from([127, 0, 0, 1]), port)).await?;
    println!("gRPC health service on {}", listener.local_addr()?);
    serve(listener, per_client::demo_quota()).await?;
    Ok(())
}
