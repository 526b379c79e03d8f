//! `mr:` in the service configuration.

use serde::Deserialize;
use wq_forge::MergeMethod;

use crate::spec::{ConfigErrors, FieldError, SubmissionConfig, SubmissionRules};

/// Settings of the `mr` type. Every field has a default.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MrConfig {
    /// What a submission may contain.
    pub submission: SubmissionConfig,
    /// Base URL of this service as callers reach it, for the link in the
    /// status note (default `http://127.0.0.1:8080`).
    pub public_url: String,
    /// Label put on every change request workqueue manages.
    pub managed_label: String,
    /// The review gate `review_by_person`: an approval by someone other than
    /// the token's forge user before the automatic merge, whatever the
    /// forge's own rules (default true: a caller's change deserves a
    /// person's look). With false, the forge's own rules decide (gate
    /// `approved`).
    pub require_review: bool,
    /// `require_review` for one forge, or one project of a forge; the most
    /// specific entry wins.
    pub review_overrides: Vec<ReviewOverride>,
    /// Least time between two edits of the status note (30 s); the final
    /// state of an ended item is written at once.
    pub note_min_interval_seconds: u64,
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
    /// How often the `mr.queue_sync` periodic task (run by the engines that
    /// handle `mr`) reads the merge queue entries of queued pull requests,
    /// one batched GraphQL query per repository (30 s).
    pub queue_sync_interval_seconds: u64,
    /// Take over a source branch or an open change request workqueue did
    /// not create (force-push over the branch, retitle, label and merge the
    /// change request). Off by default: such a submission fails with
    /// `branch_not_managed`.
    pub adopt_existing_branches: bool,
    /// How many times the merge call is made again on its own after a
    /// transient answer (5xx, 429, timeout) once a re-read proved the change
    /// request open, unmerged and unqueued at the checked head (3); then the
    /// attempt is `failed` and waits for `retry-merge`. 0: none.
    pub merge_transient_retries: u32,
    /// The first wait before such a call, doubled for each later one up to
    /// `reconcile_interval_seconds`, and never shorter than the forge's
    /// `Retry-After` (30 s).
    pub merge_transient_backoff_seconds: u64,
    /// The share of a forge token's rate-limit budget, in percent, kept
    /// for merges (10): while less is left in the window the forge last
    /// reported, a reconcile its timer woke (a background read: no webhook
    /// or command asked for it, no merge attempt waits on it) is deferred
    /// until the window renews; and once less than half of what lies above
    /// it is left, such reads spread out ([`wq_forge::RateBudget::pace`]).
    /// 0: never deferred.
    pub rate_limit_reserve_percent: u8,
}

/// One entry of `mr.review_overrides`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewOverride {
    /// A configured forge's name.
    pub forge: String,
    /// A project path (any case); the whole forge when absent.
    #[serde(default)]
    pub project: Option<String>,
    pub require_review: bool,
}

impl Default for MrConfig {
    fn default() -> Self {
        Self {
            submission: SubmissionConfig::default(),
            public_url: "http://127.0.0.1:8080".into(),
            managed_label: "managed-by::workqueue".into(),
            require_review: true,
            review_overrides: Vec::new(),
            note_min_interval_seconds: 30,
            reconcile_interval_seconds: 1800,
            reconcile_busy_interval_seconds: 60,
            empty_check_interval_seconds: 1800,
            merge_attempt_deadline_seconds: 300,
            merge_method: None,
            queue_sync_interval_seconds: 30,
            adopt_existing_branches: false,
            merge_transient_retries: 3,
            merge_transient_backoff_seconds: 30,
            rate_limit_reserve_percent: 10,
        }
    }
}

impl MrConfig {
    /// Whether `project` on `forge` needs a person's approval
    /// (`review_by_person`): its project entry, else its forge entry, else
    /// `require_review`.
    pub fn requires_review(&self, forge: &str, project: &str) -> bool {
        let project_entry = self.review_overrides.iter().find(|o| {
            o.forge == forge
                && o.project
                    .as_deref()
                    .is_some_and(|p| p.eq_ignore_ascii_case(project))
        });
        let forge_entry = || {
            self.review_overrides
                .iter()
                .find(|o| o.forge == forge && o.project.is_none())
        };
        project_entry
            .or_else(forge_entry)
            .map_or(self.require_review, |o| o.require_review)
    }

