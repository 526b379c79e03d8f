//! Commits through the Commits API, and the empty-diff check.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use reqwest::Method;
use serde_json::{Value, json};

use super::GitlabClient;
use super::http::Call;
use super::wire;
use crate::error::{ForgeError, ForgeErrorKind, ForgeResult};
use crate::model::{CommitMode, CommitRequest, FileAction, PushedCommit};

impl GitlabClient {
    /// `POST repository/commits` with `start_branch` = the base branch, so
    /// the commit's parent is the base's head: GitLab refuses it (400, "A
    /// branch called '…' already exists", before writing anything) when
    /// the branch exists and `force` is not set, which is
    /// [`ForgeErrorKind::Conflict`] here. The answer's `stats` count the
    /// lines the commit changes against that parent: a nonzero count means
    /// the branch differs from the base (not empty); zero tells nothing (a
    /// mode change or a binary file counts no line), so the empty-diff
    /// check is left to [`GitlabClient::diff_is_empty`].
    pub(super) async fn commit_files(
        &self,
        request: &CommitRequest<'_>,
    ) -> ForgeResult<PushedCommit> {
        let actions: Vec<Value> = request.actions.iter().map(action_json).collect();
        let mut body = json!({
            "branch": request.branch,
            "start_branch": request.base_branch,
            "commit_message": request.message,
            "actions": actions,
        });
        if request.mode == CommitMode::ForceUpdate {
            // With start_branch, `force` resets the branch to the start
            // branch's head plus this commit.
            body["force"] = json!(true);
        }
        let call = Call::new(
            Method::POST,
            &["projects", request.project, "repository", "commits"],
        )
        .body(body);
        let commit: wire::CreatedCommit = match self.http.json(&call, "a commit").await {
            Ok(commit) => commit,
            Err(error) if request.mode == CommitMode::CreateBranch && branch_exists(&error) => {
                return Err(ForgeError {
                    kind: ForgeErrorKind::Conflict,
                    message: format!("branch {}: {}", request.branch, error.message),
                    ..error
                });
            }
            Err(error) => return Err(error),
        };
        let empty = commit.stats.filter(|stats| stats.total > 0).map(|_| false);
        Ok(PushedCommit {
            sha: commit.id,
            empty,
        })
    }

    /// `GET repository/compare?from=base&to=head&straight=true`.
    ///
    /// `straight=true` diffs the two trees directly (`git diff base head`)
    /// instead of from their merge base (`base...head`, GitLab's default).
    /// The merge-base diff shows the MR's own commits even when the target
    /// already holds the same content (landed through another MR), so it
    /// would never call such an MR empty. The straight diff is empty
    /// exactly when the trees are identical. When the target moved on with
    /// unrelated changes the straight diff is not empty: this errs towards
    /// "not empty", never towards closing an MR that still changes
    /// something.
    pub(super) async fn diff_is_empty(
        &self,
        project: &str,
        base: &str,
        head: &str,
    ) -> ForgeResult<bool> {
        let call = Call::get(&["projects", project, "repository", "compare"])
            .query("from", base)
            .query("to", head)
            .query("straight", "true");
        let compare: wire::Compare = self.http.json(&call, "a comparison").await?;
        if compare.compare_timeout {
            return Err(ForgeError::unavailable(format!(
                "compare {base}..{head} in {project}: GitLab timed out computing the diff"
            )));
        }
        Ok(compare.diffs.is_empty())
    }
}

/// GitLab's refusal to create a branch that exists (`Commits::CreateService`'s
/// `validate_branch_existence!`, a 400).
fn branch_exists(error: &ForgeError) -> bool {
    error.status == Some(400)
        && error.message.contains("A branch called")
        && error.message.contains("already exists")
}

/// One commit action as the Commits API takes it: UTF-8 content as text,
/// anything else base64.
fn action_json(action: &FileAction) -> Value {
    let mut json = json!({
        "action": action.op.as_str(),
        "file_path": action.path,
    });
    if let Some(previous) = &action.previous_path {
        json["previous_path"] = json!(previous);
    }
    if let Some(content) = &action.content {
        match std::str::from_utf8(content) {
            Ok(text) => {
                json["content"] = json!(text);
                json["encoding"] = json!("text");
            }
            Err(_) => {
                json["content"] = json!(BASE64.encode(content));
                json["encoding"] = json!("base64");
            }
        }
    }
    if let Some(executable) = action.execute_filemode {
        json["execute_filemode"] = json!(executable);
    }
    json
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FileOp;

    #[test]
    fn actions_send_utf8_as_text_and_other_bytes_as_base64() {
        let text = FileAction {
            op: FileOp::Create,
            path: "a.txt".into(),
            previous_path: None,
            content: Some("héllo".as_bytes().to_vec()),
            execute_filemode: Some(true),
        };
        assert_eq!(
            action_json(&text),
            json!({"action": "create", "file_path": "a.txt", "content": "héllo", "encoding": "text", "execute_filemode": true})
        );
        let binary = FileAction {
            op: FileOp::Move,
            path: "b.bin".into(),
            previous_path: Some("a.bin".into()),
            content: Some(vec![0xff, 0x00, 0xfe]),
            execute_filemode: None,
        };
        assert_eq!(
            action_json(&binary),
            json!({"action": "move", "file_path": "b.bin", "previous_path": "a.bin", "content": "/wD+", "encoding": "base64"})
        );
        let delete = FileAction {
            op: FileOp::Delete,
            path: "c".into(),
            previous_path: None,
            content: None,
            execute_filemode: None,
        };
        assert_eq!(
            action_json(&delete),
            json!({"action": "delete", "file_path": "c"})
        );
    }
}
