//! `GET /api/v1/work-items` (filters, keyset pages),
//! `GET /api/v1/work-items/{id}` (dimensions, 404, 400), and submissions
//! refused by shape or by type.

use serde_json::{Value, json};
use wq_api::models::{ItemBody, ItemDetail, ItemList};
use wq_core::{DimensionStatus, DimensionUpdate, ItemId, Phase};
use wq_testkit::http::{error_of, json_of};
use wq_testkit::types::{BARE_TYPE, PROBE_TYPE};
use wq_testkit::{Backend, backend_tests};

use crate::api_app;

fn ids(list: &ItemList) -> Vec<ItemId> {
    list.items.iter().map(|item| item.id).collect()
}

async fn list_filters_by_phase_and_type(backend: Backend) {
    let app = api_app(backend).start().await;
    let mut alphas = Vec::new();
    for _ in 0..3 {
        alphas.push(app.insert("alpha").await);
    }
    let betas = [app.insert("beta").await, app.insert("beta").await];
    let failed = app.set_phase(&alphas[0], Phase::Failed).await;

    let all: ItemList = json_of(app.get("/api/v1/work-items").await).await;
    let mut expected: Vec<ItemId> = alphas.iter().chain(&betas).map(|item| item.id).collect();
    expected.sort_by(|a, b| b.cmp(a));
    assert_eq!(ids(&all), expected, "newest first");
    assert_eq!(all.next_before, None);

    let list: ItemList = json_of(app.get("/api/v1/work-items?item_type=beta").await).await;
    assert_eq!(ids(&list), vec![betas[1].id, betas[0].id]);

    let list: ItemList = json_of(app.get("/api/v1/work-items?phase=failed").await).await;
    assert_eq!(list.items, vec![ItemBody::from(failed)]);

    let list: ItemList = json_of(
        app.get("/api/v1/work-items?phase=active&item_type=alpha")
            .await,
    )
    .await;
    assert_eq!(ids(&list), vec![alphas[2].id, alphas[1].id]);

    let list: ItemList = json_of(app.get("/api/v1/work-items?phase=cancelled").await).await;
    assert_eq!(
        list,
        ItemList {
            items: Vec::new(),
            next_before: None
        }
    );
    app.finish().await;
}
backend_tests!(list_filters_by_phase_and_type);

async fn list_pages_with_a_keyset_cursor(backend: Backend) {
    let app = api_app(backend).start().await;
    let mut expected = Vec::new();
    for _ in 0..5 {
        expected.push(app.insert("alpha").await.id);
    }
    expected.sort_by(|a, b| b.cmp(a));

    let mut seen = Vec::new();
    let mut path = "/api/v1/work-items?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let page: ItemList = json_of(app.get(&path).await).await;
        pages += 1;
        assert!(page.items.len() <= 2);
        seen.extend(ids(&page));
        match page.next_before {
            Some(cursor) => {
                assert_eq!(
                    Some(&cursor),
                    seen.last(),
                    "the cursor is the page's last id"
                );
                path = format!("/api/v1/work-items?limit=2&before={cursor}");
            }
            None => break,
        }
    }
    assert_eq!(seen, expected);
    assert_eq!(pages, 3);

    // A full last page has no next cursor.
    let page: ItemList = json_of(app.get("/api/v1/work-items?limit=5").await).await;
    assert_eq!(page.items.len(), 5);
    assert_eq!(page.next_before, None);
    app.finish().await;
}
backend_tests!(list_pages_with_a_keyset_cursor);

async fn list_rejects_bad_parameters_by_name(backend: Backend) {
    let app = api_app(backend).start().await;
    let cases = [
        ("phase=pending", "phase"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=-1", "limit"),
        ("before=not-an-id", "before"),
        ("item_type=", "item_type"),
        ("colour=red", "colour"),
        ("limit=5&limit=6", "limit"),
    ];
    for (query, field) in cases {
        let envelope = error_of(app.get(&format!("/api/v1/work-items?{query}")).await, 400).await;
        assert_eq!(envelope.error.code, "invalid_parameter", "{query}");
        assert_eq!(envelope.error.field.as_deref(), Some(field), "{query}");
    }
    let envelope = error_of(app.get("/api/v1/work-items?phase=pending").await, 400).await;
    assert_eq!(
        envelope.error.message,
        "unknown phase \"pending\": expected one of active, completed, failed, cancelled"
    );
    app.finish().await;
}
backend_tests!(list_rejects_bad_parameters_by_name);

async fn show_returns_the_item_with_its_dimensions(backend: Backend) {
    let app = api_app(backend).start().await;
    let item = app
        .insert_with(
            "alpha",
            vec![
                DimensionUpdate::new("needs_ci", true).detail(json!({"pipeline": 7})),
                DimensionUpdate::new("needs_review", false).variant("alice"),
            ],
        )
        .await;

    let response = app.get(&format!("/api/v1/work-items/{}", item.id)).await;
    let raw: Value = json_of(response).await;
    let mut keys: Vec<&str> = raw
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "actionable",
            "attempts",
            "caller_identity",
            "created_at",
            "dimensions",
            "error",
            "id",
            "idempotency_key",
            "item_type",
            "last_event_at",
            "leased_until",
            "phase",
            "updated_at",
        ]
    );
    assert_eq!(raw["id"], json!(item.id.to_string()));
    assert_eq!(raw["phase"], json!("active"));
    assert_eq!(raw["caller_identity"], json!("tester"));

    let mut detail: ItemDetail = serde_json::from_value(raw).unwrap();
    assert_eq!(detail.item, ItemBody::from(item));
    detail
        .dimensions
        .sort_by(|a, b| (&a.dimension, &a.variant).cmp(&(&b.dimension, &b.variant)));
    let summary: Vec<(&str, &str, DimensionStatus, &Value)> = detail
        .dimensions
        .iter()
        .map(|row| {
            (
                row.dimension.as_str(),
                row.variant.as_str(),
                row.status,
                &row.detail,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "needs_ci",
                "",
                DimensionStatus::True,
                &json!({"pipeline": 7})
            ),
            ("needs_review", "alice", DimensionStatus::False, &json!({})),
        ]
    );
    app.finish().await;
}
backend_tests!(show_returns_the_item_with_its_dimensions);

