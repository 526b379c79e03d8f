//! The audit trail's archive (DDR-17, DDR-28): records leave the database
//! for object storage, where they are kept immutable and cheap.
//!
//! - **Objects.** Each batch of unarchived records, in `seq` order, becomes
//!   one gzip JSON Lines object (`Content-Encoding: gzip` where the store
//!   keeps attributes) named
//!   `PREFIX/YYYY/MM/DD/HH/MM/<first seq>-<last seq>.jsonl.gz` after its
//!   first record's time: the partition layout query engines expect.
//! - **At least once, by name.** A batch is uploaded, then its records are
//!   marked archived. A crash between the two reads the same batch again
//!   and writes the same object again (same name, same bytes: gzip without
//!   a timestamp), so nothing is lost and nothing is stored twice.
//! - **One replica at a time.** [`run`] ships only while it leads the
//!   `audit.archive` task ([`wq_store::Store::lead`]).
//! - **Retention.** Rows older than `retention_days` are deleted only once
//!   archived; the hash of each chain's last deleted record is kept, so
//!   `workqueue audit verify` still checks what remains.
//! - **Lag.** `workqueue_audit_archive_lag_seconds` (age of the oldest
//!   unarchived record) and `workqueue_audit_unarchived_records` are
//!   reported after every pass.

pub mod config;

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path;
use object_store::{Attribute, Attributes, ObjectStore, PutOptions, PutPayload};
use time::OffsetDateTime;
use wq_core::Clock;
use wq_store::Store;
use wq_store::audit::AuditRecord;

pub use config::ArchiveConfig;

/// The periodic task's name, for its leadership.
pub const TASK: &str = "audit.archive";
/// Seconds since the oldest record not archived yet was written.
pub const LAG_SECONDS: &str = "workqueue_audit_archive_lag_seconds";
/// Records not archived yet.
pub const UNARCHIVED: &str = "workqueue_audit_unarchived_records";
/// Records shipped, and objects written.
pub const SHIPPED_RECORDS_TOTAL: &str = "workqueue_audit_archived_records_total";
/// Failed archive passes.
pub const FAILURES_TOTAL: &str = "workqueue_audit_archive_failures_total";

/// Why a pass stopped.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("store: {0}")]
    Store(#[from] wq_store::StoreError),
    #[error("object store: {0}")]
    Object(#[from] object_store::Error),
    #[error("{0}")]
    Config(String),
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    pub records: u64,
    pub objects: Vec<String>,
    pub pruned: u64,
}

/// A fault point for tests: after a batch's object is written, before its
/// records are marked archived.
pub trait ArchiveHooks: Send + Sync {
    /// `false` stops the pass there, as a killed process would.
    fn after_upload(&self, key: &str) -> bool {
        let _ = key;
        true
    }
}

struct NoHooks;

impl ArchiveHooks for NoHooks {}

/// Ships the store's audit records to an object store.
pub struct Archiver {
    store: Arc<dyn Store>,
    objects: Arc<dyn ObjectStore>,
    prefix: Path,
    /// Whether the object store keeps `Content-Encoding` (S3 does, a local
    /// directory does not).
    attributes: bool,
    batch: u32,
    retention: Option<Duration>,
    clock: Arc<dyn Clock>,
    hooks: Arc<dyn ArchiveHooks>,
}

impl Archiver {
    /// An archiver of `store` into `objects` under `prefix`.
    pub fn new(
        store: Arc<dyn Store>,
        objects: Arc<dyn ObjectStore>,
        prefix: &str,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            objects,
            prefix: Path::from(prefix.trim_matches('/')),
            attributes: true,
            batch: config::DEFAULT_BATCH,
            retention: None,
            clock,
            hooks: Arc::new(NoHooks),
        }
    }

    /// From the `audit:` section: the object store its URL names.
    pub fn from_config(
        store: Arc<dyn Store>,
        config: &ArchiveConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ArchiveError> {
        let target = config.target()?;
        let mut archiver = Self::new(store, target.objects, &target.prefix, clock);
        archiver.attributes = target.attributes;
        archiver.batch = config.batch_size;
        archiver.retention = config.retention();
        Ok(archiver)
    }

    /// Records per object.
    pub fn batch(mut self, batch: u32) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// Archived rows older than this are deleted.
    pub fn retention(mut self, retention: Option<Duration>) -> Self {
        self.retention = retention;
        self
    }

    /// Whether to send `Content-Encoding` and `Content-Type` (the local
    /// directory store refuses attributes).
    pub fn attributes(mut self, attributes: bool) -> Self {
        self.attributes = attributes;
        self
    }

    pub fn with_hooks(mut self, hooks: Arc<dyn ArchiveHooks>) -> Self {
        self.hooks = hooks;
        self
    }

    /// The object name of a batch (first and last record).
    pub fn key(&self, first: &AuditRecord, last: &AuditRecord) -> Path {
        let at = first.at;
        let name = format!(
            "{:04}/{:02}/{:02}/{:02}/{:02}/{:020}-{:020}.jsonl.gz",
            at.year(),
            u8::from(at.month()),
            at.day(),
            at.hour(),
            at.minute(),
            first.seq,
            last.seq
        );
        if self.prefix.as_ref().is_empty() {
            Path::from(name)
        } else {
            Path::from(format!("{}/{name}", self.prefix))
        }
    }

    /// Ships every unarchived record, batch by batch, then prunes what
    /// retention allows, and reports the lag.
    pub async fn pass(&self) -> Result<Pass, ArchiveError> {
        let mut pass = Pass::default();
        loop {
            let batch = self.store.audit_unarchived(self.batch).await?;
            let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
                break;
            };
            let key = self.key(first, last);
            let body = gzip_lines(&batch);
            let mut options = PutOptions::default();
            if self.attributes {
                let mut attributes = Attributes::new();
                attributes.insert(Attribute::ContentEncoding, "gzip".into());
                attributes.insert(Attribute::ContentType, "application/x-ndjson".into());
                options.attributes = attributes;
            }
            self.objects
                .put_opts(&key, PutPayload::from(body), options)
                .await?;
            if !self.hooks.after_upload(key.as_ref()) {
                return Ok(pass);
            }
            let seqs: Vec<i64> = batch.iter().map(|record| record.seq).collect();
            self.store
                .audit_mark_archived(&seqs, self.clock.now())
                .await?;
            pass.records += seqs.len() as u64;
            pass.objects.push(key.to_string());
            metrics::counter!(SHIPPED_RECORDS_TOTAL).increment(seqs.len() as u64);
            if batch.len() < self.batch as usize {
                break;
            }
        }
        if let Some(retention) = self.retention {
            let before = self.clock.now() - retention;
            pass.pruned = self.store.audit_prune_archived(before).await?;
        }
        self.report_lag().await?;
        Ok(pass)
    }

    async fn report_lag(&self) -> Result<(), ArchiveError> {
        let (count, oldest) = self.store.audit_unarchived_stats().await?;
        let lag = oldest.map_or(0.0, |oldest: OffsetDateTime| {
            (self.clock.now() - oldest).as_seconds_f64().max(0.0)
        });
        metrics::gauge!(LAG_SECONDS).set(lag);
        metrics::gauge!(UNARCHIVED).set(count as f64);
        Ok(())
    }
}

