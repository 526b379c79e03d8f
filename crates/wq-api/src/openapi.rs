//! The OpenAPI 3.1 document of the HTTP surface, served at
//! `GET /api/openapi.json`.
//!
//! It is generated from the code: every handler carries its
//! `#[utoipa::path]`, the wire types derive `utoipa::ToSchema`, and
//! [`crate::router`] mounts the handlers through utoipa-axum's
//! `OpenApiRouter`, so a route and its documentation are one entry
//! ([`routes`]). `document` then adds what only the running service
//! knows, from its [`TypeRegistry`] and webhook receivers:
//!
//! - the submission body of `POST /api/v1/work-items`: a `oneOf` by
//!   `item_type` over each type's [`wq_core::ItemType::submission_schema`]
//!   (a type without one: any object naming it);
//! - the `{command}` of `POST /api/v1/work-items/{id}/{command}`: the
//!   commands the types offer; the `{source}` of `POST /webhooks/{source}`:
//!   the sources their receivers take;
//! - the bearer scheme on every `/api/v1` operation, and the error answers
//!   every route can give (the [`ErrorEnvelope`]): 401 and 403 under
//!   `/api/v1`, 413, 500 and 503 everywhere.

use serde_json::{Value, json};
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use wq_core::TypeRegistry;

use crate::error::ErrorEnvelope;
use crate::routes::{health, items, me, webhooks};
use crate::state::AppState;

/// Where the document is served.
pub const DOCUMENT_PATH: &str = "/api/openapi.json";
/// The name of the bearer security scheme.
pub const BEARER_SCHEME: &str = "bearer";
/// The component holding the submission's `oneOf`.
pub const SUBMISSION_SCHEMA: &str = "Submission";

/// The document's fixed part: title, version, tags, the bearer scheme and
/// the schemas every answer refers to.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "workqueue",
        description = "Callers submit the desired state of a change as data; workqueue inspects it and owns the merge request's (pull request's) life. Every error answers with the `ErrorEnvelope`. Every `/api/v1` route needs `Authorization: Bearer <token>` and a rule granting what it does.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    components(schemas(ErrorEnvelope)),
    tags(
        (name = "work items", description = "Submissions, items, commands and the audit trail."),
        (name = "caller", description = "Who the credentials belong to."),
        (name = "webhooks", description = "Forge deliveries, authenticated by the forge's own signature or token."),
        (name = "operations", description = "Health, readiness, metrics and this document."),
    )
)]
struct ApiDoc;

/// Every route of the HTTP surface with its documentation, and the bearer
/// check on `/api/v1`; [`crate::router`] adds the fallbacks and the
/// middleware. The one list both the router and the document come from.
pub(crate) fn routes(state: &AppState) -> OpenApiRouter<AppState> {
    let api = OpenApiRouter::new()
        .routes(routes!(items::list, items::submit))
        .routes(routes!(items::show))
        .routes(routes!(items::audit))
        .routes(routes!(items::audit_trail))
        .routes(routes!(items::retry))
        .routes(routes!(items::command))
        // Every route above needs a bearer token; unknown routes stay 404.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::auth::require_bearer,
        ))
        // `/me` authenticates itself: it also takes the OAuth proxy's header.
        .routes(routes!(me::me));
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(crate::metrics::scrape))
        .routes(routes!(serve_document))
        .routes(routes!(webhooks::receive))
        .nest("/api/v1", api)
}

/// The document [`crate::router`] serves for `state` (its item types).
pub fn openapi_document(state: &AppState) -> Value {
    document(routes(state).into_openapi(), state)
}

