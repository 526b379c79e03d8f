//! `GET /ui/events`: one server-sent events stream of item changes.
//!
//! The change log is the audit trail: every change to an item appends a
//! record in its own transaction (`audit_records`), on whichever replica
//! made it, so reading the trail from the database shows every replica's
//! changes to every replica's browsers. One [`Feed`] per process reads the
//! records after the last one it saw (a wake-up every
//! [`POLL_INTERVAL`], or at once when this process notices a change,
//! [`Feed::nudge`]) and broadcasts them; each stream forwards those its
//! reader may read. While no stream is open the feed reads no records,
//! only where the trail ends, so a replica whose dashboard nobody watches
//! does not read back every record it writes; a stream that opens is sent
//! the changes from then on. An event's id is the record's `seq`, monotone,
//! so a browser that reconnects with `Last-Event-ID` is sent what it missed
//! from the trail itself. A stream that falls behind the broadcast gets a
//! `resync` event (the page reloads its data) and goes on.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use tokio::sync::{Notify, broadcast};
use wq_api::AppState;
use wq_api::routes::items::permitted;
use wq_auth::Permission;
use wq_core::ItemId;

use crate::pages::require_api;
use crate::session::SignedIn;

/// How often the feed reads the trail when nothing woke it.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// Records read at once.
const BATCH: u32 = 500;
/// Changes a slow stream may fall behind before it is resynced.
const CAPACITY: usize = 4096;
/// Most records a reconnecting stream is sent from the trail.
const MAX_REPLAY: u32 = 1000;

/// One change: the record's seq, its item and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub seq: i64,
    pub item_id: ItemId,
    pub kind: String,
}

/// The process's reader of the change log.
pub struct Feed {
    sender: broadcast::Sender<Change>,
    wake: Arc<Notify>,
    /// Records read from the trail so far.
    read: AtomicU64,
}

impl Feed {
    /// Starts reading the trail from its newest record on.
    pub async fn start(state: AppState) -> Arc<Feed> {
        let (sender, _) = broadcast::channel(CAPACITY);
        let feed = Arc::new(Feed {
            sender,
            wake: Arc::new(Notify::new()),
            read: AtomicU64::new(0),
        });
        let wake = Arc::clone(&feed.wake);
        let mut last = match state.store().audit_last_seq().await {
            Ok(seq) => seq,
            Err(error) => {
                tracing::warn!(%error, "the dashboard's feed starts from the beginning: {error}");
                0
            }
        };
        let weak = Arc::downgrade(&feed);
        tokio::spawn(async move {
            loop {
                let Some(feed) = weak.upgrade() else { return };
                if feed.receivers() == 0 {
                    // Nobody listens: only follow the trail's end. Read
                    // before the check, so that a stream opened before
                    // the check is sent what committed after the read.
                    let end = state.store().audit_last_seq().await;
                    if feed.receivers() == 0 {
                        match end {
                            Ok(seq) => last = last.max(seq),
                            Err(error) => {
                                tracing::warn!(%error, "the dashboard's feed cannot read the audit trail: {error}");
                            }
                        }
                        drop(feed);
                        let woken = wake.notified();
                        let _ = tokio::time::timeout(POLL_INTERVAL, woken).await;
                        continue;
                    }
                }
                match state
                    .store()
                    .audit_list(wq_store::audit::AuditQuery {
                        after: last,
                        limit: BATCH,
                        ..wq_store::audit::AuditQuery::default()
                    })
                    .await
                {
                    Ok(records) => {
                        let full = records.len() as u32 == BATCH;
                        feed.read.fetch_add(records.len() as u64, Ordering::Relaxed);
                        for record in records {
                            last = record.seq;
                            // No receiver yet is fine.
                            let _ = feed.sender.send(Change {
                                seq: record.seq,
                                item_id: record.item_id,
                                kind: record.kind,
                            });
                        }
                        if full {
                            continue;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "the dashboard's feed cannot read the audit trail: {error}");
                    }
                }
                // The feed ends with its last owner.
                drop(feed);
                let woken = wake.notified();
                let _ = tokio::time::timeout(POLL_INTERVAL, woken).await;
            }
        });
        feed
    }

