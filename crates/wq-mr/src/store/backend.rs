//! The store's operations, written once for both backends: the
//! [`MrBackend`] trait `MrStore` calls through, and `mr_backend!`, which
//! implements it for a backend from what really differs between the two.
//!
//! A backend type (`SqliteBackend`, `PgBackend`) holds its `store` and
//! provides, as associated functions:
//!
//! - the codec: `id`, `at` and `json` turn an `ItemId`, a time and a JSON
//!   value into what its columns bind; `read_id`, `read_at`,
//!   `read_optional_at` and `read_json` decode them from a row;
//! - `write(statements)`: the one door for writes, which runs `statements`
//!   in a transaction and returns after it committed;
//! - `migration_pool()`: where the migrations run;
//! - `live(conn, spec)`: the upsert's lookup of the branch's live item,
//!   with whatever locking the backend needs.
//!
//! The statement texts are the shared files under `store/sql/` (the
//! portable subset: `$n` parameters, no backend functions).

use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use time::OffsetDateTime;
use wq_core::{ItemId, LeaseEpoch};
use wq_store::StoreResult;

use super::{
    BranchOwnership, Lookup, MergeResult, MrDetails, Observation, QueueWatch, RecordedChange,
    SubmissionRecord, UpsertInput, Upserted,
};
use crate::spec::MrSpec;

