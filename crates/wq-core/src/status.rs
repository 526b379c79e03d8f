//! The status projection every presentation shares: a bounded,
//! presentation-neutral [`StatusSummary`] an item type computes from what it
//! stored ([`crate::ItemType::status`], never a forge call), the one state
//! derivation [`DisplayState::of`] that picks the icon, and the texts of a
//! queue entry ([`estimate_text`], [`queue_text`]).
//!
//! The API's list rows carry the summary; the dashboard renders the same
//! summary through the same derivation, on every screen size.
//!
//! Precedence of [`DisplayState::of`]: a terminal phase first (merged,
//! cancelled, failed); then an active merge-queue entry, which outranks
//! every other non-terminal state; then CI failing, CI running, waiting for
//! review, another unmet gate, ready.

use serde::{Deserialize, Serialize};

use crate::item::Phase;

/// Most unmet gates a summary carries.
pub const MAX_UNMET_GATES: usize = 16;
/// Longest text (a title, a reason, an error) a summary carries, in bytes.
pub const MAX_TEXT_BYTES: usize = 300;

/// The colour of an active merge-queue entry.
pub const QUEUE_COLOUR: &str = "#966600";

/// What CI says about the change's head, as last stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum CiState {
    /// Nothing stored yet.
    #[default]
    Unknown,
    /// No pipeline or check for the head.
    None,
    Pending,
    Running,
    Passed,
    Failed,
    Canceled,
}

impl CiState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::None => "none",
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Passed => "passed",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }

    /// The state a forge's status word names; unknown words are `Unknown`.
    pub fn from_word(word: &str) -> Self {
        match word {
            "none" => Self::None,
            "pending" => Self::Pending,
            "running" => Self::Running,
            "success" | "passed" => Self::Passed,
            "failed" => Self::Failed,
            "canceled" | "cancelled" => Self::Canceled,
            _ => Self::Unknown,
        }
    }

    /// The words a person reads.
    pub fn label(self) -> &'static str {
        match self {
            Self::Unknown => "CI not seen yet",
            Self::None => "no CI",
            Self::Pending => "CI pending",
            Self::Running => "CI running",
            Self::Passed => "CI passed",
            Self::Failed => "CI failed",
            Self::Canceled => "CI canceled",
        }
    }
}

/// The change request (merge request or pull request) an item owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChangeRef {
    pub number: u64,
    pub url: Option<String>,
    /// The head commit last recorded.
    pub head_sha: Option<String>,
}

/// The item's place in a merge queue or train, as last observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueStatus {
    /// `queued`, `awaiting_checks`, `mergeable`, `unmergeable`, `locked`,
    /// or another word from the forge.
    pub state: String,
    /// One-based; `None` when unknown (a value of 0 or less is dropped).
    pub position: Option<i64>,
    /// Seconds until the merge, when the forge estimates it.
    pub eta_seconds: Option<i64>,
}

/// A merge gate that does not hold, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UnmetGate {
    pub name: String,
    pub reason: String,
}

/// The last automatic merge attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LastMerge {
    /// `in_flight`, `failed` or `accepted`.
    pub result: String,
    /// The kind of the stored error (`auto_merge` for a merge attempt's).
    pub error_kind: Option<String>,
    pub error: Option<String>,
}

/// Which automations are on for the item.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Automation {
    pub ci_retry: bool,
    pub auto_merge: bool,
}

/// What an item looks like at a glance, from stored state only. Bounded:
/// at most [`MAX_UNMET_GATES`] gates, texts cut at [`MAX_TEXT_BYTES`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatusSummary {
    pub title: Option<String>,
    pub forge: Option<String>,
    pub project: Option<String>,
    pub branch: Option<String>,
    pub change: Option<ChangeRef>,
    pub ci: CiState,
    pub queue: Option<QueueStatus>,
    /// Whether the gates were checked at all (before the first check, none
    /// is known to be unmet).
    pub gates_checked: bool,
    pub unmet_gates: Vec<UnmetGate>,
    /// Unmet gates left off past [`MAX_UNMET_GATES`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_unmet_gates: usize,
    pub last_merge: Option<LastMerge>,
    pub automation: Automation,
    /// A failed item or a failed merge attempt.
    pub needs_attention: bool,
}

