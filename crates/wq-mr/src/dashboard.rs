//! The status note on the change request: one note per item that tells the
//! whole story — the state in one line, every gate met or not (the review
//! gate named as configured), the last merge attempt, the CI retry
//! decisions and a link to the item. Pure: `post_dashboard_note` posts or
//! edits it, and after every step [`refresh`] asks for an edit when the
//! text the step leaves behind differs from the one on the forge.

use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use wq_core::{Dimension, DimensionStatus, DimensionUpdate, ExecOutcome, ItemView, Phase};

use crate::CLOSED_ON_FORGE;
use crate::ci_retry::CiRetryDetail;
use crate::dims::{NEEDS_DASHBOARD, NEEDS_RECONCILE};
use crate::merge::{APPROVED, REVIEW_BY_PERSON, gate_description, gate_names};
use crate::store::{MergeResult, MrDetails};

/// The status note of one item, before the forge's own escaping.
pub(crate) struct StatusNote {
    /// Finds the note again (with its author, the bot).
    pub marker: String,
    /// The item's dashboard page.
    pub link: String,
    pub body: String,
}

impl StatusNote {
    /// The note for the item as `view` and `details` describe it;
    /// `person_review` says whether the review gate is `review_by_person`.
    pub(crate) fn of(
        public_url: &str,
        view: &ItemView,
        details: &MrDetails,
        person_review: bool,
    ) -> Self {
        let id = view.item.id;
        let marker = format!("<!-- workqueue:item:{id} -->");
        let link = format!("{}/ui/items/{id}", public_url.trim_end_matches('/'));
        let seen = Seen::of(view);
        let phase = view.item.phase;
        let mut body = format!(
            "{marker}\n**workqueue:** {}\n",
            state_line(phase, view.item.error.as_deref(), details, seen.as_ref())
        );
        if phase == Phase::Active {
            body.push_str(&gates_section(seen.as_ref(), person_review));
        }
        let automation = &details.spec.automation;
        body.push_str(&format!(
            "\nAutomatic merge: {} · CI retry: {}\n",
            on_off(automation.auto_merge),
            on_off(automation.ci_retry)
        ));
        body.push_str(&merge_attempt_line(details));
        let ci = CiRetryDetail::of(view).note_section();
        let ci = ci.trim_matches('\n');
        if !ci.is_empty() {
            body.push_str(&format!("\n{ci}\n"));
        }
        body.push_str(&format!("\nItem `{id}`: {link}"));
        Self { marker, link, body }
    }

    /// What `needs_dashboard` keeps of the text on the forge.
    pub(crate) fn hash(&self) -> String {
        hex::encode(Sha256::digest(self.body.as_bytes()))
    }
}

/// What the last reconcile saw: the unmet gates (with those it could not
/// read) and the forge's merge status word (the `needs_reconcile`
/// detail).
struct Seen {
    unmet: Vec<String>,
    /// Gates the observation could not judge (the review, in the answer to
    /// the change request's creation); they count as unmet too.
    unread: Vec<String>,
    merge_status: String,
}

