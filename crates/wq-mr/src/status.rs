//! The `mr` item at a glance ([`summary`]) and its page for people
//! ([`sections`]), from what is stored: the `mr_details` row and the
//! dimensions (the last reconcile's unmet gates and CI word in the
//! `needs_reconcile` detail, the CI retry decisions in `needs_ci_retry`).
//! Pure: no forge call, so a listing can summarise every row.

use time::format_description::well_known::Rfc3339;
use wq_core::status::{
    Automation, ChangeRef, CiState, DetailRow, DetailSection, LastMerge, QueueStatus, UnmetGate,
};
use wq_core::{ItemView, Phase, StatusSummary};

use crate::ci_retry::{CiRetryDetail, JobState};
use crate::dims::NEEDS_RECONCILE;
use crate::merge::{gate_description, gate_names};
use crate::store::MrDetails;

/// Longest file content shown on an item's page, in bytes.
const MAX_SHOWN_CONTENT: usize = 64 * 1024;

/// What the last reconcile recorded: its unmet gates (with those its
/// observation could not read) and CI word.
struct Seen {
    unmet: Vec<String>,
    unread: Vec<String>,
    ci: CiState,
}

impl Seen {
    fn of(view: &ItemView) -> Option<Self> {
        let detail = &view.dimension(NEEDS_RECONCILE, "")?.detail;
        let unmet = detail
            .get("unmet_gates")?
            .as_array()?
            .iter()
            .filter_map(|gate| gate.as_str().map(str::to_owned))
            .collect();
        let unread = detail
            .get("unread_gates")
            .and_then(|gates| gates.as_array())
            .map(|gates| {
                gates
                    .iter()
                    .filter_map(|gate| gate.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let ci = detail
            .get("ci")
            .and_then(|word| word.as_str())
            .map_or(CiState::Unknown, CiState::from_word);
        Some(Self { unmet, unread, ci })
    }
}

/// The summary of the item `view` shows, with its `details`.
pub(crate) fn summary(view: &ItemView, details: &MrDetails) -> StatusSummary {
    let phase = view.item.phase;
    let seen = Seen::of(view);
    let spec = &details.spec;
    let unmet_gates = seen
        .as_ref()
        .map(|seen| {
            seen.unmet
                .iter()
                .map(|gate| UnmetGate {
                    name: gate.clone(),
                    reason: if seen.unread.contains(gate) {
                        format!("not checked yet: {}", gate_description(gate))
                    } else {
                        reason(gate)
                    },
                })
                .collect()
        })
        .unwrap_or_default();
    StatusSummary {
        title: Some(spec.title.clone()),
        forge: Some(spec.forge.clone()),
        project: Some(spec.project.to_string()),
        branch: Some(spec.source_branch.to_string()),
        change: details.mr_number.map(|number| ChangeRef {
            number,
            url: details.mr_url.clone(),
            head_sha: details.head_sha.clone(),
        }),
        ci: seen.as_ref().map_or(CiState::Unknown, |seen| seen.ci),
        // A merged or closed change request is in no queue.
        queue: details
            .queue
            .as_ref()
            .filter(|_| phase == Phase::Active)
            .map(|entry| QueueStatus {
                state: entry.state.clone(),
                position: entry.position,
                eta_seconds: entry.eta_seconds,
            }),
        gates_checked: seen.is_some(),
        unmet_gates,
        more_unmet_gates: 0,
        last_merge: details.journal.result.map(|result| LastMerge {
            result: result.as_str().to_owned(),
            error_kind: details.journal.error_kind.clone(),
            error: details.journal.error.clone(),
        }),
        automation: Automation {
            ci_retry: spec.automation.ci_retry,
            auto_merge: spec.automation.auto_merge,
        },
        needs_attention: false,
    }
    .finish(phase)
}

fn reason(gate: &str) -> String {
    match gate_description(gate) {
        "" => format!("{gate} does not hold"),
        what => format!("not yet: {what}"),
    }
}

fn time_text(at: Option<time::OffsetDateTime>) -> String {
    at.and_then(|at| at.format(&Rfc3339).ok())
        .unwrap_or_else(|| "—".to_owned())
}

/// The item's page: the change request, every gate met or not and why,
/// the queue entry, the merge-attempt journal, the CI retry decisions and
/// the submitted files. `person_review`: the review gate is
/// `review_by_person`.
pub(crate) fn sections(
    view: &ItemView,
    details: &MrDetails,
    person_review: bool,
) -> Vec<DetailSection> {
    let spec = &details.spec;
    let seen = Seen::of(view);
    let mut change = vec![
        DetailRow::new("Forge", spec.forge.clone()),
        DetailRow::new("Project", spec.project.to_string()),
        DetailRow::new(
            "Branches",
            format!("{} → {}", spec.source_branch, spec.target_branch),
        ),
        DetailRow::new("Generation", details.generation.to_string()),
    ];
    if let Some(number) = details.mr_number {
        change.push(DetailRow::new(
            "Change request",
            format!(
                "!{number} {}",
                details.mr_url.as_deref().unwrap_or_default()
            ),
        ));
    }
    change.push(DetailRow::new(
        "Head",
        details
            .head_sha
            .clone()
            .unwrap_or_else(|| "not pushed yet".into()),
    ));
    change.push(DetailRow::new(
        "Automation",
        format!(
            "auto-merge {} · CI auto-retry {}",
            on_off(spec.automation.auto_merge),
            on_off(spec.automation.ci_retry)
        ),
    ));

    let gates = match &seen {
        None => Vec::new(),
        Some(seen) => gate_names(person_review)
            .into_iter()
            .map(|gate| {
                let unmet = seen.unmet.iter().any(|g| g == gate);
                let what = gate_description(gate);
                DetailRow::new(
                    gate,
                    if unmet {
                        format!("not yet: {what}")
                    } else {
                        format!("holds: {what}")
                    },
                )
                .mark(!unmet)
            })
            .collect(),
    };

    let queue = match (view.item.phase, &details.queue) {
        (Phase::Active, Some(entry)) => {
            let status = QueueStatus {
                state: entry.state.clone(),
                position: entry.position,
                eta_seconds: entry.eta_seconds,
            };
            vec![
                DetailRow::new("State", wq_core::status::queue_text(&status)),
                DetailRow::new("Forge's word", entry.state.clone()),
            ]
        }
        _ => Vec::new(),
    };

    let journal = &details.journal;
    let merge = match journal.result {
        None => Vec::new(),
        Some(result) => {
            let mut rows = vec![
                DetailRow::new("Last attempt", time_text(journal.attempt_at)),
                DetailRow::new("Result", result.as_str()),
            ];
            if let Some(kind) = &journal.error_kind {
                rows.push(DetailRow::new("Error kind", kind.clone()));
            }
            if let Some(error) = &journal.error {
                rows.push(DetailRow::new("Error", error.clone()));
            }
            if journal.transient_failures > 0 {
                rows.push(DetailRow::new(
                    "Transient answers",
                    journal.transient_failures.to_string(),
                ));
            }
            if journal.retry_authorized {
                rows.push(DetailRow::new("Retry", "one more evaluation authorized"));
            }
            rows
        }
    };

    let ci = CiRetryDetail::of(view)
        .jobs
        .iter()
        .map(|job| {
            let verdict = match job.state {
                JobState::Retried => match job.retried_as {
                    Some(new) => format!("retried as job {new}"),
                    None => "retried".to_owned(),
                },
                JobState::Scheduled => format!("retry after {}", time_text(job.not_before)),
                _ => job
                    .reason
                    .clone()
                    .unwrap_or_else(|| format!("{:?}", job.state).to_lowercase()),
            };
            DetailRow::new(
                format!("{} (job {})", job.name, job.id),
                format!(
                    "matcher {} · {verdict}",
                    job.matcher.as_deref().unwrap_or("none")
                ),
            )
        })
        .collect();

    let files = spec
        .file_actions
        .iter()
        .map(|action| {
            let size = action
                .content
                .as_ref()
                .map_or_else(|| "no content".to_owned(), |c| format!("{} bytes", c.len()));
            let row = DetailRow::new(
                action.path.clone(),
                format!("{} · {size}", action.op.as_str()),
            );
            match &action.content {
                Some(content) => {
                    let shown = &content[..content.len().min(MAX_SHOWN_CONTENT)];
                    row.content(String::from_utf8_lossy(shown).into_owned())
                }
                None => row,
            }
        })
        .collect();

    vec![
        section("Change request", "", change),
        section("Merge gates", "Not checked yet.", gates),
        section("Merge queue", "Not in a merge queue.", queue),
        section("Merge attempts", "No merge attempt yet.", merge),
        section("CI retry decisions", "No failed CI job seen.", ci),
        section("Submitted files", "No files.", files),
    ]
}

fn section(title: &str, empty: &str, rows: Vec<DetailRow>) -> DetailSection {
    DetailSection {
        title: title.to_owned(),
        empty: empty.to_owned(),
        rows,
    }
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}
