//! What a pull request shares with issues: labels and comments, the same
//! through REST and GraphQL.

use serde_json::json;

use crate::github::model::{GhRepo, IssueComment, RepoLabel, node_id};
use crate::github::{Ctx, Env, events, json as render};

/// Adds `names` to pull request `number`; a name the repository has no
/// label of becomes one of its labels, as GitHub's REST API makes it, and
/// a name that matches one of its labels but for case adds that label
/// ([`GhRepo::label_named`]). A `labeled` webhook for each label the pull
/// request did not have. `false` when there is no such pull request.
pub fn add_labels(
    repo: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    number: u64,
    names: &[String],
) -> bool {
    if !repo.pulls.contains_key(&number) {
        return false;
    }
    let mut added = Vec::new();
    for name in names {
        let label = match repo.label_named(name) {
            Some(label) => label.to_owned(),
            None => {
                repo.labels.insert(name.clone(), RepoLabel::default());
                name.clone()
            }
        };
        let Some(pr) = repo.pulls.get_mut(&number) else {
            return false;
        };
        if !pr.labels.contains(&label) {
            pr.labels.push(label.clone());
            added.push(label);
        }
    }
    for name in added {
        if let Some(pull) = repo.pulls.get(&number) {
            let label = render::label(ctx, repo, &name);
            events::pull_request(env, ctx, repo, pull, "labeled", json!({ "label": label }));
        }
    }
    true
}

/// Comments `body` on pull request `number` as the caller; the comment's
/// id, `None` when there is no such pull request.
pub fn add_comment(
    repo: &mut GhRepo,
    env: &mut Env,
    ctx: &Ctx,
    number: u64,
    body: String,
) -> Option<u64> {
    if !repo.pulls.contains_key(&number) {
        return None;
    }
    let id = env.next_id();
    repo.comments.push(IssueComment {
        id,
        node_id: node_id("IC", &id.to_string()),
        issue_number: number,
        user: ctx.sender.clone(),
        body,
        created_at: ctx.now,
        updated_at: ctx.now,
    });
    Some(id)
}
