//! GitHub Actions: workflow runs and jobs for pull-request heads, `workflow_job` webhooks, the
//! job's log behind a redirect to a signed URL that takes no credentials, re-runs.

use crate::{REPO, create_repo};
use forge_sim::github::GithubRepoSpec;
use forge_sim::testing::{ApiClient, Receiver, start_stepped_sim};
use forge_sim::{JobOutcome, JobSpec};
use reqwest::StatusCode;
use serde_json::Value;

const SECRET: &str = "actions secret";

const SHUTDOWN: &str = "##[error]The runner has received a shutdown signal. This can happen when \
                        the runner service is stopped, or a manually started runner is canceled.";

/// A client that follows no redirect and sends the token.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

#[tokio::test]
async fn a_flaky_job_fails_with_a_log_and_passes_when_re_run() {
    let sim = start_stepped_sim().await;
    let hook = Receiver::start().await;
    create_repo(
        &sim,
        GithubRepoSpec::new("octo", "app").webhook(&hook.url, SECRET),
    );
    sim.github_script_workflow(
        REPO,
        "CI",
        vec![
            JobSpec::new("lint", JobOutcome::Success),
            JobSpec::new(
                "unit",
                JobOutcome::flaky(1, "runner_system_failure", SHUTDOWN),
            ),
        ],
    )
    .expect("workflow");
    let gh = ApiClient::github(&sim);
    let head = gh
        .commit_files(REPO, "feature", &[("a.txt", "a\n")], "a")
        .await;
    let number = gh.open_pr(REPO, "feature", "Add a").await;

    // Each request ticks the stepped sim: look until both jobs ended.
    gh.poll(&format!("/repos/{REPO}/commits/{head}/check-runs"), |b| {
        b["total_count"] == 2
            && b["check_runs"]
                .as_array()
                .is_some_and(|runs| runs.iter().all(|r| r["status"] == "completed"))
    })
    .await;
    // The failed job's webhook, as GitHub documents `workflow_job`.
    let failed = hook
        .wait_for("workflow_job completed failure", |r| {
            r.event() == "workflow_job"
                && r.body["action"] == "completed"
                && r.body["workflow_job"]["name"] == "unit"
        })
        .await;
    let job = &failed.body["workflow_job"];
    assert_eq!(job["conclusion"], "failure", "{job}");
    assert_eq!(job["status"], "completed");
    assert_eq!(job["head_sha"], head.as_str());
    assert_eq!(job["head_branch"], "feature");
    assert_eq!(job["run_attempt"], 1);
    assert_eq!(job["workflow_name"], "CI");
    assert_eq!(failed.body["repository"]["full_name"], REPO);
    let steps = job["steps"].as_array().expect("steps");
    assert_eq!(steps[1]["name"], "Run unit");
    assert_eq!(steps[1]["conclusion"], "failure");
    let job_id = job["id"].as_u64().unwrap();
    let run_id = job["run_id"].as_u64().unwrap();
    for action in ["queued", "in_progress"] {
        assert!(
            hook.of("workflow_job")
                .iter()
                .any(|r| r.body["action"] == action && r.body["workflow_job"]["id"] == job_id),
            "{action} was sent"
        );
    }
    // The job is a check run of the Actions app with the same id.
    let (status, run) = gh.get(&format!("/repos/{REPO}/check-runs/{job_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(run["app"]["slug"], "github-actions");
    assert_eq!(run["conclusion"], "failure");
    assert!(
        run["details_url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/actions/runs/{run_id}/job/{job_id}")),
        "{run}"
    );

    // The log: a 302 to another path, which refuses the token and serves the log without it.
    let logs = format!("{}/repos/{REPO}/actions/jobs/{job_id}/logs", gh.base);
    let answer = no_redirects()
        .get(&logs)
        .bearer_auth(forge_sim::DEFAULT_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::FOUND);
    let location = answer.headers()["location"].to_str().unwrap().to_owned();
    assert!(
        location.contains("/_logs/") && location.contains("sig="),
        "{location}"
    );
    let with_token = no_redirects()
        .get(&location)
        .bearer_auth(forge_sim::DEFAULT_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(with_token.status(), StatusCode::FORBIDDEN);
    let log = no_redirects().get(&location).send().await.unwrap();
    assert_eq!(log.status(), StatusCode::OK);
    let text = log.text().await.unwrap();
    assert!(
        text.contains("The runner has received a shutdown signal"),
        "{text}"
    );
    // The URL expires a minute (of sim time) after it was handed out.
    sim.advance(std::time::Duration::from_secs(61));
    let expired = no_redirects().get(&location).send().await.unwrap();
    assert_eq!(expired.status(), StatusCode::FORBIDDEN);
    let forged = location.replace("sig=", "sig=0");
    let refused = no_redirects().get(&forged).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let (status, _) = ApiClient::github(&sim)
        .with_auth(None)
        .get(&format!("/repos/{REPO}/actions/jobs/{job_id}/logs"))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the API wants the token");

    // Re-run: 201 with an empty body; a new attempt with a new job of the same name.
    let rerun = no_redirects()
        .post(format!(
            "{}/repos/{REPO}/actions/jobs/{job_id}/rerun",
            gh.base
        ))
        .bearer_auth(forge_sim::DEFAULT_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(rerun.status(), StatusCode::CREATED);
    assert!(rerun.bytes().await.unwrap().is_empty());
    let all = gh
        .poll(
            &format!("/repos/{REPO}/actions/runs/{run_id}/jobs?filter=all"),
            |b| {
                b["jobs"].as_array().is_some_and(|jobs| {
                    jobs.iter().any(|j| {
                        j["name"] == "unit" && j["run_attempt"] == 2 && j["status"] == "completed"
                    })
                })
            },
        )
        .await;
    let jobs = all["jobs"].as_array().unwrap();
    assert_eq!(all["total_count"], 3, "{all}");
    let again: Vec<&Value> = jobs
        .iter()
        .filter(|j| j["name"] == "unit" && j["id"] != job_id)
        .collect();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0]["conclusion"], "success");
    assert!(again[0]["id"].as_u64().unwrap() > job_id);
    let (_, latest) = gh
        .get(&format!("/repos/{REPO}/actions/runs/{run_id}/jobs"))
        .await;
    assert_eq!(latest["total_count"], 2, "latest attempts only: {latest}");
    let (_, run) = gh
        .get(&format!("/repos/{REPO}/actions/runs/{run_id}"))
        .await;
    assert_eq!(run["run_attempt"], 2);
    assert_eq!(run["conclusion"], "success");
    // The commit's runs, as `GET actions/runs?head_sha=` lists them; another commit has none.
    let (_, runs) = gh
        .get(&format!("/repos/{REPO}/actions/runs?head_sha={head}"))
        .await;
    assert_eq!(runs["total_count"], 1, "{runs}");
    assert_eq!(runs["workflow_runs"][0]["id"], run_id);
    assert_eq!(runs["workflow_runs"][0]["head_sha"], head.as_str());
    let (_, none) = gh
        .get(&format!(
            "/repos/{REPO}/actions/runs?head_sha=0000000000000000000000000000000000000000"
        ))
        .await;
    assert_eq!(none["total_count"], 0, "{none}");
    assert_eq!(none["workflow_runs"], serde_json::json!([]));
    // The pull request's checks pass now: the re-run is the latest check run of `unit`.
    let pr = gh.mergeable(REPO, number).await;
    assert_eq!(pr["mergeable_state"], "clean", "{pr}");
}

#[tokio::test]
async fn a_running_workflow_refuses_a_re_run_and_a_new_head_gets_a_new_run() {
    let sim = start_stepped_sim().await;
    create_repo(&sim, GithubRepoSpec::new("octo", "app"));
    sim.github_script_workflow(
        REPO,
        "CI",
        vec![JobSpec::new("slow", JobOutcome::Success).duration_secs(3600)],
    )
    .expect("workflow");
    let gh = ApiClient::github(&sim);
    gh.commit_files(REPO, "feature", &[("a.txt", "a\n")], "a")
        .await;
    gh.open_pr(REPO, "feature", "Add a").await;
    let jobs = sim.github_workflow_jobs(REPO).unwrap();
    assert_eq!(jobs.len(), 1);
    let job_id = jobs[0]["id"].as_u64().unwrap();
    let (status, body) = gh
        .post(
            &format!("/repos/{REPO}/actions/jobs/{job_id}/rerun"),
            Value::Null,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _) = gh
        .get(&format!("/repos/{REPO}/actions/jobs/{job_id}/logs"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no log before the job ends");

    let second = gh
        .commit_files(REPO, "feature", &[("a.txt", "b\n")], "b")
        .await;
    let jobs = sim.github_workflow_jobs(REPO).unwrap();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    assert_eq!(jobs[1]["head_sha"], second.as_str());
    assert_ne!(jobs[1]["run_id"], jobs[0]["run_id"], "a new run per head");
    let (status, _) = gh.get(&format!("/repos/{REPO}/actions/jobs/999")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