/// A boxed, sendable future borrowing for `'a` (a write's statements).
pub(super) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The operations of [`super::MrStore`] on one backend (one attempt each;
/// the upsert's retry and the public documentation live in `MrStore`).
#[async_trait]
pub(super) trait MrBackend: Send + Sync + std::fmt::Debug {
    async fn migrate(&self) -> StoreResult<()>;
    async fn upsert(&self, input: &UpsertInput<'_>) -> StoreResult<Upserted>;
    async fn get(&self, id: ItemId) -> StoreResult<Option<MrDetails>>;
    async fn find_active(
        &self,
        forge: &str,
        project: &str,
        lookup: Lookup<'_>,
    ) -> StoreResult<Option<ItemId>>;
    async fn queue_watch(
        &self,
        forge: &str,
        after: Option<(&str, u64)>,
        limit: u32,
    ) -> StoreResult<Vec<QueueWatch>>;
    async fn record_change(&self, id: ItemId, change: &RecordedChange<'_>) -> StoreResult<()>;
    async fn mark_push_intent(
        &self,
        id: ItemId,
        lease: LeaseEpoch,
        now: OffsetDateTime,
    ) -> StoreResult<bool>;
    async fn clear_push_intent(&self, id: ItemId, now: OffsetDateTime) -> StoreResult<()>;
    async fn mark_note_intent(
        &self,
        id: ItemId,
        lease: LeaseEpoch,
        number: u64,
        now: OffsetDateTime,
    ) -> StoreResult<bool>;
    async fn branch_ownership(&self, id: ItemId, head: &str) -> StoreResult<BranchOwnership>;
    async fn change_created(&self, id: ItemId, number: u64) -> StoreResult<bool>;
    async fn holds(&self, id: ItemId, lease: LeaseEpoch, now: OffsetDateTime) -> StoreResult<bool>;
    async fn submissions(&self, id: ItemId) -> StoreResult<Vec<SubmissionRecord>>;
    async fn record_push(
        &self,
        id: ItemId,
        head_sha: &str,
        pushed: (&str, &str),
        now: OffsetDateTime,
    ) -> StoreResult<()>;
    async fn record_job_retried(
        &self,
        id: ItemId,
        metadata: serde_json::Value,
        now: OffsetDateTime,
    ) -> StoreResult<()>;
    async fn merge_transient(
        &self,
        id: ItemId,
        error: &str,
        retry_at: Option<OffsetDateTime>,
        now: OffsetDateTime,
    ) -> StoreResult<()>;
    async fn hand_over(
        &self,
        id: ItemId,
        lease: LeaseEpoch,
        merged_head: Option<String>,
        caller: Option<String>,
        now: OffsetDateTime,
    ) -> StoreResult<Option<ItemId>>;
    async fn observe(
        &self,
        id: ItemId,
        observation: &Observation<'_>,
        now: OffsetDateTime,
    ) -> StoreResult<()>;
    async fn reserve_merge(
        &self,
        id: ItemId,
        lease: LeaseEpoch,
        signature: &str,
        head_sha: &str,
        now: OffsetDateTime,
    ) -> StoreResult<bool>;
    async fn merge_result(
        &self,
        id: ItemId,
        result: MergeResult,
        queue_head_sha: Option<&str>,
        error: Option<(&str, &str)>,
        now: OffsetDateTime,
    ) -> StoreResult<()>;
    async fn authorize_merge_retry(
        &self,
        id: ItemId,
        now: OffsetDateTime,
        cutoff: OffsetDateTime,
    ) -> StoreResult<bool>;
}

/// [`UpsertInput`] owned, to move into a write.
pub(super) struct OwnedInput {
    pub spec: MrSpec,
    pub content_hash: String,
    pub metadata_hash: String,
    pub caller_identity: String,
    pub caller_is_admin: bool,
    pub now: OffsetDateTime,
}

impl OwnedInput {
    pub fn new(input: &UpsertInput<'_>) -> Self {
        Self {
            spec: input.spec.clone(),
            content_hash: input.content_hash.to_owned(),
            metadata_hash: input.metadata_hash.to_owned(),
            caller_identity: input.caller_identity.to_owned(),
            caller_is_admin: input.caller_is_admin,
            now: input.now,
        }
    }
}

/// Implements [`MrBackend`] for `backend` on the `sqlx` database `db`, with
/// `blocks`, `wq-store`'s building blocks of that backend, and the
/// migrations under `migrations/<dir>/` (see the module docs for what
/// `backend` provides).
macro_rules! mr_backend {
    (
        backend: $backend:ident,
        db: $db:ty,
        blocks: $($blocks:ident)::+,
        migrations: $dir:literal $(,)?
    ) => {
        /// The operations, written once in `store::backend`.
        mod operations {
            use std::sync::LazyLock;

            use async_trait::async_trait;
            use sqlx::Row as _;
            use sqlx::migrate::Migrator;
            use time::OffsetDateTime;
            use wq_core::{ItemId, Phase};
            use wq_store::{EmbeddedMigration, NewEvent, NewItem, StoreError, StoreResult};
            use $($blocks)::+ as blocks;

            use super::$backend;
            use crate::spec::{Automation, BranchName, MrSpec, ProjectPath};
            use crate::store::backend::{MrBackend, OwnedInput};
            use crate::store::{
                BranchOwnership, Lookup, MergeJournal, MergeResult, MrDetails, Observation,
                QueueWatch, RETRY_MERGE_EVENT, RecordedChange, SUBMISSION_EVENT,
                SubmissionRecord, UpsertInput, UpsertOutcome, Upserted, classify, from_json,
                idempotency_key, json_of, phase_and, queue_entry, refused_to, signed,
                submission_audit, submission_dimensions, submission_event, unsigned,
            };

            static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
                let migration = |version, description, sql| EmbeddedMigration {
                    version,
                    description,
                    sql,
                };
                wq_store::migrator(&[
                    migration(1000, "mr_details", include_str!(
                        concat!("../../migrations/", $dir, "/1000_mr_details.sql")
                    )),
                    migration(1001, "item_place", include_str!(
                        concat!("../../migrations/", $dir, "/1001_item_place.sql")
                    )),
                    migration(1002, "mr_ownership", include_str!(
                        concat!("../../migrations/", $dir, "/1002_mr_ownership.sql")
                    )),
                    migration(1003, "mr_converge", include_str!(
                        concat!("../../migrations/", $dir, "/1003_mr_converge.sql")
                    )),
                    migration(1004, "mr_note_intent", include_str!(
                        concat!("../../migrations/", $dir, "/1004_mr_note_intent.sql")
                    )),
                    migration(1005, "mr_push_content", include_str!(
                        concat!("../../migrations/", $dir, "/1005_mr_push_content.sql")
                    )),
                    migration(1006, "mr_lookup_indexes", include_str!(
                        concat!("../../migrations/", $dir, "/1006_mr_lookup_indexes.sql")
                    )),
                    migration(1007, "mr_unchanged_in_one_call", include_str!(
                        concat!("../../migrations/", $dir, "/1007_mr_unchanged_in_one_call.sql")
                    )),
                ])
            });

            type Query = sqlx::query::Query<'static, $db, <$db as sqlx::Database>::Arguments>;
            type Connection = <$db as sqlx::Database>::Connection;
            type DbRow = <$db as sqlx::Database>::Row;

            impl $backend {
                /// Runs `statements` in one transaction through the write door.
                async fn execute<const N: usize>(&self, statements: [Query; N]) -> StoreResult<()> {
                    self.write(move |conn| Box::pin(async move {
                        for statement in statements {
                            statement.execute(&mut *conn).await?;
                        }
                        Ok(())
                    }))
                    .await
                }

                /// Runs `statement` in one transaction through the write door,
                /// only while the run that claimed `id` as `lease` holds it at
                /// `now` (`wq_store`'s `lease_held`, first); `false`: it does
                /// not, and nothing was written.
                async fn execute_held(
                    &self,
                    id: ItemId,
                    lease: wq_core::LeaseEpoch,
                    now: OffsetDateTime,
                    statement: Query,
                ) -> StoreResult<bool> {
                    self.write(move |conn| Box::pin(async move {
                        if !blocks::lease_held(&mut *conn, id, lease, now).await? {
                            return Ok(false);
                        }
                        statement.execute(&mut *conn).await?;
                        Ok(true)
                    }))
                    .await
                }

                /// Runs `statements` and appends `audit` (last) in one
                /// transaction; the record is logged once committed.
                async fn execute_audited<const N: usize>(
                    &self,
                    statements: [Query; N],
                    audit: wq_store::audit::NewAudit,
                ) -> StoreResult<()> {
                    let record = self
                        .write(move |conn| Box::pin(async move {
                            for statement in statements {
                                statement.execute(&mut *conn).await?;
                            }
                            blocks::append_audit(&mut *conn, audit).await
                        }))
                        .await?;
                    wq_store::audit::log(std::slice::from_ref(&record));
                    Ok(())
                }

                /// One row of the submission history, in the upsert's transaction.
                pub(super) async fn record_submission(
                    conn: &mut Connection,
                    id: ItemId,
                    generation: i64,
                    input: &OwnedInput,
                    outcome: UpsertOutcome,
                ) -> StoreResult<()> {
                    sqlx::query(include_str!("sql/insert_submission.sql"))
                        .bind(Self::id(id))
                        .bind(generation)
                        .bind(&input.content_hash)
                        .bind(outcome.as_str())
                        .bind(&input.caller_identity)
                        .bind(Self::at(input.now))
                        .execute(&mut *conn)
                        .await?;
                    Ok(())
                }

                /// The submission's desired state, bound as `$1`-`$12` of
                /// `update_spec.sql` and `insert.sql`.
                fn bind_spec(sql: &'static str, id: ItemId, input: &OwnedInput) -> Query {
                    let spec = &input.spec;
                    sqlx::query(sql)
                        .bind(Self::id(id))
                        .bind(spec.target_branch.as_str())
                        .bind(&spec.title)
                        .bind(&spec.description)
                        .bind(&spec.commit_message)
                        .bind(Self::json(json_of(&spec.labels)))
                        .bind(Self::json(json_of(&spec.file_actions)))
                        .bind(spec.automation.auto_merge)
                        .bind(spec.automation.ci_retry)
                        .bind(&input.content_hash)
                        .bind(&input.metadata_hash)
                        .bind(Self::at(input.now))
                }

                /// The upsert in the caller's transaction, and the audit record
                /// it appended (none when nothing was written).
                async fn upsert_on(
                    conn: &mut Connection,
                    input: &OwnedInput,
                ) -> StoreResult<(Upserted, Option<wq_store::audit::AuditRecord>)> {
                    let spec = &input.spec;
                    let now = input.now;
                    let Some(live) = Self::live(&mut *conn, spec).await? else {
                        let generation: i64 =
                            sqlx::query_scalar(include_str!("sql/next_generation.sql"))
                                .bind(&spec.forge)
                                .bind(spec.project.as_str())
                                .bind(spec.source_branch.as_str())
                                .fetch_one(&mut *conn)
                                .await?;
                        let id = ItemId::new_v7();
                        let (_, chain) = blocks::insert_new_item(
                            &mut *conn,
                            &NewItem {
                                id,
                                item_type: crate::TYPE_NAME.to_owned(),
                                idempotency_key: Some(idempotency_key(spec, generation)),
                                caller_identity: Some(input.caller_identity.clone()),
                                place: Some((spec.forge.clone(), spec.project.to_string())),
                                now,
                                dimensions: Vec::new(),
                            },
                        )
                        .await?;
                        Self::bind_spec(include_str!("sql/insert.sql"), id, input)
                            .bind(&spec.forge)
                            .bind(spec.project.as_str())
                            .bind(spec.source_branch.as_str())
                            .bind(generation)
                            .execute(&mut *conn)
                            .await?;
                        let outcome = UpsertOutcome::Created;
                        let audit = submission_audit(id, generation, input, outcome, None);
                        let record = Self::record_created(conn, chain, generation, input, audit).await?;
                        return Ok((Upserted { id, outcome }, Some(record)));
                    };
                    let id = Self::read_id(&live, 0)?;
                    let phase: Phase = live
                        .try_get::<&str, _>(1)?
                        .parse()
                        .map_err(|e| StoreError::Corrupt(format!("work_items.phase: {e}")))?;
                    let outcome = classify(
                        phase,
                        [live.try_get(2)?, live.try_get(3)?, live.try_get(4)?],
                        [&input.content_hash, &input.metadata_hash, &spec.target_branch],
                    );
                    let owner: Option<String> = live.try_get(5)?;
                    let generation: i64 = live.try_get(6)?;
                    let previous: Option<String> = live.try_get(2)?;
                    let (caller, admin) = (&input.caller_identity, input.caller_is_admin);
                    if refused_to(outcome, owner.as_deref(), caller, admin) {
                        return Ok((Upserted { id, outcome: UpsertOutcome::NotOwner }, None));
                    }
                    let audit = submission_audit(id, generation, input, outcome, Some(phase_and(phase, previous)));
                    if outcome == UpsertOutcome::Unchanged {
                        let record = Self::record_unchanged(conn, id, generation, input, audit).await?;
                        return Ok((Upserted { id, outcome }, Some(record)));
                    }
                    Self::record_submission(conn, id, generation, input, outcome).await?;
                    if outcome == UpsertOutcome::Retried {
                        blocks::retry_item(&mut *conn, id, now).await?;
                    }
                    Self::bind_spec(include_str!("sql/update_spec.sql"), id, input)
                        .execute(&mut *conn)
                        .await?;
                    let body = submission_event(outcome);
                    let change = body["change"].as_str().unwrap_or_default();
                    for update in submission_dimensions(change) {
                        blocks::upsert_dimension(&mut *conn, id, &update, now).await?;
                    }
                    blocks::insert_event(
                        &mut *conn,
                        &NewEvent {
                            item_id: id,
                            event_type: SUBMISSION_EVENT.to_owned(),
                            body,
                            now,
                            origin: None,
                        },
                    )
                    .await?;
                    let record = blocks::append_audit(&mut *conn, audit).await?;
                    Ok((Upserted { id, outcome }, Some(record)))
                }

                fn details_from_row(row: &DbRow) -> StoreResult<MrDetails> {
                    Ok(MrDetails {
                        id: Self::read_id(row, "work_item_id")?,
                        spec: MrSpec {
                            forge: row.try_get("forge")?,
                            project: ProjectPath::from_store(row.try_get("project")?),
                            source_branch: BranchName::from_store(row.try_get("source_branch")?),
                            target_branch: BranchName::from_store(row.try_get("target_branch")?),
                            title: row.try_get("title")?,
                            description: row.try_get("description")?,
                            commit_message: row.try_get("commit_message")?,
                            labels: from_json(Self::read_json(row, "labels")?, "labels")?,
                            file_actions: from_json(
                                Self::read_json(row, "file_actions")?,
                                "file_actions",
                            )?,
                            automation: Automation {
                                auto_merge: row.try_get("auto_merge")?,
                                ci_retry: row.try_get("ci_retry")?,
                            },
                        },
                        generation: row.try_get("generation")?,
                        content_hash: row.try_get("content_hash")?,
                        metadata_hash: row.try_get("metadata_hash")?,
                        mr_number: unsigned(row.try_get("mr_number")?, "mr_number")?,
                        mr_url: row.try_get("mr_url")?,
                        head_sha: row.try_get("head_sha")?,
                        head_pipeline_id: unsigned(
                            row.try_get("head_pipeline_id")?,
                            "head_pipeline_id",
                        )?,
                        pushed_content_hash: row.try_get("pushed_content_hash")?,
                        queue: queue_entry(
                            row.try_get("merge_queue_state")?,
                            row.try_get("merge_queue_position")?,
                            row.try_get("merge_queue_eta_seconds")?,
                        ),
                        journal: MergeJournal {
                            signature: row.try_get("last_merge_signature")?,
                            attempt_at: Self::read_optional_at(row, "last_merge_attempt_at")?,
                            queue_head_sha: row.try_get("last_queue_attempt_head_sha")?,
                            result: row
                                .try_get::<Option<&str>, _>("last_merge_result")?
                                .map(MergeResult::parse)
                                .transpose()?,
                            error_kind: row.try_get("last_error_kind")?,
                            error: row.try_get("last_error")?,
                            retry_authorized: row.try_get("merge_retry_authorized")?,
                            transient_failures: row.try_get("merge_transient_count")?,
                            retry_at: Self::read_optional_at(row, "merge_retry_at")?,
                        },
                        mr_created: row.try_get("mr_created")?,
                        push_intent_at: Self::read_optional_at(row, "push_intent_at")?,
                        applied_labels: Self::read_optional_json(row, "applied_labels")?
                            .map(|labels| from_json(labels, "applied_labels"))
                            .transpose()?,
                        pushed_target_branch: row.try_get("pushed_target_branch")?,
                        note_intent: unsigned(
                            row.try_get("note_intent_number")?,
                            "note_intent_number",
                        )?,
                        created_at: Self::read_at(row, "created_at")?,
                        updated_at: Self::read_at(row, "updated_at")?,
                    })
                }
            }

            #[async_trait]
            impl MrBackend for $backend {
                async fn migrate(&self) -> StoreResult<()> {
                    MIGRATOR.run(self.migration_pool()).await?;
                    Ok(())
                }

                async fn upsert(&self, input: &UpsertInput<'_>) -> StoreResult<Upserted> {
                    let input = OwnedInput::new(input);
                    let (upserted, record) = self
                        .write(move |conn| Box::pin(async move {
                            Self::upsert_on(conn, &input).await
                        }))
                        .await?;
                    wq_store::audit::log(record.as_slice());
                    Ok(upserted)
                }

                async fn get(&self, id: ItemId) -> StoreResult<Option<MrDetails>> {
                    let row = sqlx::query(include_str!("sql/get.sql"))
                        .bind(Self::id(id))
                        .fetch_optional(self.store.pool())
                        .await?;
                    row.as_ref().map(Self::details_from_row).transpose()
                }

                async fn find_active(
                    &self,
                    forge: &str,
                    project: &str,
                    lookup: Lookup<'_>,
                ) -> StoreResult<Option<ItemId>> {
                    let on = |sql: &'static str| sqlx::query::<$db>(sql).bind(forge).bind(project);
                    let query = match lookup {
                        Lookup::Number(number) => on(include_str!("sql/active_by_number.sql"))
                            .bind(signed(Some(number))),
                        Lookup::Pipeline(pipeline) => on(include_str!("sql/active_by_pipeline.sql"))
                            .bind(signed(Some(pipeline))),
                        Lookup::Branch(branch) => on(include_str!("sql/active_by_branch.sql"))
                            .bind(branch),
                        Lookup::HeadSha(sha) => on(include_str!("sql/active_by_head_sha.sql"))
                            .bind(sha),
                    };
                    let row = query.fetch_optional(self.store.pool()).await?;
                    row.map(|row| Self::read_id(&row, 0)).transpose()
                }

                async fn queue_watch(
                    &self,
                    forge: &str,
                    after: Option<(&str, u64)>,
                    limit: u32,
                ) -> StoreResult<Vec<QueueWatch>> {
                    let (after_project, after_number) = match after {
                        Some((project, number)) => (project, signed(Some(number))),
                        None => ("", Some(-1)),
                    };
                    let rows = sqlx::query(include_str!("sql/queue_watch.sql"))
                        .bind(forge)
                        .bind(after_project)
                        .bind(after_number)
                        .bind(i64::from(limit))
                        .fetch_all(self.store.pool())
                        .await?;
                    rows.iter()
                        .map(|row| {
                            Ok(QueueWatch {
                                id: Self::read_id(row, 0)?,
                                project: row.try_get(1)?,
                                number: unsigned(Some(row.try_get(2)?), "mr_number")?
                                    .unwrap_or_default(),
                                entry: queue_entry(
                                    row.try_get(3)?,
                                    row.try_get(4)?,
                                    row.try_get(5)?,
                                ),
                            })
                        })
                        .collect()
                }

                async fn record_change(
                    &self,
                    id: ItemId,
                    change: &RecordedChange<'_>,
                ) -> StoreResult<()> {
                    let kind = if change.created { "forge.change_created" } else { "forge.change_updated" };
                    let audit = wq_store::audit::NewAudit::new(id, change.now, wq_store::audit::ENGINE, kind)
                        .trigger(serde_json::json!({"source": "worker", "action": "ensure_mr"}))
                        .metadata(serde_json::json!({
                            "number": change.number,
                            "url": change.url,
                            "head_sha": change.head_sha,
                            "content_hash": change.pushed_content_hash,
                            "target_branch": change.target_branch,
                            "labels": json_of(&change.labels),
                        }));
                    self.execute_audited([sqlx::query(include_str!("sql/record_change.sql"))
                        .bind(Self::id(id))
                        .bind(signed(Some(change.number)))
                        .bind(change.url)
                        .bind(change.head_sha)
                        .bind(change.pushed_content_hash)
                        .bind(Self::at(change.now))
                        .bind(change.created)
                        .bind(change.target_branch)
                        .bind(Self::json(json_of(&change.labels)))], audit)
                    .await
                }

                async fn mark_push_intent(
                    &self,
                    id: ItemId,
                    lease: wq_core::LeaseEpoch,
                    now: OffsetDateTime,
                ) -> StoreResult<bool> {
                    let statement = sqlx::query(include_str!("sql/push_intent.sql"))
                        .bind(Self::id(id))
                        .bind(Self::at(now));
                    self.execute_held(id, lease, now, statement).await
                }

                async fn clear_push_intent(
                    &self,
                    id: ItemId,
                    now: OffsetDateTime,
                ) -> StoreResult<()> {
                    self.execute([sqlx::query(include_str!("sql/clear_push_intent.sql"))
                        .bind(Self::id(id))
                        .bind(Self::at(now))])
                    .await
                }

                async fn mark_note_intent(
                    &self,
                    id: ItemId,
                    lease: wq_core::LeaseEpoch,
                    number: u64,
                    now: OffsetDateTime,
                ) -> StoreResult<bool> {
                    let statement = sqlx::query(include_str!("sql/note_intent.sql"))
                        .bind(Self::id(id))
                        .bind(signed(Some(number)))
                        .bind(Self::at(now));
                    self.execute_held(id, lease, now, statement).await
                }

                async fn branch_ownership(
                    &self,
                    id: ItemId,
                    head: &str,
                ) -> StoreResult<BranchOwnership> {
                    let (pushed, intent_pending): (bool, bool) =
                        sqlx::query_as(include_str!("sql/branch_ownership.sql"))
                            .bind(Self::id(id))
                            .bind(head)
                            .fetch_one(self.store.pool())
                            .await?;
                    Ok(BranchOwnership { pushed, intent_pending })
                }

                async fn change_created(&self, id: ItemId, number: u64) -> StoreResult<bool> {
                    Ok(sqlx::query_scalar(include_str!("sql/change_created.sql"))
                        .bind(Self::id(id))
                        .bind(signed(Some(number)))
                        .fetch_one(self.store.pool())
                        .await?)
                }

                async fn holds(
                    &self,
                    id: ItemId,
                    lease: wq_core::LeaseEpoch,
                    now: OffsetDateTime,
                ) -> StoreResult<bool> {
                    let mut conn = self.store.pool().acquire().await?;
                    blocks::lease_held(&mut conn, id, lease, now).await
                }

                async fn submissions(&self, id: ItemId) -> StoreResult<Vec<SubmissionRecord>> {
                    let rows = sqlx::query(include_str!("sql/submissions.sql"))
                        .bind(Self::id(id))
                        .fetch_all(self.store.pool())
                        .await?;
                    rows.iter()
                        .map(|row| {
                            Ok(SubmissionRecord {
                                generation: row.try_get(0)?,
                                content_hash: row.try_get(1)?,
                                outcome: row.try_get(2)?,
                                caller_identity: row.try_get(3)?,
                                submitted_at: Self::read_at(row, 4)?,
                            })
                        })
                        .collect()
                }

                async fn record_push(
                    &self,
                    id: ItemId,
                    head_sha: &str,
                    (content_hash, target_branch): (&str, &str),
                    now: OffsetDateTime,
                ) -> StoreResult<()> {
                    let audit = wq_store::audit::NewAudit::new(id, now, wq_store::audit::ENGINE, "forge.push")
                        .trigger(serde_json::json!({"source": "worker", "action": "ensure_mr"}))
                        .metadata(serde_json::json!({
                            "commit_sha": head_sha,
                            "content_hash": content_hash,
                            "target_branch": target_branch,
                        }));
                    self.execute_audited([
                        sqlx::query(include_str!("sql/record_push.sql"))
                            .bind(Self::id(id))
                            .bind(head_sha)
                            .bind(content_hash.to_owned())
                            .bind(Self::at(now))
                            .bind(target_branch.to_owned()),
                        sqlx::query(include_str!("sql/insert_push.sql"))
                            .bind(Self::id(id))
                            .bind(head_sha)
                            .bind(Self::at(now))
                            .bind(content_hash.to_owned())
                            .bind(target_branch.to_owned()),
                    ], audit)
                    .await
                }

                async fn record_job_retried(
                    &self,
                    id: ItemId,
                    metadata: serde_json::Value,
                    now: OffsetDateTime,
                ) -> StoreResult<()> {
                    let audit = wq_store::audit::NewAudit::new(id, now, wq_store::audit::ENGINE, "forge.job_retried")
                        .trigger(serde_json::json!({"source": "worker", "action": "retry_ci_jobs"}))
                        .metadata(metadata);
                    self.execute_audited([], audit).await
                }

                async fn observe(
                    &self,
                    id: ItemId,
                    observation: &Observation<'_>,
                    now: OffsetDateTime,
                ) -> StoreResult<()> {
                    let queue = observation.queue;
                    self.execute([sqlx::query(include_str!("sql/observe.sql"))
                        .bind(Self::id(id))
                        .bind(observation.head_sha)
                        .bind(signed(observation.pipeline_id))
                        .bind(queue.map_or("", |q| q.state.as_str()))
                        .bind(queue.and_then(|q| q.position))
                        .bind(queue.and_then(|q| q.eta_seconds))
                        .bind(observation.url)
                        .bind(Self::at(now))])
                    .await
                }

                async fn reserve_merge(
                    &self,
                    id: ItemId,
                    lease: wq_core::LeaseEpoch,
                    signature: &str,
                    head_sha: &str,
                    now: OffsetDateTime,
                ) -> StoreResult<bool> {
                    let statement = sqlx::query(include_str!("sql/reserve_merge.sql"))
                        .bind(Self::id(id))
                        .bind(signature.to_owned())
                        .bind(Self::at(now))
                        .bind(false);
                    let audit = wq_store::audit::NewAudit::new(id, now, wq_store::audit::ENGINE, "forge.merge_reserved")
                        .trigger(serde_json::json!({"source": "worker", "action": "reconcile_mr"}))
                        .metadata(serde_json::json!({"signature": signature, "expected_head_sha": head_sha}));
                    let record = self
                        .write(move |conn| Box::pin(async move {
                            if !blocks::lease_held(&mut *conn, id, lease, now).await?
                                || statement.fetch_optional(&mut *conn).await?.is_none()
                            {
                                return Ok(None);
                            }
                            Ok(Some(blocks::append_audit(&mut *conn, audit).await?))
                        }))
                        .await?;
                    wq_store::audit::log(record.as_slice());
                    Ok(record.is_some())
                }

                async fn merge_result(
                    &self,
                    id: ItemId,
                    result: MergeResult,
                    queue_head_sha: Option<&str>,
                    error: Option<(&str, &str)>,
                    now: OffsetDateTime,
                ) -> StoreResult<()> {
                    let (kind, message) = error.unzip();
                    let audit = wq_store::audit::NewAudit::new(id, now, wq_store::audit::ENGINE, "forge.merge_answered")
                        .trigger(serde_json::json!({"source": "worker", "action": "reconcile_mr"}))
                        .metadata(serde_json::json!({
                            "result": result.as_str(),
                            "head_sha": queue_head_sha,
                            "error_kind": kind,
                            "error": message,
                        }));
                    self.execute_audited([sqlx::query(include_str!("sql/merge_result.sql"))
                        .bind(Self::id(id))
                        .bind(result.as_str())
                        .bind(queue_head_sha)
                        .bind(kind)
                        .bind(message)
                        .bind(Self::at(now))], audit)
                    .await
                }

                async fn merge_transient(
                    &self,
                    id: ItemId,
                    error: &str,
                    retry_at: Option<OffsetDateTime>,
                    now: OffsetDateTime,
                ) -> StoreResult<()> {
                    let audit = wq_store::audit::NewAudit::new(id, now, wq_store::audit::ENGINE, "forge.merge_transient")
                        .trigger(serde_json::json!({"source": "worker", "action": "reconcile_mr"}))
                        .metadata(serde_json::json!({
                            "error": error,
                            "retry_at": retry_at.map(|at| at.unix_timestamp()),
                        }));
                    self.execute_audited([sqlx::query(include_str!("sql/merge_transient.sql"))
                        .bind(Self::id(id))
                        .bind(error.to_owned())
                        .bind(Self::at(now))
                        .bind(retry_at.map(Self::at))], audit)
                    .await
                }

                async fn hand_over(
                    &self,
                    id: ItemId,
                    lease: wq_core::LeaseEpoch,
                    merged_head: Option<String>,
                    caller: Option<String>,
                    now: OffsetDateTime,
                ) -> StoreResult<Option<ItemId>> {
                    let Some(details) = self.get(id).await? else {
                        return Ok(None);
                    };
                    self.write(move |conn| Box::pin(async move {
                        let spec = &details.spec;
                        // The upsert's locks, in its order: the branch, then
                        // the item (its row by the UPDATE below).
                        Self::lock_line(&mut *conn, spec, id).await?;
                        if !blocks::finish_leased(&mut *conn, id, lease, Phase::Completed, None, now)
                            .await?
                        {
                            return Ok(None);
                        }
                        // Read under the branch lock: a submission committed
                        // before it is seen here, one after it finds the item
                        // completed and starts the next generation itself.
                        let unmerged: bool = sqlx::query_scalar(include_str!("sql/unmerged.sql"))
                            .bind(Self::id(id))
                            .bind(merged_head)
                            .fetch_one(&mut *conn)
                            .await?;
                        if !unmerged {
                            return Ok(None);
                        }
                        let generation: i64 =
                            sqlx::query_scalar(include_str!("sql/next_generation.sql"))
                                .bind(&spec.forge)
                                .bind(spec.project.as_str())
                                .bind(spec.source_branch.as_str())
                                .fetch_one(&mut *conn)
                                .await?;
                        let successor = ItemId::new_v7();
                        blocks::insert_item(
                            &mut *conn,
                            &NewItem {
                                id: successor,
                                item_type: crate::TYPE_NAME.to_owned(),
                                idempotency_key: Some(idempotency_key(spec, generation)),
                                caller_identity: caller.clone(),
                                place: Some((spec.forge.clone(), spec.project.to_string())),
                                now,
                                dimensions: Vec::new(),
                            },
                        )
                        .await?;
                        sqlx::query(include_str!("sql/insert_successor.sql"))
                            .bind(Self::id(id))
                            .bind(Self::id(successor))
                            .bind(generation)
                            .bind(Self::at(now))
                            .execute(&mut *conn)
                            .await?;
                        // Its history starts with the submission it carries.
                        let current: String =
                            sqlx::query_scalar(include_str!("sql/content_hash.sql"))
                                .bind(Self::id(id))
                                .fetch_one(&mut *conn)
                                .await?;
                        sqlx::query(include_str!("sql/insert_submission.sql"))
                            .bind(Self::id(successor))
                            .bind(generation)
                            .bind(current)
                            .bind(UpsertOutcome::Created.as_str())
                            .bind(caller.unwrap_or_default())
                            .bind(Self::at(now))
                            .execute(&mut *conn)
                            .await?;
                        Ok(Some(successor))
                    }))
                    .await
                }

                async fn authorize_merge_retry(
                    &self,
                    id: ItemId,
                    now: OffsetDateTime,
                    cutoff: OffsetDateTime,
                ) -> StoreResult<bool> {
                    let event = NewEvent {
                        item_id: id,
                        event_type: RETRY_MERGE_EVENT.to_owned(),
                        body: serde_json::json!({}),
                        now,
                        origin: None,
                    };
                    let authorize = sqlx::query(include_str!("sql/authorize_retry.sql"))
                        .bind(Self::id(id))
                        .bind(Self::at(now))
                        .bind(Self::at(cutoff))
                        .bind(true);
                    self.write(move |conn| Box::pin(async move {
                        // The lock order (wq_store::postgres, "Lock order"): the
                        // event insert takes the item's advisory lock and then
                        // its work_items row, before the detail row; a refusal
                        // rolls the event back to the savepoint.
                        let mut savepoint = sqlx::Connection::begin(&mut *conn).await?;
                        blocks::insert_event(&mut savepoint, &event).await?;
                        if authorize.fetch_optional(&mut *savepoint).await?.is_none() {
                            savepoint.rollback().await?;
                            return Ok(false);
                        }
                        savepoint.commit().await?;
                        Ok(true)
                    }))
                    .await
                }
            }
        }
    };
}
pub(super) use mr_backend;
