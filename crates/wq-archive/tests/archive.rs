//! The archive: records shipped once as gzip JSON Lines under minute
//! partitions, to a local directory and to a real S3 API (`moto_server`);
//! a crash between the upload and the mark rewrites the same object; only
//! archived rows leave the database, and the chains still verify after.
#![allow(
    clippy::disallowed_methods,
    reason = "object names come from record times; moto needs a bucket"
)]

use std::io::Read as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _};
use time::OffsetDateTime;
use wq_archive::{ArchiveHooks, Archiver};
use wq_core::{Clock, ItemId, ManualClock};
use wq_store::audit::{AuditQuery, AuditRecord, NewAudit};
use wq_store::{NewItem, Store};
use wq_testkit::moto::{Moto, REGION};
use wq_testkit::{Backend, backend_tests};

backend_tests!(
    records_are_shipped_once_as_gzip_json_lines_in_minute_partitions,
    a_crash_between_upload_and_mark_rewrites_the_same_object,
    retention_deletes_only_archived_rows_and_the_chains_still_verify,
);

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_780_000_000).unwrap()
}

/// `items` items with `per_item` records each (after their creation).
async fn seed(store: &dyn Store, items: usize, per_item: usize, at: OffsetDateTime) {
    for _ in 0..items {
        let id = ItemId::new_v7();
        store
            .item_insert(NewItem {
                id,
                item_type: "archived".into(),
                idempotency_key: None,
                caller_identity: Some("ci-bot".into()),
                place: None,
                now: at,
                dimensions: Vec::new(),
            })
            .await
            .unwrap();
        for n in 0..per_item {
            store
                .audit_append(
                    NewAudit::new(id, at, "engine", "action.succeeded")
                        .metadata(serde_json::json!({ "n": n })),
                )
                .await
                .unwrap();
        }
    }
}

async fn all_records(store: &dyn Store) -> Vec<AuditRecord> {
    store
        .audit_list(AuditQuery {
            limit: 10_000,
            ..AuditQuery::default()
        })
        .await
        .unwrap()
}

/// Every object under the store, by name, with its records.
async fn objects(objects: &dyn ObjectStore) -> Vec<(String, Vec<serde_json::Value>)> {
    use futures::TryStreamExt as _;
    let mut listed: Vec<_> = objects.list(None).try_collect().await.unwrap();
    listed.sort_by(|a, b| a.location.cmp(&b.location));
    let mut out = Vec::new();
    for meta in listed {
        let bytes = objects
            .get(&meta.location)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let mut text = String::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_string(&mut text)
            .expect("gzip");
        let lines = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect();
        out.push((meta.location.to_string(), lines));
    }
    out
}

fn local(dir: &std::path::Path) -> Arc<dyn ObjectStore> {
    std::fs::create_dir_all(dir).unwrap();
    Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir).unwrap())
}

fn temp_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("archive-{}", ItemId::new_v7()))
}

async fn records_are_shipped_once_as_gzip_json_lines_in_minute_partitions(backend: Backend) {
    let store = backend.fresh_store().await;
    let clock = Arc::new(ManualClock::new(t0()));
    seed(store.as_ref(), 3, 2, t0()).await;
    let expected = all_records(store.as_ref()).await;
    assert_eq!(expected.len(), 9);
    let dir = temp_dir();
    let target = local(&dir);
    let archiver = Archiver::new(store.clone(), target.clone(), "", clock.clone())
        .attributes(false)
        .batch(4);
    let pass = archiver.pass().await.unwrap();
    assert_eq!(pass.records, 9);
    assert_eq!(pass.objects.len(), 3, "batches of 4: {:?}", pass.objects);
    let shipped = objects(target.as_ref()).await;
    let at = t0();
    let partition = format!(
        "{:04}/{:02}/{:02}/{:02}/{:02}/",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute()
    );
    assert!(
        shipped.iter().all(|(name, _)| name.starts_with(&partition)),
        "{shipped:?}"
    );
    let lines: Vec<serde_json::Value> = shipped.into_iter().flat_map(|(_, lines)| lines).collect();
    let expected_json: Vec<serde_json::Value> = expected
        .iter()
        .map(|record| serde_json::to_value(record).unwrap())
        .collect();
    assert_eq!(lines, expected_json, "every record once, in order");
    assert_eq!(store.audit_unarchived_stats().await.unwrap().0, 0);
    // Nothing new, nothing shipped.
    assert_eq!(archiver.pass().await.unwrap().records, 0);
    assert_eq!(objects(target.as_ref()).await.len(), 3);
    std::fs::remove_dir_all(&dir).ok();
}

/// Stops the first pass after its first upload, as a kill would.
struct KillAfterFirstUpload(AtomicBool);

impl ArchiveHooks for KillAfterFirstUpload {
    fn after_upload(&self, _key: &str) -> bool {
        self.0.swap(true, Ordering::SeqCst)
    }
}

