//! Dimensions: independent readiness signals stored as `needs_*` rows with a
//! `"true"`/`"false"` status, a variant, a JSON detail and an optional
//! `pending_until` that defers them (DDR-1, DDR-3, DDR-48).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// `"true"`: action needed; `"false"`: handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DimensionStatus {
    True,
    False,
}

impl DimensionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DimensionStatus::True => "true",
            DimensionStatus::False => "false",
        }
    }

    /// Reads a stored status; anything but `"false"` asks for action, as the
    /// decider's `!= "false"` rule does.
    pub fn from_stored(value: &str) -> Self {
        if value == "false" {
            DimensionStatus::False
        } else {
            DimensionStatus::True
        }
    }
}

impl From<bool> for DimensionStatus {
    fn from(value: bool) -> Self {
        if value {
            DimensionStatus::True
        } else {
            DimensionStatus::False
        }
    }
}

/// A stored dimension row (`work_item_statuses`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dimension {
    pub dimension: String,
    /// Empty string for single-instance dimensions.
    pub variant: String,
    pub status: DimensionStatus,
    pub detail: serde_json::Value,
    #[serde(with = "time::serde::rfc3339::option")]
    pub pending_until: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl Dimension {
    /// Status is not `"false"` and the row is not deferred past `now`.
    pub fn is_actionable(&self, now: OffsetDateTime) -> bool {
        self.status == DimensionStatus::True && !self.is_deferred(now)
    }

    pub fn is_deferred(&self, now: OffsetDateTime) -> bool {
        self.pending_until.is_some_and(|until| until > now)
    }
}

/// An upsert of one dimension row, produced by executors and event handlers
/// and applied by the generic layer (DDR-38).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DimensionUpdate {
    pub dimension: String,
    pub variant: String,
    pub status: DimensionStatus,
    /// `None` keeps the stored detail (or `{}` for a new row).
    pub detail: Option<serde_json::Value>,
    /// Replaces the stored `pending_until` (`None` clears it).
    #[serde(with = "time::serde::rfc3339::option")]
    pub pending_until: Option<OffsetDateTime>,
}

impl DimensionUpdate {
    /// `name = status` on the default variant, no detail change, no deferral.
    pub fn new(name: impl Into<String>, status: impl Into<DimensionStatus>) -> Self {
        Self {
            dimension: name.into(),
            variant: String::new(),
            status: status.into(),
            detail: None,
            pending_until: None,
        }
    }

    pub fn variant(mut self, variant: impl Into<String>) -> Self {
        self.variant = variant.into();
        self
    }

    pub fn detail(mut self, detail: serde_json::Value) -> Self {
        self.detail = Some(detail);
        self
    }

    pub fn pending_until(mut self, until: OffsetDateTime) -> Self {
        self.pending_until = Some(until);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::Duration;

    fn row(status: DimensionStatus, pending_until: Option<OffsetDateTime>) -> Dimension {
        Dimension {
            dimension: "needs_x".into(),
            variant: String::new(),
            status,
            detail: serde_json::json!({}),
            pending_until,
            updated_at: OffsetDateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn deferral_hides_a_true_row_until_it_expires() {
        let now = OffsetDateTime::UNIX_EPOCH + Duration::days(1);
        assert!(row(DimensionStatus::True, None).is_actionable(now));
        assert!(!row(DimensionStatus::False, None).is_actionable(now));
        let later = Some(now + Duration::minutes(5));
        assert!(!row(DimensionStatus::True, later).is_actionable(now));
        let earlier = Some(now - Duration::minutes(5));
        assert!(row(DimensionStatus::True, earlier).is_actionable(now));
        assert!(!row(DimensionStatus::False, earlier).is_actionable(now));
    }

    #[test]
    fn stored_status_other_than_false_asks_for_action() {
        assert_eq!(
            DimensionStatus::from_stored("false"),
            DimensionStatus::False
        );
        assert_eq!(DimensionStatus::from_stored("true"), DimensionStatus::True);
        assert_eq!(DimensionStatus::from_stored("odd"), DimensionStatus::True);
    }
}
