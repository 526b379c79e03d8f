//! Merge requests: find, create, update and read one.

use reqwest::Method;
use serde_json::{Value, json};

use super::GitlabClient;
use super::http::Call;
use super::wire;
use crate::error::{ForgeError, ForgeErrorKind, ForgeResult};
use crate::model::{ChangeRequest, ChangeUpdate, NewChange, QueueObservation};

impl GitlabClient {
    /// The open MR with the lowest iid, read in full (`get_change`): the
    /// list entity has no head pipeline, and a missing pipeline must not
    /// read as "no CI".
    pub(super) async fn find_open_change(
        &self,
        project: &str,
        source_branch: &str,
    ) -> ForgeResult<Option<ChangeRequest>> {
        let call = Call::get(&["projects", project, "merge_requests"])
            .query("source_branch", source_branch)
            .query("state", "opened");
        let open: Vec<wire::MergeRequest> =
            self.http.list(call, "a list of merge requests").await?;
        let Some(first) = open
            .iter()
            .filter(|mr| mr.source_branch == source_branch && mr.state == "opened")
            .map(|mr| mr.iid)
            .min()
        else {
            return Ok(None);
        };
        self.get_change(project, first).await.map(Some)
    }

    /// `POST merge_requests`; its answer is the merge request as GitLab
    /// made it (no approvals: `review_read` is false). Another open merge
    /// request from the branch is GitLab's 409 "Another open merge request
    /// already exists for this source branch" ([`ForgeErrorKind::Conflict`]).
    pub(super) async fn create_change(
        &self,
        request: &NewChange<'_>,
    ) -> ForgeResult<ChangeRequest> {
        let body = json!({
            "source_branch": request.source_branch,
            "target_branch": request.target_branch,
            "title": request.title,
            "description": request.description,
            "labels": labels_param(request.labels)?,
        });
        let mr: wire::MergeRequest = self
            .http
            .json(
                &Call::new(
                    Method::POST,
                    &["projects", request.project, "merge_requests"],
                )
                .body(body),
                "a merge request",
            )
            .await?;
        let mut change = mr.into_change(QueueObservation::Unobserved)?;
        change.review_read = false;
        Ok(change)
    }

    pub(super) async fn update_change(
        &self,
        project: &str,
        number: u64,
        update: &ChangeUpdate<'_>,
    ) -> ForgeResult<ChangeRequest> {
        let mut body = serde_json::Map::new();
        if let Some(title) = update.title {
            body.insert("title".into(), json!(title));
        }
        if let Some(description) = update.description {
            body.insert("description".into(), json!(description));
        }
        // Added and removed by name (`add_labels`, `remove_labels`), not
        // `labels`, which replaces the whole set with what the caller read.
        if let Some(labels) = update.labels {
            if !labels.add.is_empty() {
                body.insert("add_labels".into(), json!(labels_param(labels.add)?));
            }
            if !labels.remove.is_empty() {
                body.insert("remove_labels".into(), json!(labels_param(labels.remove)?));
            }
        }
        if let Some(target) = update.target_branch {
            body.insert("target_branch".into(), json!(target));
        }
        if let Some(open) = update.open {
            let event = if open { "reopen" } else { "close" };
            body.insert("state_event".into(), json!(event));
        }
        if body.is_empty() {
            // GitLab refuses an update without fields.
            return self.get_change(project, number).await;
        }
        let iid = number.to_string();
        let mr: wire::MergeRequest = self
            .http
            .json(
                &Call::new(Method::PUT, &["projects", project, "merge_requests", &iid])
                    .body(Value::Object(body)),
                "a merge request",
            )
            .await?;
        mr.into_change(QueueObservation::Unobserved)
    }

    pub(super) async fn get_change(
        &self,
        project: &str,
        number: u64,
    ) -> ForgeResult<ChangeRequest> {
        let mr = self.read_mr(project, number).await?;
        let open = mr.state == "opened";
        let queue = self.queue_for(project, &mr).await;
        let mut change = mr.into_change(queue)?;
        if open {
            let (approvals, settings) = tokio::join!(
                self.read_approvals(project, number),
                self.approval_settings(project)
            );
            match approvals {
                Ok(approvals) => approvals.apply(&mut change),
                // No approvals endpoint (an instance without them): nobody
                // counts as approving; the status word still says what
                // GitLab requires.
                Err(error) if error.kind == ForgeErrorKind::NotFound => {
                    tracing::warn!(%project, iid = number, %error, "cannot read the approvals of !{number}; none counted");
                }
                Err(error) => return Err(error),
            }
            // GitLab ties no approval to a commit: an approver approved the
            // current head only where a push clears approvals. Elsewhere
            // (the setting off, or not readable) nobody counts as having
            // approved this head; the forge's own count stays.
            let resets = match settings {
                Ok(settings) => settings.reset_approvals_on_push,
                Err(error) if error.kind == ForgeErrorKind::NotFound => false,
                Err(error) => return Err(error),
            };
            if !resets && !change.approved_by.is_empty() {
                tracing::info!(%project, iid = number, "approvals survive pushes on this project; approvers not counted for the head");
                change.approved_by.clear();
            }
        }
        Ok(change)
    }

    /// `GET .../merge_requests/:iid/approvals`: who approved and how many
    /// approvals are still required. Read for open merge requests only:
    /// the review gate needs the approvers, and GitLab's status word names
    /// only the first unmet check (`ci_still_running` hides `not_approved`).
    async fn read_approvals(&self, project: &str, number: u64) -> ForgeResult<wire::Approvals> {
        let iid = number.to_string();
        self.http
            .json(
                &Call::get(&["projects", project, "merge_requests", &iid, "approvals"]),
                "the approvals of a merge request",
            )
            .await
    }

    pub(super) async fn read_mr(
        &self,
        project: &str,
        number: u64,
    ) -> ForgeResult<wire::MergeRequest> {
        let iid = number.to_string();
        self.http
            .json(
                &Call::get(&["projects", project, "merge_requests", &iid]),
                "a merge request",
            )
            .await
    }
}

/// GitLab takes labels comma-separated, so a label cannot hold a comma.
fn labels_param(labels: &[String]) -> ForgeResult<String> {
    if let Some(bad) = labels.iter().find(|l| l.contains(',')) {
        return Err(ForgeError::invalid(format!(
            "labels: {bad:?} contains a comma, which GitLab reads as a separator"
        )));
    }
    Ok(labels.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ForgeErrorKind;

    #[test]
    fn labels_with_commas_are_refused() {
        assert_eq!(
            labels_param(&["a".into(), "b c".into()]).expect("fine"),
            "a,b c"
        );
        let error = labels_param(&["a,b".into()]).expect_err("comma");
        assert_eq!(error.kind, ForgeErrorKind::Invalid);
        assert!(error.message.starts_with("labels: "), "{}", error.message);
    }
}
