//! Forge deliveries through SNS and SQS (`events.sqs`) instead of direct
//! webhooks, against a real SQS and SNS API (`moto_server` on loopback):
//! forge-sim's webhooks reach a relay that publishes each delivery, headers
//! as message attributes, to an SNS topic; the service's queue intake
//! long-polls the subscribed queue. The service gets no direct webhook, and
//! its clock does not move, so only the queued deliveries move an item.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use forge_sim::{JobOutcome, JobSpec};
use reqwest::StatusCode;
use serde_json::json;
use wq_intake::{Flow, IntakeHandle, IntakeHooks, SqsConfig};
use wq_testkit::moto::Queues;
use wq_testkit::{Backend, backend_tests};

use crate::support::{GithubRepo, Harness, Options, PROJECT, change, github_change};

backend_tests!(
    gitlab_deliveries_through_sns_and_sqs_drive_an_mr_to_merged,
    github_deliveries_through_sns_and_sqs_drive_a_pr_to_merged,
);

/// How long a test waits for the queue to drain.
const WAIT: Duration = Duration::from_secs(30);

/// The headers a relay carries along: the event, the token or signature,
/// the delivery's id.
const CARRIED: [&str; 6] = [
    "x-gitlab-event",
    "x-gitlab-token",
    "x-gitlab-event-uuid",
    "x-github-event",
    "x-hub-signature-256",
    "x-github-delivery",
];

/// What the relay publishes for each delivery it takes.
#[derive(Clone)]
struct Relay {
    queues: Arc<Queues>,
    /// Each delivery is published this many times.
    copies: usize,
    received: Arc<AtomicUsize>,
}

async fn relay(
    State(relay): State<Relay>,
    Path(_source): Path<String>,
    headers: HeaderMap,
    body: String,
) -> StatusCode {
    let carried: Vec<(String, String)> = CARRIED
        .iter()
        .filter_map(|name| {
            headers
                .get(*name)
                .and_then(|value| value.to_str().ok())
                .map(|value| ((*name).to_owned(), value.to_owned()))
        })
        .collect();
    let pairs: Vec<(&str, &str)> = carried
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    for _ in 0..relay.copies {
        relay.queues.publish(&body, &pairs).await;
    }
    relay.received.fetch_add(1, Ordering::Relaxed);
    StatusCode::OK
}

/// A topic and queue on moto, and a relay in front of them for the sim's
/// webhooks.
struct Queued {
    queues: Arc<Queues>,
    relay_url: String,
    received: Arc<AtomicUsize>,
}

