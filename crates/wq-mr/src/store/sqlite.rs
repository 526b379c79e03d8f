//! `mr_details` on SQLite: ids as text, times as integer microseconds, JSON
//! as text. Writes that must be atomic with the generic tables run on the
//! store's single writer (`begin_write`).

use std::sync::LazyLock;

use sqlx::Row;
use sqlx::SqliteConnection;
use sqlx::migrate::Migrator;
use sqlx::sqlite::SqliteRow;
use time::OffsetDateTime;
use wq_core::{ItemId, Phase};
use wq_store::sqlite::{self as backend, SqliteStore, from_micros, id_text, micros, parse_id};
use wq_store::{EmbeddedMigration, NewEvent, NewItem, StoreError, StoreResult};

use super::{
    Lookup, MergeResult, Observation, RawDetails, UpsertInput, UpsertOutcome, Upserted,
    idempotency_key, json_of, signed, submission_dimensions, submission_event,
};

/// A statement both backends run (`store/sql/`), or this backend's own
/// (`store/sqlite/`).
macro_rules! sql {
    ($name:literal) => {
        include_str!(concat!("sql/", $name, ".sql"))
    };
    (own $name:literal) => {
        include_str!(concat!("sqlite/", $name, ".sql"))
    };
}

static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    wq_store::migrator(&[
        EmbeddedMigration {
            version: 1000,
            description: "mr_details",
            sql: include_str!("../../migrations/sqlite/1000_mr_details.sql"),
        },
        EmbeddedMigration {
            version: 1001,
            description: "item_place",
            sql: include_str!("../../migrations/sqlite/1001_item_place.sql"),
        },
        EmbeddedMigration {
            version: 1002,
            description: "mr_ownership",
            sql: include_str!("../../migrations/sqlite/1002_mr_ownership.sql"),
        },
    ])
});

pub(super) async fn migrate(store: &SqliteStore) -> StoreResult<()> {
    MIGRATOR.run(store.writer()).await?;
    Ok(())
}

pub(super) async fn upsert(store: &SqliteStore, input: &UpsertInput<'_>) -> StoreResult<Upserted> {
    // Group commit: the lookup and the writes run in one savepoint of the
    // next batch, under the write lock, so they see one state of the table
    // and concurrent submissions share one fsync.
    let owned = OwnedInput {
        spec: input.spec.clone(),
        content_hash: input.content_hash.to_owned(),
        metadata_hash: input.metadata_hash.to_owned(),
        caller_identity: input.caller_identity.to_owned(),
        caller_is_admin: input.caller_is_admin,
        now: input.now,
    };
    store
        .write(move |conn| Box::pin(async move { upsert_on(conn, &owned).await }))
        .await
}

/// [`UpsertInput`] owned, to move into the batch.
struct OwnedInput {
    spec: crate::spec::MrSpec,
    content_hash: String,
    metadata_hash: String,
    caller_identity: String,
    caller_is_admin: bool,
    now: OffsetDateTime,
}

impl OwnedInput {
    fn borrowed(&self) -> UpsertInput<'_> {
        UpsertInput {
            spec: &self.spec,
            content_hash: &self.content_hash,
            metadata_hash: &self.metadata_hash,
            caller_identity: &self.caller_identity,
            caller_is_admin: self.caller_is_admin,
            now: self.now,
        }
    }
}

/// One row of the submission history, in the upsert's transaction.
async fn record_submission(
    conn: &mut SqliteConnection,
    id: ItemId,
    generation: i64,
    input: &OwnedInput,
    outcome: UpsertOutcome,
) -> StoreResult<()> {
    sqlx::query(sql!("insert_submission"))
        .bind(id_text(id))
        .bind(generation)
        .bind(&input.content_hash)
        .bind(outcome.as_str())
        .bind(&input.caller_identity)
        .bind(micros(input.now))
        .execute(&mut *conn)
        .await?;
    Ok(())
}

