//! Notes (comments) on a merge request.

use reqwest::Method;
use serde_json::json;

use super::GitlabClient;
use super::http::Call;
use super::wire;
use crate::error::ForgeResult;
use crate::model::{Note, NoteRef};

impl GitlabClient {
    pub(super) async fn create_note(
        &self,
        project: &str,
        number: u64,
        body: &str,
    ) -> ForgeResult<NoteRef> {
        let iid = number.to_string();
        let note: wire::Id = self
            .http
            .json(
                &Call::new(
                    Method::POST,
                    &["projects", project, "merge_requests", &iid, "notes"],
                )
                .body(json!({ "body": body })),
                "a note",
            )
            .await?;
        Ok(NoteRef {
            id: note.id,
            url: None,
        })
    }

    /// User comments oldest first; system notes ("added 1 commit") are left out.
    pub(super) async fn list_notes(&self, project: &str, number: u64) -> ForgeResult<Vec<Note>> {
        let iid = number.to_string();
        let call = Call::get(&["projects", project, "merge_requests", &iid, "notes"])
            .query("sort", "asc")
            .query("order_by", "created_at");
        let notes: Vec<wire::Note> = self.http.list(call, "a list of notes").await?;
        Ok(notes
            .into_iter()
            .filter(|note| !note.system)
            .map(|note| Note {
                id: note.id,
                body: note.body,
                author: note.author.map(|a| a.username).unwrap_or_default(),
            })
            .collect())
    }

    pub(super) async fn update_note(
        &self,
        project: &str,
        number: u64,
        note_id: u64,
        body: &str,
    ) -> ForgeResult<()> {
        let iid = number.to_string();
        let note_id = note_id.to_string();
        let _: wire::Id = self
            .http
            .json(
                &Call::new(
                    Method::PUT,
                    &[
                        "projects",
                        project,
                        "merge_requests",
                        &iid,
                        "notes",
                        &note_id,
                    ],
                )
                .body(json!({ "body": body })),
                "a note",
            )
            .await?;
        Ok(())
    }
}
