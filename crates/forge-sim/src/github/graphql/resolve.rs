//! Resolves parsed GraphQL documents against the simulated GitHub state, and serves `POST /graphql`.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Map, Value, json};

use super::parser::{self as gql, Document, Field, OperationKind, Selection};
use crate::github::error::ApiError;
use crate::github::json::{label_node_id, ts, ts_opt, user_id};
use crate::github::model;
use crate::github::model::{GhRepo, PullRequest, QueueEntry};
use crate::github::rest::reply;
use crate::github::{Ctx, GithubState, authenticate, ops, with_github};
use crate::repo::{Commit, Tree};
use crate::state::Shared;

const GRAPHQL_DOCS: &str = "https://docs.github.com/graphql";

pub fn router() -> Router<Shared> {
    Router::new().route("/graphql", post(handle))
}

async fn handle(State(st): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let login = match authenticate(&st, &headers) {
        Ok(l) => l,
        Err(_) => {
            return ApiError::with_docs(StatusCode::UNAUTHORIZED, "Bad credentials", GRAPHQL_DOCS)
                .into_response_();
        }
    };
    let ctx = Ctx::new(&st, &login);
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return ApiError::with_docs(
            StatusCode::BAD_REQUEST,
            "Problems parsing JSON",
            GRAPHQL_DOCS,
        )
        .into_response_();
    };
    let Some(query) = req.get("query").and_then(Value::as_str) else {
        return reply(
            StatusCode::OK,
            json!({ "errors": [{ "message": "A query attribute must be specified and must be a string." }] }),
        );
    };
    let variables = match req.get("variables") {
        Some(Value::Object(m)) => m.clone(),
        Some(Value::String(s)) if !s.is_empty() => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        },
        _ => Map::new(),
    };
    let op_name = req
        .get("operationName")
        .and_then(Value::as_str)
        .map(str::to_string);
    let doc = match gql::parse(query) {
        Ok(d) => d,
        Err(e) => {
            return reply(
                StatusCode::OK,
                json!({ "errors": [{
                    "message": e.message,
                    "locations": [{ "line": e.line, "column": e.column }],
                }] }),
            );
        }
    };
    let body = with_github(&st, |gh| {
        execute(gh, &ctx, &doc, op_name.as_deref(), variables)
    });
    reply(StatusCode::OK, body)
}

trait IntoResp {
    fn into_response_(self) -> Response;
}

impl IntoResp for ApiError {
    fn into_response_(self) -> Response {
        axum::response::IntoResponse::into_response(self)
    }
}

/// Executes a parsed document against the state and returns the GraphQL response body.
pub fn execute(
    gh: &mut GithubState,
    ctx: &Ctx,
    doc: &Document,
    op_name: Option<&str>,
    mut vars: Map<String, Value>,
) -> Value {
    let op = match doc.operation(op_name) {
        Ok(op) => op,
        Err(m) => return json!({ "errors": [{ "message": m }] }),
    };
    for def in &op.variables {
        if !vars.contains_key(&def.name)
            && let Some(d) = &def.default
        {
            vars.insert(def.name.clone(), d.to_json(&Map::new()));
        }
    }
    let mut ex = Exec {
        doc,
        vars,
        ctx: ctx.clone(),
        errors: Vec::new(),
        invalid: false,
    };
    let data = match op.kind {
        OperationKind::Query => {
            let fields = ex.collect(&op.selection, "Query");
            let mut out = Map::new();
            for f in fields {
                let v = ex.query_field(gh, &f, &[]);
                out.insert(f.response_key().to_string(), v);
            }
            Value::Object(out)
        }
        OperationKind::Mutation => {
            let fields = ex.collect(&op.selection, "Mutation");
            let mut out = Map::new();
            for f in fields {
                let v = ex.mutation_field(gh, &f);
                out.insert(f.response_key().to_string(), v);
            }
            Value::Object(out)
        }
        OperationKind::Subscription => {
            return json!({ "errors": [{ "message": "Subscriptions are not supported" }] });
        }
    };
    if ex.invalid {
        return json!({ "errors": ex.errors });
    }
    if ex.errors.is_empty() {
        json!({ "data": data })
    } else {
        json!({ "data": data, "errors": ex.errors })
    }
}

