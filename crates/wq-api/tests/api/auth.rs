//! Authentication and authorization of `/api/v1`: 401 with a challenge for
//! anonymous callers and bad tokens on every route, 403 for what no rule
//! grants, submissions scoped by project, the caller identity taken from
//! the credentials, `/me` with and without the OAuth-proxy bridge, JWTs from
//! a local issuer (503 when the issuer is down), and the routes that stay
//! open.

use reqwest::Method;
use serde_json::{Value, json};
use wq_api::error::UNAUTHENTICATED_MESSAGE;
use wq_api::models::{ItemList, MeBody, MeRule, SubmitResponse};
use wq_auth::AuthConfig;
use wq_auth::config::RuleConfig;
use wq_core::{Phase, WorkItem};
use wq_testkit::http::{error_of, json_of};
use wq_testkit::oidc::{FakeIssuer, ec_key, sign};
use wq_testkit::types::{PROBE_COMMAND, PROBE_TYPE};
use wq_testkit::{Backend, TestApp, backend_tests, bearer};

use crate::api_app;

const BARE_CHALLENGE: &str = "Bearer realm=\"workqueue\"";
const INVALID_TOKEN_CHALLENGE: &str = "Bearer realm=\"workqueue\", error=\"invalid_token\"";

/// A probe submission for `project` on forge `gitlab`.
fn probe(project: &str) -> Value {
    json!({"item_type": PROBE_TYPE, "forge": "gitlab", "project": project})
}

/// Every `/api/v1` route that needs a bearer token, as (method, path, body).
fn routes(item: &WorkItem) -> Vec<(Method, String, Option<Value>)> {
    let id = item.id;
    vec![
        (Method::GET, "/api/v1/work-items".into(), None),
        (
            Method::POST,
            "/api/v1/work-items".into(),
            Some(probe("team/x")),
        ),
        (Method::GET, format!("/api/v1/work-items/{id}"), None),
        (Method::POST, format!("/api/v1/work-items/{id}/retry"), None),
        (
            Method::POST,
            format!("/api/v1/work-items/{id}/{PROBE_COMMAND}"),
            None,
        ),
        (Method::GET, "/api/v1/me".into(), None),
    ]
}

