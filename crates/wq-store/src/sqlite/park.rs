//! The loop's exits that arrive together, parked with one statement per
//! step for the whole batch (a [`crate::coalesce::Coalescer`] gathers
//! them; the batch runs as one job of the group commit).
//!
//! Under `synchronous = FULL` the group commit already shares one fsync
//! among concurrent parks, but each park still ran about ten statements on
//! the one writer connection, each a round trip to sqlx's SQLite worker
//! thread. Here a batch of parks costs seven statements whatever its size:
//! the outcomes and parks (`items/park_many.sql`, one `UPDATE ... FROM`
//! that checks each lease and each item's pending events), the dimension
//! upserts (two: with and without a detail), the consumed timers, the chain
//! heads, and the audit records, chained in Rust as
//! [`super::append_audit_records`] chains them.
//!
//! Every step runs inside the writer's transaction, so what holds for one
//! park holds for each park of a batch: the check for events and the park
//! are atomic with respect to `event_insert` (DDR-34), a park whose lease
//! is gone writes nothing, and an outcome is written with its records.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};
use sqlx::SqliteConnection;
use wq_core::ItemId;

use super::{DbId, DbJson, id_text, micros};
use crate::audit::{AuditRecord, NewAudit};
use crate::codec::DbRow;
use crate::{OutcomeChanges, Park, ParkParams, StoreError, StoreResult};

/// What one park answers: parked or not, and the records it appended.
pub(crate) type Parked = (Park, Vec<AuditRecord>);

/// Parks `parks` (distinct items) set-based; each gets its own answer.
/// An error of a statement fails the whole batch (the caller's savepoint
/// rolls it back).
pub(crate) async fn park_many(
    conn: &mut SqliteConnection,
    parks: &[ParkParams],
) -> StoreResult<Vec<StoreResult<Parked>>> {
    let calls: Vec<Value> = parks
        .iter()
        .map(|park| {
            let outcome = park.outcome.as_ref();
            json!({
                "id": id_text(park.lease.id),
                "lease": micros(park.lease.until),
                "now": micros(park.now),
                "write": i32::from(outcome.is_some()),
                "phase": outcome.and_then(|outcome| outcome.phase).map(wq_core::Phase::as_str),
                "error": outcome.and_then(|outcome| outcome.error.as_deref()),
            })
        })
        .collect();
    let mut held: HashMap<ItemId, bool> = HashMap::with_capacity(parks.len());
    for row in sqlx::query(sql!("items/park_many.sql"))
        .bind(DbJson(Value::Array(calls)))
        .fetch_all(&mut *conn)
        .await?
    {
        let id: DbId = row.decode("id")?;
        let parked: bool = row.decode("parked")?;
        held.insert(id.0, parked);
    }

    let written: Vec<(&ParkParams, &OutcomeChanges)> = parks
        .iter()
        .filter(|park| held.contains_key(&park.lease.id))
        .filter_map(|park| park.outcome.as_ref().map(|outcome| (park, outcome)))
        .collect();
    upsert_dimensions(conn, &written).await?;

    let parked: Vec<Value> = parks
        .iter()
        .filter(|park| held.get(&park.lease.id) == Some(&true))
        .map(|park| json!({"id": id_text(park.lease.id), "now": micros(park.now)}))
        .collect();
    if !parked.is_empty() {
        sqlx::query(sql!("dimensions/clear_consumed_timers_many.sql"))
            .bind(DbJson(Value::Array(parked)))
            .execute(&mut *conn)
            .await?;
    }

    let mut records = append_records(conn, &written).await?;
    Ok(parks
        .iter()
        .map(|park| {
            let id = park.lease.id;
            match held.get(&id) {
                None => Err(StoreError::LeaseLost(id)),
                Some(&parked) => Ok((
                    if parked {
                        Park::Parked
                    } else {
                        Park::EventsPending
                    },
                    records.remove(&id).unwrap_or_default(),
                )),
            }
        })
        .collect())
}

