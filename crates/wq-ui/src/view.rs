//! The view models the templates render: one [`StateView`] per item, from
//! the one derivation ([`DisplayState::of`]), used by the row icon, its
//! tooltip, the phone drawer and the item page alike.

use time::OffsetDateTime;
use wq_core::status::{automation_texts, estimate_text, position_text, queue_state_text};
use wq_core::{DisplayState, StatusSummary, WorkItem};

/// How an item's state is shown: icon colour, dots, and the words of the
/// tooltip and drawer.
#[derive(Debug, Clone)]
pub struct StateView {
    /// `DisplayState::as_str`.
    pub name: &'static str,
    pub label: &'static str,
    pub colour: &'static str,
    pub ci_retry: bool,
    pub auto_merge: bool,
    /// The accessible name of the icon: the state and every enabled
    /// automation.
    pub aria: String,
    /// The queue state's words, when queued.
    pub queue: Option<String>,
    pub position: Option<String>,
    pub estimate: Option<String>,
    pub ci: &'static str,
    /// The enabled automations, named.
    pub automation: Vec<&'static str>,
}

impl StateView {
    pub fn of(item: &WorkItem, summary: Option<&StatusSummary>) -> Self {
        let state = DisplayState::of(item.phase, summary);
        let automation = summary.map(|s| s.automation).unwrap_or_default();
        let named = automation_texts(automation);
        let mut aria = format!("State: {}", state.label());
        for text in &named {
            aria.push_str("; ");
            aria.push_str(text);
        }
        let queue = summary.and_then(|s| s.queue.as_ref());
        Self {
            name: state.as_str(),
            label: state.label(),
            colour: state.colour(),
            ci_retry: automation.ci_retry,
            auto_merge: automation.auto_merge,
            aria,
            queue: queue.map(|q| queue_state_text(&q.state).to_owned()),
            position: queue.and_then(|q| position_text(q.position)),
            estimate: queue.and_then(|q| estimate_text(q.eta_seconds)),
            ci: summary.map_or("CI not seen yet", |s| s.ci.label()),
            automation: named,
        }
    }
}

/// One row of the list.
#[derive(Debug, Clone)]
pub struct RowView {
    pub id: String,
    pub title: String,
    pub project: String,
    pub forge: String,
    pub branch: String,
    pub change: Option<(u64, String)>,
    pub age: String,
    pub caller: String,
    pub phase: &'static str,
    pub attention: bool,
    pub state: StateView,
}

impl RowView {
    pub fn of(item: &WorkItem, summary: Option<&StatusSummary>, now: OffsetDateTime) -> Self {
        let text = |pick: fn(&StatusSummary) -> Option<&String>| {
            summary.and_then(pick).cloned().unwrap_or_default()
        };
        Self {
            id: item.id.to_string(),
            title: summary
                .and_then(|s| s.title.clone())
                .unwrap_or_else(|| format!("{} {}", item.item_type, item.id)),
            project: text(|s| s.project.as_ref()),
            forge: text(|s| s.forge.as_ref()),
            branch: text(|s| s.branch.as_ref()),
            change: summary
                .and_then(|s| s.change.as_ref())
                .map(|change| (change.number, change.url.clone().unwrap_or_default())),
            age: age(now - item.created_at),
            caller: item.caller_identity.clone().unwrap_or_default(),
            phase: item.phase.as_str(),
            attention: summary.is_some_and(|s| s.needs_attention)
                || item.phase == wq_core::Phase::Failed,
            state: StateView::of(item, summary),
        }
    }
}

/// "just now", "5 min", "3 h", "2 d".
pub fn age(elapsed: time::Duration) -> String {
    let seconds = elapsed.whole_seconds().max(0);
    match seconds {
        0..60 => "just now".to_owned(),
        60..3600 => format!("{} min", seconds / 60),
        3600..86_400 => format!("{} h", seconds / 3600),
        _ => format!("{} d", seconds / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wq_core::status::{Automation, QueueStatus};

    #[test]
    fn ages_read_short() {
        assert_eq!(age(time::Duration::seconds(5)), "just now");
        assert_eq!(age(time::Duration::seconds(-5)), "just now");
        assert_eq!(age(time::Duration::minutes(5)), "5 min");
        assert_eq!(age(time::Duration::hours(3)), "3 h");
        assert_eq!(age(time::Duration::days(2)), "2 d");
    }

    #[test]
    fn a_queued_item_names_its_state_and_automations() {
        let now = time::macros::datetime!(2026-12-01 09:30 UTC);
        let item = WorkItem {
            id: wq_core::ItemId::new_v7(),
            item_type: "mr".into(),
            phase: wq_core::Phase::Active,
            actionable: false,
            attempts: 0,
            error: None,
            leased_until: None,
            idempotency_key: None,
            caller_identity: None,
            created_at: now,
            updated_at: now,
            last_event_at: None,
        };
        let summary = StatusSummary {
            queue: Some(QueueStatus {
                state: "queued".into(),
                position: Some(3),
                eta_seconds: Some(61),
            }),
            automation: Automation {
                ci_retry: true,
                auto_merge: true,
            },
            ..StatusSummary::default()
        };
        let view = StateView::of(&item, Some(&summary));
        assert_eq!(view.colour, "#966600");
        assert_eq!(
            view.aria,
            "State: In the merge queue; CI auto-retry on; auto-merge on"
        );
        assert_eq!(view.position.as_deref(), Some("position 3"));
        assert_eq!(view.estimate.as_deref(), Some("2 min"));
    }
}
