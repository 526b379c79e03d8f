//! The executors (DDR-15): each reads the item's detail row, talks to the
//! forge, writes what it learned, and returns the dimension changes. Every
//! one is idempotent: a crash after the forge accepted a call but before the
//! outcome was stored repeats the executor, which finds the forge's state
//! and takes up what it made (a pushed head, an MR of its own, its status
//! note) instead of creating a second branch, MR or note; what someone else
//! made is never written over (issue #12).

use sha2::{Digest, Sha256};
use wq_core::{
    DimensionStatus, DimensionUpdate, ExecError, ExecOutcome, ItemView, LeaseEpoch, Phase,
};
use wq_forge::{
    ChangeRequest, ChangeState, ChangeUpdate, CiStatus, CommitMode, CommitRequest, Forge,
    LabelCase, LabelChange, MergeOutcome, MergeParams, Mergeable, NewChange, PushedCommit,
    QueueEntry, label_diff,
};

use crate::dashboard::{self, StatusNote};
use crate::dims::{
    NEEDS_CANCEL, NEEDS_DASHBOARD, NEEDS_EMPTY_CHECK, NEEDS_MR, NEEDS_RECONCILE, NEEDS_REOPEN,
};
use crate::errors::{forge_failure, store_error};
use crate::merge::{ReviewRule, resolve_queue, signature, unmet_gates, unread_gates};
use crate::store::{MergeResult, MrDetails, Observation, RecordedChange};
use crate::{CLOSED_ON_FORGE, MrType};

/// Error kind: the source branch or its open change request is not
/// workqueue's.
pub const BRANCH_NOT_MANAGED: &str = "branch_not_managed";
/// Error kind: the forge protects the source branch.
pub const BRANCH_PROTECTED: &str = "branch_protected";

/// An open change request on the item's branch.
struct OpenChange {
    change: ChangeRequest,
    /// workqueue may write to it.
    ours: bool,
    /// workqueue opened it.
    created: bool,
}

/// What the branch has for `ensure_mr`.
enum Existing {
    /// No open change request.
    None,
    Open(OpenChange),
    /// The recorded change request is merged or closed: it is never
    /// replaced by another inside this item.
    Ended(ChangeRequest),
    /// The recorded change request is being merged (GitLab `locked`).
    Locked,
}

/// One executor run: the item, its detail row and its forge.
pub(crate) struct Run<'a> {
    pub mr: &'a MrType,
    pub view: &'a ItemView,
    pub details: &'a MrDetails,
    pub forge: &'a dyn Forge,
    /// What `reconcile_mr` saw of the gates (its `needs_reconcile`
    /// detail), for the status note of whatever outcome follows.
    pub seen: std::sync::OnceLock<serde_json::Value>,
    /// The status note this run wrote: (change request, note id, text
    /// hash). A second write in the same run (a cancel's note, then the
    /// final one) edits it rather than posting another.
    pub written: std::sync::Mutex<Option<(u64, u64, String)>>,
}

