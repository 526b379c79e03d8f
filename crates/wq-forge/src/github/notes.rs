//! Comments on a pull request (the issue comments API).

use reqwest::Method;
use serde_json::{Value, json};

use super::GithubClient;
use super::http::{Call, Repo};
use crate::error::{ForgeError, ForgeResult};
use crate::model::{Note, NoteRef};

impl GithubClient {
    pub(super) async fn create_note(
        &self,
        project: &str,
        number: u64,
        body: &str,
    ) -> ForgeResult<NoteRef> {
        let repo = Repo::parse(project)?;
        let n = number.to_string();
        let note: Value = self
            .http
            .json(
                &Call::repo(Method::POST, &repo, &["issues", &n, "comments"])
                    .body(json!({ "body": body })),
                "a comment",
            )
            .await?;
        let id = note.get("id").and_then(Value::as_u64).ok_or_else(|| {
            ForgeError::rejected(None, "GitHub answered a new comment without an id")
        })?;
        Ok(NoteRef {
            id,
            url: note
                .get("html_url")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    /// The pull request's issue comments, oldest first (GitHub's order).
    pub(super) async fn list_notes(&self, project: &str, number: u64) -> ForgeResult<Vec<Note>> {
        let repo = Repo::parse(project)?;
        let n = number.to_string();
        let call = Call::repo(Method::GET, &repo, &["issues", &n, "comments"]);
        let comments: Vec<Value> = self.http.list(call, "a list of comments").await?;
        comments
            .into_iter()
            .map(|c| {
                let id = c.get("id").and_then(Value::as_u64).ok_or_else(|| {
                    ForgeError::rejected(None, "GitHub listed a comment without an id")
                })?;
                Ok(Note {
                    id,
                    body: c
                        .get("body")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    author: c
                        .pointer("/user/login")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                })
            })
            .collect()
    }

    /// `PATCH issues/comments/:id` (comment ids are unique per repository;
    /// `number` is not needed).
    pub(super) async fn update_note(
        &self,
        project: &str,
        _number: u64,
        note_id: u64,
        body: &str,
    ) -> ForgeResult<()> {
        let repo = Repo::parse(project)?;
        let id = note_id.to_string();
        let _: serde::de::IgnoredAny = self
            .http
            .json(
                &Call::repo(Method::PATCH, &repo, &["issues", "comments", &id])
                    .body(json!({ "body": body })),
                "a comment",
            )
            .await?;
        Ok(())
    }
}
