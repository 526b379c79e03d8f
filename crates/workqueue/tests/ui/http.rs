//! The dashboard's refusals and its session over plain HTTP: signed-out
//! access, CSRF, sign-in and sign-out, the one-time link, the cookie's
//! attributes, and the event stream's ids and `Last-Event-ID` resume.

use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use wq_core::Clock;
use wq_testkit::{Backend, backend_tests};

use crate::support::{Harness, change, manual};

/// A urlencoded form body.
fn form_body(pairs: &[(&str, &str)]) -> String {
    let encode = |text: &str| {
        text.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect::<String>()
    };
    pairs
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The value of cookie `name` a response sets, and the whole header.
fn set_cookie(response: &reqwest::Response, name: &str) -> Option<(String, String)> {
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| {
            let value = v[name.len() + 1..].split(';').next().unwrap().to_owned();
            (value, v.to_owned())
        })
}

/// Signs in with `token` through the form: the session cookie.
async fn sign_in(client: &reqwest::Client, url: &str, token: &str) -> String {
    let form = client
        .get(format!("{url}/ui/sign-in"))
        .send()
        .await
        .unwrap();
    let (pre, _) = set_cookie(&form, "wq_sign_in").expect("the form's cookie");
    let page = form.text().await.unwrap();
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the form's token")
        .to_owned();
    assert_eq!(csrf, pre, "double-submit: the cookie and the field agree");
    let signed = client
        .post(format!("{url}/ui/sign-in"))
        .header(COOKIE, format!("wq_sign_in={pre}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("token", token), ("csrf", &csrf)]))
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), StatusCode::SEE_OTHER);
    assert_eq!(signed.headers()[LOCATION], "/ui");
    let (session, header) = set_cookie(&signed, "wq_session").expect("a session cookie");
    assert!(header.contains("HttpOnly"), "{header}");
    assert!(header.contains("SameSite=Strict"), "{header}");
    assert!(header.contains("Max-Age="), "{header}");
    assert!(
        !header.contains("Secure"),
        "no Secure on loopback: {header}"
    );
    session
}

