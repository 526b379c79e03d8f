//! The one place item types are registered (DDR-8). The engine and the API
//! only ever see the built `TypeRegistry`.

use wq_core::TypeRegistry;

/// Every item type this binary knows.
pub fn registry() -> anyhow::Result<TypeRegistry> {
    // Item types are registered here, one `.register(...)` each, e.g.
    // `.register(Arc::new(wq_mr::MrType::new(...)))`. None exist yet.
    let registry = TypeRegistry::builder().build()?;
    Ok(registry)
}
