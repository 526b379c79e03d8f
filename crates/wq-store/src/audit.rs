//! The audit trail (DDR-17, DDR-28): who asked for what, what workqueue did
//! and what the forge answered, one append-only record per change.
//!
//! - **In the change's transaction.** A record is appended on the
//!   connection of the change it records ([`crate::postgres::append_audit`],
//!   [`crate::sqlite::append_audit`]): no change without its record, no
//!   record of a change that did not commit. Appends come last in their
//!   transaction (on PostgreSQL they take the chain's lock, the last lock
//!   any transaction takes). A new item's first record
//!   (`append_first_audit`, given the [`NewChain`] of the item's insert)
//!   needs neither that lock nor a head read: its chain starts empty, in a
//!   transaction no other one can see into.
//! - **Tamper-evident.** Each item's records form a chain: a record carries
//!   the SHA-256 of the item's previous record (`prev_hash`, empty for the
//!   first) and of its own canonical JSON ([`canonical`]: keys sorted, no
//!   whitespace, the time in RFC 3339 with microseconds). [`verify`] walks
//!   the chains and names the first broken link.
//! - **Logged.** Each committed record is one INFO line on the `audit`
//!   target with its fields ([`log`]).
//! - **Started and finished.** An action with outside effects
//!   (`ItemType::has_outside_effects`) is preceded by [`started`]; its
//!   outcome writes `action.succeeded` (or `action.failed`) and the
//!   executor's own records after it ([`succeeded`]). A start without a
//!   finish after it is an action a crash interrupted.
//! - **Raw deliveries.** An event's delivery id and raw body (bounded by
//!   [`MAX_RAW_BYTES`]) are kept on its `pending_events` row and in its
//!   `event.received` record, which outlives the applied event.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;
use wq_core::ItemId;

use crate::codec::{DbId, DbJson, DbRow, DbTime};
use crate::{StoreResult, to_micros};

/// The actor of what the engine does on its own.
pub const ENGINE: &str = "engine";
/// Longest raw delivery body a record keeps (longer ones are cut at a
/// character boundary and say so).
pub const MAX_RAW_BYTES: usize = 64 * 1024;

/// `item.created`: by the identity recorded on the item.
pub fn created(item: &crate::NewItem) -> NewAudit {
    let actor = item.caller_identity.as_deref().unwrap_or(ENGINE);
    NewAudit::new(item.id, item.now, actor, "item.created")
        .states(
            None,
            Some(serde_json::json!({"phase": "active", "item_type": item.item_type})),
        )
        .metadata(serde_json::json!({
            "idempotency_key": item.idempotency_key,
            "forge": item.place.as_ref().map(|(forge, _)| forge),
            "project": item.place.as_ref().map(|(_, project)| project),
        }))
}

/// `event.received`: the stored event `event_id` and the delivery it came
/// from.
pub fn received(event: &crate::NewEvent, event_id: i64) -> NewAudit {
    let origin = event.origin.clone().unwrap_or_default();
    let actor = if origin.actor.is_empty() {
        ENGINE.to_owned()
    } else {
        origin.actor
    };
    let mut metadata = serde_json::json!({
        "event_id": event_id,
        "event_type": event.event_type,
    });
    if let Some(delivery_id) = origin.delivery_id {
        metadata["delivery_id"] = Value::String(delivery_id);
    }
    if let Some(raw) = origin.raw {
        let (kept, truncated) = bounded(&raw, MAX_RAW_BYTES);
        metadata["raw"] = Value::String(kept.to_owned());
        if truncated {
            metadata["raw_truncated_from"] = Value::from(raw.len());
        }
    }
    NewAudit::new(event.item_id, event.now, actor, "event.received")
        .trigger(serde_json::json!({"source": "delivery"}))
        .metadata(metadata)
}

/// The dimension rows an outcome or event wrote, without their details.
fn dimensions_summary(dimensions: &[wq_core::DimensionUpdate]) -> Value {
    dimensions
        .iter()
        .map(|update| {
            serde_json::json!({
                "dimension": update.dimension,
                "variant": update.variant,
                "status": update.status.as_str(),
                "pending_until": update.pending_until.map(rfc3339),
            })
        })
        .collect()
}

