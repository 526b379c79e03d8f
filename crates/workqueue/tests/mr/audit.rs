//! The audit trail of one change, from the caller's submission to the
//! merge: who submitted which content, the commit workqueue pushed, the
//! merge request it opened, the deliveries it received, the merge it asked
//! for with the head it checked, and the forge's answer; each record
//! chained to the last, readable as the rules allow.

use reqwest::StatusCode;
use serde_json::Value;
use wq_testkit::{Backend, backend_tests, bearer_client};

use forge_sim::{JobOutcome, JobSpec};

use crate::support::{Harness, Options, change};

backend_tests!(a_change_s_trail_runs_from_the_caller_to_the_merge);

fn of_kind<'a>(records: &'a [Value], kind: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|record| record["kind"] == kind)
        .collect()
}

async fn a_change_s_trail_runs_from_the_caller_to_the_merge(backend: Backend) {
    // The pipeline runs an hour of the sim's time, so its webhook is what
    // brings the merge.
    let options = Options {
        jobs: vec![JobSpec::new("unit", JobOutcome::Success).duration_secs(3600)],
        ..Options::default()
    };
    let h = Harness::start_with(backend, options).await;
    let team = bearer_client(&h.tokens.team);
    let (status, body) = h
        .submit_as(&team, &change("wq/audited", &[("a.txt", "audited\n")]))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["item"]["id"].as_str().unwrap().to_owned();
    h.wait_mr(&id).await;
    h.settle().await;
    h.sim.advance(std::time::Duration::from_secs(3600));
    let item = h.wait_phase(&id, "completed").await;
    let detail = &item["detail"];

    let trail: Value = h
        .api
        .get(format!("{}/api/v1/work-items/{id}/audit", h.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let records = trail["records"].as_array().expect("records").clone();
    // Caller → content hash.
    let submitted = of_kind(&records, "submission.created");
    assert_eq!(submitted.len(), 1, "{records:#?}");
    assert!(
        submitted[0]["actor"].as_str().unwrap().starts_with("team"),
        "{}",
        submitted[0]
    );
    assert_eq!(
        submitted[0]["new_state"]["content_hash"],
        detail["content_hash"]
    );
    assert_eq!(submitted[0]["metadata"]["files"][0]["path"], "a.txt");
    // → the pushed commit → the merge request.
    let pushed = of_kind(&records, "forge.push");
    assert_eq!(pushed.len(), 1, "{records:#?}");
    let head = detail["mr"]["head_sha"].as_str().unwrap();
    assert_eq!(pushed[0]["metadata"]["commit_sha"], head);
    assert_eq!(
        pushed[0]["metadata"]["content_hash"],
        detail["content_hash"]
    );
    let opened = of_kind(&records, "forge.change_created");
    assert_eq!(opened[0]["metadata"]["number"], detail["mr"]["number"]);
    // Deliveries, by the webhook that brought them, with their raw body.
    let received = of_kind(&records, "event.received");
    assert!(!received.is_empty(), "{records:#?}");
    assert!(
        received
            .iter()
            .all(|record| record["actor"] == "webhook:gitlab")
    );
    assert!(
        received.iter().all(|record| record["metadata"]["raw"]
            .as_str()
            .is_some_and(|raw| raw.contains("object_kind"))),
        "{received:#?}"
    );
    // → the merge bound to the checked head → the forge's answer.
    let reserved = of_kind(&records, "forge.merge_reserved");
    assert_eq!(reserved.len(), 1, "{records:#?}");
    assert_eq!(reserved[0]["metadata"]["expected_head_sha"], head);
    let answered = of_kind(&records, "forge.merge_answered");
    assert_eq!(answered.len(), 1, "{records:#?}");
    assert_eq!(answered[0]["metadata"]["result"], "accepted");
    assert_eq!(answered[0]["metadata"]["head_sha"], head);
    // → the merge commit the target branch got.
    let merged = of_kind(&records, "forge.merged");
    assert_eq!(merged.len(), 1, "{records:#?}");
    let main = h.branch_head("main").expect("main");
    assert_eq!(merged[0]["metadata"]["merge_commit_sha"], main.as_str());
    assert_ne!(main, head, "a merge commit, not the change's head");
    // The status note, posted and then edited, each write with its note.
    let posted = of_kind(&records, "forge.note_posted");
    assert_eq!(posted.len(), 1, "{records:#?}");
    let note_id = &posted[0]["metadata"]["note_id"];
    assert!(note_id.is_u64(), "{}", posted[0]);
    let edited = of_kind(&records, "forge.note_edited");
    assert!(!edited.is_empty(), "the final note edits the first");
    assert!(edited.iter().all(|r| &r["metadata"]["note_id"] == note_id));
    // Every action that may write to the forge started on the record, and
    // finished: none is left open.
    let mut open: Option<&Value> = None;
    for record in &records {
        match record["kind"].as_str().unwrap() {
            "action.started" => {
                assert!(open.is_none(), "{open:?} never finished");
                open = Some(record);
            }
            "action.succeeded" | "action.failed" => {
                if let Some(started) = open.take() {
                    assert_eq!(started["trigger"]["action"], record["trigger"]["action"]);
                }
            }
            _ => {}
        }
    }
    assert!(open.is_none(), "{open:?} never finished");
    // Opening the change request (pushed, created, first note) and the
    // reconcile that merges it.
    let actions: Vec<&Value> = of_kind(&records, "action.started")
        .into_iter()
        .map(|r| &r["trigger"]["action"])
        .collect();
    assert_eq!(actions, ["ensure_mr", "reconcile_mr"], "{records:#?}");
    assert_eq!(posted[0]["trigger"]["action"], "ensure_mr", "{}", posted[0]);
    // In that order, each chained to the one before.
    let position = |kind: &str| records.iter().position(|r| r["kind"] == kind).unwrap();
    assert!(position("submission.created") < position("action.started"));
    assert!(position("action.started") < position("forge.push"));
    assert!(position("forge.push") < position("forge.change_created"));
    assert!(position("forge.merge_reserved") < position("forge.merge_answered"));
    assert!(position("forge.merge_answered") < position("forge.merged"));
    for pair in records.windows(2) {
        assert_eq!(pair[1]["prev_hash"], pair[0]["hash"]);
    }
    let (checked, broken) = h.app().store.audit_verify().await.unwrap();
    assert!(broken.is_none(), "{broken:?}");
    assert_eq!(checked as usize, records.len());

    // Read as the rules allow: a caller who may not read the item gets a
    // 404, the whole trail needs admin everywhere.
    let elsewhere = bearer_client(&h.tokens.elsewhere);
    let hidden = elsewhere
        .get(format!("{}/api/v1/work-items/{id}/audit", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(hidden.status(), StatusCode::NOT_FOUND);
    let refused = team
        .get(format!("{}/api/v1/audit", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let by_kind: Value = h
        .api
        .get(format!("{}/api/v1/audit?kind=forge.push&limit=5", h.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(by_kind["records"].as_array().unwrap().len(), 1);
    let bad = h
        .api
        .get(format!("{}/api/v1/audit?since=yesterday", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let body: Value = bad.json().await.unwrap();
    assert_eq!(body["error"]["field"], "since", "{body}");
    h.finish().await;
}
