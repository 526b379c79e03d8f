//! `GET /api/openapi.json`: an OpenAPI 3.1 document of every route the
//! router serves, read from the running app.

use std::collections::BTreeSet;

use reqwest::Method;
use serde_json::Value;
use wq_testkit::{Backend, TestApp};

use crate::api_app;

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

async fn document(app: &TestApp) -> Value {
    let response = app
        .request(Method::GET, "/api/openapi.json", None)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200, "open, without a token");
    assert_eq!(response.headers()["content-type"], "application/json");
    response.json().await.unwrap()
}

/// Every `$ref` in `value`.
fn references<'v>(value: &'v Value, found: &mut Vec<&'v str>) {
    match value {
        Value::Object(members) => {
            for (key, member) in members {
                match (key.as_str(), member) {
                    ("$ref", Value::String(target)) => found.push(target),
                    _ => references(member, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| references(item, found)),
        _ => {}
    }
}

#[tokio::test]
async fn the_document_is_openapi_3_1_with_the_envelope_and_the_bearer_scheme() {
    let app = api_app(Backend::Sqlite).start().await;
    let document = document(&app).await;
    assert!(
        document["openapi"].as_str().unwrap().starts_with("3.1."),
        "{}",
        document["openapi"]
    );
    assert_eq!(document["info"]["title"], "workqueue");
    assert_eq!(
        document["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let envelope = &document["components"]["schemas"]["ErrorEnvelope"];
    assert_eq!(envelope["required"], serde_json::json!(["error"]));
    // Every reference resolves inside the document.
    let mut found = Vec::new();
    references(&document, &mut found);
    assert!(!found.is_empty());
    for target in found {
        let pointer = target.strip_prefix('#').expect("a local reference");
        assert!(
            document.pointer(pointer).is_some(),
            "{target} does not resolve"
        );
    }
    let paths = document["paths"].as_object().unwrap();
    for (path, item) in paths {
        for (method, operation) in item.as_object().unwrap() {
            let responses = operation["responses"].as_object().unwrap();
            for status in ["413", "500", "503"] {
                assert_eq!(
                    responses[status]["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorEnvelope",
                    "{method} {path} {status}"
                );
            }
            let security = operation.get("security");
            if path.starts_with("/api/v1/") {
                assert_eq!(
                    security,
                    Some(&serde_json::json!([{"bearer": []}])),
                    "{method} {path}"
                );
                assert!(responses.contains_key("401"), "{method} {path}");
            } else {
                assert_eq!(security, None, "{method} {path} is open");
            }
        }
    }
    // The submission is a `oneOf` by `item_type` over the app's types.
    let submission = &document["components"]["schemas"]["Submission"];
    assert_eq!(submission["discriminator"]["propertyName"], "item_type");
    let mapping: BTreeSet<&str> = submission["discriminator"]["mapping"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(mapping, BTreeSet::from(["bare", "probe"]));
    assert_eq!(
        document.pointer(
            "/paths/~1api~1v1~1work-items/post/requestBody/content/application~1json/schema/$ref"
        ),
        Some(&serde_json::json!("#/components/schemas/Submission"))
    );
    // The command parameter lists the types' commands.
    let command = document
        .pointer("/paths/~1api~1v1~1work-items~1{id}~1{command}/post/parameters")
        .and_then(Value::as_array)
        .and_then(|parameters| parameters.iter().find(|p| p["name"] == "command"))
        .expect("the command parameter");
    let mut expected = [
        wq_testkit::types::PANIC_COMMAND,
        wq_testkit::types::PROBE_COMMAND,
    ];
    expected.sort_unstable();
    assert_eq!(command["schema"]["enum"], serde_json::json!(expected));
    let source = document
        .pointer("/paths/~1webhooks~1{source}/post/parameters/0")
        .expect("the source parameter");
    assert_eq!(source["schema"]["enum"], serde_json::json!(["probe"]));
    app.finish().await;
}

/// A path of the document with every `{parameter}` filled in.
fn concrete(path: &str) -> String {
    path.replace("{id}", "0192f0c4-6a1e-7c3e-9f00-000000000001")
        .replace("{command}", wq_testkit::types::PROBE_COMMAND)
        .replace("{source}", "probe")
}

/// The document and the router list the same routes: each documented
/// operation is routed (not the fallback's 404 nor a 405), and every other
/// method on a documented path is a 405, so no method is routed without
/// being documented. The router takes its routes only from the documented
/// handlers (`OpenApiRouter::routes`); `routes_come_only_from_documented_handlers`
/// holds the code to that.
#[tokio::test]
async fn every_routed_operation_is_documented_and_every_documented_one_routed() {
    let app = api_app(Backend::Sqlite).start().await;
    let document = document(&app).await;
    let mut operations = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in METHODS {
            let documented = item.get(method).is_some();
            if documented {
                operations.push(format!("{} {path}", method.to_uppercase()));
            }
            let response = app
                .request_as(
                    method.to_uppercase().parse().unwrap(),
                    &concrete(path),
                    &app.tokens.admin,
                )
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body = response.text().await.unwrap();
            if documented {
                assert_ne!(status, 405, "{method} {path}: {body}");
                assert!(
                    !body.contains("no such route"),
                    "{method} {path} is documented but not routed: {body}"
                );
            } else {
                assert_eq!(
                    status, 405,
                    "{method} {path} is routed but not documented: {body}"
                );
            }
        }
    }
    operations.sort();
    assert_eq!(
        operations,
        [
            "GET /api/openapi.json",
            "GET /api/v1/audit",
            "GET /api/v1/me",
            "GET /api/v1/work-items",
            "GET /api/v1/work-items/{id}",
            "GET /api/v1/work-items/{id}/audit",
            "GET /healthz",
            "GET /metrics",
            "GET /readyz",
            "POST /api/v1/work-items",
            "POST /api/v1/work-items/{id}/retry",
            "POST /api/v1/work-items/{id}/{command}",
            "POST /webhooks/{source}",
        ]
    );
    app.finish().await;
}

/// The router mounts nothing beside the documented handlers: no axum
/// `.route(` or `.route_service(` in the modules that build it.
#[test]
fn routes_come_only_from_documented_handlers() {
    for (file, source) in [
        ("lib.rs", include_str!("../../src/lib.rs")),
        ("openapi.rs", include_str!("../../src/openapi.rs")),
    ] {
        for forbidden in [".route(", ".route_service(", ".nest_service("] {
            assert!(
                !source.contains(forbidden),
                "{file} mounts a route with `{forbidden}`: use `.routes(routes!(handler))` so it is documented"
            );
        }
    }
}

#[tokio::test]
async fn the_document_reads_as_reviewed() {
    let app = api_app(Backend::Sqlite).start().await;
    let mut document = document(&app).await;
    document["info"]["version"] = Value::from("[version]");
    insta::assert_json_snapshot!(document);
    app.finish().await;
}

/// The contract run can fail: against the probe types, whose `explode`
/// command panics (a 500), schemathesis reports the server error.
#[tokio::test]
async fn schemathesis_reports_a_server_error() {
    let app = api_app(Backend::Sqlite).start().await;
    let item = app.insert(wq_testkit::types::PROBE_TYPE).await;
    let schema_url = app.url("/api/openapi.json");
    let token = app.tokens.admin.clone();
    let root = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let outcome = tokio::task::spawn_blocking(move || {
        wq_testkit::schemathesis::run(
            &root,
            &wq_testkit::schemathesis::Run {
                schema_url: &schema_url,
                headers: vec![("Authorization", format!("Bearer {token}"))],
                max_examples: 10,
                seed: 1,
                parameters: vec![
                    ("path.id", item.id.to_string()),
                    ("path.command", wq_testkit::types::PANIC_COMMAND.to_owned()),
                ],
                paths: Some("/work-items/\\{id\\}/\\{command\\}$"),
            },
        )
    })
    .await
    .expect("schemathesis ran");
    assert!(!outcome.success, "{}", outcome.output);
    assert!(
        outcome.output.contains("Server error"),
        "{}",
        outcome.output
    );
    app.finish().await;
}