/// `action.succeeded`: an executor's outcome, written under its lease,
/// then the executor's own records (what it wrote outside, and the answer).
///
/// Every park with an outcome writes these, so their fields are written as
/// canonical JSON text directly (keys in byte order), not built as JSON
/// values first: `{"dimensions":[...],"error":...,"phase":...}` (the
/// dimension rows as `dimensions_summary` has them) and
/// `{"action":...,"source":"worker"}`.
pub fn succeeded(
    item_id: ItemId,
    now: OffsetDateTime,
    action: Option<&str>,
    phase: Option<wq_core::Phase>,
    error: Option<&str>,
    dimensions: &[wq_core::DimensionUpdate],
    records: &[wq_core::OutcomeRecord],
) -> Vec<NewAudit> {
    let mut new_state = Vec::with_capacity(64 + 96 * dimensions.len());
    new_state.extend_from_slice(b"{\"dimensions\":[");
    for (n, update) in dimensions.iter().enumerate() {
        if n > 0 {
            new_state.push(b',');
        }
        new_state.extend_from_slice(b"{\"dimension\":");
        write_json_string(&update.dimension, &mut new_state);
        new_state.extend_from_slice(b",\"pending_until\":");
        match update.pending_until {
            Some(at) => write_json_string(&rfc3339(at), &mut new_state),
            None => new_state.extend_from_slice(b"null"),
        }
        new_state.extend_from_slice(b",\"status\":");
        write_json_string(update.status.as_str(), &mut new_state);
        new_state.extend_from_slice(b",\"variant\":");
        write_json_string(&update.variant, &mut new_state);
        new_state.push(b'}');
    }
    new_state.push(b']');
    if let Some(error) = error {
        new_state.extend_from_slice(b",\"error\":");
        write_json_string(error, &mut new_state);
    }
    if let Some(phase) = phase {
        new_state.extend_from_slice(b",\"phase\":");
        write_json_string(phase.as_str(), &mut new_state);
    }
    new_state.push(b'}');
    let trigger = worker_trigger(action);
    let mut all = Vec::with_capacity(1 + records.len());
    let mut first = NewAudit::new(item_id, now, ENGINE, "action.succeeded");
    first.new_state = Some(String::from_utf8(new_state).expect("JSON text is UTF-8"));
    first.trigger = Some(trigger.clone());
    all.push(first);
    all.extend(records.iter().map(|record| {
        let mut new =
            NewAudit::new(item_id, now, ENGINE, record.kind.clone()).metadata_ref(&record.metadata);
        new.trigger = Some(trigger.clone());
        new
    }));
    all
}

/// `{"action":...,"source":"worker"}` as canonical JSON text.
fn worker_trigger(action: Option<&str>) -> String {
    let mut out = Vec::with_capacity(48);
    out.extend_from_slice(b"{\"action\":");
    match action {
        Some(action) => write_json_string(action, &mut out),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"source\":\"worker\"}");
    String::from_utf8(out).expect("JSON text is UTF-8")
}

/// [`succeeded`] for the outcome a park writes; nothing where a benchmark
/// turned the trail off (`testing::set_audit`, only with the `testing`
/// feature).
pub(crate) fn park_succeeded(
    item_id: ItemId,
    now: OffsetDateTime,
    outcome: &crate::OutcomeChanges,
) -> Vec<NewAudit> {
    #[cfg(feature = "testing")]
    if !crate::testing::audit_enabled() {
        return Vec::new();
    }
    succeeded(
        item_id,
        now,
        outcome.action.as_deref(),
        outcome.phase,
        outcome.error.as_deref(),
        &outcome.dimensions,
        &outcome.records,
    )
}

/// `action.started`: an action with outside effects is about to run. A
/// crash before its outcome leaves this record without an
/// `action.succeeded` or `action.failed` after it.
pub fn started(item_id: ItemId, now: OffsetDateTime, action: &str) -> NewAudit {
    let mut new = NewAudit::new(item_id, now, ENGINE, "action.started");
    new.trigger = Some(worker_trigger(Some(action)));
    new
}

/// `action.failed`: a counted failure (or an outage), and the item after it.
pub fn failed(failure: &crate::RecordFailure, after: &wq_core::WorkItem) -> NewAudit {
    NewAudit::new(failure.lease.id, failure.now, ENGINE, "action.failed")
        .states(
            None,
            Some(serde_json::json!({
                "phase": after.phase.as_str(),
                "attempts": after.attempts,
            })),
        )
        .trigger(serde_json::json!({
            "source": "worker",
            "action": failure.action,
            "error": failure.error,
        }))
        .metadata(serde_json::json!({
            "outage": failure.outage,
            "permanent": failure.permanent,
            "retry_at": rfc3339(failure.retry_at),
        }))
}