fn is_zero(count: &usize) -> bool {
    *count == 0
}

/// At most [`MAX_TEXT_BYTES`] of `text`, cut at a character boundary (with
/// an ellipsis when cut).
pub fn bounded_text(text: &str) -> String {
    if text.len() <= MAX_TEXT_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_TEXT_BYTES - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

impl StatusSummary {
    /// Bounds the texts and the gate list, drops a queue position of 0 or
    /// less and a negative estimate, and sets `needs_attention` for
    /// `phase`: what a type calls last.
    pub fn finish(mut self, phase: Phase) -> Self {
        let cut = |text: &mut Option<String>| {
            if let Some(value) = text {
                *value = bounded_text(value);
            }
        };
        cut(&mut self.title);
        cut(&mut self.branch);
        if self.unmet_gates.len() > MAX_UNMET_GATES {
            self.more_unmet_gates += self.unmet_gates.len() - MAX_UNMET_GATES;
            self.unmet_gates.truncate(MAX_UNMET_GATES);
        }
        for gate in &mut self.unmet_gates {
            gate.name = bounded_text(&gate.name);
            gate.reason = bounded_text(&gate.reason);
        }
        if let Some(merge) = &mut self.last_merge {
            cut(&mut merge.error);
        }
        if let Some(queue) = &mut self.queue {
            queue.position = queue.position.filter(|position| *position > 0);
            queue.eta_seconds = queue.eta_seconds.filter(|eta| *eta >= 0);
        }
        self.needs_attention = phase == Phase::Failed
            || self
                .last_merge
                .as_ref()
                .is_some_and(|merge| merge.result == "failed");
        self
    }

    /// Whether the gate `name` is unmet.
    pub fn unmet(&self, name: &str) -> bool {
        self.unmet_gates.iter().any(|gate| gate.name == name)
    }
}

/// Whether a row of a [`DetailSection`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mark {
    Met,
    Unmet,
}

/// One row of a [`DetailSection`]: a label, its value, whether it holds
/// (for a gate) and a longer text shown only when asked for (a file's
/// content).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetailRow {
    pub label: String,
    pub value: String,
    pub mark: Option<Mark>,
    pub content: Option<String>,
}

impl DetailRow {
    pub fn new(label: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            value: value.into(),
            mark: None,
            content: None,
        }
    }

    pub fn mark(mut self, met: bool) -> Self {
        self.mark = Some(if met { Mark::Met } else { Mark::Unmet });
        self
    }

    pub fn content(mut self, content: impl Into<String>) -> Self {
        self.content = Some(content.into());
        self
    }
}

/// A titled part of an item's page (its gates, its merge attempts, its CI
/// retry decisions, its files), in words a person reads: an item type
/// describes its own items this way ([`crate::ItemType::sections`]) and a
/// presentation shows the sections without knowing the type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetailSection {
    pub title: String,
    /// Said when `rows` is empty.
    pub empty: String,
    pub rows: Vec<DetailRow>,
}

/// The gate names that stand for the review.
pub const REVIEW_GATES: [&str; 2] = ["approved", "review_by_person"];
/// The gate names that stand for CI.
pub const CI_GATES: [&str; 1] = ["ci_passed"];

/// The one state an item is shown in (its icon and colour).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum DisplayState {
    Merged,
    Cancelled,
    Failed,
    Queued,
    CiFailing,
    CiRunning,
    WaitingForReview,
    /// Another gate does not hold (a draft, a conflict, open threads).
    Blocked,
    /// Gates not checked yet.
    Checking,
    Ready,
}

