//! Hostile inputs at the HTTP boundary, over real HTTP: each is answered
//! with the right status and the JSON error envelope, and the server keeps
//! serving. Grows with every finding. Requests a well-behaved client cannot
//! send (raw `..` segments, bad UTF-8, chunked bodies, oversized headers)
//! go over a raw TCP connection.

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wq_api::ApiConfig;
use wq_api::error::MAX_FIELD_ERRORS;
use wq_core::ItemId;
use wq_testkit::http::error_of;
use wq_testkit::types::{BARE_TYPE, PROBE_COMMAND, PROBE_TYPE};
use wq_testkit::{Backend, TestApp, backend_tests, bearer};

use crate::api_app;

/// A response read off a raw connection.
struct RawResponse {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl RawResponse {
    /// The body as the error envelope, checking the content type.
    fn envelope(&self, status: u16) -> wq_api::ErrorEnvelope {
        assert_eq!(self.status, status, "{}", self.head);
        assert!(
            self.head
                .to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{}",
            self.head
        );
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&self.body)))
    }
}

/// Sends `head` (request line and headers, without the blank line) and
/// `body` as they are over a new connection, then reads the answer until the
/// server closes. Write errors are ignored: a server that answers early may
/// close before the whole body is sent.
async fn raw(app: &TestApp, head: &str, body: &[u8]) -> RawResponse {
    let address = app.address;
    let mut stream = TcpStream::connect(address).await.expect("connect");
    let mut request =
        format!("{head}\r\nHost: {address}\r\nConnection: close\r\n\r\n").into_bytes();
    request.extend_from_slice(body);
    let _ = stream.write_all(&request).await;
    let mut read = Vec::new();
    let _ = stream.read_to_end(&mut read).await;
    parse(&read)
}

