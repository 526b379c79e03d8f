//! The one place item types are registered (DDR-8). The engine and the API
//! only ever see the built `TypeRegistry`.

use std::sync::Arc;

use wq_core::{Clock, TypeRegistry};
use wq_forge::Forges;
use wq_mr::MrType;
use wq_store::Store;

use crate::config::Config;

/// Names of every item type this binary knows, for checking a config file
/// before anything is built.
pub const TYPE_NAMES: &[&str] = &[wq_mr::TYPE_NAME];

/// The built types.
pub struct Types {
    pub registry: TypeRegistry,
    pub mr: Arc<MrType>,
}

/// Builds every item type over `store` and registers it.
pub fn build(
    store: Arc<dyn Store>,
    forges: Forges,
    config: &Config,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<Types> {
    let herder = config
        .herder()
        .map_err(|errors| anyhow::anyhow!("invalid ci_retry config: {}", errors.join("; ")))?;
    let mr = MrType::new(store, forges, config.mr.clone(), clock)
        .map_err(|errors| anyhow::anyhow!("invalid mr config: {}", errors.join("; ")))?
        .with_herder(herder);
    let mr = Arc::new(mr);
    let registry = TypeRegistry::builder().register(mr.clone()).build()?;
    Ok(Types { registry, mr })
}