/// `event.applied`: a stored event's result, applied (or discarded, for an
/// item no longer active).
pub fn applied(apply: &crate::ApplyEvent, outcome: crate::EventApplied) -> NewAudit {
    let result = &apply.result;
    let mut new_state = serde_json::json!({ "dimensions": dimensions_summary(&result.dimensions) });
    if let Some(phase) = result.phase {
        new_state["phase"] = Value::String(phase.as_str().to_owned());
    }
    let outcome = match outcome {
        crate::EventApplied::Applied => "applied",
        crate::EventApplied::StalePhase => "stale_phase",
        crate::EventApplied::ItemNotActive => "item_not_active",
    };
    NewAudit::new(apply.lease.id, apply.now, ENGINE, "event.applied")
        .states(None, Some(new_state))
        .trigger(serde_json::json!({"source": "worker", "event_id": apply.event_id}))
        .metadata(serde_json::json!({ "outcome": outcome }))
}

/// `text` cut at a character boundary to at most `max` bytes, and whether
/// it was cut.
pub fn bounded(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// The proof that an item's audit chain starts in the caller's
/// transaction: made only by `insert_new_item`, which inserted the item
/// there, and taken by `append_first_audit`, which appends its first
/// record without a chain lock or a head read.
#[derive(Debug)]
pub struct NewChain {
    item: ItemId,
}

impl NewChain {
    pub(crate) fn new(item: ItemId) -> Self {
        Self { item }
    }

    /// The item whose chain this is.
    pub fn item(&self) -> ItemId {
        self.item
    }
}

/// A record to append. Its JSON fields are kept as canonical text
/// ([`canonical`]), written once when the record is built: the text its
/// hash is taken over and its row stores.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAudit {
    pub item_id: ItemId,
    pub at: OffsetDateTime,
    /// Who: the caller identity of the granting rule, `engine`,
    /// `webhook:<source>`, `sqs`.
    pub actor: String,
    /// What kind of change (`submission.created`, `action.succeeded`,
    /// `forge.merge`, ...).
    pub kind: String,
    old_state: Option<String>,
    new_state: Option<String>,
    /// What caused it.
    trigger: Option<String>,
    /// Context (`{}` when none).
    metadata: String,
}

impl NewAudit {
    /// A record of `kind` by `actor` about `item_id`, with nothing else.
    pub fn new(
        item_id: ItemId,
        at: OffsetDateTime,
        actor: impl Into<String>,
        kind: impl Into<String>,
    ) -> Self {
        Self {
            item_id,
            at: to_micros(at),
            actor: actor.into(),
            kind: kind.into(),
            old_state: None,
            new_state: None,
            trigger: None,
            metadata: "{}".to_owned(),
        }
    }

    pub fn states(mut self, old: Option<Value>, new: Option<Value>) -> Self {
        self.old_state = old.as_ref().map(canonical);
        self.new_state = new.as_ref().map(canonical);
        self
    }

    pub fn trigger(mut self, trigger: Value) -> Self {
        self.trigger = Some(canonical(&trigger));
        self
    }

    pub fn metadata(self, metadata: Value) -> Self {
        self.metadata_ref(&metadata)
    }

    fn metadata_ref(mut self, metadata: &Value) -> Self {
        self.metadata = canonical(metadata);
        self
    }

    /// The record this becomes after `prev_hash`, with a new id.
    pub fn chained(self, prev_hash: String) -> AuditRecord {
        let id = Uuid::now_v7();
        let hash = self.digest_as(id, &self.texts(), &prev_hash);
        self.into_record(id, 0, prev_hash, hash)
    }

    /// Its JSON fields as canonical text, for its hash and its row.
    pub(crate) fn texts(&self) -> Texts<'_> {
        Texts {
            old_state: self.old_state.as_deref(),
            new_state: self.new_state.as_deref(),
            trigger: self.trigger.as_deref(),
            metadata: &self.metadata,
        }
    }

    /// The hash it has as record `id` after `prev_hash`, from its
    /// [`texts`](Self::texts): [`AuditRecord::digest`] of the record
    /// [`into_record`](Self::into_record) makes, without copying it.
    pub(crate) fn digest_as(&self, id: Uuid, texts: &Texts<'_>, prev_hash: &str) -> String {
        let (mut text, suffix) = self.hash_parts_as(id, texts);
        text.push_str(prev_hash);
        text.push_str(&suffix);
        hex_digest(text.as_bytes())
    }

    /// Its canonical JSON as record `id`, cut around `prev_hash`'s value
    /// (see [`AuditRecord::hash_parts`]).
    pub(crate) fn hash_parts_as(&self, id: Uuid, texts: &Texts<'_>) -> (String, String) {
        canonical_parts(&self.actor, self.at, id, self.item_id, &self.kind, texts)
    }

    /// The stored record: this one as record `id` at `seq`, chained with
    /// the hashes [`digest_as`](Self::digest_as) gave.
    pub(crate) fn into_record(
        self,
        id: Uuid,
        seq: i64,
        prev_hash: String,
        hash: String,
    ) -> AuditRecord {
        let value = |text: &str| -> Value {
            serde_json::from_str(text).expect("a record's canonical text is JSON")
        };
        AuditRecord {
            seq,
            id,
            item_id: self.item_id,
            at: to_micros(self.at),
            old_state: self.old_state.as_deref().map(value),
            new_state: self.new_state.as_deref().map(value),
            trigger: self.trigger.as_deref().map(value),
            metadata: value(&self.metadata),
            actor: self.actor,
            kind: self.kind,
            prev_hash,
            hash,
        }
    }

    /// The record with a new id and neither hash yet: for a store that
    /// chains it where it locks the head ([`AuditRecord::hash_parts`]).
    pub fn unchained(self) -> AuditRecord {
        self.into_record(Uuid::now_v7(), 0, String::new(), String::new())
    }
}

