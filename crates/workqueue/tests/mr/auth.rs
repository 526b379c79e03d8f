//! Authorization of `mr` items end to end: an item is scoped by the forge
//! and project of its spec, `retry-merge` needs `retry`, and the caller
//! identity comes from the token, never from the submission.

use reqwest::StatusCode;
use serde_json::json;
use wq_testkit::{Backend, backend_tests};

use crate::support::{Harness, PROJECT, bearer_client, change, manual};

backend_tests!(mr_items_are_authorized_by_their_project_and_the_token);

async fn mr_items_are_authorized_by_their_project_and_the_token(backend: Backend) {
    let h = Harness::start(backend).await;
    let body = manual(change("wq/auth", &[("src/auth.rs", "pub fn a() {}\n")]));

    // A caller identity in the body is refused, whoever sends it.
    let mut claimed = body.clone();
    claimed["caller_identity"] = json!("mallory");
    let (status, reply) = h.submit(&claimed).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{reply}");
    assert_eq!(reply["error"]["field"], "caller_identity", "{reply}");

    let reader = bearer_client(&h.tokens.reader);
    let elsewhere = bearer_client(&h.tokens.elsewhere);
    for client in [&reader, &elsewhere] {
        let (status, reply) = h.submit_as(client, &body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{reply}");
        assert_eq!(reply["error"]["code"], "forbidden", "{reply}");
    }
    // other/* is the elsewhere rule's: authorized, then validated (and
    // refused for the missing title, so nothing reaches the forge).
    let mut other_project = body.clone();
    other_project["project"] = json!("other/app");
    other_project.as_object_mut().unwrap().remove("title");
    let (status, reply) = h.submit_as(&elsewhere, &other_project).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{reply}");
    assert_eq!(reply["error"]["field"], "title", "{reply}");
    assert!(
        h.sim.requests().iter().all(|r| r.method == "GET"),
        "no forge write"
    );

    let id = h.submit_ok(&body, StatusCode::CREATED, "created").await;
    h.wait_mr(&id).await;
    let item = h.item(&id).await;
    assert_eq!(item["caller_identity"], "admin (token admin, rule admins)");
    assert_eq!(item["detail"]["project"], PROJECT, "{item:#}");

    // The item is in team/app: readers see it; for the elsewhere rule it
    // does not exist (404, as an unknown id: a hidden item is not
    // confirmed).
    let path = format!("{}/api/v1/work-items/{id}", h.url);
    let status = reader.get(&path).send().await.unwrap().status();
    assert_eq!(status, StatusCode::OK);
    let status = elsewhere.get(&path).send().await.unwrap().status();
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Retrying and retrying a merge need `retry` on the item's project: a
    // reader is refused (403), a caller who may not read it finds nothing.
    for command in ["retry", "retry-merge"] {
        let path = format!("/api/v1/work-items/{id}/{command}");
        let (status, reply) = h.post_as(&reader, &path, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{command}: {reply}");
        let (status, reply) = h.post_as(&elsewhere, &path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{command}: {reply}");
    }
    // The admin passes authorization; the command itself has nothing to
    // retry yet.
    let (status, reply) = h
        .post(&format!("/api/v1/work-items/{id}/retry-merge"), None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{reply}");

    // Anonymous callers get nothing, webhooks still need no token.
    let response = h.client.get(&path).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.headers()["www-authenticate"],
        "Bearer realm=\"workqueue\""
    );
    h.finish().await;
}
