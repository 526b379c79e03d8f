//! Webhook receivers (DDR-29 to DDR-33): authenticate the delivery, resolve
//! the active item it is about, store it as a pending event. Nothing else
//! happens here: the item's loop interprets it.

use std::sync::Arc;

use async_trait::async_trait;
use time::OffsetDateTime;
use wq_core::{DeliveryTrust, Headers, ItemId, WebhookError, WebhookReceipt, WebhookReceiver};
use wq_forge::{Forge, ForgeEvent, ForgeKind, WebhookRejection};
use wq_store::{EventOrigin, NewEvent, StoreError};

use crate::MrType;
use crate::store::Lookup;

/// The stored event type of webhook deliveries.
pub const WEBHOOK_EVENT: &str = "mr.webhook";

/// On a trusted channel, the header naming the forge instance a delivery
/// comes from; needed only when several instances of its kind are
/// configured (nothing authenticates it to one of them).
pub const FORGE_HEADER: &str = "x-workqueue-forge";

/// One receiver per forge kind that has a configured instance.
pub(crate) fn receivers(mr: &Arc<MrType>) -> Vec<Arc<dyn WebhookReceiver>> {
    [ForgeKind::Gitlab, ForgeKind::Github]
        .into_iter()
        .filter(|kind| {
            mr.forges
                .names()
                .any(|name| mr.forges.get(name).is_some_and(|f| f.kind() == *kind))
        })
        .map(|kind| {
            Arc::new(ForgeWebhooks {
                mr: mr.clone(),
                kind,
            }) as Arc<dyn WebhookReceiver>
        })
        .collect()
}

/// Receives `/webhooks/{gitlab|github}` for every configured instance of
/// that kind; the instance whose secret authenticates the delivery is the
/// one it came from.
pub struct ForgeWebhooks {
    mr: Arc<MrType>,
    kind: ForgeKind,
}

impl ForgeWebhooks {
    fn instances(&self) -> Vec<(String, Arc<dyn Forge>)> {
        self.mr
            .forges
            .names()
            .filter_map(|name| {
                let forge = self.mr.forges.get(name)?;
                (forge.kind() == self.kind).then(|| (name.to_owned(), forge.clone()))
            })
            .collect()
    }

