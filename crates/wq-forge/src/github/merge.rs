//! Merging through `merge-async`: the submit, following a pending
//! request, and how each answer maps to an outcome or an error.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::GithubClient;
use super::http::{Answer, Call, Repo};
use super::wire;
use crate::error::{ForgeError, ForgeErrorKind, ForgeResult};
use crate::model::{MergeMethod, MergeOutcome, MergeParams};

/// The shortest wait between two reads of a pending `merge-async` request.
pub const MERGE_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// How long `merge_change` follows a pending `merge-async` request.
pub const MERGE_BUDGET: Duration = Duration::from_secs(120);

/// Where a `merge-async` answer leaves the merge.
enum Step {
    Done(MergeOutcome),
    /// Pending: follow the request with this uuid.
    Poll(String),
}

impl GithubClient {
    /// `PUT pulls/:n/merge-async` with `merge_action: default` (GitHub
    /// picks the merge queue when the base branch requires it), the head
    /// bound through `sha`. `merged` is [`MergeOutcome::Merged`] (also for
    /// an already merged pull request), `enqueued` [`MergeOutcome::Queued`];
    /// `pending` is followed through `GET merge-async/:uuid`; a 409 for a
    /// request already pending resumes that request (no second `PUT`).
    ///
    /// Errors: a moved head is [`ForgeErrorKind::Conflict`]; `failed`
    /// carries GitHub's `details.message` (`Rejected`); 405 is `Rejected`,
    /// 422 `Invalid`; a request that expired while followed is `NotFound`;
    /// `pending` without a uuid and any unknown status fail closed
    /// (`Rejected`); a request still pending after the budget is
    /// `Unavailable`.
    pub(super) async fn merge_change(
        &self,
        project: &str,
        number: u64,
        request: &MergeParams<'_>,
    ) -> ForgeResult<MergeOutcome> {
        let repo = Repo::parse(project)?;
        let n = number.to_string();
        let mut body = json!({ "merge_action": "default" });
        if let Some(method) = request.method {
            body["merge_method"] = json!(method_str(method));
        }
        if let Some(sha) = request.expected_head_sha {
            body["sha"] = json!(sha);
        }
        if let Some(message) = request.commit_message {
            body["commit_message"] = json!(message);
        }
        let what = format!("merge of {project}#{number}");
        let call = Call::repo(Method::PUT, &repo, &["pulls", &n, "merge-async"]).body(body);
        // The budget bounds the whole call: a read started just before it
        // ends does not get its own full request timeout on top.
        let merge = async {
            let answer = self.http.answer(&call).await?;
            match submit_step(&what, &answer, request)? {
                Step::Done(outcome) => Ok(outcome),
                Step::Poll(uuid) => {
                    self.follow_merge(&repo, number, &uuid, request, &what)
                        .await
                }
            }
        };
        tokio::time::timeout(self.merge_budget, merge)
            .await
            .unwrap_or_else(|_| {
                Err(ForgeError::unavailable(format!(
                    "{what}: no final answer from GitHub within the {} s budget; \
                     a pending request stays with GitHub and the next merge call resumes it",
                    self.merge_budget.as_secs()
                )))
            })
    }

    /// Follows a pending `merge-async` request until it ends, waiting
    /// `merge_poll_interval` before each read, within `merge_budget`.
    /// Dropping the future stops following (GitHub keeps the request; the
    /// next `merge_change` resumes it through the 409).
    pub(super) async fn follow_merge(
        &self,
        repo: &Repo<'_>,
        number: u64,
        uuid: &str,
        params: &MergeParams<'_>,
        what: &str,
    ) -> ForgeResult<MergeOutcome> {
        let started = tokio::time::Instant::now();
        let n = number.to_string();
        let call = Call::repo(Method::GET, repo, &["pulls", &n, "merge-async", uuid]);
        loop {
            if started.elapsed() + self.merge_poll_interval > self.merge_budget {
                return Err(ForgeError::unavailable(format!(
                    "{what}: GitHub's merge request {uuid} is still pending after {} s; \
                     GitHub keeps it and the next merge call resumes it",
                    started.elapsed().as_secs()
                )));
            }
            tokio::time::sleep(self.merge_poll_interval).await;
            let answer = self.http.answer(&call).await?;
            if answer.status == StatusCode::NOT_FOUND {
                return Err(ForgeError::new(
                    ForgeErrorKind::NotFound,
                    Some(404),
                    format!("{what}: GitHub's merge request {uuid} expired or is unknown"),
                ));
            }
            if !answer.status.is_success() {
                let error = answer.error();
                return Err(ForgeError {
                    message: format!("{what}: reading merge request {uuid}: {}", error.message),
                    ..error
                });
            }
            match result_step(what, answer.status, &answer.json(), params)? {
                Step::Done(outcome) => return Ok(outcome),
                Step::Poll(_) => continue,
            }
        }
    }
}