async fn queued(raw: bool, copies: usize) -> Queued {
    let queues =
        Arc::new(Queues::new(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")), raw, 2).await);
    let received = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new()
        .route("/webhooks/{source}", axum::routing::post(relay))
        .with_state(Relay {
            queues: Arc::clone(&queues),
            copies,
            received: Arc::clone(&received),
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Queued {
        queues,
        relay_url,
        received,
    }
}

impl Queued {
    fn config(&self) -> SqsConfig {
        SqsConfig {
            wait_seconds: 1,
            visibility_timeout_seconds: 2,
            ..SqsConfig::new(&self.queues.queue)
        }
    }

    fn start(&self, h: &Harness) -> IntakeHandle {
        h.intake(self.queues.sqs.clone(), &self.config()).start()
    }

    /// Waits until the queue holds nothing, visible or in flight.
    async fn drained(&self) {
        let deadline = Instant::now() + WAIT;
        while self.queues.left(&self.queues.queue).await > 0 {
            assert!(Instant::now() < deadline, "the queue did not drain");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A GitLab project whose pipeline runs an hour of the sim's time (the
/// test moves it), its webhooks to the relay.
fn long_pipeline(queued: &Queued) -> Options {
    Options {
        jobs: vec![JobSpec::new("unit", JobOutcome::Success).duration_secs(3600)],
        webhook_base: Some(queued.relay_url.clone()),
        ..Options::default()
    }
}

/// No webhook reaches the service directly: every one went to the relay.
fn direct_webhooks(h: &Harness, relay_url: &str) -> usize {
    h.sim
        .webhook_deliveries()
        .iter()
        .filter(|delivery| !delivery.url.starts_with(relay_url))
        .count()
}

async fn gitlab_deliveries_through_sns_and_sqs_drive_an_mr_to_merged(backend: Backend) {
    let queued = queued(false, 1).await;
    let h = Harness::start_with(backend, long_pipeline(&queued)).await;
    let intake = queued.start(&h);
    let id = h
        .submit_ok(
            &change("wq/queued", &[("q.txt", "q\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_mr(&id).await;
    h.settle().await;
    // The pipeline's success arrives only through the queue: the service's
    // clock never moves, so no timer re-reads the MR.
    h.sim.advance(Duration::from_secs(3600));
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(item["detail"]["merge"]["last_result"], "accepted");
    assert_eq!(h.count("PUT", "/merge"), 1);
    assert_eq!(direct_webhooks(&h, &queued.relay_url), 0);
    assert!(queued.received.load(Ordering::Relaxed) >= 2);
    queued.drained().await;
    let stats = intake.stats();
    assert!(stats.stored.load(Ordering::Relaxed) >= 1);
    assert_eq!(stats.refused.load(Ordering::Relaxed), 0);
    intake.shutdown(Duration::from_secs(5)).await;
    h.finish().await;
}

async fn github_deliveries_through_sns_and_sqs_drive_a_pr_to_merged(backend: Backend) {
    let queued = queued(true, 1).await;
    let h = Harness::start_with(
        backend,
        Options {
            jobs: vec![JobSpec::new("ci", JobOutcome::Success)],
            github: Some(GithubRepo {
                merge_queue: false,
                required_approvals: 1,
                dismiss_stale_reviews: false,
            }),
            webhook_base: Some(queued.relay_url.clone()),
            ..Options::default()
        },
    )
    .await;
    let intake = queued.start(&h);
    let id = h
        .submit_ok(
            &github_change("wq/queued", &[("q.txt", "q\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    // The signed review delivery, through the queue, brings the merge.
    h.approve_as(number, "reviewer");
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(item["detail"]["merge"]["last_result"], "accepted");
    assert_eq!(
        h.sim.github_pr(PROJECT, number).expect("pr")["merged"],
        true
    );
    assert_eq!(h.count("PUT", "/merge-async"), 1);
    assert_eq!(direct_webhooks(&h, &queued.relay_url), 0);
    queued.drained().await;
    assert_eq!(intake.stats().refused.load(Ordering::Relaxed), 0);
    intake.shutdown(Duration::from_secs(5)).await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_queued_delivery_twice_changes_nothing_twice() {
    let queued = queued(false, 2).await;
    let h = Harness::start_with(Backend::Postgres, long_pipeline(&queued)).await;
    let intake = queued.start(&h);
    let id = h
        .submit_ok(
            &change("wq/twice", &[("t.txt", "t\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_mr(&id).await;
    h.settle().await;
    h.sim.advance(Duration::from_secs(3600));
    h.wait_phase(&id, "completed").await;
    queued.drained().await;
    h.settle().await;
    let stats = intake.stats();
    let received = queued.received.load(Ordering::Relaxed) as u64;
    assert_eq!(
        stats.stored.load(Ordering::Relaxed) + stats.ignored.load(Ordering::Relaxed),
        2 * received,
        "every copy was taken"
    );
    assert!(
        stats.stored.load(Ordering::Relaxed) >= 2,
        "the pipeline hook, twice"
    );
    assert_eq!(h.count("PUT", "/merge"), 1);
    assert_eq!(h.count("POST", "/merge_requests"), 1);
    assert_eq!(h.count("POST", "/notes"), 1);
    intake.shutdown(Duration::from_secs(5)).await;
    h.finish().await;
}

/// Crashes the consumer after the first batch is stored, before its delete.
struct CrashOnFirstDelete;

#[async_trait]
impl IntakeHooks for CrashOnFirstDelete {
    async fn before_delete(&self, stored: usize) -> Flow {
        if stored > 0 {
            Flow::Crash
        } else {
            Flow::Continue
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_store_and_delete_redelivers_harmlessly() {
    let queued = queued(true, 1).await;
    let h = Harness::start_with(Backend::Sqlite, long_pipeline(&queued)).await;
    let crashing = h
        .intake(queued.queues.sqs.clone(), &queued.config())
        .with_hooks(Arc::new(CrashOnFirstDelete))
        .start();
    let id = h
        .submit_ok(
            &change("wq/crash", &[("c.txt", "c\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_mr(&id).await;
    let deadline = Instant::now() + WAIT;
    while !crashing.is_finished() {
        assert!(Instant::now() < deadline, "no delivery was stored");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(crashing.stats().stored.load(Ordering::Relaxed) >= 1);
    assert_eq!(crashing.stats().deleted.load(Ordering::Relaxed), 0);

    // A new consumer takes the stored deliveries again once their
    // visibility ends, stores them again and deletes them; the pipeline
    // finishes and the MR merges once.
    let restarted = queued.start(&h);
    h.sim.advance(Duration::from_secs(3600));
    let item = h.wait_phase(&id, "completed").await;
    assert_eq!(item["detail"]["merge"]["last_result"], "accepted");
    queued.drained().await;
    assert!(restarted.stats().stored.load(Ordering::Relaxed) >= 2);
    assert_eq!(h.count("PUT", "/merge"), 1);
    assert_eq!(h.count("POST", "/merge_requests"), 1);
    restarted.shutdown(Duration::from_secs(5)).await;
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_queued_delivery_is_refused_and_never_stored() {
    let queued = queued(false, 1).await;
    let h = Harness::start_with(Backend::Sqlite, long_pipeline(&queued)).await;
    let intake = queued.start(&h);
    let id = h
        .submit_ok(
            &change("wq/forged", &[("f.txt", "f\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    queued.drained().await;
    h.settle().await;
    let before = intake.stats().stored.load(Ordering::Relaxed);
    // A "merged" hook with a wrong token, and one with none, published
    // straight to the topic.
    let hook = json!({
        "object_kind": "merge_request",
        "event_type": "merge_request",
        "project": {"id": h.project, "path_with_namespace": PROJECT},
        "object_attributes": {"iid": number, "action": "merge", "state": "merged",
                              "source_branch": "wq/forged", "target_branch": "main"},
    })
    .to_string();
    for token in [Some("forged"), None] {
        let mut headers = vec![("X-Gitlab-Event", "Merge Request Hook")];
        if let Some(token) = token {
            headers.push(("X-Gitlab-Token", token));
        }
        queued.queues.publish(&hook, &headers).await;
    }
    let deadline = Instant::now() + WAIT;
    while intake.stats().refused.load(Ordering::Relaxed) < 2 {
        assert!(
            Instant::now() < deadline,
            "the forged deliveries were not refused"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(intake.stats().stored.load(Ordering::Relaxed), before);
    let item_id: wq_core::ItemId = id.parse().unwrap();
    assert!(
        h.app().store.event_next(item_id).await.unwrap().is_none(),
        "nothing stored"
    );
    intake.shutdown(Duration::from_secs(5)).await;
    // Left for the dead-letter queue, never deleted.
    assert!(queued.queues.left(&queued.queues.queue).await >= 2);
    assert_eq!(h.item(&id).await["phase"], "active");
    assert_eq!(h.count("PUT", "/merge"), 0);
    // The genuine pipeline hook still merges it.
    let intake = queued.start(&h);
    h.sim.advance(Duration::from_secs(3600));
    h.wait_phase(&id, "completed").await;
    intake.shutdown(Duration::from_secs(5)).await;
    h.finish().await;
}