async fn show_answers_404_and_400(backend: Backend) {
    let app = api_app(backend).start().await;
    let unknown = ItemId::new_v7();
    let envelope = error_of(app.get(&format!("/api/v1/work-items/{unknown}")).await, 404).await;
    assert_eq!(
        serde_json::to_value(envelope).unwrap(),
        json!({"error": {
            "code": "not_found",
            "message": format!("work item {unknown} not found"),
            "field": null,
        }})
    );

    let envelope = error_of(app.get("/api/v1/work-items/12345").await, 400).await;
    assert_eq!(
        serde_json::to_value(envelope).unwrap(),
        json!({"error": {
            "code": "invalid_parameter",
            "message": "id must be a work item id (a UUID), got \"12345\"",
            "field": "id",
        }})
    );
    app.finish().await;
}
backend_tests!(show_answers_404_and_400);

/// A type registered without submissions refuses the body's `item_type`:
/// 422 naming the field, like an unknown type; nothing is stored.
#[tokio::test]
async fn a_type_that_takes_no_submissions_is_an_invalid_item_type() {
    let app = api_app(Backend::Sqlite).start().await;
    let response = app
        .client
        .post(app.url("/api/v1/work-items"))
        .json(&json!({"item_type": BARE_TYPE}))
        .send()
        .await
        .unwrap();
    assert!(!response.headers().contains_key("allow"));
    let envelope = error_of(response, 422).await;
    assert_eq!(
        serde_json::to_value(envelope).unwrap(),
        json!({"error": {
            "code": "invalid_field",
            "message": "item_type: item type \"bare\" takes no submissions",
            "field": "item_type",
            "errors": [{
                "field": "item_type",
                "message": "item type \"bare\" takes no submissions",
            }],
        }})
    );
    let list: ItemList = json_of(app.get("/api/v1/work-items").await).await;
    assert!(list.items.is_empty(), "nothing stored: {list:?}");
    app.finish().await;
}

