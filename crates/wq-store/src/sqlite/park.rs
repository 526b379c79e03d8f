//! The loop's exits that arrive together, parked with one statement per
//! step for the whole batch (a [`crate::coalesce::Coalescer`] gathers
//! them; the batch runs as one job of the group commit).
//!
//! Under `synchronous = FULL` the group commit already shares one fsync
//! among concurrent parks, but each park still ran about ten statements on
//! the one writer connection, each a round trip to sqlx's SQLite worker
//! thread, as does each row a statement answers. Here a batch of parks
//! costs a handful of statements whatever its size, each answering at most
//! one row: the held leases, pending events and the chain heads of the
//! parks with records (`items/park_held.sql`), the outcomes and parks
//! (`items/park_many.sql`, one `UPDATE ... FROM`), the dimension upserts
//! (two: with and without a detail), the consumed timers, and the audit
//! records (`audit/append_values.sql`, bound as parameters, up to
//! [`APPEND_ROWS`] a statement), chained as [`super::append_audit_records`]
//! chains them.
//!
//! The writer's transaction is held while a job runs, and no other write
//! can share that time, so a job does as little as it can: each park's
//! statement arguments and audit records, down to the canonical text each
//! record's hash is taken over and the hash of that text's part before the
//! previous hash, are prepared by its caller before it joins a batch
//! ([`ParkRequest::new`]); the job only finishes each record's hash once
//! its chain's head is known.
//!
//! Every step runs inside the writer's transaction, so what holds for one
//! park holds for each park of a batch: the check for events and the park
//! are atomic with respect to `event_insert` (DDR-34), a park whose lease
//! is gone writes nothing, and an outcome is written with its records.

use std::collections::HashMap;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::SqliteConnection;
use wq_core::ItemId;

use super::{DbJson, id_text, micros};
use crate::audit::NewAudit;
use crate::{Park, ParkParams, StoreError, StoreResult};

/// What one park answers: parked or not (its records are logged).
pub(crate) type Parked = Park;

/// What [`park_many`] answers for one park: parked or not, and how many of
/// its records were appended.
type Linked = (Park, usize);

