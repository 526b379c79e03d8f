//! Item commands (`POST /api/v1/work-items/{id}/{command}`): a person's
//! manual merge, the explicit retry of a failed automatic merge attempt,
//! and `cancel`: stop managing the item and close its change request with
//! a note.

use wq_core::{CommandReply, FieldError, ItemId, Phase, RequestError};

use crate::MrType;
use crate::store::{MergeResult, MrDetails};

/// The body of `POST /api/v1/work-items/{id}/merge`; both fields optional.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ManualMerge {
    /// `merge`, `squash` or `rebase`; else `mr.merge_method`, else the
    /// forge's project setting.
    merge_method: Option<wq_forge::MergeMethod>,
    /// When given, the forge refuses to merge any other head (409).
    expected_head_sha: Option<String>,
}

impl ManualMerge {
    /// The body (`null` or none: every default), or 422 naming the field
    /// that is wrong.
    fn parse(body: serde_json::Value) -> Result<Self, RequestError> {
        let invalid = |field: &str, message: &str| {
            RequestError::Invalid(vec![FieldError::new(field, message)])
        };
        if body.is_null() {
            return Ok(Self::default());
        }
        // A derived struct would also take an array, by position.
        if !body.is_object() {
            return Err(invalid("body", "must be a JSON object"));
        }
        serde_path_to_error::deserialize(body).map_err(|error| {
            // The path starts with the member that is wrong: a known one
            // of the wrong type, or an unknown one.
            let member = match error.path().iter().next() {
                Some(serde_path_to_error::Segment::Map { key }) => key.clone(),
                _ => String::new(),
            };
            match member.as_str() {
                "merge_method" => invalid(&member, "must be one of merge, squash, rebase"),
                "expected_head_sha" => invalid(&member, "must be a string"),
                _ => invalid(
                    &member,
                    "unknown field (known: merge_method, expected_head_sha)",
                ),
            }
        })
    }
}

/// The event `refresh` stores: the item reads its change request again.
pub const REFRESH_EVENT: &str = "mr.refresh";

/// The event `cancel` stores; the item's loop applies it (`needs_cancel`)
/// and runs the `cancel_mr` executor before anything else.
pub const CANCEL_EVENT: &str = "mr.cancel";
/// Stored with a retry of the item (`POST .../retry`, in its transaction):
/// a change request that was closed is reopened (`reopen_mr`).
pub const RETRIED_EVENT: &str = "mr.retried";

/// Longest `reason` a cancel takes, in characters.
pub const MAX_CANCEL_REASON_CHARS: usize = 500;

/// The body of `POST /api/v1/work-items/{id}/cancel`; optional.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelRequest {
    /// Shown in the status note and the item's `error`.
    reason: Option<String>,
}

impl CancelRequest {
    fn parse(body: serde_json::Value) -> Result<Self, RequestError> {
        let invalid = |field: &str, message: &str| {
            RequestError::Invalid(vec![FieldError::new(field, message)])
        };
        if body.is_null() {
            return Ok(Self::default());
        }
        if !body.is_object() {
            return Err(invalid("body", "must be a JSON object"));
        }
        let request: Self =
            serde_path_to_error::deserialize(body).map_err(|error| {
                match error.path().iter().next() {
                    Some(serde_path_to_error::Segment::Map { key }) if key == "reason" => {
                        invalid("reason", "must be a string")
                    }
                    Some(serde_path_to_error::Segment::Map { key }) => {
                        invalid(key, "unknown field (known: reason)")
                    }
                    _ => invalid("body", "must be a JSON object"),
                }
            })?;
        if let Some(reason) = &request.reason
            && (reason.trim().is_empty()
                || reason.chars().count() > MAX_CANCEL_REASON_CHARS
                || reason.chars().any(char::is_control)
                || crate::spec::check_format_characters(reason).is_err())
        {
            return Err(invalid(
                "reason",
                &format!(
                    "must be one line of 1 to {MAX_CANCEL_REASON_CHARS} characters, without \
                     control or format characters"
                ),
            ));
        }
        Ok(request)
    }
}