    /// Checks what serde cannot and compiles the submission rules. Every
    /// problem is reported, each naming its field (`mr.…`).
    pub fn compile(&self) -> Result<SubmissionRules, ConfigErrors> {
        let mut errors = Vec::new();
        // A zero interval would re-arm a timer that is already due: the item
        // would re-read the forge in a loop until its deadline.
        for (field, value) in [
            (
                "reconcile_interval_seconds",
                self.reconcile_interval_seconds,
            ),
            (
                "reconcile_busy_interval_seconds",
                self.reconcile_busy_interval_seconds,
            ),
            (
                "empty_check_interval_seconds",
                self.empty_check_interval_seconds,
            ),
            (
                "merge_attempt_deadline_seconds",
                self.merge_attempt_deadline_seconds,
            ),
            (
                "queue_sync_interval_seconds",
                self.queue_sync_interval_seconds,
            ),
            (
                "merge_transient_backoff_seconds",
                self.merge_transient_backoff_seconds,
            ),
        ] {
            if !(1..=MAX_INTERVAL_SECONDS).contains(&value) {
                errors.push(FieldError::new(
                    format!("mr.{field}"),
                    format!("must be between 1 and {MAX_INTERVAL_SECONDS}, got {value}"),
                ));
            }
        }
        if self.merge_transient_retries > MAX_TRANSIENT_RETRIES {
            errors.push(FieldError::new(
                "mr.merge_transient_retries",
                format!(
                    "must be between 0 and {MAX_TRANSIENT_RETRIES}, got {}",
                    self.merge_transient_retries
                ),
            ));
        }
        if self.rate_limit_reserve_percent > 100 {
            errors.push(FieldError::new(
                "mr.rate_limit_reserve_percent",
                format!(
                    "must be at most 100, got {}",
                    self.rate_limit_reserve_percent
                ),
            ));
        }
        if self.note_min_interval_seconds > MAX_INTERVAL_SECONDS {
            errors.push(FieldError::new(
                "mr.note_min_interval_seconds",
                format!(
                    "must be at most {MAX_INTERVAL_SECONDS}, got {}",
                    self.note_min_interval_seconds
                ),
            ));
        }
        let mut seen: Vec<(&str, Option<String>)> = Vec::new();
        for (index, entry) in self.review_overrides.iter().enumerate() {
            let at = format!("mr.review_overrides[{index}]");
            if entry.forge.trim().is_empty() {
                errors.push(FieldError::new(
                    format!("{at}.forge"),
                    "must name a configured forge",
                ));
            }
            if entry
                .project
                .as_deref()
                .is_some_and(|p| p.trim().is_empty())
            {
                errors.push(FieldError::new(
                    format!("{at}.project"),
                    "must be a project path, or absent for the whole forge",
                ));
            }
            let key = (
                entry.forge.as_str(),
                entry.project.as_deref().map(str::to_lowercase),
            );
            if let Some(first) = seen.iter().position(|k| *k == key) {
                errors.push(FieldError::new(
                    at,
                    format!(
                        "repeats mr.review_overrides[{first}] (forge {:?}, project {:?})",
                        entry.forge,
                        entry.project.as_deref().unwrap_or("*")
                    ),
                ));
            }
            seen.push(key);
        }
        let url_ok = url::Url::parse(&self.public_url)
            .is_ok_and(|url| matches!(url.scheme(), "http" | "https") && url.has_host());
        if !url_ok {
            errors.push(FieldError::new(
                "mr.public_url",
                format!("expected an http(s) URL, got {:?}", self.public_url),
            ));
        }
        if self.managed_label.contains(',') || self.managed_label.chars().any(char::is_control) {
            errors.push(FieldError::new(
                "mr.managed_label",
                format!(
                    "must not contain commas or control characters, got {:?}",
                    self.managed_label
                ),
            ));
        }
        match self.submission.compile() {
            Ok(rules) if errors.is_empty() => Ok(rules),
            Ok(_) => Err(ConfigErrors(errors)),
            Err(more) => {
                errors.extend(more.0);
                Err(ConfigErrors(errors))
            }
        }
    }
}

