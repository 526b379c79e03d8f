//! `retry` of an item a person ended by closing its change request needs
//! `admin` (issue #12, point 8); other ended items need only `retry`.
#![allow(
    clippy::disallowed_methods,
    reason = "test fixtures read the wall clock"
)]

use std::sync::Arc;

use time::OffsetDateTime;
use wq_core::{ItemId, ItemType, Phase, SystemClock, WorkItem};
use wq_forge::Forges;
use wq_mr::{CLOSED_ON_FORGE, MrConfig, MrType};
use wq_testkit::Backend;

fn item(phase: Phase, error: Option<&str>) -> WorkItem {
    let now = OffsetDateTime::now_utc();
    WorkItem {
        id: ItemId::new_v7(),
        item_type: "mr".into(),
        phase,
        actionable: false,
        attempts: 0,
        error: error.map(str::to_owned),
        leased_until: None,
        idempotency_key: None,
        caller_identity: Some("alice".into()),
        created_at: now,
        updated_at: now,
        last_event_at: None,
    }
}

#[tokio::test]
async fn reopening_a_change_a_person_closed_needs_admin() {
    let store = Backend::Sqlite.fresh_store().await;
    let mr = MrType::new(
        store,
        Forges::new(),
        MrConfig::default(),
        Arc::new(SystemClock),
    )
    .expect("default config");
    let answer = |item: WorkItem| {
        let mr = &mr;
        async move { mr.retry_needs_admin(&item).await.unwrap() }
    };
    assert!(answer(item(Phase::Cancelled, Some(CLOSED_ON_FORGE))).await);
    // workqueue's own cancellation, and failures, are the retry permission's.
    assert!(
        !answer(item(
            Phase::Cancelled,
            Some("empty diff: main already contains these changes; the merge request was closed"),
        ))
        .await
    );
    assert!(!answer(item(Phase::Failed, Some("branch_not_managed: x"))).await);
    assert!(!answer(item(Phase::Active, None)).await);
}