/// Something a selection set can be resolved on.
enum Obj<'a> {
    Repo(&'a GhRepo),
    Pr(&'a GhRepo, &'a PullRequest),
    Entry(&'a GhRepo, &'a QueueEntry),
    Queue(&'a GhRepo, String),
    /// The checks and statuses of a commit (`StatusCheckRollup`), by its sha.
    Rollup(&'a GhRepo, String),
    /// A branch as a `Ref` (`refs/heads/<name>`), by its short name.
    Ref(&'a GhRepo, String),
    /// A commit of the repository as a `Commit` git object.
    Commit(&'a GhRepo, &'a Commit),
    /// A mutation payload: type name, clientMutationId, and the objects it
    /// reports by field name (`None`: null).
    Payload(&'static str, Value, Vec<(&'static str, Option<Obj<'a>>)>),
    /// A plain JSON object whose `__typename` key names its type.
    Static(Value),
}

/// Concrete type names; a fragment on any other name is treated as an interface that matches.
const CONCRETE: &[&str] = &[
    "Query",
    "Mutation",
    "Repository",
    "PullRequest",
    "MergeQueueEntry",
    "MergeQueue",
    "User",
    "Bot",
    "Issue",
    "Commit",
    "PullRequestReview",
    "PullRequestReviewThread",
    "Label",
    "Organization",
    "StatusCheckRollup",
    "CheckRun",
    "StatusContext",
    "Ref",
    "Tree",
    "TreeEntry",
    "Blob",
    "Tag",
];

struct Exec<'d> {
    doc: &'d Document,
    vars: Map<String, Value>,
    ctx: Ctx,
    errors: Vec<Value>,
    invalid: bool,
}

fn path_json(path: &[String], key: &str) -> Value {
    let mut p: Vec<Value> = path.iter().map(|s| json!(s)).collect();
    p.push(json!(key));
    Value::Array(p)
}

impl Exec<'_> {
    fn arg(&self, f: &Field, name: &str) -> Value {
        f.arg(name)
            .map(|v| v.to_json(&self.vars))
            .unwrap_or(Value::Null)
    }

    fn included(&self, directives: &[gql::Directive]) -> bool {
        for d in directives {
            let cond = d
                .args
                .iter()
                .find(|(k, _)| k == "if")
                .map(|(_, v)| v.to_json(&self.vars).as_bool().unwrap_or(false));
            match (d.name.as_str(), cond) {
                ("skip", Some(true)) => return false,
                ("include", Some(false)) => return false,
                _ => {}
            }
        }
        true
    }

    /// Flattens fragments into the fields that apply to `type_name`.
    fn collect(&mut self, sel: &[Selection], type_name: &str) -> Vec<Field> {
        let mut out = Vec::new();
        self.collect_into(sel, type_name, &mut out, 0);
        out
    }

    fn collect_into(
        &mut self,
        sel: &[Selection],
        type_name: &str,
        out: &mut Vec<Field>,
        depth: usize,
    ) {
        if depth > 32 {
            return;
        }
        let applies = |cond: &str| cond == type_name || !CONCRETE.contains(&cond);
        for s in sel {
            match s {
                Selection::Field(f) => {
                    if self.included(&f.directives) {
                        out.push(f.clone());
                    }
                }
                Selection::InlineFragment {
                    type_condition,
                    directives,
                    selection,
                } => {
                    if self.included(directives) && type_condition.as_deref().is_none_or(applies) {
                        self.collect_into(selection, type_name, out, depth + 1);
                    }
                }
                Selection::FragmentSpread { name, directives } => {
                    if !self.included(directives) {
                        continue;
                    }
                    if let Some(frag) = self.doc.fragments.get(name) {
                        if applies(&frag.type_condition) {
                            self.collect_into(&frag.selection, type_name, out, depth + 1);
                        }
                    } else {
                        self.invalid = true;
                        self.errors.push(json!({
                            "message": format!("Fragment {name} was used, but not defined"),
                            "extensions": { "code": "useAndDefineFragment", "fragmentName": name },
                        }));
                    }
                }
            }
        }
    }

    fn undefined(&mut self, type_name: &str, f: &Field, path: &[String]) -> Value {
        self.invalid = true;
        self.errors.push(json!({
            "path": path_json(path, f.response_key()),
            "extensions": { "code": "undefinedField", "typeName": type_name, "fieldName": f.name },
            "locations": [{ "line": f.line, "column": f.column }],
            "message": format!("Field '{}' doesn't exist on type '{type_name}'", f.name),
        }));
        Value::Null
    }

    fn exec_error(&mut self, kind: &str, message: String, f: &Field, path: &[String]) -> Value {
        self.errors.push(json!({
            "type": kind,
            "path": path_json(path, f.response_key()),
            "locations": [{ "line": f.line, "column": f.column }],
            "message": message,
        }));
        Value::Null
    }

    fn query_field(&mut self, gh: &GithubState, f: &Field, path: &[String]) -> Value {
        match f.name.as_str() {
            "__typename" => json!("Query"),
            "repository" => {
                let owner = self.arg(f, "owner");
                let name = self.arg(f, "name");
                let (Some(owner), Some(name)) = (owner.as_str(), name.as_str()) else {
                    return self.missing_arguments(f, path, "owner, name");
                };
                match gh.repo(owner, name) {
                    Some(r) => self.resolve(gh, &Obj::Repo(r), f, path),
                    None => self.exec_error(
                        "NOT_FOUND",
                        format!(
                            "Could not resolve to a Repository with the name '{owner}/{name}'."
                        ),
                        f,
                        path,
                    ),
                }
            }
            "viewer" => {
                let v = actor(&self.ctx.sender);
                self.resolve(gh, &Obj::Static(v), f, path)
            }
            "node" => {
                let id = self.arg(f, "id");
                let id = id.as_str().unwrap_or_default().to_string();
                match find_node(gh, &id) {
                    Some(obj) => self.resolve(gh, &obj, f, path),
                    None => self.exec_error(
                        "NOT_FOUND",
                        format!("Could not resolve to a node with the global id of '{id}'"),
                        f,
                        path,
                    ),
                }
            }
            "rateLimit" => {
                let v = json!({
                    "__typename": "RateLimit", "limit": 5000, "cost": 1, "remaining": 4999,
                    "used": 1, "resetAt": ts(self.ctx.now + time::Duration::hours(1)), "nodeCount": 1,
                });
                self.resolve(gh, &Obj::Static(v), f, path)
            }
            _ => self.undefined("Query", f, path),
        }
    }

    fn mutation_field(&mut self, gh: &mut GithubState, f: &Field) -> Value {
        let input = self.arg(f, "input");
        let cmid = input
            .get("clientMutationId")
            .cloned()
            .unwrap_or(Value::Null);
        match f.name.as_str() {
            "__typename" => json!("Mutation"),
            "enqueuePullRequest" => {
                let pr_id = input_text(&input, "pullRequestId").to_string();
                let expected = input
                    .get("expectedHeadOid")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let Some((key, number)) = find_pr(gh, &pr_id) else {
                    return self.exec_error(
                        "NOT_FOUND",
                        format!("Could not resolve to a node with the global id of '{pr_id}'"),
                        f,
                        &[],
                    );
                };
                let ctx = self.ctx.clone();
                let result = match gh.repos.get_mut(&key) {
                    Some(r) => ops::enqueue(r, &mut gh.env, &ctx, number, expected.as_deref()),
                    None => Err("Repository not found".into()),
                };
                match result {
                    Err(m) => self.exec_error("UNPROCESSABLE", m, f, &[]),
                    Ok(_) => {
                        let Some(r) = gh.repos.get(&key) else {
                            return Value::Null;
                        };
                        let entry = r
                            .queue
                            .iter()
                            .find(|e| e.pr == number)
                            .map(|e| Obj::Entry(r, e));
                        let obj = Obj::Payload(
                            "EnqueuePullRequestPayload",
                            cmid,
                            vec![("mergeQueueEntry", entry)],
                        );
                        self.resolve(gh, &obj, f, &[])
                    }
                }
            }
            "dequeuePullRequest" => {
                let id = input_text(&input, "id").to_string();
                let target = find_pr(gh, &id).or_else(|| {
                    gh.repos.iter().find_map(|(k, r)| {
                        r.queue
                            .iter()
                            .find(|e| e.id == id)
                            .map(|e| (k.clone(), e.pr))
                    })
                });
                let Some((key, number)) = target else {
                    return self.exec_error(
                        "NOT_FOUND",
                        format!("Could not resolve to a node with the global id of '{id}'"),
                        f,
                        &[],
                    );
                };
                let ctx = self.ctx.clone();
                let Some(r) = gh.repos.get_mut(&key) else {
                    return Value::Null;
                };
                let Some((pos, _)) = r.queue_position(number) else {
                    return self.exec_error(
                        "UNPROCESSABLE",
                        "The pull request is not in the merge queue.".into(),
                        f,
                        &[],
                    );
                };
                let snapshot = r
                    .queue
                    .iter()
                    .find(|e| e.pr == number)
                    .map(|e| entry_json(r, e, pos));
                ops::dequeue(r, &mut gh.env, &ctx, number, "MANUAL");
                let entry = snapshot.map(|mut v| {
                    // The removed entry still reports its pull request.
                    if let Some(pr) = gh.repos.get(&key).and_then(|r| r.pulls.get(&number)) {
                        v["pullRequest"] = json!({ "__typename": "PullRequest", "id": pr.node_id, "number": pr.number });
                    }
                    Obj::Static(v)
                });
                let obj = Obj::Payload(
                    "DequeuePullRequestPayload",
                    cmid,
                    vec![("mergeQueueEntry", entry)],
                );
                self.resolve(gh, &obj, f, &[])
            }
            "createRef" => self.create_ref(gh, f, &input, cmid),
            "updateRef" => self.update_ref(gh, f, &input, cmid),
            "deleteRef" => self.delete_ref(gh, f, &input, cmid),
            "createCommitOnBranch" => self.create_commit_on_branch(gh, f, &input, cmid),
            "addLabelsToLabelable" => self.add_labels(gh, f, &input, cmid),
            "addComment" => self.add_comment(gh, f, &input, cmid),
            _ => self.undefined("Mutation", f, &[]),
        }
    }

    /// `createRef(input: {repositoryId, name, oid})`: a branch
    /// (`refs/heads/...`; the simulator keeps no other refs) at a commit the
    /// repository holds.
    fn create_ref(&mut self, gh: &mut GithubState, f: &Field, input: &Value, cmid: Value) -> Value {
        let (repository, name, oid) = (
            input_text(input, "repositoryId"),
            input_text(input, "name"),
            input_text(input, "oid"),
        );
        let Some(key) = gh
            .repos
            .iter()
            .find(|(_, r)| r.node_id == repository)
            .map(|(k, _)| k.clone())
        else {
            return self.not_found(repository, f);
        };
        let Some(branch) = name.strip_prefix("refs/heads/") else {
            return self.exec_error(
                "UNPROCESSABLE",
                format!("Only refs/heads/* references are supported by this simulator: {name}"),
                f,
                &[],
            );
        };
        if !valid_branch_name(branch) {
            return self.exec_error(
                "UNPROCESSABLE",
                format!("\"{name}\" is not a valid ref name."),
                f,
                &[],
            );
        }
        let ctx = self.ctx.clone();
        let (Some(r), env) = (gh.repos.get_mut(&key), &mut gh.env) else {
            return Value::Null;
        };
        if r.git.branch_head(branch).is_some() {
            return self.exec_error(
                "UNPROCESSABLE",
                format!("A ref named \"{name}\" already exists in the repository."),
                f,
                &[],
            );
        }
        if r.git.commit(oid).is_none() {
            return self.unknown_commit(oid, f);
        }
        ops::set_branch(r, env, &ctx, branch, Some(oid));
        self.ref_payload(gh, f, "CreateRefPayload", cmid, &key, branch)
    }

    /// `updateRef(input: {refId, oid, force})`: a fast-forward unless
    /// `force`.
    fn update_ref(&mut self, gh: &mut GithubState, f: &Field, input: &Value, cmid: Value) -> Value {
        let id = input_text(input, "refId");
        let oid = input_text(input, "oid");
        let force = input.get("force").and_then(Value::as_bool).unwrap_or(false);
        let Some((key, branch)) = find_ref(gh, id) else {
            return self.not_found(id, f);
        };
        let ctx = self.ctx.clone();
        let (Some(r), env) = (gh.repos.get_mut(&key), &mut gh.env) else {
            return Value::Null;
        };
        if r.git.commit(oid).is_none() {
            return self.unknown_commit(oid, f);
        }
        let current = r.git.branch_head(&branch).unwrap_or_default().to_owned();
        if !force && !r.git.is_ancestor(&current, oid) {
            return self.exec_error(
                "UNPROCESSABLE",
                "Update is not a fast forward".into(),
                f,
                &[],
            );
        }
        ops::set_branch(r, env, &ctx, &branch, Some(oid));
        self.ref_payload(gh, f, "UpdateRefPayload", cmid, &key, &branch)
    }

    /// `deleteRef(input: {refId})`; the default branch stays.
    fn delete_ref(&mut self, gh: &mut GithubState, f: &Field, input: &Value, cmid: Value) -> Value {
        let id = input_text(input, "refId");
        let Some((key, branch)) = find_ref(gh, id) else {
            return self.not_found(id, f);
        };
        let ctx = self.ctx.clone();
        let (Some(r), env) = (gh.repos.get_mut(&key), &mut gh.env) else {
            return Value::Null;
        };
        if branch == r.git.default_branch() {
            return self.exec_error(
                "UNPROCESSABLE",
                "Cannot delete the default branch".into(),
                f,
                &[],
            );
        }
        ops::set_branch(r, env, &ctx, &branch, None);
        let obj = Obj::Payload("DeleteRefPayload", cmid, Vec::new());
        self.resolve(gh, &obj, f, &[])
    }

    /// `createCommitOnBranch(input: {branch, expectedHeadOid, fileChanges,
    /// message})`, the branch named by its node id or by
    /// `repositoryNameWithOwner` and `branchName` (see
    /// [`ops::commit_on_branch`]).
    fn create_commit_on_branch(
        &mut self,
        gh: &mut GithubState,
        f: &Field,
        input: &Value,
        cmid: Value,
    ) -> Value {
        let branch = &input["branch"];
        let target = match branch.get("id").and_then(Value::as_str) {
            Some(id) => find_ref(gh, id),
            None => {
                let full = branch["repositoryNameWithOwner"]
                    .as_str()
                    .unwrap_or_default();
                let name = branch["branchName"].as_str().unwrap_or_default();
                full.split_once('/').and_then(|(owner, repo)| {
                    gh.repo(owner, repo)
                        .map(|_| (crate::github::repo_key(owner, repo), name.to_owned()))
                })
            }
        };
        let Some((key, name)) = target else {
            return self.exec_error(
                "NOT_FOUND",
                format!("Could not resolve to a Ref with the name of {branch}."),
                f,
                &[],
            );
        };
        let paths = |list: &str| -> Vec<&Value> {
            input["fileChanges"][list]
                .as_array()
                .map(|items| items.iter().collect())
                .unwrap_or_default()
        };
        let additions = paths("additions")
            .into_iter()
            .map(|a| {
                (
                    a["path"].as_str().unwrap_or_default(),
                    a["contents"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        let deletions = paths("deletions")
            .into_iter()
            .map(|d| d["path"].as_str().unwrap_or_default())
            .collect();
        let request = ops::CommitOnBranch {
            branch: &name,
            expected_head: input["expectedHeadOid"].as_str().unwrap_or_default(),
            additions,
            deletions,
            headline: input["message"]["headline"].as_str().unwrap_or_default(),
            body: input["message"]["body"].as_str(),
        };
        let ctx = self.ctx.clone();
        let (Some(r), env) = (gh.repos.get_mut(&key), &mut gh.env) else {
            return Value::Null;
        };
        let sha = match ops::commit_on_branch(r, env, &ctx, &request) {
            Ok(sha) => sha,
            Err(message) => return self.exec_error("UNPROCESSABLE", message, f, &[]),
        };
        let Some(r) = gh.repos.get(&key) else {
            return Value::Null;
        };
        let branch = name.strip_prefix("refs/heads/").unwrap_or(&name).to_owned();
        let obj = Obj::Payload(
            "CreateCommitOnBranchPayload",
            cmid,
            vec![
                ("commit", r.git.commit(&sha).map(|c| Obj::Commit(r, c))),
                ("ref", Some(Obj::Ref(r, branch))),
            ],
        );
        self.resolve(gh, &obj, f, &[])
    }

    /// `addLabelsToLabelable(input: {labelableId, labelIds})`: labels of
    /// the pull request's repository, by node id, added to it.
    fn add_labels(&mut self, gh: &mut GithubState, f: &Field, input: &Value, cmid: Value) -> Value {
        let id = input_text(input, "labelableId");
        let Some((key, number)) = find_pr(gh, id) else {
            return self.not_found(id, f);
        };
        let ids: Vec<&str> = input
            .get("labelIds")
            .and_then(Value::as_array)
            .map(|ids| ids.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let ctx = self.ctx.clone();
        let (Some(r), env) = (gh.repos.get_mut(&key), &mut gh.env) else {
            return Value::Null;
        };
        let mut names = Vec::with_capacity(ids.len());
        for label in ids {
            match r.labels.keys().find(|name| label_node_id(name) == label) {
                Some(name) => names.push(name.clone()),
                None => return self.not_found(label, f),
            }
        }
        ops::add_labels(r, env, &ctx, number, &names);
        let Some(r) = gh.repos.get(&key) else {
            return Value::Null;
        };
        let labelable = r.pulls.get(&number).map(|pr| Obj::Pr(r, pr));
        let obj = Obj::Payload(
            "AddLabelsToLabelablePayload",
            cmid,
            vec![("labelable", labelable)],
        );
        self.resolve(gh, &obj, f, &[])
    }

    /// `addComment(input: {subjectId, body})` on a pull request.
    fn add_comment(
        &mut self,
        gh: &mut GithubState,
        f: &Field,
        input: &Value,
        cmid: Value,
    ) -> Value {
        let id = input_text(input, "subjectId");
        let body = input_text(input, "body");
        let Some((key, number)) = find_pr(gh, id) else {
            return self.not_found(id, f);
        };
        if body.is_empty() {
            return self.exec_error("UNPROCESSABLE", "Body can't be blank".into(), f, &[]);
        }
        let ctx = self.ctx.clone();
        let (Some(r), env) = (gh.repos.get_mut(&key), &mut gh.env) else {
            return Value::Null;
        };
        let Some(comment) = ops::add_comment(r, env, &ctx, number, body.to_owned()) else {
            return Value::Null;
        };
        let Some(r) = gh.repos.get(&key) else {
            return Value::Null;
        };
        let edge = r.comments.iter().find(|c| c.id == comment).map(|c| {
            let full = r.full_name();
            Obj::Static(json!({
                "__typename": "IssueCommentEdge",
                "cursor": cursor(0),
                "node": {
                    "__typename": "IssueComment",
                    "id": c.node_id,
                    "databaseId": c.id,
                    // A `BigInt`, which GitHub sends as a string.
                    "fullDatabaseId": c.id.to_string(),
                    "body": c.body,
                    "url": format!("{}/{full}/pull/{number}#issuecomment-{}", ctx.base_url, c.id),
                    "createdAt": ts(c.created_at),
                    "author": actor(&c.user),
                },
            }))
        });
        let subject = r.pulls.get(&number).map(|pr| Obj::Pr(r, pr));
        let obj = Obj::Payload(
            "AddCommentPayload",
            cmid,
            vec![("commentEdge", edge), ("subject", subject)],
        );
        self.resolve(gh, &obj, f, &[])
    }

    /// A payload reporting the branch `branch` of the repository at `key`.
    fn ref_payload(
        &mut self,
        gh: &GithubState,
        f: &Field,
        type_name: &'static str,
        cmid: Value,
        key: &str,
        branch: &str,
    ) -> Value {
        let Some(r) = gh.repos.get(key) else {
            return Value::Null;
        };
        let obj = Obj::Payload(
            type_name,
            cmid,
            vec![("ref", Some(Obj::Ref(r, branch.to_owned())))],
        );
        self.resolve(gh, &obj, f, &[])
    }

    /// GraphQL's answer to a field called without its required arguments.
    fn missing_arguments(&mut self, f: &Field, path: &[String], arguments: &str) -> Value {
        let message = format!(
            "Field '{}' is missing required arguments: {arguments}",
            f.name
        );
        self.exec_error("ARGUMENT_ERROR", message, f, path)
    }

    fn unknown_commit(&mut self, oid: &str, f: &Field) -> Value {
        self.exec_error(
            "UNPROCESSABLE",
            format!("Could not resolve to a commit with the oid '{oid}'."),
            f,
            &[],
        )
    }

    fn not_found(&mut self, id: &str, f: &Field) -> Value {
        self.exec_error(
            "NOT_FOUND",
            format!("Could not resolve to a node with the global id of '{id}'"),
            f,
            &[],
        )
    }

    /// Resolves `f`'s selection set on `obj` (or reports a missing selection set).
    fn resolve(&mut self, gh: &GithubState, obj: &Obj<'_>, f: &Field, path: &[String]) -> Value {
        let type_name = type_of(obj);
        if f.selection.is_empty() {
            self.invalid = true;
            self.errors.push(json!({
                "path": path_json(path, f.response_key()),
                "extensions": { "code": "selectionMismatch", "nodeName": format!("field '{}'", f.name), "typeName": type_name },
                "locations": [{ "line": f.line, "column": f.column }],
                "message": format!(
                    "Field must have selections (field '{}' returns {type_name} but has no selections. Did you mean '{} {{ ... }}'?)",
                    f.name, f.name
                ),
            }));
            return Value::Null;
        }
        let mut sub_path = path.to_vec();
        sub_path.push(f.response_key().to_string());
        let fields = self.collect(&f.selection, &type_name);
        let stat = static_json(&self.ctx, obj);
        let mut out = Map::new();
        for sf in fields {
            let v = self.field(gh, obj, &stat, &sf, &sub_path);
            out.insert(sf.response_key().to_string(), v);
        }
        Value::Object(out)
    }

    fn field(
        &mut self,
        gh: &GithubState,
        obj: &Obj<'_>,
        stat: &Value,
        f: &Field,
        path: &[String],
    ) -> Value {
        if f.name == "__typename" {
            return json!(type_of(obj));
        }
        match (obj, f.name.as_str()) {
            (Obj::Repo(r), "pullRequest") => {
                let n = self.arg(f, "number");
                let Some(n) = n.as_u64() else {
                    return self.missing_arguments(f, path, "number");
                };
                match r.pulls.get(&n) {
                    Some(pr) => self.resolve(gh, &Obj::Pr(r, pr), f, path),
                    None => self.exec_error(
                        "NOT_FOUND",
                        format!("Could not resolve to a PullRequest with the number of {n}."),
                        f,
                        path,
                    ),
                }
            }
            (Obj::Repo(r), "mergeQueue") => {
                let branch = self.arg(f, "branch");
                let branch = branch
                    .as_str()
                    .unwrap_or(r.git.default_branch())
                    .to_string();
                if r.queue_enabled_for(&branch) {
                    self.resolve(gh, &Obj::Queue(r, branch), f, path)
                } else {
                    Value::Null
                }
            }
            (Obj::Repo(r), "pullRequests") => {
                let states = self.arg(f, "states");
                let states: Vec<String> = match states {
                    Value::Array(a) => a
                        .iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect(),
                    Value::String(s) => vec![s],
                    _ => Vec::new(),
                };
                let head = self.arg(f, "headRefName");
                let base = self.arg(f, "baseRefName");
                let items: Vec<Obj> = r
                    .pulls
                    .values()
                    .filter(|p| states.is_empty() || states.iter().any(|s| s == gql_state(p)))
                    .filter(|p| head.as_str().is_none_or(|h| p.head_ref == h))
                    .filter(|p| base.as_str().is_none_or(|b| p.base_ref == b))
                    .map(|p| Obj::Pr(r, p))
                    .collect();
                self.connection(gh, "PullRequestConnection", items, f, path)
            }
            (Obj::Pr(r, pr), "mergeQueueEntry") => match r.queue.iter().find(|e| e.pr == pr.number)
            {
                Some(e) => self.resolve(gh, &Obj::Entry(r, e), f, path),
                None => Value::Null,
            },
            (Obj::Repo(r), "ref") => {
                let name = self.arg(f, "qualifiedName");
                let Some(name) = name.as_str() else {
                    return self.missing_arguments(f, path, "qualifiedName");
                };
                match qualified_branch(r, name) {
                    Some(branch) => self.resolve(gh, &Obj::Ref(r, branch), f, path),
                    None => Value::Null,
                }
            }
            (Obj::Repo(r), "label") => {
                let name = self.arg(f, "name");
                let Some(name) = name.as_str() else {
                    return self.missing_arguments(f, path, "name");
                };
                // GitHub matches a label's name case-insensitively.
                match r.label_named(name) {
                    Some(label) => self.resolve(gh, &Obj::Static(label_json(r, label)), f, path),
                    None => Value::Null,
                }
            }
            (Obj::Repo(r), "defaultBranchRef") => {
                let branch = r.git.default_branch();
                match r.git.branch_head(branch) {
                    Some(_) => self.resolve(gh, &Obj::Ref(r, branch.to_string()), f, path),
                    None => Value::Null,
                }
            }
            (Obj::Repo(r), "object") => {
                let oid = self.arg(f, "oid");
                let expression = self.arg(f, "expression");
                match git_object(r, oid.as_str(), expression.as_str()) {
                    Some(commit) => self.resolve(gh, &Obj::Commit(r, commit), f, path),
                    None => Value::Null,
                }
            }
            (Obj::Ref(r, branch), "target") => {
                match r.git.branch_head(branch).and_then(|sha| r.git.commit(sha)) {
                    Some(commit) => self.resolve(gh, &Obj::Commit(r, commit), f, path),
                    None => Value::Null,
                }
            }
            (Obj::Commit(r, commit), "tree") => {
                let tree = tree_object(r, &model::tree_sha(&commit.tree));
                self.resolve(gh, &Obj::Static(tree), f, path)
            }
            (Obj::Commit(_, commit), "file") => {
                let file = self.arg(f, "path");
                let Some(file) = file.as_str() else {
                    return self.missing_arguments(f, path, "path");
                };
                match tree_entry(&commit.tree, file) {
                    Some(entry) => self.resolve(gh, &Obj::Static(entry), f, path),
                    None => Value::Null,
                }
            }
            (Obj::Pr(r, _), "repository")
            | (Obj::Queue(r, _), "repository")
            | (Obj::Ref(r, _), "repository")
            | (Obj::Commit(r, _), "repository") => self.resolve(gh, &Obj::Repo(r), f, path),
            (Obj::Pr(_, pr), "reviewThreads") => {
                let items: Vec<Obj> = pr
                    .threads
                    .iter()
                    .map(|t| {
                        Obj::Static(json!({
                            "__typename": "PullRequestReviewThread",
                            "id": t.id,
                            "isResolved": t.is_resolved,
                            "isOutdated": false,
                            "isCollapsed": t.is_resolved,
                            "path": t.path,
                            "line": t.line,
                            "comments": empty_connection("PullRequestReviewCommentConnection"),
                        }))
                    })
                    .collect();
                self.connection(gh, "PullRequestReviewThreadConnection", items, f, path)
            }
            (Obj::Pr(r, pr), "reviews") => {
                let states = self.arg(f, "states");
                let states: Vec<String> = match states {
                    Value::Array(a) => a
                        .iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect(),
                    Value::String(s) => vec![s],
                    _ => Vec::new(),
                };
                let items: Vec<Obj> = pr
                    .reviews
                    .iter()
                    .filter(|rv| states.is_empty() || states.contains(&rv.state))
                    .map(|rv| {
                        Obj::Static(json!({
                            "__typename": "PullRequestReview",
                            "id": rv.node_id,
                            "databaseId": rv.id,
                            "state": rv.state,
                            "body": rv.body,
                            "submittedAt": ts(rv.submitted_at),
                            "author": actor(&rv.user),
                            "authorAssociation": r.author_association(&rv.user),
                            "commit": { "__typename": "Commit", "oid": rv.commit_id },
                        }))
                    })
                    .collect();
                self.connection(gh, "PullRequestReviewConnection", items, f, path)
            }
            (Obj::Pr(r, pr), "labels") => {
                let items: Vec<Obj> = pr
                    .labels
                    .iter()
                    .map(|l| Obj::Static(label_json(r, l)))
                    .collect();
                self.connection(gh, "LabelConnection", items, f, path)
            }
            (Obj::Pr(r, pr), "commits") => {
                let base = r.git.branch_head(&pr.base_ref).unwrap_or_default();
                let items: Vec<Obj> = r
                    .git
                    .commits_between(base, &pr.head_sha)
                    .iter()
                    .map(|c| {
                        Obj::Static(json!({
                            "__typename": "PullRequestCommit",
                            "id": format!("PRC_{}", &c.sha[..12.min(c.sha.len())]),
                            "commit": commit_json(r, &c.sha),
                        }))
                    })
                    .collect();
                self.connection(gh, "PullRequestCommitConnection", items, f, path)
            }
            (Obj::Pr(r, pr), "statusCheckRollup") => match r.rollup(&pr.head_sha) {
                Some(_) => self.resolve(gh, &Obj::Rollup(r, pr.head_sha.clone()), f, path),
                None => Value::Null,
            },
            (Obj::Rollup(r, sha), "contexts") => {
                // As GitHub lists them: the latest check run per name, then the latest
                // status per context.
                let mut items: Vec<Obj> = r
                    .latest_runs(sha)
                    .into_iter()
                    .map(|run| Obj::Static(check_run_context(&self.ctx, r, run)))
                    .collect();
                items.extend(
                    r.latest_statuses(sha)
                        .into_iter()
                        .map(|status| Obj::Static(status_context(status))),
                );
                self.connection(gh, "StatusCheckRollupContextConnection", items, f, path)
            }
            (Obj::Entry(r, e), "pullRequest") => match r.pulls.get(&e.pr) {
                Some(pr) => self.resolve(gh, &Obj::Pr(r, pr), f, path),
                None => Value::Null,
            },
            (Obj::Queue(r, branch), "entries") => {
                let items: Vec<Obj> = r
                    .queue
                    .iter()
                    .filter(|e| &e.base_ref == branch)
                    .map(|e| Obj::Entry(r, e))
                    .collect();
                self.connection(gh, "MergeQueueEntryConnection", items, f, path)
            }
            (Obj::Payload(_, _, fields), name) if fields.iter().any(|(n, _)| *n == name) => {
                match fields.iter().find(|(n, _)| *n == name) {
                    Some((_, Some(obj))) => self.resolve(gh, obj, f, path),
                    _ => Value::Null,
                }
            }
            _ => self.project(gh, stat, f, path, &type_of(obj)),
        }
    }

    /// Reads a field from a JSON object (nested objects resolved recursively).
    fn project(
        &mut self,
        gh: &GithubState,
        stat: &Value,
        f: &Field,
        path: &[String],
        type_name: &str,
    ) -> Value {
        let Some(v) = stat.get(&f.name) else {
            return self.undefined(type_name, f, path);
        };
        match v {
            // A null object (`mergeCommit` of an open pull request, `headRef` of a deleted
            // branch) is null whatever its selection.
            Value::Null if !f.selection.is_empty() => Value::Null,
            Value::Object(_) => {
                if v.get("nodes").is_some() {
                    let items: Vec<Obj> = v["nodes"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .map(Obj::Static)
                        .collect();
                    let tn = v["__typename"].as_str().unwrap_or("Connection").to_string();
                    return self.connection(gh, &tn, items, f, path);
                }
                self.resolve(gh, &Obj::Static(v.clone()), f, path)
            }
            Value::Array(items) if items.iter().all(Value::is_object) && !items.is_empty() => {
                let mut sub = path.to_vec();
                sub.push(f.response_key().to_string());
                Value::Array(
                    items
                        .iter()
                        .map(|i| self.resolve(gh, &Obj::Static(i.clone()), f, path))
                        .collect(),
                )
            }
            scalar => {
                if !f.selection.is_empty() {
                    self.invalid = true;
                    self.errors.push(json!({
                        "path": path_json(path, f.response_key()),
                        "extensions": { "code": "selectionMismatch", "typeName": type_name },
                        "locations": [{ "line": f.line, "column": f.column }],
                        "message": format!(
                            "Selections can't be made on scalars (field '{}' returns a scalar but has selections)",
                            f.name
                        ),
                    }));
                    return Value::Null;
                }
                scalar.clone()
            }
        }
    }

    /// A connection over `items` honouring `first` / `last`.
    fn connection(
        &mut self,
        gh: &GithubState,
        type_name: &str,
        items: Vec<Obj<'_>>,
        f: &Field,
        path: &[String],
    ) -> Value {
        let first = self.arg(f, "first").as_u64();
        let last = self.arg(f, "last").as_u64();
        if first.is_none() && last.is_none() && type_name != "Connection" {
            let name = &f.name;
            return self.exec_error(
                "MISSING_PAGINATION_BOUNDARIES",
                format!("You must provide a `first` or `last` value to properly paginate the `{name}` connection."),
                f,
                path,
            );
        }
        if first.is_some_and(|n| n > 100) || last.is_some_and(|n| n > 100) {
            let name = &f.name;
            return self.exec_error(
                "EXCESSIVE_PAGINATION",
                format!("Requesting {} records on the `{name}` connection exceeds the `first` limit of 100 records.", first.or(last).unwrap_or(0)),
                f,
                path,
            );
        }
        let total = items.len();
        // `after` / `before` narrow the window first, then `first` keeps its start and `last`
        // its end (both may be given, as GitHub allows).
        let mut window = (0, total);
        let mut cursors = (false, false);
        for (name, is_after) in [("after", true), ("before", false)] {
            let value = self.arg(f, name);
            let Some(text) = value.as_str() else {
                continue;
            };
            let Some(index) = cursor_index(text) else {
                return self.exec_error(
                    "INVALID_CURSOR_ARGUMENTS",
                    format!("`{text}` does not appear to be a valid cursor."),
                    f,
                    path,
                );
            };
            if is_after {
                cursors.0 = true;
                window.0 = window.0.max((index + 1).min(total));
            } else {
                cursors.1 = true;
                window.1 = window.1.min(index);
            }
        }
        let (mut start, mut end) = (window.0, window.1.max(window.0));
        if let Some(n) = first {
            end = end.min(start + n as usize);
        }
        if let Some(n) = last {
            start = start.max(end.saturating_sub(n as usize));
        }
        if f.selection.is_empty() {
            return self.resolve(
                gh,
                &Obj::Static(json!({ "__typename": type_name })),
                f,
                path,
            );
        }
        let mut sub = path.to_vec();
        sub.push(f.response_key().to_string());
        let fields = self.collect(&f.selection, type_name);
        let mut out = Map::new();
        for sf in fields {
            let v = match sf.name.as_str() {
                "__typename" => json!(type_name),
                "totalCount" => json!(total),
                "nodes" => {
                    let mut vals = Vec::new();
                    for item in &items[start..end] {
                        vals.push(self.resolve(gh, item, &sf, &sub));
                    }
                    Value::Array(vals)
                }
                "edges" => {
                    let mut vals = Vec::new();
                    for (i, item) in items[start..end].iter().enumerate() {
                        let cursor = cursor(start + i);
                        let efields = self.collect(&sf.selection, "Edge");
                        let mut e = Map::new();
                        for ef in efields {
                            let v = match ef.name.as_str() {
                                "node" => {
                                    let mut epath = sub.clone();
                                    epath.push(sf.response_key().to_string());
                                    self.resolve(gh, item, &ef, &epath)
                                }
                                "cursor" => json!(cursor),
                                "__typename" => json!("Edge"),
                                _ => self.undefined("Edge", &ef, &sub),
                            };
                            e.insert(ef.response_key().to_string(), v);
                        }
                        vals.push(Value::Object(e));
                    }
                    Value::Array(vals)
                }
                "pageInfo" => {
                    // As GitHub (graphql-ruby) answers: a `before` cursor means a next page,
                    // an `after` cursor a previous one; otherwise `first` tells whether items
                    // follow the page and `last` whether items precede it.
                    let has_next = cursors.1 || (first.is_some() && end < window.1);
                    let has_previous = cursors.0 || (last.is_some() && start > window.0);
                    let info = json!({
                        "__typename": "PageInfo",
                        "hasNextPage": has_next,
                        "hasPreviousPage": has_previous,
                        "startCursor": if start < end { json!(cursor(start)) } else { Value::Null },
                        "endCursor": if start < end { json!(cursor(end - 1)) } else { Value::Null },
                    });
                    self.resolve(gh, &Obj::Static(info), &sf, &sub)
                }
                _ => self.undefined(type_name, &sf, &sub),
            };
            out.insert(sf.response_key().to_string(), v);
        }
        Value::Object(out)
    }
}

fn cursor(i: usize) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("cursor:v2:{i}"))
}

/// The index a [`cursor`] stands for; `None` when the text is no cursor of ours.
fn cursor_index(text: &str) -> Option<usize> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    String::from_utf8(bytes)
        .ok()?
        .strip_prefix("cursor:v2:")?
        .parse()
        .ok()
}

fn empty_connection(type_name: &str) -> Value {
    json!({ "__typename": type_name, "totalCount": 0, "nodes": [] })
}

fn type_of(obj: &Obj<'_>) -> String {
    match obj {
        Obj::Repo(_) => "Repository".into(),
        Obj::Pr(..) => "PullRequest".into(),
        Obj::Entry(..) => "MergeQueueEntry".into(),
        Obj::Queue(..) => "MergeQueue".into(),
        Obj::Rollup(..) => "StatusCheckRollup".into(),
        Obj::Ref(..) => "Ref".into(),
        Obj::Commit(..) => "Commit".into(),
        Obj::Payload(t, ..) => (*t).into(),
        Obj::Static(v) => v["__typename"].as_str().unwrap_or("Object").to_string(),
    }
}

fn actor(login: &str) -> Value {
    let id = user_id(login);
    json!({
        "__typename": if login.ends_with("[bot]") { "Bot" } else { "User" },
        "login": login,
        "id": format!("U_kgDO{id}"),
        "databaseId": id,
        "name": login,
        "url": format!("https://github.com/{login}"),
        "avatarUrl": format!("https://avatars.githubusercontent.com/u/{id}"),
    })
}

fn gql_state(pr: &PullRequest) -> &'static str {
    if pr.merged {
        "MERGED"
    } else if pr.open {
        "OPEN"
    } else {
        "CLOSED"
    }
}

/// A commit's leaf fields (`null` message and dates for a sha the repository does not hold).
fn commit_json(r: &GhRepo, sha: &str) -> Value {
    let rollup = r
        .rollup(sha)
        .map(|s| json!({ "__typename": "StatusCheckRollup", "state": s }));
    let c = r.git.commit(sha);
    json!({
        "__typename": "Commit",
        "id": format!("C_kwDO{}", &sha[..12.min(sha.len())]),
        "oid": sha,
        "abbreviatedOid": &sha[..7.min(sha.len())],
        "message": c.map(|c| c.message.clone()),
        "messageHeadline": c.map(|c| c.title().to_string()),
        "committedDate": c.map(|c| ts(c.created_at)),
        "statusCheckRollup": rollup,
    })
}

/// The branch `Repository.ref(qualifiedName:)` names. As GitHub does, a fully qualified name
/// (`refs/heads/main`) is checked before a short one (`main`); the simulator has branches only
/// (no tags), so anything else is no ref.
fn qualified_branch(r: &GhRepo, name: &str) -> Option<String> {
    let exists = |branch: &&str| r.git.branch_head(branch).is_some();
    name.strip_prefix("refs/heads/")
        .filter(exists)
        .or_else(|| Some(name).filter(exists))
        .map(str::to_string)
}

/// The git object `Repository.object(oid:, expression:)` names: the commit with that full
/// `oid`, else the commit the `expression` (a branch, `refs/heads/<branch>`, or a full or
/// abbreviated commit sha) resolves to. Only commits are answered; anything else is `None`.
fn git_object<'a>(
    r: &'a GhRepo,
    oid: Option<&str>,
    expression: Option<&str>,
) -> Option<&'a Commit> {
    if let Some(oid) = oid {
        return r.git.commit(oid);
    }
    let expression = expression?;
    r.git.resolve(expression).or_else(|| {
        let branch = expression.strip_prefix("refs/heads/")?;
        r.git.commit(r.git.branch_head(branch)?)
    })
}

/// A `Tree` git object's leaf fields, by its sha (the sha the REST git data API uses).
fn tree_object(r: &GhRepo, sha: &str) -> Value {
    json!({
        "__typename": "Tree",
        "id": model::node_id("TR", &format!("{}:{sha}", r.id)),
        "oid": sha,
        "abbreviatedOid": &sha[..7.min(sha.len())],
    })
}

/// GitHub's GraphQL `TreeEntry.mode` of a regular file: git's `100644` as a number (33188).
const MODE_FILE: u32 = 0o100644;
/// `TreeEntry.mode` of an executable file: git's `100755` (33261).
const MODE_EXECUTABLE: u32 = 0o100755;
/// `TreeEntry.mode` of a directory: git's `040000` (16384).
const MODE_DIRECTORY: u32 = 0o40000;

/// The `TreeEntry` at `path` in a flat tree, as `Commit.file(path:)` answers it: the file there,
/// else the directory there (some file lies under `path/`), else `None`. An empty path, or one
/// starting or ending with `/`, is no entry. A directory's `oid` is its subtree's sha, the one a
/// REST tree listing gives it.
fn tree_entry(tree: &Tree, path: &str) -> Option<Value> {
    use base64::Engine as _;
    if path.is_empty() || path.starts_with('/') || path.ends_with('/') {
        return None;
    }
    let (kind, mode, oid, size) = match tree.get(path) {
        Some(file) => {
            let mode = if file.executable {
                MODE_EXECUTABLE
            } else {
                MODE_FILE
            };
            ("blob", mode, file.blob_id(), file.content.len())
        }
        None => {
            let sub = model::subtree(tree, path);
            if sub.is_empty() {
                return None;
            }
            ("tree", MODE_DIRECTORY, model::tree_sha(&sub), 0)
        }
    };
    let name = path.rsplit('/').next().unwrap_or(path);
    let b64 = base64::engine::general_purpose::STANDARD;
    Some(json!({
        "__typename": "TreeEntry",
        "name": name,
        "nameRaw": b64.encode(name),
        "path": path,
        "pathRaw": b64.encode(path),
        "mode": mode,
        "type": kind,
        "oid": oid,
        "size": size,
        "extension": extension(name),
        "isGenerated": false,
        "submodule": Value::Null,
    }))
}

/// A file name's extension as GitHub's `TreeEntry.extension` gives it (Ruby's `File.extname`):
/// from the last `.` that is not leading (`.rs` of `main.rs`, `.yml` of `.ci.yml`); `None` for
/// `Makefile` or `.gitignore`.
fn extension(name: &str) -> Option<&str> {
    let stem = name.trim_start_matches('.');
    stem.rfind('.').map(|dot| &stem[dot..])
}

/// A check run as a `StatusCheckRollupContext` (`CheckRun`): GitHub's GraphQL spells its
/// status and conclusion upper-case.
fn check_run_context(ctx: &Ctx, r: &GhRepo, run: &model::CheckRun) -> Value {
    json!({
        "__typename": "CheckRun",
        "id": model::node_id("CR", &run.id.to_string()),
        "databaseId": run.id,
        "name": run.name,
        "status": run.status.to_ascii_uppercase(),
        "conclusion": run.conclusion.map(str::to_ascii_uppercase),
        "startedAt": ts(run.started_at),
        "completedAt": ts_opt(run.completed_at),
        "detailsUrl": format!("{}/{}/runs/{}", ctx.base_url, r.full_name(), run.id),
        "isRequired": false,
    })
}

/// A commit status as a `StatusCheckRollupContext` (`StatusContext`).
fn status_context(status: &model::CommitStatus) -> Value {
    json!({
        "__typename": "StatusContext",
        "id": model::node_id("SC", &status.id.to_string()),
        "context": status.context,
        "state": status.state.to_ascii_uppercase(),
        "description": status.description,
        "targetUrl": status.target_url,
        "createdAt": ts(status.created_at),
        "isRequired": false,
    })
}

/// The queue entry's leaf fields.
fn entry_json(r: &GhRepo, e: &QueueEntry, position: usize) -> Value {
    let eta = r
        .settings
        .queue_eta_seconds_per_entry
        .map(|s| s * position as u64);
    json!({
        "__typename": "MergeQueueEntry",
        "id": e.id,
        "state": e.state.as_graphql(),
        "position": position,
        "estimatedTimeToMerge": eta,
        "enqueuedAt": ts(e.enqueued_at),
        "headCommit": { "__typename": "Commit", "oid": e.head_sha },
        "baseCommit": e.group.as_ref().map(|g| json!({ "__typename": "Commit", "oid": g.base_sha })),
        "solo": false,
        "jump": false,
        "enqueuer": actor("workqueue"),
    })
}

/// The leaf (argument-less) fields of an object.
fn static_json(ctx: &Ctx, obj: &Obj<'_>) -> Value {
    match obj {
        Obj::Static(v) => v.clone(),
        Obj::Payload(t, cmid, _) => json!({ "__typename": t, "clientMutationId": cmid }),
        Obj::Repo(r) => {
            let full = r.full_name();
            json!({
                "__typename": "Repository",
                "id": r.node_id,
                "databaseId": r.id,
                "name": r.name,
                "nameWithOwner": full,
                "url": format!("{}/{full}", ctx.base_url),
                "owner": actor(&r.owner),
                "isPrivate": false,
                "isArchived": false,
                "mergeCommitAllowed": true,
                "squashMergeAllowed": true,
                "rebaseMergeAllowed": true,
            })
        }
        Obj::Queue(r, branch) => {
            let first = r.queue.iter().filter(|e| &e.base_ref == branch).count();
            json!({
                "__typename": "MergeQueue",
                "id": model::node_id("MQ", &format!("{}:{branch}", r.id)),
                "url": format!("{}/{}/queue/{branch}", ctx.base_url, r.full_name()),
                "nextEntryEstimatedTimeToMerge": r.settings.queue_eta_seconds_per_entry.map(|s| s * (first as u64 + 1)),
                "configuration": {
                    "__typename": "MergeQueueConfiguration",
                    "mergeMethod": r.settings.queue_merge_method.to_ascii_uppercase(),
                    "mergingStrategy": "ALLGREEN",
                    "maximumEntriesToBuild": 1,
                    "maximumEntriesToMerge": 1,
                    "minimumEntriesToMerge": 1,
                    "minimumEntriesToMergeWaitTime": 0,
                    "checkResponseTimeout": 3600,
                },
            })
        }
        Obj::Entry(r, e) => {
            let pos = r.queue_position(e.pr).map(|(p, _)| p).unwrap_or(1);
            entry_json(r, e, pos)
        }
        Obj::Ref(r, branch) => json!({
            "__typename": "Ref",
            "id": ref_node_id(r, branch),
            "name": branch,
            "prefix": "refs/heads/",
        }),
        Obj::Commit(r, commit) => {
            let sha = &commit.sha;
            let path = format!("/{}/commit/{sha}", r.full_name());
            let tree_path = format!("/{}/tree/{sha}", r.full_name());
            let mut v = commit_json(r, sha);
            v["authoredDate"] = json!(ts(commit.created_at));
            v["url"] = json!(format!("{}{path}", ctx.base_url));
            v["commitUrl"] = v["url"].clone();
            v["resourcePath"] = json!(path);
            v["commitResourcePath"] = json!(path);
            v["treeUrl"] = json!(format!("{}{tree_path}", ctx.base_url));
            v["treeResourcePath"] = json!(tree_path);
            v
        }
        Obj::Rollup(r, sha) => json!({
            "__typename": "StatusCheckRollup",
            "id": model::node_id("SCR", sha),
            "state": r.rollup(sha),
            "commit": commit_json(r, sha),
        }),
        Obj::Pr(r, pr) => {
            let full = r.full_name();
            let base_sha = r
                .git
                .branch_head(&pr.base_ref)
                .unwrap_or_default()
                .to_string();
            let (_, additions, deletions, changed) = r.pr_stats(pr);
            let rollup = r
                .rollup(&pr.head_sha)
                .map(|s| json!({ "__typename": "StatusCheckRollup", "state": s }));
            json!({
                "__typename": "PullRequest",
                "id": pr.node_id,
                "databaseId": pr.id,
                "number": pr.number,
                "title": pr.title,
                "body": pr.body.clone().unwrap_or_default(),
                "url": format!("{}/{full}/pull/{}", ctx.base_url, pr.number),
                "permalink": format!("{}/{full}/pull/{}", ctx.base_url, pr.number),
                "state": gql_state(pr),
                "merged": pr.merged,
                "mergedAt": ts_opt(pr.merged_at),
                "closed": !pr.open,
                "closedAt": ts_opt(pr.closed_at),
                "createdAt": ts(pr.created_at),
                "updatedAt": ts(pr.updated_at),
                "isDraft": pr.draft,
                "locked": false,
                "headRefName": pr.head_ref,
                "headRefOid": pr.head_sha,
                "baseRefName": pr.base_ref,
                "baseRefOid": base_sha,
                "headRef": if r.git.branch_head(&pr.head_ref).is_some() {
                    json!({ "__typename": "Ref", "name": pr.head_ref, "target": commit_json(r, &pr.head_sha) })
                } else { Value::Null },
                "baseRef": { "__typename": "Ref", "name": pr.base_ref, "target": commit_json(r, &base_sha) },
                "mergeable": pr.graphql_mergeable(),
                "mergeStateStatus": r.merge_state_status(pr),
                "reviewDecision": r.review_decision(pr),
                "isInMergeQueue": r.queue.iter().any(|e| e.pr == pr.number),
                "isMergeQueueEnabled": r.queue_enabled_for(&pr.base_ref),
                "author": actor(&pr.user),
                "mergedBy": pr.merged_by.as_deref().map(actor),
                "mergeCommit": pr.merge_commit_sha.as_deref().map(|s| commit_json(r, s)),
                "statusCheckRollup": rollup,
                "autoMergeRequest": Value::Null,
                "additions": additions,
                "deletions": deletions,
                "changedFiles": changed,
            })
        }
    }
}

/// Finds a pull request by node id: (repo key, number).
fn find_pr(gh: &GithubState, id: &str) -> Option<(String, u64)> {
    gh.repos.iter().find_map(|(k, r)| {
        r.pulls
            .values()
            .find(|p| p.node_id == id)
            .map(|p| (k.clone(), p.number))
    })
}

/// The string `key` of a mutation's input (empty when absent).
fn input_text<'a>(input: &'a Value, key: &str) -> &'a str {
    input.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// Label `name` of repository `r` as GraphQL's `Label`.
fn label_json(r: &GhRepo, name: &str) -> Value {
    let label = r.labels.get(name).cloned().unwrap_or_default();
    json!({ "__typename": "Label", "id": label_node_id(name), "name": name, "color": label.color, "description": label.description })
}

/// A branch's `Ref` node id.
fn ref_node_id(r: &GhRepo, branch: &str) -> String {
    model::node_id("REF", &format!("{}:refs/heads/{branch}", r.id))
}

/// Finds a branch by its `Ref` node id: (repo key, branch).
fn find_ref(gh: &GithubState, id: &str) -> Option<(String, String)> {
    gh.repos.iter().find_map(|(k, r)| {
        r.git
            .branches()
            .find(|(name, _)| ref_node_id(r, name) == id)
            .map(|(name, _)| (k.clone(), name.clone()))
    })
}

/// A branch name `createRef` takes (as the REST `POST git/refs` checks it).
fn valid_branch_name(branch: &str) -> bool {
    !branch.is_empty() && !branch.contains("..") && !branch.ends_with('/') && !branch.contains(' ')
}

fn find_node<'a>(gh: &'a GithubState, id: &str) -> Option<Obj<'a>> {
    for r in gh.repos.values() {
        if r.node_id == id {
            return Some(Obj::Repo(r));
        }
        if let Some((name, _)) = r
            .git
            .branches()
            .find(|(name, _)| ref_node_id(r, name) == id)
        {
            return Some(Obj::Ref(r, name.clone()));
        }
        if let Some(p) = r.pulls.values().find(|p| p.node_id == id) {
            return Some(Obj::Pr(r, p));
        }
        if let Some(e) = r.queue.iter().find(|e| e.id == id) {
            return Some(Obj::Entry(r, e));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::github::model::RepoSettings;
    use crate::repo::FileEntry;

    fn ctx() -> Ctx {
        Ctx {
            now: time::OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000),
            base_url: "http://sim".into(),
            sender: "bot".into(),
        }
    }

    fn state_with_pr() -> GithubState {
        let mut gh = GithubState::default();
        let ctx = ctx();
        let settings = RepoSettings {
            merge_queue: true,
            ..RepoSettings::default()
        };
        ops::create_repo(&mut gh, &ctx, "o", "r", "main", settings).unwrap();
        let (r, env) = gh.repo_env("o", "r").unwrap();
        let main = r.git.branch_head("main").unwrap().to_string();
        let tree = r.git.commit(&main).unwrap().tree.clone();
        let mut t = (*tree).clone();
        t.insert("f.txt".into(), crate::repo::FileEntry::new("x"));
        let sha = r
            .git
            .create_commit(vec![main], std::sync::Arc::new(t), "c", "a", "a@x", ctx.now);
        ops::set_branch(r, env, &ctx, "feature", Some(&sha));
        ops::open_pr(r, env, &ctx, "T", "feature", "main", None, false).unwrap();
        gh
    }

    fn run(gh: &mut GithubState, q: &str, vars: Value) -> Value {
        let doc = gql::parse(q).unwrap();
        let Value::Object(vars) = vars else {
            panic!("object vars")
        };
        execute(gh, &ctx(), &doc, None, vars)
    }

    #[test]
    fn batched_aliases_variables_and_queue_entry() {
        let mut gh = state_with_pr();
        let q = r#"query($n: Int!) { repository(owner: "o", name: "r") {
            a: pullRequest(number: $n) { number state mergeQueueEntry { state } }
            b: pullRequest(number: 1) { __typename headRefName } } }"#;
        let out = run(&mut gh, q, json!({ "n": 1 }));
        assert_eq!(out["data"]["repository"]["a"]["state"], "OPEN");
        assert!(out["data"]["repository"]["a"]["mergeQueueEntry"].is_null());
        assert_eq!(out["data"]["repository"]["b"]["headRefName"], "feature");

        let id = gh.repo("o", "r").unwrap().pulls[&1].node_id.clone();
        let m = run(
            &mut gh,
            "mutation($id: ID!) { enqueuePullRequest(input: {pullRequestId: $id}) { mergeQueueEntry { state position } } }",
            json!({ "id": id }),
        );
        assert_eq!(
            m["data"]["enqueuePullRequest"]["mergeQueueEntry"],
            json!({ "state": "QUEUED", "position": 1 })
        );
        let out = run(&mut gh, q, json!({ "n": 1 }));
        assert_eq!(
            out["data"]["repository"]["a"]["mergeQueueEntry"]["state"],
            "QUEUED"
        );
    }

    /// A repository whose `main` holds `src/lib.rs`, `dir/a.txt`, `dir/sub/b.txt` and an
    /// executable `bin/run.sh`; returns the state and `main`'s head.
    fn state_with_tree() -> (GithubState, String) {
        let mut gh = state_with_pr();
        let ctx = ctx();
        let (r, env) = gh.repo_env("o", "r").unwrap();
        let main = r.git.branch_head("main").unwrap().to_string();
        let mut tree = (*r.git.commit(&main).unwrap().tree).clone();
        tree.insert("src/lib.rs".into(), FileEntry::new("pub fn f() {}\n"));
        tree.insert("dir/a.txt".into(), FileEntry::new("a"));
        tree.insert("dir/sub/b.txt".into(), FileEntry::new("b"));
        tree.insert(
            "bin/run.sh".into(),
            FileEntry {
                content: b"#!/bin/sh\n".to_vec(),
                executable: true,
            },
        );
        let sha = r.git.create_commit(
            vec![main],
            std::sync::Arc::new(tree),
            "tree",
            "a",
            "a@x",
            ctx.now,
        );
        ops::set_branch(r, env, &ctx, "main", Some(&sha));
        (gh, sha)
    }

    #[test]
    fn ref_target_tree_and_file_entries() {
        let (mut gh, head) = state_with_tree();
        let q = r#"query($p: String!) { repository(owner: "o", name: "r") {
            ref(qualifiedName: "refs/heads/main") {
              __typename id name prefix
              repository { name }
              target {
                __typename oid
                ... on Commit {
                  message
                  tree { __typename oid }
                  a: file(path: $p) { __typename name path mode type oid size extension isGenerated }
                  d: file(path: "dir") { name path type mode oid size extension }
                  nested: file(path: "dir/sub") { type oid }
                  x: file(path: "bin/run.sh") { mode type extension }
                  m: file(path: "missing") { oid }
                  lead: file(path: "/dir") { oid }
                  trail: file(path: "dir/") { oid }
                  empty: file(path: "") { oid }
                  partial: file(path: "di") { oid }
                  spread: file(path: "dir/a.txt") { ...entry }
                }
                ... on Tree { entries { name } }
              }
            } } }
            fragment entry on TreeEntry { type mode oid }"#;
        let out = run(&mut gh, q, json!({ "p": "src/lib.rs" }));
        assert!(out.get("errors").is_none(), "{out}");
        let r = gh.repo("o", "r").unwrap();
        let commit = r.git.commit(&head).unwrap();
        let reference = &out["data"]["repository"]["ref"];
        assert_eq!(reference["__typename"], "Ref");
        assert!(reference["id"].as_str().is_some_and(|id| !id.is_empty()));
        assert_eq!(reference["name"], "main");
        assert_eq!(reference["prefix"], "refs/heads/");
        assert_eq!(reference["repository"]["name"], "r");
        let target = &reference["target"];
        assert_eq!(target["__typename"], "Commit");
        assert_eq!(target["oid"], head.as_str());
        assert_eq!(target["message"], "tree");
        assert!(target.get("entries").is_none());

        // The commit's tree is the one the REST commit names.
        let rest = crate::github::json::commit(&ctx(), r, &head).unwrap();
        assert_eq!(target["tree"]["__typename"], "Tree");
        assert_eq!(target["tree"]["oid"], rest["commit"]["tree"]["sha"]);

        let lib = FileEntry::new("pub fn f() {}\n");
        assert_eq!(
            target["a"],
            json!({
                "__typename": "TreeEntry", "name": "lib.rs", "path": "src/lib.rs",
                "mode": 33188, "type": "blob", "oid": lib.blob_id(),
                "size": lib.content.len(), "extension": ".rs", "isGenerated": false,
            })
        );
        let dir = model::tree_sha(&model::subtree(&commit.tree, "dir"));
        assert_eq!(
            target["d"],
            json!({
                "name": "dir", "path": "dir", "type": "tree", "mode": 16384, "oid": dir,
                "size": 0, "extension": null,
            })
        );
        let sub = model::tree_sha(&model::subtree(&commit.tree, "dir/sub"));
        assert_eq!(target["nested"], json!({ "type": "tree", "oid": sub }));
        assert_eq!(
            target["x"],
            json!({ "mode": 33261, "type": "blob", "extension": ".sh" })
        );
        assert_eq!(
            target["spread"],
            json!({ "type": "blob", "mode": 33188, "oid": FileEntry::new("a").blob_id() })
        );
        for missing in ["m", "lead", "trail", "empty", "partial"] {
            assert!(target[missing].is_null(), "{missing}: {}", target[missing]);
        }
    }

    #[test]
    fn short_missing_and_default_refs_and_objects() {
        let (mut gh, head) = state_with_tree();
        let feature = gh
            .repo("o", "r")
            .unwrap()
            .git
            .branch_head("feature")
            .unwrap()
            .to_string();
        let q = r#"query($oid: GitObjectID, $sha: String) { repository(owner: "o", name: "r") {
            short: ref(qualifiedName: "feature") { name prefix target { oid } }
            missing: ref(qualifiedName: "refs/heads/nope") { name }
            tag: ref(qualifiedName: "refs/tags/v1") { name }
            heads: ref(qualifiedName: "heads/main") { name }
            defaultBranchRef { name target { ... on Commit { file(path: "dir/a.txt") { size } } } }
            byOid: object(oid: $oid) { __typename oid ... on Commit { file(path: "f.txt") { type } } }
            byBranch: object(expression: "main") { oid }
            bySha: object(expression: $sha) { oid }
            byShort: object(expression: "refs/heads/feature") { oid }
            unknownOid: object(oid: "0000000000000000000000000000000000000000") { oid }
            unknownExpression: object(expression: "nope") { oid }
          } }"#;
        let out = run(&mut gh, q, json!({ "oid": feature, "sha": &feature[..10] }));
        assert!(out.get("errors").is_none(), "{out}");
        let repo = &out["data"]["repository"];
        assert_eq!(
            repo["short"],
            json!({ "name": "feature", "prefix": "refs/heads/", "target": { "oid": feature } })
        );
        for missing in ["missing", "tag", "heads", "unknownOid", "unknownExpression"] {
            assert!(repo[missing].is_null(), "{missing}: {}", repo[missing]);
        }
        assert_eq!(
            repo["defaultBranchRef"],
            json!({ "name": "main", "target": { "file": { "size": 1 } } })
        );
        assert_eq!(
            repo["byOid"],
            json!({ "__typename": "Commit", "oid": feature, "file": { "type": "blob" } })
        );
        assert_eq!(repo["byBranch"]["oid"], head.as_str());
        assert_eq!(repo["bySha"]["oid"], feature.as_str());
        assert_eq!(repo["byShort"]["oid"], feature.as_str());

        // A required argument left out is an error on the field.
        let out = run(
            &mut gh,
            r#"{ repository(owner: "o", name: "r") { ref { name } } }"#,
            json!({}),
        );
        assert!(out["data"]["repository"]["ref"].is_null());
        assert_eq!(out["errors"][0]["type"], "ARGUMENT_ERROR");
    }

    #[test]
    fn unknown_fields_on_git_objects_are_validation_errors() {
        let (mut gh, _) = state_with_tree();
        for (selection, type_name) in [
            ("nope", "Ref"),
            ("target { nope }", "Commit"),
            ("target { ... on Commit { tree { nope } } }", "Tree"),
            (
                r#"target { ... on Commit { file(path: "dir") { nope } } }"#,
                "TreeEntry",
            ),
        ] {
            let q = format!(
                r#"{{ repository(owner: "o", name: "r") {{ ref(qualifiedName: "main") {{ {selection} }} }} }}"#
            );
            let out = run(&mut gh, &q, json!({}));
            assert!(out.get("data").is_none(), "{out}");
            assert_eq!(
                out["errors"][0]["extensions"]["typeName"], type_name,
                "{out}"
            );
            assert_eq!(out["errors"][0]["extensions"]["fieldName"], "nope");
        }
    }

    #[test]
    fn unknown_fields_are_validation_errors() {
        let mut gh = state_with_pr();
        let out = run(
            &mut gh,
            r#"{ repository(owner: "o", name: "r") { nope } }"#,
            json!({}),
        );
        assert!(out.get("data").is_none());
        assert_eq!(out["errors"][0]["extensions"]["typeName"], "Repository");
        let out = run(
            &mut gh,
            r#"{ repository(owner: "o", name: "r") { pullRequest(number: 1) { number { x } } } }"#,
            json!({}),
        );
        assert!(
            out["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("scalars")
        );
        let out = run(
            &mut gh,
            r#"{ repository(owner: "o", name: "r") { owner } }"#,
            json!({}),
        );
        assert!(
            out["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("must have selections")
        );
        assert_ne!(cursor(0), cursor(1));
    }
}
