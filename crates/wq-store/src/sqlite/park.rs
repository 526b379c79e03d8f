//! The loop's exits that arrive together, parked with one statement per
//! step for the whole batch (a [`crate::coalesce::Coalescer`] gathers
//! them; the batch runs as one job of the group commit).
//!
//! Under `synchronous = FULL` the group commit already shares one fsync
//! among concurrent parks, but each park still ran about ten statements on
//! the one writer connection, each a round trip to sqlx's SQLite worker
//! thread, as does each row a statement answers. Here a batch of parks
//! costs eight statements whatever its size, each answering at most one
//! row: the held leases and pending events (`items/park_held.sql`), the
//! outcomes and parks (`items/park_many.sql`, one `UPDATE ... FROM`), the
//! dimension upserts (two: with and without a detail), the consumed
//! timers, the chain heads, and the audit records (`audit/append_values.sql`,
//! bound as parameters), chained as [`super::append_audit_records`] chains
//! them.
//!
//! The writer's transaction is held while a job runs, so a job does as
//! little as it can: each park's statement arguments and audit records,
//! down to the canonical text each record's hash is taken over, are
//! prepared by its caller before it joins a batch ([`ParkRequest::new`]);
//! the job joins them and hashes each record once its chain head is known.
//!
//! Every step runs inside the writer's transaction, so what holds for one
//! park holds for each park of a batch: the check for events and the park
//! are atomic with respect to `event_insert` (DDR-34), a park whose lease
//! is gone writes nothing, and an outcome is written with its records.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::SqliteConnection;
use wq_core::ItemId;

use super::{DbJson, id_text, micros};
use crate::audit::NewAudit;
use crate::{Park, ParkParams, StoreError, StoreResult};

/// What one park answers: parked or not (its records are logged).
pub(crate) type Parked = Park;

/// Where one record went in its chain: its sequence number, the previous
/// record's hash and its own.
type Link = (i64, String, String);

/// What [`park_many`] answers for one park: its records' links, in order.
type Linked = (Park, Vec<Link>);

/// One park, its statement arguments and audit records prepared before it
/// joins a batch.
#[derive(Debug, Clone)]
pub(crate) struct ParkRequest {
    pub(crate) params: ParkParams,
    /// Its `items/park_held.sql` element.
    lease: String,
    /// Its `items/park_many.sql` element.
    call: String,
    /// Its outcome's dimension rows (`dimensions/upsert_many.sql` and
    /// `upsert_many_keep_detail.sql` elements).
    with_detail: Vec<String>,
    keep_detail: Vec<String>,
    /// Its `dimensions/clear_consumed_timers_many.sql` element.
    timers: String,
    /// Its outcome's records, not chained yet.
    records: Vec<Prepared>,
}

/// A record with its id, its statement arguments and its canonical text
/// cut around the previous hash ([`crate::audit::AuditRecord::hash_parts`]).
#[derive(Debug, Clone)]
struct Prepared {
    record: NewAudit,
    record_id: uuid::Uuid,
    id: String,
    item: String,
    prefix: String,
    suffix: String,
}

impl ParkRequest {
    pub(crate) fn new(params: ParkParams) -> Self {
        let id = id_text(params.lease.id);
        let outcome = params.outcome.as_ref();
        let lease = json!({"id": id, "lease": micros(params.lease.until)}).to_string();
        let call = json!({
            "id": id,
            "lease": micros(params.lease.until),
            "now": micros(params.now),
            "write": i32::from(outcome.is_some()),
            "phase": outcome.and_then(|outcome| outcome.phase).map(wq_core::Phase::as_str),
            "error": outcome.and_then(|outcome| outcome.error.as_deref()),
        })
        .to_string();
        let timers = json!({"id": id, "now": micros(params.now)}).to_string();
        let (mut with_detail, mut keep_detail) = (Vec::new(), Vec::new());
        let mut records = Vec::new();
        if let Some(outcome) = outcome {
            for update in crate::common::fold_dimension_updates(&outcome.dimensions) {
                let mut row = json!({
                    "item": id,
                    "dimension": update.dimension,
                    "variant": update.variant,
                    "status": update.status.as_str(),
                    "pending_until": update.pending_until.map(micros),
                    "now": micros(params.now),
                });
                match &update.detail {
                    Some(detail) => {
                        row["detail"] = Value::String(detail.to_string());
                        with_detail.push(row.to_string());
                    }
                    None => keep_detail.push(row.to_string()),
                }
            }
            let audits = crate::audit::park_succeeded(params.lease.id, params.now, outcome);
            records = audits
                .into_iter()
                .map(|audit| {
                    // Each JSON field's text serves the hash and the row.
                    let record_id = uuid::Uuid::now_v7();
                    let (prefix, suffix) = audit.hash_parts_as(record_id, &audit.texts());
                    Prepared {
                        id: record_id.hyphenated().to_string(),
                        item: id.clone(),
                        prefix,
                        suffix,
                        record_id,
                        record: audit,
                    }
                })
                .collect();
        }
        Self {
            params,
            lease,
            call,
            with_detail,
            keep_detail,
            timers,
            records,
        }
    }
}

