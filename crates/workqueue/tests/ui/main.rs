//! The web dashboard in a real browser (Debian's chromium, headless) at
//! 1280 × 800 and 390 × 844, over the whole service (as
//! `workqueue::app::assemble` builds it) and forge-sim, plus its HTTP
//! refusals. The screenshots in `docs/` come from here
//! (`WQ_UPDATE_SCREENSHOTS=1`).
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

mod browser;
mod http;
#[allow(dead_code, reason = "shared with the mr tests, which use all of it")]
#[path = "../mr/support.rs"]
mod support;

use std::time::Duration;

use chromiumoxide::Page;
use forge_sim::{FaultRule, HttpFault, JobOutcome, JobSpec};
use reqwest::StatusCode;

use crate::browser::{Chrome, Screen, eval, open, press, screenshot, tap, wait_until};
use crate::support::{Harness, Options, change, manual};

/// Signs `page` in through the sign-in form with `token`.
async fn sign_in(page: &Page, h: &Harness, token: &str) {
    open(page, &format!("{}/ui/sign-in", h.url)).await;
    let signed: bool = eval(page, "location.pathname === '/ui'").await;
    if signed {
        // The browser's session already: the sign-in page sent it on.
        return;
    }
    // The form's own fields and cookie, posted as the form would be.
    let script = format!(
        "fetch('/ui/sign-in', {{method: 'POST', credentials: 'same-origin', body: new URLSearchParams({{
            token: {token:?}, csrf: document.querySelector('input[name=csrf]').value }})}})
         .then(r => r.status + ' ' + new URL(r.url).pathname)"
    );
    let entered: String = eval(page, &script).await;
    assert_eq!(entered, "200 /ui", "signed in and sent to the list");
    open(page, &format!("{}/ui", h.url)).await;
    wait_until(
        page,
        "document.querySelector('#rows')",
        "the list after sign-in",
    )
    .await;
}

/// Waits until the page's live stream is open.
async fn live(page: &Page) {
    wait_until(
        page,
        "document.getElementById('live-state').dataset.state === 'open'",
        "the live stream",
    )
    .await;
}

/// No document-level horizontal overflow.
async fn no_overflow(page: &Page, what: &str) {
    let (scroll, inner): (i64, i64) = (
        eval(page, "document.documentElement.scrollWidth").await,
        eval(page, "window.innerWidth").await,
    );
    assert!(
        scroll <= inner,
        "{what}: scrollWidth {scroll} > innerWidth {inner}"
    );
}

/// Every visible button, link styled as a button, form control and status
/// icon is at least 44 × 44 CSS px.
async fn touch_sized(page: &Page, what: &str) {
    let small: Vec<String> = eval(
        page,
        "Array.from(document.querySelectorAll('button, .button, input:not([type=hidden]), select, .status-icon'))
            .filter(e => e.offsetParent !== null || getComputedStyle(e).position === 'fixed')
            .map(e => [e, e.getBoundingClientRect()])
            .filter(([e, r]) => r.width > 0 && (r.width < 44 || r.height < 44))
            .map(([e, r]) => e.outerHTML.slice(0, 80) + ' ' + r.width + 'x' + r.height)",
    )
    .await;
    assert!(
        small.is_empty(),
        "{what}: targets under 44 × 44: {small:#?}"
    );
}

const QUEUED_ROW: &str = "document.querySelector('.row[data-state=queued]')";

