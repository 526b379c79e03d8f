//! The dashboard's change feed reads the audit trail only while a stream
//! listens, a stream that opens is sent the changes from then on, and on
//! PostgreSQL a record that commits after a higher-numbered one is sent in
//! its order, not passed over.

use std::sync::Arc;
use std::time::Duration;

use wq_api::AppState;
use wq_core::{Clock, ItemId, SystemClock};
use wq_store::Store;
use wq_store::audit::NewAudit;
use wq_store::postgres::PgStore;
use wq_store::testing::append_uncommitted;
use wq_testkit::{Backend, backend_tests};
use wq_ui::events::{Feed, POLL_INTERVAL};

/// The feed over `store`, with an authenticator that grants nothing (the
/// feed reads no request).
async fn start_feed(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Arc<Feed> {
    let auth = wq_auth::Authenticator::new(
        wq_testkit::oidc::settings("rules: []"),
        reqwest::Client::new(),
    )
    .unwrap();
    Feed::start(AppState::new(store, clock, Arc::new(auth))).await
}

backend_tests!(the_feed_reads_no_records_while_no_stream_listens);

async fn the_feed_reads_no_records_while_no_stream_listens(backend: Backend) {
    let store = backend.fresh_store().await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let now = clock.now();
    let feed = start_feed(store.clone(), clock).await;
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

/// The next change the stream is sent, within a generous wait.
async fn next(
    stream: &mut tokio::sync::broadcast::Receiver<wq_ui::events::Change>,
) -> (i64, String) {
    let change = tokio::time::timeout(Duration::from_secs(10), stream.recv())
        .await
        .expect("a change within the wait")
        .unwrap();
    (change.seq, change.kind)
}

/// PostgreSQL numbers a record when its transaction appends it, and
/// transactions commit in any order. A record numbered below one already
/// committed is sent when it commits, before the higher one: the feed holds
/// records back behind a number in progress for as long as it is (here
/// past the point where the feed waits for the appends in progress), and
/// passes a number whose transaction rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_commits_late_is_sent_in_its_order_not_passed_over() {
    let url = wq_store::testing::fresh_postgres_url().await;
    let pg = PgStore::connect(&url, 8).await.unwrap();
    pg.migrate().await.unwrap();
    let store: Arc<dyn Store> = Arc::new(pg.clone());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let now = clock.now();
    let feed = start_feed(store.clone(), clock).await;
    let mut stream = feed.subscribe();
    feed.nudge();
    let (a, b) = (ItemId::new_v7(), ItemId::new_v7());
    for id in [a, b] {
        store
            .item_insert(wq_store::testing::step_item(id, now))
            .await
            .unwrap();
    }
    assert_eq!(next(&mut stream).await.1, "item.created");
    assert_eq!(next(&mut stream).await.1, "item.created");
    let record = |item: ItemId, kind: &str| NewAudit::new(item, now, "engine", kind);

    // `a`'s record draws its number first and commits last.
    let (slow, low) = append_uncommitted(&pg, record(a, "step.slow")).await;
    let (fast, high) = append_uncommitted(&pg, record(b, "step.fast")).await;
    fast.commit().await.unwrap();
    assert!(low < high);
    feed.nudge();
    // Nothing is sent while `low` is in progress: not `high` first, which
    // would leave `low` behind every stream's position.
    let early = tokio::time::timeout(POLL_INTERVAL * 5, stream.recv()).await;
    assert!(early.is_err(), "sent {early:?} while {low} was in progress");
    slow.commit().await.unwrap();
    feed.nudge();
    assert_eq!(next(&mut stream).await, (low, "step.slow".to_owned()));
    assert_eq!(next(&mut stream).await, (high, "step.fast".to_owned()));
    assert_eq!(feed.settled(), Some(high));

    // A number whose transaction rolls back holds nothing back for good.
    let (gone, lost) = append_uncommitted(&pg, record(a, "step.lost")).await;
    let (after, kept) = append_uncommitted(&pg, record(b, "step.kept")).await;
    after.commit().await.unwrap();
    gone.rollback().await.unwrap();
    assert!(lost < kept);
    assert_eq!(next(&mut stream).await, (kept, "step.kept".to_owned()));
    drop(feed);
    drop(store);
    pg.pool().close().await;
    wq_store::testing::drop_postgres_database(&url).await;
}
