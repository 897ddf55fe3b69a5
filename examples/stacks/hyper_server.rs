//! A plain hyper 1.x server (hyper-util's tokio glue, no axum) with the
//! rule of the tonic and actix examples (`per_client.rs`: bursts of 5 per
//! client address, refilled at 1 a second). The accept loop inserts each
//! connection's peer address into its requests *outside* the layer, where
//! `extract::peer_addr` reads it; inserted inside, it would come after the
//! layer's decision, and every request would be the server's 500. Over the
//! limit: 429 with Retry-After, the RateLimit fields and problem+json.
//!
//!     cargo run -p tollgate-examples --example hyper_server [-- PORT]
//!     for i in $(seq 6); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:3001/; done
//!     curl -si http://127.0.0.1:3001/
//!
//! Run at once, the loop prints 200 five times, then 429; the last curl
//! shows a 429's Retry-After, RateLimit fields and problem+json body.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tollgate::Quota;
use tollgate::http::tower::RateLimitLayer;
use tower::ServiceBuilder;

#[path = "per_client.rs"]
mod per_client;

/// Serves `listener` until accepting fails, `quota` per client address.
pub async fn serve(listener: TcpListener, quota: Quota) -> std::io::Result<()> {
    let layer = RateLimitLayer::from(per_client::rules(quota));
    loop {
        let (stream, peer) = listener.accept().await?;
        // The first layer is the outermost: the peer is in the request
        // before the rate limit reads it.
        let service = ServiceBuilder::new()
            .map_request(move |mut request: Request<Incoming>| {
                request.extensions_mut().insert(peer);
                request
            })
            .layer(layer.clone())
            .service_fn(hello);
        let connection = http1::Builder::new()
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        tokio::spawn(async move {
            // One client's broken connection ends that connection only.
            if let Err(error) = connection.await {
                eprintln!("connection from {peer}: {error}");
            }
        });
    }
}

async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"hello\n"))))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = match std::env::args().nth(1) {
        Some(arg) => arg.parse()?,
        None => 3001,
    };
    let listener = TcpListener::bind(SocketAddr::new(IpAddr::from([127, 0, 0, 1]), port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    serve(listener, per_client::demo_quota()).await?;
    Ok(())
}
