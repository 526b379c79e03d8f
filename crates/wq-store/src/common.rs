//! Backend-neutral pieces both stores share: building migrators, decoding
//! phases, mapping constraint errors, and the event-ordering rule of
//! `event_apply`, so both backends decide the same way.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use sqlx::SqlSafeStr;
use sqlx::error::ErrorKind;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use time::OffsetDateTime;
use wq_core::{Dimension, DimensionStatus, EventResult, ItemId, PendingEvent, Phase, WorkItem};

use crate::codec::{DbId, DbJson, DbRow, DbTime};
use crate::{EventApplied, ListedItem, PhaseCount, StoreError, StoreResult};

/// A boxed, sendable future borrowing for `'a`: what a `write` closure
/// returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One embedded migration file: version, description and SQL.
pub struct EmbeddedMigration {
    pub version: i64,
    pub description: &'static str,
    pub sql: &'static str,
}

/// A migrator over embedded files that ignores versions it does not know,
/// so item types can record their own migrations in the same
/// `_sqlx_migrations` table.
pub fn migrator(files: &[EmbeddedMigration]) -> Migrator {
    let migrations = files
        .iter()
        .map(|file| {
            Migration::new(
                file.version,
                Cow::Borrowed(file.description),
                MigrationType::Simple,
                file.sql.into_sql_str(),
                false,
            )
        })
        .collect();
    let mut migrator = Migrator::with_migrations(migrations);
    migrator.set_ignore_missing(true);
    migrator
}

pub(crate) fn parse_phase(stored: &str) -> StoreResult<Phase> {
    stored
        .parse()
        .map_err(|error| StoreError::Corrupt(format!("work_items.phase: {error}")))
}

// --- row decoders, one for both backends -------------------------------------

pub(crate) fn item_from_row(row: &impl DbRow) -> StoreResult<WorkItem> {
    Ok(WorkItem {
        id: row.decode::<DbId>("id")?.0,
        item_type: row.decode("item_type")?,
        phase: parse_phase(&row.decode::<String>("phase")?)?,
        actionable: row.decode("actionable")?,
        attempts: row.decode("attempts")?,
        error: row.decode("error")?,
        leased_until: time_column(row, "leased_until")?,
        idempotency_key: row.decode("idempotency_key")?,
        caller_identity: row.decode("caller_identity")?,
        created_at: row.decode::<DbTime>("created_at")?.0,
        updated_at: row.decode::<DbTime>("updated_at")?.0,
        last_event_at: time_column(row, "last_event_at")?,
    })
}

/// A listed row: the item and its stored place.
pub(crate) fn listed_from_row(row: &impl DbRow) -> StoreResult<ListedItem> {
    let forge: Option<String> = row.decode("forge")?;
    let project: Option<String> = row.decode("project")?;
    Ok(ListedItem {
        item: item_from_row(row)?,
        place: forge.zip(project),
    })
}

pub(crate) fn dimension_from_row(row: &impl DbRow) -> StoreResult<Dimension> {
    Ok(Dimension {
        dimension: row.decode("dimension")?,
        variant: row.decode("variant")?,
        status: DimensionStatus::from_stored(&row.decode::<String>("status")?),
        detail: row.decode::<DbJson<serde_json::Value>>("detail")?.0,
        pending_until: time_column(row, "pending_until")?,
        updated_at: row.decode::<DbTime>("updated_at")?.0,
    })
}

pub(crate) fn event_from_row(row: &impl DbRow) -> StoreResult<PendingEvent> {
    Ok(PendingEvent {
        id: row.decode("id")?,
        work_item_id: row.decode::<DbId>("work_item_id")?.0,
        event_type: row.decode("event_type")?,
        body: row.decode::<DbJson<serde_json::Value>>("body")?.0,
        received_at: row.decode::<DbTime>("received_at")?.0,
        delivery_id: row.decode("delivery_id")?,
        raw: row.decode("raw")?,
    })
}

pub(crate) fn phase_count_from_row(row: &impl DbRow) -> StoreResult<PhaseCount> {
    Ok(PhaseCount {
        item_type: row.decode("item_type")?,
        phase: parse_phase(&row.decode::<String>("phase")?)?,
        count: row.decode("count")?,
    })
}

/// A row of `items/lease_state.sql`.
pub(crate) fn event_target_from_row(row: &impl DbRow) -> StoreResult<EventTarget> {
    Ok(EventTarget {
        phase: parse_phase(&row.decode::<String>("phase")?)?,
        error: row.decode("error")?,
        last_event_at: time_column(row, "last_event_at")?,
    })
}

fn time_column(row: &impl DbRow, name: &str) -> StoreResult<Option<OffsetDateTime>> {
    Ok(row.decode::<Option<DbTime>>(name)?.map(|DbTime(at)| at))
}

