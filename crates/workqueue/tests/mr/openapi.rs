//! The service's OpenAPI document with the `mr` type, and schemathesis run
//! against the real service: generated requests with the admin token on
//! every operation, no 5xx, every answer as the document says.

use reqwest::StatusCode;
use serde_json::Value;
use wq_testkit::Backend;

use crate::support::{Harness, change};

/// The document the running service serves, with the mr type's
/// submission schema from its configured rules and forges.
async fn document(h: &Harness) -> Value {
    let response = h
        .client
        .get(format!("{}/api/openapi.json", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

#[tokio::test]
async fn the_document_offers_the_mr_submission_schema() {
    let h = Harness::start(Backend::Sqlite).await;
    let mut document = document(&h).await;
    let mr = &document["components"]["schemas"]["Submission_mr"];
    assert_eq!(mr["properties"]["item_type"]["const"], "mr");
    assert_eq!(
        mr["properties"]["forge"]["enum"],
        serde_json::json!(["gitlab"])
    );
    assert_eq!(
        document["components"]["schemas"]["Submission"]["discriminator"]["mapping"]["mr"],
        "#/components/schemas/Submission_mr"
    );
    document["info"]["version"] = Value::from("[version]");
    insta::assert_json_snapshot!(document);
    h.finish().await;
}

#[tokio::test]
async fn schemathesis_finds_no_server_error_and_no_answer_off_the_document() {
    let h = Harness::start(Backend::Sqlite).await;
    // One merged change, so that listings, details and the audit trail
    // carry real rows.
    let id = h
        .submit_ok(
            &change("wq/openapi", &[("src/openapi.rs", "pub fn f() {}\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_phase(&id, "completed").await;
    let document = document(&h).await;
    let mut operations = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            operations.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    let schema_url = format!("{}/api/openapi.json", h.url);
    let token = h.tokens.admin.clone();
    let root = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let outcome = tokio::task::spawn_blocking(move || {
        wq_testkit::schemathesis::run(
            &root,
            &wq_testkit::schemathesis::Run {
                schema_url: &schema_url,
                headers: vec![("Authorization", format!("Bearer {token}"))],
                max_examples: 50,
                seed: 18,
                // Every `{id}` names the merged item: its detail, audit
                // trail, retry and commands answer for a real item.
                parameters: vec![("path.id", id.clone())],
                paths: None,
            },
        )
    })
    .await
    .expect("schemathesis ran");
    assert!(outcome.success, "schemathesis failed:\n{}", outcome.output);
    // Its summary, for the log (`--nocapture`).
    println!("{}", outcome.output);
    // It tested every operation but the document's own (which it reads
    // as the schema): none was left out for a schema it could not read.
    for operation in &operations {
        if operation == "GET /api/openapi.json" {
            continue;
        }
        assert!(
            outcome.junit.contains(&format!("name=\"{operation}\"")),
            "{operation} untested:\n{}\n{}",
            outcome.output,
            outcome.junit
        );
    }
    // Nothing it submitted is left half-done.
    h.finish().await;
}