    /// The instance whose secret authenticates the delivery, and the event.
    fn authenticated(
        &self,
        pairs: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(String, ForgeEvent), WebhookError> {
        for (name, forge) in self.instances() {
            match forge.parse_webhook(pairs, body) {
                Ok(event) => return Ok((name, event)),
                Err(WebhookRejection::Unauthenticated(_)) => continue,
                Err(WebhookRejection::Malformed(reason)) => {
                    return Err(WebhookError::Malformed(reason));
                }
            }
        }
        tracing::warn!(
            source = self.source(),
            "webhook refused: no configured forge authenticates it"
        );
        Err(WebhookError::Unauthenticated(
            "no configured forge instance authenticates this delivery".into(),
        ))
    }

    /// A delivery from a trusted channel: the instance it names in
    /// [`FORGE_HEADER`], else the only one of this kind.
    fn trusted(
        &self,
        pairs: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(String, ForgeEvent), WebhookError> {
        let instances = self.instances();
        let named = pairs
            .iter()
            .find(|(name, _)| *name == FORGE_HEADER)
            .map(|(_, value)| *value);
        let (name, forge) = match named {
            Some(wanted) => instances
                .into_iter()
                .find(|(name, _)| name == wanted)
                .ok_or_else(|| {
                    WebhookError::Malformed(format!(
                        "header {FORGE_HEADER}: no {} instance {wanted:?} is configured",
                        self.kind.as_str()
                    ))
                })?,
            None if instances.len() == 1 => instances.into_iter().next().expect("one"),
            None => {
                return Err(WebhookError::Malformed(format!(
                    "header {FORGE_HEADER}: missing, and {} {} instances are configured",
                    instances.len(),
                    self.kind.as_str()
                )));
            }
        };
        match forge.parse_trusted_webhook(pairs, body) {
            Ok(event) => Ok((name, event)),
            Err(
                WebhookRejection::Unauthenticated(reason) | WebhookRejection::Malformed(reason),
            ) => Err(WebhookError::Malformed(reason)),
        }
    }

    /// Who delivered it, for the audit record: the channel (`sqs`) or this
    /// source's webhook, the sender's delivery id and the raw body.
    fn origin(&self, headers: &Headers, body: &[u8]) -> EventOrigin {
        let header = |wanted: &str| {
            headers
                .iter()
                .find(|(name, _)| name == wanted)
                .map(|(_, value)| value.clone())
        };
        EventOrigin {
            actor: header(wq_core::CHANNEL_HEADER)
                .unwrap_or_else(|| format!("webhook:{}", self.source())),
            delivery_id: header("x-gitlab-event-uuid").or_else(|| header("x-github-delivery")),
            raw: Some(String::from_utf8_lossy(body).into_owned()),
        }
    }

    /// The active item on `branch`, when the delivery names one.
    async fn by_branch(
        &self,
        forge: &str,
        project: &str,
        branch: Option<&str>,
    ) -> Result<Option<ItemId>, StoreError> {
        match branch {
            Some(branch) => {
                self.mr
                    .store
                    .find_active(forge, project, Lookup::Branch(branch))
                    .await
            }
            None => Ok(None),
        }
    }

    async fn resolve(&self, forge: &str, event: &ForgeEvent) -> Result<Option<ItemId>, StoreError> {
        let store = &self.mr.store;
        match event {
            ForgeEvent::Change {
                project,
                number,
                source_branch,
                ..
            } => {
                if let Some(id) = store
                    .find_active(forge, project, Lookup::Number(*number))
                    .await?
                {
                    return Ok(Some(id));
                }
                // The MR was opened before ensure_mr recorded its number.
                self.by_branch(forge, project, source_branch.as_deref())
                    .await
            }
            ForgeEvent::Pipeline {
                project,
                pipeline_id,
                ref_name,
                number,
                ..
            } => {
                if let Some(id) = store
                    .find_active(forge, project, Lookup::Pipeline(*pipeline_id))
                    .await?
                {
                    return Ok(Some(id));
                }
                // A new head pipeline not recorded yet: a merge request
                // pipeline names its change request (GitLab's
                // `refs/merge-requests/<iid>/head`, the Pipeline Hook's
                // merge request), a branch pipeline its branch. The
                // reconcile it triggers tells a superseded pipeline from
                // the head.
                if let Some(number) = number
                    && let Some(id) = store
                        .find_active(forge, project, Lookup::Number(*number))
                        .await?
                {
                    return Ok(Some(id));
                }
                self.by_branch(forge, project, ref_name.as_deref()).await
            }
            ForgeEvent::Job {
                project,
                pipeline_id,
                ref_name,
                number,
                sha,
                ..
            } => {
                // GitLab: the recorded head pipeline, else the merge
                // request a merge request pipeline's ref names
                // (`refs/merge-requests/<iid>/head`). GitHub records none:
                // an Actions job is found by its branch, else its commit.
                // The handler and the executor tell a superseded pipeline
                // or commit from the head.
                if let Some(id) = store
                    .find_active(forge, project, Lookup::Pipeline(*pipeline_id))
                    .await?
                {
                    return Ok(Some(id));
                }
                if let Some(number) = number
                    && let Some(id) = store
                        .find_active(forge, project, Lookup::Number(*number))
                        .await?
                {
                    return Ok(Some(id));
                }
                if let Some(id) = self.by_branch(forge, project, ref_name.as_deref()).await? {
                    return Ok(Some(id));
                }
                match sha {
                    Some(sha) => {
                        store
                            .find_active(forge, project, Lookup::HeadSha(sha))
                            .await
                    }
                    None => Ok(None),
                }
            }
            ForgeEvent::Note {
                project, number, ..
            } => {
                store
                    .find_active(forge, project, Lookup::Number(*number))
                    .await
            }
            ForgeEvent::Checks {
                project,
                numbers,
                ref_name,
                ..
            } => {
                for number in numbers {
                    if let Some(id) = store
                        .find_active(forge, project, Lookup::Number(*number))
                        .await?
                    {
                        return Ok(Some(id));
                    }
                }
                self.by_branch(forge, project, ref_name.as_deref()).await
            }
            ForgeEvent::Queue {
                project, number, ..
            } => {
                store
                    .find_active(forge, project, Lookup::Number(*number))
                    .await
            }
            ForgeEvent::Ignored { .. } => Ok(None),
        }
    }
}

#[async_trait]
impl WebhookReceiver for ForgeWebhooks {
    fn source(&self) -> &'static str {
        self.kind.as_str()
    }

    fn recognizes(&self, headers: &Headers) -> bool {
        let wanted = self.kind.event_header();
        headers.iter().any(|(name, _)| name == wanted)
    }

    async fn receive(
        &self,
        headers: &Headers,
        body: &[u8],
        trust: DeliveryTrust,
        now: OffsetDateTime,
    ) -> Result<WebhookReceipt, WebhookError> {
        let pairs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let (forge, event) = match trust {
            DeliveryTrust::Verify => self.authenticated(&pairs, body)?,
            DeliveryTrust::Channel => self.trusted(&pairs, body)?,
        };
        if let ForgeEvent::Ignored { reason } = &event {
            tracing::info!(source = self.source(), %forge, %reason, "webhook ignored");
            return Ok(WebhookReceipt {
                items: Vec::new(),
                ignored: Some(reason.clone()),
            });
        }
        // Only failed jobs matter (the CI retry herder); the pipeline's own
        // webhook reports the rest.
        if let ForgeEvent::Job { status, .. } = &event
            && status != "failed"
        {
            return Ok(WebhookReceipt {
                items: Vec::new(),
                ignored: Some(format!("job {status}: only failed jobs are tracked")),
            });
        }
        let unavailable = |e: StoreError| WebhookError::Unavailable(format!("store: {e}"));
        let Some(id) = self.resolve(&forge, &event).await.map_err(unavailable)? else {
            tracing::info!(source = self.source(), %forge, kind = event.kind(), "webhook for no active item ignored");
            return Ok(WebhookReceipt {
                items: Vec::new(),
                ignored: Some("no active item".into()),
            });
        };
        let stored = self
            .mr
            .items
            .event_insert(NewEvent {
                item_id: id,
                event_type: WEBHOOK_EVENT.to_owned(),
                body: serde_json::json!({ "forge": forge, "event": event }),
                now,
                origin: Some(self.origin(headers, body)),
            })
            .await;
        match stored {
            Ok(_) => Ok(WebhookReceipt {
                items: vec![id],
                ignored: None,
            }),
            Err(StoreError::NotFound(_)) => Ok(WebhookReceipt {
                items: Vec::new(),
                ignored: Some("no active item".into()),
            }),
            Err(e) => Err(unavailable(e)),
        }
    }
}
