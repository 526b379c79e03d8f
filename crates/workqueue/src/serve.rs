//! `workqueue serve` and `workqueue migrate`: open the store (the backend is
//! picked once, from the URL), migrate, then run the engine and the API until
//! SIGINT or SIGTERM.

use std::sync::Arc;

use anyhow::Context as _;
use wq_core::{Clock, SystemClock};

use crate::app::{self, App};
use crate::config::Config;

/// `workqueue migrate`.
pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    let store = app::open_store(config).await?;
    let mr = wq_mr::MrType::new(
        Arc::clone(&store),
        wq_forge::Forges::new(),
        config.mr.clone(),
        Arc::new(SystemClock),
    )
    .map_err(|errors| anyhow::anyhow!("invalid mr config: {}", errors.join("; ")))?;
    mr.migrate()
        .await
        .context("applying the mr type's migrations failed")?;
    println!("migrations applied");
    Ok(())
}

/// `workqueue serve`: runs until SIGINT/SIGTERM, then stops accepting HTTP
/// requests, lets the open ones finish for up to
/// `server.shutdown_grace_seconds`, drops the rest and shuts the engine down
/// (which releases its leases).
pub async fn serve(config: &Config) -> anyhow::Result<()> {
    let bind = config.server.bind_address()?;
    let forges = app::forges_from_env(config)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let metrics = wq_api::metrics::prometheus_handle()?;
    let app = app::assemble(config, forges, clock, Some(metrics)).await?;
    // Replicas that process `mr` items also follow the merge queues.
    let queue_sync = config
        .engine
        .handled_types
        .iter()
        .any(|t| t == wq_mr::TYPE_NAME)
        .then(|| {
            app.spawn_queue_sync(std::time::Duration::from_secs(
                config.mr.queue_sync_interval_seconds,
            ))
        });
    let App {
        engine,
        router,
        auth,
        ..
    } = app;
    // The issuers' keys, fetched before the first caller needs them; a
    // failure is logged and retried on use.
    tokio::spawn(async move { auth.warm_up().await });

    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("cannot listen on {bind}"))?;
    let address = listener.local_addr()?;
    engine.start();
    tracing::info!(%address, handled_types = ?config.engine.handled_types, "listening on http://{address}");
    if config.engine.handled_types.is_empty() {
        tracing::warn!(
            "engine.handled_types is empty: this replica serves the API and webhooks but \
             processes no item; submissions wait for a replica that handles their type \
             (set engine.handled_types: [mr] to process them here)"
        );
    }

    wq_api::serve_with(
        listener,
        router,
        &config.server.serve_config(),
        shutdown_signal(),
    )
    .await
    .context("HTTP server failed")?;
    tracing::info!("HTTP server stopped; stopping the engine");
    if let Some(queue_sync) = queue_sync {
        queue_sync.abort();
    }
    engine.shutdown().await;
    tracing::info!("engine stopped; bye");
    Ok(())
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