/// A submission that is JSON but not an object names the body.
#[tokio::test]
async fn a_submission_that_is_not_an_object_names_the_body() {
    let app = api_app(Backend::Sqlite).start().await;
    for body in [json!([BARE_TYPE]), json!("probe"), json!(42), Value::Null] {
        let response = app
            .client
            .post(app.url("/api/v1/work-items"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let envelope = error_of(response, 422).await;
        assert_eq!(
            serde_json::to_value(envelope).unwrap(),
            json!({"error": {
                "code": "invalid_field",
                "message": "body: must be a JSON object",
                "field": "body",
                "errors": [{"field": "body", "message": "must be a JSON object"}],
            }}),
            "{body}"
        );
    }
    app.finish().await;
}

/// A reader scoped to `team/*`: pages are full of items it may read, the
/// cursor never names a hidden item, and a hidden item is a 404 like an
/// unknown one (not a 403), while a readable one shows.
async fn a_scoped_reader_pages_only_visible_items_and_gets_404_for_hidden_ones(backend: Backend) {
    let app = api_app(backend).start().await;
    let admin = app.tokens.admin.clone();
    let team = app.tokens.team.clone();
    // Newest first: hidden items sit between and around the visible ones.
    let mut visible = Vec::new();
    let mut hidden = Vec::new();
    for round in 0..3 {
        hidden.push(
            app.submit_probe(&admin, "gitlab", "other/app", json!({}))
                .await,
        );
        visible.push(
            app.submit_probe(&admin, "gitlab", &format!("team/app{round}"), json!({}))
                .await,
        );
        hidden.push(
            app.submit_probe(&admin, "gitlab", "other/lib", json!({}))
                .await,
        );
        // `team/*` does not reach below one segment.
        hidden.push(
            app.submit_probe(&admin, "gitlab", "team/sub/x", json!({}))
                .await,
        );
    }
    visible.reverse();

    let page = |before: Option<ItemId>| {
        let path = match before {
            Some(before) => format!("/api/v1/work-items?limit=2&before={before}"),
            None => "/api/v1/work-items?limit=2".to_owned(),
        };
        let request = app.request_as(reqwest::Method::GET, &path, &team);
        async move { json_of::<ItemList>(request.send().await.unwrap()).await }
    };
    let first = page(None).await;
    assert_eq!(
        ids(&first),
        visible[..2].to_vec(),
        "a full page of visible items"
    );
    assert_eq!(
        first.next_before,
        Some(visible[1]),
        "the cursor is a visible id"
    );
    let second = page(first.next_before).await;
    assert_eq!(ids(&second), visible[2..].to_vec());
    assert_eq!(second.next_before, None, "no more visible items");

    // The admin sees everything.
    let all: ItemList = json_of(app.get("/api/v1/work-items?limit=500").await).await;
    assert_eq!(all.items.len(), visible.len() + hidden.len());

    for id in &hidden {
        let response = app
            .request_as(
                reqwest::Method::GET,
                &format!("/api/v1/work-items/{id}"),
                &team,
            )
            .send()
            .await
            .unwrap();
        let envelope = error_of(response, 404).await;
        assert_eq!(envelope.error.message, format!("work item {id} not found"));
    }
    let response = app
        .request_as(
            reqwest::Method::GET,
            &format!("/api/v1/work-items/{}", visible[0]),
            &team,
        )
        .send()
        .await
        .unwrap();
    let detail: ItemDetail = json_of(response).await;
    assert_eq!(detail.item.id, visible[0]);
    app.finish().await;
}
backend_tests!(a_scoped_reader_pages_only_visible_items_and_gets_404_for_hidden_ones);

/// A 200 KB unknown field name is not echoed back: every quoted name in
/// the 422 is cut to 64 characters.
async fn a_huge_field_name_is_cut_in_the_error(backend: Backend) {
    let app = api_app(backend).start().await;
    let name = "n".repeat(200 * 1024);
    let response = app
        .client
        .post(app.url("/api/v1/work-items"))
        .json(&json!({"item_type": PROBE_TYPE, &name: 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 422);
    let text = response.text().await.unwrap();
    assert!(text.len() < 1_000, "{} bytes: {}", text.len(), &text[..200]);
    let envelope: wq_api::ErrorEnvelope = serde_json::from_str(&text).unwrap();
    let cut = format!("{}…", "n".repeat(64));
    assert_eq!(envelope.error.field.as_deref(), Some(cut.as_str()));
    assert_eq!(envelope.error.errors[0].field, cut);
    assert_eq!(
        envelope.error.errors[0].message,
        format!("unknown field \"{cut}\"")
    );

    // A long unknown query parameter name, as field and in the message.
    let long = "q".repeat(10_000);
    let envelope = error_of(app.get(&format!("/api/v1/work-items?{long}=1")).await, 400).await;
    let cut = format!("{}…", "q".repeat(64));
    assert_eq!(envelope.error.field.as_deref(), Some(cut.as_str()));
    assert!(
        envelope.error.message.contains(&format!("\"{cut}\"")),
        "{}",
        envelope.error.message
    );
    assert!(
        envelope.error.message.len() < 400,
        "{}",
        envelope.error.message
    );
    app.finish().await;
}
backend_tests!(a_huge_field_name_is_cut_in_the_error);

/// `GET /api/v1/audit` answers the trail only up to where no record is
/// still being written. PostgreSQL numbers a record when its transaction
/// appends it, and transactions commit in any order: a client following
/// the trail with `after` would pass over a record that commits after one
/// with a higher number. While one is in progress below a committed one,
/// the listing answers 503 (after its short wait) rather than the higher
/// one alone; once it committed, both, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trail_listing_never_answers_past_a_record_in_progress() {
    use wq_store::audit::NewAudit;
    let app = api_app(Backend::Postgres).start().await;
    let pg = wq_store::postgres::PgStore::connect(&app.database_url, 2)
        .await
        .unwrap();
    let (a, b) = (app.insert("alpha").await.id, app.insert("alpha").await.id);
    let now = app.clock.now();
    let record = |item: ItemId, kind: &str| NewAudit::new(item, now, "engine", kind);
    let seqs = |page: &Value| -> Vec<i64> {
        page["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|record| record["seq"].as_i64().unwrap())
            .collect()
    };
    let before: Value = json_of(app.get("/api/v1/audit").await).await;
    let last = *seqs(&before).last().unwrap();

    let (slow, low) = wq_store::testing::append_uncommitted(&pg, record(a, "step.slow")).await;
    let (fast, high) = wq_store::testing::append_uncommitted(&pg, record(b, "step.fast")).await;
    fast.commit().await.unwrap();
    assert!(last < low && low < high);
    let busy = error_of(app.get(&format!("/api/v1/audit?after={last}")).await, 503).await;
    assert!(
        busy.error.message.contains("still being written"),
        "{}",
        busy.error.message
    );
    slow.commit().await.unwrap();
    let page: Value = json_of(app.get(&format!("/api/v1/audit?after={last}")).await).await;
    assert_eq!(seqs(&page), vec![low, high]);
    pg.pool().close().await;
    app.finish().await;
}
