//! Assembling the service from a [`Config`]: store (migrated), item types,
//! engine, authenticator and router. `serve`, `demo` and the end-to-end
//! tests all build the same thing here. Nothing here names an item type:
//! their migrations, webhook receivers and periodic tasks come from the
//! registry ([`crate::types`]).

use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use wq_auth::{Authenticator, AuthenticatorOptions, InCluster};
use wq_core::{Clock, TypeRegistry};
use wq_engine::ProcessingManager;
use wq_forge::Forges;
use wq_store::Store;

use crate::config::Config;
use crate::types;

/// The assembled service, not started yet.
pub struct App {
    pub store: Arc<dyn Store>,
    pub engine: Arc<ProcessingManager>,
    pub router: Router,
    /// Checks every `/api/v1` caller; [`Authenticator::warm_up`] fetches the
    /// issuers' keys ahead of the first request.
    pub auth: Arc<Authenticator>,
    /// The registered item types (their webhook receivers feed the queue
    /// intake too).
    pub types: TypeRegistry,
}

/// Opens the configured database and applies the generic migrations.
pub async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    let url = &config.database.url;
    // Nothing that names the URL (ours or the driver's messages) may carry
    // its password.
    let store = wq_store::connect_with_timeout(
        url,
        config.database.max_connections,
        config.database.connect_timeout(),
    )
    .await
    .map_err(|error| {
        anyhow::anyhow!(
            "cannot open the database ({}): {}",
            redact(url),
            scrub(&error.to_string(), url)
        )
    })?;
    store.migrate().await.map_err(|error| {
        anyhow::anyhow!(
            "applying database migrations failed: {}",
            scrub(&error.to_string(), url)
        )
    })?;
    tracing::info!(backend = ?store.backend(), "database ready at {}", redact(url));
    Ok(store)
}

/// Clients for the configured forges, secrets read from the environment.
pub fn forges_from_env(config: &Config) -> anyhow::Result<Forges> {
    let mut forges = config.forges.clone();
    for (name, forge) in &mut forges.instances {
        forge
            .resolve_secrets(name)
            .map_err(|e| anyhow::anyhow!(e))?;
    }
    Forges::from_config(&forges).map_err(|e| anyhow::anyhow!("{e}"))
}

/// The authenticator for the `auth:` section, with `clock`; `k8s` rules
/// apply only when this process runs in a cluster. Warns when no rule can
/// grant anything, since every API call is then refused.
pub fn authenticator(config: &Config, clock: Arc<dyn Clock>) -> anyhow::Result<Authenticator> {
    let settings = config
        .auth_settings()
        .map_err(|errors| anyhow::anyhow!("invalid auth config:\n{errors}"))?;
    let options = AuthenticatorOptions {
        clock,
        in_cluster: InCluster::detect(),
    };
    // Identity answers come from the configured issuer or API server only:
    // a redirect elsewhere is an error, never followed.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .context("building the authentication HTTP client")?;
    let auth = Authenticator::with_options(settings, http, options)?;
    let usable = config.auth.rules.len() - auth.skipped_rules().len();
    if usable == 0 {
        tracing::warn!(
            "auth.rules grants nothing to anyone: every /api/v1 request will be refused \
             (401 or 403) until the config file names a rule; /healthz, /readyz, /metrics \
             and webhooks still answer"
        );
    }
    Ok(auth)
}

/// Builds the service: store, types (migrated), engine, authenticator and
/// router.
pub async fn assemble(
    config: &Config,
    forges: Forges,
    clock: Arc<dyn Clock>,
    metrics: Option<PrometheusHandle>,
) -> anyhow::Result<App> {
    config.check_against(types::TYPE_NAMES)?;
    let types_clock = Arc::clone(&clock);
    assemble_with(config, clock, metrics, move |store| {
        types::build(store, forges, config, types_clock)
    })
    .await
}

/// [`assemble`] with the item types `build_types` registers over the opened
/// store instead of [`types::build`]'s: the same wiring for any registry.
pub async fn assemble_with(
    config: &Config,
    clock: Arc<dyn Clock>,
    metrics: Option<PrometheusHandle>,
    build_types: impl FnOnce(Arc<dyn Store>) -> anyhow::Result<TypeRegistry>,
) -> anyhow::Result<App> {
    let auth = Arc::new(authenticator(config, Arc::clone(&clock))?);
    let store = open_store(config).await?;
    let registry = build_types(Arc::clone(&store))?;
    registry.migrate().await?;
    let engine = ProcessingManager::new(
        Arc::clone(&store),
        Arc::new(registry.clone()),
        Arc::clone(&clock),
        config.engine.engine_config(registry.names()),
    )?;
    let mut state = wq_api::AppState::new(Arc::clone(&store), clock, Arc::clone(&auth))
        .with_engine(Arc::clone(&engine))
        .with_types(registry.clone());
    if let Some(metrics) = metrics {
        state = state.with_metrics(metrics);
    }
    // The dashboard beside the API, over the same state (its live stream
    // is not under the API's request timeout).
    let router = wq_api::router(state.clone(), &config.server.api_config())
        .merge(wq_ui::router(state).await);
    Ok(App {
        store,
        engine,
        router,
        auth,
        types: registry,
    })
}

/// The consumer of `events.sqs` (not started), when the file names a
/// queue: `client` (built the standard AWS way by [`wq_intake::client`] in
/// `serve`) hands the queue's deliveries to the same webhook receivers as
/// `/webhooks/{source}`, waking `engine` for the items they reach.
pub fn intake(
    config: &wq_intake::SqsConfig,
    client: wq_intake::SqsClient,
    types: &TypeRegistry,
    engine: &Arc<ProcessingManager>,
    clock: Arc<dyn Clock>,
) -> wq_intake::SqsIntake {
    let engine = Arc::clone(engine);
    wq_intake::SqsIntake::new(
        client,
        config.clone(),
        types.webhook_receivers().cloned().collect(),
        Arc::new(move |id| engine.notify(id)),
        clock,
    )
}

/// A database URL without its password, for logs and errors.
pub fn redact(url: &str) -> String {
    scrub(url, url)
}

/// The secrets a database URL holds: the password of its user part and the
/// value of a `password=` query parameter.
fn url_secrets(url: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    if let Some((_, rest)) = url.split_once("://")
        && let Some((credentials, _)) = rest.rsplit_once('@')
        && let Some((_, password)) = credentials.split_once(':')
        && !password.is_empty()
    {
        secrets.push(password.to_owned());
    }
    if let Some((_, query)) = url.split_once('?') {
        for pair in query.split('&') {
            if let Some((key, value)) = pair.split_once('=')
                && key.eq_ignore_ascii_case("password")
                && !value.is_empty()
            {
                secrets.push(value.to_owned());
            }
        }
    }
    // Longest first, so a secret containing another is replaced whole.
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    secrets
}

/// `text` with every secret of the database `url` replaced by `***`.
pub fn scrub(text: &str, url: &str) -> String {
    url_secrets(url)
        .iter()
        .fold(text.to_owned(), |text, secret| {
            text.replace(secret.as_str(), "***")
        })
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
        assert_eq!(
            redact("postgres://db/wq?user=wq&password=s3cr%40t&sslmode=require"),
            "postgres://db/wq?user=wq&password=***&sslmode=require"
        );
        assert_eq!(
            scrub("failed for postgres://wq:pw@db (pw)", "postgres://wq:pw@db"),
            "failed for postgres://wq:***@db (***)"
        );
    }
}