impl Run<'_> {
    fn now(&self) -> time::OffsetDateTime {
        self.mr.clock.now()
    }

    /// The claim this run holds the item under, which the writes that must
    /// not outlive the run's lease name (the push and note intents, the
    /// merge reservation, the hand-over, and the check before a CI job's
    /// retry). The engine's views always name it; a view without one fails
    /// the action rather than writing unfenced.
    fn lease(&self) -> Result<LeaseEpoch, ExecError> {
        self.view.lease.ok_or_else(|| {
            ExecError::permanent(format!(
                "item {} is written under its run's lease only, and its view names none",
                self.view.item.id
            ))
        })
    }

    fn project(&self) -> &str {
        &self.details.spec.project
    }

    /// Stores the intent of a first status note on change request `number`
    /// under this run's lease; a run that no longer holds the item posts
    /// none (the run that holds it posts its own).
    async fn mark_note_intent(&self, number: u64) -> Result<(), ExecError> {
        let id = self.view.item.id;
        let marked = self
            .mr
            .store
            .mark_note_intent(id, self.lease()?, number, self.now())
            .await
            .map_err(store_error)?;
        if marked {
            Ok(())
        } else {
            Err(ExecError::transient(format!(
                "item {id} is no longer held by this run; not posting its status note"
            )))
        }
    }

    /// A description or note body as sent to this forge: on GitLab, no line
    /// can run a quick action (see [`crate::text`]).
    fn outgoing<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        crate::text::for_forge(self.forge.kind(), text)
    }

    fn labels(&self) -> Vec<String> {
        let mut labels = self.details.spec.labels.clone();
        let managed = &self.mr.config.managed_label;
        if !managed.is_empty() && !self.forge.label_case().contains(&labels, managed) {
            labels.push(managed.clone());
        }
        labels
    }

    fn empty_check_later(&self) -> DimensionUpdate {
        DimensionUpdate::new(NEEDS_EMPTY_CHECK, true).pending_until(
            self.now() + MrType::seconds(self.mr.config.empty_check_interval_seconds),
        )
    }

    fn reconcile_in(&self, seconds: u64) -> DimensionUpdate {
        DimensionUpdate::new(NEEDS_RECONCILE, true)
            .pending_until(self.now() + MrType::seconds(seconds))
    }

    /// The change request of the item's branch: the recorded one (open,
    /// or ended: merged or closed, which no other replaces inside this
    /// item), else whatever the forge has open on the branch, with whether
    /// it is workqueue's: opened by this branch line (recorded), or (a
    /// creation whose record was lost in a crash) authored by the forge
    /// user of workqueue's token and carrying the managed label.
    async fn open_change(&self) -> Result<Existing, ExecError> {
        if let Some(number) = self.details.mr_number {
            let change = self
                .forge
                .get_change(self.project(), number)
                .await
                .map_err(|e| forge_failure("reading the merge request", e))?;
            return Ok(match change.state {
                ChangeState::Open => Existing::Open(OpenChange {
                    change,
                    ours: true,
                    created: self.details.mr_created,
                }),
                ChangeState::Merged | ChangeState::Closed => Existing::Ended(change),
                ChangeState::Locked => Existing::Locked,
            });
        }
        let Some(change) = self
            .forge
            .find_open_change(self.project(), &self.details.spec.source_branch)
            .await
            .map_err(|e| forge_failure("looking up an open merge request", e))?
        else {
            return Ok(Existing::None);
        };
        let recorded = self
            .mr
            .store
            .change_created(self.view.item.id, change.number)
            .await
            .map_err(store_error)?;
        let created = recorded || self.authored_by_us(&change).await?;
        Ok(Existing::Open(OpenChange {
            ours: created,
            created,
            change,
        }))
    }

    /// The recorded change request ended before this run saw it: closed by
    /// a person, the item is cancelled (no second change request); merged,
    /// the item completes (an attempt of ours is `accepted`) and content
    /// that did not merge becomes the next generation of the
    /// branch line, in the same transaction (see [`MrStore::hand_over`]).
    ///
    /// [`MrStore::hand_over`]: crate::store::MrStore::hand_over
    async fn ended(&self, change: &ChangeRequest) -> Result<ExecOutcome, ExecError> {
        let id = self.view.item.id;
        if change.state != ChangeState::Merged {
            tracing::info!(item = %id, number = change.number, "the merge request was closed before the update; not replacing it");
            return Ok(closed_on_forge());
        }
        self.merged(change).await
    }

    /// The item completes because its change request merged at
    /// `merged_head`. Through [`MrStore::hand_over`], in one transaction
    /// with the branch lock: a submission that reached the item while this
    /// run was under way (its view older than it), or content pushed after
    /// the merge took an earlier head, becomes the next generation instead
    /// of being lost with the finished item.
    ///
    /// [`MrStore::hand_over`]: crate::store::MrStore::hand_over
    async fn complete(
        &self,
        number: u64,
        merged_head: Option<&str>,
        merge_commit_sha: Option<&str>,
    ) -> Result<ExecOutcome, ExecError> {
        let id = self.view.item.id;
        let lease = self.lease()?;
        crate::metrics::merge(&self.details.spec.forge, "merged", None);
        let successor = self
            .mr
            .store
            .hand_over(
                id,
                lease,
                merged_head,
                self.view.item.caller_identity.as_deref(),
                self.now(),
            )
            .await
            .map_err(store_error)?;
        // The last link of the item's chain: the commit its change became.
        let done = completed().with_record(
            "forge.merged",
            serde_json::json!({"number": number, "merge_commit_sha": merge_commit_sha}),
        );
        Ok(match successor {
            Some(next) => {
                tracing::info!(item = %id, number, successor = %next, "merged before the update; the new content is the next generation");
                done.with_wake(next)
            }
            None => done,
        })
    }

    /// The change request a create call made. An unanswered call (5xx,
    /// 429, timeout) may have made it all the same: it is looked up at once
    /// and, when it is workqueue's, recorded now rather than left
    /// unrecorded should the item fail before its next try.
    async fn created_or_found(
        &self,
        created: wq_forge::ForgeResult<ChangeRequest>,
    ) -> Result<ChangeRequest, ExecError> {
        let error = match created {
            Ok(change) => return Ok(change),
            Err(error) if error.is_transient() => error,
            Err(error) => return Err(forge_failure("creating the merge request", error)),
        };
        let found = self
            .forge
            .find_open_change(self.project(), &self.details.spec.source_branch)
            .await;
        match found {
            Ok(Some(change)) if self.authored_by_us(&change).await? => {
                tracing::info!(item = %self.view.item.id, number = change.number, %error, "the create call went unanswered but the merge request was made");
                Ok(change)
            }
            _ => Err(forge_failure("creating the merge request", error)),
        }
    }

    /// A change request workqueue opened but did not record: its author is
    /// the token's forge user, and it carries the managed label set at
    /// creation or its head is a commit workqueue pushed on the branch line.
    /// On GitHub the label is a call after the create, which a fault or a
    /// crash can separate from it: the pull request is workqueue's all the
    /// same.
    async fn authored_by_us(&self, change: &ChangeRequest) -> Result<bool, ExecError> {
        let Some(author) = change.author.as_deref() else {
            return Ok(false);
        };
        let managed = &self.mr.config.managed_label;
        let labelled =
            !managed.is_empty() && self.forge.label_case().contains(&change.labels, managed);
        if !labelled {
            let Some(head) = change.head_sha.as_deref() else {
                return Ok(false);
            };
            let ownership = self
                .mr
                .store
                .branch_ownership(self.view.item.id, head)
                .await
                .map_err(store_error)?;
            if !ownership.pushed {
                return Ok(false);
            }
        }
        let me = self
            .forge
            .current_user()
            .await
            .map_err(|e| forge_failure("reading the forge user of the token", e))?;
        Ok(author == me.username)
    }

    /// Whether `head`, the branch's head on the forge, is workqueue's: one
    /// pushed on the branch line (any generation), or unknown while this
    /// item has a push whose result was not recorded (a crash between the
    /// push and its record). The head the reconcile last observed does not
    /// count: a person may have pushed it onto workqueue's branch.
    async fn branch_is_ours(&self, head: &str) -> Result<bool, ExecError> {
        let ownership = self
            .mr
            .store
            .branch_ownership(self.view.item.id, head)
            .await
            .map_err(store_error)?;
        Ok(ownership.pushed || ownership.intent_pending)
    }

    /// The item fails without any forge write: the branch or its change
    /// request is someone else's (`branch_not_managed`), or the forge
    /// protects the branch (`branch_protected`).
    fn refused(&self, kind: &str, why: &str) -> ExecOutcome {
        let branch = &self.details.spec.source_branch;
        tracing::warn!(item = %self.view.item.id, branch = %branch, kind, why, "source branch refused");
        ExecOutcome::done()
            .with_phase(
                Phase::Failed,
                Some(format!("{kind}: source branch {branch:?} {why}")),
            )
            .with_dimension(
                DimensionUpdate::new(NEEDS_MR, true).detail(serde_json::json!({
                    "error_kind": kind,
                    "branch": branch,
                    "message": format!("source branch {branch:?} {why}"),
                })),
            )
    }

    /// No earlier attempt of this item can have pushed or opened anything:
    /// no change request recorded, no push recorded, none under way (a push
    /// intent is stored before every push, and a change request is opened
    /// only after its push is recorded).
    fn first_push(&self) -> bool {
        self.details.mr_number.is_none()
            && self.details.pushed_content_hash.is_none()
            && self.details.push_intent_at.is_none()
    }

    /// The change request of the branch for `ensure_mr` ([`Run::open_change`]):
    /// `Err` with the outcome when the run ends here (the recorded one
    /// ended or is being merged, or the open one is someone else's).
    async fn existing_change(&self) -> Result<Result<Option<OpenChange>, ExecOutcome>, ExecError> {
        Ok(match self.open_change().await? {
            Existing::Ended(change) => Err(self.ended(&change).await?),
            // Merging right now: look again shortly.
            Existing::Locked => Err(ExecOutcome::done().with_dimension(
                DimensionUpdate::new(NEEDS_MR, true).pending_until(
                    self.now() + MrType::seconds(self.mr.config.reconcile_busy_interval_seconds),
                ),
            )),
            Existing::Open(open) if !open.ours && !self.mr.config.adopt_existing_branches => {
                Err(self.refused(
                    BRANCH_NOT_MANAGED,
                    &format!(
                        "has an open merge request (#{}) that workqueue did not open",
                        open.change.number
                    ),
                ))
            }
            Existing::Open(open) => Ok(Some(open)),
            Existing::None => Ok(None),
        })
    }

    /// Commits the file actions: the push intent is stored first (a crash
    /// before the head is recorded leaves the branch this item's, not a
    /// stranger's), and the head is recorded at once. A definite refusal
    /// wrote nothing and withdraws the intent, or a branch someone else
    /// creates later would pass for this item's; an unanswered call
    /// (unavailable, rate limited) may have landed and keeps it.
    async fn push(
        &self,
        mode: CommitMode,
    ) -> Result<wq_forge::ForgeResult<PushedCommit>, ExecError> {
        let spec = &self.details.spec;
        let id = self.view.item.id;
        let marked = self
            .mr
            .store
            .mark_push_intent(id, self.lease()?, self.now())
            .await
            .map_err(store_error)?;
        if !marked {
            // Another run holds the item now (or will): what it pushes is
            // not to be written over with this run's reading.
            return Err(ExecError::transient(format!(
                "item {id} is no longer held by this run; not pushing"
            )));
        }
        let pushed = self
            .forge
            .commit_files(&CommitRequest {
                project: self.project(),
                branch: &spec.source_branch,
                base_branch: &spec.target_branch,
                mode,
                message: &spec.commit_message,
                actions: &spec.file_actions,
            })
            .await;
        match &pushed {
            Ok(commit) => {
                self.mr
                    .store
                    .record_push(
                        id,
                        &commit.sha,
                        (&self.details.content_hash, &spec.target_branch),
                        self.now(),
                    )
                    .await
                    .map_err(store_error)?;
            }
            Err(error)
                if !matches!(
                    error.kind,
                    wq_forge::ForgeErrorKind::Unavailable | wq_forge::ForgeErrorKind::RateLimited
                ) =>
            {
                self.mr
                    .store
                    .clear_push_intent(id, self.now())
                    .await
                    .map_err(store_error)?;
            }
            Err(_) => {}
        }
        Ok(pushed)
    }

    /// Pushes the desired content (unless this exact content is already the
    /// branch head we recorded), then creates or updates the change request
    /// (DDR-10, DDR-40, DDR-43). Only on a branch and change request
    /// workqueue owns (or adopts, with `mr.adopt_existing_branches`); a
    /// branch the forge protects is never pushed to.
    ///
    /// A first push (nothing recorded or under way, [`Run::first_push`])
    /// looks up no change request: none of this item's can exist, and the
    /// creation's conflict answer tells of anyone else's. Where the forge
    /// refuses to create a branch that exists before writing anything
    /// ([`Forge::creates_branch_atomically`]), it does not read the branch
    /// either, only its protection: the push creates it, and only a
    /// refusal reads it.
    /// The branch that exists is read, and the change request open on it
    /// looked at, before anything is written over it.
    pub(crate) async fn ensure_mr(&self) -> Result<ExecOutcome, ExecError> {
        let spec = &self.details.spec;
        let project = self.project();
        let adopt = self.mr.config.adopt_existing_branches;
        let first = self.first_push();
        let mut existing = None;
        if !first {
            match self.existing_change().await? {
                Ok(open) => existing = open,
                Err(end) => return Ok(end),
            }
        }
        let mut pushed: Option<PushedCommit> = None;
        if first && self.forge.creates_branch_atomically() {
            let protected = self
                .forge
                .protects_new_branch(project, &spec.source_branch)
                .await
                .map_err(|e| forge_failure("reading the branch protection", e))?;
            if protected {
                return Ok(self.refused(BRANCH_PROTECTED, "is protected on the forge"));
            }
            match self.push(CommitMode::CreateBranch).await? {
                Ok(commit) => pushed = Some(commit),
                Err(error) if error.kind == wq_forge::ForgeErrorKind::Conflict => {
                    tracing::info!(item = %self.view.item.id, branch = %spec.source_branch, %error, "the branch exists already; reading it");
                }
                Err(error) => return Err(forge_failure("committing the file actions", error)),
            }
        }
        let head = match &pushed {
            Some(commit) => commit.sha.clone(),
            None => {
                let source = self
                    .forge
                    .source_branch(project, &spec.source_branch)
                    .await
                    .map_err(|e| forge_failure("reading the source branch", e))?;
                if first && source.head.is_some() {
                    // Someone's branch, or an earlier generation's: the
                    // change request open on it is looked at first.
                    match self.existing_change().await? {
                        Ok(open) => existing = open,
                        Err(end) => return Ok(end),
                    }
                }
                // This content, built on this target, is the branch head
                // recorded.
                let already_pushed = self.details.pushed_content_hash.as_deref()
                    == Some(self.details.content_hash.as_str())
                    && self
                        .details
                        .pushed_target_branch
                        .as_deref()
                        .is_none_or(|target| target == spec.target_branch.as_str())
                    && source.head.is_some()
                    && source.head == self.details.head_sha;
                match (already_pushed, source.head) {
                    (true, Some(head)) => head,
                    (_, branch_head) => {
                        if let Some(head) = &branch_head
                            && !adopt
                            && !self.branch_is_ours(head).await?
                        {
                            return Ok(self.refused(
                                BRANCH_NOT_MANAGED,
                                &format!(
                                    "exists on the forge with head {head}, which workqueue did not push"
                                ),
                            ));
                        }
                        if source.protected {
                            return Ok(self.refused(BRANCH_PROTECTED, "is protected on the forge"));
                        }
                        let mode = if branch_head.is_some() {
                            CommitMode::ForceUpdate
                        } else {
                            CommitMode::CreateBranch
                        };
                        let commit = self
                            .push(mode)
                            .await?
                            .map_err(|e| forge_failure("committing the file actions", e))?;
                        let head = commit.sha.clone();
                        pushed = Some(commit);
                        head
                    }
                }
            }
        };
        // The push's answer tells, where the forge says: its commit is
        // built on the target's head, so its own diff is the change's.
        // Else the head just pushed or found is compared with the target
        // (a commit whose tree the client may know already).
        let empty = match pushed.as_ref().and_then(|commit| commit.empty) {
            Some(empty) => empty,
            None => self
                .forge
                .diff_is_empty(project, &spec.target_branch, &head)
                .await
                .map_err(|e| forge_failure("comparing the branches", e))?,
        };
        if empty {
            if let Some(open) = &existing {
                self.set_open(open.change.number, false).await?;
            }
            return Ok(cancelled_empty(&spec.target_branch));
        }
        let labels = self.labels();
        let (change, created, fresh) = match existing {
            None => match self.open_new(&labels).await? {
                Ok(opened) => opened,
                Err(end) => return Ok(end),
            },
            Some(open) => (
                self.sync_metadata(open.change, &labels).await?,
                open.created,
                false,
            ),
        };
        self.mr
            .store
            .record_change(
                self.view.item.id,
                &RecordedChange {
                    number: change.number,
                    url: &change.url,
                    head_sha: &head,
                    pushed_content_hash: &self.details.content_hash,
                    target_branch: &spec.target_branch,
                    labels: &labels,
                    created,
                    now: self.now(),
                },
            )
            .await
            .map_err(store_error)?;
        tracing::info!(item = %self.view.item.id, number = change.number, head = %head, "merge request ensured");
        // A change request just created: its first observation, then its
        // first note, with the labels the creation did not take. A failed
        // note fails the run; the next one finds the change request
        // recorded, converges its labels, and leaves the note to
        // `post_dashboard_note`.
        let first = if fresh {
            let reconcile = self.first_sight(&change).await?;
            let note = self.first_note(&change, &labels).await?;
            Some((reconcile, note))
        } else {
            None
        };
        let outcome = ExecOutcome::done()
            .with_dimension(
                DimensionUpdate::new(NEEDS_MR, false).detail(serde_json::json!({
                    "number": change.number,
                    "url": change.url,
                    "head_sha": head,
                })),
            )
            .with_dimension(self.empty_check_later());
        Ok(match first {
            Some((reconcile, (note, written))) => written.recorded_with_labels(
                change.number,
                outcome.with_dimension(reconcile).with_dimension(
                    DimensionUpdate::new(NEEDS_DASHBOARD, false).detail(dashboard::written(
                        change.number,
                        written.id,
                        &note,
                        self.now(),
                    )),
                ),
                self.labels_with_note(&labels),
            ),
            None => outcome.with_dimension(DimensionUpdate::new(NEEDS_RECONCILE, true)),
        })
    }

    /// Of a new change request's `labels`, those that go with its first
    /// note: all where the forge's creation does not take them
    /// ([`Forge::labels_on_creation`]), else none.
    fn labels_with_note<'l>(&self, labels: &'l [String]) -> &'l [String] {
        if self.forge.labels_on_creation() {
            &[]
        } else {
            labels
        }
    }

    /// The first status note of the change request just created, as the
    /// dashboard step would write it once the first observation is
    /// recorded, with the labels the creation did not take
    /// ([`Forge::labels_on_creation`]; [`Forge::open_note`]). The intent is
    /// stored first: a run after a crash that lost the note's id looks for
    /// it before posting (see [`Run::write_note`]).
    async fn first_note(
        &self,
        change: &ChangeRequest,
        labels: &[String],
    ) -> Result<(StatusNote, NoteWrite), ExecError> {
        let mut view = self.view.clone();
        if let Some(seen) = self.seen.get() {
            view.dimensions
                .retain(|row| row.dimension != NEEDS_RECONCILE);
            view.dimensions.push(wq_core::Dimension {
                dimension: NEEDS_RECONCILE.into(),
                variant: String::new(),
                status: DimensionStatus::True,
                detail: seen.clone(),
                pending_until: None,
                updated_at: self.now(),
            });
        }
        let note = StatusNote::of(
            &self.mr.config.public_url,
            &view,
            self.details,
            self.person_review(),
        );
        let body = self.outgoing(&note.body).into_owned();
        let body_sha256 = hex::encode(Sha256::digest(body.as_bytes()));
        self.mark_note_intent(change.number).await?;
        let posted = self
            .forge
            .open_note(
                self.project(),
                change.number,
                self.labels_with_note(labels),
                &body,
            )
            .await
            .map_err(|e| forge_failure("posting the status note", e))?;
        let written = NoteWrite {
            id: posted.id,
            kind: Some("forge.note_posted"),
            body_sha256,
        };
        *self
            .written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((change.number, written.id, note.hash()));
        Ok((note, written))
    }

    /// Opens the change request: `(change, created, fresh)`, `fresh` when
    /// `change` is the creation's answer. Another open on the branch (the
    /// forge's conflict answer) is looked up: one this item made in an
    /// earlier attempt is taken up and converged, anyone else's refuses the
    /// item (`Err` with the outcome). An unanswered call is looked up too
    /// ([`Run::created_or_found`]).
    async fn open_new(
        &self,
        labels: &[String],
    ) -> Result<Result<(ChangeRequest, bool, bool), ExecOutcome>, ExecError> {
        let spec = &self.details.spec;
        let description = self.outgoing(&spec.description);
        // Where the creation does not take them, they go with the first
        // note (`first_note`).
        let created = self
            .forge
            .create_change(&NewChange {
                project: self.project(),
                source_branch: &spec.source_branch,
                target_branch: &spec.target_branch,
                title: &spec.title,
                description: &description,
                labels: if self.forge.labels_on_creation() {
                    labels
                } else {
                    &[]
                },
            })
            .await;
        match created {
            Ok(change) => Ok(Ok((change, true, true))),
            Err(error) if error.kind == wq_forge::ForgeErrorKind::Conflict => {
                tracing::info!(item = %self.view.item.id, %error, "a merge request is open on the branch already; looking it up");
                match self.existing_change().await? {
                    Ok(Some(open)) => Ok(Ok((
                        self.sync_metadata(open.change, labels).await?,
                        open.created,
                        false,
                    ))),
                    // Gone meanwhile: the next try creates it.
                    Ok(None) => Err(forge_failure("creating the merge request", error)),
                    Err(end) => Ok(Err(end)),
                }
            }
            // Made, but its answer lost: the labels are converged as for any
            // change request found.
            Err(error) => {
                let found = self.created_or_found(Err(error)).await?;
                Ok(Ok((self.sync_metadata(found, labels).await?, true, false)))
            }
        }
    }

    /// What the creation's answer tells is the change request's first
    /// observation: head, pipeline and URL are recorded, and its gates
    /// (those the answer cannot tell, the review's, as not read yet) are
    /// the `needs_reconcile` detail. The reconcile that reads it all waits
    /// for the webhook of what it waits for (CI's end, the forge's
    /// mergeability), or a busy interval; at once when only the review is
    /// left to read, or when something asked for it before this run (a
    /// webhook handled between two tries of `ensure_mr`: CI may have ended
    /// already).
    async fn first_sight(&self, change: &ChangeRequest) -> Result<DimensionUpdate, ExecError> {
        let queue = resolve_queue(self.details.queue.as_ref(), change);
        self.observe(change, queue.as_ref()).await?;
        let bot = self.review_bot().await?;
        let rule = bot
            .as_deref()
            .map_or(ReviewRule::Forge, |bot| ReviewRule::Person { bot });
        let unmet = unmet_gates(change, rule);
        let unread = unread_gates(change, rule);
        let seen = serde_json::json!({
            "unmet_gates": unmet,
            "unread_gates": unread,
            "review_gate": rule.gate(),
            "merge_status": change.merge_status,
            "ci": change.ci.as_str(),
        });
        let _ = self.seen.set(seen.clone());
        // A new item has no `needs_reconcile` row until something asks.
        let asked = self
            .view
            .dimension(NEEDS_RECONCILE, "")
            .is_some_and(|row| row.status == DimensionStatus::True && row.pending_until.is_none());
        if asked || unmet.iter().all(|gate| unread.contains(gate)) {
            return Ok(DimensionUpdate::new(NEEDS_RECONCILE, true).detail(seen));
        }
        let settled = change.ci == CiStatus::Success
            && change.pending_checks == 0
            && change.mergeable != Mergeable::Unknown;
        let config = &self.mr.config;
        let wait = if settled {
            config.reconcile_interval_seconds
        } else {
            config.reconcile_busy_interval_seconds
        };
        Ok(self.reconcile_in(wait).detail(seen))
    }

    /// The token's forge user when the project's review gate needs a
    /// person's approval (its own does not count), `None` when the forge's
    /// rules decide (the user is read once and cached by the client).
    async fn review_bot(&self) -> Result<Option<String>, ExecError> {
        if !self.person_review() {
            return Ok(None);
        }
        Ok(Some(
            self.forge
                .current_user()
                .await
                .map_err(|e| forge_failure("reading the forge user of the token", e))?
                .username,
        ))
    }

    /// Title, description, target branch and labels as submitted. Labels
    /// converge: the submitted ones (and the managed label) are added, and
    /// only a label workqueue applied earlier and no longer wants is
    /// removed; a person's label stays.
    async fn sync_metadata(
        &self,
        change: ChangeRequest,
        labels: &[String],
    ) -> Result<ChangeRequest, ExecError> {
        let spec = &self.details.spec;
        let description = self.outgoing(&spec.description);
        let case = self.forge.label_case();
        let next = converged_labels(
            &change.labels,
            self.details.applied_labels.as_deref().unwrap_or_default(),
            labels,
            case,
        );
        // What differs from the labels just read, as additions and removals:
        // a label a person adds meanwhile is not in either and stays.
        let (add, remove) = label_diff(&change.labels, &next, case);
        let relabel = !add.is_empty() || !remove.is_empty();
        let retarget = change.target_branch != spec.target_branch.as_str();
        if change.title == spec.title && change.description == description && !relabel && !retarget
        {
            return Ok(change);
        }
        tracing::info!(item = %self.view.item.id, number = change.number, relabel, retarget, "updating the merge request's metadata");
        self.forge
            .update_change(
                self.project(),
                change.number,
                &ChangeUpdate {
                    title: Some(&spec.title),
                    description: Some(&description),
                    labels: relabel.then_some(LabelChange {
                        add: &add,
                        remove: &remove,
                    }),
                    open: None,
                    target_branch: retarget.then_some(spec.target_branch.as_str()),
                },
            )
            .await
            .map_err(|e| forge_failure("updating the merge request", e))
    }

    /// Closes (`false`) or reopens (`true`) change request `number`.
    async fn set_open(&self, number: u64, open: bool) -> Result<(), ExecError> {
        self.forge
            .update_change(
                self.project(),
                number,
                &ChangeUpdate {
                    open: Some(open),
                    ..ChangeUpdate::default()
                },
            )
            .await
            .map_err(|e| {
                let what = if open {
                    "reopening the merge request"
                } else {
                    "closing the merge request"
                };
                forge_failure(what, e)
            })?;
        Ok(())
    }

    /// A caller retried the item (`retry`, which stored `mr.retried` in its
    /// transaction): the recorded change request, if closed (by a person,
    /// or by a cancel), is reopened, and a reconcile reads it next, as for
    /// any item. One that merged meanwhile is left to that reconcile (which
    /// completes the item); an open one, or none recorded yet, is left as
    /// it is. Run again after a crash, it finds the change request open and
    /// writes nothing.
    pub(crate) async fn reopen_mr(&self) -> Result<ExecOutcome, ExecError> {
        let done = ExecOutcome::done()
            .with_dimension(DimensionUpdate::new(NEEDS_REOPEN, false))
            .with_dimension(DimensionUpdate::new(NEEDS_RECONCILE, true));
        let Some(number) = self.details.mr_number else {
            return Ok(done);
        };
        let change = self
            .forge
            .get_change(self.project(), number)
            .await
            .map_err(|e| forge_failure("reading the merge request", e))?;
        if change.state != ChangeState::Closed {
            return Ok(done);
        }
        self.set_open(number, true).await?;
        let by = self
            .view
            .dimension(NEEDS_REOPEN, "")
            .and_then(|row| row.detail["by"].as_str().map(str::to_owned));
        tracing::info!(item = %self.view.item.id, number, by, "retried: the merge request was reopened");
        Ok(done.with_record(
            "forge.change_reopened",
            serde_json::json!({ "number": number, "by": by }),
        ))
    }

    /// A caller's `cancel` ([`crate::commands`]): the status note says who
    /// cancelled the item and why, then the change request is closed and
    /// the item cancelled; workqueue stops managing it. Run again after a
    /// crash, it finds the note by its marker (same text: not written
    /// again) and the change request it closed, and only records the end.
    /// One that merged first completes the item instead; one workqueue did
    /// not open is left alone. Nothing runs after it: the decider puts it
    /// first, and a cancelled item has nothing left to decide.
    pub(crate) async fn cancel_mr(&self) -> Result<ExecOutcome, ExecError> {
        let asked = self
            .view
            .dimension(NEEDS_CANCEL, "")
            .map(|row| row.detail.clone())
            .unwrap_or_default();
        let by = asked["by"].as_str().unwrap_or("a caller");
        let reason = match asked["reason"].as_str() {
            Some(reason) => format!("cancelled by {by}: {reason}"),
            None => format!("cancelled by {by}"),
        };
        let cancelled = ExecOutcome::done()
            .with_phase(Phase::Cancelled, Some(reason))
            .with_dimension(DimensionUpdate::new(NEEDS_CANCEL, false))
            .with_dimension(DimensionUpdate::new(NEEDS_RECONCILE, false));
        let open = match self.open_change().await? {
            Existing::None => return Ok(cancelled),
            Existing::Ended(change) if change.state == ChangeState::Merged => {
                tracing::info!(item = %self.view.item.id, number = change.number, "cancel asked for a merged merge request: completed");
                return Ok(self
                    .merged(&change)
                    .await?
                    .with_dimension(DimensionUpdate::new(NEEDS_CANCEL, false)));
            }
            // Closed: by this executor before a crash, or by a person.
            Existing::Ended(_) => return Ok(cancelled),
            Existing::Locked => {
                // Being merged right now (GitLab `locked`): look again
                // shortly, without counting a failure; it may complete.
                return Ok(ExecOutcome::done().with_dimension(
                    DimensionUpdate::new(NEEDS_CANCEL, true)
                        .detail(asked)
                        .pending_until(
                            self.now()
                                + MrType::seconds(self.mr.config.reconcile_busy_interval_seconds),
                        ),
                ));
            }
            Existing::Open(open) => open,
        };
        if !open.ours {
            tracing::info!(item = %self.view.item.id, number = open.change.number, "cancel: the open merge request is not workqueue's; left open");
            return Ok(cancelled);
        }
        let number = open.change.number;
        let next = dashboard::projected(self.view, &cancelled);
        let note = StatusNote::of(
            &self.mr.config.public_url,
            &next,
            self.details,
            self.person_review(),
        );
        self.write_note(number, &note).await?;
        self.set_open(number, false).await?;
        tracing::info!(item = %self.view.item.id, number, "cancelled: the merge request was closed");
        Ok(cancelled)
    }

    /// Periodic (DDR-43, DDR-48): an MR whose target already contains its
    /// changes is closed and the item cancelled.
    pub(crate) async fn check_empty_diff(&self) -> Result<ExecOutcome, ExecError> {
        let spec = &self.details.spec;
        let Some(number) = self.details.mr_number else {
            return Ok(ExecOutcome::done().with_dimension(self.empty_check_later()));
        };
        let change = self
            .forge
            .get_change(self.project(), number)
            .await
            .map_err(|e| forge_failure("reading the merge request", e))?;
        match change.state {
            ChangeState::Merged => return self.merged(&change).await,
            ChangeState::Closed => return Ok(closed_on_forge()),
            ChangeState::Open | ChangeState::Locked => {}
        }
        let empty = self
            .forge
            .diff_is_empty(self.project(), &spec.target_branch, &spec.source_branch)
            .await
            .map_err(|e| forge_failure("comparing the branches", e))?;
        if empty && change.state == ChangeState::Open {
            self.set_open(number, false).await?;
            tracing::info!(item = %self.view.item.id, number, "empty merge request closed");
            return Ok(cancelled_empty(&spec.target_branch));
        }
        Ok(ExecOutcome::done().with_dimension(self.empty_check_later()))
    }

    /// Whether the item's project needs a person's review
    /// (`mr.require_review`, `mr.review_overrides`).
    pub(crate) fn person_review(&self) -> bool {
        self.mr
            .config
            .requires_review(&self.details.spec.forge, self.project())
    }

    /// The status note as the item stands (see [`crate::dashboard`]),
    /// written: found again by its marker and its author (the bot) after a
    /// crash, never posted twice, edited in place when its text changed.
    pub(crate) async fn post_dashboard_note(&self) -> Result<ExecOutcome, ExecError> {
        let Some(number) = self.details.mr_number else {
            // ensure_mr runs first; nothing to annotate yet.
            return Ok(ExecOutcome::done().with_dimension(DimensionUpdate::new(NEEDS_MR, true)));
        };
        let note = StatusNote::of(
            &self.mr.config.public_url,
            self.view,
            self.details,
            self.person_review(),
        );
        let written = self.write_note(number, &note).await?;
        Ok(written.recorded(
            number,
            ExecOutcome::done().with_dimension(
                DimensionUpdate::new(NEEDS_DASHBOARD, false).detail(dashboard::written(
                    number,
                    written.id,
                    &note,
                    self.now(),
                )),
            ),
        ))
    }

    /// Posts `note`, or edits the bot's note that carries its marker when
    /// the text differs; says which it did. The note this item last wrote
    /// on `number` (its id and text hash in the `needs_dashboard` detail)
    /// is edited by its id without listing the notes, and not touched when
    /// the text is the same; a note gone meanwhile is looked for and posted
    /// anew. The first note on `number` is posted without listing the
    /// notes when no post was started there before: the intent is stored
    /// before the post (`note_intent_number`), so a run after a crash that
    /// lost the note's id looks for it first and never posts it twice.
    pub(crate) async fn write_note(
        &self,
        number: u64,
        note: &StatusNote,
    ) -> Result<NoteWrite, ExecError> {
        let written = self.write_note_once(number, note).await?;
        if written.kind.is_some() {
            let mut last = self
                .written
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *last = Some((number, written.id, note.hash()));
        }
        Ok(written)
    }

    /// The note this run wrote on `number`, else the one the item's
    /// `needs_dashboard` detail names.
    fn last_written(&self, number: u64) -> Option<(u64, String)> {
        let this_run = self
            .written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .filter(|(on, _, _)| *on == number)
            .map(|(_, id, hash)| (id, hash));
        this_run.or_else(|| dashboard::last_written(self.view, number))
    }

    async fn write_note_once(
        &self,
        number: u64,
        note: &StatusNote,
    ) -> Result<NoteWrite, ExecError> {
        let body = self.outgoing(&note.body).into_owned();
        let body_sha256 = hex::encode(Sha256::digest(body.as_bytes()));
        if let Some((id, hash)) = self.last_written(number) {
            if hash == note.hash() {
                return Ok(NoteWrite {
                    id,
                    kind: None,
                    body_sha256,
                });
            }
            match self
                .forge
                .update_note(self.project(), number, id, &body)
                .await
            {
                Ok(()) => {
                    return Ok(NoteWrite {
                        id,
                        kind: Some("forge.note_edited"),
                        body_sha256,
                    });
                }
                Err(error) if error.kind == wq_forge::ForgeErrorKind::NotFound => {
                    tracing::info!(item = %self.view.item.id, number, note = id, "the status note is gone; looking for it by its marker");
                }
                Err(error) => return Err(forge_failure("updating the status note", error)),
            }
        }
        if self.details.note_intent != Some(number) {
            // No post started on this change request: there is nothing to
            // find.
            self.mark_note_intent(number).await?;
            let posted = self
                .forge
                .create_note(self.project(), number, &body)
                .await
                .map_err(|e| forge_failure("posting the status note", e))?;
            return Ok(NoteWrite {
                id: posted.id,
                kind: Some("forge.note_posted"),
                body_sha256,
            });
        }
        let notes = self
            .forge
            .list_notes(self.project(), number)
            .await
            .map_err(|e| forge_failure("listing notes", e))?;
        // Only a note the bot wrote is the status note: a person's comment
        // quoting the marker is left alone.
        let me = self
            .forge
            .current_user()
            .await
            .map_err(|e| forge_failure("reading the forge user of the token", e))?;
        let found = notes
            .into_iter()
            .find(|n| n.author == me.username && n.body.contains(&note.marker));
        let (id, kind) = match found {
            Some(found) if found.body == body => (found.id, None),
            Some(found) => {
                self.forge
                    .update_note(self.project(), number, found.id, &body)
                    .await
                    .map_err(|e| forge_failure("updating the status note", e))?;
                (found.id, Some("forge.note_edited"))
            }
            None => {
                let posted = self
                    .forge
                    .create_note(self.project(), number, &body)
                    .await
                    .map_err(|e| forge_failure("posting the status note", e))?;
                (posted.id, Some("forge.note_posted"))
            }
        };
        Ok(NoteWrite {
            id,
            kind,
            body_sha256,
        })
    }

    /// One read of the change request converges everything (DDR-46): merged
    /// → completed, closed → cancelled, observations recorded, drift
    /// corrected, and the merge attempted through the journal when every
    /// gate holds.
    pub(crate) async fn reconcile_mr(&self) -> Result<ExecOutcome, ExecError> {
        let id = self.view.item.id;
        let Some(number) = self.details.mr_number else {
            return Ok(ExecOutcome::done().with_dimension(DimensionUpdate::new(NEEDS_MR, true)));
        };
        if let Some(wait) = self.budget_wait() {
            tracing::info!(item = %id, number, wait, "the forge token's rate-limit budget is below its reserve; this background reconcile waits for the window's reset");
            return Ok(ExecOutcome::done().with_dimension(self.reconcile_in(wait)));
        }
        let change = self
            .forge
            .get_change(self.project(), number)
            .await
            .map_err(|e| forge_failure("reading the merge request", e))?;
        let queue = resolve_queue(self.details.queue.as_ref(), &change);
        self.observe(&change, queue.as_ref()).await?;
        let journal = &self.details.journal;
        match change.state {
            ChangeState::Merged => return self.merged(&change).await,
            ChangeState::Closed => return Ok(closed_on_forge()),
            ChangeState::Locked => {
                return Ok(ExecOutcome::done().with_dimension(
                    self.reconcile_in(self.mr.config.reconcile_busy_interval_seconds),
                ));
            }
            ChangeState::Open => {}
        }
        let change = self.correct_drift(change).await?;
        // Webhooks are hints: a failed head pipeline whose failed jobs are
        // not tracked (their Job Hook was lost) feeds the CI retry from
        // this read; the reconcile looks again a busy interval later (not
        // at once: a head with more failed jobs than the list keeps must
        // not spin).
        if let Some(feed) = self.untracked_failed_jobs(&change).await {
            return Ok(ExecOutcome::done().with_dimension(feed).with_dimension(
                self.reconcile_in(self.mr.config.reconcile_busy_interval_seconds),
            ));
        }
        let busy = self.mr.config.reconcile_busy_interval_seconds;
        let idle = self.mr.config.reconcile_interval_seconds;
        // An active queue entry means the forge accepted the attempt.
        if let Some(entry) = &queue {
            // It confirms an attempt of ours, if there is one (a person may
            // have queued it).
            if journal.result.is_some() && journal.result != Some(MergeResult::Accepted) {
                self.record(MergeResult::Accepted, change.head_sha.as_deref(), None)
                    .await?;
            }
            tracing::debug!(item = %id, state = %entry.state, "queued for merge");
            return Ok(ExecOutcome::done().with_dimension(self.reconcile_in(busy)));
        }
        // A reservation left by an interrupted run: never resubmitted; it
        // expires into `failed` and the explicit retry is offered.
        if journal.result == Some(MergeResult::InFlight) {
            let deadline = journal.attempt_at.unwrap_or_else(|| self.now())
                + MrType::seconds(self.mr.config.merge_attempt_deadline_seconds);
            if self.now() < deadline {
                // Look again at the deadline, or sooner: the queue or a
                // merge may confirm the attempt before it.
                let wait =
                    u64::try_from((deadline - self.now()).whole_seconds().max(1)).unwrap_or(1);
                return Ok(ExecOutcome::done().with_dimension(self.reconcile_in(wait.min(busy))));
            }
            self.record(
                MergeResult::Failed,
                None,
                Some("the merge attempt was interrupted and not confirmed before its deadline; use retry-merge"),
            )
            .await?;
            return Ok(ExecOutcome::done().with_dimension(self.reconcile_in(idle)));
        }
        // The review gate as configured: a person's approval needs the
        // token's own user to tell it apart (cached by the client).
        let bot = self.review_bot().await?;
        let rule = bot
            .as_deref()
            .map_or(ReviewRule::Forge, |bot| ReviewRule::Person { bot });
        let unmet = unmet_gates(&change, rule);
        let seen = serde_json::json!({
            "unmet_gates": unmet,
            "review_gate": rule.gate(),
            "merge_status": change.merge_status,
            "ci": change.ci.as_str(),
        });
        let _ = self.seen.set(seen.clone());
        let waiting = matches!(change.ci, CiStatus::Pending | CiStatus::Running)
            || change.pending_checks > 0
            || change.mergeable == Mergeable::Unknown;
        let rearm = self.reconcile_in(self.paced(if waiting { busy } else { idle }));
        if !self.details.spec.automation.auto_merge || !unmet.is_empty() {
            return Ok(ExecOutcome::done().with_dimension(rearm.detail(seen)));
        }
        let head = change.head_sha.clone().unwrap_or_default();
        let signature = signature(id, self.project(), &change, rule);
        let same_signature = journal.signature.as_deref() == Some(signature.as_str());
        if !journal.retry_authorized && journal.result.is_some() && same_signature {
            match journal.retry_at {
                // After a transient answer, the automatic call is due: this
                // run's read found the change request open, unmerged and
                // unqueued at the same state, so the reserve may take it.
                Some(at) if at <= self.now() => {}
                // Not yet (a webhook woke the item early): at its time.
                Some(at) => {
                    let wait = u64::try_from((at - self.now()).whole_seconds().max(1)).unwrap_or(1);
                    return Ok(ExecOutcome::done().with_dimension(self.reconcile_in(wait)));
                }
                // Already tried for exactly this state: wait for a change or
                // an explicit retry.
                None => return Ok(ExecOutcome::done().with_dimension(rearm)),
            }
        }
        // After an accepted attempt, open and out of the queue may be a read
        // that straddled the queue's merge (a read is several requests, and
        // the stored queue entry may be gone already): a second read
        // confirms the state before another call.
        if journal.result == Some(MergeResult::Accepted) {
            let again = self
                .forge
                .get_change(self.project(), number)
                .await
                .map_err(|e| forge_failure("reading the merge request", e))?;
            if again.state == ChangeState::Merged {
                tracing::info!(item = %id, number, "a second read finds the merge request merged; no new attempt");
                self.observe(&again, None).await?;
                return self.merged(&again).await;
            }
            if again.state != ChangeState::Open
                || resolve_queue(None, &again).is_some()
                || crate::merge::signature(id, self.project(), &again, rule) != signature
            {
                tracing::info!(item = %id, number, "a second read disagrees with the first; no new attempt before the next reconcile");
                return Ok(ExecOutcome::done().with_dimension(self.reconcile_in(busy)));
            }
        }
        // Transient answers so far for this signature (carried only into its
        // automatic retry; the reserve resets the count otherwise).
        let transient_so_far = if journal.retry_at.is_some() && same_signature {
            journal.transient_failures
        } else {
            0
        };
        let reserved = self
            .mr
            .store
            .reserve_merge(id, self.lease()?, &signature, &head, self.now())
            .await
            .map_err(store_error)?;
        if !reserved {
            // The journal changed since it was read (another worker
            // reserved): its attempt is the one. Or this run's lease is
            // gone: the run that holds the item now decides.
            tracing::info!(item = %id, "merge attempt reserved elsewhere, or this run's lease is gone; not calling the forge");
            return Ok(ExecOutcome::done().with_dimension(rearm));
        }
        let result = self
            .forge
            .merge_change(
                self.project(),
                number,
                &MergeParams {
                    expected_head_sha: Some(&head),
                    method: self.mr.config.merge_method,
                    commit_message: None,
                },
            )
            .await;
        match result {
            Ok(MergeOutcome::Merged { commit_sha }) => {
                self.record(MergeResult::Accepted, Some(&head), None)
                    .await?;
                tracing::info!(item = %id, number, head = %head, commit = ?commit_sha, "merged");
                self.complete(number, Some(&head), commit_sha.as_deref())
                    .await
            }
            Ok(MergeOutcome::Queued) => {
                self.record(MergeResult::Accepted, Some(&head), None)
                    .await?;
                let entry = QueueEntry {
                    state: "queued".into(),
                    position: None,
                    eta_seconds: None,
                };
                self.observe(&change, Some(&entry)).await?;
                crate::metrics::merge(&self.details.spec.forge, "queued", None);
                tracing::info!(item = %id, number, head = %head, "queued for merge");
                Ok(ExecOutcome::done().with_dimension(self.reconcile_in(busy)))
            }
            Err(error) if error.is_transient() => {
                crate::metrics::merge(&self.details.spec.forge, "transient", Some(error.kind));
                self.after_transient(&change, transient_so_far + 1, &error)
                    .await
            }
            Err(error) => {
                tracing::warn!(item = %id, number, head = %head, %error, "merge attempt failed");
                crate::metrics::merge(&self.details.spec.forge, "failed", Some(error.kind));
                self.record(MergeResult::Failed, None, Some(&error.to_string()))
                    .await?;
                Ok(ExecOutcome::done().with_dimension(self.reconcile_in(idle)))
            }
        }
    }

    /// Seconds a background reconcile waits for the forge token's budget:
    /// `Some` when its timer woke it (no webhook or command asked: the
    /// `needs_reconcile` row was deferred), no merge attempt of the item
    /// waits on it, and a budget the forge reported is below
    /// `mr.rate_limit_reserve_percent` of its limit in a window that has
    /// not renewed. Until the reset, at most `reconcile_interval_seconds`.
    fn budget_wait(&self) -> Option<u64> {
        let reserve = f64::from(self.mr.config.rate_limit_reserve_percent) / 100.0;
        if reserve <= 0.0 {
            return None;
        }
        let timer_woke = self
            .view
            .dimension(NEEDS_RECONCILE, "")
            .is_some_and(|row| row.pending_until.is_some());
        // An attempt in flight, accepted (queued) or due again after a
        // transient answer: a merge waits on this read.
        let merging = matches!(
            self.details.journal.result,
            Some(MergeResult::InFlight | MergeResult::Accepted)
        ) || self.details.journal.retry_at.is_some();
        if !timer_woke || merging {
            return None;
        }
        let now = self.now().unix_timestamp();
        let reset = self
            .forge
            .rate_budgets()
            .into_iter()
            .filter(|budget| budget.below(reserve, now))
            .map(|budget| budget.reset_unix.unwrap_or(now + 60))
            .max()?;
        let wait = u64::try_from((reset - now).max(1)).unwrap_or(1);
        Some(wait.min(self.mr.config.reconcile_interval_seconds))
    }

    /// A background re-read's interval, `seconds` at full budget, spread
    /// out as a budget the forge reported drains toward
    /// `mr.rate_limit_reserve_percent` ([`wq_forge::RateBudget::pace`]), and
    /// not past that window's reset (when it is later than `seconds`).
    fn paced(&self, seconds: u64) -> u64 {
        let reserve = f64::from(self.mr.config.rate_limit_reserve_percent) / 100.0;
        if reserve <= 0.0 {
            return seconds;
        }
        let now = self.now().unix_timestamp();
        self.forge
            .rate_budgets()
            .into_iter()
            .map(|budget| {
                let pace = budget.pace(reserve, now);
                let stretched = (seconds as f64 * pace).round() as u64;
                let until_reset = budget
                    .reset_unix
                    .map_or(u64::MAX, |reset| u64::try_from(reset - now).unwrap_or(0));
                stretched.min(until_reset.max(seconds))
            })
            .max()
            .unwrap_or(seconds)
    }

    /// The merge call got a transient answer (5xx, 429, timeout): it may or
    /// may not have reached the forge. One re-read decides: merged or
    /// queued → `accepted`; still open at the checked head → another call
    /// after a backoff (at least the forge's `Retry-After`), while
    /// `mr.merge_transient_retries` allows, once the next reconcile finds
    /// every gate held; anything else → `failed` (a new state is tried on
    /// its own, the same one waits for `retry-merge`). A re-read that fails leaves the attempt
    /// `in_flight`: confirmed by a later read or failed at its deadline,
    /// never called again unproven.
    async fn after_transient(
        &self,
        checked: &ChangeRequest,
        count: i64,
        error: &wq_forge::ForgeError,
    ) -> Result<ExecOutcome, ExecError> {
        let id = self.view.item.id;
        let config = &self.mr.config;
        let busy = config.reconcile_busy_interval_seconds;
        let head = checked.head_sha.as_deref().unwrap_or_default();
        tracing::warn!(item = %id, number = checked.number, head, %error, count, "transient answer to the merge call; reading the merge request again");
        let change = match self.forge.get_change(self.project(), checked.number).await {
            Ok(change) => change,
            Err(read) => {
                tracing::warn!(item = %id, error = %read, "the re-read after a transient merge answer failed; the attempt stays in flight");
                return Ok(ExecOutcome::done().with_dimension(self.reconcile_in(busy)));
            }
        };
        let queue = resolve_queue(self.details.queue.as_ref(), &change);
        self.observe(&change, queue.as_ref()).await?;
        let message = format!("{error} (transient answer {count} to the merge call)");
        match change.state {
            ChangeState::Merged => {
                self.accepted_after_transient(&message, head).await?;
                tracing::info!(item = %id, number = change.number, "the merge call answered {error} but the merge request is merged");
                return self
                    .complete(
                        change.number,
                        change.head_sha.as_deref(),
                        change.merge_commit_sha.as_deref(),
                    )
                    .await;
            }
            // Merging now: the in-flight attempt is confirmed by a later
            // read.
            ChangeState::Locked => {
                return Ok(ExecOutcome::done().with_dimension(self.reconcile_in(busy)));
            }
            ChangeState::Open | ChangeState::Closed => {}
        }
        if queue.is_some() {
            self.accepted_after_transient(&message, head).await?;
            crate::metrics::merge(&self.details.spec.forge, "queued", None);
            tracing::info!(item = %id, number = change.number, "the merge call answered {error} but the merge request is queued");
            return Ok(ExecOutcome::done().with_dimension(self.reconcile_in(busy)));
        }
        let budget = i64::from(config.merge_transient_retries);
        // Open at the checked head: another call is safe once the gates hold
        // again (the next reconcile checks them before it reserves). The
        // signature may flicker meanwhile (GitLab says `checking` right
        // after a merge call): the count carries on only for the same one.
        let unchanged =
            change.state == ChangeState::Open && change.head_sha.as_deref() == Some(head);
        if unchanged && count <= budget {
            let delay = transient_backoff(
                config.merge_transient_backoff_seconds,
                config.reconcile_interval_seconds,
                count,
                error.retry_after,
            );
            let at = self.now() + MrType::seconds(delay);
            self.mr
                .store
                .merge_transient(id, &message, Some(at), self.now())
                .await
                .map_err(store_error)?;
            tracing::info!(item = %id, number = change.number, count, delay, "merge call tried again after a backoff");
            return Ok(ExecOutcome::done().with_dimension(self.reconcile_in(delay)));
        }
        let message = if unchanged {
            format!("{message}; no automatic call is left: use retry-merge")
        } else {
            message
        };
        self.mr
            .store
            .merge_transient(id, &message, None, self.now())
            .await
            .map_err(store_error)?;
        if change.state == ChangeState::Closed {
            return Ok(closed_on_forge());
        }
        Ok(ExecOutcome::done().with_dimension(self.reconcile_in(busy)))
    }

    /// The re-read proved the call took effect: the transient answer is
    /// counted, then the attempt is `accepted` (which clears its error).
    async fn accepted_after_transient(&self, message: &str, head: &str) -> Result<(), ExecError> {
        self.mr
            .store
            .merge_transient(self.view.item.id, message, None, self.now())
            .await
            .map_err(store_error)?;
        self.record(MergeResult::Accepted, Some(head), None).await
    }

    async fn observe(
        &self,
        change: &ChangeRequest,
        queue: Option<&QueueEntry>,
    ) -> Result<(), ExecError> {
        self.mr
            .store
            .observe(
                self.view.item.id,
                &Observation {
                    head_sha: change.head_sha.as_deref(),
                    pipeline_id: change.pipeline_id,
                    queue,
                    url: Some(&change.url),
                },
                self.now(),
            )
            .await
            .map_err(store_error)
    }

    /// The change request is merged: an attempt of ours it confirms is
    /// `accepted` (clearing only an `auto_merge` error); the item completes.
    async fn merged(&self, change: &ChangeRequest) -> Result<ExecOutcome, ExecError> {
        let result = self.details.journal.result;
        if result.is_some() && result != Some(MergeResult::Accepted) {
            self.record(MergeResult::Accepted, change.head_sha.as_deref(), None)
                .await?;
        }
        self.complete(
            change.number,
            change.head_sha.as_deref(),
            change.merge_commit_sha.as_deref(),
        )
        .await
    }

    async fn record(
        &self,
        result: MergeResult,
        head: Option<&str>,
        error: Option<&str>,
    ) -> Result<(), ExecError> {
        self.mr
            .store
            .merge_result(
                self.view.item.id,
                result,
                head,
                error.map(|message| ("auto_merge", message)),
                self.now(),
            )
            .await
            .map_err(store_error)
    }

    /// The failed jobs of the change request's failed head (GitLab: its
    /// head pipeline; GitHub: the workflow runs of its head commit) that the
    /// CI retry does not track yet, as its dimension; `None` when there are
    /// none, the forge lists no CI jobs, or the listing failed (a later
    /// reconcile tries again).
    async fn untracked_failed_jobs(&self, change: &ChangeRequest) -> Option<DimensionUpdate> {
        if change.ci != CiStatus::Failed || !self.details.spec.automation.ci_retry {
            return None;
        }
        let ci = self.forge.ci_jobs()?;
        let listed = match ci.head_check() {
            wq_forge::CiHeadCheck::HeadPipeline => {
                ci.pipeline_jobs(self.project(), change.pipeline_id?).await
            }
            wq_forge::CiHeadCheck::HeadSha => {
                ci.commit_jobs(self.project(), change.head_sha.as_deref()?)
                    .await
            }
        };
        match listed {
            Ok(listed) => crate::ci_retry::from_head_pipeline(self.details, self.view, &listed),
            Err(error) => {
                tracing::warn!(item = %self.view.item.id, %error, "listing the failed head's CI jobs failed");
                None
            }
        }
    }

    /// Title and description back to what was submitted.
    async fn correct_drift(&self, change: ChangeRequest) -> Result<ChangeRequest, ExecError> {
        let spec = &self.details.spec;
        let description = self.outgoing(&spec.description);
        if change.title == spec.title && change.description == description {
            return Ok(change);
        }
        tracing::info!(item = %self.view.item.id, number = change.number, "correcting title/description drift");
        self.forge
            .update_change(
                self.project(),
                change.number,
                &ChangeUpdate {
                    title: Some(&spec.title),
                    description: Some(&description),
                    ..ChangeUpdate::default()
                },
            )
            .await
            .map_err(|e| forge_failure("correcting the merge request's title and description", e))
    }
}