async fn upsert_on(conn: &mut SqliteConnection, input: &OwnedInput) -> StoreResult<Upserted> {
    let spec = &input.spec;
    let now = input.now;
    let live = sqlx::query(sql!(own "live_by_branch"))
        .bind(&spec.forge)
        .bind(&spec.project)
        .bind(&spec.source_branch)
        .fetch_optional(&mut *conn)
        .await?;
    let Some(live) = live else {
        let generation: i64 = sqlx::query_scalar(sql!("next_generation"))
            .bind(&spec.forge)
            .bind(&spec.project)
            .bind(&spec.source_branch)
            .fetch_one(&mut *conn)
            .await?;
        let id = ItemId::new_v7();
        backend::insert_item(
            &mut *conn,
            &NewItem {
                id,
                item_type: crate::TYPE_NAME.to_owned(),
                idempotency_key: Some(idempotency_key(spec, generation)),
                caller_identity: Some(input.caller_identity.clone()),
                place: Some((spec.forge.clone(), spec.project.clone())),
                now,
                dimensions: Vec::new(),
            },
        )
        .await?;
        sqlx::query(sql!("insert"))
            .bind(id_text(id))
            .bind(&spec.forge)
            .bind(&spec.project)
            .bind(&spec.source_branch)
            .bind(&spec.target_branch)
            .bind(generation)
            .bind(&spec.title)
            .bind(&spec.description)
            .bind(&spec.commit_message)
            .bind(json_of(&spec.labels).to_string())
            .bind(json_of(&spec.file_actions).to_string())
            .bind(spec.automation.auto_merge)
            .bind(spec.automation.ci_retry)
            .bind(&input.content_hash)
            .bind(&input.metadata_hash)
            .bind(micros(now))
            .execute(&mut *conn)
            .await?;
        record_submission(conn, id, generation, input, UpsertOutcome::Created).await?;
        return Ok(Upserted {
            id,
            outcome: UpsertOutcome::Created,
        });
    };
    let id = parse_id(live.try_get::<&str, _>(0)?)?;
    let phase: Phase = live
        .try_get::<&str, _>(1)?
        .parse()
        .map_err(|e| StoreError::Corrupt(format!("work_items.phase: {e}")))?;
    let outcome = super::classify(
        phase,
        [live.try_get(2)?, live.try_get(3)?, live.try_get(4)?],
        [
            &input.content_hash,
            &input.metadata_hash,
            &spec.target_branch,
        ],
    );
    let owner: Option<String> = live.try_get(5)?;
    let generation: i64 = live.try_get(6)?;
    if super::refused_to(outcome, owner.as_deref(), &input.borrowed()) {
        return Ok(Upserted {
            id,
            outcome: UpsertOutcome::NotOwner,
        });
    }
    record_submission(conn, id, generation, input, outcome).await?;
    if outcome == UpsertOutcome::Unchanged {
        return Ok(Upserted { id, outcome });
    }
    if outcome == UpsertOutcome::Retried {
        backend::retry_item(&mut *conn, id, now).await?;
    }
    sqlx::query(sql!("update_spec"))
        .bind(id_text(id))
        .bind(&spec.target_branch)
        .bind(&spec.title)
        .bind(&spec.description)
        .bind(&spec.commit_message)
        .bind(json_of(&spec.labels).to_string())
        .bind(json_of(&spec.file_actions).to_string())
        .bind(spec.automation.auto_merge)
        .bind(spec.automation.ci_retry)
        .bind(&input.content_hash)
        .bind(&input.metadata_hash)
        .bind(micros(now))
        .execute(&mut *conn)
        .await?;
    let body = submission_event(outcome);
    for update in submission_dimensions(body["change"].as_str().unwrap_or_default()) {
        backend::upsert_dimension(&mut *conn, id, &update, now).await?;
    }
    backend::insert_event(
        &mut *conn,
        &NewEvent {
            item_id: id,
            event_type: super::SUBMISSION_EVENT.to_owned(),
            body,
            now,
        },
    )
    .await?;
    Ok(Upserted { id, outcome })
}

