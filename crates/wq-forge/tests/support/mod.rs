//! What both clients' test binaries share: a receiver for the simulator's
//! webhook deliveries.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};

/// Webhooks the simulator delivered: (lower-case headers, raw body).
pub type Deliveries = Arc<Mutex<Vec<(Vec<(String, String)>, Vec<u8>)>>>;

/// A receiver keeping each delivery's headers and exact bytes; answers
/// its URL and what it received.
pub async fn start_receiver() -> (String, Deliveries) {
    let deliveries: Deliveries = Arc::default();
    let sink = deliveries.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let sink = sink.clone();
            async move {
                let headers = headers
                    .iter()
                    .map(|(name, value)| {
                        (
                            name.as_str().to_owned(),
                            value.to_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect();
                sink.lock()
                    .expect("receiver lock")
                    .push((headers, body.to_vec()));
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("receiver binds");
    let addr = listener.local_addr().expect("receiver address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/hook"), deliveries)
}

/// A delivery's headers as the forge clients' `parse_webhook` takes them.
pub fn header_refs(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect()
}
