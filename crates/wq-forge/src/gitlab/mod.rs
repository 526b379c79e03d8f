//! The GitLab implementation of [`Forge`] over the REST API v4.
//!
//! Projects are addressed by their URL-encoded path (`group%2Fname`),
//! authentication is a `PRIVATE-TOKEN` header, and every request has the
//! configured timeout. Nothing here retries: errors carry their kind and,
//! for 429/503, GitLab's `Retry-After`.
//!
//! Requests per trait call:
//!
//! | call | requests |
//! |---|---|
//! | `get_change` | `GET merge_requests/:iid`; on merge-train projects with an open MR also `GET merge_trains` (the project's settings are read at most every [`PROJECT_SETTINGS_TTL`]) |
//! | `find_open_change` | `GET merge_requests?source_branch&state=opened`, then `get_change` of the match |
//! | `merge_change` | `PUT merge_requests/:iid/merge`, or `POST merge_trains/merge_requests/:iid` on merge-train projects |
//! | `diff_is_empty` | `GET repository/compare?straight=true` |
//! | `current_user` | `GET /user`, once per client (an error is not kept) |
//! | `project_path` | `GET /projects/:path` (shares the project settings cache) |
//! | `branch_protected` | `GET protected_branches` (every page) |
//! | `job_trace` | `GET jobs/:id/trace`, streamed; the last [`TRACE_TAIL_BYTES`] are kept |
//!
//! Redirects are never followed: a 3xx answer is a
//! [`ForgeErrorKind::Rejected`] error naming its `Location`, so the
//! `PRIVATE-TOKEN` never leaves for another host.
//!
//! Settings the project decides and this client reads: `merge_trains_enabled`
//! (a merge becomes "add to the train") and `merge_method` (GitLab has no
//! per-request merge method; only squashing is per merge request).

mod http;
mod webhook;
mod wire;

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use reqwest::Method;
use serde_json::{Value, json};

use crate::config::{ForgeConfig, ForgeKind};
use crate::error::{ForgeError, ForgeErrorKind, ForgeResult};
use crate::events::{ForgeEvent, WebhookRejection};
use crate::model::{
    ChangeRequest, ChangeUpdate, CiJob, CommitMode, CommitRequest, FileAction, MergeMethod,
    MergeOutcome, MergeParams, NewChange, Note, NoteRef, QueueObservation,
};
use crate::{CiJobs, Forge};

pub use self::http::USER_AGENT;
use self::http::{Call, Http};
pub use self::webhook::parse_hook_time;
use self::wire::{ProjectSettings, TrainCar};
pub use crate::http_util::TRACE_TAIL_BYTES;

/// How long a project's settings (`merge_trains_enabled`, `merge_method`)
/// are reused before `GET /projects/:id` is asked again.
pub const PROJECT_SETTINGS_TTL: Duration = Duration::from_secs(300);

/// A GitLab instance.
pub struct GitlabClient {
    http: Http,
    webhook_secret: Option<String>,
    projects: Mutex<HashMap<String, (Instant, ProjectSettings)>>,
    /// The token's user, read once.
    user: tokio::sync::OnceCell<crate::ForgeUser>,
}

impl fmt::Debug for GitlabClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitlabClient")
            .field("api", &self.http.base().as_str())
            .field("webhook_secret", &self.webhook_secret.as_ref().map(|_| "…"))
            .finish_non_exhaustive()
    }
}

impl GitlabClient {
    /// A client for `config.url` (the server, or its `/api/v4` base) with
    /// `config.token`. Errors name the field (`url`, `token`,
    /// `timeout_seconds`); `config.token_env` must already be resolved
    /// ([`ForgeConfig::resolve_secrets`]).
    pub fn new(config: &ForgeConfig) -> ForgeResult<Self> {
        let settings = config.client_settings(ForgeKind::Gitlab)?;
        let http = Http::new(&config.url, settings.token, settings.timeout)?;
        Ok(Self {
            http,
            webhook_secret: settings.webhook_secret,
            projects: Mutex::new(HashMap::new()),
            user: tokio::sync::OnceCell::new(),
        })
    }

