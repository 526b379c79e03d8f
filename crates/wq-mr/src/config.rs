//! `mr:` in the service configuration.

use serde::Deserialize;
use wq_forge::MergeMethod;

use crate::spec::SubmissionConfig;

/// Settings of the `mr` type. Every field has a default.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MrConfig {
    /// What a submission may contain.
    pub submission: SubmissionConfig,
    /// Base URL of this service as callers reach it, for the link in the
    /// status note (default `http://127.0.0.1:8080`).
    pub public_url: String,
    /// Label put on every change request workqueue manages.
    pub managed_label: String,
    /// How often an idle item re-reads its change request (30 min).
    pub reconcile_interval_seconds: u64,
    /// How often while CI runs, the merge is queued or the forge is still
    /// computing mergeability: a fallback for lost webhooks (60 s).
    pub reconcile_busy_interval_seconds: u64,
    /// How often the empty-diff check runs (30 min, DDR-43).
    pub empty_check_interval_seconds: u64,
    /// How long an `in_flight` merge attempt may stay unconfirmed before it
    /// becomes `failed` and the explicit retry is offered (5 min).
    pub merge_attempt_deadline_seconds: u64,
    /// Merge method; the forge's project setting when unset.
    pub merge_method: Option<MergeMethod>,
}

impl Default for MrConfig {
    fn default() -> Self {
        Self {
            submission: SubmissionConfig::default(),
            public_url: "http://127.0.0.1:8080".into(),
            managed_label: "managed-by::workqueue".into(),
            reconcile_interval_seconds: 1800,
            reconcile_busy_interval_seconds: 60,
            empty_check_interval_seconds: 1800,
            merge_attempt_deadline_seconds: 300,
            merge_method: None,
        }
    }
}