    /// Reads the trail now (this process changed something).
    pub fn nudge(&self) {
        self.wake.notify_one();
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.sender.subscribe()
    }

    /// Streams connected now.
    pub fn receivers(&self) -> usize {
        self.sender.receiver_count()
    }

    /// Records the feed has read from the trail since it started.
    pub fn records_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }
}

/// What the event stream needs.
#[derive(Clone)]
pub struct Events {
    pub state: AppState,
    pub feed: Arc<Feed>,
}

/// Whether `who` may see changes of `item_id` (checked per change unless
/// they read everything).
async fn visible(state: &AppState, who: &SignedIn, item_id: ItemId) -> bool {
    if who.principal.permits_everywhere(Permission::Read) {
        return true;
    }
    match state.store().item_get(item_id).await {
        Ok(Some(item)) => permitted(state, &who.principal, &item, Permission::Read)
            .await
            .unwrap_or(false),
        _ => false,
    }
}

fn change_event(change: &Change) -> Event {
    Event::default()
        .id(change.seq.to_string())
        .event("change")
        .data(
            serde_json::json!({ "item_id": change.item_id.to_string(), "kind": change.kind })
                .to_string(),
        )
}

pub async fn stream(State(events): State<Events>, headers: HeaderMap) -> Response {
    let who = match require_api(&events.state, &headers).await {
        Ok(who) => who,
        Err(response) => return response,
    };
    let resume = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<i64>().ok())
        .filter(|seq| *seq >= 0);
    // Subscribed before the replay is read: nothing falls between them.
    let receiver = events.feed.subscribe();
    let state = events.state.clone();
    let stream = changes(state, who, receiver, resume);
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn changes(
    state: AppState,
    who: SignedIn,
    receiver: broadcast::Receiver<Change>,
    resume: Option<i64>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    struct Cursor {
        state: AppState,
        who: SignedIn,
        receiver: broadcast::Receiver<Change>,
        replay: Option<i64>,
        pending: std::collections::VecDeque<Change>,
        sent: i64,
        greeted: bool,
    }
    let cursor = Cursor {
        state,
        who,
        receiver,
        replay: resume,
        pending: std::collections::VecDeque::new(),
        sent: resume.unwrap_or(0),
        greeted: false,
    };
    futures::stream::unfold(cursor, |mut cursor| async move {
        if !cursor.greeted {
            cursor.greeted = true;
            // Tells the page the stream is open (its tests wait for it).
            return Some((Ok(Event::default().event("ready").data("{}")), cursor));
        }
        if let Some(after) = cursor.replay.take() {
            match cursor
                .state
                .store()
                .audit_list(wq_store::audit::AuditQuery {
                    after,
                    limit: MAX_REPLAY,
                    ..wq_store::audit::AuditQuery::default()
                })
                .await
            {
                Ok(records) => cursor.pending.extend(records.into_iter().map(|r| Change {
                    seq: r.seq,
                    item_id: r.item_id,
                    kind: r.kind,
                })),
                Err(error) => {
                    tracing::warn!(%error, "replay after Last-Event-ID failed: {error}");
                    return Some((Ok(Event::default().event("resync").data("{}")), cursor));
                }
            }
        }
        loop {
            let change = match cursor.pending.pop_front() {
                Some(change) => change,
                None => match cursor.receiver.recv().await {
                    Ok(change) => change,
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        return Some((Ok(Event::default().event("resync").data("{}")), cursor));
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            };
            // A replayed change may also arrive through the broadcast.
            if change.seq <= cursor.sent {
                continue;
            }
            cursor.sent = change.seq;
            if visible(&cursor.state, &cursor.who, change.item_id).await {
                return Some((Ok(change_event(&change)), cursor));
            }
        }
    })
}