    /// The API base every request goes to (`.../api/v4`).
    pub fn api_url(&self) -> &str {
        self.http.base().as_str()
    }

    /// The project's merge settings, from the cache while fresh.
    async fn project_settings(&self, project: &str) -> ForgeResult<ProjectSettings> {
        if let Some((read_at, settings)) = self.lock_projects().get(project)
            && read_at.elapsed() < PROJECT_SETTINGS_TTL
        {
            return Ok(settings.clone());
        }
        let settings: ProjectSettings = self
            .http
            .json(&Call::get(&["projects", project]), "a project")
            .await?;
        self.lock_projects()
            .insert(project.to_owned(), (Instant::now(), settings.clone()));
        Ok(settings)
    }

    fn lock_projects(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, ProjectSettings)>> {
        // The map only caches; a panic elsewhere cannot leave it invalid.
        self.projects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn read_mr(&self, project: &str, number: u64) -> ForgeResult<wire::MergeRequest> {
        let iid = number.to_string();
        self.http
            .json(
                &Call::get(&["projects", project, "merge_requests", &iid]),
                "a merge request",
            )
            .await
    }

    /// Where the MR stands in its target branch's merge train: one list of
    /// the project's active cars (oldest first). GitLab appends cars, so
    /// list order is train order and the position counts the cars ahead
    /// on the same target branch. The list (rather than
    /// `GET merge_trains/merge_requests/:iid`) gives the position in the
    /// same single request.
    async fn train_observation(
        &self,
        project: &str,
        mr: &wire::MergeRequest,
    ) -> ForgeResult<QueueObservation> {
        let call = Call::get(&["projects", project, "merge_trains"])
            .query("scope", "active")
            .query("sort", "asc");
        let cars: Vec<TrainCar> = self.http.list(call, "a list of merge train cars").await?;
        let mut position: i64 = 0;
        for car in &cars {
            let same_train = car.target_branch.is_empty() || car.target_branch == mr.target_branch;
            if !car.is_active() || !same_train {
                continue;
            }
            position += 1;
            if car.iid() == Some(mr.iid) {
                return Ok(QueueObservation::Entry(car.entry(Some(position))));
            }
        }
        Ok(QueueObservation::Absent)
    }

    /// Queue observation for `get_change`: only merge-train projects are
    /// looked at; a failed look leaves the stored observation alone.
    async fn queue_for(&self, project: &str, mr: &wire::MergeRequest) -> QueueObservation {
        let settings = match self.project_settings(project).await {
            Ok(settings) => settings,
            Err(error) => {
                tracing::warn!(%project, %error, "cannot read project settings; merge train not observed");
                return QueueObservation::Unobserved;
            }
        };
        if !settings.merge_trains_enabled {
            return QueueObservation::Unobserved;
        }
        if !matches!(mr.state.as_str(), "opened" | "locked") {
            // Merged or closed: off any train, no request needed.
            return QueueObservation::Absent;
        }
        match self.train_observation(project, mr).await {
            Ok(observation) => observation,
            Err(error) => {
                tracing::warn!(%project, iid = mr.iid, %error, "cannot read the merge train of !{}", mr.iid);
                QueueObservation::Unobserved
            }
        }
    }

    /// True when the MR is merged at the expected head: a merge call that
    /// failed because an earlier call (before a crash) already merged.
    async fn already_merged(&self, project: &str, number: u64, expected: Option<&str>) -> bool {
        match self.read_mr(project, number).await {
            Ok(mr) => {
                mr.state == "merged" && expected.is_none_or(|sha| mr.sha.as_deref() == Some(sha))
            }
            Err(_) => false,
        }
    }

    /// Adds the MR to its merge train (`POST merge_trains/merge_requests/:iid`,
    /// GitLab Premium 15.11+), adding it directly rather than "when checks
    /// pass": the caller merges only after its own gates passed.
    async fn add_to_train(
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
                if self
                    .already_merged(project, number, params.expected_head_sha)
                    .await
                {
                    Ok(MergeOutcome::Merged)
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
                    _ if self
                        .already_merged(project, number, params.expected_head_sha)
                        .await =>
                    {
                        Ok(MergeOutcome::Merged)
                    }
                    _ => Err(error),
                }
            }
            Err(error) => Err(error),
        }
    }

    async fn merge_now(
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
                return if self
                    .already_merged(project, number, params.expected_head_sha)
                    .await
                {
                    Ok(MergeOutcome::Merged)
                } else {
                    Err(error)
                };
            }
            Err(error) => return Err(error),
        };
        match mr.state.as_str() {
            "merged" => Ok(MergeOutcome::Merged),
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

/// One commit action as the Commits API takes it: UTF-8 content as text,
/// anything else base64.
fn action_json(action: &FileAction) -> Value {
    let mut json = json!({
        "action": action.op.as_str(),
        "file_path": action.path,
    });
    if let Some(previous) = &action.previous_path {
        json["previous_path"] = json!(previous);
    }
    if let Some(content) = &action.content {
        match std::str::from_utf8(content) {
            Ok(text) => {
                json["content"] = json!(text);
                json["encoding"] = json!("text");
            }
            Err(_) => {
                json["content"] = json!(BASE64.encode(content));
                json["encoding"] = json!("base64");
            }
        }
    }
    if let Some(executable) = action.execute_filemode {
        json["execute_filemode"] = json!(executable);
    }
    json
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

#[async_trait]
impl Forge for GitlabClient {
    fn kind(&self) -> ForgeKind {
        ForgeKind::Gitlab
    }

    /// `GET /user`, once: later calls answer from memory; a failed read is
    /// not kept, the next call asks again.
    async fn current_user(&self) -> ForgeResult<crate::ForgeUser> {
        self.user
            .get_or_try_init(|| async {
                let user: wire::User = self.http.json(&Call::get(&["user"]), "a user").await?;
                Ok(crate::ForgeUser {
                    id: user.id,
                    username: user.username,
                })
            })
            .await
            .cloned()
    }

    /// `GET /projects/:path` → `path_with_namespace` (GitLab resolves the
    /// path case-insensitively). Read through the project settings cache.
    async fn project_path(&self, project: &str) -> ForgeResult<String> {
        let settings = self.project_settings(project).await?;
        if settings.path_with_namespace.is_empty() {
            return Err(ForgeError::rejected(
                None,
                format!("project {project}: GitLab answered without path_with_namespace"),
            ));
        }
        Ok(settings.path_with_namespace)
    }

    /// Every page of `GET protected_branches`; `branch` is protected when an
    /// entry's name equals it or, as a wildcard, matches it
    /// ([`wire::protected_name_matches`]). The branch need not exist.
    async fn branch_protected(&self, project: &str, branch: &str) -> ForgeResult<bool> {
        let call = Call::get(&["projects", project, "protected_branches"]);
        let entries: Vec<wire::ProtectedBranch> =
            self.http.list(call, "a list of protected branches").await?;
        Ok(entries
            .iter()
            .any(|entry| wire::protected_name_matches(&entry.name, branch)))
    }

    /// 404 is `None` unless GitLab says the project is missing: a missing
    /// project must not read as "create the branch".
    async fn branch_head(&self, project: &str, branch: &str) -> ForgeResult<Option<String>> {
        let call = Call::get(&["projects", project, "repository", "branches", branch]);
        match self.http.json::<wire::Branch>(&call, "a branch").await {
            Ok(branch) => Ok(Some(branch.commit.id)),
            Err(error)
                if error.kind == ForgeErrorKind::NotFound
                    && !error.message.contains("Project Not Found") =>
            {
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    async fn commit_files(&self, request: &CommitRequest<'_>) -> ForgeResult<String> {
        let actions: Vec<Value> = request.actions.iter().map(action_json).collect();
        let mut body = json!({
            "branch": request.branch,
            "start_branch": request.base_branch,
            "commit_message": request.message,
            "actions": actions,
        });
        if request.mode == CommitMode::ForceUpdate {
            // With start_branch, `force` resets the branch to the start
            // branch's head plus this commit.
            body["force"] = json!(true);
        }
        let commit: wire::CommitRef = self
            .http
            .json(
                &Call::new(
                    Method::POST,
                    &["projects", request.project, "repository", "commits"],
                )
                .body(body),
                "a commit",
            )
            .await?;
        Ok(commit.id)
    }

    /// `GET repository/compare?from=base&to=head&straight=true`.
    ///
    /// `straight=true` diffs the two trees directly (`git diff base head`)
    /// instead of from their merge base (`base...head`, GitLab's default).
    /// The merge-base diff shows the MR's own commits even when the target
    /// already holds the same content (landed through another MR), so it
    /// would never call such an MR empty. The straight diff is empty
    /// exactly when the trees are identical. When the target moved on with
    /// unrelated changes the straight diff is not empty: this errs towards
    /// "not empty", never towards closing an MR that still changes
    /// something.
    async fn diff_is_empty(&self, project: &str, base: &str, head: &str) -> ForgeResult<bool> {
        let call = Call::get(&["projects", project, "repository", "compare"])
            .query("from", base)
            .query("to", head)
            .query("straight", "true");
        let compare: wire::Compare = self.http.json(&call, "a comparison").await?;
        if compare.compare_timeout {
            return Err(ForgeError::unavailable(format!(
                "compare {base}..{head} in {project}: GitLab timed out computing the diff"
            )));
        }
        Ok(compare.diffs.is_empty())
    }

    /// The open MR with the lowest iid, read in full (`get_change`): the
    /// list entity has no head pipeline, and a missing pipeline must not
    /// read as "no CI".
    async fn find_open_change(
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

    async fn create_change(&self, request: &NewChange<'_>) -> ForgeResult<ChangeRequest> {
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
        mr.into_change(QueueObservation::Unobserved)
    }

    async fn update_change(
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
        if let Some(labels) = update.labels {
            body.insert("labels".into(), json!(labels_param(labels)?));
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

    async fn get_change(&self, project: &str, number: u64) -> ForgeResult<ChangeRequest> {
        let mr = self.read_mr(project, number).await?;
        let queue = self.queue_for(project, &mr).await;
        mr.into_change(queue)
    }

    /// Merge-train projects: the MR joins the train
    /// ([`MergeOutcome::Queued`]). Others: merged now, and only a
    /// `merged` answer counts as [`MergeOutcome::Merged`]. A stale
    /// `expected_head_sha` is GitLab's 409 ([`ForgeErrorKind::Conflict`]).
    ///
    /// GitLab takes the merge method from the project; `Squash` squashes,
    /// `Rebase` is refused on projects that merge with merge commits. A
    /// merge train builds its commits from the project's templates, so
    /// `commit_message` applies to immediate merges only.
    async fn merge_change(
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

    async fn create_note(&self, project: &str, number: u64, body: &str) -> ForgeResult<NoteRef> {
        let iid = number.to_string();
        let note: wire::Id = self
            .http
            .json(
                &Call::new(
                    Method::POST,
                    &["projects", project, "merge_requests", &iid, "notes"],
                )
                .body(json!({ "body": body })),
                "a note",
            )
            .await?;
        Ok(NoteRef {
            id: note.id,
            url: None,
        })
    }

    /// User comments oldest first; system notes ("added 1 commit") are left out.
    async fn list_notes(&self, project: &str, number: u64) -> ForgeResult<Vec<Note>> {
        let iid = number.to_string();
        let call = Call::get(&["projects", project, "merge_requests", &iid, "notes"])
            .query("sort", "asc")
            .query("order_by", "created_at");
        let notes: Vec<wire::Note> = self.http.list(call, "a list of notes").await?;
        Ok(notes
            .into_iter()
            .filter(|note| !note.system)
            .map(|note| Note {
                id: note.id,
                body: note.body,
                author: note.author.map(|a| a.username).unwrap_or_default(),
            })
            .collect())
    }

    async fn update_note(
        &self,
        project: &str,
        number: u64,
        note_id: u64,
        body: &str,
    ) -> ForgeResult<()> {
        let iid = number.to_string();
        let note_id = note_id.to_string();
        let _: wire::Id = self
            .http
            .json(
                &Call::new(
                    Method::PUT,
                    &[
                        "projects",
                        project,
                        "merge_requests",
                        &iid,
                        "notes",
                        &note_id,
                    ],
                )
                .body(json!({ "body": body })),
                "a note",
            )
            .await?;
        Ok(())
    }

    fn ci_jobs(&self) -> Option<&dyn CiJobs> {
        Some(self)
    }

    fn parse_webhook(
        &self,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<ForgeEvent, WebhookRejection> {
        webhook::parse(self.webhook_secret.as_deref(), headers, body)
    }
}

#[async_trait]
impl CiJobs for GitlabClient {
    async fn pipeline_jobs(&self, project: &str, pipeline_id: u64) -> ForgeResult<Vec<CiJob>> {
        let id = pipeline_id.to_string();
        let call = Call::get(&["projects", project, "pipelines", &id, "jobs"])
            .query("include_retried", "true");
        let jobs: Vec<wire::Job> = self.http.list(call, "a list of jobs").await?;
        let had_field = jobs.iter().any(|job| job.retried.is_some());
        let mut jobs = jobs
            .into_iter()
            .map(|job| job.into_ci_job(Some(pipeline_id)))
            .collect::<ForgeResult<Vec<_>>>()?;
        wire::mark_retried(&mut jobs, had_field);
        Ok(jobs)
    }

    /// The log's last [`TRACE_TAIL_BYTES`], streamed (never read whole),
    /// from a line start when it was cut, invalid UTF-8 replaced.
    async fn job_trace(&self, project: &str, job_id: u64) -> ForgeResult<String> {
        let id = job_id.to_string();
        self.http
            .tail_text(
                &Call::get(&["projects", project, "jobs", &id, "trace"]),
                TRACE_TAIL_BYTES,
            )
            .await
    }

    async fn retry_job(&self, project: &str, job_id: u64) -> ForgeResult<CiJob> {
        let id = job_id.to_string();
        let job: wire::Job = self
            .http
            .json(
                &Call::new(Method::POST, &["projects", project, "jobs", &id, "retry"]),
                "a job",
            )
            .await?;
        job.into_ci_job(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FileOp;

    #[test]
    fn actions_send_utf8_as_text_and_other_bytes_as_base64() {
        let text = FileAction {
            op: FileOp::Create,
            path: "a.txt".into(),
            previous_path: None,
            content: Some("héllo".as_bytes().to_vec()),
            execute_filemode: Some(true),
        };
        assert_eq!(
            action_json(&text),
            json!({"action": "create", "file_path": "a.txt", "content": "héllo", "encoding": "text", "execute_filemode": true})
        );
        let binary = FileAction {
            op: FileOp::Move,
            path: "b.bin".into(),
            previous_path: Some("a.bin".into()),
            content: Some(vec![0xff, 0x00, 0xfe]),
            execute_filemode: None,
        };
        assert_eq!(
            action_json(&binary),
            json!({"action": "move", "file_path": "b.bin", "previous_path": "a.bin", "content": "/wD+", "encoding": "base64"})
        );
        let delete = FileAction {
            op: FileOp::Delete,
            path: "c".into(),
            previous_path: None,
            content: None,
            execute_filemode: None,
        };
        assert_eq!(
            action_json(&delete),
            json!({"action": "delete", "file_path": "c"})
        );
    }

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

    #[test]
    fn config_errors_name_the_field() {
        let mut config =
            ForgeConfig::literal(ForgeKind::Gitlab, "https://gitlab.example.com", "t", "s");
        assert_eq!(
            GitlabClient::new(&config).expect("valid").api_url(),
            "https://gitlab.example.com/api/v4"
        );
        // The shared checks (token, timeout) are ForgeConfig::client_settings'.
        config.token = None;
        let error = GitlabClient::new(&config).expect_err("no token");
        assert!(error.message.starts_with("token: "), "{}", error.message);
        config.token = Some("t".into());
        config.url = "not a url".into();
        let error = GitlabClient::new(&config).expect_err("bad url");
        assert!(error.message.starts_with("url: "), "{}", error.message);
        config.url = "https://gitlab.example.com".into();
        config.kind = ForgeKind::Github;
        let error = GitlabClient::new(&config).expect_err("wrong kind");
        assert!(error.message.starts_with("kind: "), "{}", error.message);
    }
}
