//! forge-sim's control API, request log, fault injection (HTTP and webhook) and binary, over HTTP.

use std::io::BufRead;
use std::time::Duration;

use forge_sim::testing::{ApiClient, Receiver, WAIT_LIMIT, commit_body, start_sim};
use forge_sim::{FaultRule, HttpFault, WebhookFaultKind, WebhookFaultRule};
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn http_500_and_502_faults_fire_a_set_number_of_times() {
    let sim = start_sim().await;
    let project = sim.gitlab_project("g/p").create().expect("project");
    let api = ApiClient::gitlab(&sim);
    let path = format!("/projects/{project}/repository/branches");
    sim.add_fault(
        FaultRule::new(
            "GET",
            &format!("/api/v4{path}"),
            HttpFault::Status { status: 500 },
        )
        .times(2),
    );

    let (status, body) = api.get(&path).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(body["message"], "500 Internal Server Error");
    let (status, _) = api.get(&path).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let (status, _) = api.get(&path).await;
    assert_eq!(status, StatusCode::OK);

    // A glob pattern, after skipping one match, applied after the handler ran (response lost).
    sim.add_fault(
        FaultRule::pattern(
            "POST",
            "/api/v4/projects/*/repository/commits",
            HttpFault::Status { status: 502 },
        )
        .skip(1)
        .after_handler(),
    );
    let commits = format!("/projects/{project}/repository/commits");
    let (status, _) = api
        .post(
            &commits,
            commit_body("one", Some("main"), &[("create", "1", "1")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = api
        .post(
            &commits,
            commit_body("two", Some("main"), &[("create", "2", "2")]),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(body["message"], "502 Bad Gateway");
    assert!(
        sim.gitlab_branch_head(project, "two").is_some(),
        "the commit happened before the 502"
    );

    let log = sim.requests();
    let faulted: Vec<_> = log.iter().filter(|e| e.fault.is_some()).collect();
    assert_eq!(faulted.len(), 3);
    assert!(faulted.iter().all(|e| e.status == 500 || e.status == 502));
    assert_eq!(faulted[2].method, "POST");
    assert!(faulted[2].path.ends_with("/repository/commits"));
}

#[tokio::test]
async fn rate_limit_fault_sends_retry_after_and_ratelimit_headers() {
    let sim = start_sim().await;
    let project = sim.gitlab_project("g/p").create().expect("project");
    sim.add_fault(FaultRule::new(
        "GET",
        "/api/v4/projects",
        HttpFault::RateLimit {
            retry_after_secs: 7,
        },
    ));
    let client = reqwest::Client::new();
    let url = format!("{}/projects/{project}", sim.gitlab_url());
    let response = client
        .get(&url)
        .header("PRIVATE-TOKEN", forge_sim::testing::TOKEN)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let headers = response.headers().clone();
    assert_eq!(headers["retry-after"], "7");
    assert_eq!(headers["ratelimit-remaining"], "0");
    assert_eq!(headers["ratelimit-limit"], "600");
    let reset: i64 = headers["ratelimit-reset"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("epoch");
    assert!(reset > time::OffsetDateTime::now_utc().unix_timestamp());
    assert_eq!(response.text().await.expect("body"), "Retry later\n");
    let response = client
        .get(&url)
        .header("PRIVATE-TOKEN", forge_sim::testing::TOKEN)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn timeout_fault_hangs_until_the_client_gives_up_and_is_cancellable() {
    let sim = start_sim().await;
    let project = sim.gitlab_project("g/p").create().expect("project");
    sim.add_fault(
        FaultRule::new(
            "GET",
            "/api/v4/projects",
            HttpFault::Timeout { hang_secs: 3600 },
        )
        .times(2),
    );
    let url = format!("{}/projects/{project}", sim.gitlab_url());
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .expect("client");
    let mut hanging = sim.hanging_requests();
    let error = impatient
        .get(&url)
        .header("PRIVATE-TOKEN", forge_sim::testing::TOKEN)
        .send()
        .await
        .expect_err("the sim never answers in time");
    assert!(error.is_timeout(), "{error}");
    // The client has gone: the sim lets go of its request.
    tokio::time::timeout(WAIT_LIMIT, hanging.wait_for(|count| *count == 0))
        .await
        .expect("the abandoned request is let go")
        .expect("the sim runs");
    let entry = sim
        .requests()
        .into_iter()
        .find(|e| e.fault.is_some())
        .expect("logged");
    assert!(
        entry
            .fault
            .as_deref()
            .is_some_and(|f| f.starts_with("timeout"))
    );

    // A patient client is released by cancel_hangs and sees 504.
    let patient = reqwest::Client::new();
    let request = tokio::spawn({
        let url = url.clone();
        async move {
            patient
                .get(&url)
                .header("PRIVATE-TOKEN", forge_sim::testing::TOKEN)
                .send()
                .await
        }
    });
    tokio::time::timeout(WAIT_LIMIT, hanging.wait_for(|count| *count == 1))
        .await
        .expect("the request is held")
        .expect("the sim runs");
    assert!(!request.is_finished());
    sim.cancel_hangs();
    let response = tokio::time::timeout(Duration::from_secs(5), request)
        .await
        .expect("released")
        .expect("joined")
        .expect("answered");
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    let response = impatient
        .get(&url)
        .header("PRIVATE-TOKEN", forge_sim::testing::TOKEN)
        .send()
        .await
        .expect("answered");
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "both uses of the rule are spent"
    );
}

async fn note(api: &ApiClient, project: u64, body: &str) {
    let (status, _) = api
        .post(
            &format!("/projects/{project}/merge_requests/1/notes"),
            json!({ "body": body }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
}

async fn project_with_mr(sim: &forge_sim::SimHandle, receiver: &Receiver) -> (u64, ApiClient) {
    let project = sim
        .gitlab_project("g/hooks")
        .no_ci()
        .webhook(&receiver.url, "s3cret")
        .create()
        .expect("project");
    let api = ApiClient::gitlab(sim);
    api.post(
        &format!("/projects/{project}/repository/commits"),
        commit_body("f", Some("main"), &[("create", "f", "f")]),
    )
    .await;
    let (status, _) = api
        .post(
            &format!("/projects/{project}/merge_requests"),
            json!({"source_branch": "f", "target_branch": "main", "title": "t"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    (project, api)
}

fn note_bodies(receiver: &Receiver) -> Vec<String> {
    receiver
        .of("Note Hook")
        .iter()
        .filter_map(|r| {
            r.body["object_attributes"]["note"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

#[tokio::test]
async fn webhooks_dropped_and_duplicated() {
    let sim = start_sim().await;
    let receiver = Receiver::start().await;
    let (project, api) = project_with_mr(&sim, &receiver).await;
    sim.add_webhook_fault(WebhookFaultRule::new(
        WebhookFaultKind::Drop,
        Some("Note Hook"),
        1,
    ));
    sim.add_webhook_fault(WebhookFaultRule::new(
        WebhookFaultKind::Duplicate,
        Some("Note Hook"),
        1,
    ));
    note(&api, project, "first").await;
    note(&api, project, "second").await;
    note(&api, project, "third").await;
    assert!(sim.flush_webhooks(Duration::from_secs(5)).await);
    assert_eq!(note_bodies(&receiver), vec!["second", "second", "third"]);
    let duplicates = receiver.of("Note Hook");
    assert_eq!(
        duplicates[0].headers["x-gitlab-event-uuid"], duplicates[1].headers["x-gitlab-event-uuid"],
        "a duplicate is the same delivery twice"
    );
    let deliveries = sim.webhook_deliveries();
    let dropped: Vec<_> = deliveries
        .iter()
        .filter(|d| d.outcome == "dropped")
        .collect();
    assert_eq!(dropped.len(), 1);
    assert_eq!(dropped[0].event, "Note Hook");
    assert_eq!(dropped[0].body["object_attributes"]["note"], "first");
    assert!(deliveries.iter().any(|d| d.event == "Merge Request Hook"
        && d.outcome == "delivered"
        && d.status == Some(200)));
}

#[tokio::test]
async fn webhooks_held_and_delivered_reordered() {
    let sim = start_sim().await;
    let receiver = Receiver::start().await;
    let (project, api) = project_with_mr(&sim, &receiver).await;
    sim.add_webhook_fault(WebhookFaultRule::new(
        WebhookFaultKind::Hold,
        Some("Note Hook"),
        2,
    ));
    note(&api, project, "A").await;
    assert!(sim.flush_webhooks(Duration::from_secs(5)).await);
    assert!(note_bodies(&receiver).is_empty(), "A is held");
    note(&api, project, "B").await;
    receiver
        .wait_for("A delivered after B", |r| {
            r.body["object_attributes"]["note"] == "A"
        })
        .await;
    assert_eq!(note_bodies(&receiver), vec!["B", "A"]);
    note(&api, project, "C").await;
    receiver
        .wait_for("C", |r| r.body["object_attributes"]["note"] == "C")
        .await;
    assert_eq!(note_bodies(&receiver), vec!["B", "A", "C"]);

    // Held webhooks can also be released by hand.
    sim.add_webhook_fault(WebhookFaultRule::new(
        WebhookFaultKind::Hold,
        Some("Note Hook"),
        5,
    ));
    note(&api, project, "D").await;
    note(&api, project, "E").await;
    assert!(sim.flush_webhooks(Duration::from_secs(5)).await);
    assert_eq!(note_bodies(&receiver).len(), 3);
    assert_eq!(sim.release_held_webhooks(), 2);
    receiver
        .wait_for("D", |r| r.body["object_attributes"]["note"] == "D")
        .await;
    assert_eq!(note_bodies(&receiver), vec!["B", "A", "C", "E", "D"]);
}

#[tokio::test]
async fn control_api_over_http() {
    let sim = start_sim().await;
    let receiver = Receiver::start().await;
    let client = reqwest::Client::new();
    let control = sim.control_url();
    let post = |path: &str, body: Value| client.post(format!("{control}{path}")).json(&body).send();

    let response = post(
        "/users",
        json!({"username": "carol", "token": "carol-token"}),
    )
    .await
    .expect("answered");
    assert_eq!(response.status(), StatusCode::CREATED);
    let response = post(
        "/gitlab/projects",
        json!({
            "path": "ctl/project",
            "default_branch": "trunk",
            "merge_trains_enabled": true,
            "approvals_required": 0,
            "jobs": [
                {"name": "unit", "outcome": "flaky", "fail_times": 1, "reason": "runner_system_failure", "trace": "lost", "duration_secs": 5}
            ],
            "webhook_url": receiver.url,
            "webhook_secret": "tok",
        }),
    )
    .await
    .expect("answered");
    assert_eq!(response.status(), StatusCode::CREATED);
    let project: Value = response.json().await.expect("json");
    assert_eq!(project["default_branch"], "trunk");
    assert_eq!(project["merge_trains_enabled"], true);
    let id = project["id"].as_u64().expect("id");

    let response = post("/gitlab/projects", json!({"path": "ctl/project"}))
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let response = post(
        "/gitlab/projects",
        json!({"path": "x/y", "jobs": [{"name": "j", "outcome": "maybe"}]}),
    )
    .await
    .expect("answered");
    assert!(response.status().is_client_error());

    let api = ApiClient::gitlab(&sim).with_auth(Some("carol-token"));
    api.post(
        &format!("/projects/{id}/repository/commits"),
        commit_body("feat", Some("trunk"), &[("create", "a", "a")]),
    )
    .await;
    let (_, mr) = api
        .post(
            &format!("/projects/{id}/merge_requests"),
            json!({"source_branch": "feat", "target_branch": "trunk", "title": "t"}),
        )
        .await;
    assert_eq!(mr["author"]["username"], "carol");
    let (_, mr) = api
        .get(&format!("/projects/{id}/merge_requests/{}", mr["iid"]))
        .await;
    assert_eq!(mr["head_pipeline"]["status"], "running");

    // Sim time: the 5 s job finishes (and fails once: flaky) after advancing.
    let response = post("/advance", json!({"seconds": 6}))
        .await
        .expect("answered");
    let time: Value = response.json().await.expect("json");
    assert!(time["offset_seconds"].as_f64().expect("offset") >= 6.0);
    let mr = api
        .poll(&format!("/projects/{id}/merge_requests/1"), |mr| {
            mr["head_pipeline"]["status"] == "failed"
        })
        .await;
    assert_eq!(mr["detailed_merge_status"], "ci_must_pass");

    // A human moves the target branch.
    let response = post(
        &format!("/gitlab/projects/{id}/push"),
        json!({"branch": "trunk", "files": {"b": "b"}, "author": "dave"}),
    )
    .await
    .expect("answered");
    assert_eq!(response.status(), StatusCode::CREATED);
    let pushed: Value = response.json().await.expect("json");
    assert_eq!(
        sim.gitlab_branch_head(id, "trunk").as_deref(),
        pushed["sha"].as_str()
    );

    // Approve and discussions through the control API.
    let response = post(
        &format!("/gitlab/projects/{id}/merge_requests/1/approve"),
        json!({"username": "erin"}),
    )
    .await
    .expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    let (_, approvals) = api
        .get(&format!("/projects/{id}/merge_requests/1/approvals"))
        .await;
    assert_eq!(approvals["approved_by"][0]["user"]["username"], "erin");

    // Faults over HTTP.
    let response = post(
        "/faults",
        json!({"method": "GET", "path_prefix": "/api/v4/user", "kind": "status", "status": 503}),
    )
    .await
    .expect("answered");
    assert_eq!(response.status(), StatusCode::CREATED);
    let (status, _) = api.get("/user").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let response = client
        .get(format!("{control}/faults"))
        .send()
        .await
        .expect("answered");
    let faults: Value = response.json().await.expect("json");
    assert_eq!(faults["http"][0]["fired"], 1);
    let response = post(
        "/webhook_faults",
        json!({"kind": "drop", "event": "Note Hook", "count": 1}),
    )
    .await
    .expect("answered");
    assert_eq!(response.status(), StatusCode::CREATED);

    // Request log, filtered.
    let response = client
        .get(format!(
            "{control}/requests?path_prefix=/api/v4/projects&method=POST"
        ))
        .send()
        .await
        .expect("answered");
    let log: Value = response.json().await.expect("json");
    let entries = log.as_array().expect("entries");
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["method"], "POST");
    assert_eq!(entries[0]["status"], 201);
    assert!(entries[0]["time"].is_string());
    assert!(
        entries
            .iter()
            .all(|e| !e["path"].as_str().unwrap_or("").starts_with("/_sim"))
    );

    // Webhook delivery log.
    let response = post("/webhooks/flush", json!({})).await.expect("answered");
    let flushed: Value = response.json().await.expect("json");
    assert_eq!(flushed["idle"], true);
    let response = client
        .get(format!("{control}/webhooks"))
        .send()
        .await
        .expect("answered");
    let deliveries: Value = response.json().await.expect("json");
    assert!(
        deliveries
            .as_array()
            .expect("deliveries")
            .iter()
            .any(|d| d["event"] == "Pipeline Hook")
    );
    assert!(
        receiver
            .all()
            .iter()
            .all(|r| r.headers["x-gitlab-token"] == "tok")
    );

    let response = client
        .get(format!("{control}/gitlab/projects/ctl%2Fproject"))
        .send()
        .await
        .expect("answered");
    let summary: Value = response.json().await.expect("json");
    assert_eq!(summary["branches"]["feat"].as_str().map(str::len), Some(40));
    let response = client
        .get(format!("{control}/gitlab/projects/999"))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[test]
fn binary_prints_its_urls_and_serves() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_forge-sim"))
        .args(["--port", "0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("binary starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut printed = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("utf-8 line");
        let done = line.trim_start().starts_with("control:");
        printed.push(line);
        if done {
            break;
        }
    }
    let url_of = |label: &str| {
        printed
            .iter()
            .find_map(|l| {
                l.trim_start()
                    .strip_prefix(label)
                    .map(|rest| rest.trim().to_string())
            })
            .unwrap_or_else(|| panic!("{label} line in {printed:?}"))
    };
    let gitlab = url_of("GitLab:");
    let control = url_of("control:");
    assert!(gitlab.ends_with("/api/v4"), "{gitlab}");
    assert!(url_of("GitHub:").starts_with("http://127.0.0.1:"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let health = runtime.block_on(async {
        let response = reqwest::get(format!("{control}/health"))
            .await
            .expect("answered");
        response.json::<Value>().await.expect("json")
    });
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(health["ok"], true);
}

#[tokio::test]
async fn serves_concurrent_requests() {
    let sim = start_sim().await;
    let project = sim
        .gitlab_project("g/busy")
        .no_ci()
        .create()
        .expect("project");
    let api = std::sync::Arc::new(ApiClient::gitlab(&sim));
    let mut tasks = Vec::new();
    for n in 0..20 {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            api.post(
                &format!("/projects/{project}/repository/commits"),
                commit_body(&format!("b{n}"), Some("main"), &[("create", "f", "x")]),
            )
            .await
            .0
        }));
    }
    for task in tasks {
        assert_eq!(task.await.expect("joined"), StatusCode::CREATED);
    }
    let (_, branches) = api
        .get(&format!(
            "/projects/{project}/repository/branches?per_page=100"
        ))
        .await;
    assert_eq!(branches.as_array().map(Vec::len), Some(21));
}

#[tokio::test]
async fn a_delayed_webhook_is_delivered_after_later_ones_and_flush_waits_for_it() {
    let sim = start_sim().await;
    let receiver = Receiver::start().await;
    let (project, api) = project_with_mr(&sim, &receiver).await;
    let rule = sim.add_webhook_fault(
        WebhookFaultRule::new(WebhookFaultKind::Delay, Some("Note Hook"), 1)
            .delay(Duration::from_millis(300)),
    );
    note(&api, project, "A").await;
    note(&api, project, "B").await;
    assert!(sim.flush_webhooks(Duration::from_secs(5)).await);
    assert_eq!(note_bodies(&receiver), vec!["B", "A"], "A was held back");
    let deliveries = sim.webhook_deliveries();
    let outcomes: Vec<&str> = deliveries
        .iter()
        .filter(|d| d.event == "Note Hook")
        .map(|d| d.outcome.as_str())
        .collect();
    assert_eq!(outcomes, ["delayed", "delivered", "delivered"]);
    let listed: Value = reqwest::get(format!("{}/faults", sim.control_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        listed.to_string().contains(&format!("\"id\":{rule}")),
        "{listed}"
    );
}

#[tokio::test]
async fn probabilistic_faults_hit_a_share_of_requests_and_rate_limits_say_when_to_retry() {
    let sim = start_sim().await;
    let seeded = reqwest::Client::new()
        .post(format!("{}/faults/seed", sim.control_url()))
        .json(&json!({"seed": 42}))
        .send()
        .await
        .unwrap();
    assert_eq!(seeded.status(), StatusCode::NO_CONTENT);
    let project = sim.gitlab_project("g/p").create().expect("project");
    let api = ApiClient::gitlab(&sim);
    let path = format!("/projects/{project}/repository/branches");
    sim.add_fault(
        FaultRule::new(
            "GET",
            &format!("/api/v4{path}"),
            HttpFault::RateLimit {
                retry_after_secs: 3,
            },
        )
        .probability(0.3)
        .times(u32::MAX),
    );
    let mut limited = 0;
    for _ in 0..200 {
        let (status, headers, _) = api.get_with_headers(&path).await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            limited += 1;
            assert_eq!(headers["retry-after"], "3");
        } else {
            assert_eq!(status, StatusCode::OK);
        }
    }
    assert!((30..90).contains(&limited), "{limited} of 200 at 30%");
    let faulted = sim
        .requests()
        .iter()
        .filter(|r| r.fault.as_deref() == Some("rate_limit 3s"))
        .count();
    assert_eq!(faulted, limited, "the request log names each fault");
}