/// A stored record.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditRecord {
    /// Its place in the whole trail (the archive's cursor).
    pub seq: i64,
    pub id: Uuid,
    pub item_id: ItemId,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    pub actor: String,
    pub kind: String,
    pub old_state: Option<Value>,
    pub new_state: Option<Value>,
    pub trigger: Option<Value>,
    pub metadata: Value,
    pub prev_hash: String,
    pub hash: String,
}

impl AuditRecord {
    /// The SHA-256 (hex) of its canonical JSON: every field but `seq` (the
    /// store's) and `hash` itself.
    pub fn digest(&self) -> String {
        let (mut text, suffix) = self.canonical_around_prev_hash();
        text.push_str(&self.prev_hash);
        text.push_str(&suffix);
        hex_digest(text.as_bytes())
    }

    /// Its canonical JSON cut around the value of `prev_hash`: `prefix +
    /// prev_hash + suffix` is the text [`digest`](Self::digest) hashes,
    /// whatever the previous hash is. A store that learns the previous hash
    /// only where it holds the chain's lock (PostgreSQL's `wq_audit_append`)
    /// hashes the joined text there, and the hash is the one [`verify`]
    /// recomputes.
    pub fn hash_parts(&self) -> (String, String) {
        self.canonical_around_prev_hash()
    }

    /// The hashed fields as canonical JSON (keys in byte order, as
    /// [`canonical`] writes an object), cut where `prev_hash`'s value goes.
    fn canonical_around_prev_hash(&self) -> (String, String) {
        let old_state = self.old_state.as_ref().map(canonical);
        let new_state = self.new_state.as_ref().map(canonical);
        let trigger = self.trigger.as_ref().map(canonical);
        let metadata = canonical(&self.metadata);
        let texts = Texts {
            old_state: old_state.as_deref(),
            new_state: new_state.as_deref(),
            trigger: trigger.as_deref(),
            metadata: &metadata,
        };
        canonical_parts(
            &self.actor,
            self.at,
            self.id,
            self.item_id,
            &self.kind,
            &texts,
        )
    }

    /// The hashed fields as a JSON object (tests compare the canonical
    /// writer against it).
    #[cfg(test)]
    fn hashed(&self) -> Value {
        serde_json::json!({
            "id": self.id.to_string(),
            "item_id": self.item_id.to_string(),
            "at": rfc3339(self.at),
            "actor": self.actor,
            "kind": self.kind,
            "old_state": self.old_state,
            "new_state": self.new_state,
            "trigger": self.trigger,
            "metadata": self.metadata,
            "prev_hash": self.prev_hash,
        })
    }
}

/// A record's JSON fields as canonical text ([`canonical`]), for both its
/// hash and its row.
pub(crate) struct Texts<'a> {
    pub old_state: Option<&'a str>,
    pub new_state: Option<&'a str>,
    pub trigger: Option<&'a str>,
    pub metadata: &'a str,
}

