//! [`AppState`]: what every handler shares — the store, the engine (to
//! notify), the clock, the authenticator and the Prometheus handle. Cheap to
//! clone.

use std::collections::BTreeMap;
use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use wq_auth::Authenticator;
use wq_core::{Clock, TypeRegistry, WebhookReceiver};
use wq_engine::ProcessingManager;
use wq_store::Store;

/// Shared state of the router.
#[derive(Clone)]
pub struct AppState {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) engine: Option<Arc<ProcessingManager>>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) auth: Arc<Authenticator>,
    pub(crate) metrics: Option<PrometheusHandle>,
    pub(crate) types: TypeRegistry,
    pub(crate) webhooks: BTreeMap<&'static str, Arc<dyn WebhookReceiver>>,
    /// The OpenAPI document, set by [`crate::router`] from its routes.
    pub(crate) openapi: Arc<axum::body::Bytes>,
    /// The cached item counts `/metrics` renders.
    pub(crate) items_gauge: Arc<crate::metrics::ItemsGauge>,
}

impl AppState {
    /// State with a store, a clock and the authenticator every `/api/v1`
    /// request goes through (one without rules refuses them all); no engine
    /// (nothing is notified) and no Prometheus handle (`/metrics` shows only
    /// the item gauge).
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, auth: Arc<Authenticator>) -> Self {
        Self {
            store,
            engine: None,
            clock,
            auth,
            metrics: None,
            types: TypeRegistry::default(),
            webhooks: BTreeMap::new(),
            openapi: Arc::default(),
            items_gauge: Arc::default(),
        }
    }

    /// The item types that take submissions, detail views and commands,
    /// and receive the webhooks of their sources.
    pub fn with_types(mut self, types: TypeRegistry) -> Self {
        for receiver in types.webhook_receivers() {
            self.webhooks
                .insert(receiver.source(), Arc::clone(receiver));
        }
        self.types = types;
        self
    }

    /// A receiver for `POST /webhooks/{source}`.
    pub fn with_webhook(mut self, receiver: Arc<dyn WebhookReceiver>) -> Self {
        self.webhooks.insert(receiver.source(), receiver);
        self
    }

    /// The engine that `retry` notifies.
    pub fn with_engine(mut self, engine: Arc<ProcessingManager>) -> Self {
        self.engine = Some(engine);
        self
    }

    /// The process's Prometheus handle (see [`crate::metrics::prometheus_handle`]).
    pub fn with_metrics(mut self, handle: PrometheusHandle) -> Self {
        self.metrics = Some(handle);
        self
    }

    /// How old the `workqueue_items` counts may be when scraped (default
    /// [`crate::metrics::ITEMS_GAUGE_MAX_AGE`]).
    pub fn with_items_gauge_max_age(mut self, max_age: std::time::Duration) -> Self {
        self.items_gauge = Arc::new(crate::metrics::ItemsGauge::new(max_age));
        self
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn engine(&self) -> Option<&Arc<ProcessingManager>> {
        self.engine.as_ref()
    }

    pub fn authenticator(&self) -> &Arc<Authenticator> {
        &self.auth
    }

    pub fn types(&self) -> &TypeRegistry {
        &self.types
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}