/// How a `PUT merge-async` answer continues.
fn submit_step(what: &str, answer: &Answer, params: &MergeParams<'_>) -> ForgeResult<Step> {
    let body = answer.json();
    let status = answer.status;
    match status.as_u16() {
        200..=299 => result_step(what, status, &body, params),
        409 => {
            // A request already exists for this pull request: resume it.
            // A call bound to a head resumes only a request bound to the
            // same head: one naming no head could merge any revision.
            let pending = body.get("status").and_then(Value::as_str) == Some("pending");
            let theirs = wire::details_str(&body, "expected_head_sha");
            let same_head = params
                .expected_head_sha
                .is_none_or(|ours| theirs == Some(ours));
            match wire::details_str(&body, "uuid") {
                Some(uuid) if pending && same_head => Ok(Step::Poll(uuid.to_owned())),
                _ => Err(conflict(what, status, &body)),
            }
        }
        400 if body.get("status").and_then(Value::as_str) == Some("failed") => {
            Err(failed(what, status, &body))
        }
        405 => Err(ForgeError::rejected(
            Some(405),
            format!("{what}: not mergeable: {}", answer.error().message),
        )),
        422 => Err(ForgeError::new(
            ForgeErrorKind::Invalid,
            Some(422),
            format!("{what}: {}", answer.error().message),
        )),
        _ => {
            let error = answer.error();
            Err(ForgeError {
                message: format!("{what}: {}", error.message),
                ..error
            })
        }
    }
}

/// How a `merge-async` result (`{status, details}`) continues. Only
/// `merged` and `enqueued` are successes; anything GitHub may add later
/// fails closed.
fn result_step(
    what: &str,
    status: StatusCode,
    body: &Value,
    params: &MergeParams<'_>,
) -> ForgeResult<Step> {
    match body.get("status").and_then(Value::as_str) {
        Some("merged") => Ok(Step::Done(MergeOutcome::Merged {
            commit_sha: wire::details_str(body, "sha").map(str::to_owned),
        })),
        Some("enqueued") => Ok(Step::Done(MergeOutcome::Queued)),
        Some("pending") => match wire::details_str(body, "uuid") {
            Some(uuid) => {
                let theirs = wire::details_str(body, "expected_head_sha");
                match (theirs, params.expected_head_sha) {
                    (Some(theirs), Some(ours)) if theirs != ours => {
                        Err(conflict(what, status, body))
                    }
                    _ => Ok(Step::Poll(uuid.to_owned())),
                }
            }
            None => Err(ForgeError::rejected(
                Some(status.as_u16()),
                format!(
                    "{what}: GitHub answered pending without details.uuid; \
                     the request cannot be followed"
                ),
            )),
        },
        Some("failed") => Err(failed(what, status, body)),
        other => Err(ForgeError::rejected(
            Some(status.as_u16()),
            format!(
                "{what}: GitHub answered status {}; not taken as merged or queued",
                other.map_or_else(|| "(none)".to_owned(), |s| format!("{s:?}"))
            ),
        )),
    }
}