/// A dimension row as a snapshot statement renders it in JSON (times in
/// microseconds): PostgreSQL's `items/snapshot.sql`, SQLite's
/// `items/due_snapshots.sql`.
#[derive(serde::Deserialize)]
pub(crate) struct SnapshotDimension {
    dimension: String,
    variant: String,
    status: String,
    detail: serde_json::Value,
    pending_until: Option<i64>,
    updated_at: i64,
}

impl SnapshotDimension {
    pub(crate) fn into_dimension(self) -> StoreResult<Dimension> {
        Ok(Dimension {
            dimension: self.dimension,
            variant: self.variant,
            status: DimensionStatus::from_stored(&self.status),
            detail: self.detail,
            pending_until: self
                .pending_until
                .map(crate::codec::from_micros)
                .transpose()?,
            updated_at: crate::codec::from_micros(self.updated_at)?,
        })
    }
}

pub(crate) fn lease_lost_unless_one_row(rows_affected: u64, id: ItemId) -> StoreResult<()> {
    if rows_affected == 1 {
        Ok(())
    } else {
        Err(StoreError::LeaseLost(id))
    }
}

pub(crate) fn database_error_kind(error: &sqlx::Error) -> Option<ErrorKind> {
    match error {
        sqlx::Error::Database(database_error) => Some(database_error.kind()),
        _ => None,
    }
}

/// A unique violation becomes [`StoreError::Duplicate`] with `what` as the
/// message; anything else stays a database error.
pub(crate) fn duplicate_or_database(
    error: sqlx::Error,
    what: impl FnOnce() -> String,
) -> StoreError {
    if database_error_kind(&error) == Some(ErrorKind::UniqueViolation) {
        StoreError::Duplicate(what())
    } else {
        StoreError::Database(error)
    }
}

/// A foreign-key violation on a row that references `id` means the item does
/// not exist.
pub(crate) fn not_found_or_database(error: sqlx::Error, id: ItemId) -> StoreError {
    if database_error_kind(&error) == Some(ErrorKind::ForeignKeyViolation) {
        StoreError::NotFound(id)
    } else {
        StoreError::Database(error)
    }
}

pub(crate) fn duplicate_key_message(key: Option<&str>) -> String {
    match key {
        Some(key) => format!("a live work item already holds idempotency key {key:?}"),
        None => "a work item with this id already exists".to_owned(),
    }
}

/// Why `item_retry` refused: the item exists but is not failed or cancelled.
pub(crate) fn retry_conflict(phase: Phase) -> StoreError {
    StoreError::Conflict(format!(
        "work item is {phase}; only failed or cancelled items can be retried"
    ))
}

/// The item row as `event_apply` reads it under the lease.
pub(crate) struct EventTarget {
    pub phase: Phase,
    pub error: Option<String>,
    pub last_event_at: Option<OffsetDateTime>,
}

/// What `event_apply` writes back to the item row.
pub(crate) struct EventWrite {
    pub phase: Phase,
    pub error: Option<String>,
    pub last_event_at: OffsetDateTime,
    pub applied: EventApplied,
}

/// The `last_event_at` guard (DDR-30, DDR-31): a phase change applies unless
/// the event is older than the newest one already applied; `last_event_at`
/// only moves forward. Only called for active items (DDR-37).
pub(crate) fn decide_event(
    target: &EventTarget,
    result: &EventResult,
    now: OffsetDateTime,
) -> EventWrite {
    let event_at = result.event_ts.map(crate::to_micros).unwrap_or(now);
    let last_event_at = match target.last_event_at {
        Some(last) if last > event_at => last,
        _ => event_at,
    };
    let Some(new_phase) = result.phase else {
        return EventWrite {
            phase: target.phase,
            error: target.error.clone(),
            last_event_at,
            applied: EventApplied::Applied,
        };
    };
    let in_order = match (result.event_ts, target.last_event_at) {
        (Some(event_ts), Some(last)) => crate::to_micros(event_ts) >= last,
        _ => true,
    };
    if in_order {
        EventWrite {
            phase: new_phase,
            error: result.reason.clone(),
            last_event_at,
            applied: EventApplied::Applied,
        }
    } else {
        EventWrite {
            phase: target.phase,
            error: target.error.clone(),
            last_event_at,
            applied: EventApplied::StalePhase,
        }
    }
}

