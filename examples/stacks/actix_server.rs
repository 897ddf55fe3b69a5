//! An actix-web server with the rule of the tonic and hyper examples
//! (`per_client.rs`: bursts of 5 per client address, refilled at 1 a
//! second), through actix middleware (`tollgate::http::actix::RateLimit`,
//! feature `actix`). Over the limit it answers 429 with Retry-After, the RateLimit
//! fields and a problem+json body naming policy "per-client".
//!
//!     cargo run -p tollgate-examples --example actix_server [-- PORT]
//!     for i in $(seq 6); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:3002/; done
//!     curl -si http://127.0.0.1:3002/
//!
//! Run at once, the loop prints 200 five times, then 429; the last curl
//! shows a 429's Retry-After, RateLimit fields and problem+json body.

use std::net::{IpAddr, SocketAddr, TcpListener};

use actix_web::dev::Server;
use actix_web::{App, HttpServer, web};
use tollgate::Quota;
use tollgate::http::actix::RateLimit;

#[path = "per_client.rs"]
mod per_client;

/// The server on `listener`, `quota` per client address; it runs when
/// awaited (or spawned) on actix's runtime.
pub fn server(listener: TcpListener, quota: Quota) -> std::io::Result<Server> {
    // Built once, outside the factory that actix calls for each worker
    // thread: one middleware is one budget per client, whichever worker
    // serves it.
    let limit = RateLimit::from(per_client::rules(quota));
    let server = HttpServer::new(move || {
        App::new()
            .wrap(limit.clone())
            .route("/", web::get().to(|| async { "hello\n" }))
    })
    .listen(listener)?
    .run();
    Ok(server)
}

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = match std::env::args().nth(1) {
        Some(arg) => arg.parse()?,
        None => 3002,
    };
    let listener = TcpListener::bind(SocketAddr::new(IpAddr::from([127, 0, 0, 1]), port))?;
    println!("listening on http://{}", listener.local_addr()?);
    server(listener, per_client::demo_quota())?.await?;
    Ok(())
}
