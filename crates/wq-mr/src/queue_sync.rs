//! The merge queue sync (GitHub merge queue design, "Queue observation"):
//! one batched read per project of the queue entries of every active item
//! whose merge attempt is in flight or accepted, or that was last seen
//! queued. An item whose entry changed (appeared, moved, changed state,
//! left the queue) gets a `mr.queue_observed` event and is handed to the
//! engine by the caller; its reconcile then reads the change request and
//! applies the queue rules. A read that cannot
//! see the queue changes nothing, so stored observations are preserved.
//!
//! It complements webhooks and the reconcile timer: queue positions and
//! estimates move without a webhook, and one request covers up to a hundred
//! pull requests where per-item reads would take one each.

use std::collections::BTreeMap;

use wq_core::ItemId;
use wq_forge::{ForgeKind, QueueObservation};
use wq_store::{NewEvent, StoreError};

use crate::MrType;
use crate::store::QueueWatch;

/// The name of the sync as the `mr` type's periodic task.
pub const QUEUE_SYNC_TASK: &str = "mr.queue_sync";

/// The event an observed queue change stores.
pub const QUEUE_OBSERVED_EVENT: &str = "mr.queue_observed";

/// Items read from the store per page; a sync reads every page.
const WATCH_PAGE: u32 = 500;

/// What one sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueSync {
    /// Items whose queue entries were read.
    pub watched: usize,
    /// Batched reads made (one per project and hundred items).
    pub reads: usize,
    /// Items woken because their entry changed.
    pub changed: usize,
    /// Their ids, for the caller to hand to the engine at once (the event
    /// makes them sweep-visible in any case).
    pub woken: Vec<ItemId>,
}

impl MrType {
    /// One sync over every GitHub forge (GitLab's merge trains are read with
    /// the merge request itself).
    pub async fn sync_queues(&self) -> Result<QueueSync, StoreError> {
        let mut sync = QueueSync::default();
        for name in self.forges.names() {
            let Some(forge) = self.forges.get(name) else {
                continue;
            };
            if forge.kind() != ForgeKind::Github {
                continue;
            }
            // Every watched item, page by page: no cut-off.
            let mut watched: Vec<QueueWatch> = Vec::new();
            loop {
                let page = self
                    .store
                    .queue_watch(name, watched.last(), WATCH_PAGE)
                    .await?;
                let last_page = page.len() < WATCH_PAGE as usize;
                watched.extend(page);
                if last_page {
                    break;
                }
            }
            sync.watched += watched.len();
            let mut by_project: BTreeMap<&str, Vec<&QueueWatch>> = BTreeMap::new();
            for item in &watched {
                by_project.entry(&item.project).or_default().push(item);
            }
            for (project, items) in by_project {
                for chunk in items.chunks(100) {
                    let numbers: Vec<u64> = chunk.iter().map(|item| item.number).collect();
                    sync.reads += 1;
                    let observed = match forge.queue_entries(project, &numbers).await {
                        Ok(observed) => observed,
                        Err(error) => {
                            // Nothing is known; what is stored stays.
                            tracing::warn!(forge = name, project, %error, "merge queue read failed");
                            continue;
                        }
                    };
                    for item in chunk {
                        let changed = match observed.get(&item.number) {
                            Some(QueueObservation::Entry(entry)) => {
                                item.entry.as_ref() != Some(entry)
                            }
                            Some(QueueObservation::Absent) => item.entry.is_some(),
                            Some(QueueObservation::Unobserved) | None => false,
                        };
                        if changed
                            && self
                                .wake_for_queue(item, observed.get(&item.number))
                                .await?
                        {
                            sync.changed += 1;
                            sync.woken.push(item.id);
                        }
                    }
                }
            }
        }
        if sync.changed > 0 {
            tracing::debug!(?sync, "merge queue sync");
        }
        Ok(sync)
    }

    /// Stores the observation as an event; `false` when the item ended
    /// meanwhile.
    async fn wake_for_queue(
        &self,
        item: &QueueWatch,
        observed: Option<&QueueObservation>,
    ) -> Result<bool, StoreError> {
        let inserted = self
            .items
            .event_insert(NewEvent {
                item_id: item.id,
                event_type: QUEUE_OBSERVED_EVENT.to_owned(),
                body: serde_json::json!({ "observed": observed }),
                now: self.clock.now(),
                origin: None,
            })
            .await;
        match inserted {
            Ok(_) => Ok(true),
            // Ended meanwhile: nothing to wake.
            Err(StoreError::NotFound(_)) => Ok(false),
            Err(error) => Err(error),
        }
    }
}
