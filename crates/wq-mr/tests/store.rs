//! `MrStore` on both backends: upsert outcomes, generations, the
//! merge-attempt journal and the webhook lookups.

use std::sync::Arc;

use time::OffsetDateTime;
use time::macros::datetime;
use wq_core::{ItemId, LeaseEpoch, Phase};
use wq_forge::{FileAction, FileOp, QueueEntry};
use wq_mr::spec::{Automation, MrSpec};
use wq_mr::store::{
    Lookup, MergeResult, MrStore, Observation, RecordedChange, UpsertInput, UpsertOutcome,
};
use wq_store::{RecordFailure, Store};
use wq_testkit::{Backend, backend_tests};

const NOW: OffsetDateTime = datetime!(2026-11-30 12:00 UTC);

fn spec(content: &str) -> MrSpec {
    MrSpec {
        forge: "gitlab".into(),
        project: "team/app".parse().unwrap(),
        source_branch: "wq/x".parse().unwrap(),
        target_branch: "main".parse().unwrap(),
        title: "T".into(),
        description: "D".into(),
        commit_message: "T".into(),
        labels: vec!["a".into()],
        file_actions: vec![FileAction {
            op: FileOp::Create,
            path: "x.txt".into(),
            previous_path: None,
            content: Some(content.as_bytes().to_vec()),
            execute_filemode: None,
        }],
        automation: Automation {
            auto_merge: true,
            ci_retry: true,
        },
    }
}

async fn setup(backend: Backend) -> (Arc<dyn Store>, MrStore) {
    let store = backend.fresh_store().await;
    let mr = MrStore::new(store.as_ref());
    mr.migrate().await.unwrap();
    // Twice: migrations are idempotent beside the generic ones.
    mr.migrate().await.unwrap();
    (store, mr)
}

/// Claims `id` at `now` for `length`, as an engine's run does.
async fn claim_at(
    store: &dyn Store,
    id: ItemId,
    now: OffsetDateTime,
    length: time::Duration,
) -> wq_store::Lease {
    store
        .item_claim(wq_store::ClaimParams {
            id,
            now,
            lease_until: now + length,
            handled_types: vec!["mr".into()],
        })
        .await
        .unwrap()
        .expect("claimed")
        .1
}

/// Claims `id` as the engine's run that pushes or reserves its merges
/// would, with a lease of a day from `NOW`.
async fn run_claim(store: &dyn Store, id: ItemId) -> wq_store::Lease {
    claim_at(store, id, NOW, time::Duration::days(1)).await
}

/// The lease epoch of [`run_claim`]: what the run's fenced writes name.
async fn run_lease(store: &dyn Store, id: ItemId) -> LeaseEpoch {
    run_claim(store, id).await.epoch
}

async fn upsert(mr: &MrStore, spec: &MrSpec, at: OffsetDateTime) -> (ItemId, UpsertOutcome) {
    upsert_as(mr, spec, at, "tester", false).await
}

async fn upsert_as(
    mr: &MrStore,
    spec: &MrSpec,
    at: OffsetDateTime,
    caller: &str,
    admin: bool,
) -> (ItemId, UpsertOutcome) {
    let content = spec.content_hash();
    let metadata = spec.metadata_hash();
    let done = mr
        .upsert(UpsertInput {
            spec,
            content_hash: &content,
            metadata_hash: &metadata,
            caller_identity: caller,
            caller_is_admin: admin,
            now: at,
        })
        .await
        .unwrap();
    (done.id, done.outcome)
}

/// Moves an item to `phase` as an executor outcome would.
#[async_trait::async_trait]
trait SetPhase {
    async fn set_phase_for_test(
        &self,
        id: ItemId,
        phase: Phase,
    ) -> Result<(), wq_store::StoreError>;
}

#[async_trait::async_trait]
impl SetPhase for Arc<dyn Store> {
    async fn set_phase_for_test(
        &self,
        id: ItemId,
        phase: Phase,
    ) -> Result<(), wq_store::StoreError> {
        let (_, lease) = self
            .item_claim(wq_store::ClaimParams {
                id,
                now: NOW,
                lease_until: NOW + time::Duration::minutes(1),
                handled_types: vec!["mr".into()],
            })
            .await?
            .expect("claimed");
        let item = self
            .item_apply_outcome(wq_store::ApplyOutcome {
                lease,
                now: NOW,
                phase: Some(phase),
                error: None,
                dimensions: Vec::new(),
                action: None,
                records: Vec::new(),
            })
            .await?;
        assert_eq!(item.phase, phase);
        self.item_release(lease, None).await
    }
}

backend_tests!(
    upsert_outcomes_and_generations,
    the_merge_journal,
    a_reservation_is_taken_once_per_signature,
    a_merge_is_reserved_only_under_the_runs_lease,
    only_a_granted_retry_stores_its_event,
    webhook_lookups_see_active_items_only,
    another_caller_may_not_update_or_retry_a_live_item,
    every_accepted_submission_keeps_its_submitter,
    each_history_row_has_its_audit_record_in_the_item_s_chain,
    pushed_heads_belong_to_the_branch_line,
    created_change_requests_are_recorded,
    a_status_note_post_is_remembered_per_item,
    lookups_ignore_the_project_case,
    the_queue_watch_pages_through_every_item,
    a_transient_answer_allows_one_more_call_when_due,
    a_merged_change_hands_new_content_to_the_next_generation,
    content_pushed_after_the_merged_head_is_the_next_generation,
    lookups_read_the_branch_s_detail_rows_through_their_index,
);