/// Submits `body` as the holder of `token`.
async fn submit_as(app: &TestApp, token: &str, body: &Value) -> reqwest::Response {
    app.request_as(Method::POST, "/api/v1/work-items", token)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Asserts a 401 with `challenge` and the generic envelope.
async fn assert_unauthenticated(response: reqwest::Response, challenge: &str, what: &str) {
    assert_eq!(response.status().as_u16(), 401, "{what}");
    assert_eq!(
        response.headers()["www-authenticate"],
        challenge,
        "{what}: challenge"
    );
    let envelope = error_of(response, 401).await;
    assert_eq!(
        serde_json::to_value(envelope).unwrap(),
        json!({"error": {
            "code": "unauthenticated",
            "message": UNAUTHENTICATED_MESSAGE,
            "field": null,
        }}),
        "{what}"
    );
}

async fn every_route_refuses_anonymous_callers_and_bad_tokens(backend: Backend) {
    let app = api_app(backend).start().await;
    let item = app.insert(PROBE_TYPE).await;
    let item = app.set_phase(&item, Phase::Failed).await;
    let (forged, _) = wq_auth::new_static_token("admin");
    let cases = [
        (None, BARE_CHALLENGE),
        (Some(format!("Basic {}", app.tokens.admin)), BARE_CHALLENGE),
        (Some("Bearer".to_owned()), BARE_CHALLENGE),
        (Some(bearer(&forged)), INVALID_TOKEN_CHALLENGE),
        (Some(bearer("not.a.jwt")), INVALID_TOKEN_CHALLENGE),
    ];
    for (method, path, body) in routes(&item) {
        for (authorization, challenge) in &cases {
            let mut request = app.request(method.clone(), &path, authorization.as_deref());
            if let Some(body) = &body {
                request = request.json(body);
            }
            let response = request.send().await.unwrap();
            let what = format!("{method} {path} with {authorization:?}");
            assert_unauthenticated(response, challenge, &what).await;
        }
    }
    // Nothing was submitted, retried or notified.
    let stored = app.store.item_get(item.id).await.unwrap().unwrap();
    assert_eq!(stored, item);
    let list: ItemList = json_of(app.get("/api/v1/work-items").await).await;
    assert_eq!(list.items.len(), 1);
    assert_eq!(app.engine.in_flight(), 0);
    app.finish().await;
}
backend_tests!(every_route_refuses_anonymous_callers_and_bad_tokens);

#[tokio::test]
async fn a_reader_may_read_but_not_write() {
    let app = api_app(Backend::Sqlite).start().await;
    let item = app.insert(PROBE_TYPE).await;
    let item = app.set_phase(&item, Phase::Failed).await;
    let reader = app.tokens.reader.clone();

    let list = app
        .request_as(Method::GET, "/api/v1/work-items", &reader)
        .send()
        .await
        .unwrap();
    let list: ItemList = json_of(list).await;
    assert_eq!(list.items.len(), 1);
    let shown = app
        .request_as(
            Method::GET,
            &format!("/api/v1/work-items/{}", item.id),
            &reader,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(shown.status().as_u16(), 200);

    let writes = [
        (submit_as(&app, &reader, &probe("team/x")).await, "submit"),
        (
            app.request_as(
                Method::POST,
                &format!("/api/v1/work-items/{}/retry", item.id),
                &reader,
            )
            .send()
            .await
            .unwrap(),
            "retry",
        ),
        (
            app.request_as(
                Method::POST,
                &format!("/api/v1/work-items/{}/{PROBE_COMMAND}", item.id),
                &reader,
            )
            .send()
            .await
            .unwrap(),
            "retry",
        ),
    ];
    for (response, permission) in writes {
        assert!(
            !response.headers().contains_key("www-authenticate"),
            "a 403 carries no challenge"
        );
        let envelope = error_of(response, 403).await;
        assert_eq!(
            serde_json::to_value(envelope).unwrap(),
            json!({"error": {
                "code": "forbidden",
                "message": format!(
                    "forbidden: no rule of the caller grants {permission} for this request"
                ),
                "field": null,
            }})
        );
    }
    let stored = app.store.item_get(item.id).await.unwrap().unwrap();
    assert_eq!(
        stored.phase,
        Phase::Failed,
        "the refused retry changed nothing"
    );
    let list: ItemList = json_of(app.get("/api/v1/work-items").await).await;
    assert_eq!(list.items.len(), 1, "the refused submit stored nothing");
    assert_eq!(app.engine.in_flight(), 0);

    // Authenticated but matched by no rule: every route is 403, `/me` is not.
    let stranger = app.tokens.stranger.clone();
    for path in [
        "/api/v1/work-items".to_owned(),
        format!("/api/v1/work-items/{}", item.id),
    ] {
        let response = app
            .request_as(Method::GET, &path, &stranger)
            .send()
            .await
            .unwrap();
        assert_eq!(
            error_of(response, 403).await.error.code,
            "forbidden",
            "{path}"
        );
    }
    let me = app
        .request_as(Method::GET, "/api/v1/me", &stranger)
        .send()
        .await
        .unwrap();
    let me: MeBody = json_of(me).await;
    assert_eq!(me.rules, Vec::new());
    assert_eq!(me.permissions, Vec::<String>::new());
    app.finish().await;
}

/// A caller granted nothing learns nothing from a command route: existing
/// and unknown items, known and unknown commands are all the same 403.
async fn a_caller_granted_nothing_cannot_probe_items_or_commands(backend: Backend) {
    let app = api_app(backend).start().await;
    let item = app.insert(PROBE_TYPE).await;
    let stranger = app.tokens.stranger.clone();
    let existing = item.id;
    let unknown = wq_core::ItemId::new_v7();
    let mut answers = Vec::new();
    for (id, command) in [
        (existing, PROBE_COMMAND),
        (unknown, PROBE_COMMAND),
        (existing, "no-such-command"),
        (unknown, "no-such-command"),
    ] {
        let response = app
            .request_as(
                Method::POST,
                &format!("/api/v1/work-items/{id}/{command}"),
                &stranger,
            )
            .send()
            .await
            .unwrap();
        let envelope = error_of(response, 403).await;
        assert_eq!(envelope.error.code, "forbidden", "{id} {command}");
        answers.push(serde_json::to_value(envelope).unwrap());
    }
    assert!(
        answers.iter().all(|answer| *answer == answers[0]),
        "every refusal is the same: {answers:?}"
    );
    assert_eq!(
        answers[0],
        json!({"error": {
            "code": "forbidden",
            "message": "forbidden: no rule of the caller grants retry for this request",
            "field": null,
        }})
    );
    assert_eq!(app.engine.in_flight(), 0);
    app.finish().await;
}
backend_tests!(a_caller_granted_nothing_cannot_probe_items_or_commands);

async fn submissions_and_items_are_scoped_by_project(backend: Backend) {
    let app = api_app(backend).start().await;
    let team = app.tokens.team.clone();

    let refused = submit_as(&app, &team, &probe("other/x")).await;
    assert_eq!(error_of(refused, 403).await.error.code, "forbidden");
    let refused = submit_as(&app, &team, &probe("team/sub/x")).await;
    assert_eq!(
        error_of(refused, 403).await.error.code,
        "forbidden",
        "team/* stays within one segment"
    );
    let list: ItemList = json_of(app.get("/api/v1/work-items").await).await;
    assert!(list.items.is_empty(), "nothing stored: {list:?}");

    let response = submit_as(&app, &team, &probe("team/x")).await;
    assert_eq!(response.status().as_u16(), 201);
    let ours: SubmitResponse = response.json().await.unwrap();
    assert_eq!(
        ours.item.caller_identity.as_deref(),
        Some("team (token team, rule team)")
    );
    // The same project as the forge spells it, in another case.
    let response = submit_as(&app, &team, &probe("Team/Y")).await;
    assert_eq!(response.status().as_u16(), 201);
    let yours: SubmitResponse = response.json().await.unwrap();

    // An admin's item in another project: the team may not see or retry it.
    let response = app
        .client
        .post(app.url("/api/v1/work-items"))
        .json(&probe("other/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let theirs: SubmitResponse = response.json().await.unwrap();
    assert_eq!(
        theirs.item.caller_identity.as_deref(),
        Some("admin (token admin, rule admins)")
    );

    for (item, allowed) in [(&ours.item, true), (&theirs.item, false)] {
        let stored = app.store.item_get(item.id).await.unwrap().unwrap();
        app.set_phase(&stored, Phase::Failed).await;
        let shown = app
            .request_as(
                Method::GET,
                &format!("/api/v1/work-items/{}", item.id),
                &team,
            )
            .send()
            .await
            .unwrap();
        let retried = app
            .request_as(
                Method::POST,
                &format!("/api/v1/work-items/{}/retry", item.id),
                &team,
            )
            .send()
            .await
            .unwrap();
        if allowed {
            assert_eq!(shown.status().as_u16(), 200);
            assert_eq!(retried.status().as_u16(), 200);
        } else {
            // Outside the read scope an item does not exist for the caller.
            assert_eq!(error_of(shown, 404).await.error.code, "not_found");
            assert_eq!(error_of(retried, 404).await.error.code, "not_found");
        }
        let phase = app.store.item_get(item.id).await.unwrap().unwrap().phase;
        let expected = if allowed {
            Phase::Active
        } else {
            Phase::Failed
        };
        assert_eq!(phase, expected, "{}", item.id);
    }
    // A scoped reader's list shows only the items it may read; an
    // unscoped one (the admin) sees all three.
    let list = app
        .request_as(Method::GET, "/api/v1/work-items", &team)
        .send()
        .await
        .unwrap();
    let list: ItemList = json_of(list).await;
    let mut seen: Vec<_> = list.items.iter().map(|item| item.id).collect();
    seen.sort();
    let mut expected = vec![ours.item.id, yours.item.id];
    expected.sort();
    assert_eq!(seen, expected, "other/x is not listed for the team");
    let list: ItemList = json_of(app.get("/api/v1/work-items").await).await;
    assert_eq!(list.items.len(), 3);
    app.finish().await;
}
backend_tests!(submissions_and_items_are_scoped_by_project);

/// An item whose type reports no forge and project for it (here: inserted
/// without one) is not in the team's projects: a rule restricted to
/// projects neither lists, shows, retries nor commands it; unrestricted
/// rules do.
async fn an_item_in_an_unknown_project_is_only_for_unrestricted_rules(backend: Backend) {
    let app = api_app(backend).start().await;
    let item = app.insert(PROBE_TYPE).await;
    let item = app.set_phase(&item, Phase::Failed).await;
    let team = app.tokens.team.clone();
    let show = format!("/api/v1/work-items/{}", item.id);
    let retry = format!("/api/v1/work-items/{}/retry", item.id);
    let command = format!("/api/v1/work-items/{}/{PROBE_COMMAND}", item.id);
    for (method, path) in [
        (Method::GET, &show),
        (Method::POST, &retry),
        (Method::POST, &command),
    ] {
        let response = app
            .request_as(method.clone(), path, &team)
            .send()
            .await
            .unwrap();
        assert_eq!(
            error_of(response, 404).await.error.code,
            "not_found",
            "{method} {path}"
        );
    }
    let list = app
        .request_as(Method::GET, "/api/v1/work-items", &team)
        .send()
        .await
        .unwrap();
    let list: ItemList = json_of(list).await;
    assert!(list.items.is_empty(), "not listed for the team: {list:?}");
    let stored = app.store.item_get(item.id).await.unwrap().unwrap();
    assert_eq!(
        stored.phase,
        Phase::Failed,
        "the refused retry changed nothing"
    );

    // A reader without a project restriction sees it; the admin retries it.
    let shown = app
        .request_as(Method::GET, &show, &app.tokens.reader)
        .send()
        .await
        .unwrap();
    assert_eq!(shown.status().as_u16(), 200);
    let list = app
        .request_as(Method::GET, "/api/v1/work-items", &app.tokens.reader)
        .send()
        .await
        .unwrap();
    let list: ItemList = json_of(list).await;
    assert_eq!(list.items.len(), 1);
    assert_eq!(app.post(&retry).await.status().as_u16(), 200);
    app.finish().await;
}
backend_tests!(an_item_in_an_unknown_project_is_only_for_unrestricted_rules);

async fn the_caller_identity_comes_from_the_credentials(backend: Backend) {
    let app = api_app(backend).start().await;
    let mut body = probe("team/x");
    body["caller_identity"] = json!("mallory");
    let response = submit_as(&app, &app.tokens.team, &body).await;
    let envelope = error_of(response, 422).await;
    assert_eq!(envelope.error.code, "invalid_field");
    assert_eq!(envelope.error.field.as_deref(), Some("caller_identity"));
    let list: ItemList = json_of(app.get("/api/v1/work-items").await).await;
    assert!(list.items.is_empty(), "nothing stored: {list:?}");

    let response = submit_as(&app, &app.tokens.team, &probe("team/x")).await;
    let submitted: SubmitResponse = response.json().await.unwrap();
    let stored = app
        .store
        .item_get(submitted.item.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.caller_identity.as_deref(),
        Some("team (token team, rule team)")
    );

    // Commands get the identity of the rule that granted them.
    let response = app
        .request_as(
            Method::POST,
            &format!("/api/v1/work-items/{}/{PROBE_COMMAND}", stored.id),
            &app.tokens.team,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 202);
    let reply: Value = response.json().await.unwrap();
    assert_eq!(
        reply,
        json!({"caller_identity": "team (token team, rule team)"})
    );
    app.finish().await;
}
backend_tests!(the_caller_identity_comes_from_the_credentials);

fn all_permissions() -> Vec<String> {
    wq_auth::Permission::NAMES
        .iter()
        .map(|name| (*name).to_owned())
        .collect()
}

#[tokio::test]
async fn me_shows_the_caller_and_ignores_the_proxy_header_when_disabled() {
    let app = api_app(Backend::Sqlite).start().await;
    let me: MeBody = json_of(app.get("/api/v1/me").await).await;
    assert_eq!(
        me,
        MeBody {
            kind: "static_token".into(),
            subject: "admin".into(),
            name: "admin (token admin)".into(),
            issuer: None,
            token_name: Some("admin".into()),
            groups: vec!["admins".into()],
            rules: vec![MeRule {
                name: "admins".into(),
                permissions: vec!["admin".into()],
            }],
            permissions: all_permissions(),
            token: None,
        }
    );
    let response = app
        .request_as(Method::GET, "/api/v1/me", &app.tokens.team)
        .send()
        .await
        .unwrap();
    let me: Value = json_of(response).await;
    assert_eq!(
        me,
        json!({
            "kind": "static_token",
            "subject": "team",
            "name": "team (token team)",
            "token_name": "team",
            "groups": ["team"],
            "rules": [{"name": "team", "permissions": ["read", "submit", "retry"]}],
            "permissions": ["read", "submit", "retry"],
        })
    );

    // auth.oauth_proxy is off: the header is nobody's word.
    let response = app
        .request(Method::GET, "/api/v1/me", None)
        .header("x-forwarded-access-token", &app.tokens.admin)
        .send()
        .await
        .unwrap();
    assert_unauthenticated(response, BARE_CHALLENGE, "forwarded, proxy off").await;
    app.finish().await;
}

#[tokio::test]
async fn me_bridges_the_oauth_proxy_session_when_enabled() {
    let mut auth = AuthConfig::default();
    auth.oauth_proxy.enabled = true;
    let app = api_app(Backend::Sqlite).auth(auth).start().await;
    let response = app
        .request(Method::GET, "/api/v1/me", None)
        .header("x-forwarded-access-token", &app.tokens.reader)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["cache-control"], "no-store");
    let me: MeBody = json_of(response).await;
    assert_eq!(me.subject, "reader");
    assert_eq!(me.permissions, vec!["read".to_owned()]);
    assert_eq!(me.token.as_deref(), Some(app.tokens.reader.as_str()));

    // The token handed back works as a bearer token.
    let token = me.token.unwrap();
    let response = app
        .request_as(Method::GET, "/api/v1/work-items", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);

    // A bad session token is refused like a bad bearer token.
    let (forged, _) = wq_auth::new_static_token("reader");
    let response = app
        .request(Method::GET, "/api/v1/me", None)
        .header("x-forwarded-access-token", &forged)
        .send()
        .await
        .unwrap();
    assert_unauthenticated(response, INVALID_TOKEN_CHALLENGE, "forged session").await;

    // A bearer token wins over the header, and is not echoed.
    let response = app
        .request_as(Method::GET, "/api/v1/me", &app.tokens.admin)
        .header("x-forwarded-access-token", &app.tokens.reader)
        .send()
        .await
        .unwrap();
    assert!(!response.headers().contains_key("cache-control"));
    let me: MeBody = json_of(response).await;
    assert_eq!(me.subject, "admin");
    assert_eq!(me.token, None);

    // Only `/me` bridges: the work-item routes want a bearer token.
    let response = app
        .request(Method::GET, "/api/v1/work-items", None)
        .header("x-forwarded-access-token", &app.tokens.admin)
        .send()
        .await
        .unwrap();
    assert_unauthenticated(response, BARE_CHALLENGE, "forwarded on a work-item route").await;
    app.finish().await;
}

#[tokio::test]
async fn health_metrics_and_webhooks_need_no_token() {
    let app = api_app(Backend::Sqlite).start().await;
    for path in ["/healthz", "/readyz", "/metrics"] {
        let response = app.request(Method::GET, path, None).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
    }
    let response = app
        .request(Method::POST, "/webhooks/probe", None)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 202);
    let ack: Value = response.json().await.unwrap();
    assert_eq!(
        ack,
        json!({"status": "ignored", "reason": "the probe tracks nothing"})
    );
    let response = app
        .request(Method::POST, "/webhooks/elsewhere", None)
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(response, 404).await.error.code, "not_found");
    // Unknown API routes are 404 for anyone.
    let response = app
        .request(Method::GET, "/api/v1/nothing-here", None)
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(response, 404).await.error.code, "not_found");
    app.finish().await;
}