/// `elements` as one JSON array text.
fn array<'a>(elements: impl IntoIterator<Item = &'a String>) -> String {
    let mut text = String::from("[");
    for (n, element) in elements.into_iter().enumerate() {
        if n > 0 {
            text.push(',');
        }
        text.push_str(element);
    }
    text.push(']');
    text
}

/// Parks `parks` (distinct items) set-based; each gets its own answer.
/// An error of a statement fails the whole batch (the caller's savepoint
/// rolls it back).
pub(crate) async fn park_many(
    conn: &mut SqliteConnection,
    parks: &[ParkRequest],
) -> StoreResult<Vec<StoreResult<Linked>>> {
    // Held leases, and whether events wait (then the item is not parked).
    let DbJson(waiting): DbJson<HashMap<String, i64>> =
        sqlx::query_scalar(sql!("items/park_held.sql"))
            .bind(array(parks.iter().map(|park| &park.lease)))
            .fetch_one(&mut *conn)
            .await?;
    let mut held: HashMap<ItemId, bool> = HashMap::with_capacity(waiting.len());
    for (id, events) in waiting {
        held.insert(super::parse_id(&id)?, events == 0);
    }
    sqlx::query(sql!("items/park_many.sql"))
        .bind(array(parks.iter().map(|park| &park.call)))
        .execute(&mut *conn)
        .await?;

    let written: Vec<&ParkRequest> = parks
        .iter()
        .filter(|park| park.params.outcome.is_some() && held.contains_key(&park.params.lease.id))
        .collect();
    for (statement, rows) in [
        (
            sql!("dimensions/upsert_many.sql"),
            array(written.iter().flat_map(|park| &park.with_detail)),
        ),
        (
            sql!("dimensions/upsert_many_keep_detail.sql"),
            array(written.iter().flat_map(|park| &park.keep_detail)),
        ),
    ] {
        if rows != "[]" {
            sqlx::query(statement)
                .bind(rows)
                .execute(&mut *conn)
                .await?;
        }
    }

    let parked = array(
        parks
            .iter()
            .filter(|park| held.get(&park.params.lease.id) == Some(&true))
            .map(|park| &park.timers),
    );
    if parked != "[]" {
        sqlx::query(sql!("dimensions/clear_consumed_timers_many.sql"))
            .bind(parked)
            .execute(&mut *conn)
            .await?;
    }

    let mut links = append_records(conn, &written).await?;
    Ok(parks
        .iter()
        .map(|park| {
            let id = park.params.lease.id;
            match held.get(&id) {
                None => Err(StoreError::LeaseLost(id)),
                Some(&parked) => Ok((
                    if parked {
                        Park::Parked
                    } else {
                        Park::EventsPending
                    },
                    links.remove(&id).unwrap_or_default(),
                )),
            }
        })
        .collect())
}

/// Each park's answer from [`park_many`]'s, outside the writer's
/// transaction, where its committed records are logged.
pub(crate) fn answers(
    parks: Vec<ParkRequest>,
    results: Vec<StoreResult<Linked>>,
) -> Vec<StoreResult<Parked>> {
    parks
        .into_iter()
        .zip(results)
        .map(|(park, result)| {
            let (parked, links) = result?;
            if links.len() != park.records.len() {
                return Err(StoreError::Corrupt(format!(
                    "{} of {} audit records of item {} were appended",
                    links.len(),
                    park.records.len(),
                    park.params.lease.id
                )));
            }
            for prepared in &park.records {
                crate::audit::log_new(prepared.record_id, &prepared.record);
            }
            Ok(parked)
        })
        .collect()
}

