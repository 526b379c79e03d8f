//! A forge that redirects every request, to show no client follows a
//! redirect (and takes its token along).

use std::sync::{Arc, Mutex};

use axum::http::StatusCode;

/// Requests a server received: (method, path, lower-case headers).
pub type Received = Arc<Mutex<Vec<(String, String, Vec<(String, String)>)>>>;

/// A forge that redirects every request (307) to a second server on
/// another port, which records whatever reaches it. Answers the
/// redirecting server's URL, the second server's URL (the `Location`
/// prefix) and what the second server received.
pub async fn start_redirecting_forge() -> (String, String, Received) {
    let received: Received = Arc::default();
    let sink = received.clone();
    let target = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let sink = sink.clone();
        async move {
            let headers = request
                .headers()
                .iter()
                .map(|(name, value)| {
                    (
                        name.as_str().to_owned(),
                        value.to_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect();
            sink.lock().expect("target lock").push((
                request.method().to_string(),
                request.uri().path().to_owned(),
                headers,
            ));
            (StatusCode::OK, "{}")
        }
    });
    let target_url = serve(target).await;
    let location = target_url.clone();
    let redirecting = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let location = format!("{location}{}", request.uri().path());
        async move {
            (
                StatusCode::TEMPORARY_REDIRECT,
                [(axum::http::header::LOCATION, location)],
            )
        }
    });
    (serve(redirecting).await, target_url, received)
}

async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("server binds");
    let addr = listener.local_addr().expect("server address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}
