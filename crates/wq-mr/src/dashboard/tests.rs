use time::macros::datetime;
use wq_core::{ItemId, WorkItem};

use super::*;
use crate::spec::parse_submission;
use crate::store::{MergeJournal, MrDetails};
use crate::{CLOSED_ON_FORGE, MrConfig};

const NOW: OffsetDateTime = datetime!(2026-11-30 12:00 UTC);
const URL: &str = "https://wq.example/";

fn id() -> ItemId {
    "0193a2b4-0000-7000-8000-000000000001".parse().expect("id")
}

fn details(auto_merge: bool) -> MrDetails {
    let rules = MrConfig::default().compile().expect("rules");
    let spec = parse_submission(
        &serde_json::json!({
            "item_type": "mr", "forge": "gitlab", "project": "team/app",
            "source_branch": "wq/x", "target_branch": "main", "title": "t",
            "file_actions": [{"action": "create", "file_path": "a.txt", "content": "a"}],
            "automation": {"auto_merge": auto_merge},
        }),
        &rules,
    )
    .expect("spec");
    MrDetails {
        id: id(),
        spec,
        generation: 1,
        content_hash: "c".into(),
        metadata_hash: "m".into(),
        mr_number: Some(7),
        mr_url: Some("https://forge/team/app/-/merge_requests/7".into()),
        head_sha: Some("abc".into()),
        head_pipeline_id: Some(3),
        pushed_content_hash: Some("c".into()),
        queue: None,
        journal: MergeJournal::default(),
        mr_created: true,
        push_intent_at: None,
        applied_labels: None,
        pushed_target_branch: None,
        note_intent: None,
        created_at: NOW,
        updated_at: NOW,
    }
}

fn view(phase: Phase, error: Option<&str>, unmet: Option<&[&str]>) -> ItemView {
    let mut dimensions = Vec::new();
    if let Some(unmet) = unmet {
        dimensions.push(Dimension {
            dimension: NEEDS_RECONCILE.into(),
            variant: String::new(),
            status: DimensionStatus::True,
            detail: serde_json::json!({"unmet_gates": unmet, "merge_status": "not_approved"}),
            pending_until: None,
            updated_at: NOW,
        });
    }
    ItemView {
        item: WorkItem {
            id: id(),
            item_type: "mr".into(),
            phase,
            actionable: true,
            attempts: 0,
            error: error.map(str::to_owned),
            leased_until: None,
            idempotency_key: None,
            caller_identity: None,
            created_at: NOW,
            updated_at: NOW,
            last_event_at: None,
        },
        dimensions,
        now: NOW,
        lease: None,
    }
}

fn body(view: &ItemView, details: &MrDetails, person_review: bool) -> String {
    StatusNote::of(URL, view, details, person_review).body
}

#[test]
fn before_the_first_reconcile_nothing_is_claimed() {
    insta::assert_snapshot!(body(&view(Phase::Active, None, None), &details(true), true));
}

#[test]
fn waiting_for_ci_lists_every_gate() {
    let seen: &[&str] = &["ci_passed", REVIEW_BY_PERSON, "mergeable"];
    insta::assert_snapshot!(body(
        &view(Phase::Active, None, Some(seen)),
        &details(true),
        true
    ));
}

/// The first observation, the answer to the change request's creation,
/// has no review: its gates say so instead of claiming them either way.
#[test]
fn gates_the_creation_could_not_read_are_not_claimed() {
    let mut v = view(Phase::Active, None, None);
    v.dimensions.push(Dimension {
        dimension: NEEDS_RECONCILE.into(),
        variant: String::new(),
        status: DimensionStatus::True,
        detail: serde_json::json!({
            "unmet_gates": ["ci_passed", APPROVED, REVIEW_BY_PERSON, "mergeable"],
            "unread_gates": [APPROVED, REVIEW_BY_PERSON],
            "merge_status": "checking",
        }),
        pending_until: None,
        updated_at: NOW,
    });
    let waiting = body(&v, &details(true), true);
    insta::assert_snapshot!("unread_review", waiting);
    // Only the unread review and the forge's mergeability left: nothing is
    // claimed ready or waited for yet.
    v.dimensions[0].detail = serde_json::json!({
        "unmet_gates": [APPROVED, "mergeable"],
        "unread_gates": [APPROVED],
        "merge_status": "checking",
    });
    let checking = body(&v, &details(true), false);
    assert!(
        checking.contains("**workqueue:** Checking the merge request\n"),
        "{checking}"
    );
    assert!(
        checking.contains("- ❔ `approved`: the forge's review rules hold (not checked yet)"),
        "{checking}"
    );
}

#[test]
fn waiting_for_review_names_the_configured_gate() {
    let person: &[&str] = &[REVIEW_BY_PERSON];
    insta::assert_snapshot!(
        "person",
        body(
            &view(Phase::Active, None, Some(person)),
            &details(true),
            true
        )
    );
    let forge: &[&str] = &[APPROVED, "mergeable"];
    insta::assert_snapshot!(
        "forge",
        body(
            &view(Phase::Active, None, Some(forge)),
            &details(true),
            false
        )
    );
}

#[test]
fn queued_with_position_and_eta() {
    let mut d = details(true);
    d.queue = Some(wq_forge::QueueEntry {
        state: "queued".into(),
        position: Some(3),
        eta_seconds: Some(95),
    });
    d.journal.result = Some(MergeResult::Accepted);
    d.journal.attempt_at = Some(NOW);
    insta::assert_snapshot!(body(&view(Phase::Active, None, Some(&[])), &d, true));
}

