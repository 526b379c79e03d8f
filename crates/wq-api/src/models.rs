//! Wire types of the REST API (`/api/v1`). They are separate from the domain
//! types so the API's shape changes only on purpose; the CLI and the tests
//! deserialize the same structs.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use wq_core::{Dimension, DimensionStatus, ItemId, Phase, StatusSummary, WorkItem};

/// A work item as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemBody {
    pub id: ItemId,
    pub item_type: String,
    pub phase: Phase,
    pub actionable: bool,
    pub attempts: i32,
    pub error: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub leased_until: Option<OffsetDateTime>,
    pub idempotency_key: Option<String>,
    pub caller_identity: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_event_at: Option<OffsetDateTime>,
    /// In a listing: the item at a glance, as its type summarises it from
    /// stored state (change request, CI, queue entry, unmet gates, last
    /// merge attempt, automations); absent for types without a summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<StatusSummary>,
}

impl From<WorkItem> for ItemBody {
    fn from(item: WorkItem) -> Self {
        Self {
            id: item.id,
            item_type: item.item_type,
            phase: item.phase,
            actionable: item.actionable,
            attempts: item.attempts,
            error: item.error,
            leased_until: item.leased_until,
            idempotency_key: item.idempotency_key,
            caller_identity: item.caller_identity,
            created_at: item.created_at,
            updated_at: item.updated_at,
            last_event_at: item.last_event_at,
            status: None,
        }
    }
}

impl ItemBody {
    /// The body with the type's summary.
    pub fn with_status(mut self, status: Option<StatusSummary>) -> Self {
        self.status = status;
        self
    }
}

/// One dimension row of an item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DimensionBody {
    pub dimension: String,
    /// Empty for single-instance dimensions.
    pub variant: String,
    pub status: DimensionStatus,
    pub detail: serde_json::Value,
    #[serde(with = "time::serde::rfc3339::option")]
    pub pending_until: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl From<Dimension> for DimensionBody {
    fn from(row: Dimension) -> Self {
        Self {
            dimension: row.dimension,
            variant: row.variant,
            status: row.status,
            detail: row.detail,
            pending_until: row.pending_until,
            updated_at: row.updated_at,
        }
    }
}

/// `GET /api/v1/work-items/{id}`: the item and its dimensions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemDetail {
    #[serde(flatten)]
    pub item: ItemBody,
    pub dimensions: Vec<DimensionBody>,
    /// The item type's own view (e.g. the merge request), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

/// `POST /api/v1/work-items`: what the submission did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SubmitResponse {
    /// `created`, `unchanged`, `updated` or `retried`.
    pub outcome: String,
    pub item: ItemBody,
}

/// `GET /api/v1/work-items`: one page, newest first. `next_before` is the
/// cursor of the next page (`?before=`), `null` on the last page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemList {
    pub items: Vec<ItemBody>,
    pub next_before: Option<ItemId>,
}

/// `GET /healthz` and `GET /readyz` when healthy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HealthBody {
    pub status: String,
}

/// `GET /api/v1/me`: who the credentials belong to and what they grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MeBody {
    /// `jwt`, `openshift` or `static_token`.
    pub kind: String,
    /// The JWT's `sub`, the OpenShift user name or the static token's
    /// identity.
    pub subject: String,
    /// How the caller is named in logs, e.g. `alice` or
    /// `nightly-bot (token nightly)`.
    pub name: String,
    /// The JWT's issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The static token's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_name: Option<String>,
    /// The OpenShift user's or the static token's groups (empty for JWTs,
    /// whose rules match claims).
    pub groups: Vec<String>,
    /// The rules that match the caller, in file order.
    pub rules: Vec<MeRule>,
    /// Every permission some matching rule grants (`admin` implies all), in
    /// that rule's scope.
    pub permissions: Vec<String>,
    /// Only behind the OAuth proxy (`auth.oauth_proxy.enabled`, DDR-27):
    /// the session's access token, to send as `Authorization: Bearer` from
    /// now on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// One rule in `MeBody::rules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MeRule {
    pub name: String,
    /// As the rule names them.
    pub permissions: Vec<String>,
}

