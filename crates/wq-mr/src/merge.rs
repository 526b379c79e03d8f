//! Readiness gates, the readiness signature, and queue-observation rules of
//! the merge-attempt journal (GitHub merge queue design: "Automatic merge",
//! "Queue observation", "Failure and recovery"). Pure functions; the
//! `reconcile_mr` executor applies them.
//!
//! The journal (`last_merge_result` with its signature and the one-shot
//! `merge_retry_authorized`) guards the one forge call that cannot be
//! repeated safely: the merge. The `in_flight` reservation is durable
//! before the call, and a signature is tried once unless a person retries:
//!
//! ```mermaid
//! stateDiagram-v2
//!     [*] --> in_flight: reserve_merge (every gate holds)
//!     in_flight --> accepted: merged or queued (also seen by the re-read after a transient answer)
//!     in_flight --> failed: the forge refused, or the deadline passed unconfirmed
//!     in_flight --> failed: transient answer, re-read open at the same state (merge_retry_at set while the budget lasts)
//!     failed --> in_flight: reserve_merge (a new signature, retry-merge authorized, or merge_retry_at due)
//!     accepted --> in_flight: reserve_merge (a new signature)
//!     failed --> accepted: seen merged or queued
//!     in_flight --> failed: retry-merge after the deadline
//! ```
//!
//! `retry-merge` authorizes one new evaluation after `failed` (or an
//! expired `in_flight`, which it fails first); `reserve_merge` consumes
//! the authorization. After a transient answer (5xx, 429, timeout) a
//! second call for the same reservation state is made only when a re-read
//! proved the first neither merged nor queued the change request; it is
//! due at `merge_retry_at`, and the transient count carries over only to
//! it. A queue entry or a merge observed by a reconcile
//! confirms the attempt as `accepted`, whoever made it.

use sha2::{Digest, Sha256};
use wq_core::ItemId;
use wq_forge::{ChangeRequest, ChangeState, CiStatus, Mergeable, QueueEntry, QueueObservation};

use crate::store::MrDetails;

/// The forge's own review rules hold (GitHub `reviewDecision`, GitLab
/// approvals left and `not_approved`).
pub const APPROVED: &str = "approved";
/// Someone other than the token's forge user approves (`mr.require_review`).
pub const REVIEW_BY_PERSON: &str = "review_by_person";

/// Which review the merge waits for, as configured for the item's forge and
/// project (`mr.require_review`, `mr.review_overrides`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewRule<'a> {
    /// The forge's own rules alone (gate [`APPROVED`]).
    Forge,
    /// The forge's rules and an approval by anyone but `bot`, the token's
    /// forge user (gate [`REVIEW_BY_PERSON`] too).
    Person { bot: &'a str },
}

impl ReviewRule<'_> {
    /// The name of the gate that stands for the review in the note and the
    /// item detail.
    pub fn gate(self) -> &'static str {
        match self {
            Self::Forge => APPROVED,
            Self::Person { .. } => REVIEW_BY_PERSON,
        }
    }
}

/// Every gate (with `review_by_person` when a person's review is
/// required), in the order the status note shows them.
pub fn gate_names(person_review: bool) -> Vec<&'static str> {
    let mut gates = vec!["open", "not_draft", "head_known", "ci_passed", APPROVED];
    if person_review {
        gates.push(REVIEW_BY_PERSON);
    }
    gates.extend(["mergeable", "threads_resolved"]);
    gates
}

/// What a gate asks for, in words (the status note's and the dashboard's).
pub fn gate_description(gate: &str) -> &'static str {
    match gate {
        "open" => "the merge request is open",
        "not_draft" => "not a draft",
        "head_known" => "the head commit is known",
        "ci_passed" => "CI passed",
        APPROVED => "the forge's review rules hold",
        REVIEW_BY_PERSON => "approved by a person other than workqueue",
        "mergeable" => "the forge can merge it",
        "threads_resolved" => "every thread is resolved",
        _ => "",
    }
}

