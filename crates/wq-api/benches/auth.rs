//! Authenticated requests per second through the real router over HTTP on
//! 127.0.0.1, in one run:
//! - `GET /healthz`, which needs no token (the baseline);
//! - `GET /api/v1/me` with a static token;
//! - `GET /api/v1/me` with an RS256 and an ES256 JWT, the issuer's keys
//!   cached (fetched once, before the clock starts);
//! - `GET /api/v1/me` without a token (the 401).
//!
//! `/me` does nothing but authenticate and answer, so the difference to
//! `/healthz` is what authentication costs a request.
//!
//! `cargo bench -p wq-api --bench auth`; `WQ_BENCH_AUTH_SECONDS` sets the
//! seconds per case (default 5), `WQ_BENCH_AUTH_CLIENTS` the concurrent
//! keep-alive clients (default 16). Server and clients share the process.
#![allow(
    clippy::disallowed_methods,
    reason = "benchmark fixtures read the wall clock"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use wq_core::Clock;
use wq_testkit::oidc::{self, FakeIssuer, bearer, clock_now, ec_key, rsa_key, sign, unix};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// One case's figures.
struct Measured {
    per_second: f64,
}

/// `clients` concurrent loops of `GET url` with `authorization` for
/// `seconds`; every answer must have `status`.
async fn measure(
    label: &str,
    url: &str,
    authorization: Option<&str>,
    status: u16,
    clients: u64,
    seconds: u64,
    baseline: Option<&Measured>,
) -> Measured {
    let client = reqwest::Client::new();
    let request = |client: &reqwest::Client| {
        let mut request = client.get(url);
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        request
    };
    // Warm-up: connections open, caches filled.
    for _ in 0..clients * 4 {
        let response = request(&client).send().await.expect("request");
        assert_eq!(response.status().as_u16(), status, "{label}: warm-up");
        response.bytes().await.expect("body");
    }
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let done = done.clone();
        let builder = request(&client);
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                let response = builder
                    .try_clone()
                    .expect("a body-less request clones")
                    .send()
                    .await
                    .expect("request");
                assert_eq!(response.status().as_u16(), status);
                response.bytes().await.expect("body");
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await.expect("client task");
    }
    let elapsed = started.elapsed();
    let count = done.load(Ordering::Relaxed);
    let per_second = count as f64 / elapsed.as_secs_f64();
    let relative = baseline
        .map(|baseline| format!("  ({:.2}x /healthz)", per_second / baseline.per_second))
        .unwrap_or_default();
    println!(
        "{label:<34} {per_second:>9.0} requests/s  {:>8.1} µs each{relative}",
        elapsed.as_secs_f64() * 1e6 * clients as f64 / count as f64
    );
    Measured { per_second }
}

#[tokio::main]
async fn main() {
    let seconds = env_number("WQ_BENCH_AUTH_SECONDS", 5);
    let clients = env_number("WQ_BENCH_AUTH_CLIENTS", 16);
    println!("# wq-api authentication benchmark (HTTP on 127.0.0.1)");
    println!(
        "machine: {} cores; {clients} concurrent keep-alive clients, {seconds} s per case",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let rsa = rsa_key("rsa", 0);
    let ec = ec_key("ec");
    let issuer = FakeIssuer::start(&[&rsa, &ec]).await;
    let (static_token, entry) = wq_auth::new_static_token("bench");
    let entry: String = entry
        .replace("groups: []", "groups: [bots]")
        .lines()
        .map(|line| format!("  {line}\n"))
        .collect();
    let yaml = format!(
        r#"
static_tokens:
{entry}rules:
  - name: bots
    groups: [bots]
    permissions: [read]
  - name: ci
    issuer: {url}
    claims:
      aud: workqueue
      sub: project_path:team/app
    permissions: [read]
"#,
        url = issuer.url
    );
    let clock = clock_now();
    let authenticator = Arc::new(oidc::authenticator(&yaml, &clock));
    let now = unix(&clock);
    let claims = json!({
        "iss": issuer.url, "sub": "project_path:team/app", "aud": "workqueue",
        "iat": now, "exp": now + 3600,
    });

    let database_url = wq_store::testing::fresh_sqlite_url();
    let store = wq_store::connect(&database_url, 5)
        .await
        .expect("open the database");
    store.migrate().await.expect("migrate");
    let service_clock: Arc<dyn Clock> = clock.clone();
    let state = wq_api::AppState::new(store, service_clock, authenticator);
    let router = wq_api::router(state, &wq_api::ApiConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(wq_api::serve(listener, router, async move {
        let _ = stopped.await;
    }));

    let me = format!("{base}/api/v1/me");
    let baseline = measure(
        "GET /healthz, no token",
        &format!("{base}/healthz"),
        None,
        200,
        clients,
        seconds,
        None,
    )
    .await;
    let cases = [
        ("GET /api/v1/me, static token", bearer(&static_token), 200),
        (
            "GET /api/v1/me, JWT RS256 cached",
            bearer(&sign(&rsa, &claims)),
            200,
        ),
        (
            "GET /api/v1/me, JWT ES256 cached",
            bearer(&sign(&ec, &claims)),
            200,
        ),
    ];
    for (label, authorization, status) in &cases {
        measure(
            label,
            &me,
            Some(authorization),
            *status,
            clients,
            seconds,
            Some(&baseline),
        )
        .await;
    }
    measure(
        "GET /api/v1/me, no token (401)",
        &me,
        None,
        401,
        clients,
        seconds,
        Some(&baseline),
    )
    .await;
    println!("JWKS fetches during the run: {}", issuer.jwks_fetches());
    let _ = stop.send(());
    let _ = server.await;
}
