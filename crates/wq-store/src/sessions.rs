//! The web dashboard's sign-in sessions and one-time sign-in links
//! (`ui_sessions`): generic rows, only the SHA-256 of each id kept, who
//! signed in as JSON (the dashboard matches it against the rules again on
//! every request), a CSRF token and an expiry.

use serde_json::Value;
use time::OffsetDateTime;

use crate::StoreResult;
use crate::codec::{DbJson, DbRow, DbTime};

/// A session a browser holds in its cookie.
pub const SESSION: &str = "session";
/// A single-use sign-in link, exchanged for a session.
pub const LINK: &str = "link";

/// One `ui_sessions` row.
#[derive(Debug, Clone, PartialEq)]
pub struct UiSession {
    /// The SHA-256 (hex) of the id the browser holds.
    pub id_hash: String,
    /// [`SESSION`] or [`LINK`].
    pub kind: String,
    /// Who signed in.
    pub principal: Value,
    pub csrf_token: String,
    pub created_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
}

pub(crate) fn session_from_row(row: &impl DbRow) -> StoreResult<UiSession> {
    let principal: DbJson<Value> = row.decode("principal")?;
    let created_at: DbTime = row.decode("created_at")?;
    let expires_at: DbTime = row.decode("expires_at")?;
    Ok(UiSession {
        id_hash: row.decode("id_hash")?,
        kind: row.decode("kind")?,
        principal: principal.0,
        csrf_token: row.decode("csrf_token")?,
        created_at: created_at.0,
        expires_at: expires_at.0,
    })
}
