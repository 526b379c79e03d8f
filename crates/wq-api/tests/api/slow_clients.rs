//! The connection level of `serve_with`: a client that never finishes its
//! headers is cut off, the connection cap holds, and shutdown is bounded
//! by the grace even with such a client connected.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use wq_api::ServeConfig;

/// A router answering `GET /ping` with 200.
fn router() -> axum::Router {
    axum::Router::new().route("/ping", axum::routing::get(|| async { "pong" }))
}

/// Serves on 127.0.0.1:0; answers the address, the shutdown trigger and the
/// server task.
async fn start(
    config: ServeConfig,
) -> (
    std::net::SocketAddr,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        wq_api::serve_with(listener, router(), &config, async move {
            let _ = stopped.await;
        })
        .await
    });
    (address, stop, server)
}

/// Reads until the peer closes; answers what was read.
async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut read = Vec::new();
    let _ = stream.read_to_end(&mut read).await;
    read
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    let (address, stop, server) = start(ServeConfig {
        header_read_timeout: Duration::from_secs(1),
        ..ServeConfig::default()
    })
    .await;
    let mut slow = TcpStream::connect(address).await.unwrap();
    slow.write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // The server closes it (a 408 may precede the close); without the
    // timeout this read would never end.
    let read = tokio::time::timeout(Duration::from_secs(30), read_to_close(&mut slow))
        .await
        .expect("the server closed the connection");
    assert!(!read.starts_with(b"HTTP/1.1 200"), "{read:?}");
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn shutdown_ends_within_the_grace_despite_a_stuck_client() {
    let (address, stop, server) = start(ServeConfig {
        header_read_timeout: Duration::from_secs(3600),
        shutdown_grace: Duration::from_secs(1),
        ..ServeConfig::default()
    })
    .await;
    let mut stuck = TcpStream::connect(address).await.unwrap();
    stuck.write_all(b"GET /ping HTTP/1.1\r\n").await.unwrap();
    // Let the server accept it before shutting down.
    let mut ok = TcpStream::connect(address).await.unwrap();
    ok.write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    assert!(read_to_close(&mut ok).await.starts_with(b"HTTP/1.1 200"));

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("the server stopped after the grace")
        .unwrap()
        .unwrap();
    // The stuck connection was dropped.
    let read = tokio::time::timeout(Duration::from_secs(5), read_to_close(&mut stuck))
        .await
        .expect("the stuck connection is closed");
    assert!(read.is_empty() || !read.starts_with(b"HTTP/1.1 200"));
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_for_a_free_slot() {
    let (address, stop, server) = start(ServeConfig {
        header_read_timeout: Duration::from_secs(3600),
        max_connections: 1,
        ..ServeConfig::default()
    })
    .await;
    // The one slot: a client that has sent nothing yet.
    let mut holder = TcpStream::connect(address).await.unwrap();
    holder.write_all(b"GET /ping HTTP/1.1\r\n").await.unwrap();
    // A second client must not be answered while the slot is taken.
    let mut waiting = TcpStream::connect(address).await.unwrap();
    waiting
        .write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(500), waiting.read(&mut first)).await;
    assert!(early.is_err(), "answered beyond the cap: {early:?}");

    // The holder finishes and leaves: the waiting client is served.
    holder
        .write_all(b"Host: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    assert!(
        read_to_close(&mut holder)
            .await
            .starts_with(b"HTTP/1.1 200")
    );
    let rest = tokio::time::timeout(Duration::from_secs(30), read_to_close(&mut waiting))
        .await
        .expect("served once the slot is free");
    assert!(rest.starts_with(b"HTTP/1.1 200"), "{rest:?}");
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
