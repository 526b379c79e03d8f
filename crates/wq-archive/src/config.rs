//! `audit:`: where the trail is archived and how long the database keeps it.
//!
//! ```yaml
//! audit:
//!   archive:
//!     url: ./audit-archive          # a local directory (the default), or s3://bucket/prefix
//!     # endpoint: http://127.0.0.1:9000   # an S3-compatible endpoint instead of AWS's
//!     interval_seconds: 60
//!     batch_size: 1000
//!   retention_days: 90              # archived rows older than this leave the database
//! ```
//!
//! S3 credentials and region come the standard AWS way, from the
//! environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_DEFAULT_REGION`, web identity, container or instance credentials).

use std::sync::Arc;
use std::time::Duration;

use garde::Validate;
use object_store::ObjectStore;
use serde::Deserialize;

use crate::ArchiveError;

/// Default `audit.archive.url`: a directory beside the working directory.
pub const DEFAULT_URL: &str = "./audit-archive";
/// Default `audit.archive.interval_seconds`.
pub const DEFAULT_INTERVAL_SECONDS: u64 = 60;
/// Default `audit.archive.batch_size`.
pub const DEFAULT_BATCH: u32 = 1000;
/// Default `audit.retention_days`.
pub const DEFAULT_RETENTION_DAYS: u32 = 90;

/// `audit:`
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct AuditSection {
    #[garde(dive)]
    pub archive: ArchiveConfig,
    /// Days an archived record stays in the database, 1 to 36500 (default
    /// [`DEFAULT_RETENTION_DAYS`]); unarchived records are never deleted.
    #[garde(range(min = 1, max = 36_500))]
    pub retention_days: u32,
}

impl Default for AuditSection {
    fn default() -> Self {
        Self {
            archive: ArchiveConfig::default(),
            retention_days: DEFAULT_RETENTION_DAYS,
        }
    }
}

impl AuditSection {
    /// The archive's settings with the retention.
    pub fn archive(&self) -> ArchiveConfig {
        ArchiveConfig {
            retention_days: Some(self.retention_days),
            ..self.archive.clone()
        }
    }
}

/// `audit.archive:`
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct ArchiveConfig {
    /// A local directory (a path, or `file:///...`) or `s3://bucket/prefix`.
    #[garde(length(min = 1, max = 2048))]
    pub url: String,
    /// An S3-compatible endpoint (`http://` allowed only here).
    #[garde(skip)]
    pub endpoint: Option<String>,
    /// Seconds between passes, 1 to 86400.
    #[garde(range(min = 1, max = 86_400))]
    pub interval_seconds: u64,
    /// Records per object, 1 to 100000.
    #[garde(range(min = 1, max = 100_000))]
    pub batch_size: u32,
    /// Set from `audit.retention_days`.
    #[serde(skip)]
    #[garde(skip)]
    pub retention_days: Option<u32>,
}

impl Default for ArchiveConfig {
    fn default() -> Self {
        Self {
            url: DEFAULT_URL.to_owned(),
            endpoint: None,
            interval_seconds: DEFAULT_INTERVAL_SECONDS,
            batch_size: DEFAULT_BATCH,
            retention_days: None,
        }
    }
}

/// Where the archive goes.
pub struct Target {
    pub objects: Arc<dyn ObjectStore>,
    pub prefix: String,
    /// Whether the store keeps object attributes.
    pub attributes: bool,
}

impl ArchiveConfig {
    pub fn interval(&self) -> Duration {
        Duration::from_secs(self.interval_seconds)
    }

    pub fn retention(&self) -> Option<Duration> {
        self.retention_days
            .map(|days| Duration::from_secs(u64::from(days) * 86_400))
    }

    /// The object store the URL names (a local directory is created).
    pub fn target(&self) -> Result<Target, ArchiveError> {
        if let Some(rest) = self.url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(ArchiveError::Config(format!(
                    "audit.archive.url: {:?} names no bucket (s3://bucket/prefix)",
                    self.url
                )));
            }
            let mut builder =
                object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
            if let Some(endpoint) = &self.endpoint {
                builder = builder
                    .with_endpoint(endpoint)
                    .with_allow_http(endpoint.starts_with("http://"))
                    .with_virtual_hosted_style_request(false);
            }
            let objects = builder
                .build()
                .map_err(|error| ArchiveError::Config(format!("audit.archive.url: {error}")))?;
            return Ok(Target {
                objects: Arc::new(objects),
                prefix: prefix.trim_matches('/').to_owned(),
                attributes: true,
            });
        }
        let path = self.url.strip_prefix("file://").unwrap_or(&self.url);
        if path.contains("://") {
            return Err(ArchiveError::Config(format!(
                "audit.archive.url: {:?} is neither a directory nor s3://bucket/prefix",
                self.url
            )));
        }
        std::fs::create_dir_all(path).map_err(|error| {
            ArchiveError::Config(format!(
                "audit.archive.url: cannot create {path:?}: {error}"
            ))
        })?;
        let objects = object_store::local::LocalFileSystem::new_with_prefix(path)
            .map_err(|error| ArchiveError::Config(format!("audit.archive.url: {error}")))?;
        Ok(Target {
            objects: Arc::new(objects),
            prefix: String::new(),
            attributes: false,
        })
    }
}