/// A record's hashed fields as canonical JSON, written field by field,
/// cut where `prev_hash`'s value goes: `prefix + prev_hash + suffix` is the
/// text its hash is the SHA-256 of. The previous hash is hex (or empty):
/// it needs no escaping.
fn canonical_parts(
    actor: &str,
    at: OffsetDateTime,
    id: Uuid,
    item_id: ItemId,
    kind: &str,
    texts: &Texts<'_>,
) -> (String, String) {
    // The keys need no escaping.
    fn field(out: &mut Vec<u8>, key: &str, value: impl FnOnce(&mut Vec<u8>)) {
        if out.len() > 1 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
        value(out);
    }
    fn optional(out: &mut Vec<u8>, text: Option<&str>) {
        out.extend_from_slice(text.unwrap_or("null").as_bytes());
    }
    // A UUID's hyphenated text needs no escaping either.
    fn uuid(out: &mut Vec<u8>, id: Uuid) {
        out.push(b'"');
        out.extend_from_slice(
            id.hyphenated()
                .encode_lower(&mut Uuid::encode_buffer())
                .as_bytes(),
        );
        out.push(b'"');
    }
    // Byte order: actor, at, id, item_id, kind, metadata, new_state,
    // old_state, prev_hash, trigger.
    let mut out = Vec::with_capacity(512);
    out.push(b'{');
    field(&mut out, "actor", |out| write_json_string(actor, out));
    field(&mut out, "at", |out| write_json_string(&rfc3339(at), out));
    field(&mut out, "id", |out| uuid(out, id));
    field(&mut out, "item_id", |out| uuid(out, item_id.0));
    field(&mut out, "kind", |out| write_json_string(kind, out));
    field(&mut out, "metadata", |out| {
        out.extend_from_slice(texts.metadata.as_bytes());
    });
    field(&mut out, "new_state", |out| optional(out, texts.new_state));
    field(&mut out, "old_state", |out| optional(out, texts.old_state));
    field(&mut out, PREV_HASH, |out| out.push(b'"'));
    let prefix = String::from_utf8(out).expect("JSON text is UTF-8");
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"\",");
    write_json_string("trigger", &mut out);
    out.push(b':');
    optional(&mut out, texts.trigger);
    out.push(b'}');
    let suffix = String::from_utf8(out).expect("JSON text is UTF-8");
    (prefix, suffix)
}

/// The one field of a record's hashed form a store may fill in last.
const PREV_HASH: &str = "prev_hash";

/// Where PostgreSQL's `wq_audit_append` put a record: its sequence number
/// and the hashes it chained it with.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Appended {
    seq: i64,
    prev_hash: String,
    hash: String,
}

/// `records` with new ids and no hashes yet, and each as PostgreSQL's
/// `wq_audit_append` takes it (a JSON array, in order): its item and its
/// canonical JSON cut around its previous hash (`hash_prefix`,
/// `hash_suffix`), from which the function reads the fields.
pub(crate) fn unchained_with_payload(records: Vec<NewAudit>) -> (Vec<AuditRecord>, Value) {
    let mut payload = Vec::with_capacity(records.len());
    let records = records
        .into_iter()
        .map(|record| {
            let id = Uuid::now_v7();
            let (hash_prefix, hash_suffix) = record.hash_parts_as(id, &record.texts());
            payload.push(serde_json::json!({
                "item_id": record.item_id.to_string(),
                "hash_prefix": hash_prefix,
                "hash_suffix": hash_suffix,
            }));
            record.into_record(id, 0, String::new(), String::new())
        })
        .collect();
    (records, Value::Array(payload))
}

/// `records` as `wq_audit_append` answered they were appended, in order.
pub(crate) fn appended(
    mut records: Vec<AuditRecord>,
    answer: Vec<Appended>,
) -> StoreResult<Vec<AuditRecord>> {
    if answer.len() != records.len() {
        return Err(crate::StoreError::Corrupt(format!(
            "wq_audit_append answered {} records for {}",
            answer.len(),
            records.len()
        )));
    }
    for (record, appended) in records.iter_mut().zip(answer) {
        record.seq = appended.seq;
        record.prev_hash = appended.prev_hash;
        record.hash = appended.hash;
    }
    Ok(records)
}

fn rfc3339(at: OffsetDateTime) -> String {
    to_micros(at)
        .format(&Rfc3339)
        .expect("a stored time formats as RFC 3339")
}

fn hex_digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A stored record from its row.
pub(crate) fn record_from_row(row: &impl DbRow) -> StoreResult<AuditRecord> {
    let json = |name: &str| -> StoreResult<Option<Value>> {
        Ok(row
            .decode::<Option<DbJson<Value>>>(name)?
            .map(|json| json.0))
    };
    Ok(AuditRecord {
        seq: row.decode("seq")?,
        id: row.decode::<DbId>("id")?.0.0,
        item_id: row.decode::<DbId>("work_item_id")?.0,
        at: row.decode::<DbTime>("at")?.0,
        actor: row.decode("actor")?,
        kind: row.decode("kind")?,
        old_state: json("old_state")?,
        new_state: json("new_state")?,
        trigger: json("trigger")?,
        metadata: json("metadata")?.unwrap_or(Value::Null),
        prev_hash: row.decode("prev_hash")?,
        hash: row.decode("hash")?,
    })
}

/// Canonical JSON text: object keys sorted (byte order), no whitespace,
/// whatever order the value was built in.
pub fn canonical(value: &Value) -> String {
    let mut out = Vec::with_capacity(128);
    write_canonical(value, &mut out);
    String::from_utf8(out).expect("JSON text is UTF-8")
}

