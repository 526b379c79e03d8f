//! GitLab webhook deliveries: the `X-Gitlab-Token` check and the payloads
//! of merge request, pipeline, job and comment events.
//!
//! Field names follow GitLab's "Webhook events" documentation. Only what
//! finds the item is read; the stored raw body keeps the rest (DDR-33).

use serde_json::Value;
use subtle::ConstantTimeEq;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime};

use crate::events::{ChangeAction, ForgeEvent, WebhookRejection};
use crate::model::{ChangeState, CiStatus};
use crate::payload::{at, header, malformed, opt_str, opt_u64, req_str, req_u64};

/// The header naming a delivery's event.
pub const EVENT_HEADER: &str = "x-gitlab-event";

/// Authenticates and parses one delivery. `secret` is the configured
/// webhook secret; `None` (or empty) refuses every delivery.
pub fn parse(
    secret: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<ForgeEvent, WebhookRejection> {
    authenticate(secret, headers)?;
    parse_unverified(headers, body)
}

/// Parses one delivery whose origin is already established (a trusted
/// channel, or [`parse`] after its check).
pub fn parse_unverified(
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<ForgeEvent, WebhookRejection> {
    let event =
        header(headers, EVENT_HEADER).ok_or_else(|| malformed("header x-gitlab-event: missing"))?;
    let handled = matches!(
        event,
        "Merge Request Hook" | "Pipeline Hook" | "Job Hook" | "Note Hook"
    );
    if !handled {
        return Ok(ForgeEvent::Ignored {
            reason: format!("GitLab event {event:?} is not handled"),
        });
    }
    let payload: Value =
        serde_json::from_slice(body).map_err(|e| malformed(format!("body: not JSON ({e})")))?;
    if !payload.is_object() {
        return Err(malformed("body: not a JSON object"));
    }
    match event {
        "Merge Request Hook" => merge_request_event(&payload),
        "Pipeline Hook" => pipeline_event(&payload),
        "Job Hook" => job_event(&payload),
        _ => note_event(&payload),
    }
}

fn authenticate(secret: Option<&str>, headers: &[(&str, &str)]) -> Result<(), WebhookRejection> {
    let Some(secret) = secret.filter(|s| !s.is_empty()) else {
        return Err(WebhookRejection::Unauthenticated(
            "no webhook secret is configured for this forge".into(),
        ));
    };
    let Some(token) = header(headers, "x-gitlab-token") else {
        return Err(WebhookRejection::Unauthenticated(
            "header x-gitlab-token: missing".into(),
        ));
    };
    if bool::from(token.as_bytes().ct_eq(secret.as_bytes())) {
        Ok(())
    } else {
        Err(WebhookRejection::Unauthenticated(
            "header x-gitlab-token: does not match the configured secret".into(),
        ))
    }
}

fn change_state(payload: &Value, path: &str) -> Result<ChangeState, WebhookRejection> {
    match req_str(payload, path)?.as_str() {
        "opened" => Ok(ChangeState::Open),
        "closed" => Ok(ChangeState::Closed),
        "merged" => Ok(ChangeState::Merged),
        "locked" => Ok(ChangeState::Locked),
        other => Err(malformed(format!("{path}: unknown state {other:?}"))),
    }
}

fn merge_request_event(payload: &Value) -> Result<ForgeEvent, WebhookRejection> {
    let has_new_commits = opt_str(payload, "object_attributes.oldrev").is_some();
    let action = match opt_str(payload, "object_attributes.action").as_deref() {
        Some("open") => ChangeAction::Opened,
        Some("update") if has_new_commits => ChangeAction::Pushed,
        Some("update") => ChangeAction::Updated,
        Some("approved" | "approval") => ChangeAction::Approved,
        Some("unapproved" | "unapproval") => ChangeAction::Unapproved,
        Some("merge") => ChangeAction::Merged,
        Some("close") => ChangeAction::Closed,
        Some("reopen") => ChangeAction::Reopened,
        _ => ChangeAction::Other,
    };
    Ok(ForgeEvent::Change {
        project: req_str(payload, "project.path_with_namespace")?,
        number: req_u64(payload, "object_attributes.iid")?,
        action,
        state: change_state(payload, "object_attributes.state")?,
        source_branch: opt_str(payload, "object_attributes.source_branch"),
        head_sha: opt_str(payload, "object_attributes.last_commit.id"),
        label: None,
    })
}

fn pipeline_event(payload: &Value) -> Result<ForgeEvent, WebhookRejection> {
    Ok(ForgeEvent::Pipeline {
        project: req_str(payload, "project.path_with_namespace")?,
        pipeline_id: req_u64(payload, "object_attributes.id")?,
        status: CiStatus::from_forge(&req_str(payload, "object_attributes.status")?),
        sha: opt_str(payload, "object_attributes.sha"),
        number: match opt_u64(payload, "merge_request.iid")? {
            Some(iid) => Some(iid),
            None => opt_str(payload, "object_attributes.ref")
                .as_deref()
                .and_then(merge_request_of_ref),
        },
        ref_name: opt_str(payload, "object_attributes.ref"),
    })
}

/// The merge request a merge request pipeline's ref names:
/// `refs/merge-requests/<iid>/head` (merge request pipelines),
/// `/merge` (merged results) or `/train` (merge trains).
pub fn merge_request_of_ref(reference: &str) -> Option<u64> {
    let rest = reference.strip_prefix("refs/merge-requests/")?;
    let (iid, kind) = rest.split_once('/')?;
    matches!(kind, "head" | "merge" | "train")
        .then(|| iid.parse().ok())
        .flatten()
}

fn job_event(payload: &Value) -> Result<ForgeEvent, WebhookRejection> {
    if let Some(kind) = opt_str(payload, "object_kind")
        && kind != "build"
    {
        return Err(malformed(format!(
            "object_kind: {kind:?} in a Job Hook (expected \"build\")"
        )));
    }
    let status = req_str(payload, "build_status")?;
    // GitLab fills build_failure_reason for jobs that did not fail too
    // (`unknown_failure`); it only means something for failed jobs.
    let failure_reason = opt_str(payload, "build_failure_reason").filter(|_| status == "failed");
    let finished_at = match opt_str(payload, "build_finished_at") {
        Some(text) => Some(
            parse_hook_time(&text)
                .ok_or_else(|| malformed(format!("build_finished_at: unreadable time {text:?}")))?,
        ),
        None => match opt_str(payload, "build_finished_at_iso") {
            Some(text) => Some(parse_hook_time(&text).ok_or_else(|| {
                malformed(format!("build_finished_at_iso: unreadable time {text:?}"))
            })?),
            None => None,
        },
    };
    Ok(ForgeEvent::Job {
        project: req_str(payload, "project.path_with_namespace")?,
        pipeline_id: req_u64(payload, "pipeline_id")?,
        job_id: req_u64(payload, "build_id")?,
        name: req_str(payload, "build_name")?,
        stage: opt_str(payload, "build_stage"),
        status,
        failure_reason,
        finished_at,
        number: opt_str(payload, "ref")
            .as_deref()
            .and_then(merge_request_of_ref),
        ref_name: opt_str(payload, "ref"),
        sha: opt_str(payload, "sha"),
    })
}

fn note_event(payload: &Value) -> Result<ForgeEvent, WebhookRejection> {
    let target = req_str(payload, "object_attributes.noteable_type")?;
    if target != "MergeRequest" {
        return Ok(ForgeEvent::Ignored {
            reason: format!("comment on a {target}, not a merge request"),
        });
    }
    Ok(ForgeEvent::Note {
        project: req_str(payload, "project.path_with_namespace")?,
        number: req_u64(payload, "merge_request.iid")?,
        note_id: req_u64(payload, "object_attributes.id")?,
        author: opt_str(payload, "user.username").unwrap_or_default(),
        body: at(payload, "object_attributes.note")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    })
}

/// GitLab's webhook times: `2021-02-23 02:41:37 UTC` (most hooks),
/// `2021-02-23 02:41:37 +0100` (older ones) or RFC 3339
/// (`2021-02-23T02:41:37.886Z`, the `*_iso` fields).
pub fn parse_hook_time(text: &str) -> Option<OffsetDateTime> {
    let text = text.trim();
    if let Ok(time) = OffsetDateTime::parse(text, &Rfc3339) {
        return Some(time);
    }
    if let Some(local) = text.strip_suffix(" UTC") {
        let format = format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
        return PrimitiveDateTime::parse(local, format)
            .ok()
            .map(PrimitiveDateTime::assume_utc);
    }
    let format = format_description!(
        "[year]-[month]-[day] [hour]:[minute]:[second] [offset_hour sign:mandatory][offset_minute]"
    );
    OffsetDateTime::parse(text, format).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn merge_request_refs_name_their_merge_request() {
        assert_eq!(
            merge_request_of_ref("refs/merge-requests/12/head"),
            Some(12)
        );
        assert_eq!(merge_request_of_ref("refs/merge-requests/3/merge"), Some(3));
        assert_eq!(merge_request_of_ref("refs/merge-requests/3/train"), Some(3));
        for other in [
            "main",
            "wq/feature",
            "refs/merge-requests/x/head",
            "refs/merge-requests/12/other",
            "refs/merge-requests/12",
            "refs/heads/refs/merge-requests/12/head",
        ] {
            assert_eq!(merge_request_of_ref(other), None, "{other}");
        }
    }

    #[test]
    fn hook_times_in_gitlab_formats() {
        assert_eq!(
            parse_hook_time("2021-02-23 02:41:37 UTC"),
            Some(datetime!(2021-02-23 02:41:37 UTC))
        );
        assert_eq!(
            parse_hook_time("2021-02-23T02:41:37.886Z"),
            Some(datetime!(2021-02-23 02:41:37.886 UTC))
        );
        assert_eq!(
            parse_hook_time("2021-02-23T02:41:37Z"),
            Some(datetime!(2021-02-23 02:41:37 UTC))
        );
        assert_eq!(
            parse_hook_time("2021-04-28 21:50:00 +0200"),
            Some(datetime!(2021-04-28 19:50:00 UTC))
        );
        for bad in [
            "",
            "yesterday",
            "2021-02-23",
            "2021-02-30 02:41:37 UTC",
            "2021-02-23 02:41:37 CET",
        ] {
            assert_eq!(parse_hook_time(bad), None, "{bad}");
        }
    }

    fn job_payload(finished: Value) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "object_kind": "build", "build_id": 3, "build_name": "unit", "build_stage": "test",
            "build_status": "failed", "build_failure_reason": "script_failure",
            "build_finished_at": finished, "pipeline_id": 2,
            "project": {"path_with_namespace": "g/p"},
        }))
        .expect("json")
    }

    const HEADERS: [(&str, &str); 2] = [("x-gitlab-token", "s"), ("x-gitlab-event", "Job Hook")];

    #[test]
    fn job_hook_finished_at_both_formats_and_bad_time_is_malformed() {
        for (text, expected) in [
            (
                "2021-02-23 02:41:37 UTC",
                datetime!(2021-02-23 02:41:37 UTC),
            ),
            ("2021-02-23T02:41:37Z", datetime!(2021-02-23 02:41:37 UTC)),
        ] {
            let event = parse(Some("s"), &HEADERS, &job_payload(text.into())).expect(text);
            let ForgeEvent::Job {
                finished_at,
                failure_reason,
                ..
            } = event
            else {
                panic!("not a job event: {event:?}");
            };
            assert_eq!(finished_at, Some(expected));
            assert_eq!(failure_reason.as_deref(), Some("script_failure"));
        }
        let running = parse(Some("s"), &HEADERS, &job_payload(Value::Null)).expect("null time");
        assert!(matches!(
            running,
            ForgeEvent::Job {
                finished_at: None,
                ..
            }
        ));
        let error = parse(Some("s"), &HEADERS, &job_payload("later".into())).expect_err("bad");
        assert_eq!(
            error,
            WebhookRejection::Malformed("build_finished_at: unreadable time \"later\"".into())
        );
    }

    #[test]
    fn empty_secret_refuses_everything() {
        let error = parse(Some(""), &[("x-gitlab-token", "")], b"{}").expect_err("empty secret");
        assert!(matches!(error, WebhookRejection::Unauthenticated(_)));
    }

    #[test]
    fn missing_fields_name_the_field() {
        let headers = [
            ("x-gitlab-token", "s"),
            ("x-gitlab-event", "Merge Request Hook"),
        ];
        let body = br#"{"object_kind":"merge_request","project":{"path_with_namespace":"g/p"},"object_attributes":{"state":"opened"}}"#;
        assert_eq!(
            parse(Some("s"), &headers, body),
            Err(WebhookRejection::Malformed(
                "object_attributes.iid: missing".into()
            ))
        );
        let body = br#"{"project":{"path_with_namespace":"g/p"},"object_attributes":{"iid":-1,"state":"opened"}}"#;
        assert_eq!(
            parse(Some("s"), &headers, body),
            Err(WebhookRejection::Malformed(
                "object_attributes.iid: not a non-negative integer".into()
            ))
        );
        let no_event = parse(Some("s"), &[("x-gitlab-token", "s")], b"{}").expect_err("no event");
        assert_eq!(
            no_event,
            WebhookRejection::Malformed("header x-gitlab-event: missing".into())
        );
    }
}
