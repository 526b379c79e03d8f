//! Failures of the forge and the store as the engine and the API take them:
//! [`ExecError`] for executors and event handlers, [`wq_core::RequestError`] for
//! submissions and commands (store failures through wq-store's
//! `From<StoreError> for RequestError`, the API's mapping too).

use wq_core::ExecError;
use wq_forge::{ForgeError, ForgeErrorKind};
use wq_store::StoreError;

/// A forge error as an executor failure: an unavailable or rate-limited
/// forge is an outage, retried with backoff (honouring `Retry-After`) over
/// the engine's outage budget; a moment's inconsistency is retried a few
/// times; the rest fail the item at once.
pub(crate) fn forge_failure(what: &str, error: ForgeError) -> ExecError {
    let message = format!("{what}: {error}");
    match error.kind {
        ForgeErrorKind::Unavailable | ForgeErrorKind::RateLimited => {
            let failure = ExecError::outage(message);
            match error.retry_after {
                Some(after) => failure.retry_after(after),
                None => failure,
            }
        }
        // A 404 or 409 on a read can be a moment's inconsistency.
        ForgeErrorKind::NotFound | ForgeErrorKind::Conflict => ExecError::transient(message),
        ForgeErrorKind::Unauthorized | ForgeErrorKind::Rejected | ForgeErrorKind::Invalid => {
            ExecError::permanent(message)
        }
    }
}

/// A store failure in an executor or event handler: retried with backoff.
pub(crate) fn store_error(error: StoreError) -> ExecError {
    ExecError::transient(format!("store: {error}"))
}