/// The most records one append statement binds.
const APPEND_ROWS: usize = 64;

/// The written outcomes' records (`action.succeeded` and the executor's
/// own), chained to each item's head and appended, at most
/// [`APPEND_ROWS`] a statement; answers each item's links, in order.
async fn append_records(
    conn: &mut SqliteConnection,
    written: &[&ParkRequest],
) -> StoreResult<HashMap<ItemId, Vec<Link>>> {
    let mut by_item: HashMap<ItemId, Vec<Link>> = HashMap::new();
    let prepared: Vec<&Prepared> = written.iter().flat_map(|park| &park.records).collect();
    if prepared.is_empty() {
        return Ok(by_item);
    }
    let items: HashSet<&String> = prepared.iter().map(|record| &record.item).collect();
    let ids = Value::from(items.into_iter().cloned().collect::<Vec<_>>());
    let DbJson(mut heads): DbJson<HashMap<String, String>> =
        sqlx::query_scalar(sql!("audit/heads_many.sql"))
            .bind(DbJson(&ids))
            .fetch_one(&mut *conn)
            .await?;
    let chained: Vec<(&Prepared, String, String)> = prepared
        .into_iter()
        .map(|record| {
            let head = heads.entry(record.item.clone()).or_default();
            let prev = std::mem::take(head);
            let mut hasher = Sha256::new();
            hasher.update(record.prefix.as_bytes());
            hasher.update(prev.as_bytes());
            hasher.update(record.suffix.as_bytes());
            let hash = hex::encode(hasher.finalize());
            head.clone_from(&hash);
            (record, prev, hash)
        })
        .collect();
    let mut rest = chained.as_slice();
    while !rest.is_empty() {
        // 64, 32, ... 1 records a statement: a handful of statements,
        // each prepared once on the writer connection.
        let size = 1usize << rest.len().min(APPEND_ROWS).ilog2();
        let (chunk, tail) = rest.split_at(size);
        let first = append_values(conn, chunk).await?;
        for ((prepared, prev, hash), seq) in chunk.iter().zip(first..) {
            by_item.entry(prepared.record.item_id).or_default().push((
                seq,
                prev.clone(),
                hash.clone(),
            ));
        }
        rest = tail;
    }
    Ok(by_item)
}

/// The text of `audit/append_values.sql` for `rows` records.
fn append_statement(rows: usize) -> String {
    const ROW: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    let mut statement = String::from(sql!("audit/append_values.sql"));
    statement.push_str(&vec![ROW; rows].join(",\n"));
    statement
}

/// Appends `records` (chained: each with its previous hash and its hash,
/// in order) in one statement; answers the first one's sequence number
/// (the others follow it).
async fn append_values(
    conn: &mut SqliteConnection,
    records: &[(&Prepared, String, String)],
) -> StoreResult<i64> {
    let mut query = sqlx::query(sqlx::AssertSqlSafe(append_statement(records.len())));
    for (prepared, prev, hash) in records {
        let record = &prepared.record;
        let texts = record.texts();
        query = query
            .bind(prepared.id.as_str())
            .bind(prepared.item.as_str())
            .bind(micros(record.at))
            .bind(record.actor.as_str())
            .bind(record.kind.as_str())
            .bind(texts.old_state)
            .bind(texts.new_state)
            .bind(texts.trigger)
            .bind(texts.metadata)
            .bind(prev.as_str())
            .bind(hash.as_str());
    }
    let appended = query.execute(&mut *conn).await?;
    let count = i64::try_from(records.len()).expect("a statement's records fit in i64");
    if appended.rows_affected() != records.len() as u64 {
        return Err(StoreError::Corrupt(format!(
            "{} audit records appended of {count}",
            appended.rows_affected()
        )));
    }
    // Consecutive under the single writer, in the order given.
    Ok(appended.last_insert_rowid() - count + 1)
}