fn raw_from_row(row: &SqliteRow) -> StoreResult<RawDetails> {
    let json = |column: &str| -> StoreResult<serde_json::Value> {
        let text: &str = row.try_get(column)?;
        serde_json::from_str(text)
            .map_err(|e| StoreError::Corrupt(format!("mr_details.{column}: {e}")))
    };
    Ok(RawDetails {
        id: parse_id(row.try_get("work_item_id")?)?,
        forge: row.try_get("forge")?,
        project: row.try_get("project")?,
        source_branch: row.try_get("source_branch")?,
        target_branch: row.try_get("target_branch")?,
        generation: row.try_get("generation")?,
        title: row.try_get("title")?,
        description: row.try_get("description")?,
        commit_message: row.try_get("commit_message")?,
        labels: json("labels")?,
        file_actions: json("file_actions")?,
        auto_merge: row.try_get("auto_merge")?,
        ci_retry: row.try_get("ci_retry")?,
        content_hash: row.try_get("content_hash")?,
        metadata_hash: row.try_get("metadata_hash")?,
        mr_number: row.try_get("mr_number")?,
        mr_url: row.try_get("mr_url")?,
        head_sha: row.try_get("head_sha")?,
        head_pipeline_id: row.try_get("head_pipeline_id")?,
        pushed_content_hash: row.try_get("pushed_content_hash")?,
        merge_queue_state: row.try_get("merge_queue_state")?,
        merge_queue_position: row.try_get("merge_queue_position")?,
        merge_queue_eta_seconds: row.try_get("merge_queue_eta_seconds")?,
        last_merge_signature: row.try_get("last_merge_signature")?,
        last_merge_attempt_at: row
            .try_get::<Option<i64>, _>("last_merge_attempt_at")?
            .map(from_micros)
            .transpose()?,
        last_queue_attempt_head_sha: row.try_get("last_queue_attempt_head_sha")?,
        last_merge_result: row.try_get("last_merge_result")?,
        last_error_kind: row.try_get("last_error_kind")?,
        last_error: row.try_get("last_error")?,
        merge_retry_authorized: row.try_get("merge_retry_authorized")?,
        mr_created: row.try_get("mr_created")?,
        push_intent_at: row
            .try_get::<Option<i64>, _>("push_intent_at")?
            .map(from_micros)
            .transpose()?,
        created_at: from_micros(row.try_get("created_at")?)?,
        updated_at: from_micros(row.try_get("updated_at")?)?,
    })
}

pub(super) async fn get(store: &SqliteStore, id: ItemId) -> StoreResult<Option<RawDetails>> {
    let row = sqlx::query(sql!("get"))
        .bind(id_text(id))
        .fetch_optional(store.pool())
        .await?;
    row.as_ref().map(raw_from_row).transpose()
}

pub(super) async fn find_active(
    store: &SqliteStore,
    forge: &str,
    project: &str,
    lookup: Lookup<'_>,
) -> StoreResult<Option<ItemId>> {
    let query = match lookup {
        Lookup::Number(number) => sqlx::query_scalar::<_, String>(sql!("active_by_number"))
            .bind(forge)
            .bind(project)
            .bind(signed(Some(number))),
        Lookup::Pipeline(pipeline) => sqlx::query_scalar(sql!("active_by_pipeline"))
            .bind(forge)
            .bind(project)
            .bind(signed(Some(pipeline))),
        Lookup::Branch(branch) => sqlx::query_scalar(sql!("active_by_branch"))
            .bind(forge)
            .bind(project)
            .bind(branch.to_owned()),
    };
    let id = query.fetch_optional(store.pool()).await?;
    id.as_deref().map(parse_id).transpose()
}

pub(super) async fn queue_watch(
    store: &SqliteStore,
    forge: &str,
    limit: u32,
) -> StoreResult<Vec<super::QueueWatchRow>> {
    let rows: Vec<super::QueueWatchRow<String>> = sqlx::query_as(sql!("queue_watch"))
        .bind(forge)
        .bind(i64::from(limit))
        .fetch_all(store.pool())
        .await?;
    rows.into_iter()
        .map(|(id, project, number, state, position, eta)| {
            Ok((parse_id(&id)?, project, number, state, position, eta))
        })
        .collect()
}

pub(super) async fn record_change(
    store: &SqliteStore,
    id: ItemId,
    change: &super::RecordedChange<'_>,
) -> StoreResult<()> {
    sqlx::query(sql!("record_change"))
        .bind(id_text(id))
        .bind(signed(Some(change.number)))
        .bind(change.url)
        .bind(change.head_sha)
        .bind(change.pushed_content_hash)
        .bind(micros(change.now))
        .bind(change.created)
        .execute(store.writer())
        .await?;
    Ok(())
}