/// One park, its statement arguments and audit records prepared before it
/// joins a batch.
#[derive(Debug, Clone)]
pub(crate) struct ParkRequest {
    pub(crate) params: ParkParams,
    /// Its item's id as stored.
    item: String,
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

/// A record with its id and its canonical text cut around the previous
/// hash ([`crate::audit::AuditRecord::hash_parts`]): the hash of the part
/// before it taken already, the part after it as text.
#[derive(Debug, Clone)]
struct Prepared {
    record: NewAudit,
    record_id: uuid::Uuid,
    id: String,
    prefix: Sha256,
    suffix: String,
}

impl ParkRequest {
    pub(crate) fn new(params: ParkParams) -> Self {
        let id = id_text(params.lease.id);
        let outcome = params.outcome.as_ref();
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
                    // Each JSON field's text serves the hash and the row;
                    // the hash of what precedes the previous hash is taken
                    // here, outside the writer's transaction.
                    let record_id = uuid::Uuid::now_v7();
                    let (prefix, suffix) = audit.hash_parts_as(record_id, &audit.texts());
                    Prepared {
                        id: record_id.hyphenated().to_string(),
                        prefix: Sha256::new_with_prefix(prefix.as_bytes()),
                        suffix,
                        record_id,
                        record: audit,
                    }
                })
                .collect();
        }
        // Only a park with records asks for its chain's head.
        let lease = json!({
            "id": id,
            "lease": micros(params.lease.until),
            "head": i32::from(!records.is_empty()),
        })
        .to_string();
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
        Self {
            params,
            item: id,
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

/// What `items/park_held.sql` answers: each held park's events pending
/// (0/1), and the chain heads of those that asked.
type HeldRow = (
    DbJson<HashMap<String, i64>>,
    Option<DbJson<HashMap<String, String>>>,
);

/// Parks `parks` (distinct items) set-based; each gets its own answer.
/// An error of a statement fails the whole batch (the caller's savepoint
/// rolls it back).
pub(crate) async fn park_many(
    conn: &mut SqliteConnection,
    parks: &[ParkRequest],
) -> StoreResult<Vec<StoreResult<Linked>>> {
    // Held leases, whether events wait (then the item is not parked), and
    // the chain heads of the parks with records.
    let (DbJson(waiting), answered_heads): HeldRow = sqlx::query_as(sql!("items/park_held.sql"))
        .bind(array(parks.iter().map(|park| &park.lease)))
        .fetch_one(&mut *conn)
        .await?;
    let mut held: HashMap<ItemId, bool> = HashMap::with_capacity(waiting.len());
    for (id, events) in waiting {
        held.insert(super::parse_id(&id)?, events == 0);
    }
    let mut heads: HashMap<ItemId, String> = HashMap::new();
    for (id, head) in answered_heads
        .map(|DbJson(heads)| heads)
        .unwrap_or_default()
    {
        heads.insert(super::parse_id(&id)?, head);
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

    let appended = append_records(conn, &written, &mut heads).await?;
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
                    appended.get(&id).copied().unwrap_or_default(),
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
            let (parked, appended) = result?;
            if appended != park.records.len() {
                return Err(StoreError::Corrupt(format!(
                    "{appended} of {} audit records of item {} were appended",
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

/// One record ready to append: its park, itself, its previous hash and its
/// hash.
type Chained<'a> = (&'a ParkRequest, &'a Prepared, String, String);

/// The written outcomes' records (`action.succeeded` and the executor's
/// own), chained to each item's head (`heads`: from
/// `items/park_held.sql`; none: a new chain) and appended, at most
/// [`APPEND_ROWS`] a statement; answers how many of each item's records
/// were appended.
async fn append_records(
    conn: &mut SqliteConnection,
    written: &[&ParkRequest],
    heads: &mut HashMap<ItemId, String>,
) -> StoreResult<HashMap<ItemId, usize>> {
    let mut appended = HashMap::new();
    let mut chained: Vec<Chained<'_>> = Vec::new();
    for park in written {
        let mut prev = heads.remove(&park.params.lease.id).unwrap_or_default();
        for record in &park.records {
            let mut hasher = record.prefix.clone();
            hasher.update(prev.as_bytes());
            hasher.update(record.suffix.as_bytes());
            let hash = hex::encode(hasher.finalize());
            chained.push((
                park,
                record,
                std::mem::replace(&mut prev, hash.clone()),
                hash,
            ));
        }
        if !park.records.is_empty() {
            // The next single append of this item guesses it
            // (`super::append_audit_records`).
            super::remember_head(park.params.lease.id, prev);
        }
    }
    let mut rest = chained.as_slice();
    while !rest.is_empty() {
        // 64, 32, ... 1 records a statement: a handful of statements,
        // each prepared once on the writer connection.
        let size = 1usize << rest.len().min(APPEND_ROWS).ilog2();
        let (chunk, tail) = rest.split_at(size);
        append_values(conn, chunk).await?;
        for (park, ..) in chunk {
            *appended.entry(park.params.lease.id).or_default() += 1;
        }
        rest = tail;
    }
    Ok(appended)
}

/// The text of `audit/append_values.sql` for `rows` records.
fn append_statement(rows: usize) -> String {
    const ROW: &str = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    let mut statement = String::from(sql!("audit/append_values.sql"));
    statement.push_str(&vec![ROW; rows].join(",\n"));
    statement
}

/// Appends `records` (chained: each with its previous hash and its hash,
/// in order) in one statement. Under the single writer they get
/// consecutive sequence numbers in the order given.
async fn append_values(conn: &mut SqliteConnection, records: &[Chained<'_>]) -> StoreResult<()> {
    let mut query = sqlx::query(sqlx::AssertSqlSafe(append_statement(records.len())));
    for (park, prepared, prev, hash) in records {
        let record = &prepared.record;
        query = super::bind_audit_fields(
            query.bind(prepared.id.as_str()).bind(park.item.as_str()),
            record,
            &record.texts(),
            prev,
            hash,
        );
    }
    let appended = query.execute(&mut *conn).await?;
    if appended.rows_affected() != records.len() as u64 {
        return Err(StoreError::Corrupt(format!(
            "{} audit records appended of {}",
            appended.rows_affected(),
            records.len()
        )));
    }
    Ok(())
}