/// A queued item: its colour, dots and accessible names; the tooltip on
/// hover and on keyboard focus at 1280 × 800; the drawer on a tap at
/// 390 × 844, touch-sized and without overflow; then the merge the train
/// makes reaches both pages without a reload. Leaves the screenshots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_item_shows_its_state_on_desktop_and_phone_and_updates_live() {
    let h = Harness::start_with(
        wq_testkit::Backend::Sqlite,
        Options {
            merge_trains: true,
            jobs: vec![JobSpec::new("unit", JobOutcome::Success).duration_secs(60)],
            ..Options::default()
        },
    )
    .await;
    let id = h
        .submit_ok(
            &change("wq/queued", &[("q.txt", "q\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_mr(&id).await;
    h.sim.advance(Duration::from_secs(60));
    h.wait_for(&id, "the merge train", |item| {
        item["detail"]["merge_queue"]["state"].is_string()
    })
    .await;
    let chrome = Chrome::launch().await;

    // Desktop.
    let desk = chrome.page(Screen::Desktop).await;
    sign_in(&desk, &h, &h.tokens.admin).await;
    wait_until(&desk, QUEUED_ROW, "the queued row").await;
    let colour: String = eval(
        &desk,
        &format!("getComputedStyle({QUEUED_ROW}.querySelector('.disc')).backgroundColor"),
    )
    .await;
    assert_eq!(colour, "rgb(150, 102, 0)", "#966600");
    let dots: (bool, bool) = (
        eval(
            &desk,
            &format!("!!{QUEUED_ROW}.querySelector('.dot-retry')"),
        )
        .await,
        eval(
            &desk,
            &format!("!!{QUEUED_ROW}.querySelector('.dot-merge')"),
        )
        .await,
    );
    assert_eq!(dots, (true, true), "both automation dots");
    let name: String = eval(
        &desk,
        &format!("{QUEUED_ROW}.querySelector('.status-icon').getAttribute('aria-label')"),
    )
    .await;
    assert_eq!(
        name,
        "State: In the merge queue; CI auto-retry on; auto-merge on"
    );
    let tip_shown =
        format!("getComputedStyle({QUEUED_ROW}.querySelector('.tip')).display !== 'none'");
    let shown: bool = eval(&desk, &tip_shown).await;
    assert!(!shown, "no tooltip before hover");
    desk.find_element(".row[data-state=queued] .status-icon")
        .await
        .unwrap()
        .hover()
        .await
        .unwrap();
    wait_until(&desk, &tip_shown, "the tooltip on hover").await;
    let tip: String = eval(
        &desk,
        &format!("{QUEUED_ROW}.querySelector('.tip').textContent"),
    )
    .await;
    assert!(tip.contains("In the merge queue"), "{tip}");
    assert!(tip.contains("Automation"), "{tip}");
    assert!(
        tip.contains("auto-merge on") && tip.contains("CI auto-retry on"),
        "{tip}"
    );
    // Keyboard focus shows it too (the mouse elsewhere).
    desk.move_mouse(chromiumoxide::layout::Point::new(5.0, 790.0))
        .await
        .unwrap();
    let _: bool = eval(
        &desk,
        &format!("{QUEUED_ROW}.querySelector('.status-icon').focus(); true"),
    )
    .await;
    wait_until(&desk, &tip_shown, "the tooltip on focus").await;
    no_overflow(&desk, "desktop list").await;
    screenshot(&desk, "dashboard-desktop.png").await;

    // Phone.
    let phone = chrome.page(Screen::Phone).await;
    open(&phone, &format!("{}/ui", h.url)).await;
    // Same browser profile: the session cookie signs the phone in too.
    wait_until(&phone, QUEUED_ROW, "the queued row on the phone").await;
    let coarse: bool = eval(&phone, "matchMedia('(pointer: coarse)').matches").await;
    assert!(coarse, "the phone page has a coarse pointer");
    no_overflow(&phone, "phone list").await;
    touch_sized(&phone, "phone list").await;
    tap(&phone, ".row[data-state=queued] .status-icon").await;
    wait_until(
        &phone,
        "!document.getElementById('drawer').hidden",
        "the drawer on a tap",
    )
    .await;
    let drawer: String = eval(&phone, "document.getElementById('drawer-body').textContent").await;
    assert!(drawer.contains("In the merge queue"), "{drawer}");
    assert!(drawer.contains("auto-merge on"), "{drawer}");
    // One scroll owner: the drawer's body scrolls, the document does not.
    let owners: (String, String) = (
        eval(
            &phone,
            "getComputedStyle(document.getElementById('drawer-body')).overflowY",
        )
        .await,
        eval(
            &phone,
            "getComputedStyle(document.documentElement).overflow",
        )
        .await,
    );
    assert_eq!(owners, ("auto".to_owned(), "hidden".to_owned()));
    touch_sized(&phone, "phone drawer").await;
    no_overflow(&phone, "phone drawer").await;
    screenshot(&phone, "dashboard-phone-drawer.png").await;
    tap(&phone, ".drawer .close").await;
    wait_until(
        &phone,
        "document.getElementById('drawer').hidden",
        "the drawer closed",
    )
    .await;
    screenshot(&phone, "dashboard-phone.png").await;

    // Live: the train merges; both pages follow without a reload.
    live(&desk).await;
    live(&phone).await;
    for page in [&desk, &phone] {
        let _: bool = eval(page, "window.__not_reloaded = true").await;
    }
    h.sim.advance(Duration::from_secs(60));
    h.wait_phase(&id, "completed").await;
    for page in [&desk, &phone] {
        wait_until(
            page,
            &format!("document.querySelector('.row[data-item=\"{id}\"][data-state=merged]')"),
            "the merged row, live",
        )
        .await;
        let kept: bool = eval(page, "window.__not_reloaded === true").await;
        assert!(kept, "updated in place, not reloaded");
    }
    chrome.close().await;
    h.finish().await;
}

/// Merge now on a manual item of a merge-train project answers "queued"
/// (bound to the head the page shows), reached and pressed with the
/// keyboard alone; the page state follows. A read-only caller sees no
/// action, and a request without the CSRF token is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_now_answers_queued_by_keyboard_and_only_for_those_it_is_granted() {
    let h = Harness::start_with(
        wq_testkit::Backend::Sqlite,
        Options {
            merge_trains: true,
            jobs: vec![JobSpec::new("unit", JobOutcome::Success).duration_secs(60)],
            ..Options::default()
        },
    )
    .await;
    let id = h
        .submit_ok(
            &manual(change("wq/manual", &[("m.txt", "m\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_mr(&id).await;
    // The branch pipeline passes: the forge takes the MR into its train.
    h.sim.advance(Duration::from_secs(60));
    h.wait_for(&id, "CI passed", |item| {
        support::dimension(item, "needs_reconcile")["detail"]["ci"] == "success"
    })
    .await;
    let chrome = Chrome::launch().await;
    for screen in [Screen::Phone, Screen::Desktop] {
        let page = chrome.page(screen).await;
        sign_in(&page, &h, &h.tokens.reader).await;
        open(&page, &format!("{}/ui/items/{id}", h.url)).await;
        wait_until(&page, "document.getElementById('item')", "the item page").await;
        let buttons: i64 = eval(&page, "document.querySelectorAll('button.action').length").await;
        assert_eq!(buttons, 0, "{screen:?}: a reader is offered no action");
        let out: bool = eval(
            &page,
            "fetch('/ui/sign-out', {method: 'POST', credentials: 'same-origin', body: new URLSearchParams({
                csrf: document.querySelector('meta[name=csrf-token]').content })})
             .then(r => r.redirected && new URL(r.url).pathname === '/ui/sign-in')",
        )
        .await;
        assert!(out, "signed out");
        // Each page holds an event stream: a browser keeps six
        // connections per host over HTTP/1.1.
        page.close().await.unwrap();
    }
    for screen in [Screen::Phone, Screen::Desktop] {
        let page = chrome.page(screen).await;
        sign_in(&page, &h, &h.tokens.admin).await;
        open(&page, &format!("{}/ui/items/{id}", h.url)).await;
        wait_until(
            &page,
            "document.querySelector('button[data-action=merge]')",
            "Merge now",
        )
        .await;
        if screen == Screen::Phone {
            no_overflow(&page, "phone item page").await;
            touch_sized(&page, "phone item page").await;
            screenshot(&page, "dashboard-phone-item.png").await;
            page.close().await.unwrap();
            continue;
        }
        // Without the CSRF token: refused.
        let refused: i64 = eval(
            &page,
            &format!(
                "fetch('/ui/items/{id}/actions/merge', {{method: 'POST', body: '{{}}'}}).then(r => r.status)"
            ),
        )
        .await;
        assert_eq!(refused, 403, "no CSRF token");
        // The keyboard alone reaches the button and presses it.
        let mut reached = false;
        for _ in 0..60 {
            press(&page, "Tab", 9).await;
            let focused: String = eval(
                &page,
                "document.activeElement ? (document.activeElement.dataset.action || '') : ''",
            )
            .await;
            if focused == "merge" {
                reached = true;
                break;
            }
        }
        assert!(reached, "Tab reaches Merge now");
        live(&page).await;
        press(&page, "Enter", 13).await;
        wait_until(
            &page,
            "document.getElementById('outcome').dataset.outcome === 'queued'",
            "the queued feedback",
        )
        .await;
        let text: String = eval(&page, "document.getElementById('outcome').innerText").await;
        assert!(text.starts_with("Queued"), "{text}");
        screenshot(&page, "dashboard-desktop-item.png").await;
        h.wait_for(&id, "the train", |item| {
            item["detail"]["merge_queue"]["state"].is_string()
        })
        .await;
        wait_until(
            &page,
            "document.getElementById('item').dataset.state === 'queued'",
            "the page in the queue state, live",
        )
        .await;
    }
    // The train's pipeline passes and merges.
    h.sim.advance(Duration::from_secs(60));
    h.wait_phase(&id, "completed").await;
    chrome.close().await;
    h.finish().await;
}

const GITLAB_MERGE: &str = "/api/v4/projects/*/merge_requests/*/merge";

/// A failed automatic merge (`auto_merge` error) offers Retry, on both
/// sizes; pressed, a new attempt follows and merges. An item with another
/// stored error is offered Refresh instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_merge_error_offers_retry_and_another_error_refresh() {
    let h = Harness::start(wq_testkit::Backend::Sqlite).await;
    // GitLab's answer when the head moved after the check: not retried.
    h.sim.add_fault(FaultRule::pattern(
        "PUT",
        GITLAB_MERGE,
        HttpFault::Status { status: 409 },
    ));
    let id = h
        .submit_ok(
            &change("wq/refused", &[("r.txt", "r\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_for(&id, "a failed attempt", |item| {
        item["detail"]["merge"]["last_result"] == "failed"
    })
    .await;
    h.settle().await;
    h.sim.clear_faults();
    let chrome = Chrome::launch().await;
    let phone = chrome.page(Screen::Phone).await;
    sign_in(&phone, &h, &h.tokens.admin).await;
    open(&phone, &format!("{}/ui/items/{id}", h.url)).await;
    wait_until(
        &phone,
        "document.querySelector('button[data-action=\"retry-merge\"]')",
        "Retry on the phone",
    )
    .await;
    let refresh: bool = eval(
        &phone,
        "!!document.querySelector('button[data-action=refresh]')",
    )
    .await;
    assert!(!refresh, "an auto_merge error is not offered Refresh");
    let label: String = eval(
        &phone,
        "document.querySelector('button[data-action=\"retry-merge\"]').innerText",
    )
    .await;
    assert_eq!(label, "Retry");
    touch_sized(&phone, "phone item page with Retry").await;
    no_overflow(&phone, "phone item page with Retry").await;

    let desk = chrome.page(Screen::Desktop).await;
    open(&desk, &format!("{}/ui/items/{id}", h.url)).await;
    wait_until(
        &desk,
        "document.querySelector('button[data-action=\"retry-merge\"]')",
        "Retry",
    )
    .await;
    live(&desk).await;
    desk.find_element("button[data-action=\"retry-merge\"]")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until(
        &desk,
        "document.getElementById('outcome').dataset.outcome === 'accepted'",
        "the accepted retry",
    )
    .await;
    h.wait_phase(&id, "completed").await;
    wait_until(
        &desk,
        "document.getElementById('item').dataset.state === 'merged'",
        "the merged state after the new attempt, live",
    )
    .await;

    // Another stored error: the forge cannot be read (an outage).
    let other = h
        .submit_ok(
            &manual(change("wq/unread", &[("u.txt", "u\n")])),
            StatusCode::CREATED,
            "created",
        )
        .await;
    h.wait_mr(&other).await;
    h.settle().await;
    h.sim.add_fault(
        FaultRule::pattern(
            "GET",
            "/api/v4/projects/*/merge_requests/*",
            HttpFault::Status { status: 500 },
        )
        .times(1000),
    );
    let (status, _) = h
        .post(&format!("/api/v1/work-items/{other}/refresh"), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    h.wait_for(&other, "a stored error", |item| item["error"].is_string())
        .await;
    open(&desk, &format!("{}/ui/items/{other}", h.url)).await;
    wait_until(
        &desk,
        "document.querySelector('button[data-action=refresh]')",
        "Refresh",
    )
    .await;
    let retry: bool = eval(
        &desk,
        "!!document.querySelector('button[data-action=\"retry-merge\"]')",
    )
    .await;
    assert!(!retry, "another error is not offered the merge Retry");
    h.sim.clear_faults();
    desk.find_element("button[data-action=refresh]")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until(
        &desk,
        "document.getElementById('outcome').dataset.outcome === 'accepted'",
        "the accepted refresh",
    )
    .await;
    let text: String = eval(&desk, "document.getElementById('outcome').innerText").await;
    assert!(text.starts_with("Refreshing"), "{text}");
    h.advance(Duration::from_secs(600)).await;
    h.wait_for(&other, "the error cleared by a read", |item| {
        item["error"].is_null()
    })
    .await;
    h.settle().await;
    chrome.close().await;
    h.finish().await;
}
