//! Failures of the forge and the store as the engine and the API take them:
//! [`ExecError`] for executors and event handlers, [`RequestError`] for
//! submissions and commands.

use wq_core::{ExecError, RequestError};
use wq_forge::{ForgeError, ForgeErrorKind};
use wq_store::StoreError;

/// A forge error as an executor failure: transient ones are retried with
/// backoff (honouring `Retry-After`), the rest fail the item at once.
pub(crate) fn forge_failure(what: &str, error: ForgeError) -> ExecError {
    let message = format!("{what}: {error}");
    match error.kind {
        ForgeErrorKind::Unavailable | ForgeErrorKind::RateLimited => {
            let failure = ExecError::transient(message);
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

/// A store failure as the answer to a request, like the API's own mapping
/// of store errors: database, migration and stored-data failures are
/// internal (their text is logged, never sent).
pub(crate) fn request_store_error(error: StoreError) -> RequestError {
    match error {
        StoreError::NotFound(id) => RequestError::NotFound(format!("work item {id} not found")),
        StoreError::Conflict(message) | StoreError::Duplicate(message) => {
            RequestError::Conflict(message)
        }
        StoreError::LeaseLost(id) => {
            RequestError::Conflict(format!("work item {id} is being processed; try again"))
        }
        other @ (StoreError::Corrupt(_) | StoreError::Database(_) | StoreError::Migrate(_)) => {
            RequestError::Internal(format!("store: {other}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wq_core::ItemId;

    #[test]
    fn store_failures_are_internal_and_keep_their_detail_for_the_log() {
        let database = request_store_error(StoreError::Database(sqlx::Error::Protocol(
            "relation \"mr_details\" does not exist".into(),
        )));
        assert!(
            matches!(&database, RequestError::Internal(detail) if detail.contains("mr_details")),
            "{database:?}"
        );
        let corrupt = request_store_error(StoreError::Corrupt("bad spec json".into()));
        assert!(
            matches!(&corrupt, RequestError::Internal(detail) if detail.contains("bad spec json")),
            "{corrupt:?}"
        );
        let id = ItemId::new_v7();
        assert_eq!(
            request_store_error(StoreError::NotFound(id)),
            RequestError::NotFound(format!("work item {id} not found"))
        );
        assert_eq!(
            request_store_error(StoreError::Duplicate("taken".into())),
            RequestError::Conflict("taken".into())
        );
        assert!(matches!(
            request_store_error(StoreError::LeaseLost(id)),
            RequestError::Conflict(_)
        ));
    }
}
