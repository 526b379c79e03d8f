//! `workqueue serve` and `workqueue migrate`: open the store (the backend is
//! picked once, from the URL), migrate, then run the engine and the API until
//! SIGINT or SIGTERM.

use std::sync::Arc;

use anyhow::Context as _;
use wq_core::{Clock, SystemClock};
use wq_engine::ProcessingManager;

use crate::app::{self, App};
use crate::config::Config;
use crate::types;

/// `workqueue migrate`: the generic store's migrations, then every
/// registered type's (no forge is needed for that).
pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    let store = app::open_store(config).await?;
    let registry = types::build(
        store,
        wq_forge::Forges::new(),
        config,
        Arc::new(SystemClock),
    )?;
    registry.migrate().await?;
    println!("migrations applied");
    Ok(())
}

/// `workqueue serve`: runs until SIGINT/SIGTERM, then shuts down within
/// `server.shutdown_grace_seconds` ([`serve_until`]).
pub async fn serve(config: &Config) -> anyhow::Result<()> {
    let bind = config.server.bind_address()?;
    // The recorder first: the clients and types describe their metrics to
    // it as they are built.
    let metrics = wq_api::metrics::prometheus_handle()?;
    let forges = app::forges_from_env(config)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let app = app::assemble(config, forges, Arc::clone(&clock), Some(metrics)).await?;
    let App {
        store,
        engine,
        router,
        auth,
        types,
    } = app;
    // The issuers' keys, fetched before the first caller needs them; a
    // failure is logged and retried on use.
    tokio::spawn(async move { auth.warm_up().await });

    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("cannot listen on {bind}"))?;
    let address = listener.local_addr()?;
    engine.start();
    let intake = match &config.events.sqs {
        Some(sqs) => {
            let client = wq_intake::client(sqs).await;
            Some(app::intake(sqs, client, &types, &engine, Arc::clone(&clock)).start())
        }
        None => None,
    };
    let archive_config = config.audit.archive();
    let archiver = wq_archive::Archiver::from_config(store, &archive_config, Arc::clone(&clock))
        .context("audit.archive")?;
    let (stop_archive, archive_stopping) = tokio::sync::watch::channel(false);
    let archiving = tokio::spawn(wq_archive::run(
        archiver,
        archive_config.interval(),
        archive_stopping,
    ));
    let handled = &engine.config().handled_types;
    tracing::info!(%address, handled_types = ?handled, "listening on http://{address}");
    if handled.is_empty() {
        tracing::warn!(
            "API-only replica (engine.handled_types: [] or --api-only): it serves the API and \
             webhooks but processes no item; submissions wait for a replica that handles their \
             type (leave engine.handled_types out to process every type here)"
        );
    }

    let all_ended = serve_until(
        listener,
        router,
        &engine,
        intake,
        &config.server.serve_config(),
        shutdown_signal(),
    )
    .await
    .context("HTTP server failed")?;
    let _ = stop_archive.send(true);
    let _ = archiving.await;
    if all_ended {
        tracing::info!("HTTP server and engine stopped; bye");
    } else {
        tracing::warn!("stopped with item loops abandoned; their leases expire");
    }
    Ok(())
}