/// What the CI retry asks of its run (`ci_retry::RetryRun`): the run's own
/// claim, read right before each job retry, and each retry's record, made
/// right after it.
#[async_trait::async_trait]
impl crate::ci_retry::RetryRun for Run<'_> {
    async fn still_held(&self) -> Result<bool, ExecError> {
        self.mr
            .store
            .holds(self.view.item.id, self.lease()?, self.now())
            .await
            .map_err(store_error)
    }

    async fn job_retried(&self, metadata: serde_json::Value) -> Result<(), ExecError> {
        self.mr
            .store
            .record_job_retried(self.view.item.id, metadata, self.now())
            .await
            .map_err(store_error)
    }
}

/// Seconds before automatic merge call `count` (1 = the first retry):
/// `base` doubled per earlier retry, at most `cap`, and never before the
/// forge's `Retry-After`.
fn transient_backoff(
    base: u64,
    cap: u64,
    count: i64,
    retry_after: Option<std::time::Duration>,
) -> u64 {
    let doublings = u32::try_from(count.saturating_sub(1).clamp(0, 20)).unwrap_or(20);
    let backoff = base.saturating_mul(1 << doublings).min(cap.max(base));
    let asked = retry_after.map_or(0, |after| {
        after.as_secs() + u64::from(after.subsec_nanos() > 0)
    });
    backoff.max(asked).max(1)
}