impl DisplayState {
    pub const ALL: [DisplayState; 10] = [
        Self::Merged,
        Self::Cancelled,
        Self::Failed,
        Self::Queued,
        Self::CiFailing,
        Self::CiRunning,
        Self::WaitingForReview,
        Self::Blocked,
        Self::Checking,
        Self::Ready,
    ];

    /// The state of an item in `phase` whose type summarised it as
    /// `summary` (`None`: the type has no summary).
    pub fn of(phase: Phase, summary: Option<&StatusSummary>) -> Self {
        match phase {
            Phase::Completed => return Self::Merged,
            Phase::Cancelled => return Self::Cancelled,
            Phase::Failed => return Self::Failed,
            Phase::Active => {}
        }
        let Some(summary) = summary else {
            return Self::Checking;
        };
        if summary.queue.is_some() {
            return Self::Queued;
        }
        if summary.ci == CiState::Failed || summary.ci == CiState::Canceled {
            return Self::CiFailing;
        }
        if matches!(summary.ci, CiState::Running | CiState::Pending)
            || (CI_GATES.iter().any(|gate| summary.unmet(gate)) && summary.ci != CiState::Passed)
        {
            return Self::CiRunning;
        }
        if REVIEW_GATES.iter().any(|gate| summary.unmet(gate)) {
            return Self::WaitingForReview;
        }
        if !summary.unmet_gates.is_empty() {
            return Self::Blocked;
        }
        if !summary.gates_checked {
            return Self::Checking;
        }
        Self::Ready
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Merged => "merged",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
            Self::Queued => "queued",
            Self::CiFailing => "ci_failing",
            Self::CiRunning => "ci_running",
            Self::WaitingForReview => "waiting_for_review",
            Self::Blocked => "blocked",
            Self::Checking => "checking",
            Self::Ready => "ready",
        }
    }

    /// The words a person reads.
    pub fn label(self) -> &'static str {
        match self {
            Self::Merged => "Merged",
            Self::Cancelled => "Cancelled",
            Self::Failed => "Failed",
            Self::Queued => "In the merge queue",
            Self::CiFailing => "CI failing",
            Self::CiRunning => "CI running",
            Self::WaitingForReview => "Waiting for review",
            Self::Blocked => "Waiting on a gate",
            Self::Checking => "Checking",
            Self::Ready => "Ready to merge",
        }
    }

    /// The icon's colour; every one differs from the others.
    pub fn colour(self) -> &'static str {
        match self {
            Self::Merged => "#8250df",
            Self::Cancelled => "#6e7781",
            Self::Failed => "#a40e26",
            Self::Queued => QUEUE_COLOUR,
            Self::CiFailing => "#d1242f",
            Self::CiRunning => "#0969da",
            Self::WaitingForReview => "#57606a",
            Self::Blocked => "#953800",
            Self::Checking => "#8c959f",
            Self::Ready => "#1a7f37",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Merged | Self::Cancelled | Self::Failed)
    }
}

/// The estimate as a person reads it: none when absent (or negative), "less
/// than a minute" under 60 s, whole minutes rounded up from 60 s (61 s →
/// "2 min").
pub fn estimate_text(eta_seconds: Option<i64>) -> Option<String> {
    let seconds = eta_seconds.filter(|seconds| *seconds >= 0)?;
    if seconds < 60 {
        return Some("less than a minute".to_owned());
    }
    let minutes = (seconds + 59) / 60;
    Some(format!("{minutes} min"))
}

/// What a queue state word means to a person; a word the forge sends that
/// is not known here gets the generic copy.
pub fn queue_state_text(state: &str) -> &'static str {
    match state {
        "queued" => "Queued to merge",
        "awaiting_checks" => "In the merge queue, waiting for checks",
        "mergeable" => "In the merge queue, about to merge",
        "unmergeable" => "In the merge queue, cannot merge as it stands",
        "locked" => "In the merge queue, being merged",
        _ => "In the merge queue",
    }
}