/// [`canonical`] into `out`, without copying the value: each object's keys
/// are sorted in place of a sorted copy.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (n, (key, value)) in entries.into_iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                write_json_string(key, out);
                out.push(b':');
                write_canonical(value, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => serde_json::to_writer(out, scalar).expect("JSON values serialise"),
    }
}

/// A JSON string literal, escaped as serde_json escapes it.
fn write_json_string(text: &str, out: &mut Vec<u8>) {
    serde_json::to_writer(out, text).expect("strings serialise");
}

/// The first broken link of a chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BrokenLink {
    pub item_id: ItemId,
    pub seq: i64,
    pub id: Uuid,
    pub reason: String,
}

impl std::fmt::Display for BrokenLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "item {} record {} (seq {}): {}",
            self.item_id, self.id, self.seq, self.reason
        )
    }
}

/// Walks records in `seq` order, following each item's chain from `heads`
/// (the last hash seen per item, carried between pages; a chain not seen
/// yet starts at `""`). Answers the first broken link.
pub fn verify<'a>(
    records: impl IntoIterator<Item = &'a AuditRecord>,
    heads: &mut BTreeMap<ItemId, String>,
) -> Result<(), BrokenLink> {
    for record in records {
        let broken = |reason: String| BrokenLink {
            item_id: record.item_id,
            seq: record.seq,
            id: record.id,
            reason,
        };
        let expected = heads.get(&record.item_id).map_or("", String::as_str);
        if record.prev_hash != expected {
            return Err(broken(format!(
                "prev_hash {:?} is not the previous record's hash {expected:?}",
                record.prev_hash
            )));
        }
        let digest = record.digest();
        if record.hash != digest {
            return Err(broken(format!(
                "hash {:?} does not match its content ({digest})",
                record.hash
            )));
        }
        heads.insert(record.item_id, record.hash.clone());
    }
    Ok(())
}

/// Logs committed records, one INFO line each (DDR-28).
pub fn log(records: &[AuditRecord]) {
    if !tracing::enabled!(target: "audit", tracing::Level::INFO) {
        return;
    }
    for record in records {
        log_line(
            record.item_id,
            record.id,
            &record.actor,
            &record.kind,
            [
                &json_field(record.old_state.as_ref()),
                &json_field(record.new_state.as_ref()),
                &json_field(record.trigger.as_ref()),
                &record.metadata.to_string(),
            ],
        );
    }
}

/// Logs `record`, committed as record `id`, as [`log`] does, from its
/// canonical text.
pub(crate) fn log_new(id: Uuid, record: &NewAudit) {
    if !tracing::enabled!(target: "audit", tracing::Level::INFO) {
        return;
    }
    let texts = record.texts();
    log_line(
        record.item_id,
        id,
        &record.actor,
        &record.kind,
        [
            texts.old_state.unwrap_or("null"),
            texts.new_state.unwrap_or("null"),
            texts.trigger.unwrap_or("null"),
            texts.metadata,
        ],
    );
}

/// One record's line: `json` its old state, new state, trigger and
/// metadata as JSON text.
fn log_line(item_id: ItemId, id: Uuid, actor: &str, kind: &str, json: [&str; 4]) {
    let [old_state, new_state, trigger, metadata] = json;
    tracing::info!(
        target: "audit",
        item_id = %item_id,
        audit_id = %id,
        actor = %actor,
        kind = %kind,
        old_state = %old_state,
        new_state = %new_state,
        trigger = %trigger,
        metadata = %metadata,
        "audit {} {} by {}",
        kind,
        item_id,
        actor
    );
}

fn json_field(value: Option<&Value>) -> String {
    value.map_or_else(|| "null".to_owned(), Value::to_string)
}