/// `updates` with each (dimension, variant) once, where it last appeared,
/// keeping the last detail given: what writing them in turn leaves in the
/// rows, as one set-based upsert per batch needs it (a row may not be
/// written twice by one statement).
pub(crate) fn fold_dimension_updates(
    updates: &[wq_core::DimensionUpdate],
) -> Vec<wq_core::DimensionUpdate> {
    let mut folded: Vec<wq_core::DimensionUpdate> = Vec::with_capacity(updates.len());
    for update in updates {
        match folded
            .iter()
            .position(|seen| seen.dimension == update.dimension && seen.variant == update.variant)
        {
            Some(at) => {
                let earlier = folded.remove(at);
                let mut update = update.clone();
                if update.detail.is_none() {
                    update.detail = earlier.detail;
                }
                folded.push(update);
            }
            None => folded.push(update.clone()),
        }
    }
    folded
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::Duration;

    fn target(last_event_at: Option<OffsetDateTime>) -> EventTarget {
        EventTarget {
            phase: Phase::Active,
            error: Some("old".into()),
            last_event_at,
        }
    }

    #[test]
    fn an_older_phase_event_is_stale_and_keeps_the_newest_time() {
        let now = OffsetDateTime::UNIX_EPOCH + Duration::days(20_000);
        let last = now - Duration::minutes(1);
        let result = EventResult::ignored()
            .with_phase(Phase::Completed)
            .at(last - Duration::minutes(1));
        let write = decide_event(&target(Some(last)), &result, now);
        assert_eq!(write.applied, EventApplied::StalePhase);
        assert_eq!(write.phase, Phase::Active);
        assert_eq!(write.error.as_deref(), Some("old"));
        assert_eq!(write.last_event_at, last);
    }

    #[test]
    fn an_event_without_time_applies_and_records_now() {
        let now = OffsetDateTime::UNIX_EPOCH + Duration::days(20_000);
        let mut result = EventResult::ignored().with_phase(Phase::Cancelled);
        result.reason = Some("closed".into());
        let write = decide_event(&target(Some(now - Duration::hours(1))), &result, now);
        assert_eq!(write.applied, EventApplied::Applied);
        assert_eq!(write.phase, Phase::Cancelled);
        assert_eq!(write.error.as_deref(), Some("closed"));
        assert_eq!(write.last_event_at, now);
    }
}

/// The visibility parameter of `items/list.sql`: `None` for everything, or
/// a JSON array of grants (`t`, `f`, `p`: LIKE patterns or null).
pub(crate) fn visibility_param(visibility: &crate::Visibility) -> Option<String> {
    let crate::Visibility::Grants(grants) = visibility else {
        return None;
    };
    let likes = |globs: &Option<Vec<String>>| {
        globs.as_ref().map(|globs| {
            globs
                .iter()
                .map(|glob| glob_like_prefix(glob))
                .collect::<Vec<_>>()
        })
    };
    let grants: Vec<serde_json::Value> = grants
        .iter()
        .map(|grant| {
            serde_json::json!({
                "t": likes(&grant.item_types),
                "f": likes(&grant.forges),
                "p": likes(&grant.projects),
            })
        })
        .collect();
    Some(serde_json::Value::Array(grants).to_string())
}

/// A LIKE pattern (escape character `\`) matching every string the glob
/// can match: its literal prefix, then `%` unless the glob is all literal.
/// `\x` in the glob is a literal `x`; `*`, `?`, `[` and `{` end the prefix.
pub(crate) fn glob_like_prefix(glob: &str) -> String {
    let mut like = String::with_capacity(glob.len() + 1);
    let mut chars = glob.chars();
    while let Some(c) = chars.next() {
        let literal = match c {
            '*' | '?' | '[' | '{' => {
                like.push('%');
                return like;
            }
            '\\' => chars.next().unwrap_or('\\'),
            other => other,
        };
        if matches!(literal, '%' | '_' | '\\') {
            like.push('\\');
        }
        like.push(literal);
    }
    like
}

#[cfg(test)]
mod like_tests {
    use super::glob_like_prefix;

    #[test]
    fn a_glob_becomes_its_escaped_literal_prefix() {
        assert_eq!(glob_like_prefix("team/*"), "team/%");
        assert_eq!(glob_like_prefix("team/app"), "team/app");
        assert_eq!(glob_like_prefix("a_b%c/**"), "a\\_b\\%c/%");
        assert_eq!(glob_like_prefix("x\\*y"), "x*y");
        assert_eq!(glob_like_prefix("{a,b}/c"), "%");
        assert_eq!(glob_like_prefix("t?am"), "t%");
        assert_eq!(glob_like_prefix("[tT]eam"), "%");
        assert_eq!(glob_like_prefix("back\\\\slash"), "back\\\\slash");
    }
}

#[cfg(test)]
mod fold_tests {
    use super::fold_dimension_updates as fold;
    use serde_json::json;
    use wq_core::DimensionUpdate;

    #[test]
    fn updates_of_one_row_fold_into_the_last_keeping_the_last_detail() {
        let updates = vec![
            DimensionUpdate::new("needs_a", true).detail(json!({"n": 1})),
            DimensionUpdate::new("needs_b", true),
            DimensionUpdate::new("needs_a", false),
        ];
        let folded = fold(&updates);
        assert_eq!(folded.len(), 2);
        assert_eq!(folded[0].dimension, "needs_b");
        assert_eq!(folded[1].dimension, "needs_a");
        assert_eq!(folded[1].status, wq_core::DimensionStatus::False);
        assert_eq!(folded[1].detail, Some(json!({"n": 1})));
        let variants = vec![
            DimensionUpdate::new("needs_a", true).variant("x"),
            DimensionUpdate::new("needs_a", true).variant("y"),
        ];
        assert_eq!(fold(&variants).len(), 2, "variants are rows of their own");
    }
}