/// The merge queue sync's work list is read in pages, each after the last
/// item of the one before: every watched item once, none left out.
async fn the_queue_watch_pages_through_every_item(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let mut expected = Vec::new();
    for (project, number) in [
        ("team/b", 3),
        ("team/a", 9),
        ("team/b", 1),
        ("team/a", 2),
        ("team/c", 5),
    ] {
        let mut spec = spec(&format!("{project}{number}"));
        spec.project = project.parse().unwrap();
        spec.source_branch = format!("wq/{number}").parse().unwrap();
        let (id, _) = upsert(&mr, &spec, NOW).await;
        mr.record_change(
            id,
            &RecordedChange {
                number,
                url: "https://forge/mr",
                head_sha: "aaa",
                pushed_content_hash: "hash",
                target_branch: "main",
                labels: &[],
                created: true,
                now: NOW,
            },
        )
        .await
        .unwrap();
        let lease = run_lease(store.as_ref(), id).await;
        assert!(
            mr.reserve_merge(id, lease, "sig", "head", NOW)
                .await
                .unwrap()
        );
        expected.push((project.to_owned(), number, id));
    }
    // An item that is not watched (no attempt, not queued).
    let (_, _) = upsert(&mr, &spec("idle"), NOW).await;
    expected.sort();

    let mut seen = Vec::new();
    let mut pages = Vec::new();
    loop {
        let page = mr.queue_watch("gitlab", seen.last(), 2).await.unwrap();
        pages.push(page.len());
        let done = page.len() < 2;
        seen.extend(page);
        if done {
            break;
        }
    }
    assert_eq!(pages, vec![2, 2, 1]);
    let seen: Vec<(String, u64, ItemId)> = seen
        .into_iter()
        .map(|w| (w.project, w.number, w.id))
        .collect();
    assert_eq!(seen, expected, "every watched item once, in order");
}

async fn another_caller_may_not_update_or_retry_a_live_item(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let (id, _) = upsert_as(&mr, &spec("1"), NOW, "alice", false).await;
    // An update by another identity: refused, nothing written.
    assert_eq!(
        upsert_as(&mr, &spec("2"), NOW, "mallory", false).await,
        (id, UpsertOutcome::NotOwner)
    );
    let stored = mr.get(id).await.unwrap().unwrap();
    assert_eq!(
        stored.content_hash,
        spec("1").content_hash(),
        "content kept"
    );
    assert!(store.event_next(id).await.unwrap().is_none(), "no event");
    // Resubmitting the same content changes nothing and is answered.
    assert_eq!(
        upsert_as(&mr, &spec("1"), NOW, "mallory", false).await,
        (id, UpsertOutcome::Unchanged)
    );
    // A retry of a failed item by another identity: refused too.
    store.set_phase_for_test(id, Phase::Failed).await.unwrap();
    assert_eq!(
        upsert_as(&mr, &spec("1"), NOW, "mallory", false).await,
        (id, UpsertOutcome::NotOwner)
    );
    assert_eq!(
        store.item_get(id).await.unwrap().unwrap().phase,
        Phase::Failed
    );
    // The owner may; an admin may; the item keeps its submitter.
    assert_eq!(
        upsert_as(&mr, &spec("1"), NOW, "alice", false).await,
        (id, UpsertOutcome::Retried)
    );
    assert_eq!(
        upsert_as(&mr, &spec("3"), NOW, "root", true).await,
        (id, UpsertOutcome::Updated { content: true })
    );
    let item = store.item_get(id).await.unwrap().unwrap();
    assert_eq!(item.caller_identity.as_deref(), Some("alice"));
}

async fn every_accepted_submission_keeps_its_submitter(backend: Backend) {
    let (_store, mr) = setup(backend).await;
    let later = NOW + time::Duration::seconds(1);
    let (id, _) = upsert_as(&mr, &spec("1"), NOW, "alice", false).await;
    upsert_as(&mr, &spec("1"), later, "bob", false).await;
    upsert_as(
        &mr,
        &spec("2"),
        later + time::Duration::seconds(1),
        "mallory",
        false,
    )
    .await;
    upsert_as(
        &mr,
        &spec("2"),
        later + time::Duration::seconds(2),
        "root",
        true,
    )
    .await;
    let history: Vec<(String, String)> = mr
        .submissions(id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.outcome, s.caller_identity))
        .collect();
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    };
    assert_eq!(
        history,
        pairs(&[
            ("created", "alice"),
            ("unchanged", "bob"),
            ("updated", "root"),
        ]),
        "a refused submission is not in the history"
    );
    let first = &mr.submissions(id).await.unwrap()[0];
    assert_eq!(first.generation, 1);
    assert_eq!(first.content_hash, spec("1").content_hash());
    assert_eq!(first.submitted_at, NOW);
}