/// The event a successful manual merge stores: the item reads the outcome
/// back (merged → completed, queued → the queue entry) at once.
pub const MANUAL_MERGE_EVENT: &str = "mr.manual_merge";

impl MrType {
    /// `POST /api/v1/work-items/{id}/merge`: a person's merge, now, through
    /// the forge (which picks the direct or the queued path). Unlike the
    /// automatic merge it needs no readiness gate of workqueue's and binds
    /// the head only when the caller names one (the forge's own branch
    /// protection still applies). It writes no journal entry: a forge error
    /// changes nothing stored; a success wakes the item to read the result.
    pub(crate) async fn manual_merge(
        &self,
        id: ItemId,
        body: serde_json::Value,
        caller_identity: &str,
    ) -> Result<CommandReply, RequestError> {
        let request = ManualMerge::parse(body)?;
        if request.expected_head_sha.as_deref().is_some_and(|sha| {
            !matches!(sha.len(), 40 | 64) || !sha.bytes().all(|b| b.is_ascii_hexdigit())
        }) {
            return Err(RequestError::Invalid(vec![FieldError::new(
                "expected_head_sha",
                "must be a full commit SHA (40 or 64 hexadecimal digits)",
            )]));
        }
        let details = self.active_details(id, "be merged").await?;
        let Some(number) = details.mr_number else {
            return Err(RequestError::Conflict(
                "the merge request is not created yet".into(),
            ));
        };
        let forge = self.forges.get(&details.spec.forge).ok_or_else(|| {
            RequestError::Unavailable(format!(
                "forge {:?} is not configured on this instance",
                details.spec.forge
            ))
        })?;
        let outcome = forge
            .merge_change(
                &details.spec.project,
                number,
                &wq_forge::MergeParams {
                    expected_head_sha: request.expected_head_sha.as_deref(),
                    method: request.merge_method.or(self.config.merge_method),
                    commit_message: None,
                },
            )
            .await
            .map_err(|error| {
                tracing::warn!(item = %id, number, %error, caller = caller_identity, "manual merge refused by the forge");
                let message = format!("the forge did not merge: {}", error.message);
                match error.kind {
                    wq_forge::ForgeErrorKind::Conflict => RequestError::Conflict(message),
                    wq_forge::ForgeErrorKind::Rejected | wq_forge::ForgeErrorKind::Invalid => {
                        RequestError::BadRequest(message)
                    }
                    _ => RequestError::Upstream(message),
                }
            })?;
        tracing::info!(item = %id, number, outcome = outcome.as_str(), caller = caller_identity, "manual merge");
        let recorded = match self
            .items
            .event_insert(wq_store::NewEvent {
                item_id: id,
                event_type: MANUAL_MERGE_EVENT.to_owned(),
                body: serde_json::json!({ "outcome": outcome.as_str(), "caller": caller_identity }),
                now: self.clock.now(),
                // The audit record says who merged, and how it went.
                origin: Some(wq_store::EventOrigin {
                    actor: caller_identity.to_owned(),
                    delivery_id: None,
                    raw: Some(
                        serde_json::json!({
                            "command": "merge",
                            "outcome": outcome.as_str(),
                            "expected_head_sha": request.expected_head_sha,
                        })
                        .to_string(),
                    ),
                }),
            })
            .await
        {
            Ok(_) => true,
            Err(error) => {
                // The merge happened; the webhook or the next reconcile reads it.
                tracing::warn!(item = %id, %error, "manual merge not recorded as an event");
                false
            }
        };
        Ok(CommandReply {
            status: wq_core::CommandStatus::Done,
            body: serde_json::json!({ "status": outcome.as_str() }),
            // The stored event is for the item to read now.
            wake: recorded,
        })
    }

