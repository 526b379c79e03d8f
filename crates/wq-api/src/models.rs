//! Wire types of the REST API (`/api/v1`). They are separate from the domain
//! types so the API's shape changes only on purpose; the CLI and the tests
//! deserialize the same structs.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use wq_core::{Dimension, DimensionStatus, ItemId, Phase, WorkItem};

/// A work item as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemBody {
    pub id: ItemId,
    pub item_type: String,
    pub phase: Phase,
    pub actionable: bool,
    pub attempts: i32,
    pub error: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub leased_until: Option<OffsetDateTime>,
    pub idempotency_key: Option<String>,
    pub caller_identity: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_event_at: Option<OffsetDateTime>,
}

impl From<WorkItem> for ItemBody {
    fn from(item: WorkItem) -> Self {
        Self {
            id: item.id,
            item_type: item.item_type,
            phase: item.phase,
            actionable: item.actionable,
            attempts: item.attempts,
            error: item.error,
            leased_until: item.leased_until,
            idempotency_key: item.idempotency_key,
            caller_identity: item.caller_identity,
            created_at: item.created_at,
            updated_at: item.updated_at,
            last_event_at: item.last_event_at,
        }
    }
}

/// One dimension row of an item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DimensionBody {
    pub dimension: String,
    /// Empty for single-instance dimensions.
    pub variant: String,
    pub status: DimensionStatus,
    pub detail: serde_json::Value,
    #[serde(with = "time::serde::rfc3339::option")]
    pub pending_until: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl From<Dimension> for DimensionBody {
    fn from(row: Dimension) -> Self {
        Self {
            dimension: row.dimension,
            variant: row.variant,
            status: row.status,
            detail: row.detail,
            pending_until: row.pending_until,
            updated_at: row.updated_at,
        }
    }
}

/// `GET /api/v1/work-items/{id}`: the item and its dimensions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemDetail {
    #[serde(flatten)]
    pub item: ItemBody,
    pub dimensions: Vec<DimensionBody>,
    /// The item type's own view (e.g. the merge request), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

/// `POST /api/v1/work-items`: what the submission did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmitResponse {
    /// `created`, `unchanged`, `updated` or `retried`.
    pub outcome: String,
    pub item: ItemBody,
}

/// `GET /api/v1/work-items`: one page, newest first. `next_before` is the
/// cursor of the next page (`?before=`), `null` on the last page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemList {
    pub items: Vec<ItemBody>,
    pub next_before: Option<ItemId>,
}

/// `GET /healthz` and `GET /readyz` when healthy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthBody {
    pub status: String,
}