/// A JWT rule for `issuer`: `read` and `submit` on `team/*`.
fn jwt_rule(name: &str, issuer: &str) -> RuleConfig {
    RuleConfig {
        name: name.to_owned(),
        groups: None,
        issuer: Some(issuer.to_owned()),
        claims: Some(
            [
                ("aud".to_owned(), json!("workqueue")),
                ("sub".to_owned(), json!("project_path:team/app")),
            ]
            .into(),
        ),
        allow_any_subject: false,
        claims_case_insensitive: false,
        permissions: vec!["read".into(), "submit".into()],
        item_types: None,
        forges: None,
        projects: Some(vec!["team/*".into()]),
    }
}

#[tokio::test]
async fn a_jwt_from_a_trusted_issuer_is_authorized_by_its_rule() {
    let key = ec_key("ci-key");
    let issuer = FakeIssuer::start(&[&key]).await;
    // Nothing listens on port 1: this issuer is down.
    let down = "http://127.0.0.1:1";
    let mut auth = AuthConfig::default();
    auth.rules.push(jwt_rule("ci", &issuer.url));
    auth.rules.push(jwt_rule("ci-elsewhere", down));
    let app = api_app(Backend::Sqlite).auth(auth).start().await;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let claims = |iss: &str, aud: &str| {
        json!({
            "iss": iss, "sub": "project_path:team/app", "aud": aud,
            "iat": now, "exp": now + 600,
        })
    };
    let token = sign(&key, &claims(&issuer.url, "workqueue"));

    let response = submit_as(&app, &token, &probe("team/app")).await;
    assert_eq!(response.status().as_u16(), 201);
    let submitted: SubmitResponse = response.json().await.unwrap();
    assert_eq!(
        submitted.item.caller_identity,
        Some(format!(
            "project_path:team/app (issuer {}, rule ci)",
            issuer.url
        ))
    );
    let response = submit_as(&app, &token, &probe("other/app")).await;
    assert_eq!(error_of(response, 403).await.error.code, "forbidden");

    let response = app
        .request_as(Method::GET, "/api/v1/me", &token)
        .send()
        .await
        .unwrap();
    let me: MeBody = json_of(response).await;
    assert_eq!(me.kind, "jwt");
    assert_eq!(me.subject, "project_path:team/app");
    assert_eq!(me.issuer.as_deref(), Some(issuer.url.as_str()));
    assert_eq!(me.permissions, vec!["read".to_owned(), "submit".to_owned()]);
    assert_eq!(issuer.jwks_fetches(), 1, "the keys were fetched once");

    // A token for another audience is not accepted.
    let other = sign(&key, &claims(&issuer.url, "another-service"));
    let response = submit_as(&app, &other, &probe("team/app")).await;
    assert_unauthenticated(response, INVALID_TOKEN_CHALLENGE, "wrong audience").await;

    // An issuer that cannot be reached is the service's problem: 503.
    let unreachable = sign(&key, &claims(down, "workqueue"));
    let response = submit_as(&app, &unreachable, &probe("team/app")).await;
    assert!(!response.headers().contains_key("www-authenticate"));
    let envelope = error_of(response, 503).await;
    assert_eq!(envelope.error.code, "unavailable");
    let list: ItemList = json_of(app.get("/api/v1/work-items").await).await;
    assert_eq!(list.items.len(), 1);
    app.finish().await;
}
