//! The one place item types are registered (DDR-8). The engine, the API and
//! the wiring in [`crate::app`] only ever see the built `TypeRegistry`: a
//! type's migrations, webhook receivers and periodic tasks come with it.

use std::sync::Arc;

use wq_core::{Clock, TypeRegistry};
use wq_forge::Forges;
use wq_mr::MrType;
use wq_store::Store;

use crate::config::Config;

/// Names of every item type [`build`] registers, for checking a config file
/// before anything is built.
pub const TYPE_NAMES: &[&str] = &[wq_mr::TYPE_NAME];

/// Builds every item type over `store` and registers it.
pub fn build(
    store: Arc<dyn Store>,
    forges: Forges,
    config: &Config,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<TypeRegistry> {
    let herder = config
        .herder()
        .map_err(|errors| anyhow::anyhow!("invalid ci_retry config: {}", errors.join("; ")))?;
    let mr = MrType::new(store, forges, config.mr.clone(), clock)
        .map_err(|errors| anyhow::Error::new(errors).context("invalid mr config"))?
        .with_herder(herder);
    Ok(TypeRegistry::builder().register(Arc::new(mr)).build()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn type_names_are_the_registered_types() {
        let store = wq_testkit::Backend::Sqlite.fresh_store().await;
        let registry = build(
            store,
            Forges::new(),
            &Config::default(),
            Arc::new(wq_core::SystemClock),
        )
        .unwrap();
        assert_eq!(registry.names().collect::<Vec<_>>(), TYPE_NAMES);
    }
}