/// Each accepted submission writes its history row and its audit record
/// in one transaction: one record per row, of the row's outcome, content,
/// generation, caller and time, chained in order, and the trail verifies;
/// a refused submission writes neither.
async fn each_history_row_has_its_audit_record_in_the_item_s_chain(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let at = |seconds: i64| NOW + time::Duration::seconds(seconds);
    let (id, _) = upsert_as(&mr, &spec("1"), at(0), "alice", false).await;
    upsert_as(&mr, &spec("1"), at(1), "alice", false).await;
    upsert_as(&mr, &spec("2"), at(2), "mallory", false).await;
    upsert_as(&mr, &spec("2"), at(3), "alice", false).await;
    upsert_as(&mr, &spec("2"), at(4), "alice", false).await;
    let history = mr.submissions(id).await.unwrap();
    let records = store
        .audit_list(wq_store::audit::AuditQuery {
            item_id: Some(id),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    let submitted: Vec<_> = records
        .iter()
        .filter(|record| record.kind.starts_with("submission."))
        .collect();
    assert_eq!(
        history
            .iter()
            .map(|row| row.outcome.as_str())
            .collect::<Vec<_>>(),
        ["created", "unchanged", "updated", "unchanged"]
    );
    assert_eq!(submitted.len(), history.len(), "{submitted:#?}");
    for (row, record) in history.iter().zip(&submitted) {
        assert_eq!(record.kind, format!("submission.{}", row.outcome));
        assert_eq!(record.actor, row.caller_identity);
        assert_eq!(record.at, row.submitted_at);
        let new_state = record.new_state.as_ref().unwrap();
        assert_eq!(
            new_state["content_hash"].as_str(),
            Some(row.content_hash.as_str())
        );
        assert_eq!(new_state["generation"].as_i64(), Some(row.generation));
    }
    assert!(
        records
            .windows(2)
            .all(|pair| pair[1].prev_hash == pair[0].hash),
        "one chain, in order"
    );
    assert_eq!(store.audit_verify().await.unwrap().1, None);
}

async fn pushed_heads_belong_to_the_branch_line(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let (first, _) = upsert(&mr, &spec("1"), NOW).await;
    let none = mr.branch_ownership(first, "aaa").await.unwrap();
    assert!(!none.pushed && !none.intent_pending);
    // An intent before the push: an unknown head counts until recorded.
    // Only the run that holds the item marks one: not before a claim, nor
    // under an expired or overtaken lease.
    assert!(
        !mr.mark_push_intent(first, LeaseEpoch(1), NOW)
            .await
            .unwrap()
    );
    let claim = run_claim(store.as_ref(), first).await;
    let lease = claim.epoch;
    let after_lease = NOW + time::Duration::days(1);
    assert!(
        !mr.mark_push_intent(first, lease, after_lease)
            .await
            .unwrap()
    );
    assert!(
        !mr.mark_push_intent(first, LeaseEpoch(lease.0 + 1), NOW)
            .await
            .unwrap()
    );
    assert!(
        !mr.branch_ownership(first, "aaa")
            .await
            .unwrap()
            .intent_pending,
        "no intent marked"
    );
    assert!(mr.mark_push_intent(first, lease, NOW).await.unwrap());
    assert!(
        mr.branch_ownership(first, "aaa")
            .await
            .unwrap()
            .intent_pending
    );
    mr.record_push(first, "aaa", ("hash", "main"), NOW)
        .await
        .unwrap();
    let after = mr.branch_ownership(first, "aaa").await.unwrap();
    assert!(after.pushed && !after.intent_pending, "{after:?}");
    assert!(!mr.branch_ownership(first, "bbb").await.unwrap().pushed);
    store.item_release(claim, None).await.unwrap();
    // The next generation of the branch line owns the earlier heads.
    store
        .set_phase_for_test(first, Phase::Completed)
        .await
        .unwrap();
    let (second, outcome) = upsert(&mr, &spec("2"), NOW).await;
    assert_eq!(outcome, UpsertOutcome::Created);
    assert!(mr.branch_ownership(second, "aaa").await.unwrap().pushed);
    // Another branch does not.
    let mut other = spec("1");
    other.source_branch = "wq/other".parse().unwrap();
    let (third, _) = upsert(&mr, &other, NOW).await;
    assert!(!mr.branch_ownership(third, "aaa").await.unwrap().pushed);
}

async fn created_change_requests_are_recorded(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let (first, _) = upsert(&mr, &spec("1"), NOW).await;
    let record = |number: u64, created: bool| RecordedChange {
        number,
        url: "https://forge/mr",
        head_sha: "aaa",
        pushed_content_hash: "hash",
        target_branch: "main",
        labels: &[],
        created,
        now: NOW,
    };
    mr.record_change(first, &record(7, false)).await.unwrap();
    assert!(!mr.get(first).await.unwrap().unwrap().mr_created);
    assert!(!mr.change_created(first, 7).await.unwrap());
    mr.record_change(first, &record(8, true)).await.unwrap();
    assert!(mr.get(first).await.unwrap().unwrap().mr_created);
    // Recording the same number again keeps the creation.
    mr.record_change(first, &record(8, false)).await.unwrap();
    assert!(mr.change_created(first, 8).await.unwrap());
    store
        .set_phase_for_test(first, Phase::Cancelled)
        .await
        .unwrap();
    let (second, _) = upsert(&mr, &spec("2"), NOW).await;
    assert!(
        mr.change_created(second, 8).await.unwrap(),
        "earlier generation"
    );
    assert!(!mr.change_created(second, 9).await.unwrap());
}

/// The change request a status note post started on is kept with the
/// item; the next generation of the branch line starts without one.
async fn a_status_note_post_is_remembered_per_item(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let (first, _) = upsert(&mr, &spec("1"), NOW).await;
    assert_eq!(mr.get(first).await.unwrap().unwrap().note_intent, None);
    // Only the run that holds the item marks one: not before a claim, nor
    // under an expired or overtaken lease.
    assert!(
        !mr.mark_note_intent(first, LeaseEpoch(1), 7, NOW)
            .await
            .unwrap()
    );
    let claim = run_claim(store.as_ref(), first).await;
    let after_lease = NOW + time::Duration::days(1);
    assert!(
        !mr.mark_note_intent(first, claim.epoch, 7, after_lease)
            .await
            .unwrap()
    );
    let other = LeaseEpoch(claim.epoch.0 + 1);
    assert!(!mr.mark_note_intent(first, other, 7, NOW).await.unwrap());
    assert_eq!(mr.get(first).await.unwrap().unwrap().note_intent, None);
    assert!(
        mr.mark_note_intent(first, claim.epoch, 7, NOW)
            .await
            .unwrap()
    );
    assert_eq!(mr.get(first).await.unwrap().unwrap().note_intent, Some(7));
    store.item_release(claim, None).await.unwrap();
    store
        .set_phase_for_test(first, Phase::Completed)
        .await
        .unwrap();
    let (second, _) = upsert(&mr, &spec("2"), NOW).await;
    assert_eq!(mr.get(second).await.unwrap().unwrap().note_intent, None);
}

async fn lookups_ignore_the_project_case(backend: Backend) {
    let (_store, mr) = setup(backend).await;
    let mut canonical = spec("1");
    canonical.project = "Team/App".parse().unwrap();
    let (id, _) = upsert(&mr, &canonical, NOW).await;
    // A stored spelling other than the submission's is still the live item.
    let (again, outcome) = upsert(&mr, &spec("2"), NOW).await;
    assert_eq!(
        (again, outcome),
        (id, UpsertOutcome::Updated { content: true })
    );
    assert_eq!(
        mr.find_active("gitlab", "team/app", Lookup::Branch("wq/x"))
            .await
            .unwrap(),
        Some(id)
    );
    assert_eq!(
        mr.find_active("gitlab", "TEAM/APP", Lookup::Branch("wq/x"))
            .await
            .unwrap(),
        Some(id)
    );
}

async fn upsert_outcomes_and_generations(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let (id, outcome) = upsert(&mr, &spec("1"), NOW).await;
    assert_eq!(outcome, UpsertOutcome::Created);
    let item = store.item_get(id).await.unwrap().unwrap();
    assert_eq!(
        item.idempotency_key.as_deref(),
        Some("mr:gitlab:team/app:wq/x:1")
    );
    assert_eq!(item.caller_identity.as_deref(), Some("tester"));
    assert_eq!(
        upsert(&mr, &spec("1"), NOW).await,
        (id, UpsertOutcome::Unchanged)
    );
    assert!(
        store.event_next(id).await.unwrap().is_none(),
        "unchanged stores no event"
    );

    assert_eq!(
        upsert(&mr, &spec("2"), NOW).await,
        (id, UpsertOutcome::Updated { content: true })
    );
    let event = store
        .event_next(id)
        .await
        .unwrap()
        .expect("an update stores an event");
    assert_eq!(event.body["change"], "content");
    let mut retitled = spec("2");
    retitled.title = "T2".into();
    assert_eq!(
        upsert(&mr, &retitled, NOW).await,
        (id, UpsertOutcome::Updated { content: false })
    );
    let mut retargeted = retitled.clone();
    retargeted.target_branch = "develop".parse().unwrap();
    assert_eq!(
        upsert(&mr, &retargeted, NOW).await,
        (id, UpsertOutcome::Updated { content: true }),
        "a new target needs a new commit"
    );
    let stored = mr.get(id).await.unwrap().unwrap();
    assert_eq!(stored.spec, retargeted);

    // Failed → retried, same item.
    let lease = claim_at(store.as_ref(), id, NOW, time::Duration::minutes(1)).await;
    store
        .item_record_failure(RecordFailure {
            lease,
            now: NOW,
            error: "boom".into(),
            permanent: true,
            max_attempts: 5,
            retry_at: NOW,
            outage: false,
            outage_started_before: NOW,
            action: None,
        })
        .await
        .unwrap();
    assert_eq!(
        store.item_get(id).await.unwrap().unwrap().phase,
        Phase::Failed
    );
    assert_eq!(
        upsert(&mr, &retargeted, NOW).await,
        (id, UpsertOutcome::Retried)
    );
    let item = store.item_get(id).await.unwrap().unwrap();
    assert_eq!(
        (item.phase, item.error.as_deref(), item.attempts),
        (Phase::Active, None, 0)
    );
}

async fn the_merge_journal(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let (id, _) = upsert(&mr, &spec("1"), NOW).await;
    let lease = run_lease(store.as_ref(), id).await;
    let cutoff = NOW - time::Duration::minutes(5);
    assert!(
        !mr.authorize_merge_retry(id, NOW, cutoff).await.unwrap(),
        "no attempt yet"
    );

    assert!(
        mr.reserve_merge(id, lease, "sig-1", "head", NOW)
            .await
            .unwrap()
    );
    let journal = mr.get(id).await.unwrap().unwrap().journal;
    assert_eq!(journal.result, Some(MergeResult::InFlight));
    assert_eq!(journal.signature.as_deref(), Some("sig-1"));
    assert_eq!(journal.attempt_at, Some(NOW));
    assert!(
        !mr.authorize_merge_retry(id, NOW, cutoff).await.unwrap(),
        "refused while in flight"
    );
    // Past its deadline, in_flight becomes failed and the retry is granted.
    let later = NOW + time::Duration::minutes(6);
    assert!(
        mr.authorize_merge_retry(id, later, later - time::Duration::minutes(5))
            .await
            .unwrap()
    );
    let journal = mr.get(id).await.unwrap().unwrap().journal;
    assert_eq!(journal.result, Some(MergeResult::Failed));
    assert_eq!(journal.error_kind.as_deref(), Some("auto_merge"));
    assert!(journal.error.unwrap().contains("interrupted"));
    assert!(journal.retry_authorized);

    // A reservation consumes the authorization; failed stores the error.
    assert!(
        mr.reserve_merge(id, lease, "sig-2", "head", later)
            .await
            .unwrap()
    );
    mr.merge_result(
        id,
        MergeResult::Failed,
        None,
        Some(("auto_merge", "409 stale sha")),
        later,
    )
    .await
    .unwrap();
    let journal = mr.get(id).await.unwrap().unwrap().journal;
    assert!(!journal.retry_authorized);
    assert_eq!(journal.error.as_deref(), Some("409 stale sha"));
    assert!(
        mr.authorize_merge_retry(id, later, cutoff).await.unwrap(),
        "failed → retry"
    );

    // Accepted clears the auto_merge error and records the head.
    mr.merge_result(id, MergeResult::Accepted, Some("abc"), None, later)
        .await
        .unwrap();
    let journal = mr.get(id).await.unwrap().unwrap().journal;
    assert_eq!(journal.result, Some(MergeResult::Accepted));
    assert_eq!(journal.queue_head_sha.as_deref(), Some("abc"));
    assert_eq!((journal.error_kind, journal.error), (None, None));
    assert!(
        !mr.authorize_merge_retry(id, later, cutoff).await.unwrap(),
        "nothing to retry"
    );
}

/// The retry authorization stores its event in the same transaction: a
/// refusal leaves no event behind.
async fn only_a_granted_retry_stores_its_event(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let (id, _) = upsert(&mr, &spec("1"), NOW).await;
    let lease = run_lease(store.as_ref(), id).await;
    assert!(!mr.authorize_merge_retry(id, NOW, NOW).await.unwrap());
    assert_eq!(store.event_next(id).await.unwrap(), None, "refused");

    assert!(
        mr.reserve_merge(id, lease, "sig-1", "head", NOW)
            .await
            .unwrap()
    );
    mr.merge_result(
        id,
        MergeResult::Failed,
        None,
        Some(("auto_merge", "409")),
        NOW,
    )
    .await
    .unwrap();
    assert!(mr.authorize_merge_retry(id, NOW, NOW).await.unwrap());
    let event = store.event_next(id).await.unwrap().expect("granted");
    assert_eq!(event.event_type, wq_mr::store::RETRY_MERGE_EVENT);
}

/// The reservation is the correctness boundary: of two workers that read
/// the same journal, only one gets it; a tried signature needs a change or
/// an authorized retry.
async fn a_reservation_is_taken_once_per_signature(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let (id, _) = upsert(&mr, &spec("1"), NOW).await;
    let lease = run_lease(store.as_ref(), id).await;
    assert!(
        mr.reserve_merge(id, lease, "sig-1", "head", NOW)
            .await
            .unwrap()
    );
    assert!(
        !mr.reserve_merge(id, lease, "sig-1", "head", NOW)
            .await
            .unwrap(),
        "the second worker with the same reading"
    );
    assert!(
        !mr.reserve_merge(id, lease, "sig-2", "head", NOW)
            .await
            .unwrap(),
        "not while an attempt is in flight"
    );
    mr.merge_result(
        id,
        MergeResult::Failed,
        None,
        Some(("auto_merge", "409")),
        NOW,
    )
    .await
    .unwrap();
    assert!(
        !mr.reserve_merge(id, lease, "sig-1", "head", NOW)
            .await
            .unwrap(),
        "a failed signature is not tried again by itself"
    );
    assert!(mr.authorize_merge_retry(id, NOW, NOW).await.unwrap());
    assert!(
        mr.reserve_merge(id, lease, "sig-1", "head", NOW)
            .await
            .unwrap(),
        "authorized"
    );
    assert!(!mr.get(id).await.unwrap().unwrap().journal.retry_authorized);
    mr.merge_result(
        id,
        MergeResult::Failed,
        None,
        Some(("auto_merge", "409")),
        NOW,
    )
    .await
    .unwrap();
    assert!(
        mr.reserve_merge(id, lease, "sig-2", "head", NOW)
            .await
            .unwrap(),
        "a new readiness state"
    );
}

/// The reservation, after which the merge call is made, is fenced by the
/// run's own lease: a run whose lease expired (paused past it, say), or
/// whose item another run claimed since, reserves nothing and so calls
/// nothing; the run that holds the item reserves.
async fn a_merge_is_reserved_only_under_the_runs_lease(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let (id, _) = upsert(&mr, &spec("1"), NOW).await;
    let lease_length = time::Duration::minutes(5);
    let claim = async |now| claim_at(store.as_ref(), id, now, lease_length).await;
    let reserve = async |lease: LeaseEpoch, now: OffsetDateTime| {
        mr.reserve_merge(id, lease, "sig", "head", now)
            .await
            .unwrap()
    };
    assert!(!reserve(LeaseEpoch(1), NOW).await, "not leased");
    let stale = claim(NOW).await;
    let expired = NOW + lease_length;
    assert!(!reserve(stale.epoch, expired).await, "its lease expired");
    let held = claim(expired).await;
    assert!(
        !reserve(stale.epoch, expired).await,
        "another run holds the item"
    );
    let journal = mr.get(id).await.unwrap().unwrap().journal;
    assert_eq!(journal.result, None, "nothing was reserved");
    assert!(reserve(held.epoch, expired).await, "the run that holds it");
    assert_eq!(
        mr.get(id).await.unwrap().unwrap().journal.result,
        Some(MergeResult::InFlight)
    );
}

async fn webhook_lookups_see_active_items_only(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let (id, _) = upsert(&mr, &spec("1"), NOW).await;
    mr.record_change(
        id,
        &RecordedChange {
            number: 7,
            url: "https://forge/mr/7",
            head_sha: "abc",
            pushed_content_hash: "hash",
            target_branch: "main",
            labels: &[],
            created: true,
            now: NOW,
        },
    )
    .await
    .unwrap();
    let entry = QueueEntry {
        state: "queued".into(),
        position: Some(2),
        eta_seconds: Some(90),
    };
    mr.observe(
        id,
        &Observation {
            head_sha: Some("def"),
            pipeline_id: Some(41),
            queue: Some(&entry),
            url: None,
        },
        NOW,
    )
    .await
    .unwrap();
    let stored = mr.get(id).await.unwrap().unwrap();
    assert_eq!(stored.mr_number, Some(7));
    assert_eq!(
        stored.mr_url.as_deref(),
        Some("https://forge/mr/7"),
        "kept when not observed"
    );
    assert_eq!(stored.head_sha.as_deref(), Some("def"));
    assert_eq!(stored.head_pipeline_id, Some(41));
    assert_eq!(stored.queue, Some(entry));
    for lookup in [
        Lookup::Number(7),
        Lookup::Pipeline(41),
        Lookup::Branch("wq/x"),
        Lookup::HeadSha("def"),
    ] {
        assert_eq!(
            mr.find_active("gitlab", "team/app", lookup).await.unwrap(),
            Some(id),
            "{lookup:?}"
        );
    }
    assert_eq!(
        mr.find_active("other", "team/app", Lookup::Number(7))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        mr.find_active("gitlab", "team/app", Lookup::Pipeline(40))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        mr.find_active("gitlab", "team/app", Lookup::HeadSha("abc"))
            .await
            .unwrap(),
        None,
        "only the recorded head"
    );
    // A cancelled item is not resolved.
    store
        .set_phase_for_test(id, Phase::Cancelled)
        .await
        .unwrap();
    assert_eq!(
        mr.find_active("gitlab", "team/app", Lookup::Number(7))
            .await
            .unwrap(),
        None
    );
}

/// The loop's exit (`wq_park`) takes the item's advisory lock, then its
/// `work_items` row. An upsert or a retry-merge authorization running
/// meanwhile must wait for the advisory lock before it locks any row of
/// the item; when they locked a row first, PostgreSQL broke the cycle with
/// "deadlock detected" and the submission failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_writers_take_the_item_lock_before_its_rows() {
    let (store, mr) = setup(Backend::Postgres).await;
    let wq_store::Backend::Postgres(pg) = store.handle() else {
        panic!("a PostgreSQL store");
    };
    let (id, _) = upsert(&mr, &spec("1"), NOW).await;
    let lease = run_lease(store.as_ref(), id).await;
    assert!(
        mr.reserve_merge(id, lease, "sig-1", "head", NOW)
            .await
            .unwrap()
    );
    mr.merge_result(
        id,
        MergeResult::Failed,
        None,
        Some(("auto_merge", "409")),
        NOW,
    )
    .await
    .unwrap();

    // Holds the item's advisory lock as wq_park does, lets `write` start
    // and block on it (PostgreSQL reports the wait), then locks `row_sql`'s
    // row: with the writer holding that row, this is a deadlock and one
    // side fails.
    async fn hold_the_item_lock_then<F>(
        pg: &wq_store::postgres::PgStore,
        id: ItemId,
        row_sql: &'static str,
        write: F,
    ) where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut exit = pg.pool().begin().await.unwrap();
        wq_store::postgres::lock_item(&mut exit, id).await.unwrap();
        let writer = tokio::spawn(write);
        assert!(
            wq_store::testing::wait_for_lock_waiters(pg.pool(), Some("advisory"), 1).await,
            "the writer waits for the item lock (finished: {})",
            writer.is_finished()
        );
        assert!(!writer.is_finished(), "the writer waits for the item lock");
        sqlx::query(row_sql)
            .bind(id.0)
            .execute(&mut *exit)
            .await
            .expect("the row is free while the writer waits for the item lock");
        exit.commit().await.unwrap();
        writer
            .await
            .expect("the writer succeeds once the lock is released");
    }

    let upserting = mr.clone();
    hold_the_item_lock_then(
        &pg,
        id,
        "SELECT 1 FROM work_items WHERE id = $1 FOR UPDATE",
        async move {
            assert_eq!(
                upsert(&upserting, &spec("2"), NOW).await.1,
                UpsertOutcome::Updated { content: true }
            );
        },
    )
    .await;

    let authorizing = mr.clone();
    hold_the_item_lock_then(
        &pg,
        id,
        "SELECT 1 FROM mr_details WHERE work_item_id = $1 FOR UPDATE",
        async move {
            assert!(
                authorizing
                    .authorize_merge_retry(id, NOW, NOW)
                    .await
                    .unwrap()
            );
        },
    )
    .await;
}