async fn a_crash_between_upload_and_mark_rewrites_the_same_object(backend: Backend) {
    let store = backend.fresh_store().await;
    let clock = Arc::new(ManualClock::new(t0()));
    seed(store.as_ref(), 2, 1, t0()).await;
    let dir = temp_dir();
    let target = local(&dir);
    let crashing = Archiver::new(store.clone(), target.clone(), "", clock.clone())
        .attributes(false)
        .with_hooks(Arc::new(KillAfterFirstUpload(AtomicBool::new(false))));
    let pass = crashing.pass().await.unwrap();
    assert_eq!(pass.records, 0, "stopped before the mark");
    let first = objects(target.as_ref()).await;
    assert_eq!(first.len(), 1);
    assert_eq!(
        store.audit_unarchived_stats().await.unwrap().0,
        4,
        "nothing marked"
    );

    let restarted =
        Archiver::new(store.clone(), target.clone(), "", clock.clone()).attributes(false);
    let pass = restarted.pass().await.unwrap();
    assert_eq!(pass.records, 4);
    let after = objects(target.as_ref()).await;
    assert_eq!(
        after, first,
        "the same object, written again: nothing twice"
    );
    assert_eq!(store.audit_unarchived_stats().await.unwrap().0, 0);
    std::fs::remove_dir_all(&dir).ok();
}

async fn retention_deletes_only_archived_rows_and_the_chains_still_verify(backend: Backend) {
    let store = backend.fresh_store().await;
    let clock = Arc::new(ManualClock::new(t0()));
    seed(store.as_ref(), 2, 2, t0()).await;
    let dir = temp_dir();
    let target = local(&dir);
    let retention = Some(Duration::from_secs(90 * 86_400));
    let archiver = Archiver::new(store.clone(), target.clone(), "", clock.clone())
        .attributes(false)
        .retention(retention);
    archiver.pass().await.unwrap();
    // Newer records, not archived yet.
    let later = t0() + time::Duration::days(100);
    clock.set(later);
    let ids: Vec<ItemId> = all_records(store.as_ref())
        .await
        .iter()
        .map(|record| record.item_id)
        .collect();
    for id in &ids[..1] {
        store
            .audit_append(NewAudit::new(*id, later, "engine", "action.succeeded"))
            .await
            .unwrap();
    }
    // A failing upload leaves the newest unarchived, and the pass prunes
    // only what was archived and is past retention.
    let pruned = store
        .audit_prune_archived(later - time::Duration::days(90))
        .await
        .unwrap();
    assert_eq!(pruned, 6, "the six archived, older rows");
    let left = all_records(store.as_ref()).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].at, later);
    assert_eq!(
        store.audit_verify().await.unwrap(),
        (1, None),
        "it chains to the pruned head"
    );
    // What left the database is in the archive.
    let shipped: usize = objects(target.as_ref())
        .await
        .iter()
        .map(|(_, lines)| lines.len())
        .sum();
    assert_eq!(shipped, 6);
    std::fs::remove_dir_all(&dir).ok();
}

/// A bucket on moto (S3's `CreateBucket`, which moto takes unsigned).
async fn moto_bucket(moto: &Moto) -> String {
    let bucket = format!("audit-{}", ItemId::new_v7().0.simple());
    let status = reqwest::Client::new()
        .put(format!("{}/{bucket}", moto.url))
        .send()
        .await
        .unwrap()
        .status();
    assert!(status.is_success(), "{status}");
    bucket
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_reach_a_real_s3_api_gzip_encoded() {
    let root = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let moto = tokio::task::spawn_blocking(move || wq_testkit::moto::moto(&root))
        .await
        .unwrap();
    let bucket = moto_bucket(moto).await;
    let (key, secret) = Moto::credentials();
    let s3: Arc<dyn ObjectStore> = Arc::new(
        AmazonS3Builder::new()
            .with_bucket_name(&bucket)
            .with_region(REGION)
            .with_endpoint(&moto.url)
            .with_allow_http(true)
            .with_access_key_id(key)
            .with_secret_access_key(secret)
            .build()
            .unwrap(),
    );
    let store = Backend::Postgres.fresh_store().await;
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(t0()));
    seed(store.as_ref(), 2, 3, t0()).await;
    let archiver = Archiver::new(store.clone(), s3.clone(), "prod/audit", clock);
    let pass = archiver.pass().await.unwrap();
    assert_eq!(pass.records, 8);
    let shipped = objects(s3.as_ref()).await;
    assert_eq!(shipped.len(), 1);
    assert!(shipped[0].0.starts_with("prod/audit/"), "{}", shipped[0].0);
    assert_eq!(shipped[0].1.len(), 8);
    let head = s3
        .get_opts(
            &Path::from(shipped[0].0.as_str()),
            object_store::GetOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        head.attributes
            .get(&object_store::Attribute::ContentEncoding)
            .map(|value| value.as_ref()),
        Some("gzip")
    );
}