pub(super) async fn record_push(
    store: &SqliteStore,
    id: ItemId,
    head_sha: &str,
    pushed_content_hash: &str,
    now: OffsetDateTime,
) -> StoreResult<()> {
    let mut tx = store.begin_write().await?;
    sqlx::query(sql!("record_push"))
        .bind(id_text(id))
        .bind(head_sha)
        .bind(pushed_content_hash)
        .bind(micros(now))
        .execute(&mut *tx)
        .await?;
    sqlx::query(sql!("insert_push"))
        .bind(id_text(id))
        .bind(head_sha)
        .bind(micros(now))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn mark_push_intent(
    store: &SqliteStore,
    id: ItemId,
    now: OffsetDateTime,
) -> StoreResult<()> {
    sqlx::query(sql!("push_intent"))
        .bind(id_text(id))
        .bind(micros(now))
        .execute(store.writer())
        .await?;
    Ok(())
}

pub(super) async fn branch_ownership(
    store: &SqliteStore,
    id: ItemId,
    head: &str,
) -> StoreResult<(bool, bool)> {
    Ok(sqlx::query_as(sql!("branch_ownership"))
        .bind(id_text(id))
        .bind(head)
        .fetch_one(store.pool())
        .await?)
}

pub(super) async fn change_created(
    store: &SqliteStore,
    id: ItemId,
    number: i64,
) -> StoreResult<bool> {
    Ok(sqlx::query_scalar(sql!("change_created"))
        .bind(id_text(id))
        .bind(number)
        .fetch_one(store.pool())
        .await?)
}

pub(super) async fn submissions(
    store: &SqliteStore,
    id: ItemId,
) -> StoreResult<Vec<super::SubmissionRecord>> {
    let rows: Vec<(i64, String, String, String, i64)> = sqlx::query_as(sql!("submissions"))
        .bind(id_text(id))
        .fetch_all(store.pool())
        .await?;
    rows.into_iter()
        .map(|(generation, content_hash, outcome, caller_identity, at)| {
            Ok(super::SubmissionRecord {
                generation,
                content_hash,
                outcome,
                caller_identity,
                submitted_at: from_micros(at)?,
            })
        })
        .collect()
}

pub(super) async fn observe(
    store: &SqliteStore,
    id: ItemId,
    observation: &Observation<'_>,
    now: OffsetDateTime,
) -> StoreResult<()> {
    sqlx::query(sql!("observe"))
        .bind(id_text(id))
        .bind(observation.head_sha)
        .bind(signed(observation.pipeline_id))
        .bind(observation.queue.map_or("", |q| q.state.as_str()))
        .bind(observation.queue.and_then(|q| q.position))
        .bind(observation.queue.and_then(|q| q.eta_seconds))
        .bind(observation.url)
        .bind(micros(now))
        .execute(store.writer())
        .await?;
    Ok(())
}

pub(super) async fn reserve_merge(
    store: &SqliteStore,
    id: ItemId,
    signature: &str,
    now: OffsetDateTime,
) -> StoreResult<bool> {
    Ok(sqlx::query(sql!("reserve_merge"))
        .bind(id_text(id))
        .bind(signature)
        .bind(micros(now))
        .bind(false)
        .fetch_optional(store.writer())
        .await?
        .is_some())
}

pub(super) async fn merge_result(
    store: &SqliteStore,
    id: ItemId,
    result: MergeResult,
    queue_head_sha: Option<&str>,
    error_kind: Option<&str>,
    error: Option<&str>,
    now: OffsetDateTime,
) -> StoreResult<()> {
    sqlx::query(sql!("merge_result"))
        .bind(id_text(id))
        .bind(result.as_str())
        .bind(queue_head_sha)
        .bind(error_kind)
        .bind(error)
        .bind(micros(now))
        .execute(store.writer())
        .await?;
    Ok(())
}

pub(super) async fn authorize_merge_retry(
    store: &SqliteStore,
    id: ItemId,
    now: OffsetDateTime,
    cutoff: OffsetDateTime,
) -> StoreResult<bool> {
    let mut tx = store.begin_write().await?;
    let authorized = sqlx::query(sql!("authorize_retry"))
        .bind(id_text(id))
        .bind(micros(now))
        .bind(micros(cutoff))
        .bind(true)
        .fetch_optional(&mut *tx)
        .await?
        .is_some();
    if !authorized {
        tx.rollback().await?;
        return Ok(false);
    }
    backend::insert_event(
        &mut tx,
        &NewEvent {
            item_id: id,
            event_type: super::RETRY_MERGE_EVENT.to_owned(),
            body: serde_json::json!({}),
            now,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}