    /// `POST /api/v1/work-items/{id}/refresh`: read the change request
    /// again now (a reconcile), for a stored error that repeating a merge
    /// would not fix. Stores an event, so a running loop sees it.
    pub(crate) async fn refresh(
        &self,
        id: ItemId,
        caller_identity: &str,
    ) -> Result<CommandReply, RequestError> {
        self.active_details(id, "be refreshed").await?;
        self.items
            .event_insert(wq_store::NewEvent {
                item_id: id,
                event_type: REFRESH_EVENT.to_owned(),
                body: serde_json::json!({ "caller": caller_identity }),
                now: self.clock.now(),
                origin: Some(wq_store::EventOrigin {
                    actor: caller_identity.to_owned(),
                    delivery_id: None,
                    raw: Some(serde_json::json!({ "command": "refresh" }).to_string()),
                }),
            })
            .await
            .map_err(RequestError::from)?;
        Ok(CommandReply {
            status: wq_core::CommandStatus::Accepted,
            body: serde_json::json!({
                "status": "accepted",
                "message": "the change request is read again",
            }),
            wake: true,
        })
    }

    /// `POST /api/v1/work-items/{id}/cancel`: stop managing the item. The
    /// request is stored as an event (with the caller in the audit trail)
    /// and the item's loop carries it out before anything else: the status
    /// note says who cancelled it and why, the change request is closed,
    /// the phase becomes `cancelled` (202). An item already cancelled
    /// answers 200 and changes nothing; a completed or failed one is a 409.
    /// A merge the forge is already carrying out may still win: the item
    /// then completes.
    pub(crate) async fn cancel(
        &self,
        id: ItemId,
        body: serde_json::Value,
        caller_identity: &str,
    ) -> Result<CommandReply, RequestError> {
        let request = CancelRequest::parse(body)?;
        let item = self
            .items
            .item_get(id)
            .await
            .map_err(RequestError::from)?
            .ok_or_else(|| RequestError::NotFound(format!("work item {id} not found")))?;
        match item.phase {
            Phase::Cancelled => {
                return Ok(CommandReply {
                    status: wq_core::CommandStatus::Done,
                    body: serde_json::json!({
                        "status": "cancelled",
                        "message": "the item is already cancelled; nothing changed",
                    }),
                    wake: false,
                });
            }
            Phase::Active => {}
            phase => {
                return Err(RequestError::Conflict(format!(
                    "work item {id} is {}; only active items can be cancelled",
                    phase.as_str()
                )));
            }
        }
        self.items
            .event_insert(wq_store::NewEvent {
                item_id: id,
                event_type: CANCEL_EVENT.to_owned(),
                body: serde_json::json!({ "caller": caller_identity, "reason": request.reason }),
                now: self.clock.now(),
                origin: Some(wq_store::EventOrigin {
                    actor: caller_identity.to_owned(),
                    delivery_id: None,
                    raw: Some(
                        serde_json::json!({ "command": "cancel", "reason": request.reason })
                            .to_string(),
                    ),
                }),
            })
            .await
            .map_err(RequestError::from)?;
        tracing::info!(item = %id, caller = caller_identity, "cancel asked for");
        Ok(CommandReply {
            status: wq_core::CommandStatus::Accepted,
            body: serde_json::json!({
                "status": "accepted",
                "message": "the item is being cancelled: its merge request is closed with a note",
            }),
            wake: true,
        })
    }

    /// The details of an active item, for a command that only active items
    /// take: 404 for an unknown item, 409 naming the phase otherwise.
    async fn active_details(&self, id: ItemId, what: &str) -> Result<MrDetails, RequestError> {
        let item = self
            .items
            .item_get(id)
            .await
            .map_err(RequestError::from)?
            .ok_or_else(|| RequestError::NotFound(format!("work item {id} not found")))?;
        if item.phase != Phase::Active {
            return Err(RequestError::Conflict(format!(
                "work item {id} is {}; only active items can {what}",
                item.phase.as_str()
            )));
        }
        self.store
            .get(id)
            .await
            .map_err(RequestError::from)?
            .ok_or_else(|| RequestError::NotFound(format!("work item {id} has no mr details")))
    }