impl MeBody {
    /// The body for `principal`; `token` only from the OAuth proxy.
    pub fn new(principal: &wq_auth::Principal, token: Option<String>) -> Self {
        use wq_auth::{Identity, Permission};
        let (kind, subject, issuer, token_name, groups) = match principal.identity() {
            Identity::Jwt {
                issuer, subject, ..
            } => ("jwt", subject, Some(issuer.clone()), None, Vec::new()),
            Identity::OpenShift { username, groups } => {
                ("openshift", username, None, None, groups.clone())
            }
            Identity::StaticToken {
                name,
                identity,
                groups,
            } => (
                "static_token",
                identity,
                None,
                Some(name.clone()),
                groups.clone(),
            ),
        };
        let rules: Vec<MeRule> = principal
            .rules()
            .map(|rule| MeRule {
                name: rule.name().to_owned(),
                permissions: rule
                    .permissions()
                    .iter()
                    .map(|permission| permission.as_str().to_owned())
                    .collect(),
            })
            .collect();
        let permissions = Permission::ALL
            .into_iter()
            .filter(|permission| {
                principal
                    .rules()
                    .any(|rule| rule.permissions().allows(*permission))
            })
            .map(|permission| permission.as_str().to_owned())
            .collect();
        Self {
            kind: kind.to_owned(),
            subject: subject.clone(),
            name: principal.name(),
            issuer,
            token_name,
            groups,
            rules,
            permissions,
            token,
        }
    }
}

#[cfg(test)]
mod snapshots {
    //! The item bodies as callers read them: a field renamed, dropped or
    //! re-encoded shows in review.

    use super::*;
    use time::macros::datetime;

    fn item() -> ItemBody {
        ItemBody {
            id: "0192f0c4-6a1e-7c3e-9f00-000000000001"
                .parse()
                .expect("a uuid"),
            item_type: "mr".to_owned(),
            phase: Phase::Active,
            actionable: false,
            attempts: 2,
            error: Some("forge: 503 Service Unavailable".to_owned()),
            leased_until: None,
            idempotency_key: Some("build-42".to_owned()),
            caller_identity: Some("nightly-bot (token nightly, rule bots)".to_owned()),
            created_at: datetime!(2026-12-01 09:30:00.123456 UTC),
            updated_at: datetime!(2026-12-01 09:31:05 UTC),
            last_event_at: Some(datetime!(2026-12-01 09:31:04.5 UTC)),
            status: None,
        }
    }

    fn status() -> StatusSummary {
        use wq_core::status::{Automation, ChangeRef, CiState, LastMerge, QueueStatus, UnmetGate};
        StatusSummary {
            title: Some("Bump the base image".to_owned()),
            forge: Some("gitlab".to_owned()),
            project: Some("team/app".to_owned()),
            branch: Some("wq/bump".to_owned()),
            change: Some(ChangeRef {
                number: 7,
                url: Some("https://gitlab.example/team/app/-/merge_requests/7".to_owned()),
                head_sha: Some("0123456789abcdef0123456789abcdef01234567".to_owned()),
            }),
            ci: CiState::Passed,
            queue: Some(QueueStatus {
                state: "queued".to_owned(),
                position: Some(2),
                eta_seconds: Some(61),
            }),
            gates_checked: true,
            unmet_gates: vec![UnmetGate {
                name: "threads_resolved".to_owned(),
                reason: "not yet: every thread is resolved".to_owned(),
            }],
            more_unmet_gates: 0,
            last_merge: Some(LastMerge {
                result: "failed".to_owned(),
                error_kind: Some("auto_merge".to_owned()),
                error: Some("the forge refused: 405".to_owned()),
            }),
            automation: Automation {
                ci_retry: true,
                auto_merge: true,
            },
            needs_attention: true,
        }
    }

    #[test]
    fn an_item_detail_reads_as_callers_expect() {
        let detail = ItemDetail {
            item: item(),
            dimensions: vec![
                DimensionBody {
                    dimension: "ci".to_owned(),
                    variant: String::new(),
                    status: DimensionStatus::False,
                    detail: serde_json::json!({"pipeline": 17}),
                    pending_until: Some(datetime!(2026-12-01 09:36:05 UTC)),
                    updated_at: datetime!(2026-12-01 09:31:05 UTC),
                },
                DimensionBody {
                    dimension: "review".to_owned(),
                    variant: String::new(),
                    status: DimensionStatus::True,
                    detail: serde_json::Value::Null,
                    pending_until: None,
                    updated_at: datetime!(2026-12-01 09:31:00 UTC),
                },
            ],
            detail: Some(serde_json::json!({"mr": {"iid": 7}})),
        };
        insta::assert_json_snapshot!(detail);
    }

    #[test]
    fn a_submission_answer_and_a_list_page_read_as_callers_expect() {
        insta::assert_json_snapshot!(
            "submit_response",
            SubmitResponse {
                outcome: "created".to_owned(),
                item: item()
            }
        );
        insta::assert_json_snapshot!(
            "item_list",
            ItemList {
                items: vec![item().with_status(Some(status()))],
                next_before: Some(item().id)
            }
        );
    }
}