async fn a_transient_answer_allows_one_more_call_when_due(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let (id, _) = upsert(&mr, &spec("1"), NOW).await;
    let lease = run_lease(store.as_ref(), id).await;
    assert!(
        mr.reserve_merge(id, lease, "sig", "head", NOW)
            .await
            .unwrap()
    );
    let due = NOW + time::Duration::seconds(30);
    mr.merge_transient(id, "502", Some(due), NOW).await.unwrap();
    let journal = mr.get(id).await.unwrap().unwrap().journal;
    assert_eq!(journal.result, Some(MergeResult::Failed));
    assert_eq!(
        (journal.transient_failures, journal.retry_at),
        (1, Some(due))
    );
    assert!(
        !mr.reserve_merge(id, lease, "sig", "head", NOW + time::Duration::seconds(10))
            .await
            .unwrap(),
        "not before it is due"
    );
    assert!(
        mr.reserve_merge(id, lease, "sig", "head", due)
            .await
            .unwrap()
    );
    let journal = mr.get(id).await.unwrap().unwrap().journal;
    assert_eq!(journal.transient_failures, 1, "carried into its retry");
    assert_eq!(journal.retry_at, None);
    // The budget is spent: only retry-merge or a new state tries again.
    mr.merge_transient(id, "502", None, due).await.unwrap();
    let later = due + time::Duration::hours(1);
    assert!(
        !mr.reserve_merge(id, lease, "sig", "head", later)
            .await
            .unwrap()
    );
    assert_eq!(
        mr.get(id)
            .await
            .unwrap()
            .unwrap()
            .journal
            .transient_failures,
        2
    );
    assert!(
        mr.reserve_merge(id, lease, "sig-2", "head", later)
            .await
            .unwrap()
    );
    assert_eq!(
        mr.get(id)
            .await
            .unwrap()
            .unwrap()
            .journal
            .transient_failures,
        0,
        "a new state starts its own count"
    );
}