#[test]
fn a_failed_merge_says_why_and_how_to_retry() {
    let mut d = details(true);
    d.journal.result = Some(MergeResult::Failed);
    d.journal.attempt_at = Some(NOW);
    d.journal.error = Some("the head moved".into());
    insta::assert_snapshot!(body(&view(Phase::Active, None, Some(&[])), &d, true));
}

/// A transient answer with an automatic call still due says when, not to
/// ask for `retry-merge`.
#[test]
fn a_failed_merge_with_an_automatic_retry_says_when() {
    let mut d = details(true);
    d.journal.result = Some(MergeResult::Failed);
    d.journal.attempt_at = Some(NOW);
    d.journal.error = Some("GitLab answered 502".into());
    d.journal.transient_failures = 1;
    d.journal.retry_at = Some(NOW + time::Duration::seconds(30));
    insta::assert_snapshot!(body(&view(Phase::Active, None, Some(&[])), &d, true));
}

#[test]
fn automatic_merge_off_is_said() {
    insta::assert_snapshot!(body(
        &view(Phase::Active, None, Some(&[])),
        &details(false),
        true
    ));
}

#[test]
fn ended_items_say_merged_or_closed_without_gates() {
    let mut d = details(true);
    d.journal.result = Some(MergeResult::Accepted);
    d.journal.attempt_at = Some(NOW);
    insta::assert_snapshot!(
        "merged",
        body(&view(Phase::Completed, None, Some(&[])), &d, true)
    );
    insta::assert_snapshot!(
        "closed",
        body(
            &view(Phase::Cancelled, Some(CLOSED_ON_FORGE), Some(&[])),
            &details(true),
            true
        )
    );
    insta::assert_snapshot!(
        "empty",
        body(
            &view(
                Phase::Cancelled,
                Some(
                    "empty diff: main already contains these changes; the merge request was closed"
                ),
                None
            ),
            &details(true),
            true
        )
    );
}

#[test]
fn ci_retry_decisions_are_part_of_the_note() {
    let mut v = view(Phase::Active, None, Some(&["ci_passed"]));
    v.dimensions.push(Dimension {
        dimension: crate::dims::NEEDS_CI_RETRY.into(),
        variant: String::new(),
        status: DimensionStatus::False,
        detail: serde_json::json!({"jobs": [{
            "id": 41, "name": "unit", "pipeline_id": 3, "failure_reason": "runner_system_failure",
            "state": "retried", "matcher": "runner", "retried_as": 42, "retry_count": 0,
        }]}),
        pending_until: None,
        updated_at: NOW,
    });
    let text = body(&v, &details(true), true);
    assert!(text.contains("`unit` (job 41)"), "{text}");
    insta::assert_snapshot!(text);
}

/// A view whose `needs_dashboard` row says the note with `hash` was written
/// at `written_at`.
fn written_view(hash: &str, written_at: OffsetDateTime, now: OffsetDateTime) -> ItemView {
    let mut v = view(Phase::Active, None, Some(&["ci_passed"]));
    v.now = now;
    v.dimensions.push(Dimension {
        dimension: NEEDS_DASHBOARD.into(),
        variant: String::new(),
        status: DimensionStatus::False,
        detail: serde_json::json!({
            "note_id": 5, "hash": hash,
            "written_at": written_at.format(&Rfc3339).expect("time"),
        }),
        pending_until: None,
        updated_at: written_at,
    });
    v
}

#[test]
fn an_edit_is_asked_for_when_the_text_changes_no_sooner_than_the_interval() {
    let interval = time::Duration::seconds(30);
    let d = details(true);
    let current = StatusNote::of(
        URL,
        &view(Phase::Active, None, Some(&["ci_passed"])),
        &d,
        true,
    );
    // The same text: nothing to do.
    let same = written_view(&current.hash(), NOW, NOW);
    assert!(refresh(&same, &current, interval).is_none());
    // Another text, written 10 s ago: due 20 s from now.
    let since = written_view("old", NOW - time::Duration::seconds(10), NOW);
    let update = refresh(&since, &current, interval).expect("an edit");
    assert_eq!(update.status, DimensionStatus::True);
    assert_eq!(
        update.pending_until,
        Some(NOW + time::Duration::seconds(20))
    );
    assert!(update.detail.is_none(), "the note id and hash are kept");
    // Written long ago: due now.
    let long_ago = written_view("old", NOW - time::Duration::minutes(5), NOW);
    let update = refresh(&long_ago, &current, interval).expect("an edit");
    assert_eq!(update.pending_until, None);
    // Never written: post_dashboard_note is due anyway.
    assert!(refresh(&view(Phase::Active, None, None), &current, interval).is_none());
}

#[test]
fn the_projected_view_carries_the_outcome() {
    let v = view(Phase::Active, None, Some(&["ci_passed"]));
    let outcome = ExecOutcome::done()
        .with_phase(Phase::Cancelled, Some(CLOSED_ON_FORGE.into()))
        .with_dimension(
            DimensionUpdate::new(NEEDS_RECONCILE, false)
                .detail(serde_json::json!({"unmet_gates": [], "merge_status": "mergeable"})),
        )
        .with_dimension(DimensionUpdate::new(NEEDS_DASHBOARD, true));
    let next = projected(&v, &outcome);
    assert_eq!(next.item.phase, Phase::Cancelled);
    assert_eq!(next.item.error.as_deref(), Some(CLOSED_ON_FORGE));
    let reconcile = next.dimension(NEEDS_RECONCILE, "").expect("row");
    assert_eq!(reconcile.status, DimensionStatus::False);
    assert_eq!(reconcile.detail["unmet_gates"], serde_json::json!([]));
    assert!(next.dimension(NEEDS_DASHBOARD, "").is_some());
    assert!(body(&next, &details(true), true).contains("**workqueue:** Closed\n"));
}
