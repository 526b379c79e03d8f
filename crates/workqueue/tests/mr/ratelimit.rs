//! The forge token's rate-limit budget: once the forge reports less left
//! than `mr.rate_limit_reserve_percent` of its limit, a reconcile its timer
//! woke waits for the window's reset without a forge call, while the
//! webhook that says CI passed still gets the change merged. forge-sim
//! enforces the limit over real HTTP. Above the reserve, once less than
//! half of the rest is left, background reconciles spread out.

use std::time::Duration;

use forge_sim::{JobOutcome, JobSpec};
use reqwest::StatusCode;
use wq_core::Clock;
use wq_testkit::{Backend, backend_tests};

use crate::support::{Harness, Options, dimension};

backend_tests!(
    a_low_budget_defers_background_reconciles_and_the_merge_still_goes,
    background_reconciles_spread_out_as_the_budget_drains
);

/// The GitLab budget the sim reports for the service's token after one
/// more request (`GET /user`, counted like any).
async fn remaining(h: &Harness) -> u64 {
    let response = reqwest::Client::new()
        .get(format!("{}/user", h.sim.gitlab_url()))
        .header("PRIVATE-TOKEN", forge_sim::DEFAULT_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.headers()["ratelimit-remaining"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn a_low_budget_defers_background_reconciles_and_the_merge_still_goes(backend: Backend) {
    let options = Options {
        // Ten minutes of CI: the item waits on its busy timer meanwhile.
        jobs: vec![JobSpec::new("unit", JobOutcome::Success).duration_secs(600)],
        ..Options::default()
    };
    let h = Harness::start_with(backend, options).await;
    // 200 requests an hour; the service keeps 10% (20) for merges. Spent
    // down to 22 by someone else with the same token, so the item's own
    // first requests (the project, its protected branches, the push, the
    // merge request and the status note) take it below the reserve.
    h.sim.set_rate_limit(Some((200, Duration::from_secs(3600))));
    while remaining(&h).await > 22 {}
    let id = h
        .submit_ok(
            &h.change("wq/budget", &[("b.txt", "b\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    h.wait_for(&id, "CI running", |item| {
        dimension(item, "needs_reconcile")["detail"]["unmet_gates"]
            .as_array()
            .is_some_and(|gates| gates.iter().any(|g| g == "ci_passed"))
    })
    .await;
    h.settle().await;
    let reads = |h: &Harness| h.count("GET", &format!("/merge_requests/{number}"));
    let before = reads(&h);
    assert_eq!(before, 0, "the creation's answer was the first observation");
    let last = h.sim.requests().last().cloned().expect("a request");
    assert!(last.status < 400, "the budget is low, not spent: {last:?}");

    // The busy interval passes: the timer's reconcile waits instead of
    // reading, re-armed for the window's reset (at most the idle interval).
    h.advance(Duration::from_secs(61)).await;
    assert_eq!(reads(&h), before, "no background read below the reserve");
    let item = h.item(&id).await;
    let row = dimension(&item, "needs_reconcile");
    let until = time::OffsetDateTime::parse(
        row["pending_until"].as_str().expect("re-armed"),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let now = h.clock.now();
    assert!(
        until - now > time::Duration::minutes(20),
        "deferred to the reset, not the busy interval: {until} vs {now}"
    );

    // CI passes: the pipeline's webhook asks for the reconcile, which reads
    // and merges within the reserve.
    h.sim.advance(Duration::from_secs(600));
    h.wait_phase(&id, "completed").await;
    assert!(reads(&h) > before, "the webhook's reconcile read the MR");
    assert_eq!(
        h.count("PUT", &format!("/merge_requests/{number}/merge")),
        1
    );
    assert!(
        h.sim.requests().iter().all(|r| r.status != 429),
        "the service never ran the budget dry"
    );
    h.finish().await;
}

/// The time until the item's next background reconcile.
async fn next_reconcile_in(h: &Harness, id: &str) -> time::Duration {
    let item = h.item(id).await;
    let row = dimension(&item, "needs_reconcile");
    let until = time::OffsetDateTime::parse(
        row["pending_until"].as_str().expect("re-armed"),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    until - h.clock.now()
}

async fn background_reconciles_spread_out_as_the_budget_drains(backend: Backend) {
    let options = Options {
        jobs: vec![JobSpec::new("unit", JobOutcome::Success).duration_secs(600)],
        ..Options::default()
    };
    let h = Harness::start_with(backend, options).await;
    // 200 requests an hour, 20 kept for merges, 180 above them; spent down
    // to 75, about a quarter of those 180 is left once the item's own
    // first requests are made: background reads should come about half as
    // often.
    h.sim.set_rate_limit(Some((200, Duration::from_secs(3600))));
    while remaining(&h).await > 75 {}
    let id = h
        .submit_ok(
            &h.change("wq/paced", &[("p.txt", "p\n")]),
            StatusCode::CREATED,
            "created",
        )
        .await;
    let number = h.wait_mr(&id).await;
    h.settle().await;
    let reads = |h: &Harness| h.count("GET", &format!("/merge_requests/{number}"));
    let before = reads(&h);

    // The busy interval (60 s) passes: above the reserve, the timer's
    // reconcile reads, and re-arms later than the busy interval.
    h.advance(Duration::from_secs(61)).await;
    assert!(
        reads(&h) > before,
        "above the reserve a background read goes"
    );
    let next = next_reconcile_in(&h, &id).await;
    assert!(
        next > time::Duration::seconds(90) && next <= time::Duration::seconds(8 * 60),
        "spread out to about twice the busy interval: {next}"
    );
    let left = remaining(&h).await;
    assert!(left > 20, "still above the reserve: {left}");

    // CI passes: the webhook's reconcile merges at once all the same.
    h.sim.advance(Duration::from_secs(600));
    h.wait_phase(&id, "completed").await;
    assert_eq!(
        h.count("PUT", &format!("/merge_requests/{number}/merge")),
        1
    );
    h.finish().await;
}