impl Seen {
    fn of(view: &ItemView) -> Option<Self> {
        let detail = &view.dimension(NEEDS_RECONCILE, "")?.detail;
        let unmet = detail
            .get("unmet_gates")?
            .as_array()?
            .iter()
            .filter_map(|g| g.as_str().map(str::to_owned))
            .collect();
        let unread = detail
            .get("unread_gates")
            .and_then(|gates| gates.as_array())
            .map(|gates| {
                gates
                    .iter()
                    .filter_map(|g| g.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let merge_status = detail
            .get("merge_status")
            .and_then(|s| s.as_str())
            .unwrap_or_default()
            .to_owned();
        Some(Self {
            unmet,
            unread,
            merge_status,
        })
    }

    fn unmet(&self, gate: &str) -> bool {
        self.unmet.iter().any(|g| g == gate)
    }

    fn unread(&self, gate: &str) -> bool {
        self.unread.iter().any(|g| g == gate)
    }
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

/// The state in one line.
fn state_line(
    phase: Phase,
    error: Option<&str>,
    details: &MrDetails,
    seen: Option<&Seen>,
) -> String {
    match phase {
        Phase::Completed => return "Merged".into(),
        Phase::Cancelled => {
            return match error {
                Some(CLOSED_ON_FORGE) | None => "Closed".into(),
                Some(reason) => format!("Closed: {reason}"),
            };
        }
        Phase::Failed => return format!("Failed: {}", error.unwrap_or("see the item")),
        Phase::Active => {}
    }
    let journal = &details.journal;
    if let Some(entry) = &details.queue {
        let mut line = "In the merge queue".to_owned();
        if let Some(position) = entry.position {
            line.push_str(&format!(", position {position}"));
        }
        if let Some(eta) = entry.eta_seconds {
            line.push_str(&format!(", about {} min", (eta + 59) / 60));
        }
        return line;
    }
    if journal.result == Some(MergeResult::InFlight) {
        return "Merging: the merge was requested".into();
    }
    let Some(seen) = seen else {
        return "Checking the merge request".into();
    };
    let waiting = [
        ("open", "Waiting for the merge request to be open"),
        ("not_draft", "Waiting: the merge request is a draft"),
        ("head_known", "Waiting for CI"),
        ("ci_passed", "Waiting for CI"),
        (APPROVED, "Waiting for review"),
        (REVIEW_BY_PERSON, "Waiting for review"),
        ("threads_resolved", "Waiting for threads to be resolved"),
    ];
    if let Some((gate, line)) = waiting.iter().find(|(gate, _)| seen.unmet(gate)) {
        if seen.unread(gate) {
            return "Checking the merge request".into();
        }
        return (*line).into();
    }
    if seen.unmet("mergeable") {
        return format!(
            "Waiting for the forge to allow the merge (`{}`)",
            seen.merge_status
        );
    }
    if let Some(gate) = seen.unmet.first() {
        return format!("Waiting for `{gate}`");
    }
    if !details.spec.automation.auto_merge {
        return "Ready to merge — automatic merge is off for this item".into();
    }
    match journal.result {
        Some(MergeResult::Failed) => {
            let error = journal.error.as_deref().unwrap_or("no reason given");
            // A transient answer's next automatic call, when one is due;
            // else only `retry-merge` tries again.
            match journal.retry_at.and_then(|at| {
                at.to_offset(time::UtcOffset::UTC)
                    .format(time::macros::format_description!(
                        "[year]-[month]-[day] [hour]:[minute]:[second] UTC"
                    ))
                    .ok()
            }) {
                Some(at) => format!("Merge failed: {error} — trying again automatically at {at}"),
                None => {
                    format!("Merge failed: {error} — retry with the item's `retry-merge` command")
                }
            }
        }
        Some(MergeResult::Accepted) => "Merge accepted by the forge".into(),
        Some(MergeResult::InFlight) | None => "Ready to merge".into(),
    }
}

/// Every gate met or not; "not checked yet" before the first reconcile,
/// and for a gate its observation could not read.
fn gates_section(seen: Option<&Seen>, person_review: bool) -> String {
    let Some(seen) = seen else {
        return "\nGates: not checked yet.\n".into();
    };
    let mut text = "\nGates:\n".to_owned();
    for gate in gate_names(person_review) {
        let what = gate_description(gate);
        if seen.unread(gate) {
            text.push_str(&format!("- ❔ `{gate}`: {what} (not checked yet)\n"));
            continue;
        }
        let mark = if seen.unmet(gate) { "⏳" } else { "✅" };
        text.push_str(&format!("- {mark} `{gate}`: {what}\n"));
    }
    text
}

fn merge_attempt_line(details: &MrDetails) -> String {
    let journal = &details.journal;
    let Some(result) = journal.result else {
        return "Last merge attempt: none yet\n".into();
    };
    let at = journal
        .attempt_at
        .and_then(|t| t.format(&Rfc3339).ok())
        .map(|t| format!(" at {t}"))
        .unwrap_or_default();
    let error = match (result, journal.error.as_deref()) {
        (MergeResult::Failed, Some(error)) => format!(": {error}"),
        _ => String::new(),
    };
    format!("Last merge attempt{at}: {}{error}\n", result.as_str())
}

/// `view` as it will be once `outcome` is applied: its phase, reason and
/// dimension rows (details replaced where the outcome gives them).
pub(crate) fn projected(view: &ItemView, outcome: &ExecOutcome) -> ItemView {
    let mut next = view.clone();
    if let Some(phase) = outcome.phase {
        next.item.phase = phase;
        next.item.error.clone_from(&outcome.reason);
    }
    for update in &outcome.dimensions {
        let status = update.status;
        match next
            .dimensions
            .iter_mut()
            .find(|d| d.dimension == update.dimension && d.variant == update.variant)
        {
            Some(row) => {
                row.status = status;
                if let Some(detail) = &update.detail {
                    row.detail = detail.clone();
                }
                row.pending_until = update.pending_until;
            }
            None => next.dimensions.push(Dimension {
                dimension: update.dimension.clone(),
                variant: update.variant.clone(),
                status,
                detail: update
                    .detail
                    .clone()
                    .unwrap_or_else(|| serde_json::json!({})),
                pending_until: update.pending_until,
                updated_at: view.now,
            }),
        }
    }
    next
}

/// The `needs_dashboard` detail of a note just written on change request
/// `number`.
pub(crate) fn written(
    number: u64,
    note_id: u64,
    note: &StatusNote,
    now: OffsetDateTime,
) -> serde_json::Value {
    serde_json::json!({
        "number": number,
        "note_id": note_id,
        "url": note.link,
        "hash": note.hash(),
        "written_at": now.format(&Rfc3339).ok(),
    })
}

/// The id and text hash of the status note last written on change request
/// `number`, from the `needs_dashboard` detail (a detail without the number,
/// written before it was kept, tells nothing).
pub(crate) fn last_written(view: &ItemView, number: u64) -> Option<(u64, String)> {
    let detail = &view.dimension(NEEDS_DASHBOARD, "")?.detail;
    if detail.get("number").and_then(serde_json::Value::as_u64) != Some(number) {
        return None;
    }
    let id = detail.get("note_id")?.as_u64()?;
    let hash = detail.get("hash")?.as_str()?.to_owned();
    Some((id, hash))
}

/// Asks for an edit of the note when `note` differs from the text last
/// written (its hash in the `needs_dashboard` detail), no sooner than
/// `min_interval` after that write. `None` when nothing is to do: the text
/// is the same, or the note was never written (`post_dashboard_note` is due
/// anyway).
pub(crate) fn refresh(
    view: &ItemView,
    note: &StatusNote,
    min_interval: time::Duration,
) -> Option<DimensionUpdate> {
    let row = view.dimension(NEEDS_DASHBOARD, "")?;
    let detail = &row.detail;
    if detail.get("hash").and_then(|h| h.as_str()) == Some(note.hash().as_str()) {
        return None;
    }
    let due = detail
        .get("written_at")
        .and_then(|t| t.as_str())
        .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())
        .map(|at| at + min_interval)
        .filter(|due| *due > view.now);
    if row.status == DimensionStatus::True && row.pending_until == due {
        // Already asked for, at that time.
        return None;
    }
    let update = DimensionUpdate::new(NEEDS_DASHBOARD, true);
    Some(match due {
        Some(due) => update.pending_until(due),
        None => update,
    })
}

#[cfg(test)]
mod tests;