/// A page of the trail ([`crate::Store::audit_list`]).
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Records after this sequence number (0: from the start).
    pub after: i64,
    pub item_id: Option<ItemId>,
    pub since: Option<OffsetDateTime>,
    pub actor: Option<String>,
    pub kind: Option<String>,
    /// Records up to this sequence number only (a horizon from
    /// [`crate::Store::audit_horizon`]): a reader following the whole trail
    /// reads below it, so that no record committing later with a lower
    /// number is passed over.
    pub until: Option<i64>,
    pub limit: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(prev: &str) -> AuditRecord {
        NewAudit::new(
            ItemId::new_v7(),
            OffsetDateTime::UNIX_EPOCH,
            "ci-bot",
            "submission.created",
        )
        .metadata(serde_json::json!({"z": 1, "a": {"y": [2, {"c": 3, "b": 4}]}}))
        .chained(prev.to_owned())
    }

    /// The canonical form as a sorted copy serialised by serde_json: what
    /// the writer must produce byte for byte (stored hashes depend on it).
    fn reference(value: &Value) -> String {
        fn sorted(value: &Value) -> Value {
            match value {
                Value::Object(map) => {
                    let ordered: BTreeMap<&String, Value> = map
                        .iter()
                        .map(|(key, value)| (key, sorted(value)))
                        .collect();
                    let mut out = serde_json::Map::new();
                    for (key, value) in ordered {
                        out.insert(key.clone(), value);
                    }
                    Value::Object(out)
                }
                Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
                other => other.clone(),
            }
        }
        serde_json::to_string(&sorted(value)).unwrap()
    }

    #[test]
    fn the_canonical_writer_matches_a_sorted_copy_byte_for_byte() {
        let values = [
            serde_json::json!(null),
            serde_json::json!({"b": {"d": 1.5, "c": [{"f": 2, "e": -3}]}, "a": null, "é": "\u{1}\"\\/\n"}),
            serde_json::json!([1e300, 0.1, -0, u64::MAX, i64::MIN, true, "x", {"Z": 1, "_": 2, "a": 3}]),
            serde_json::json!({"": {}, " ": [], "aa": "a\u{2028}b", "a": "\u{10ffff}"}),
        ];
        for value in values {
            assert_eq!(canonical(&value), reference(&value));
        }
    }

    #[test]
    fn a_record_hashes_its_canonical_json() {
        let mut full = record("00ff");
        full.old_state = Some(serde_json::json!({"phase": "active"}));
        full.new_state = Some(serde_json::json!({"phase": "merged", "quote": "a\"b"}));
        full.trigger = Some(serde_json::json!({"source": "worker", "prev_hash": "x"}));
        for record in [record(""), record("abc"), full] {
            assert_eq!(
                record.digest(),
                hex_digest(reference(&record.hashed()).as_bytes())
            );
        }
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let value = serde_json::json!({"b": {"d": 1, "c": [{"f": 2, "e": 3}]}, "a": null});
        assert_eq!(
            canonical(&value),
            r#"{"a":null,"b":{"c":[{"e":3,"f":2}],"d":1}}"#
        );
    }

    #[test]
    fn a_chain_verifies_and_any_change_breaks_it_at_that_record() {
        let first = record("");
        let mut second = NewAudit::new(first.item_id, first.at, "engine", "action.succeeded")
            .chained(first.hash.clone());
        second.seq = 2;
        let chain = vec![first.clone(), second.clone()];
        assert_eq!(verify(&chain, &mut BTreeMap::new()), Ok(()));

        let mut tampered = chain.clone();
        tampered[0].actor = "someone-else".into();
        let broken = verify(&tampered, &mut BTreeMap::new()).unwrap_err();
        assert_eq!(broken.id, first.id);
        assert!(broken.reason.contains("does not match"), "{broken}");

        // A rewritten record with a fresh hash breaks the next link.
        let mut rewritten = chain.clone();
        rewritten[0].actor = "someone-else".into();
        rewritten[0].hash = rewritten[0].digest();
        let broken = verify(&rewritten, &mut BTreeMap::new()).unwrap_err();
        assert_eq!(broken.id, second.id);
        assert!(broken.reason.contains("prev_hash"), "{broken}");

        // A removed first record too.
        let broken = verify(&chain[1..], &mut BTreeMap::new()).unwrap_err();
        assert_eq!(broken.id, second.id);
    }

    #[test]
    fn the_hash_parts_join_around_any_previous_hash_into_the_hashed_text() {
        let sparse = record("");
        let mut full = record("");
        full.old_state = Some(serde_json::json!({"phase": "active"}));
        full.new_state = Some(serde_json::json!({"phase": "merged", "quote": "a\"b"}));
        full.trigger = Some(serde_json::json!({"source": "worker", "prev_hash": "x"}));
        for record in [sparse, full] {
            let (prefix, suffix) = record.hash_parts();
            for prev in ["", "00ff", &record.digest()] {
                let mut chained = record.clone();
                chained.prev_hash = prev.to_owned();
                assert_eq!(
                    format!("{prefix}{prev}{suffix}"),
                    reference(&chained.hashed()),
                    "prev {prev:?}"
                );
            }
        }
    }

    #[test]
    fn the_hash_is_of_the_content_not_of_the_key_order() {
        let a = record("");
        let mut b = a.clone();
        b.metadata = serde_json::json!({"a": {"y": [2, {"b": 4, "c": 3}]}, "z": 1});
        assert_eq!(a.digest(), b.digest());
    }

    #[test]
    fn a_new_record_hashes_by_reference_as_the_stored_record_does() {
        let item = ItemId(Uuid::now_v7());
        let at = OffsetDateTime::from_unix_timestamp_nanos(1_780_000_000_123_456_789).unwrap();
        let sparse = NewAudit::new(item, at, "engine", "action.succeeded");
        let full = NewAudit::new(item, at, "caller:ci \"bot\"", "submission.updated")
            .states(
                Some(serde_json::json!({"phase": "active", "b": [1, {"z": 0, "a": null}]})),
                Some(serde_json::json!({"quote": "a\"b\u{2028}", "phase": "merged"})),
            )
            .trigger(serde_json::json!({"source": "worker", "prev_hash": "x"}))
            .metadata(serde_json::json!({"z": 1, "a": {"y": 2.5, "x": "é"}}));
        for new in [sparse, full] {
            let id = Uuid::now_v7();
            let texts = new.texts();
            for text in [&texts.old_state, &texts.new_state, &texts.trigger]
                .into_iter()
                .flatten()
                .chain([&texts.metadata])
            {
                let value: Value = serde_json::from_str(text).unwrap();
                assert_eq!(text, &reference(&value), "a field's text is canonical");
            }
            for prev in ["", "00ff"] {
                let hash = new.digest_as(id, &texts, prev);
                let stored = new
                    .clone()
                    .into_record(id, 7, prev.to_owned(), hash.clone());
                assert_eq!(stored.digest(), hash, "prev {prev:?}");
                assert_eq!(stored.at, to_micros(at));
                // The stored record's values are the fields' texts.
                assert_eq!(canonical(&stored.metadata), texts.metadata);
                assert_eq!(
                    stored.new_state.as_ref().map(canonical).as_deref(),
                    texts.new_state
                );
                assert_eq!(
                    stored.old_state.as_ref().map(canonical).as_deref(),
                    texts.old_state
                );
                assert_eq!(
                    stored.trigger.as_ref().map(canonical).as_deref(),
                    texts.trigger
                );
                let (prefix, suffix) = new.hash_parts_as(id, &texts);
                assert_eq!((prefix, suffix), stored.hash_parts());
            }
        }
    }

    /// `succeeded` and `started` as they were built before their texts
    /// were written directly: JSON values, then [`canonical`].
    fn succeeded_by_value(
        action: Option<&str>,
        phase: Option<wq_core::Phase>,
        error: Option<&str>,
        dimensions: &[wq_core::DimensionUpdate],
    ) -> (String, String) {
        let mut new_state = serde_json::json!({ "dimensions": dimensions_summary(dimensions) });
        if let Some(phase) = phase {
            new_state["phase"] = Value::String(phase.as_str().to_owned());
        }
        if let Some(error) = error {
            new_state["error"] = Value::String(error.to_owned());
        }
        let trigger = serde_json::json!({"source": "worker", "action": action});
        (canonical(&new_state), canonical(&trigger))
    }

    #[test]
    fn outcome_records_are_written_as_their_values_canonical_text() {
        let item = ItemId(Uuid::now_v7());
        let at = OffsetDateTime::from_unix_timestamp_nanos(1_780_000_000_123_456_789).unwrap();
        let later = at + time::Duration::seconds(90);
        let dimensions = [
            wq_core::DimensionUpdate::new("needs_noop", false),
            wq_core::DimensionUpdate::new("ci \"quoted\" \u{2028}", true)
                .variant("é/variant")
                .pending_until(later),
        ];
        let executor = [wq_core::OutcomeRecord {
            kind: "forge.push".to_owned(),
            metadata: serde_json::json!({"sha": "abc", "a": [1, {"z": null, "b": 2.5}]}),
        }];
        for (action, phase, error, dimensions) in [
            (
                Some("noop"),
                Some(wq_core::Phase::Completed),
                None,
                &dimensions[..1],
            ),
            (
                Some("ensure \"mr\""),
                None,
                Some("line\nbreak \u{1}"),
                &dimensions[..],
            ),
            (None, Some(wq_core::Phase::Active), Some(""), &[][..]),
        ] {
            let records = succeeded(item, at, action, phase, error, dimensions, &executor);
            let (new_state, trigger) = succeeded_by_value(action, phase, error, dimensions);
            assert_eq!(records.len(), 2);
            let texts = records[0].texts();
            assert_eq!(texts.new_state, Some(new_state.as_str()));
            assert_eq!(texts.trigger, Some(trigger.as_str()));
            assert_eq!((texts.old_state, texts.metadata), (None, "{}"));
            let own = records[1].texts();
            assert_eq!(own.trigger, Some(trigger.as_str()));
            assert_eq!(own.metadata, canonical(&executor[0].metadata));
            assert_eq!(records[1].kind, "forge.push");
        }
        let started = started(item, at, "merge");
        assert_eq!(
            started.texts().trigger,
            Some(
                succeeded_by_value(Some("merge"), None, None, &[])
                    .1
                    .as_str()
            )
        );
    }
}