/// The records as gzip JSON Lines, the same bytes for the same records
/// (no timestamp in the gzip header).
pub fn gzip_lines(records: &[AuditRecord]) -> Vec<u8> {
    let mut encoder = flate2::GzBuilder::new().write(Vec::new(), flate2::Compression::default());
    for record in records {
        let line = serde_json::to_vec(record).expect("a record serialises");
        encoder.write_all(&line).expect("writing to memory");
        encoder.write_all(b"\n").expect("writing to memory");
    }
    encoder.finish().expect("writing to memory")
}

/// Archives every `interval` while this process leads [`TASK`], until
/// `stop` fires. On SQLite (one process) it always leads.
pub async fn run(
    archiver: Archiver,
    interval: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    metrics::describe_gauge!(
        LAG_SECONDS,
        "Seconds since the oldest audit record not archived yet."
    );
    metrics::describe_gauge!(UNARCHIVED, "Audit records not archived yet.");
    metrics::describe_counter!(
        SHIPPED_RECORDS_TOTAL,
        "Audit records shipped to the archive."
    );
    metrics::describe_counter!(FAILURES_TOTAL, "Archive passes that failed.");
    let mut lead = None;
    loop {
        if *stop.borrow() {
            break;
        }
        if lead.is_none() {
            match archiver.store.lead(TASK).await {
                Ok(found) => lead = found,
                Err(error) => tracing::warn!(%error, "asking for the lead of {TASK} failed"),
            }
        }
        if let Some(held) = lead.as_mut() {
            if held.still_held().await {
                match archiver.pass().await {
                    Ok(pass) if pass.records > 0 || pass.pruned > 0 => {
                        tracing::info!(
                            records = pass.records,
                            objects = pass.objects.len(),
                            pruned = pass.pruned,
                            "audit records archived"
                        );
                    }
                    Ok(_) => {}
                    Err(error) => {
                        metrics::counter!(FAILURES_TOTAL).increment(1);
                        tracing::warn!(%error, "archiving audit records failed; trying again in {interval:?}");
                    }
                }
            } else {
                lead = None;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = stop.changed() => break,
        }
    }
    if let Some(held) = lead {
        held.release().await;
    }
}