/// True when GitHub's message says the head is not the expected one.
fn head_mismatch(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    [
        "head branch was modified",
        "expected head",
        "expected_head_sha",
        "head sha",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}

fn message_of(body: &Value) -> String {
    wire::details_str(body, "message")
        .or_else(|| body.get("message").and_then(Value::as_str))
        .unwrap_or("no message")
        .to_owned()
}

/// A `failed` merge request: `Conflict` when the head moved, else
/// `Rejected`, with GitHub's `details.message`.
fn failed(what: &str, status: StatusCode, body: &Value) -> ForgeError {
    let message = message_of(body);
    if head_mismatch(&message) {
        return conflict(what, status, body);
    }
    ForgeError::rejected(Some(status.as_u16()), format!("{what} failed: {message}"))
}

fn conflict(what: &str, status: StatusCode, body: &Value) -> ForgeError {
    let mut message = format!("{what}: {}", message_of(body));
    if let Some(expected) = wire::details_str(body, "expected_head_sha") {
        message.push_str(&format!(" (expected head {expected})"));
    }
    ForgeError::new(ForgeErrorKind::Conflict, Some(status.as_u16()), message)
}

fn method_str(method: MergeMethod) -> &'static str {
    match method {
        MergeMethod::Merge => "merge",
        MergeMethod::Squash => "squash",
        MergeMethod::Rebase => "rebase",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: Value) -> Answer {
        Answer {
            status: StatusCode::from_u16(status).expect("status"),
            headers: reqwest::header::HeaderMap::new(),
            body: serde_json::to_vec(&body).expect("json"),
        }
    }

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn merge_answers_map_to_outcomes_and_errors() {
        let bound = MergeParams {
            expected_head_sha: Some(SHA),
            ..MergeParams::default()
        };
        let step = |status: u16, body: Value| submit_step("m", &answer(status, body), &bound);
        assert!(matches!(
            step(200, json!({"status": "merged", "details": {"sha": SHA}})),
            Ok(Step::Done(MergeOutcome::Merged { commit_sha: Some(sha) })) if sha == SHA
        ));
        assert!(matches!(
            step(200, json!({"status": "enqueued"})),
            Ok(Step::Done(MergeOutcome::Queued))
        ));
        assert!(matches!(
            step(202, json!({"status": "pending", "details": {"uuid": "u1", "expected_head_sha": SHA}})),
            Ok(Step::Poll(uuid)) if uuid == "u1"
        ));
        assert!(matches!(
            step(409, json!({"status": "pending", "details": {"uuid": "u2", "expected_head_sha": SHA}})),
            Ok(Step::Poll(uuid)) if uuid == "u2"
        ));
        // A request binding no head is resumed only by a call binding none.
        let unbound = json!({"status": "pending", "details": {"uuid": "u4"}});
        assert!(matches!(
            step(409, unbound.clone()).err().map(|e| e.kind),
            Some(ForgeErrorKind::Conflict)
        ));
        assert!(matches!(
            submit_step("m", &answer(409, unbound), &MergeParams::default()),
            Ok(Step::Poll(uuid)) if uuid == "u4"
        ));
        let other_head = step(
            409,
            json!({"status": "pending", "details": {"uuid": "u3", "expected_head_sha": "f".repeat(40)}}),
        )
        .err()
        .expect("another head's request is not resumed");
        assert_eq!(other_head.kind, ForgeErrorKind::Conflict);
        let mismatch = step(
            409,
            json!({"message": "Head branch was modified", "details": {"expected_head_sha": SHA}}),
        )
        .err()
        .expect("head mismatch");
        assert_eq!(mismatch.kind, ForgeErrorKind::Conflict);
        assert!(mismatch.message.contains(SHA), "{}", mismatch.message);
        let no_uuid = step(202, json!({"status": "pending", "details": {}}))
            .err()
            .expect("pending without uuid");
        assert_eq!(no_uuid.kind, ForgeErrorKind::Rejected);
        assert!(
            no_uuid.message.contains("details.uuid"),
            "{}",
            no_uuid.message
        );
        let failed = step(
            200,
            json!({"status": "failed", "details": {"message": "Rules violated"}}),
        )
        .err()
        .expect("failed");
        assert_eq!(failed.kind, ForgeErrorKind::Rejected);
        assert!(
            failed.message.contains("Rules violated"),
            "{}",
            failed.message
        );
        let unknown = step(200, json!({"status": "scheduled"}))
            .err()
            .expect("unknown status fails closed");
        assert_eq!(unknown.kind, ForgeErrorKind::Rejected);
        assert!(
            unknown.message.contains("\"scheduled\""),
            "{}",
            unknown.message
        );
        let not_mergeable = step(405, json!({"message": "Pull Request is not mergeable"}))
            .err()
            .expect("405");
        assert_eq!(not_mergeable.kind, ForgeErrorKind::Rejected);
        assert!(
            not_mergeable
                .message
                .contains("Pull Request is not mergeable")
        );
        let invalid = step(422, json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest", "field": "merge_method", "code": "invalid"}]}))
            .err()
            .expect("422");
        assert_eq!(invalid.kind, ForgeErrorKind::Invalid);
        assert!(
            invalid.message.contains("merge_method"),
            "{}",
            invalid.message
        );
    }
}
