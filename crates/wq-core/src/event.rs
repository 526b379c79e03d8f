//! Events: raw bodies stored in `pending_events` (DDR-30, DDR-33) and the
//! `EventResult` a type's handler makes of one (DDR-38).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::dimension::DimensionUpdate;
use crate::item::{ItemId, Phase};

/// A raw event waiting for its item's loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingEvent {
    pub id: i64,
    pub work_item_id: ItemId,
    pub event_type: String,
    pub body: serde_json::Value,
    #[serde(with = "time::serde::rfc3339")]
    pub received_at: OffsetDateTime,
    /// The forge's id of the delivery the event came from, when it said.
    #[serde(default)]
    pub delivery_id: Option<String>,
    /// The delivery's raw body as received (bounded), kept with the event
    /// (DDR-33); the handler reads `body`.
    #[serde(default)]
    pub raw: Option<String>,
}

/// What an event means for its item. Handlers only return this; the generic
/// layer applies it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventResult {
    /// A phase transition, applied only while the item is `active` and only
    /// when `event_ts` is not older than the item's `last_event_at`.
    pub phase: Option<Phase>,
    /// The event's own time, for ordering (the `last_event_at` guard).
    #[serde(with = "time::serde::rfc3339::option")]
    pub event_ts: Option<OffsetDateTime>,
    /// Dimension upserts; applied even when the phase part is stale.
    pub dimensions: Vec<DimensionUpdate>,
    /// An error text to record with a phase transition (e.g. why cancelled).
    pub reason: Option<String>,
}

impl EventResult {
    /// An event that changes nothing (unknown or irrelevant).
    pub fn ignored() -> Self {
        Self::default()
    }

    pub fn with_phase(mut self, phase: Phase) -> Self {
        self.phase = Some(phase);
        self
    }

    pub fn with_dimension(mut self, update: DimensionUpdate) -> Self {
        self.dimensions.push(update);
        self
    }

    pub fn at(mut self, event_ts: OffsetDateTime) -> Self {
        self.event_ts = Some(event_ts);
        self
    }
}