/// The position as a person reads it: none for a position of 0 or less.
pub fn position_text(position: Option<i64>) -> Option<String> {
    position
        .filter(|position| *position > 0)
        .map(|position| format!("position {position}"))
}

/// One line for a queue entry: its state, position and estimate, each only
/// when known (e.g. "Queued to merge · position 3 · about 2 min").
pub fn queue_text(queue: &QueueStatus) -> String {
    let mut parts = vec![queue_state_text(&queue.state).to_owned()];
    parts.extend(position_text(queue.position));
    parts.extend(estimate_text(queue.eta_seconds).map(|eta| format!("about {eta}")));
    parts.join(" · ")
}

/// The accessible names of the enabled automations, e.g. ["CI auto-retry
/// on", "auto-merge on"]; empty when none is.
pub fn automation_texts(automation: Automation) -> Vec<&'static str> {
    let mut texts = Vec::new();
    if automation.ci_retry {
        texts.push("CI auto-retry on");
    }
    if automation.auto_merge {
        texts.push("auto-merge on");
    }
    texts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> StatusSummary {
        StatusSummary {
            gates_checked: true,
            ci: CiState::Passed,
            ..StatusSummary::default()
        }
    }

    fn gate(name: &str) -> UnmetGate {
        UnmetGate {
            name: name.to_owned(),
            reason: format!("{name} does not hold"),
        }
    }

    fn queued() -> QueueStatus {
        QueueStatus {
            state: "queued".to_owned(),
            position: Some(2),
            eta_seconds: Some(61),
        }
    }

    #[test]
    fn terminal_phases_take_precedence_over_everything() {
        let busy = StatusSummary {
            queue: Some(queued()),
            ci: CiState::Failed,
            unmet_gates: vec![gate("approved")],
            ..summary()
        };
        assert_eq!(
            DisplayState::of(Phase::Completed, Some(&busy)),
            DisplayState::Merged
        );
        assert_eq!(
            DisplayState::of(Phase::Cancelled, Some(&busy)),
            DisplayState::Cancelled
        );
        assert_eq!(
            DisplayState::of(Phase::Failed, Some(&busy)),
            DisplayState::Failed
        );
        assert_eq!(DisplayState::of(Phase::Failed, None), DisplayState::Failed);
    }

    #[test]
    fn a_queue_entry_outranks_every_other_active_state() {
        for ci in [CiState::Failed, CiState::Running, CiState::Pending] {
            let entry = StatusSummary {
                queue: Some(queued()),
                ci,
                unmet_gates: vec![gate("approved"), gate("ci_passed")],
                ..summary()
            };
            let state = DisplayState::of(Phase::Active, Some(&entry));
            assert_eq!(state, DisplayState::Queued, "{ci:?}");
            assert_eq!(state.colour(), "#966600");
        }
    }

    #[test]
    fn then_ci_failing_ci_running_review_and_ready() {
        let active = |summary: StatusSummary| DisplayState::of(Phase::Active, Some(&summary));
        let review = vec![gate("review_by_person")];
        assert_eq!(
            active(StatusSummary {
                ci: CiState::Failed,
                unmet_gates: review.clone(),
                ..summary()
            }),
            DisplayState::CiFailing
        );
        assert_eq!(
            active(StatusSummary {
                ci: CiState::Running,
                unmet_gates: review.clone(),
                ..summary()
            }),
            DisplayState::CiRunning
        );
        assert_eq!(
            active(StatusSummary {
                ci: CiState::Unknown,
                unmet_gates: vec![gate("ci_passed"), gate("approved")],
                ..summary()
            }),
            DisplayState::CiRunning
        );
        assert_eq!(
            active(StatusSummary {
                unmet_gates: review,
                ..summary()
            }),
            DisplayState::WaitingForReview
        );
        assert_eq!(
            active(StatusSummary {
                unmet_gates: vec![gate("not_draft")],
                ..summary()
            }),
            DisplayState::Blocked
        );
        assert_eq!(active(summary()), DisplayState::Ready);
        assert_eq!(
            active(StatusSummary {
                gates_checked: false,
                ..summary()
            }),
            DisplayState::Checking
        );
        assert_eq!(
            DisplayState::of(Phase::Active, None),
            DisplayState::Checking
        );
    }

    #[test]
    fn every_state_has_its_own_colour_and_name() {
        let mut colours: Vec<_> = DisplayState::ALL.iter().map(|s| s.colour()).collect();
        let mut names: Vec<_> = DisplayState::ALL.iter().map(|s| s.as_str()).collect();
        colours.sort_unstable();
        colours.dedup();
        names.sort_unstable();
        names.dedup();
        assert_eq!(colours.len(), DisplayState::ALL.len());
        assert_eq!(names.len(), DisplayState::ALL.len());
    }

    #[test]
    fn estimates_read_as_people_expect() {
        assert_eq!(estimate_text(None), None);
        assert_eq!(estimate_text(Some(-1)), None);
        assert_eq!(
            estimate_text(Some(0)).as_deref(),
            Some("less than a minute")
        );
        assert_eq!(
            estimate_text(Some(59)).as_deref(),
            Some("less than a minute")
        );
        assert_eq!(estimate_text(Some(60)).as_deref(), Some("1 min"));
        assert_eq!(estimate_text(Some(61)).as_deref(), Some("2 min"));
        assert_eq!(estimate_text(Some(120)).as_deref(), Some("2 min"));
        assert_eq!(estimate_text(Some(3601)).as_deref(), Some("61 min"));
    }

    #[test]
    fn queue_lines_name_only_what_is_known() {
        assert_eq!(
            queue_text(&queued()),
            "Queued to merge · position 2 · about 2 min"
        );
        let unknown = QueueStatus {
            state: "shuffling".to_owned(),
            position: Some(0),
            eta_seconds: None,
        };
        assert_eq!(queue_text(&unknown), "In the merge queue");
        let negative = QueueStatus {
            state: "awaiting_checks".to_owned(),
            position: Some(-3),
            eta_seconds: Some(30),
        };
        assert_eq!(
            queue_text(&negative),
            "In the merge queue, waiting for checks · about less than a minute"
        );
        assert_eq!(position_text(Some(0)), None);
        assert_eq!(position_text(Some(1)).as_deref(), Some("position 1"));
    }

    #[test]
    fn finishing_bounds_the_summary_and_flags_attention() {
        let long = "é".repeat(400);
        let finished = StatusSummary {
            title: Some(long.clone()),
            unmet_gates: (0..20).map(|i| gate(&format!("g{i}"))).collect(),
            queue: Some(QueueStatus {
                state: "queued".into(),
                position: Some(0),
                eta_seconds: Some(-5),
            }),
            last_merge: Some(LastMerge {
                result: "failed".into(),
                error_kind: Some("auto_merge".into()),
                error: Some(long),
            }),
            ..summary()
        }
        .finish(Phase::Active);
        let title = finished.title.as_deref().unwrap();
        assert!(title.len() <= MAX_TEXT_BYTES && title.ends_with('…'));
        assert_eq!(finished.unmet_gates.len(), MAX_UNMET_GATES);
        assert_eq!(finished.more_unmet_gates, 4);
        let queue = finished.queue.as_ref().unwrap();
        assert_eq!((queue.position, queue.eta_seconds), (None, None));
        assert!(finished.needs_attention);
        assert!(!summary().finish(Phase::Active).needs_attention);
        assert!(summary().finish(Phase::Failed).needs_attention);
    }

    #[test]
    fn automation_is_named_for_each_enabled_setting() {
        assert!(automation_texts(Automation::default()).is_empty());
        assert_eq!(
            automation_texts(Automation {
                ci_retry: true,
                auto_merge: true
            }),
            ["CI auto-retry on", "auto-merge on"]
        );
    }
}