/// The labels a change request should carry: its `current` ones without
/// those workqueue `applied` earlier and no longer `wanted`, plus every
/// wanted one (order kept, new ones last), names compared as the forge
/// compares them (`case`: on GitHub, `bug` wanted is the `Bug` the pull
/// request carries).
fn converged_labels(
    current: &[String],
    applied: &[String],
    wanted: &[String],
    case: LabelCase,
) -> Vec<String> {
    let mut next: Vec<String> = current
        .iter()
        .filter(|label| case.contains(wanted, label) || !case.contains(applied, label))
        .cloned()
        .collect();
    for label in wanted {
        if !case.contains(&next, label) {
            next.push(label.clone());
        }
    }
    next
}

/// What [`Run::write_note`] did to the status note.
pub(crate) struct NoteWrite {
    pub id: u64,
    /// `forge.note_posted` or `forge.note_edited`; `None` when the note
    /// already said the same.
    pub kind: Option<&'static str>,
    pub body_sha256: String,
}

impl NoteWrite {
    /// `outcome` with the audit record of this write, if it wrote.
    pub(crate) fn recorded(&self, number: u64, outcome: ExecOutcome) -> ExecOutcome {
        self.recorded_with_labels(number, outcome, &[])
    }

    /// [`NoteWrite::recorded`], naming the `labels` the same forge request
    /// added (a first note's, [`Forge::open_note`]), when there are any.
    pub(crate) fn recorded_with_labels(
        &self,
        number: u64,
        outcome: ExecOutcome,
        labels: &[String],
    ) -> ExecOutcome {
        let Some(kind) = self.kind else {
            return outcome;
        };
        let mut metadata = serde_json::json!({
            "number": number,
            "note_id": self.id,
            "body_sha256": self.body_sha256,
        });
        if !labels.is_empty() {
            metadata["labels_added"] = serde_json::json!(labels);
        }
        outcome.with_record(kind, metadata)
    }
}