fn parse(read: &[u8]) -> RawResponse {
    let split = read
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head: {:?}", String::from_utf8_lossy(read)));
    let head = String::from_utf8_lossy(&read[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status: {head}"));
    let mut body = read[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    RawResponse { status, head, body }
}

fn dechunk(mut chunked: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let line_end = chunked
            .windows(2)
            .position(|window| window == b"\r\n")
            .expect("chunk size line");
        let size = usize::from_str_radix(
            std::str::from_utf8(&chunked[..line_end]).unwrap().trim(),
            16,
        )
        .expect("chunk size");
        if size == 0 {
            return body;
        }
        let start = line_end + 2;
        body.extend_from_slice(&chunked[start..start + size]);
        chunked = &chunked[start + size + 2..];
    }
}

/// `body` as one chunk per `chunk` bytes and the last chunk.
fn chunked(body: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for part in body.chunks(chunk) {
        out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// Submits `body` as JSON text.
async fn submit_text(app: &TestApp, body: String) -> reqwest::Response {
    app.client
        .post(app.url("/api/v1/work-items"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("submit")
}

/// The server still answers after whatever came before.
async fn still_serving(app: &TestApp) {
    assert_eq!(app.get("/healthz").await.status().as_u16(), 200);
}

async fn ids_that_are_not_uuids_are_400(backend: Backend) {
    let app = api_app(backend).start().await;
    for id in ["not-a-uuid", "1", "00000000-0000-0000-0000", "%20", "%00"] {
        let envelope = error_of(app.get(&format!("/api/v1/work-items/{id}")).await, 400).await;
        assert_eq!(envelope.error.code, "invalid_parameter", "{id}");
        assert_eq!(envelope.error.field.as_deref(), Some("id"), "{id}");
        let envelope = error_of(
            app.post(&format!("/api/v1/work-items/{id}/retry")).await,
            400,
        )
        .await;
        assert_eq!(envelope.error.field.as_deref(), Some("id"), "{id}");
        let envelope = error_of(
            app.post(&format!("/api/v1/work-items/{id}/{PROBE_COMMAND}"))
                .await,
            400,
        )
        .await;
        assert_eq!(envelope.error.field.as_deref(), Some("id"), "{id}");
    }
    // A very long id is refused and not echoed in full.
    let long = "a".repeat(30_000);
    let envelope = error_of(app.get(&format!("/api/v1/work-items/{long}")).await, 400).await;
    assert!(
        envelope.error.message.len() < 300,
        "{}",
        envelope.error.message
    );
    // Bytes that are not UTF-8 name the parameter too.
    let token = bearer(&app.tokens.admin);
    let response = raw(
        &app,
        &format!("GET /api/v1/work-items/%FF%FE HTTP/1.1\r\nAuthorization: {token}"),
        b"",
    )
    .await;
    let envelope = response.envelope(400);
    assert_eq!(envelope.error.code, "invalid_parameter");
    assert_eq!(envelope.error.field.as_deref(), Some("id"));
    // Query parameters likewise.
    for query in [
        "limit=99999999999999999999999",
        "limit=-1",
        "before=..%2F..",
    ] {
        let envelope = error_of(app.get(&format!("/api/v1/work-items?{query}")).await, 400).await;
        assert_eq!(envelope.error.code, "invalid_parameter", "{query}");
    }
    still_serving(&app).await;
    app.finish().await;
}
backend_tests!(ids_that_are_not_uuids_are_400);

async fn dot_segments_and_encoded_slashes_reach_nothing_else(backend: Backend) {
    let app = api_app(backend).start().await;
    let token = bearer(&app.tokens.admin);
    // Raw `..` segments are not resolved: no route has that shape.
    let response = raw(
        &app,
        &format!("GET /api/v1/work-items/../../../healthz HTTP/1.1\r\nAuthorization: {token}"),
        b"",
    )
    .await;
    assert_eq!(response.envelope(404).error.message, "no such route");
    let response = raw(&app, "GET /api/v1/../../metrics HTTP/1.1", b"").await;
    assert_eq!(response.envelope(404).error.code, "not_found");
    // `..` or an encoded slash in a segment is a parameter value, refused
    // as an id.
    for path in [
        "/api/v1/work-items/..",
        "/api/v1/work-items/%2e%2e",
        "/api/v1/work-items/..%2F..%2Fhealthz",
        "/api/v1/work-items/%2F",
    ] {
        let response = raw(
            &app,
            &format!("GET {path} HTTP/1.1\r\nAuthorization: {token}"),
            b"",
        )
        .await;
        let envelope = response.envelope(400);
        assert_eq!(envelope.error.field.as_deref(), Some("id"), "{path}");
    }
    let response = raw(
        &app,
        &format!("POST /api/v1/work-items/..%2F/retry HTTP/1.1\r\nAuthorization: {token}\r\nContent-Length: 0"),
        b"",
    )
    .await;
    assert_eq!(response.envelope(400).error.field.as_deref(), Some("id"));
    // A webhook source with an encoded slash is no receiver.
    let response = raw(
        &app,
        "POST /webhooks/..%2Fprobe HTTP/1.1\r\nContent-Length: 2",
        b"{}",
    )
    .await;
    assert_eq!(response.envelope(404).error.code, "not_found");
    still_serving(&app).await;
    app.finish().await;
}
backend_tests!(dot_segments_and_encoded_slashes_reach_nothing_else);

#[tokio::test]
async fn huge_headers_are_refused_and_the_server_keeps_serving() {
    let app = api_app(Backend::Sqlite).start().await;
    // A huge bearer token is a 401 that does not repeat it.
    let token = "t".repeat(64 * 1024);
    let response = app
        .request(
            reqwest::Method::GET,
            "/api/v1/work-items",
            Some(&bearer(&token)),
        )
        .send()
        .await
        .unwrap();
    assert!(response.headers().get("www-authenticate").is_some());
    let envelope = error_of(response, 401).await;
    assert_eq!(envelope.error.code, "unauthenticated");
    assert!(!envelope.error.message.contains("tttt"));
    // A header value that is not text is a 401 as well.
    let response = raw(
        &app,
        "GET /api/v1/work-items HTTP/1.1\r\nAuthorization: Bearer \u{00ff}\u{00fe}",
        b"",
    )
    .await;
    assert_eq!(response.envelope(401).error.code, "unauthenticated");
    // Headers beyond what the HTTP layer buffers (or too many of them) are
    // refused by it with 431 before any handler runs: no envelope there.
    let huge = format!("GET /healthz HTTP/1.1\r\nX-Huge: {}", "h".repeat(1 << 20));
    let response = raw(&app, &huge, b"").await;
    assert_eq!(response.status, 431, "{}", response.head);
    let many: String = (0..500).map(|i| format!("\r\nX-Many-{i}: x")).collect();
    let response = raw(&app, &format!("GET /healthz HTTP/1.1{many}"), b"").await;
    assert_eq!(response.status, 431, "{}", response.head);
    still_serving(&app).await;
    app.finish().await;
}

async fn bodies_that_are_not_json_or_too_deep_are_400(backend: Backend) {
    let app = api_app(backend).start().await;
    for body in [
        "{not json".to_owned(),
        String::new(),
        "\u{0000}".to_owned(),
        "{\"item_type\": \"probe\"".to_owned(),
        "{\"item_type\": \"probe\"} trailing".to_owned(),
        // Past serde_json's nesting limit (128): an error, not a crash.
        format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
        format!("{}1{}", "{\"a\":".repeat(10_000), "}".repeat(10_000)),
        // Numbers no f64 holds.
        r#"{"item_type": "probe", "retry_needs_admin": 1e999999}"#.to_owned(),
        format!(r#"{{"item_type": "probe", "n": {}}}"#, "9".repeat(400)),
    ] {
        let envelope = error_of(submit_text(&app, body.clone()).await, 400).await;
        assert_eq!(
            envelope.error.code,
            "invalid_body",
            "{}",
            &body[..body.len().min(40)]
        );
        assert!(
            envelope.error.message.len() < 1_000,
            "{}",
            envelope.error.message
        );
    }
    // A large number that fits is data, not an error of the parser: the
    // probe refuses the unknown field.
    let envelope = error_of(
        submit_text(
            &app,
            format!(r#"{{"item_type": "probe", "n": 1{}}}"#, "0".repeat(300)),
        )
        .await,
        422,
    )
    .await;
    assert_eq!(envelope.error.field.as_deref(), Some("n"));

    // A command's body is held to the same rules.
    let id = app
        .submit_probe(&app.tokens.admin, "gitlab", "group/app", json!({}))
        .await;
    let path = format!("/api/v1/work-items/{id}/{PROBE_COMMAND}");
    for body in [
        "{not json".to_owned(),
        format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
        "[1e999999]".to_owned(),
    ] {
        let response = app
            .client
            .post(app.url(&path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(error_of(response, 400).await.error.code, "invalid_body");
    }
    still_serving(&app).await;
    app.finish().await;
}
backend_tests!(bodies_that_are_not_json_or_too_deep_are_400);

async fn duplicate_keys_are_refused(backend: Backend) {
    let app = api_app(backend).start().await;
    // Read as last-wins, the first `project` could pass a check the stored
    // one would not: refused whole.
    let body = r#"{"item_type": "probe", "forge": "gitlab", "project": "group/app", "project": "other/app"}"#;
    let envelope = error_of(submit_text(&app, body.to_owned()).await, 422).await;
    assert_eq!(envelope.error.code, "invalid_body");
    assert!(
        envelope
            .error
            .message
            .contains(r#"duplicate key "project""#),
        "{}",
        envelope.error.message
    );
    let body = r#"{"item_type": "probe", "item_type": "probe"}"#;
    let envelope = error_of(submit_text(&app, body.to_owned()).await, 422).await;
    assert!(
        envelope.error.message.contains("item_type"),
        "{}",
        envelope.error.message
    );
    // Nested objects too.
    let body = r#"{"item_type": "probe", "x": [{"a": 1, "a": 1}]}"#;
    error_of(submit_text(&app, body.to_owned()).await, 422).await;

    let id = app
        .submit_probe(&app.tokens.admin, "gitlab", "group/app", json!({}))
        .await;
    let response = app
        .client
        .post(app.url(&format!("/api/v1/work-items/{id}/{PROBE_COMMAND}")))
        .body(r#"{"a": 1, "a": 2}"#)
        .send()
        .await
        .unwrap();
    let envelope = error_of(response, 422).await;
    assert!(
        envelope.error.message.contains(r#"duplicate key "a""#),
        "{}",
        envelope.error.message
    );
    // Nothing was stored by the refused submissions.
    let list: Value = app.get("/api/v1/work-items").await.json().await.unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
    app.finish().await;
}
backend_tests!(duplicate_keys_are_refused);

async fn unknown_commands_are_404(backend: Backend) {
    let app = api_app(backend).start().await;
    let id = app
        .submit_probe(&app.tokens.admin, "gitlab", "group/app", json!({}))
        .await;
    for command in [
        "frobnicate",
        "RETRY-MERGE",
        "retry-merge%00",
        "%2E%2E",
        "a%2Fb",
    ] {
        let envelope = error_of(
            app.post(&format!("/api/v1/work-items/{id}/{command}"))
                .await,
            404,
        )
        .await;
        assert_eq!(envelope.error.code, "not_found", "{command}");
    }
    let long = "c".repeat(10_000);
    let envelope = error_of(
        app.post(&format!("/api/v1/work-items/{id}/{long}")).await,
        404,
    )
    .await;
    assert!(
        envelope.error.message.len() < 300,
        "{}",
        envelope.error.message
    );
    // A type without commands, and an unknown item.
    let bare = app.insert(BARE_TYPE).await;
    let envelope = error_of(
        app.post(&format!("/api/v1/work-items/{}/{PROBE_COMMAND}", bare.id))
            .await,
        404,
    )
    .await;
    assert_eq!(envelope.error.code, "not_found");
    let envelope = error_of(
        app.post(&format!(
            "/api/v1/work-items/{}/{PROBE_COMMAND}",
            ItemId::new_v7()
        ))
        .await,
        404,
    )
    .await;
    assert_eq!(envelope.error.code, "not_found");
    app.finish().await;
}
backend_tests!(unknown_commands_are_404);

async fn wrong_content_types_are_415(backend: Backend) {
    let app = api_app(backend).start().await;
    let body = json!({"item_type": PROBE_TYPE}).to_string();
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonp"),
        Some("\u{00ff}"),
        None,
    ] {
        let mut request = app
            .client
            .post(app.url("/api/v1/work-items"))
            .body(body.clone());
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let response = request.send().await.unwrap();
        let envelope = error_of(response, 415).await;
        assert_eq!(
            envelope.error.code, "unsupported_media_type",
            "{content_type:?}"
        );
    }
    // JSON with parameters is fine.
    let response = app
        .client
        .post(app.url("/api/v1/work-items"))
        .header("content-type", "application/json; charset=utf-8")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    app.finish().await;
}
backend_tests!(wrong_content_types_are_415);

async fn chunked_bodies_over_the_limit_are_413(backend: Backend) {
    const LIMIT: usize = 4096;
    let app = api_app(backend)
        .api_config(ApiConfig {
            body_limit_bytes: LIMIT,
            ..ApiConfig::default()
        })
        .start()
        .await;
    let token = bearer(&app.tokens.admin);
    let id = app
        .submit_probe(&app.tokens.admin, "gitlab", "group/app", json!({}))
        .await;
    // Valid JSON, so only the size is wrong.
    let big = format!(
        r#"{{"item_type": "probe", "pad": "{}"}}"#,
        "x".repeat(4 * LIMIT)
    );
    let small = chunked(
        br#"{"item_type": "probe", "forge": "gitlab", "project": "group/app"}"#,
        7,
    );
    let routes = [
        format!("POST /api/v1/work-items HTTP/1.1\r\nAuthorization: {token}"),
        format!("POST /api/v1/work-items/{id}/{PROBE_COMMAND} HTTP/1.1\r\nAuthorization: {token}"),
        "POST /webhooks/probe HTTP/1.1".to_owned(),
    ];
    for route in &routes {
        let head =
            format!("{route}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked");
        let response = raw(&app, &head, &chunked(big.as_bytes(), 1000)).await;
        let envelope = response.envelope(413);
        assert_eq!(envelope.error.code, "payload_too_large", "{route}");
        assert!(
            envelope.error.message.contains(&LIMIT.to_string()),
            "{}",
            envelope.error.message
        );
        // A chunked body under the limit goes through.
        let response = raw(&app, &head, &small).await;
        assert!(
            [200, 201, 202].contains(&response.status),
            "{route}: {} {}",
            response.head,
            String::from_utf8_lossy(&response.body)
        );
    }
    still_serving(&app).await;
    app.finish().await;
}
backend_tests!(chunked_bodies_over_the_limit_are_413);

async fn a_huge_number_of_invalid_fields_is_listed_up_to_the_cap(backend: Backend) {
    let app = api_app(backend).start().await;
    let mut body = serde_json::Map::new();
    body.insert("item_type".into(), json!(PROBE_TYPE));
    for index in 0..20_000 {
        body.insert(format!("unknown_{index:05}"), json!(index));
    }
    let envelope = error_of(
        submit_text(&app, Value::Object(body).to_string()).await,
        422,
    )
    .await;
    assert_eq!(envelope.error.code, "invalid_field");
    assert_eq!(envelope.error.errors.len(), MAX_FIELD_ERRORS);
    assert_eq!(envelope.error.field.as_deref(), Some("unknown_00000"));
    let left_out = 20_000 - MAX_FIELD_ERRORS;
    assert!(
        envelope.error.message.ends_with(&format!(
            "and {left_out} more invalid field(s) not listed (20000 in all)"
        )),
        "{}",
        envelope.error.message
    );
    assert!(envelope.error.message.len() < 10_000);
    app.finish().await;
}
backend_tests!(a_huge_number_of_invalid_fields_is_listed_up_to_the_cap);