async fn a_merged_change_hands_new_content_to_the_next_generation(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let (id, _) = upsert_as(&mr, &spec("1"), NOW, "alice", false).await;
    // Not leased: nothing is written, whatever claim the caller names.
    assert_eq!(
        mr.hand_over(id, LeaseEpoch(1), None, Some("alice"), NOW)
            .await
            .unwrap(),
        None
    );
    let claim = async |now| claim_at(store.as_ref(), id, now, time::Duration::minutes(5)).await;
    // A run whose lease expired and was claimed again by another: its
    // hand-over writes nothing while the other run holds the item.
    let stale = claim(NOW).await;
    let later = NOW + time::Duration::minutes(6);
    let lease = claim(later).await;
    assert_ne!(stale.epoch, lease.epoch, "each claim draws its own epoch");
    assert_eq!(
        mr.hand_over(id, stale.epoch, None, Some("alice"), later)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.item_get(id).await.unwrap().unwrap().phase,
        Phase::Active,
        "another run's lease does not let a stale run end the item"
    );
    let (same, outcome) = upsert_as(&mr, &spec("2"), later, "alice", false).await;
    assert_eq!(
        (same, outcome),
        (id, UpsertOutcome::Updated { content: true })
    );
    let next = mr
        .hand_over(id, lease.epoch, None, Some("alice"), later)
        .await
        .unwrap()
        .expect("a successor");
    let old = store.item_get(id).await.unwrap().unwrap();
    assert_eq!(old.phase, Phase::Completed);
    let new = store.item_get(next).await.unwrap().unwrap();
    assert_eq!((new.phase, new.actionable), (Phase::Active, true));
    assert_eq!(new.caller_identity.as_deref(), Some("alice"));
    let details = mr.get(next).await.unwrap().unwrap();
    assert_eq!(details.generation, 2);
    assert_eq!(details.content_hash, spec("2").content_hash());
    assert_eq!(details.mr_number, None);
    let history = mr.submissions(next).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].outcome, "created");
    // The branch's live item is the new one; the old one is not again.
    let (live, outcome) = upsert_as(&mr, &spec("2"), later, "alice", false).await;
    assert_eq!((live, outcome), (next, UpsertOutcome::Unchanged));
    assert_eq!(
        mr.hand_over(id, lease.epoch, None, Some("alice"), later)
            .await
            .unwrap(),
        None
    );
}