fn completed() -> ExecOutcome {
    ExecOutcome::done()
        .with_phase(Phase::Completed, None)
        .with_dimension(DimensionUpdate::new(NEEDS_RECONCILE, false))
}

fn closed_on_forge() -> ExecOutcome {
    ExecOutcome::done()
        .with_phase(Phase::Cancelled, Some(CLOSED_ON_FORGE.into()))
        .with_dimension(DimensionUpdate::new(NEEDS_RECONCILE, false))
}

fn cancelled_empty(target: &str) -> ExecOutcome {
    ExecOutcome::done()
        .with_phase(
            Phase::Cancelled,
            Some(format!(
                "empty diff: {target} already contains these changes; the merge request was closed"
            )),
        )
        .with_dimension(DimensionUpdate::new(NEEDS_MR, false))
        .with_dimension(DimensionUpdate::new(NEEDS_EMPTY_CHECK, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(labels: &[&str]) -> Vec<String> {
        labels.iter().map(|&label| label.to_owned()).collect()
    }

    #[test]
    fn transient_backoff_doubles_up_to_the_cap_and_honours_retry_after() {
        assert_eq!(transient_backoff(30, 1800, 1, None), 30);
        assert_eq!(transient_backoff(30, 1800, 3, None), 120);
        assert_eq!(transient_backoff(30, 100, 5, None), 100);
        let after = Some(std::time::Duration::from_secs(120));
        assert_eq!(transient_backoff(30, 1800, 1, after), 120);
        let partial = Some(std::time::Duration::from_millis(1500));
        assert_eq!(transient_backoff(1, 1800, 1, partial), 2);
    }

    #[test]
    fn labels_converge_without_touching_a_persons() {
        let current = strings(&["old", "managed", "person"]);
        let applied = strings(&["old", "managed"]);
        let wanted = strings(&["new", "managed"]);
        for case in [LabelCase::Sensitive, LabelCase::Insensitive] {
            assert_eq!(
                converged_labels(&current, &applied, &wanted, case),
                strings(&["managed", "person", "new"])
            );
            // Nothing known as applied: nothing is removed.
            assert_eq!(
                converged_labels(&current, &[], &wanted, case),
                strings(&["old", "managed", "person", "new"])
            );
        }
    }

    #[test]
    fn labels_converge_as_the_forge_compares_their_names() {
        // The pull request carries the repository's `Bug` and `Managed`
        // for the `bug` and `managed` workqueue applied.
        let current = strings(&["Bug", "Managed", "person"]);
        let applied = strings(&["bug", "managed"]);
        let wanted = strings(&["managed"]);
        let next = converged_labels(&current, &applied, &wanted, LabelCase::Insensitive);
        assert_eq!(next, strings(&["Managed", "person"]));
        assert_eq!(
            label_diff(&current, &next, LabelCase::Insensitive),
            (vec![], strings(&["Bug"])),
            "`bug` is taken off as `Bug`; `managed` is not added again"
        );
        // Where case tells labels apart, `Bug` and `Managed` are others'.
        let next = converged_labels(&current, &applied, &wanted, LabelCase::Sensitive);
        assert_eq!(next, strings(&["Bug", "Managed", "person", "managed"]));
    }
}