/// The CSRF token of the signed-in page.
async fn page_csrf(client: &reqwest::Client, url: &str, session: &str) -> String {
    let page = client
        .get(format!("{url}/ui"))
        .header(COOKIE, format!("wq_session={session}"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let text = page.text().await.unwrap();
    text.split("name=\"csrf-token\" content=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned()
}

backend_tests!(
    signed_out_requests_and_missing_csrf_tokens_are_refused,
    a_one_time_link_signs_in_once_and_sign_out_ends_the_session,
    the_event_stream_numbers_changes_and_resumes_after_the_last_id,
    a_failed_item_is_offered_retry_and_retried,
);

async fn a_failed_item_is_offered_retry_and_retried(backend: Backend) {
    let h = Harness::start(backend).await;
    // A person's branch: workqueue refuses to take it over, the item fails.
    h.person_push("wq/theirs", &[("p.txt", Some("p\n"))]);
    let id = h
        .submit_ok(
            &change("wq/theirs", &[("t.txt", "t\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_phase(&id, "failed").await;
    let client = no_redirects();
    let session = sign_in(&client, &h.url, &h.tokens.admin).await;
    let cookie = format!("wq_session={session}");
    let page = client
        .get(format!("{}/ui/items/{id}", h.url))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("data-action=\"retry\""), "{page}");
    assert!(
        !page.contains("data-action=\"merge\""),
        "no merge for a failed item"
    );
    let csrf = page_csrf(&client, &h.url, &session).await;
    let retried = client
        .post(format!("{}/ui/items/{id}/actions/retry", h.url))
        .header(COOKIE, &cookie)
        .header("x-csrf-token", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(retried.status(), StatusCode::OK);
    let answer: serde_json::Value = retried.json().await.unwrap();
    assert_eq!(answer["outcome"], "retried", "{answer}");
    // The branch is still a person's: it fails again, by the same rule.
    h.wait_phase(&id, "failed").await;
    h.settle().await;
    h.finish().await;
}

async fn signed_out_requests_and_missing_csrf_tokens_are_refused(backend: Backend) {
    let h = Harness::start(backend).await;
    let id = h
        .submit_ok(
            &manual(change("wq/http", &[("h.txt", "h\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let client = no_redirects();
    let url = &h.url;
    // Signed out: pages go to the sign-in page, the rest is a 401.
    let list = client.get(format!("{url}/ui")).send().await.unwrap();
    assert_eq!(list.status(), StatusCode::SEE_OTHER);
    assert_eq!(list.headers()[LOCATION], "/ui/sign-in");
    let item = client
        .get(format!("{url}/ui/items/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(item.status(), StatusCode::SEE_OTHER);
    for path in ["/ui/fragments/rows", "/ui/events"] {
        let response = client.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let action = client
        .post(format!("{url}/ui/items/{id}/actions/merge"))
        .send()
        .await
        .unwrap();
    assert_eq!(action.status(), StatusCode::UNAUTHORIZED);
    // An API token in a header is no dashboard session.
    let bearer = client
        .get(format!("{url}/ui/fragments/rows"))
        .bearer_auth(&h.tokens.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), StatusCode::UNAUTHORIZED);
    // A sign-in without the form's token, or with a bad API token.
    let forged = client
        .post(format!("{url}/ui/sign-in"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[
            ("token", h.tokens.admin.as_str()),
            ("csrf", "x"),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert!(set_cookie(&forged, "wq_session").is_none());
    let form = client
        .get(format!("{url}/ui/sign-in"))
        .send()
        .await
        .unwrap();
    let (pre, _) = set_cookie(&form, "wq_sign_in").unwrap();
    let wrong = client
        .post(format!("{url}/ui/sign-in"))
        .header(COOKIE, format!("wq_sign_in={pre}"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[
            ("token", "wq_not-a-token"),
            ("csrf", pre.as_str()),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(set_cookie(&wrong, "wq_session").is_none());

    // Signed in: every POST needs the session's CSRF token.
    let session = sign_in(&client, url, &h.tokens.admin).await;
    let csrf = page_csrf(&client, url, &session).await;
    let cookie = format!("wq_session={session}");
    for token in [None, Some("0".repeat(64))] {
        let mut request = client
            .post(format!("{url}/ui/items/{id}/actions/refresh"))
            .header(COOKIE, &cookie);
        if let Some(token) = &token {
            request = request.header("x-csrf-token", token);
        }
        let refused = request.send().await.unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{token:?}");
    }
    let sign_out = client
        .post(format!("{url}/ui/sign-out"))
        .header(COOKIE, &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("csrf", "wrong")]))
        .send()
        .await
        .unwrap();
    assert_eq!(sign_out.status(), StatusCode::FORBIDDEN);
    // With the token the action runs (the item is active).
    h.wait_mr(&id).await;
    let done = client
        .post(format!("{url}/ui/items/{id}/actions/refresh"))
        .header(COOKIE, &cookie)
        .header("x-csrf-token", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), StatusCode::OK);
    let answer: serde_json::Value = done.json().await.unwrap();
    assert_eq!(answer["outcome"], "accepted", "{answer}");
    h.settle().await;
    h.finish().await;
}

async fn a_one_time_link_signs_in_once_and_sign_out_ends_the_session(backend: Backend) {
    let h = Harness::start(backend).await;
    let client = no_redirects();
    let url = &h.url;
    let principal = h
        .tokens
        .authenticator(Default::default(), h.clock.clone())
        .authenticate_token(&h.tokens.admin)
        .await
        .unwrap();
    let code = wq_ui::session::create_link(h.app().store.as_ref(), &principal, h.clock.now())
        .await
        .unwrap();
    let used = client
        .get(format!("{url}/ui/sign-in/link/{code}"))
        .send()
        .await
        .unwrap();
    assert_eq!(used.status(), StatusCode::SEE_OTHER);
    assert_eq!(used.headers()[LOCATION], "/ui", "a clean URL");
    let (session, _) = set_cookie(&used, "wq_session").unwrap();
    let again = client
        .get(format!("{url}/ui/sign-in/link/{code}"))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::UNAUTHORIZED, "used once");
    let cookie = format!("wq_session={session}");
    let csrf = page_csrf(&client, url, &session).await;
    let out = client
        .post(format!("{url}/ui/sign-out"))
        .header(COOKIE, &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body(&[("csrf", csrf.as_str())]))
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    let (cleared, header) = set_cookie(&out, "wq_session").unwrap();
    assert!(
        cleared.is_empty() && header.contains("Max-Age=0"),
        "{header}"
    );
    let after = client
        .get(format!("{url}/ui"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), StatusCode::SEE_OTHER, "the session is gone");
    // An expired link is refused.
    let late = wq_ui::session::create_link(h.app().store.as_ref(), &principal, h.clock.now())
        .await
        .unwrap();
    h.clock.advance(
        time::Duration::try_from(wq_ui::session::LINK_TTL).unwrap() + time::Duration::seconds(1),
    );
    let expired = client
        .get(format!("{url}/ui/sign-in/link/{late}"))
        .send()
        .await
        .unwrap();
    assert_eq!(expired.status(), StatusCode::UNAUTHORIZED);
    h.finish().await;
}

/// The `id:` lines of an event stream's text, in order.
fn ids(text: &str) -> Vec<i64> {
    text.lines()
        .filter_map(|line| line.strip_prefix("id: "))
        .map(|id| id.parse().unwrap())
        .collect()
}

/// Reads the stream until it holds `count` change events (within one wait
/// for them all: the stream's keep-alive comments do not extend it).
async fn read_changes(response: reqwest::Response, count: usize) -> String {
    use futures::StreamExt;
    let mut text = String::new();
    let mut body = response.bytes_stream();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while ids(&text).len() < count {
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .unwrap_or_else(|_| panic!("{count} events within the wait, got: {text}"))
            .expect("the stream stays open")
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    text
}

async fn the_event_stream_numbers_changes_and_resumes_after_the_last_id(backend: Backend) {
    let h = Harness::start(backend).await;
    let client = no_redirects();
    let session = sign_in(&client, &h.url, &h.tokens.admin).await;
    let cookie = format!("wq_session={session}");
    let id = h
        .submit_ok(
            &change("wq/events", &[("e.txt", "e\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_mr(&id).await;
    h.settle().await;
    // From the start of the trail: every change so far, ids increasing.
    let all = client
        .get(format!("{}/ui/events", h.url))
        .header(COOKIE, &cookie)
        .header("last-event-id", "0")
        .send()
        .await
        .unwrap();
    assert_eq!(all.status(), StatusCode::OK);
    assert_eq!(all.headers()["content-type"], "text/event-stream");
    let text = read_changes(all, 3).await;
    let seen = ids(&text);
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert!(text.contains(&id), "the item's changes: {text}");
    // Resumed after the second: the third comes next, nothing before it.
    let resumed = client
        .get(format!("{}/ui/events", h.url))
        .header(COOKIE, &cookie)
        .header("last-event-id", seen[1].to_string())
        .send()
        .await
        .unwrap();
    let text = read_changes(resumed, 1).await;
    assert_eq!(ids(&text)[0], seen[2], "{text}");
    h.finish().await;
}

/// A browser that resumes while a record is still being written below one
/// already committed (PostgreSQL numbers a record before its transaction
/// commits) is replayed only what is settled, and sent both records once
/// the first commits, in order: not the higher one first, after which the
/// lower one would fall behind its `Last-Event-ID` and never be sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_stream_is_sent_a_record_that_commits_late_in_its_order() {
    use wq_core::ItemId;
    use wq_store::audit::NewAudit;
    let h = Harness::start(Backend::Postgres).await;
    let client = no_redirects();
    let session = sign_in(&client, &h.url, &h.tokens.admin).await;
    let cookie = format!("wq_session={session}");
    h.settle().await;
    let pg = wq_store::postgres::PgStore::connect(&h.app().database_url, 2)
        .await
        .unwrap();
    let now = h.clock.now();
    let record = |kind: &str| NewAudit::new(ItemId::new_v7(), now, "engine", kind);
    let (slow, low) = wq_store::testing::append_uncommitted(&pg, record("step.slow")).await;
    let (fast, high) = wq_store::testing::append_uncommitted(&pg, record("step.fast")).await;
    fast.commit().await.unwrap();
    assert!(low < high);
    let resumed = client
        .get(format!("{}/ui/events", h.url))
        .header(COOKIE, &cookie)
        .header("last-event-id", (low - 1).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), StatusCode::OK);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    slow.commit().await.unwrap();
    let text = read_changes(resumed, 2).await;
    assert_eq!(ids(&text), vec![low, high], "{text}");
    pg.pool().close().await;
    h.finish().await;
}

/// On PostgreSQL every replica's browsers see every replica's changes: a
/// submission made through the first replica reaches the event stream a
/// browser holds open on a second replica over the same database, one that
/// processes nothing itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_through_one_replica_reaches_the_stream_of_another() {
    use futures::StreamExt;
    let h = Harness::start(Backend::Postgres).await;
    let other = h.replica().await;
    let client = no_redirects();
    let session = sign_in(&client, &other.url, &h.tokens.admin).await;
    let cookie = format!("wq_session={session}");
    // Open on the second replica before the change exists.
    let stream = client
        .get(format!("{}/ui/events", other.url))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let id = h
        .submit_ok(
            &change("wq/elsewhere", &[("r.txt", "r\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let mut body = stream.bytes_stream();
    let mut text = String::new();
    while !text.contains(&id) {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(30), body.next())
            .await
            .expect("the other replica's change within the wait")
            .expect("the stream stays open")
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(!ids(&text).is_empty(), "a numbered change: {text}");
    drop(body);
    drop(other);
    h.wait_mr(&id).await;
    h.settle().await;
    h.finish().await;
}