/// Most automatic merge calls after transient answers.
const MAX_TRANSIENT_RETRIES: u32 = 10;

/// Longest accepted interval (one week).
const MAX_INTERVAL_SECONDS: u64 = 7 * 24 * 3600;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_compile_and_bad_values_name_their_field() {
        assert!(MrConfig::default().compile().is_ok());
        let config = MrConfig {
            reconcile_interval_seconds: 0,
            merge_attempt_deadline_seconds: 0,
            public_url: "not a url".into(),
            managed_label: "a,b".into(),
            merge_transient_retries: 11,
            merge_transient_backoff_seconds: 0,
            ..MrConfig::default()
        };
        let Err(errors) = config.compile() else {
            panic!("a bad config was accepted");
        };
        assert_eq!(
            errors.lines(),
            vec![
                "mr.reconcile_interval_seconds: must be between 1 and 604800, got 0".to_owned(),
                "mr.merge_attempt_deadline_seconds: must be between 1 and 604800, got 0".to_owned(),
                "mr.merge_transient_backoff_seconds: must be between 1 and 604800, got 0"
                    .to_owned(),
                "mr.merge_transient_retries: must be between 0 and 10, got 11".to_owned(),
                "mr.public_url: expected an http(s) URL, got \"not a url\"".to_owned(),
                "mr.managed_label: must not contain commas or control characters, got \"a,b\""
                    .to_owned(),
            ]
        );
        assert_eq!(errors.0[4].field, "mr.public_url");
    }

    #[test]
    fn the_rate_limit_reserve_is_a_share_of_at_most_all() {
        let config = MrConfig {
            rate_limit_reserve_percent: 101,
            ..MrConfig::default()
        };
        let Err(errors) = config.compile() else {
            panic!("a reserve above 100% was accepted");
        };
        assert_eq!(
            errors.lines(),
            vec!["mr.rate_limit_reserve_percent: must be at most 100, got 101".to_owned()]
        );
        let all = MrConfig {
            rate_limit_reserve_percent: 100,
            ..MrConfig::default()
        };
        assert!(all.compile().is_ok());
    }

    #[test]
    fn the_review_gate_is_chosen_per_forge_and_project() {
        let config: MrConfig = serde_json::from_value(serde_json::json!({
            "require_review": true,
            "review_overrides": [
                {"forge": "github", "require_review": false},
                {"forge": "github", "project": "Team/App", "require_review": true},
            ],
        }))
        .expect("config");
        assert!(config.compile().is_ok());
        assert!(config.requires_review("gitlab", "team/app"));
        assert!(!config.requires_review("github", "team/other"));
        assert!(
            config.requires_review("github", "team/app"),
            "project entry, any case"
        );
        assert!(
            MrConfig::default().requires_review("github", "x/y"),
            "on by default"
        );

        let bad = MrConfig {
            review_overrides: vec![
                ReviewOverride {
                    forge: String::new(),
                    project: None,
                    require_review: false,
                },
                ReviewOverride {
                    forge: "github".into(),
                    project: Some("a/b".into()),
                    require_review: false,
                },
                ReviewOverride {
                    forge: "github".into(),
                    project: Some("A/B".into()),
                    require_review: true,
                },
            ],
            note_min_interval_seconds: MAX_INTERVAL_SECONDS + 1,
            ..MrConfig::default()
        };
        let Err(errors) = bad.compile() else {
            panic!("a bad config was accepted");
        };
        assert_eq!(
            errors.lines(),
            vec![
                "mr.note_min_interval_seconds: must be at most 604800, got 604801".to_owned(),
                "mr.review_overrides[0].forge: must name a configured forge".to_owned(),
                "mr.review_overrides[2]: repeats mr.review_overrides[1] (forge \"github\", project \"A/B\")".to_owned(),
            ]
        );
        let unknown: Result<MrConfig, _> = serde_json::from_value(serde_json::json!({
            "review_overrides": [{"forge": "github", "required": false}],
        }));
        assert!(unknown.is_err(), "unknown fields are refused");
    }
}
