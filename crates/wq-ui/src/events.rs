//! `GET /ui/events`: one server-sent events stream of item changes.
//!
//! The change log is the audit trail: every change to an item appends a
//! record in its own transaction (`audit_records`), on whichever replica
//! made it, so reading the trail from the database shows every replica's
//! changes to every replica's browsers. One [`Feed`] per process reads the
//! records after the last one it sent (a wake-up every [`POLL_INTERVAL`],
//! or at once when a stream opens, [`Feed::nudge`]) and broadcasts them; each stream forwards those its
//! reader may read. While no stream is open the feed reads no records,
//! only how far the trail is settled, so a replica whose dashboard nobody
//! watches does not read back every record it writes; a stream that opens
//! is sent the changes from then on. An event's id is the record's `seq`,
//! monotone, so a browser that reconnects with `Last-Event-ID` is sent what
//! it missed from the trail itself. A stream that falls behind the
//! broadcast gets a `resync` event (the page reloads its data) and goes on.
//!
//! Records commit out of their numbers' order on PostgreSQL (a transaction
//! draws its numbers before it commits), so a record may become visible
//! after one with a higher number was sent. The feed therefore sends a
//! record only once every lower number is settled: it follows the run of
//! numbers without a gap, and past a gap (an append in progress, or one
//! rolled back) it waits until the store's horizon
//! ([`wq_store::Store::audit_horizon`]) is past it. Nothing is skipped and
//! every stream sees the records in order.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
use wq_store::audit::AuditQuery;

use crate::pages::require_api;
use crate::session::SignedIn;

/// How often the feed reads the trail when nothing woke it.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// How often the feed looks again while a gap in the trail's numbers holds
/// records back (an append in progress usually ends within milliseconds).
const GAP_POLL: Duration = Duration::from_millis(50);
/// How long a gap may hold records back, or the horizon stay out of reach
/// without waiting, before the feed waits for the appends in progress
/// (which makes new appends wait a moment too).
const GAP_WAIT: Duration = Duration::from_secs(1);
/// The same while no stream listens: the settled position then only
/// bounds what a stream that opens is sent first (changes it may already
/// have), so the appends are made to wait rarely.
const IDLE_WAIT: Duration = Duration::from_secs(10);
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
    /// The number up to which every record was broadcast (or, while no
    /// stream listened, passed over): -1 until the feed knows where the
    /// trail is settled.
    settled: AtomicI64,
}

/// The feed's reading position in the trail.
struct Reader {
    state: AppState,
    /// Every record numbered up to it was sent (`None`: not known yet).
    last: Option<i64>,
    /// The first number missing after `last` and since when, while records
    /// after it wait for it.
    gap: Option<(i64, Instant)>,
    /// While the horizon is out of reach without waiting: when the feed
    /// may wait for the appends in progress next, and how long it lets
    /// pass after a wait that timed out (doubling, up to [`MAX_BACKOFF`]),
    /// so that an append that does not end makes the others wait rarely.
    next_wait: Option<Instant>,
    backoff: Duration,
}

/// The longest the feed lets pass between two waits for the appends in
/// progress while one of them does not end.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl Reader {
    /// The trail's horizon: first without waiting for the appends in
    /// progress, waiting for them once that failed for `patience`.
    async fn horizon(&mut self, patience: Duration) -> Option<i64> {
        let now = Instant::now();
        let wait = self.next_wait.is_some_and(|at| now >= at);
        match self.state.store().audit_horizon(wait).await {
            Ok(Some(horizon)) => {
                self.next_wait = None;
                self.backoff = Duration::ZERO;
                Some(horizon)
            }
            Ok(None) if wait => {
                self.backoff = (self.backoff * 2).clamp(patience, MAX_BACKOFF);
                self.next_wait = Some(Instant::now() + self.backoff);
                None
            }
            Ok(None) => {
                self.next_wait.get_or_insert(now + patience);
                None
            }
            Err(error) => {
                tracing::warn!(%error, "the dashboard's feed cannot read the audit trail: {error}");
                None
            }
        }
    }

    async fn list(
        &self,
        after: i64,
        until: Option<i64>,
    ) -> Option<Vec<wq_store::audit::AuditRecord>> {
        match self
            .state
            .store()
            .audit_list(AuditQuery {
                after,
                until,
                limit: BATCH,
                ..AuditQuery::default()
            })
            .await
        {
            Ok(records) => Some(records),
            Err(error) => {
                tracing::warn!(%error, "the dashboard's feed cannot read the audit trail: {error}");
                None
            }
        }
    }

    /// Sends the settled records after `last`. Answers whether to read
    /// again at once (a full batch was sent), and otherwise how long to
    /// wait at most.
    async fn send_settled(&mut self, feed: &Feed) -> Result<(), Duration> {
        let Some(after) = self.last else {
            match self.horizon(GAP_WAIT).await {
                Some(horizon) => {
                    self.last = Some(horizon);
                    feed.settled.store(horizon, Ordering::Release);
                    return Ok(());
                }
                None => return Err(GAP_POLL),
            }
        };
        let Some(records) = self.list(after, None).await else {
            return Err(POLL_INTERVAL);
        };
        feed.read.fetch_add(records.len() as u64, Ordering::Relaxed);
        let full = records.len() as u32 == BATCH;
        // The run of numbers right after `after` committed whole: every
        // number in it is a visible record, so none is still in progress.
        let mut last = after;
        let mut held = false;
        for record in records {
            if record.seq != last + 1 {
                held = true;
                break;
            }
            last = record.seq;
            feed.send(record);
        }
        self.last = Some(last);
        if !held {
            self.gap = None;
            return if full { Ok(()) } else { Err(POLL_INTERVAL) };
        }
        // A gap: the number after `last` is in progress, rolled back or
        // (rarely) pruned. The records after it wait until the horizon is
        // past it; then everything up to the horizon is read again, whole.
        let gap = last + 1;
        let since = match self.gap {
            Some((missing, since)) if missing == gap => since,
            _ => {
                self.gap = Some((gap, Instant::now()));
                self.next_wait = None;
                // Most gaps fill within milliseconds: look again first.
                return Err(GAP_POLL);
            }
        };
        // Looked at often while the gap is young, then as usual.
        let pause = if since.elapsed() < GAP_WAIT {
            GAP_POLL
        } else {
            POLL_INTERVAL
        };
        let Some(horizon) = self
            .horizon(GAP_WAIT)
            .await
            .filter(|horizon| *horizon >= gap)
        else {
            return Err(pause);
        };
        let Some(records) = self.list(last, Some(horizon)).await else {
            return Err(POLL_INTERVAL);
        };
        feed.read.fetch_add(records.len() as u64, Ordering::Relaxed);
        let full = records.len() as u32 == BATCH;
        for record in records {
            last = record.seq;
            feed.send(record);
        }
        // Below the horizon nothing more will come.
        self.last = Some(if full { last } else { horizon });
        if !full {
            feed.settled.store(horizon, Ordering::Release);
        }
        self.gap = None;
        Ok(())
    }

    /// While nobody listens: follows where the trail is settled, without
    /// reading records. Read before the check of listeners, so that a
    /// stream opened after the check is sent everything that committed
    /// after the read (each record above the horizon).
    async fn follow(&mut self, feed: &Feed) -> bool {
        let horizon = self.horizon(IDLE_WAIT).await;
        if feed.receivers() != 0 {
            return false;
        }
        if let Some(horizon) = horizon {
            let last = self.last.map_or(horizon, |last| last.max(horizon));
            self.last = Some(last);
            feed.settled.store(last, Ordering::Release);
            self.gap = None;
        }
        true
    }
}

