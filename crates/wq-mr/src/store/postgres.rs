//! `mr_details` on PostgreSQL. The upsert serialises per branch with an
//! advisory lock, then takes the live item's advisory lock and row lock in
//! the store's lock order; a concurrent first insert loses on the partial
//! unique index of the idempotency key and is retried by the caller
//! (DDR-40).

use std::sync::LazyLock;

use sqlx::Row;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use time::OffsetDateTime;
use wq_core::{ItemId, Phase};
use wq_store::postgres::{self as backend, PgStore};
use wq_store::to_micros;
use wq_store::{EmbeddedMigration, NewEvent, NewItem, StoreError, StoreResult};

use super::{
    Lookup, MergeResult, Observation, RawDetails, UpsertInput, UpsertOutcome, Upserted,
    idempotency_key, json_of, signed, submission_dimensions, submission_event,
};

/// A statement both backends run (`store/sql/`), or this backend's own
/// (`store/postgres/`).
macro_rules! sql {
    ($name:literal) => {
        include_str!(concat!("sql/", $name, ".sql"))
    };
    (own $name:literal) => {
        include_str!(concat!("postgres/", $name, ".sql"))
    };
}

static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    wq_store::migrator(&[
        EmbeddedMigration {
            version: 1000,
            description: "mr_details",
            sql: include_str!("../../migrations/postgres/1000_mr_details.sql"),
        },
        EmbeddedMigration {
            version: 1001,
            description: "item_place",
            sql: include_str!("../../migrations/postgres/1001_item_place.sql"),
        },
        EmbeddedMigration {
            version: 1002,
            description: "mr_ownership",
            sql: include_str!("../../migrations/postgres/1002_mr_ownership.sql"),
        },
    ])
});

pub(super) async fn migrate(store: &PgStore) -> StoreResult<()> {
    MIGRATOR.run(store.pool()).await?;
    Ok(())
}

/// The first key of the per-branch upsert lock ("wqmr").
const BRANCH_LOCK_NAMESPACE: i32 = 0x7771_6d72;

/// The second key: 32 bits of SHA-256 over the branch identity.
fn branch_lock_key(spec: &crate::spec::MrSpec) -> i32 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(
        format!(
            "{}\n{}\n{}",
            spec.forge,
            spec.project.to_lowercase(),
            spec.source_branch
        )
        .as_bytes(),
    );
    i32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