/// A merge queue merged the change request at the first push's head while
/// the update was being pushed: the last push carries the latest content,
/// yet what merged is the first. The merged head decides, not the last push.
async fn content_pushed_after_the_merged_head_is_the_next_generation(backend: Backend) {
    let (store, mr) = setup(backend).await;
    let on = |branch: &str, content: &str| {
        let mut spec = spec(content);
        spec.source_branch = branch.parse().unwrap();
        spec
    };
    // An item of `branch` with each of `pushes` (head, content) submitted
    // and pushed in turn, claimed as the run that sees the merge.
    let pushed = async |branch: &str, pushes: &[(&str, &str)]| {
        let mut id = None;
        for (head, content) in pushes {
            let spec = on(branch, content);
            id = Some(upsert_as(&mr, &spec, NOW, "alice", false).await.0);
            mr.record_push(id.unwrap(), head, (&spec.content_hash(), "main"), NOW)
                .await
                .unwrap();
        }
        let id = id.expect("a push");
        let lease = claim_at(store.as_ref(), id, NOW, time::Duration::minutes(5)).await;
        (id, lease.epoch)
    };
    let both = [("sha-1", "1"), ("sha-2", "2")];

    // The last push's head merged: nothing waits.
    let (id, lease) = pushed("wq/x", &both).await;
    let merged_last = mr
        .hand_over(id, lease, Some("sha-2"), Some("alice"), NOW)
        .await
        .unwrap();
    assert_eq!(merged_last, None);
    assert_eq!(
        store.item_get(id).await.unwrap().unwrap().phase,
        Phase::Completed
    );

    // The same pushes on another branch, but the first head merged.
    let (id, lease) = pushed("wq/y", &both).await;
    let next = mr
        .hand_over(id, lease, Some("sha-1"), Some("alice"), NOW)
        .await
        .unwrap()
        .expect("the content pushed after the merged head takes over");
    let details = mr.get(next).await.unwrap().unwrap();
    assert_eq!(details.generation, 2);
    assert_eq!(details.content_hash, spec("2").content_hash());
    assert_eq!(details.pushed_content_hash, None, "not pushed by this item");
    assert_eq!(mr.submissions(next).await.unwrap()[0].outcome, "created");

    // A head that is no push of the line's (a person's commit on top of
    // the last push) falls back to the last push: nothing waits.
    let (id, lease) = pushed("wq/z", &[("sha-3", "2")]).await;
    assert_eq!(
        mr.hand_over(id, lease, Some("a-persons-sha"), Some("alice"), NOW)
            .await
            .unwrap(),
        None
    );
}