impl Feed {
    /// Starts reading the trail from where it is settled now.
    pub async fn start(state: AppState) -> Arc<Feed> {
        let (sender, _) = broadcast::channel(CAPACITY);
        let feed = Arc::new(Feed {
            sender,
            wake: Arc::new(Notify::new()),
            read: AtomicU64::new(0),
            settled: AtomicI64::new(-1),
        });
        let wake = Arc::clone(&feed.wake);
        let mut reader = Reader {
            state,
            last: None,
            gap: None,
            next_wait: None,
            backoff: Duration::ZERO,
        };
        match reader.state.store().audit_horizon(true).await {
            Ok(Some(horizon)) => {
                reader.last = Some(horizon);
                feed.settled.store(horizon, Ordering::Release);
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, "the dashboard's feed cannot read the audit trail: {error}");
            }
        }
        let weak = Arc::downgrade(&feed);
        tokio::spawn(async move {
            loop {
                let Some(feed) = weak.upgrade() else { return };
                let pause = if feed.receivers() == 0 && reader.follow(&feed).await {
                    POLL_INTERVAL
                } else {
                    match reader.send_settled(&feed).await {
                        Ok(()) => continue,
                        Err(pause) => pause,
                    }
                };
                // The feed ends with its last owner.
                drop(feed);
                let woken = wake.notified();
                let _ = tokio::time::timeout(pause, woken).await;
            }
        });
        feed
    }

    /// Broadcasts a record, once every record numbered below it was.
    fn send(&self, record: wq_store::audit::AuditRecord) {
        // Settled first: a stream that subscribes between the two replays
        // up to it and drops the broadcast copy.
        self.settled.store(record.seq, Ordering::Release);
        // No receiver yet is fine.
        let _ = self.sender.send(Change {
            seq: record.seq,
            item_id: record.item_id,
            kind: record.kind,
        });
    }

    /// The number up to which every record was broadcast: where a stream's
    /// replay from the trail stops (the broadcast brings the rest). `None`
    /// until the feed knows.
    pub fn settled(&self) -> Option<i64> {
        Some(self.settled.load(Ordering::Acquire)).filter(|seq| *seq >= 0)
    }

    /// Reads the trail now (a stream opened, or this process knows of a
    /// change).
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
    // The feed starts reading records for it now.
    events.feed.nudge();
    let state = events.state.clone();
    let stream = changes(state, Arc::clone(&events.feed), who, receiver, resume);
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn changes(
    state: AppState,
    feed: Arc<Feed>,
    who: SignedIn,
    receiver: broadcast::Receiver<Change>,
    resume: Option<i64>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    struct Cursor {
        state: AppState,
        feed: Arc<Feed>,
        who: SignedIn,
        receiver: broadcast::Receiver<Change>,
        replay: Option<i64>,
        pending: std::collections::VecDeque<Change>,
        sent: i64,
        greeted: bool,
    }
    let cursor = Cursor {
        state,
        feed,
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
            // Up to where the feed has broadcast (read after subscribing):
            // what comes after reaches this stream through the broadcast,
            // in order, and nothing above a record still in progress is
            // replayed before it.
            let Some(settled) = cursor.feed.settled() else {
                return Some((Ok(Event::default().event("resync").data("{}")), cursor));
            };
            match cursor
                .state
                .store()
                .audit_list(AuditQuery {
                    after,
                    until: Some(settled),
                    limit: MAX_REPLAY,
                    ..AuditQuery::default()
                })
                .await
            {
                // More was missed than is replayed: the page reloads.
                Ok(records) if records.len() as u32 == MAX_REPLAY => {
                    return Some((Ok(Event::default().event("resync").data("{}")), cursor));
                }
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