/// Serves `router` and runs `engine` (already started) and the queue
/// `intake` (started, if any) until `signal` resolves, then shuts them down,
/// each within `config.shutdown_grace`: no new connections or item runs;
/// open requests and running steps may finish (the steps then release their
/// leases); the intake stops first (DDR-36: it stores events the engine
/// must still see) and releases the messages it did not store; after the
/// grace, connections still open are dropped and item loops still running
/// are abandoned ([`ProcessingManager::shutdown_within`]: their leases
/// expire). Answers whether every item loop ended.
pub async fn serve_until(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    engine: &ProcessingManager,
    intake: Option<wq_intake::IntakeHandle>,
    config: &wq_api::ServeConfig,
    signal: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<bool> {
    // Dropped (so `stopping` wakes) when the signal fires or the server
    // ends on its own.
    let (stop, mut stopping) = tokio::sync::watch::channel(());
    let http = wq_api::serve_with(listener, router, config, async move {
        signal.await;
        drop(stop);
    });
    let engine_down = async {
        let _ = stopping.changed().await;
        tracing::info!("shutting down: no new connections or item runs");
        if let Some(intake) = intake {
            intake.shutdown(config.shutdown_grace).await;
        }
        engine.shutdown_within(config.shutdown_grace).await
    };
    let (served, all_ended) = tokio::join!(http, engine_down);
    served?;
    Ok(all_ended)
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for SIGINT: {error}");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM: {error}");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = interrupt => tracing::info!("SIGINT received; shutting down"),
        () = terminate => tracing::info!("SIGTERM received; shutting down"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use async_trait::async_trait;
    use tokio::io::AsyncWriteExt;
    use wq_core::{ItemId, TypeRegistry};
    use wq_engine::{EngineConfig, FailPoint, Flow, Hooks};
    use wq_store::{ClaimParams, NewItem, Store};
    use wq_testkit::Backend;
    use wq_testkit::types::{CHAIN, ChainType};

    use super::*;

    /// Holds every run right after its claim until opened (never, unless
    /// the test opens it).
    struct Gate {
        reached: tokio::sync::Notify,
        open: tokio::sync::Semaphore,
    }

    #[async_trait]
    impl Hooks for Gate {
        async fn at(&self, point: FailPoint, _id: ItemId) -> Flow {
            if point == FailPoint::AfterClaim {
                self.reached.notify_one();
                let _permit = self.open.acquire().await.expect("gate open");
            }
            Flow::Continue
        }
    }

    /// What a test of [`serve_until`] holds: a chain item whose run is held
    /// at the gate (the item is leased), a client that never finishes its
    /// headers, and the running service with its stop trigger.
    struct Running {
        store: Arc<dyn Store>,
        id: ItemId,
        gate: Arc<Gate>,
        engine: Arc<ProcessingManager>,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        service: tokio::task::JoinHandle<std::io::Result<bool>>,
        _stuck: tokio::net::TcpStream,
    }

    async fn start(backend: Backend, lease: Duration) -> Running {
        let store = backend.fresh_store().await;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let chain = ChainType::new();
        let registry = TypeRegistry::builder()
            .register(Arc::new(chain))
            .build()
            .expect("registry");
        let gate = Arc::new(Gate {
            reached: tokio::sync::Notify::new(),
            open: tokio::sync::Semaphore::new(0),
        });
        let engine = ProcessingManager::with_hooks(
            Arc::clone(&store),
            Arc::new(registry),
            Arc::clone(&clock),
            EngineConfig {
                handled_types: vec![CHAIN.to_owned()],
                sweep_interval: Duration::from_secs(3600),
                lease,
                ..EngineConfig::default()
            },
            Arc::clone(&gate) as Arc<dyn Hooks>,
        )
        .expect("engine");
        let item = store
            .item_insert(NewItem {
                id: ItemId::new_v7(),
                item_type: CHAIN.to_owned(),
                idempotency_key: None,
                caller_identity: Some("test".to_owned()),
                place: None,
                now: clock.now(),
                dimensions: Vec::new(),
            })
            .await
            .expect("insert");
        engine.start();
        engine.notify(item.id);
        gate.reached.notified().await;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let router = axum::Router::new().route("/ping", axum::routing::get(|| async { "pong" }));
        let config = wq_api::ServeConfig {
            header_read_timeout: Duration::from_secs(3600),
            shutdown_grace: Duration::from_secs(1),
            ..wq_api::ServeConfig::default()
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = {
            let engine = Arc::clone(&engine);
            tokio::spawn(async move {
                serve_until(listener, router, &engine, None, &config, async move {
                    let _ = stopped.await;
                })
                .await
            })
        };
        let mut stuck = tokio::net::TcpStream::connect(address)
            .await
            .expect("connect");
        stuck
            .write_all(b"GET /ping HTTP/1.1\r\n")
            .await
            .expect("write");
        // A served request: the stuck connection was accepted before it.
        let mut ok = tokio::net::TcpStream::connect(address)
            .await
            .expect("connect");
        ok.write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut answer = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut ok, &mut answer)
            .await
            .expect("read");
        assert!(answer.starts_with(b"HTTP/1.1 200"));
        let leased = store.item_get(item.id).await.unwrap().unwrap();
        assert!(leased.leased_until.is_some(), "the run holds the lease");
        Running {
            store,
            id: item.id,
            gate,
            engine,
            stop: Some(stop),
            service,
            _stuck: stuck,
        }
    }

    /// Stops the service; answers whether every item loop ended. Without a
    /// bound, the stuck client or a stuck run would keep it from returning.
    async fn stop(running: &mut Running) -> bool {
        running
            .stop
            .take()
            .expect("running")
            .send(())
            .expect("signal");
        tokio::time::timeout(Duration::from_secs(30), &mut running.service)
            .await
            .expect("the service stopped within its grace")
            .expect("service task")
            .expect("server")
    }

    /// Point 7: the shutdown ends within the grace despite a stuck client;
    /// the step running at the signal finishes and releases its lease.
    async fn a_step_that_ends_in_the_grace_releases_its_lease(backend: Backend) {
        let mut running = start(backend, Duration::from_secs(60)).await;
        let gate = Arc::clone(&running.gate);
        let engine = Arc::clone(&running.engine);
        // The step ends only once the shutdown has begun: it is the step
        // running at the signal.
        let opener = tokio::spawn(async move {
            engine.shutdown_requested().await;
            gate.open.add_permits(100);
        });
        assert!(stop(&mut running).await, "every item loop ended");
        opener.await.unwrap();
        let item = running.store.item_get(running.id).await.unwrap().unwrap();
        assert!(item.leased_until.is_none(), "the lease was released");
        assert!(item.actionable, "the rest is left for the sweep");
        assert_eq!(running.engine.in_flight(), 0);
    }

    /// A run still stuck after the grace is abandoned: the service returns,
    /// and the lease is no longer renewed, so it expires and the item can
    /// be claimed again.
    async fn a_stuck_step_is_abandoned_and_its_lease_expires(backend: Backend) {
        let lease = Duration::from_secs(1);
        let mut running = start(backend, lease).await;
        assert!(!stop(&mut running).await, "the stuck loop was abandoned");
        let item = running.store.item_get(running.id).await.unwrap().unwrap();
        assert!(
            item.leased_until.is_some(),
            "an abandoned lease is not released"
        );
        // The heartbeat (every lease/3) stopped: within a few lease lengths
        // the item is claimable. A renewed lease never would be. The lease
        // runs out on the wall clock the store compares with, so this waits
        // for that condition, bounded, rather than for a signal.
        let mut claimed = None;
        for _ in 0..100 {
            let now = SystemClock.now();
            claimed = running
                .store
                .item_claim(ClaimParams {
                    id: running.id,
                    now,
                    lease_until: now + time::Duration::minutes(1),
                    handled_types: vec![CHAIN.to_owned()],
                })
                .await
                .unwrap();
            if claimed.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(claimed.is_some(), "the abandoned lease expired");
        running.gate.open.add_permits(100);
    }

    wq_testkit::backend_tests!(
        a_step_that_ends_in_the_grace_releases_its_lease,
        a_stuck_step_is_abandoned_and_its_lease_expires,
    );
}