    /// `POST /api/v1/work-items/{id}/retry-merge`: the explicit one-shot
    /// retry of a failed (or expired in-flight) automatic merge attempt.
    pub(crate) async fn retry_merge(&self, id: ItemId) -> Result<CommandReply, RequestError> {
        let now = self.clock.now();
        let details = self.active_details(id, "retry a merge").await?;
        let deadline = Self::seconds(self.config.merge_attempt_deadline_seconds);
        let cutoff = now - deadline;
        match details.journal.result {
            None => {
                return Err(RequestError::Conflict(
                    "no merge attempt has been made; nothing to retry".into(),
                ));
            }
            Some(MergeResult::Accepted) => {
                return Err(RequestError::Conflict(
                    "the last merge attempt was accepted; nothing to retry".into(),
                ));
            }
            Some(MergeResult::InFlight)
                if details.journal.attempt_at.is_none_or(|at| at >= cutoff) =>
            {
                return Err(RequestError::Conflict(
                    "a merge attempt is in flight; retry is refused until it fails or expires"
                        .into(),
                ));
            }
            _ => {}
        }
        if !self
            .store
            .authorize_merge_retry(id, now, cutoff)
            .await
            .map_err(RequestError::from)?
        {
            return Err(RequestError::Conflict(
                "the merge attempt changed meanwhile; nothing to retry".into(),
            ));
        }
        tracing::info!(item = %id, "merge retry authorized");
        Ok(CommandReply {
            status: wq_core::CommandStatus::Accepted,
            body: serde_json::json!({
                "status": "accepted",
                "message": "one new merge evaluation is authorized; every gate is still checked",
            }),
            wake: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The one refused field of `body`: (field, message).
    fn refusal(body: serde_json::Value) -> (String, String) {
        match ManualMerge::parse(body) {
            Err(RequestError::Invalid(errors)) => {
                assert_eq!(errors.len(), 1, "{errors:?}");
                (errors[0].field.clone(), errors[0].message.clone())
            }
            other => panic!("expected one refused field, got {other:?}"),
        }
    }

    #[test]
    fn a_manual_merge_body_takes_its_defaults_and_values() {
        for body in [json!(null), json!({}), json!({"merge_method": null})] {
            let request = ManualMerge::parse(body).unwrap();
            assert_eq!(request.merge_method, None);
            assert_eq!(request.expected_head_sha, None);
        }
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let request =
            ManualMerge::parse(json!({"merge_method": "squash", "expected_head_sha": sha}))
                .unwrap();
        assert_eq!(request.merge_method, Some(wq_forge::MergeMethod::Squash));
        assert_eq!(request.expected_head_sha.as_deref(), Some(sha));
    }

    #[test]
    fn a_bad_manual_merge_body_names_its_field() {
        for (body, field, message) in [
            (json!([]), "body", "must be a JSON object"),
            (json!("squash"), "body", "must be a JSON object"),
            (
                json!({"merge_method": "fast-forward"}),
                "merge_method",
                "must be one of merge, squash, rebase",
            ),
            (json!({"merge_method": 1}), "merge_method", "must be one of"),
            (
                json!({"expected_head_sha": 7}),
                "expected_head_sha",
                "must be a string",
            ),
            (
                json!({"merge_method": "merge", "method": "merge"}),
                "method",
                "unknown field (known: merge_method, expected_head_sha)",
            ),
        ] {
            let (got_field, got_message) = refusal(body.clone());
            assert_eq!(got_field, field, "{body}");
            assert!(got_message.contains(message), "{body}: {got_message}");
        }
    }
}
