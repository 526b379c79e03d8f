//! Authentication benchmark: authentications per second of
//! - an RS256 and an ES256 JWT with the issuer's keys cached,
//! - a static API token,
//! - a no-op baseline (the same loop around an empty async call).
//!
//! `cargo bench -p wq-auth --bench auth`; `WQ_BENCH_AUTH_ROUNDS` sets the
//! authentications per case (default 20,000). The issuer is a local server
//! that is asked once; the loop runs on one task.
#![allow(
    clippy::disallowed_methods,
    reason = "benchmark fixtures read the wall clock"
)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde_json::json;
use wq_auth::{AuthFailure, Authenticator, Permission, Principal, Scope, new_static_token};
use wq_testkit::oidc::{self, FakeIssuer, bearer, clock_now, ec_key, rsa_key, sign, unix};

fn rounds() -> u32 {
    std::env::var("WQ_BENCH_AUTH_ROUNDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(20_000)
}

async fn measure<F, Fut>(
    label: &str,
    rounds: u32,
    baseline: Option<Duration>,
    mut call: F,
) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    // Warm-up: fill caches, fault in code.
    for _ in 0..rounds / 10 {
        assert!(call().await, "{label}: warm-up call failed");
    }
    let started = Instant::now();
    for _ in 0..rounds {
        assert!(black_box(call().await), "{label}: call failed");
    }
    let elapsed = started.elapsed();
    let per_call = elapsed / rounds;
    let per_second = f64::from(rounds) / elapsed.as_secs_f64();
    let relative = baseline
        .map(|baseline| {
            format!(
                "  ({:.1}x the baseline)",
                per_call.as_secs_f64() / baseline.as_secs_f64()
            )
        })
        .unwrap_or_default();
    println!(
        "{label:<28} {per_second:>12.0} /s  {:>9.2} µs each{relative}",
        per_call.as_secs_f64() * 1e6
    );
    per_call
}

async fn noop(header: Option<&str>) -> Result<(), AuthFailure> {
    black_box(header);
    Ok(())
}

fn granted(result: Result<Principal, AuthFailure>) -> bool {
    result.is_ok_and(|principal| principal.authorize(Permission::Submit, &Scope::ANY).is_ok())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let rounds = rounds();
    println!("# wq-auth authentication benchmark");
    println!(
        "machine: {} cores; {rounds} authentications per case, one task",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let rsa = rsa_key("rsa", 0);
    let ec = ec_key("ec");
    let issuer = FakeIssuer::start(&[&rsa, &ec]).await;
    let (static_token, snippet) = new_static_token("bench");
    let snippet: String = snippet
        .replace("groups: []", "groups: [bots]")
        .lines()
        .map(|line| format!("  {line}\n"))
        .collect();
    let yaml = format!(
        r#"
static_tokens:
{snippet}rules:
  - name: bots
    groups: [bots]
    permissions: [submit]
  - name: ci
    issuer: {url}
    claims:
      aud: workqueue
      project_id: 42
    permissions: [submit]
"#,
        url = issuer.url
    );
    let clock = clock_now();
    let auth: Authenticator = oidc::authenticator(&yaml, &clock);
    let now = unix(&clock);
    let claims = json!({
        "iss": issuer.url, "sub": "project_path:team/app", "aud": "workqueue",
        "iat": now, "exp": now + 3600, "project_id": 42,
    });
    let rsa_header = bearer(&sign(&rsa, &claims));
    let ec_header = bearer(&sign(&ec, &claims));
    let static_header = bearer(&static_token);

    let baseline = measure("no-op baseline", rounds, None, || async {
        noop(Some(&static_header)).await.is_ok()
    })
    .await;
    measure("static token", rounds, Some(baseline), || async {
        granted(auth.authenticate(Some(&static_header)).await)
    })
    .await;
    measure("JWT RS256, cached keys", rounds, Some(baseline), || async {
        granted(auth.authenticate(Some(&rsa_header)).await)
    })
    .await;
    measure("JWT ES256, cached keys", rounds, Some(baseline), || async {
        granted(auth.authenticate(Some(&ec_header)).await)
    })
    .await;
    println!("JWKS fetches during the run: {}", issuer.jwks_fetches());
}
