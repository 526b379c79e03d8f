//! `ping`: a second small item type, registered like `mr` through the
//! registry alone, that brings its whole life with it: its own table
//! (`ping_log`, migration 2000, in its [`store`] module), a webhook receiver
//! (`POST /webhooks/ping`) and a periodic task ([`TICK_TASK`]).
//!
//! An item pongs (`needs_pong`), and each pong is a row of `ping_log`. A
//! delivery `{"item_id": "..."}` carrying [`TOKEN_HEADER`] (or any, through
//! a trusted channel) stores a [`WEBHOOK_EVENT`] event, which asks for one
//! more pong; a body without an `item_id` is malformed. A channel carrying
//! several sources knows a ping delivery by [`EVENT_HEADER`]. Each tick is a row
//! too, and hands the engine the items queued with
//! [`PingType::wake_on_tick`].

pub mod store;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use time::OffsetDateTime;
use wq_core::{
    Action, BoxError, DeliveryTrust, DimensionUpdate, EventResult, ExecError, ExecOutcome, Headers,
    ItemId, ItemType, ItemView, PendingEvent, Periodic, WebhookError, WebhookReceipt,
    WebhookReceiver,
};
use wq_store::{NewEvent, Store, StoreError};

pub use store::PingStore;

/// The `item_type` of ping items.
pub const PING: &str = "ping";
/// The webhook source: `POST /webhooks/ping`.
pub const SOURCE: &str = "ping";
/// The header whose value must be the type's token.
pub const TOKEN_HEADER: &str = "x-ping-token";
/// The header that names a delivery as ping's on a channel of several
/// sources.
pub const EVENT_HEADER: &str = "x-ping-event";
/// The event a delivery stores.
pub const WEBHOOK_EVENT: &str = "ping.webhook";
/// The periodic task.
pub const TICK_TASK: &str = "ping.tick";
/// `ping_log` kinds.
pub const PONG: &str = "pong";
pub const TICK: &str = "tick";

const NEEDS_PONG: &str = "needs_pong";

/// The `ping` type over a store.
pub struct PingType {
    items: Arc<dyn Store>,
    store: PingStore,
    token: String,
    tick_interval: Duration,
    due: Mutex<Vec<ItemId>>,
    ticks: tokio::sync::watch::Sender<u64>,
    tick_calls: AtomicU64,
}

impl PingType {
    /// A type whose webhook accepts `token` and whose task ticks every
    /// `tick_interval`.
    pub fn new(items: Arc<dyn Store>, token: &str, tick_interval: Duration) -> Self {
        Self {
            store: PingStore::new(items.as_ref()),
            items,
            token: token.to_owned(),
            tick_interval,
            due: Mutex::new(Vec::new()),
            ticks: tokio::sync::watch::channel(0).0,
            tick_calls: AtomicU64::new(0),
        }
    }

    pub fn store(&self) -> &PingStore {
        &self.store
    }

    /// The next tick hands `id` to the engine.
    pub fn wake_on_tick(&self, id: ItemId) {
        self.due.lock().expect("due lock").push(id);
    }

    /// Counts the ticks run so far, to wait for the next one.
    pub fn ticks(&self) -> tokio::sync::watch::Receiver<u64> {
        self.ticks.subscribe()
    }

    /// How often an engine called the periodic task, counted as the call is
    /// made, before the tick does anything (its store write may still be
    /// under way): on a paused tokio clock, a task that was due has been
    /// called once the clock is past its time.
    pub fn tick_calls(&self) -> u64 {
        self.tick_calls.load(Ordering::SeqCst)
    }

    async fn tick(&self) -> Result<Vec<ItemId>, ExecError> {
        self.store.record(TICK, None).await.map_err(store_error)?;
        let due = std::mem::take(&mut *self.due.lock().expect("due lock"));
        self.ticks.send_modify(|ticks| *ticks += 1);
        Ok(due)
    }
}

fn store_error(error: StoreError) -> ExecError {
    ExecError::transient(format!("store: {error}"))
}

#[async_trait]
impl ItemType for PingType {
    fn name(&self) -> &'static str {
        PING
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        Ok(self.store.migrate().await?)
    }

    fn webhook_receivers(self: Arc<Self>) -> Vec<Arc<dyn WebhookReceiver>> {
        vec![Arc::new(PingWebhook { ping: self })]
    }

    fn periodic(self: Arc<Self>) -> Vec<Periodic> {
        let interval = self.tick_interval;
        vec![Periodic::new(TICK_TASK, interval, move || {
            self.tick_calls.fetch_add(1, Ordering::SeqCst);
            let ping = Arc::clone(&self);
            async move { ping.tick().await }
        })]
    }

    fn actions(&self) -> &'static [&'static str] {
        &[PONG]
    }

    fn decide(&self, view: &ItemView) -> Option<Action> {
        view.needs(NEEDS_PONG).then_some(Action::new(PONG))
    }

    async fn execute(&self, _action: Action, view: &ItemView) -> Result<ExecOutcome, ExecError> {
        self.store
            .record(PONG, Some(view.item.id))
            .await
            .map_err(store_error)?;
        Ok(ExecOutcome::done().with_dimension(DimensionUpdate::new(NEEDS_PONG, false)))
    }

    async fn handle_event(
        &self,
        _view: &ItemView,
        event: &PendingEvent,
    ) -> Result<EventResult, ExecError> {
        Ok(match event.event_type.as_str() {
            WEBHOOK_EVENT => {
                EventResult::ignored().with_dimension(DimensionUpdate::new(NEEDS_PONG, true))
            }
            _ => EventResult::ignored(),
        })
    }
}

/// `POST /webhooks/ping`.
struct PingWebhook {
    ping: Arc<PingType>,
}

#[async_trait]
impl WebhookReceiver for PingWebhook {
    fn source(&self) -> &'static str {
        SOURCE
    }

    fn recognizes(&self, headers: &Headers) -> bool {
        headers.iter().any(|(name, _)| name == EVENT_HEADER)
    }

    async fn receive(
        &self,
        headers: &Headers,
        body: &[u8],
        trust: DeliveryTrust,
        now: OffsetDateTime,
    ) -> Result<WebhookReceipt, WebhookError> {
        let token = headers
            .iter()
            .find(|(name, _)| name == TOKEN_HEADER)
            .map(|(_, value)| value.as_str());
        if trust == DeliveryTrust::Verify && token != Some(self.ping.token.as_str()) {
            return Err(WebhookError::Unauthenticated(format!(
                "missing or wrong {TOKEN_HEADER}"
            )));
        }
        let id = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|body| body["item_id"].as_str().and_then(|id| id.parse().ok()));
        let Some(id) = id else {
            return Err(WebhookError::Malformed("body: no item_id".to_owned()));
        };
        let inserted = self
            .ping
            .items
            .event_insert(NewEvent {
                item_id: id,
                event_type: WEBHOOK_EVENT.to_owned(),
                body: serde_json::json!({}),
                now,
                origin: None,
            })
            .await;
        match inserted {
            Ok(_) => Ok(WebhookReceipt {
                items: vec![id],
                ignored: None,
            }),
            Err(StoreError::NotFound(_)) => Ok(WebhookReceipt {
                items: Vec::new(),
                ignored: Some(format!("no item {id}")),
            }),
            Err(error) => Err(WebhookError::Unavailable(error.to_string())),
        }
    }
}