pub(super) async fn upsert(store: &PgStore, input: &UpsertInput<'_>) -> StoreResult<Upserted> {
    let spec = input.spec;
    let now = input.now;
    let mut tx = store.pool().begin().await?;
    sqlx::query(sql!(own "lock_branch"))
        .bind(BRANCH_LOCK_NAMESPACE)
        .bind(branch_lock_key(spec))
        .execute(&mut *tx)
        .await?;
    let live = live_by_branch(&mut tx, spec, false).await?;
    // Lock order (wq_store::postgres, "Lock order"): the item's advisory
    // lock before its row. The loop's exit holds the advisory lock while it
    // waits for the row; locking the row first here deadlocked with it.
    let live = match live {
        Some(row) => {
            backend::lock_item(&mut tx, ItemId(row.try_get::<uuid::Uuid, _>(0)?)).await?;
            // Read again under the row lock: the phase may have moved on
            // (completed, say) between the lookup and the lock.
            live_by_branch(&mut tx, spec, true).await?
        }
        None => None,
    };
    let Some(live) = live else {
        let generation: i64 = sqlx::query_scalar(sql!("next_generation"))
            .bind(&spec.forge)
            .bind(&spec.project)
            .bind(&spec.source_branch)
            .fetch_one(&mut *tx)
            .await?;
        let id = ItemId::new_v7();
        backend::insert_item(
            &mut tx,
            &NewItem {
                id,
                item_type: crate::TYPE_NAME.to_owned(),
                idempotency_key: Some(idempotency_key(spec, generation)),
                caller_identity: Some(input.caller_identity.to_owned()),
                place: Some((spec.forge.clone(), spec.project.clone())),
                now,
                dimensions: Vec::new(),
            },
        )
        .await?;
        sqlx::query(sql!("insert"))
            .bind(id.0)
            .bind(&spec.forge)
            .bind(&spec.project)
            .bind(&spec.source_branch)
            .bind(&spec.target_branch)
            .bind(generation)
            .bind(&spec.title)
            .bind(&spec.description)
            .bind(&spec.commit_message)
            .bind(Json(json_of(&spec.labels)))
            .bind(Json(json_of(&spec.file_actions)))
            .bind(spec.automation.auto_merge)
            .bind(spec.automation.ci_retry)
            .bind(input.content_hash)
            .bind(input.metadata_hash)
            .bind(to_micros(now))
            .execute(&mut *tx)
            .await?;
        record_submission(&mut tx, id, generation, input, UpsertOutcome::Created).await?;
        tx.commit().await?;
        return Ok(Upserted {
            id,
            outcome: UpsertOutcome::Created,
        });
    };
    let id = ItemId(live.try_get::<uuid::Uuid, _>(0)?);
    let phase: Phase = live
        .try_get::<&str, _>(1)?
        .parse()
        .map_err(|e| StoreError::Corrupt(format!("work_items.phase: {e}")))?;
    let outcome = super::classify(
        phase,
        [live.try_get(2)?, live.try_get(3)?, live.try_get(4)?],
        [input.content_hash, input.metadata_hash, &spec.target_branch],
    );
    let owner: Option<String> = live.try_get(5)?;
    let generation: i64 = live.try_get(6)?;
    if super::refused_to(outcome, owner.as_deref(), input) {
        tx.rollback().await?;
        return Ok(Upserted {
            id,
            outcome: UpsertOutcome::NotOwner,
        });
    }
    record_submission(&mut tx, id, generation, input, outcome).await?;
    if outcome == UpsertOutcome::Unchanged {
        tx.commit().await?;
        return Ok(Upserted { id, outcome });
    }
    if outcome == UpsertOutcome::Retried {
        backend::retry_item(&mut tx, id, now).await?;
    }
    sqlx::query(sql!("update_spec"))
        .bind(id.0)
        .bind(&spec.target_branch)
        .bind(&spec.title)
        .bind(&spec.description)
        .bind(&spec.commit_message)
        .bind(Json(json_of(&spec.labels)))
        .bind(Json(json_of(&spec.file_actions)))
        .bind(spec.automation.auto_merge)
        .bind(spec.automation.ci_retry)
        .bind(input.content_hash)
        .bind(input.metadata_hash)
        .bind(to_micros(now))
        .execute(&mut *tx)
        .await?;
    let body = submission_event(outcome);
    for update in submission_dimensions(body["change"].as_str().unwrap_or_default()) {
        backend::upsert_dimension(&mut tx, id, &update, now).await?;
    }
    backend::insert_event(
        &mut tx,
        &NewEvent {
            item_id: id,
            event_type: super::SUBMISSION_EVENT.to_owned(),
            body,
            now,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Upserted { id, outcome })
}

/// One row of the submission history, in the upsert's transaction.
async fn record_submission(
    tx: &mut sqlx::PgConnection,
    id: ItemId,
    generation: i64,
    input: &UpsertInput<'_>,
    outcome: UpsertOutcome,
) -> StoreResult<()> {
    sqlx::query(sql!("insert_submission"))
        .bind(id.0)
        .bind(generation)
        .bind(input.content_hash)
        .bind(outcome.as_str())
        .bind(input.caller_identity)
        .bind(to_micros(input.now))
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// The live item of the spec's branch; `lock` adds `FOR UPDATE OF w`.
/// Only the upsert creates items for a branch, under the branch lock, so
/// the locked read finds the same item or none (it became terminal).
async fn live_by_branch(
    tx: &mut sqlx::PgConnection,
    spec: &crate::spec::MrSpec,
    lock: bool,
) -> StoreResult<Option<PgRow>> {
    let sql = if lock {
        concat!(sql!(own "live_by_branch"), "\nFOR UPDATE OF w")
    } else {
        sql!(own "live_by_branch")
    };
    Ok(sqlx::query(sql)
        .bind(&spec.forge)
        .bind(&spec.project)
        .bind(&spec.source_branch)
        .fetch_optional(&mut *tx)
        .await?)
}

fn raw_from_row(row: &PgRow) -> StoreResult<RawDetails> {
    Ok(RawDetails {
        id: ItemId(row.try_get("work_item_id")?),
        forge: row.try_get("forge")?,
        project: row.try_get("project")?,
        source_branch: row.try_get("source_branch")?,
        target_branch: row.try_get("target_branch")?,
        generation: row.try_get("generation")?,
        title: row.try_get("title")?,
        description: row.try_get("description")?,
        commit_message: row.try_get("commit_message")?,
        labels: row.try_get::<Json<serde_json::Value>, _>("labels")?.0,
        file_actions: row.try_get::<Json<serde_json::Value>, _>("file_actions")?.0,
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
        last_merge_attempt_at: row.try_get("last_merge_attempt_at")?,
        last_queue_attempt_head_sha: row.try_get("last_queue_attempt_head_sha")?,
        last_merge_result: row.try_get("last_merge_result")?,
        last_error_kind: row.try_get("last_error_kind")?,
        last_error: row.try_get("last_error")?,
        merge_retry_authorized: row.try_get("merge_retry_authorized")?,
        mr_created: row.try_get("mr_created")?,
        push_intent_at: row.try_get("push_intent_at")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

pub(super) async fn get(store: &PgStore, id: ItemId) -> StoreResult<Option<RawDetails>> {
    let row = sqlx::query(sql!("get"))
        .bind(id.0)
        .fetch_optional(store.pool())
        .await?;
    row.as_ref().map(raw_from_row).transpose()
}

pub(super) async fn find_active(
    store: &PgStore,
    forge: &str,
    project: &str,
    lookup: Lookup<'_>,
) -> StoreResult<Option<ItemId>> {
    let query = match lookup {
        Lookup::Number(number) => sqlx::query_scalar::<_, uuid::Uuid>(sql!("active_by_number"))
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
    Ok(query.fetch_optional(store.pool()).await?.map(ItemId))
}

pub(super) async fn queue_watch(
    store: &PgStore,
    forge: &str,
    limit: u32,
) -> StoreResult<Vec<super::QueueWatchRow>> {
    let rows: Vec<super::QueueWatchRow<uuid::Uuid>> = sqlx::query_as(sql!("queue_watch"))
        .bind(forge)
        .bind(i64::from(limit))
        .fetch_all(store.pool())
        .await?;
    Ok(rows
        .into_iter()
        .map(|(id, project, number, state, position, eta)| {
            (ItemId(id), project, number, state, position, eta)
        })
        .collect())
}

pub(super) async fn record_change(
    store: &PgStore,
    id: ItemId,
    change: &super::RecordedChange<'_>,
) -> StoreResult<()> {
    sqlx::query(sql!("record_change"))
        .bind(id.0)
        .bind(signed(Some(change.number)))
        .bind(change.url)
        .bind(change.head_sha)
        .bind(change.pushed_content_hash)
        .bind(to_micros(change.now))
        .bind(change.created)
        .execute(store.pool())
        .await?;
    Ok(())
}

pub(super) async fn record_push(
    store: &PgStore,
    id: ItemId,
    head_sha: &str,
    pushed_content_hash: &str,
    now: OffsetDateTime,
) -> StoreResult<()> {
    let mut tx = store.pool().begin().await?;
    sqlx::query(sql!("record_push"))
        .bind(id.0)
        .bind(head_sha)
        .bind(pushed_content_hash)
        .bind(to_micros(now))
        .execute(&mut *tx)
        .await?;
    sqlx::query(sql!("insert_push"))
        .bind(id.0)
        .bind(head_sha)
        .bind(to_micros(now))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn mark_push_intent(
    store: &PgStore,
    id: ItemId,
    now: OffsetDateTime,
) -> StoreResult<()> {
    sqlx::query(sql!("push_intent"))
        .bind(id.0)
        .bind(to_micros(now))
        .execute(store.pool())
        .await?;
    Ok(())
}

pub(super) async fn branch_ownership(
    store: &PgStore,
    id: ItemId,
    head: &str,
) -> StoreResult<(bool, bool)> {
    Ok(sqlx::query_as(sql!("branch_ownership"))
        .bind(id.0)
        .bind(head)
        .fetch_one(store.pool())
        .await?)
}

pub(super) async fn change_created(store: &PgStore, id: ItemId, number: i64) -> StoreResult<bool> {
    Ok(sqlx::query_scalar(sql!("change_created"))
        .bind(id.0)
        .bind(number)
        .fetch_one(store.pool())
        .await?)
}

pub(super) async fn submissions(
    store: &PgStore,
    id: ItemId,
) -> StoreResult<Vec<super::SubmissionRecord>> {
    let rows: Vec<(i64, String, String, String, OffsetDateTime)> =
        sqlx::query_as(sql!("submissions"))
            .bind(id.0)
            .fetch_all(store.pool())
            .await?;
    Ok(rows
        .into_iter()
        .map(
            |(generation, content_hash, outcome, caller_identity, submitted_at)| {
                super::SubmissionRecord {
                    generation,
                    content_hash,
                    outcome,
                    caller_identity,
                    submitted_at,
                }
            },
        )
        .collect())
}

pub(super) async fn observe(
    store: &PgStore,
    id: ItemId,
    observation: &Observation<'_>,
    now: OffsetDateTime,
) -> StoreResult<()> {
    sqlx::query(sql!("observe"))
        .bind(id.0)
        .bind(observation.head_sha)
        .bind(signed(observation.pipeline_id))
        .bind(observation.queue.map_or("", |q| q.state.as_str()))
        .bind(observation.queue.and_then(|q| q.position))
        .bind(observation.queue.and_then(|q| q.eta_seconds))
        .bind(observation.url)
        .bind(to_micros(now))
        .execute(store.pool())
        .await?;
    Ok(())
}

pub(super) async fn reserve_merge(
    store: &PgStore,
    id: ItemId,
    signature: &str,
    now: OffsetDateTime,
) -> StoreResult<bool> {
    Ok(sqlx::query(sql!("reserve_merge"))
        .bind(id.0)
        .bind(signature)
        .bind(to_micros(now))
        .bind(false)
        .fetch_optional(store.pool())
        .await?
        .is_some())
}

pub(super) async fn merge_result(
    store: &PgStore,
    id: ItemId,
    result: MergeResult,
    queue_head_sha: Option<&str>,
    error_kind: Option<&str>,
    error: Option<&str>,
    now: OffsetDateTime,
) -> StoreResult<()> {
    sqlx::query(sql!("merge_result"))
        .bind(id.0)
        .bind(result.as_str())
        .bind(queue_head_sha)
        .bind(error_kind)
        .bind(error)
        .bind(to_micros(now))
        .execute(store.pool())
        .await?;
    Ok(())
}

pub(super) async fn authorize_merge_retry(
    store: &PgStore,
    id: ItemId,
    now: OffsetDateTime,
    cutoff: OffsetDateTime,
) -> StoreResult<bool> {
    let mut tx = store.pool().begin().await?;
    // The lock order (see `upsert`): the event insert takes the item's
    // advisory lock and then its work_items row, before the detail row
    // below; a refusal rolls the event back.
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
    let authorized = sqlx::query(sql!("authorize_retry"))
        .bind(id.0)
        .bind(to_micros(now))
        .bind(to_micros(cutoff))
        .bind(true)
        .fetch_optional(&mut *tx)
        .await?
        .is_some();
    if !authorized {
        tx.rollback().await?;
        return Ok(false);
    }
    tx.commit().await?;
    Ok(true)
}
