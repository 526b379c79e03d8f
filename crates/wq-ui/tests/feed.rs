//! The dashboard's change feed reads the audit trail only while a stream
//! listens, and a stream that opens is sent the changes from then on.

use std::sync::Arc;
use std::time::Duration;

use wq_api::AppState;
use wq_core::{Clock, ItemId, SystemClock};
use wq_testkit::{Backend, backend_tests};
use wq_ui::events::{Feed, POLL_INTERVAL};

backend_tests!(the_feed_reads_no_records_while_no_stream_listens);

async fn the_feed_reads_no_records_while_no_stream_listens(backend: Backend) {
    let store = backend.fresh_store().await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let now = clock.now();
    let auth = wq_auth::Authenticator::new(
        wq_testkit::oidc::settings("rules: []"),
        reqwest::Client::new(),
    )
    .unwrap();
    let feed = Feed::start(AppState::new(store.clone(), clock, Arc::new(auth))).await;
    let insert = |id: ItemId| {
        let store = store.clone();
        async move {
            store
                .item_insert(wq_store::testing::step_item(id, now))
                .await
                .unwrap();
        }
    };
    // Items created, each with its record, while nobody listens.
    for _ in 0..3 {
        insert(ItemId::new_v7()).await;
    }
    tokio::time::sleep(POLL_INTERVAL * 3).await;
    assert_eq!(feed.records_read(), 0, "records read with no stream open");

    let mut stream = feed.subscribe();
    let id = ItemId::new_v7();
    insert(id).await;
    let change = tokio::time::timeout(Duration::from_secs(10), stream.recv())
        .await
        .expect("the change within the wait")
        .unwrap();
    assert_eq!(
        (change.item_id, change.kind.as_str()),
        (id, "item.created"),
        "the first change sent is the one after the stream opened"
    );
    assert!(feed.records_read() >= 1);
}
