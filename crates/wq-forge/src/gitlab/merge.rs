//! Merging: at once, or by joining the merge train on merge-train
//! projects.

use reqwest::Method;
use serde_json::json;

use super::GitlabClient;
use super::http::Call;
use super::wire::{self, TrainCar};
use crate::error::{ForgeError, ForgeErrorKind, ForgeResult};
use crate::model::{MergeMethod, MergeOutcome, MergeParams};

impl GitlabClient {
    /// Merge-train projects: the MR joins the train
    /// ([`MergeOutcome::Queued`]). Others: merged now, and only a
    /// `merged` answer counts as [`MergeOutcome::Merged`]. A stale
    /// `expected_head_sha` is GitLab's 409 ([`ForgeErrorKind::Conflict`]).
    ///
    /// GitLab takes the merge method from the project; `Squash` squashes,
    /// `Rebase` is refused on projects that merge with merge commits. A
    /// merge train builds its commits from the project's templates, so
    /// `commit_message` applies to immediate merges only.
    pub(super) async fn merge_change(
        &self,
        project: &str,
        number: u64,
        request: &MergeParams<'_>,
    ) -> ForgeResult<MergeOutcome> {
        let settings = self.project_settings(project).await?;
        if request.method == Some(MergeMethod::Rebase) && settings.merge_method == "merge" {
            return Err(ForgeError::invalid(format!(
                "merge method rebase: {project} merges with merge commits (merge_method \"merge\"); \
                 GitLab takes the merge method from the project settings"
            )));
        }
        if settings.merge_trains_enabled {
            self.add_to_train(project, number, request).await
        } else {
            self.merge_now(project, number, request).await
        }
    }

    /// True when the MR is merged at the expected head: a merge call that
    /// failed because an earlier call (before a crash) already merged.
    pub(super) async fn already_merged(
        &self,
        project: &str,
        number: u64,
        expected: Option<&str>,
    ) -> Option<MergeOutcome> {
        match self.read_mr(project, number).await {
            Ok(mr)
                if mr.state == "merged"
                    && expected.is_none_or(|sha| mr.sha.as_deref() == Some(sha)) =>
            {
                Some(MergeOutcome::Merged {
                    commit_sha: mr.merged_commit(),
                })
            }
            _ => None,
        }
    }

    /// Adds the MR to its merge train (`POST merge_trains/merge_requests/:iid`,
    /// GitLab Premium 15.11+), adding it directly rather than "when checks
    /// pass": the caller merges only after its own gates passed.
    pub(super) async fn add_to_train(
        &self,
        project: &str,
        number: u64,
        params: &MergeParams<'_>,
    ) -> ForgeResult<MergeOutcome> {
        let iid = number.to_string();
        let segments = ["projects", project, "merge_trains", "merge_requests", &iid];
        let mut body = json!({});
        if let Some(sha) = params.expected_head_sha {
            body["sha"] = json!(sha);
        }
        if let Some(method) = params.method {
            body["squash"] = json!(method == MergeMethod::Squash);
        }
        let answer: ForgeResult<Vec<TrainCar>> = self
            .http
            .json(
                &Call::new(Method::POST, &segments).body(body),
                "a list of merge train cars",
            )
            .await;
        match answer {
            Ok(cars)
                if cars
                    .iter()
                    .any(|c| c.iid() == Some(number) && c.is_active()) =>
            {
                Ok(MergeOutcome::Queued)
            }
            Ok(_) => {
                // A train with nothing to wait for merges at once.
                if let Some(merged) = self
                    .already_merged(project, number, params.expected_head_sha)
                    .await
                {
                    Ok(merged)
                } else {
                    Err(ForgeError::rejected(
                        None,
                        format!(
                            "merge train of {project} answered without !{number} and it is not merged"
                        ),
                    ))
                }
            }
            Err(error) if error.kind == ForgeErrorKind::Rejected => {
                // "already on a merge train": an earlier call got through.
                let car: Option<TrainCar> = self
                    .http
                    .json_opt(&Call::get(&segments), "a merge train car")
                    .await
                    .ok()
                    .flatten();
                match car {
                    Some(car) if car.is_active() => Ok(MergeOutcome::Queued),
                    _ => self
                        .already_merged(project, number, params.expected_head_sha)
                        .await
                        .ok_or(error),
                }
            }
            Err(error) => Err(error),
        }
    }

    pub(super) async fn merge_now(
        &self,
        project: &str,
        number: u64,
        params: &MergeParams<'_>,
    ) -> ForgeResult<MergeOutcome> {
        let iid = number.to_string();
        let mut body = json!({});
        if let Some(sha) = params.expected_head_sha {
            body["sha"] = json!(sha);
        }
        if let Some(method) = params.method {
            body["squash"] = json!(method == MergeMethod::Squash);
        }
        if let Some(message) = params.commit_message {
            body["merge_commit_message"] = json!(message);
            if params.method == Some(MergeMethod::Squash) {
                body["squash_commit_message"] = json!(message);
            }
        }
        let call = Call::new(
            Method::PUT,
            &["projects", project, "merge_requests", &iid, "merge"],
        )
        .body(body);
        let mr: wire::MergeRequest = match self.http.json(&call, "a merge request").await {
            Ok(mr) => mr,
            Err(error) if error.status == Some(405) => {
                // 405: not mergeable now, which includes "merged already".
                return self
                    .already_merged(project, number, params.expected_head_sha)
                    .await
                    .ok_or(error);
            }
            Err(error) => return Err(error),
        };
        match mr.state.as_str() {
            "merged" => Ok(MergeOutcome::Merged {
                commit_sha: mr.merged_commit(),
            }),
            "locked" => Err(ForgeError::unavailable(format!(
                "merge of {project}!{number} is still in progress (state locked)"
            ))),
            other => Err(ForgeError::rejected(
                Some(200),
                format!("merge of {project}!{number} answered with state {other:?}; not merged"),
            )),
        }
    }
}