/// The generated document completed from the registry (see the module
/// documentation).
pub(crate) fn document(openapi: utoipa::openapi::OpenApi, state: &AppState) -> Value {
    let types = &state.types;
    let mut document = serde_json::to_value(&openapi).expect("the document serializes");
    document["info"]["version"] = json!(env!("CARGO_PKG_VERSION"));
    document["components"]["securitySchemes"] = json!({
        BEARER_SCHEME: {
            "type": "http",
            "scheme": "bearer",
            "description": "A static token, or a JWT from a configured issuer (OIDC), or an OpenShift token; rules in the `auth` configuration grant permissions (read, submit, retry, admin) per item type, forge and project.",
        }
    });
    add_submission(&mut document, types);
    add_commands(&mut document, types);
    let sources: Vec<&str> = state.webhooks.keys().copied().collect();
    restrict_parameter(
        &mut document,
        "/paths/~1webhooks~1{source}/post/parameters",
        "source",
        sources,
        "This service's item types receive no webhooks.",
    );
    let paths = document["paths"]
        .as_object_mut()
        .expect("the document has paths");
    for (path, item) in paths.iter_mut() {
        let api = path.starts_with("/api/v1/");
        for operation in item
            .as_object_mut()
            .into_iter()
            .flat_map(|item| item.values_mut())
        {
            let Some(operation) = operation.as_object_mut() else {
                continue;
            };
            if api {
                operation.insert("security".into(), json!([{BEARER_SCHEME: []}]));
            }
            let responses = operation
                .entry("responses")
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("responses are an object");
            let mut common = vec![
                (
                    "413",
                    "The request body is larger than the configured limit.",
                ),
                ("500", "An internal error; the detail is in the server log."),
                (
                    "503",
                    "The request timed out, or the database (or the token's issuer) is not reachable.",
                ),
            ];
            if api {
                common.push(("401", "Missing or invalid credentials."));
                if path != "/api/v1/me" {
                    common.push(("403", "No rule of the caller grants what the request does."));
                }
            }
            for (status, description) in common {
                responses
                    .entry(status)
                    .or_insert_with(|| error_response(description));
            }
        }
    }
    document
}

/// A response of the error envelope.
fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}},
    })
}

/// `components.schemas.Submission`: one branch per item type, chosen by
/// `item_type`; the submit operation's body refers to it.
fn add_submission(document: &mut Value, types: &TypeRegistry) {
    let schemas = &mut document["components"]["schemas"];
    let mut branches = Vec::new();
    let mut mapping = serde_json::Map::new();
    for name in types.names() {
        let handler = types.get(name).expect("a registered type");
        let schema = handler.submission_schema().unwrap_or_else(|| {
            json!({
                "type": "object",
                "description": format!("A submission of item type `{name}`; the type documents no schema."),
                "required": ["item_type"],
                "properties": {"item_type": {"type": "string", "const": name}},
            })
        });
        let component = format!("{SUBMISSION_SCHEMA}_{name}");
        let reference = format!("#/components/schemas/{component}");
        schemas[&component] = schema;
        branches.push(json!({"$ref": reference}));
        mapping.insert(name.to_owned(), json!(reference));
    }
    schemas[SUBMISSION_SCHEMA] = if branches.is_empty() {
        json!({
            "type": "object",
            "description": "This service takes no item type: every submission is refused.",
            "required": ["item_type"],
            "properties": {"item_type": {"type": "string"}},
        })
    } else {
        json!({
            "description": "A submission; `item_type` picks the schema.",
            "oneOf": branches,
            "discriminator": {"propertyName": "item_type", "mapping": mapping},
        })
    };
    if let Some(body) = document
        .pointer_mut("/paths/~1api~1v1~1work-items/post/requestBody/content/application~1json")
    {
        body["schema"] = json!({"$ref": format!("#/components/schemas/{SUBMISSION_SCHEMA}")});
    }
}

/// The `{command}` parameter names the commands the types offer.
fn add_commands(document: &mut Value, types: &TypeRegistry) {
    let commands: Vec<&str> = types
        .names()
        .filter_map(|name| types.get(name))
        .flat_map(|handler| handler.commands().iter().map(|spec| spec.name))
        .collect();
    restrict_parameter(
        document,
        "/paths/~1api~1v1~1work-items~1{id}~1{command}/post/parameters",
        "command",
        commands,
        "This service's item types offer no command.",
    );
}

/// The parameter `name` of the operation whose parameters are at
/// `pointer` takes one of `values` (sorted, each once); with none, it says
/// `none`.
fn restrict_parameter(
    document: &mut Value,
    pointer: &str,
    name: &str,
    mut values: Vec<&str>,
    none: &str,
) {
    values.sort_unstable();
    values.dedup();
    let Some(parameters) = document.pointer_mut(pointer).and_then(Value::as_array_mut) else {
        return;
    };
    for parameter in parameters {
        if parameter["name"] == name {
            let schema = &mut parameter["schema"];
            if values.is_empty() {
                schema["description"] = json!(none);
            } else {
                schema["enum"] = json!(values);
            }
        }
    }
}

/// This OpenAPI document, as the router was built with it.
#[utoipa::path(
    get,
    path = "/api/openapi.json",
    tag = "operations",
    responses((status = 200, description = "This document (OpenAPI 3.1).", content_type = "application/json", body = Object)),
)]
pub(crate) async fn serve_document(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        state.openapi.as_ref().clone(),
    )
        .into_response()
}
