//! GitHub webhook deliveries: the `X-Hub-Signature-256` check and the
//! payloads of pull request, review, check, status, merge queue, comment and
//! Actions workflow job events.
//!
//! Field names follow GitHub's "Webhook events and payloads" documentation.
//! Only what finds the item is read; the stored raw body keeps the rest
//! (DDR-33).

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::ci::WorkflowJob;
use super::wire::check_word;
use crate::events::{ChangeAction, ForgeEvent, WebhookRejection};
use crate::model::{ChangeState, CiStatus};
use crate::payload::{at, header, malformed, opt_str, req_str, req_u64};

/// The events this client reads; every other event type is `Ignored`
/// without looking at the body.
const HANDLED: [&str; 10] = [
    "pull_request",
    "pull_request_review",
    "pull_request_review_thread",
    "workflow_job",
    "check_run",
    "check_suite",
    "status",
    "merge_group",
    "issue_comment",
    "ping",
];

/// The header naming a delivery's event.
pub const EVENT_HEADER: &str = "x-github-event";

/// Authenticates and parses one delivery. `secret` is the configured
/// webhook secret; `None` (or empty) refuses every delivery.
pub fn parse(
    secret: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<ForgeEvent, WebhookRejection> {
    authenticate(secret, headers, body)?;
    parse_unverified(headers, body)
}

/// Parses one delivery whose origin is already established (a trusted
/// channel, or [`parse`] after its check).
pub fn parse_unverified(
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<ForgeEvent, WebhookRejection> {
    let event =
        header(headers, EVENT_HEADER).ok_or_else(|| malformed("header x-github-event: missing"))?;
    if !HANDLED.contains(&event) {
        return Ok(ForgeEvent::Ignored {
            reason: format!("GitHub event {event:?} is not handled"),
        });
    }
    if event == "ping" {
        return Ok(ForgeEvent::Ignored {
            reason: "GitHub ping (webhook created or tested)".into(),
        });
    }
    let payload: Value =
        serde_json::from_slice(body).map_err(|e| malformed(format!("body: not JSON ({e})")))?;
    if !payload.is_object() {
        return Err(malformed("body: not a JSON object"));
    }
    match event {
        "pull_request" => pull_request_event(&payload),
        "pull_request_review" => review_event(&payload),
        "pull_request_review_thread" => change_event(&payload, ChangeAction::Other),
        "workflow_job" => workflow_job_event(&payload),
        "check_run" => match actions_job_event(&payload)? {
            Some(job) => Ok(job),
            None => checks_event(&payload, "check_run"),
        },
        "check_suite" => checks_event(&payload, "check_suite"),
        "status" => status_event(&payload),
        "merge_group" => merge_group_event(&payload),
        _ => comment_event(&payload),
    }
}

/// `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`, compared
/// in constant time.
fn authenticate(
    secret: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(), WebhookRejection> {
    let Some(secret) = secret.filter(|s| !s.is_empty()) else {
        return Err(WebhookRejection::Unauthenticated(
            "no webhook secret is configured for this forge".into(),
        ));
    };
    let Some(signature) = header(headers, "x-hub-signature-256") else {
        return Err(WebhookRejection::Unauthenticated(
            "header x-hub-signature-256: missing".into(),
        ));
    };
    let wrong = || {
        WebhookRejection::Unauthenticated(
            "header x-hub-signature-256: does not match the body signed with the configured secret"
                .into(),
        )
    };
    let digest = signature
        .trim()
        .strip_prefix("sha256=")
        .and_then(|hex_digest| hex::decode(hex_digest).ok())
        .ok_or_else(wrong)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .map_err(|_| WebhookRejection::Unauthenticated("webhook secret unusable".into()))?;
    mac.update(body);
    mac.verify_slice(&digest).map_err(|_| wrong())
}

fn project(payload: &Value) -> Result<String, WebhookRejection> {
    req_str(payload, "repository.full_name")
}

/// The pull request's lifecycle from `pull_request.state` / `.merged`.
fn pr_state(payload: &Value) -> Result<ChangeState, WebhookRejection> {
    if at(payload, "pull_request.merged").and_then(Value::as_bool) == Some(true) {
        return Ok(ChangeState::Merged);
    }
    match req_str(payload, "pull_request.state")?.as_str() {
        "open" => Ok(ChangeState::Open),
        "closed" => Ok(ChangeState::Closed),
        other => Err(malformed(format!(
            "pull_request.state: unknown state {other:?}"
        ))),
    }
}

fn change_event(payload: &Value, action: ChangeAction) -> Result<ForgeEvent, WebhookRejection> {
    Ok(ForgeEvent::Change {
        project: project(payload)?,
        number: req_u64(payload, "pull_request.number")?,
        action,
        state: pr_state(payload)?,
        source_branch: opt_str(payload, "pull_request.head.ref"),
        head_sha: opt_str(payload, "pull_request.head.sha"),
        label: match action {
            ChangeAction::Labeled => opt_str(payload, "label.name"),
            _ => None,
        },
    })
}

fn pull_request_event(payload: &Value) -> Result<ForgeEvent, WebhookRejection> {
    let action = req_str(payload, "action")?;
    if matches!(action.as_str(), "enqueued" | "dequeued") {
        return Ok(ForgeEvent::Queue {
            project: project(payload)?,
            number: req_u64(payload, "pull_request.number")?,
            action,
        });
    }
    let merged = at(payload, "pull_request.merged").and_then(Value::as_bool) == Some(true);
    let action = match action.as_str() {
        "opened" => ChangeAction::Opened,
        "synchronize" => ChangeAction::Pushed,
        "closed" if merged => ChangeAction::Merged,
        "closed" => ChangeAction::Closed,
        "reopened" => ChangeAction::Reopened,
        "labeled" => ChangeAction::Labeled,
        "edited" | "unlabeled" | "ready_for_review" | "converted_to_draft" => ChangeAction::Updated,
        _ => ChangeAction::Other,
    };
    change_event(payload, action)
}

fn review_event(payload: &Value) -> Result<ForgeEvent, WebhookRejection> {
    let state = opt_str(payload, "review.state")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let action = match opt_str(payload, "action").as_deref() {
        Some("submitted") if state == "approved" => ChangeAction::Approved,
        Some("dismissed") => ChangeAction::Unapproved,
        _ => ChangeAction::Other,
    };
    change_event(payload, action)
}

/// `check_run` / `check_suite`: the pull requests from
/// `<object>.pull_requests[].number`, the branch from `head_branch` (a
/// check run's is on its suite), the result from the conclusion or, while
/// running, the status.
fn checks_event(payload: &Value, object: &str) -> Result<ForgeEvent, WebhookRejection> {
    let checks = at(payload, object).ok_or_else(|| malformed(format!("{object}: missing")))?;
    let numbers = checks
        .get("pull_requests")
        .and_then(Value::as_array)
        .map(|prs| {
            prs.iter()
                .filter_map(|pr| pr.get("number").and_then(Value::as_u64))
                .collect()
        })
        .unwrap_or_default();
    let ref_name =
        opt_str(checks, "head_branch").or_else(|| opt_str(checks, "check_suite.head_branch"));
    let word = opt_str(checks, "conclusion")
        .or_else(|| opt_str(checks, "status"))
        .unwrap_or_default();
    Ok(ForgeEvent::Checks {
        project: project(payload)?,
        sha: opt_str(checks, "head_sha"),
        ref_name,
        numbers,
        status: ci_word(&word),
    })
}

/// `workflow_job` (`queued`, `in_progress`, `completed`, ...): a GitHub
/// Actions job as a [`ForgeEvent::Job`] whose pipeline is the workflow run,
/// its status and failure reason mapped as for listed jobs
/// ([`super::job_status`]).
fn workflow_job_event(payload: &Value) -> Result<ForgeEvent, WebhookRejection> {
    let value = at(payload, "workflow_job").ok_or_else(|| malformed("workflow_job: missing"))?;
    req_u64(value, "id").map_err(|_| malformed("workflow_job.id: missing or not a number"))?;
    req_u64(value, "run_id")
        .map_err(|_| malformed("workflow_job.run_id: missing or not a number"))?;
    let job: WorkflowJob = serde_json::from_value(value.clone())
        .map_err(|e| malformed(format!("workflow_job: {e}")))?;
    let finished_at = job
        .finished_at()
        .map_err(|e| malformed(format!("workflow_job: {}", e.message)))?;
    let status = job.status_word();
    let failure_reason = job.failure_reason().filter(|_| status == "failed");
    Ok(ForgeEvent::Job {
        project: project(payload)?,
        pipeline_id: job.run_id,
        job_id: job.id,
        stage: job.workflow_name.clone().filter(|w| !w.is_empty()),
        status,
        failure_reason,
        finished_at,
        ref_name: job.head_branch.clone().filter(|b| !b.is_empty()),
        number: None,
        sha: job.head_sha.clone().filter(|s| !s.is_empty()),
        name: job.name,
    })
}

/// A completed, failed check run of the GitHub Actions app is its workflow
/// job (same id; the run id is in its `details_url`,
/// `.../actions/runs/<run>/job/<job>`): a [`ForgeEvent::Job`] without a
/// failure reason (a check run has no steps; the job list supplies it).
/// `None` for every other check run.
fn actions_job_event(payload: &Value) -> Result<Option<ForgeEvent>, WebhookRejection> {
    let Some(run) = at(payload, "check_run") else {
        return Ok(None);
    };
    if opt_str(run, "app.slug").as_deref() != Some(ACTIONS_APP_SLUG)
        || opt_str(run, "status").as_deref() != Some("completed")
    {
        return Ok(None);
    }
    let conclusion = opt_str(run, "conclusion");
    let status = super::job_status("completed", conclusion.as_deref());
    if status != "failed" {
        return Ok(None);
    }
    let Some(run_id) = opt_str(run, "details_url")
        .as_deref()
        .and_then(actions_run_id)
    else {
        return Ok(None);
    };
    let finished_at = match opt_str(run, "completed_at") {
        Some(text) => Some(
            OffsetDateTime::parse(&text, &Rfc3339)
                .map_err(|_| malformed(format!("check_run.completed_at: unreadable {text:?}")))?,
        ),
        None => None,
    };
    Ok(Some(ForgeEvent::Job {
        project: project(payload)?,
        pipeline_id: run_id,
        job_id: req_u64(run, "id").map_err(|_| malformed("check_run.id: missing"))?,
        name: req_str(run, "name").map_err(|_| malformed("check_run.name: missing"))?,
        stage: None,
        status,
        failure_reason: None,
        finished_at,
        ref_name: opt_str(run, "check_suite.head_branch"),
        number: None,
        sha: opt_str(run, "head_sha"),
    }))
}

/// The GitHub Actions app's slug.
const ACTIONS_APP_SLUG: &str = "github-actions";

/// The workflow run id in an Actions job's page URL
/// (`https://github.com/o/r/actions/runs/<run>/job/<job>`).
fn actions_run_id(url: &str) -> Option<u64> {
    let path = url.split(['?', '#']).next()?;
    let mut segments = path.split('/').skip_while(|s| *s != "actions");
    segments.next()?;
    if segments.next()? != "runs" {
        return None;
    }
    let run = segments.next()?.parse().ok()?;
    (segments.next()? == "job").then_some(run)
}

/// A commit status: no pull request numbers (GitHub does not say), the
/// branch from `branches[].name` when the commit is a branch head.
fn status_event(payload: &Value) -> Result<ForgeEvent, WebhookRejection> {
    let ref_name = at(payload, "branches")
        .and_then(Value::as_array)
        .and_then(|branches| branches.iter().find_map(|b| opt_str(b, "name")));
    Ok(ForgeEvent::Checks {
        project: project(payload)?,
        sha: opt_str(payload, "sha"),
        ref_name,
        numbers: Vec::new(),
        status: ci_word(&req_str(payload, "state")?),
    })
}

fn ci_word(word: &str) -> CiStatus {
    if word.is_empty() {
        CiStatus::None
    } else {
        check_word(word)
    }
}

/// `merge_group`: the pull request is named in the group's branch,
/// `refs/heads/gh-readonly-queue/<base>/pr-<N>-<sha>`; a branch that does
/// not read like that is ignored.
fn merge_group_event(payload: &Value) -> Result<ForgeEvent, WebhookRejection> {
    let action = req_str(payload, "action")?;
    let head_ref = req_str(payload, "merge_group.head_ref")?;
    let Some(number) = queue_branch_number(&head_ref) else {
        return Ok(ForgeEvent::Ignored {
            reason: format!("merge group branch {head_ref:?} names no pull request"),
        });
    };
    Ok(ForgeEvent::Queue {
        project: project(payload)?,
        number,
        action,
    })
}

/// The pull request number of a merge queue branch
/// (`[refs/heads/]gh-readonly-queue/<base>/pr-<N>-<sha>`; the base may hold
/// slashes).
pub fn queue_branch_number(head_ref: &str) -> Option<u64> {
    let branch = head_ref.strip_prefix("refs/heads/").unwrap_or(head_ref);
    let rest = branch.strip_prefix("gh-readonly-queue/")?;
    let (base, last) = rest.rsplit_once('/')?;
    if base.is_empty() {
        return None;
    }
    let (digits, sha) = last.strip_prefix("pr-")?.split_once('-')?;
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || sha.is_empty()
        || !sha.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    digits.parse().ok().filter(|n| *n > 0)
}

/// Comments on pull requests (`issue.pull_request` is set); comments on
/// plain issues are ignored.
fn comment_event(payload: &Value) -> Result<ForgeEvent, WebhookRejection> {
    if at(payload, "issue.pull_request").is_none() {
        return Ok(ForgeEvent::Ignored {
            reason: "comment on an issue, not a pull request".into(),
        });
    }
    Ok(ForgeEvent::Note {
        project: project(payload)?,
        number: req_u64(payload, "issue.number")?,
        note_id: req_u64(payload, "comment.id")?,
        author: opt_str(payload, "comment.user.login").unwrap_or_default(),
        body: at(payload, "comment.body")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_branches_name_their_pull_request() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(
            queue_branch_number(&format!("refs/heads/gh-readonly-queue/main/pr-42-{sha}")),
            Some(42)
        );
        assert_eq!(
            queue_branch_number(&format!("gh-readonly-queue/release/1.x/pr-7-{sha}")),
            Some(7)
        );
        for bad in [
            format!("refs/heads/main/pr-42-{sha}"),
            format!("refs/heads/gh-readonly-queue/pr-42-{sha}"),
            format!("refs/heads/gh-readonly-queue/main/pr-x-{sha}"),
            format!("refs/heads/gh-readonly-queue/main/pr--{sha}"),
            "refs/heads/gh-readonly-queue/main/pr-42-".to_owned(),
            "refs/heads/gh-readonly-queue/main/pr-42-zz".to_owned(),
            format!("refs/heads/gh-readonly-queue/main/pr-0-{sha}"),
        ] {
            assert_eq!(queue_branch_number(&bad), None, "{bad}");
        }
    }

    #[test]
    fn actions_job_pages_name_their_run() {
        assert_eq!(
            actions_run_id("https://github.com/o/r/actions/runs/42/job/7"),
            Some(42)
        );
        assert_eq!(
            actions_run_id("https://ghe.example.com/o/r/actions/runs/42/job/7?pr=1"),
            Some(42)
        );
        for bad in [
            "https://github.com/o/r/runs/7",
            "https://github.com/o/r/actions/runs/x/job/7",
            "https://github.com/o/r/actions/runs/42",
            "",
        ] {
            assert_eq!(actions_run_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn no_secret_refuses_everything() {
        for secret in [None, Some("")] {
            let error = parse(secret, &[("x-github-event", "ping")], b"{}").expect_err("refused");
            assert!(matches!(error, WebhookRejection::Unauthenticated(_)));
        }
    }
}