/// The outcomes' dimension rows, at most one per (item, dimension,
/// variant): consecutive updates of one row fold into the last, keeping
/// the last detail given, as writing them in turn would leave the row.
async fn upsert_dimensions(
    conn: &mut SqliteConnection,
    written: &[(&ParkParams, &OutcomeChanges)],
) -> StoreResult<()> {
    let (mut with_detail, mut keep_detail) = (Vec::new(), Vec::new());
    for (park, outcome) in written {
        for update in crate::common::fold_dimension_updates(&outcome.dimensions) {
            let mut row = json!({
                "item": id_text(park.lease.id),
                "dimension": update.dimension,
                "variant": update.variant,
                "status": update.status.as_str(),
                "pending_until": update.pending_until.map(micros),
                "now": micros(park.now),
            });
            match &update.detail {
                Some(detail) => {
                    row["detail"] = Value::String(detail.to_string());
                    with_detail.push(row);
                }
                None => keep_detail.push(row),
            }
        }
    }
    for (statement, rows) in [
        (sql!("dimensions/upsert_many.sql"), with_detail),
        (sql!("dimensions/upsert_many_keep_detail.sql"), keep_detail),
    ] {
        if !rows.is_empty() {
            sqlx::query(statement)
                .bind(DbJson(Value::Array(rows)))
                .execute(&mut *conn)
                .await?;
        }
    }
    Ok(())
}

/// The written outcomes' records (`action.succeeded` and the executor's
/// own), chained to each item's head and appended in one statement.
async fn append_records(
    conn: &mut SqliteConnection,
    written: &[(&ParkParams, &OutcomeChanges)],
) -> StoreResult<HashMap<ItemId, Vec<AuditRecord>>> {
    let new: Vec<NewAudit> = written
        .iter()
        .flat_map(|(park, outcome)| {
            crate::audit::succeeded(
                park.lease.id,
                park.now,
                outcome.action.as_deref(),
                outcome.phase,
                outcome.error.as_deref(),
                &outcome.dimensions,
                &outcome.records,
            )
        })
        .collect();
    let mut by_item: HashMap<ItemId, Vec<AuditRecord>> = HashMap::new();
    if new.is_empty() {
        return Ok(by_item);
    }
    // Benchmarks measure the trail's cost by turning it off.
    #[cfg(feature = "testing")]
    if !crate::testing::audit_enabled() {
        for record in new {
            by_item
                .entry(record.item_id)
                .or_default()
                .push(record.chained(String::new()));
        }
        return Ok(by_item);
    }
    let items: HashSet<ItemId> = new.iter().map(|record| record.item_id).collect();
    let ids = Value::from(items.iter().map(|id| id_text(*id)).collect::<Vec<_>>());
    let DbJson(mut heads): DbJson<HashMap<String, String>> =
        sqlx::query_scalar(sql!("audit/heads_many.sql"))
            .bind(DbJson(&ids))
            .fetch_one(&mut *conn)
            .await?;
    let chained: Vec<AuditRecord> = new
        .into_iter()
        .map(|record| {
            let head = heads.entry(id_text(record.item_id)).or_default();
            let record = record.chained(std::mem::take(head));
            head.clone_from(&record.hash);
            record
        })
        .collect();
    let text = |value: &Option<Value>| value.as_ref().map(Value::to_string);
    let rows: Vec<Value> = chained
        .iter()
        .map(|record| {
            json!({
                "id": record.id.hyphenated().to_string(),
                "item": id_text(record.item_id),
                "at": micros(record.at),
                "actor": record.actor,
                "kind": record.kind,
                "old_state": text(&record.old_state),
                "new_state": text(&record.new_state),
                "trigger": text(&record.trigger),
                "metadata": record.metadata.to_string(),
                "prev_hash": record.prev_hash,
                "hash": record.hash,
            })
        })
        .collect();
    let appended = sqlx::query(sql!("audit/append_many.sql"))
        .bind(DbJson(Value::Array(rows)))
        .execute(&mut *conn)
        .await?;
    let count = i64::try_from(chained.len()).expect("a batch's records fit in i64");
    if appended.rows_affected() != chained.len() as u64 {
        return Err(StoreError::Corrupt(format!(
            "{} audit records appended of {count}",
            appended.rows_affected()
        )));
    }
    // Consecutive under the single writer, in the order given.
    let first = appended.last_insert_rowid() - count + 1;
    for (seq, mut record) in (first..).zip(chained) {
        record.seq = seq;
        by_item.entry(record.item_id).or_default().push(record);
    }
    Ok(by_item)
}
