//! `workqueue serve` and `workqueue migrate`: open the store (the backend is
//! picked once, from the URL), migrate, then run the engine and the API until
//! SIGINT or SIGTERM.

use std::sync::Arc;

use anyhow::Context as _;
use wq_core::{Clock, SystemClock};
use wq_engine::ProcessingManager;
use wq_store::Store;

use crate::config::Config;
use crate::types;

/// Opens the configured database and applies pending migrations.
async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    let url = &config.database.url;
    let store = wq_store::connect(url, config.database.max_connections)
        .await
        .with_context(|| format!("cannot open the database ({})", redact(url)))?;
    store
        .migrate()
        .await
        .context("applying database migrations failed")?;
    tracing::info!(backend = ?store.backend(), "database ready at {}", redact(url));
    Ok(store)
}

/// `workqueue migrate`.
pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    open_store(config).await?;
    println!("migrations applied");
    Ok(())
}

/// `workqueue serve`: runs until SIGINT/SIGTERM, then stops accepting HTTP
/// requests, lets the open ones finish and shuts the engine down.
pub async fn serve(config: &Config) -> anyhow::Result<()> {
    let registry = types::registry()?;
    config.check_against(&registry)?;
    let bind = config.server.bind_address()?;

    let store = open_store(config).await?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let engine = ProcessingManager::new(
        Arc::clone(&store),
        Arc::new(registry),
        Arc::clone(&clock),
        config.engine.engine_config(),
    )?;
    let metrics = wq_api::metrics::prometheus_handle()?;
    let state = wq_api::AppState::new(store, clock)
        .with_engine(Arc::clone(&engine))
        .with_metrics(metrics);
    let router = wq_api::router(state, &config.server.api_config());

    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("cannot listen on {bind}"))?;
    let address = listener.local_addr()?;
    engine.start();
    tracing::info!(%address, handled_types = ?config.engine.handled_types, "listening on http://{address}");

    wq_api::serve(listener, router, shutdown_signal())
        .await
        .context("HTTP server failed")?;
    tracing::info!("HTTP server stopped; stopping the engine");
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

/// A database URL without its password, for logs and errors.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((credentials, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    match credentials.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => format!("{scheme}://{credentials}@{host}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://wq:secret@db:5432/wq"),
            "postgres://wq:***@db:5432/wq"
        );
        assert_eq!(redact("postgres://wq@db/wq"), "postgres://wq@db/wq");
        assert_eq!(redact("sqlite:./workqueue.db"), "sqlite:./workqueue.db");
    }
}