/// The review gates a change request's read could not judge: both when
/// its review was not read (the answer to its creation), else none.
pub fn unread_gates(change: &ChangeRequest, rule: ReviewRule<'_>) -> Vec<&'static str> {
    if change.review_read {
        return Vec::new();
    }
    match rule {
        ReviewRule::Forge => vec![APPROVED],
        ReviewRule::Person { .. } => vec![APPROVED, REVIEW_BY_PERSON],
    }
}

/// The gates a change request does not pass yet, by name, in
/// [`gate_names`] order; empty when it may be merged. A review gate its
/// read did not judge ([`unread_gates`]) does not pass.
pub fn unmet_gates(change: &ChangeRequest, rule: ReviewRule<'_>) -> Vec<&'static str> {
    let mut unmet = Vec::new();
    if change.state != ChangeState::Open {
        unmet.push("open");
    }
    if change.draft {
        unmet.push("not_draft");
    }
    if change.head_sha.as_deref().is_none_or(str::is_empty) {
        unmet.push("head_known");
    }
    if change.ci != CiStatus::Success || change.pending_checks > 0 {
        unmet.push("ci_passed");
    }
    if !change.review_read || !change.review.allows_merge() {
        unmet.push(APPROVED);
    }
    if let ReviewRule::Person { bot } = rule
        && (!change.review_read || !change.approved_by.iter().any(|login| login != bot))
    {
        unmet.push(REVIEW_BY_PERSON);
    }
    if change.mergeable != Mergeable::Yes {
        unmet.push("mergeable");
    }
    if change.unresolved_threads > 0 {
        unmet.push("threads_resolved");
    }
    unmet
}

/// SHA-256 over every gate input, the item and the change request's
/// lifecycle state: an attempt reserved for one state is never reused for
/// another (a reopened change request, a new head, a new CI result).
pub fn signature(
    id: ItemId,
    project: &str,
    change: &ChangeRequest,
    rule: ReviewRule<'_>,
) -> String {
    let parts = [
        id.to_string(),
        project.to_owned(),
        change.number.to_string(),
        change.state.as_str().to_owned(),
        change.draft.to_string(),
        change.head_sha.clone().unwrap_or_default(),
        change.ci.as_str().to_owned(),
        format!("{:?}", change.mergeable),
        change.merge_status.clone(),
        format!("{:?}", change.review),
        change.approvals.to_string(),
        change
            .required_approvals
            .map_or_else(|| "-".to_owned(), |n| n.to_string()),
        change.pending_checks.to_string(),
        change.unresolved_threads.to_string(),
        change.approved_by.join(","),
        match rule {
            ReviewRule::Forge => String::new(),
            ReviewRule::Person { bot } => format!("person-not:{bot}"),
        },
    ];
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.len().to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// The queue entry to store after a read: an authoritative entry replaces,
/// an authoritative absence clears, a read that could not see the queue
/// keeps what is stored; merged or closed always clears.
pub fn resolve_queue(stored: Option<&QueueEntry>, change: &ChangeRequest) -> Option<QueueEntry> {
    if matches!(change.state, ChangeState::Merged | ChangeState::Closed) {
        return None;
    }
    match &change.queue {
        QueueObservation::Unobserved => stored.cloned(),
        QueueObservation::Absent => None,
        QueueObservation::Entry(entry) => Some(entry.clone()),
    }
}

/// The item's `detail` in the API: everything but file contents.
/// `review_gate` names the review gate configured for its project.
pub fn detail_json(d: &MrDetails, review_gate: &str) -> serde_json::Value {
    let files: Vec<serde_json::Value> = d
        .spec
        .file_actions
        .iter()
        .map(|a| {
            serde_json::json!({
                "action": a.op.as_str(),
                "file_path": a.path,
                "previous_path": a.previous_path,
                "bytes": a.content.as_ref().map(Vec::len),
            })
        })
        .collect();
    serde_json::json!({
        "forge": d.spec.forge,
        "project": d.spec.project,
        "source_branch": d.spec.source_branch,
        "target_branch": d.spec.target_branch,
        "title": d.spec.title,
        "labels": d.spec.labels,
        "generation": d.generation,
        "content_hash": d.content_hash,
        "automation": {
            "auto_merge": d.spec.automation.auto_merge,
            "ci_retry": d.spec.automation.ci_retry,
        },
        "review_gate": review_gate,
        "files": files,
        "mr": {
            "number": d.mr_number,
            "url": d.mr_url,
            "head_sha": d.head_sha,
            "head_pipeline_id": d.head_pipeline_id,
        },
        "merge_queue": d.queue.as_ref().map(|q| serde_json::json!({
            "state": q.state,
            "position": q.position,
            "eta_seconds": q.eta_seconds,
        })),
        "merge": {
            "last_result": d.journal.result.map(|r| r.as_str()),
            "last_attempt_at": d.journal.attempt_at.and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok()),
            "last_signature": d.journal.signature,
            "queue_head_sha": d.journal.queue_head_sha,
            "error_kind": d.journal.error_kind,
            "error": d.journal.error,
            "retry_authorized": d.journal.retry_authorized,
            "transient_failures": d.journal.transient_failures,
            "retry_at": d.journal.retry_at.and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok()),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wq_forge::ReviewDecision;

    pub(crate) fn ready_change() -> ChangeRequest {
        ChangeRequest {
            number: 7,
            url: "https://forge/p/-/merge_requests/7".into(),
            state: ChangeState::Open,
            draft: false,
            title: "t".into(),
            description: String::new(),
            labels: vec![],
            source_branch: "wq/x".into(),
            target_branch: "main".into(),
            head_sha: Some("abc".into()),
            pipeline_id: Some(3),
            ci: CiStatus::Success,
            pending_checks: 0,
            review: ReviewDecision::Approved,
            approvals: 1,
            required_approvals: Some(1),
            approved_by: vec!["reviewer".into()],
            mergeable: Mergeable::Yes,
            merge_status: "mergeable".into(),
            unresolved_threads: 0,
            queue: QueueObservation::Unobserved,
            author: Some("workqueue-bot".into()),
            merge_commit_sha: None,
            review_read: true,
        }
    }

    /// One change to a ready change request.
    type Edit = Box<dyn Fn(&mut ChangeRequest)>;

    const PERSON: ReviewRule<'static> = ReviewRule::Person {
        bot: "workqueue-bot",
    };

    #[test]
    fn every_gate_is_checked() {
        assert!(unmet_gates(&ready_change(), ReviewRule::Forge).is_empty());
        assert!(unmet_gates(&ready_change(), PERSON).is_empty());
        let cases: Vec<(Edit, &str)> = vec![
            (Box::new(|c| c.state = ChangeState::Closed), "open"),
            (Box::new(|c| c.draft = true), "not_draft"),
            (Box::new(|c| c.head_sha = None), "head_known"),
            (Box::new(|c| c.ci = CiStatus::Running), "ci_passed"),
            (Box::new(|c| c.ci = CiStatus::None), "ci_passed"),
            (Box::new(|c| c.pending_checks = 1), "ci_passed"),
            (
                Box::new(|c| c.review = ReviewDecision::ReviewRequired),
                "approved",
            ),
            (Box::new(|c| c.mergeable = Mergeable::Unknown), "mergeable"),
            (Box::new(|c| c.mergeable = Mergeable::No), "mergeable"),
            (Box::new(|c| c.unresolved_threads = 2), "threads_resolved"),
            (
                Box::new(|c| c.review = ReviewDecision::ChangesRequested),
                "approved",
            ),
        ];
        for (change, gate) in cases {
            let mut c = ready_change();
            change(&mut c);
            assert_eq!(unmet_gates(&c, ReviewRule::Forge), vec![gate]);
            assert_eq!(unmet_gates(&c, PERSON), vec![gate]);
        }
    }

    /// A change request whose review was not read (the answer to its
    /// creation) passes no review gate, whatever its placeholders say,
    /// and says which gates were not read.
    #[test]
    fn an_unread_review_passes_no_review_gate() {
        let mut c = ready_change();
        assert!(unread_gates(&c, PERSON).is_empty());
        c.review_read = false;
        assert_eq!(unmet_gates(&c, ReviewRule::Forge), vec![APPROVED]);
        assert_eq!(unread_gates(&c, ReviewRule::Forge), vec![APPROVED]);
        assert_eq!(unmet_gates(&c, PERSON), vec![APPROVED, REVIEW_BY_PERSON]);
        assert_eq!(unread_gates(&c, PERSON), vec![APPROVED, REVIEW_BY_PERSON]);
        c.ci = CiStatus::Running;
        assert_eq!(
            unmet_gates(&c, ReviewRule::Forge),
            vec!["ci_passed", APPROVED]
        );
    }

    #[test]
    fn the_review_gate_is_the_forges_rules_or_a_persons_approval() {
        // No review rule on the forge and nobody approved: the forge's
        // rules hold, a person's review is missing.
        let mut c = ready_change();
        c.review = ReviewDecision::NotRequired;
        c.approved_by.clear();
        assert!(unmet_gates(&c, ReviewRule::Forge).is_empty());
        assert_eq!(unmet_gates(&c, PERSON), vec![REVIEW_BY_PERSON]);
        // The bot's own approval is no person's.
        c.approved_by = vec!["workqueue-bot".into()];
        assert_eq!(unmet_gates(&c, PERSON), vec![REVIEW_BY_PERSON]);
        c.approved_by.push("alice".into());
        assert!(unmet_gates(&c, PERSON).is_empty());
        // A person approved but the forge wants two approvals.
        c.review = ReviewDecision::ReviewRequired;
        assert_eq!(unmet_gates(&c, PERSON), vec![APPROVED]);
        // Gates are listed in the order the note shows them.
        let mut all = ready_change();
        all.state = ChangeState::Closed;
        all.draft = true;
        all.head_sha = None;
        all.ci = CiStatus::Failed;
        all.review = ReviewDecision::ReviewRequired;
        all.approved_by.clear();
        all.unresolved_threads = 1;
        all.mergeable = Mergeable::No;
        assert_eq!(unmet_gates(&all, PERSON), gate_names(true));
        assert_eq!(
            gate_names(false),
            gate_names(true)
                .into_iter()
                .filter(|g| *g != REVIEW_BY_PERSON)
                .collect::<Vec<_>>()
        );
        assert_eq!(PERSON.gate(), REVIEW_BY_PERSON);
        assert_eq!(ReviewRule::Forge.gate(), APPROVED);
    }

    #[test]
    fn signature_covers_every_gate_input_and_the_lifecycle_state() {
        let id = ItemId::new_v7();
        let sign = |id, project, c: &ChangeRequest| signature(id, project, c, PERSON);
        let base = sign(id, "p", &ready_change());
        assert_eq!(base, sign(id, "p", &ready_change()), "deterministic");
        let changes: Vec<Edit> = vec![
            Box::new(|c| c.state = ChangeState::Closed),
            Box::new(|c| c.head_sha = Some("def".into())),
            Box::new(|c| c.ci = CiStatus::Failed),
            Box::new(|c| c.mergeable = Mergeable::Unknown),
            Box::new(|c| c.merge_status = "need_rebase".into()),
            Box::new(|c| c.review = ReviewDecision::ChangesRequested),
            Box::new(|c| c.approvals = 2),
            Box::new(|c| c.required_approvals = None),
            Box::new(|c| c.pending_checks = 1),
            Box::new(|c| c.unresolved_threads = 1),
            Box::new(|c| c.number = 8),
            Box::new(|c| c.draft = true),
            Box::new(|c| c.approved_by.push("alice".into())),
            Box::new(|c| c.review = ReviewDecision::NotRequired),
        ];
        for change in changes {
            let mut c = ready_change();
            change(&mut c);
            assert_ne!(sign(id, "p", &c), base);
        }
        assert_ne!(sign(ItemId::new_v7(), "p", &ready_change()), base);
        assert_ne!(sign(id, "q", &ready_change()), base);
        assert_ne!(
            signature(id, "p", &ready_change(), ReviewRule::Forge),
            base,
            "the review rule is an input"
        );
    }

    #[test]
    fn queue_observation_rules() {
        let stored = QueueEntry {
            state: "queued".into(),
            position: Some(2),
            eta_seconds: Some(60),
        };
        let mut c = ready_change();
        c.queue = QueueObservation::Unobserved;
        assert_eq!(
            resolve_queue(Some(&stored), &c),
            Some(stored.clone()),
            "preserved"
        );
        c.queue = QueueObservation::Absent;
        assert_eq!(
            resolve_queue(Some(&stored), &c),
            None,
            "authoritative null clears"
        );
        let fresh = QueueEntry {
            state: "awaiting_checks".into(),
            position: Some(1),
            eta_seconds: None,
        };
        c.queue = QueueObservation::Entry(fresh.clone());
        assert_eq!(
            resolve_queue(Some(&stored), &c),
            Some(fresh.clone()),
            "replaced"
        );
        for state in [ChangeState::Merged, ChangeState::Closed] {
            c.state = state;
            c.queue = QueueObservation::Entry(fresh.clone());
            assert_eq!(resolve_queue(Some(&stored), &c), None, "{state:?} clears");
        }
    }
}