/// The upsert's and the webhooks' lookups, each as its statement text and
/// what it looks up by.
const LOOKUPS: [(&str, &str); 6] = [
    (
        "live_by_branch",
        include_str!("../src/store/sql/live_by_branch.sql"),
    ),
    (
        "next_generation",
        include_str!("../src/store/sql/next_generation.sql"),
    ),
    (
        "active_by_branch",
        include_str!("../src/store/sql/active_by_branch.sql"),
    ),
    (
        "active_by_number",
        include_str!("../src/store/sql/active_by_number.sql"),
    ),
    (
        "active_by_pipeline",
        include_str!("../src/store/sql/active_by_pipeline.sql"),
    ),
    (
        "active_by_head_sha",
        include_str!("../src/store/sql/active_by_head_sha.sql"),
    ),
];

/// Every lookup of one branch's item (the upsert's, each webhook's) reads
/// that branch's detail rows through an index on the project as compared
/// (`lower(project)`), then their items by id: none walks every item of a
/// phase or every detail row of a forge, whatever the number of items.
/// SQLite plans without statistics, PostgreSQL with them and as a generic
/// plan (what a prepared statement may switch to).
async fn lookups_read_the_branch_s_detail_rows_through_their_index(backend: Backend) {
    let (store, mr) = setup(backend).await;
    for n in 0..200 {
        let mut branch = spec(&n.to_string());
        branch.source_branch = format!("wq/x-{n}").parse().unwrap();
        upsert(&mr, &branch, NOW).await;
    }
    match store.handle() {
        wq_store::Backend::Sqlite(sqlite) => {
            for (name, sql) in LOOKUPS {
                let rows: Vec<(i64, i64, i64, String)> =
                    sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                        .bind("gitlab")
                        .bind("team/app")
                        .bind("x")
                        .fetch_all(sqlite.pool())
                        .await
                        .unwrap();
                let plan: Vec<&str> = rows.iter().map(|row| row.3.as_str()).collect();
                let first = plan.first().copied().unwrap_or_default();
                assert!(
                    first.starts_with("SEARCH d USING INDEX mr_details_")
                        || first.starts_with("SEARCH mr_details USING INDEX mr_details_"),
                    "{name}: {plan:#?}"
                );
                assert!(
                    first.contains("_ci (forge=? AND <expr>=? AND "),
                    "{name}: {plan:#?}"
                );
                for line in &plan[1..] {
                    assert!(
                        !line.starts_with("SEARCH w") || line.ends_with("id=?)"),
                        "{name}: items by id only: {plan:#?}"
                    );
                    assert!(!line.contains("SCAN"), "{name}: {plan:#?}");
                }
            }
        }
        wq_store::Backend::Postgres(pg) => {
            let mut conn = pg.pool().acquire().await.unwrap();
            for statement in ["ANALYZE", "SET plan_cache_mode = force_generic_plan"] {
                sqlx::query(statement).execute(&mut *conn).await.unwrap();
            }
            for (name, sql) in LOOKUPS {
                sqlx::query(sqlx::AssertSqlSafe(format!("PREPARE {name} AS {sql}")))
                    .execute(&mut *conn)
                    .await
                    .unwrap();
                let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "EXPLAIN (COSTS OFF) EXECUTE {name} (NULL, NULL, NULL)"
                )))
                .fetch_all(&mut *conn)
                .await
                .unwrap();
                let plan = plan.join("\n");
                assert!(!plan.contains("Seq Scan"), "{name}: {plan}");
                assert!(
                    plan.contains("_ci on mr_details"),
                    "{name}: through an index on lower(project): {plan}"
                );
                assert!(
                    plan.contains("(lower(project) = lower($2))")
                        || plan.contains("(lower(d.project) = lower($2))"),
                    "{name}: the project is part of the index condition: {plan}"
                );
            }
        }
    }
}
