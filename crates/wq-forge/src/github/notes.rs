//! Comments on a pull request (the issue comments API).

use reqwest::Method;
use serde_json::{Value, json};

use super::GithubClient;
use super::http::{Call, Repo};
use super::wire;
use crate::error::{ForgeError, ForgeResult};
use crate::model::{LabelChange, Note, NoteRef};

/// A new pull request's labels and its first note in one request.
const LABELS_AND_NOTE: &str = "mutation($pr: ID!, $labels: [ID!]!, $body: String!) { \
labels: addLabelsToLabelable(input: {labelableId: $pr, labelIds: $labels}) { clientMutationId } \
note: addComment(input: {subjectId: $pr, body: $body}) { commentEdge { node { fullDatabaseId url } } } }";

impl GithubClient {
    /// The labels and the first note of a pull request this client just
    /// created: one GraphQL request when it knows the labels' node ids
    /// (learnt from GitHub's answers to adding labels by name). Otherwise
    /// (a label it has not added yet, which the repository may not have:
    /// GraphQL adds only labels that exist, REST makes them; a pull request
    /// it did not create, a restart between), and for a part of the request
    /// GitHub refused, REST.
    pub(super) async fn open_note(
        &self,
        project: &str,
        number: u64,
        labels: &[String],
        body: &str,
    ) -> ForgeResult<NoteRef> {
        let node = self.take_created(project, number);
        if labels.is_empty() {
            return self.create_note(project, number, body).await;
        }
        let repo = Repo::parse(project)?;
        let known = self.known_label_ids(project);
        let ids: Option<Vec<&String>> = labels
            .iter()
            .map(|label| known.get(&label.to_lowercase()))
            .collect();
        let (Some(node), Some(ids)) = (node, ids) else {
            self.add_labels_rest(&repo, number, labels).await?;
            return self.create_note(project, number, body).await;
        };
        let answer = self
            .http
            .graphql(
                LABELS_AND_NOTE,
                json!({ "pr": node, "labels": ids, "body": body }),
            )
            .await?;
        let data = &answer["data"];
        if data["labels"].is_null() {
            tracing::info!(
                project, number, errors = %wire::error_messages(&answer),
                "GitHub did not add the labels by id; adding them by name"
            );
            self.keep_label_ids(project, None);
            self.add_labels_rest(&repo, number, labels).await?;
        }
        if !data["note"].is_null() {
            // Posted: its id is the REST comment id (`fullDatabaseId`, a
            // `BigInt` GitHub sends as a string: issue comment ids passed
            // 32 bits).
            let posted = &data["note"]["commentEdge"]["node"];
            let id = match &posted["fullDatabaseId"] {
                Value::String(id) => id.parse().ok(),
                id => id.as_u64(),
            };
            return match id {
                Some(id) => Ok(NoteRef {
                    id,
                    url: posted["url"].as_str().map(str::to_owned),
                }),
                None => Err(ForgeError::rejected(
                    Some(200),
                    format!("GitHub answered a new comment without its id: {posted}"),
                )),
            };
        }
        tracing::info!(
            project, number, errors = %wire::error_messages(&answer),
            "GitHub did not take the comment through GraphQL; posting it over REST"
        );
        self.create_note(project, number, body).await
    }

    async fn add_labels_rest(
        &self,
        repo: &Repo<'_>,
        number: u64,
        labels: &[String],
    ) -> ForgeResult<()> {
        let add = LabelChange {
            add: labels,
            remove: &[],
        };
        self.change_labels(repo, number, &[], add).await.map(drop)
    }

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
