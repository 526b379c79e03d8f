//! The client itself: construction, settings, and the reads of the
//! token's user, a repository and its branches.

use std::fmt;
use std::time::Duration;

use reqwest::Method;

use super::http::{Call, Http, Repo};
use super::merge::{MERGE_BUDGET, MERGE_POLL_INTERVAL};
use super::wire;
use crate::config::{ForgeConfig, ForgeKind};
use crate::error::{ForgeErrorKind, ForgeResult};
use crate::model::SourceBranch;

/// A GitHub (or GitHub Enterprise) instance.
pub struct GithubClient {
    pub(super) http: Http,
    pub(super) webhook_secret: Option<String>,
    pub(super) merge_poll_interval: Duration,
    pub(super) merge_budget: Duration,
    /// The token's user, read once.
    user: tokio::sync::OnceCell<crate::ForgeUser>,
    /// The tree of each commit this client made or read, by repository and
    /// commit sha (a commit's tree never changes).
    commit_trees: std::sync::Mutex<std::collections::HashMap<(String, String), String>>,
    /// The node id of each pull request this client created, by repository
    /// and number, until its first note ([`GithubClient::open_note`]).
    created: std::sync::Mutex<std::collections::HashMap<(String, u64), String>>,
    /// Label node ids by repository and lower-case name, as GitHub
    /// answered them (a label deleted since is an error, and forgotten).
    label_ids: std::sync::Mutex<
        std::collections::HashMap<String, std::collections::HashMap<String, String>>,
    >,
}

/// How many commits' trees a client keeps (all are dropped when full); as
/// many created pull requests' node ids.
const COMMIT_TREES: usize = 4096;

/// A cache's lock: a panic elsewhere cannot leave a cache invalid.
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl fmt::Debug for GithubClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GithubClient")
            .field("api", &self.http.base().as_str())
            .field("graphql", &self.http.graphql_url().as_str())
            .field("webhook_secret", &self.webhook_secret.as_ref().map(|_| "…"))
            .finish_non_exhaustive()
    }
}

impl GithubClient {
    /// A client for `config.url` (the REST base: `https://api.github.com`,
    /// GitHub Enterprise `https://host/api/v3`) with `config.token`. Errors
    /// name the field (`url`, `token`, `timeout_seconds`);
    /// `config.token_env` must already be resolved
    /// ([`ForgeConfig::resolve_secrets`]).
    pub fn new(config: &ForgeConfig) -> ForgeResult<Self> {
        let settings = config.client_settings(ForgeKind::Github)?;
        let http = Http::new(&config.url, settings.token, settings.timeout)?;
        Ok(Self {
            http,
            webhook_secret: settings.webhook_secret,
            merge_poll_interval: MERGE_POLL_INTERVAL,
            merge_budget: MERGE_BUDGET,
            user: tokio::sync::OnceCell::new(),
            commit_trees: std::sync::Mutex::default(),
            created: std::sync::Mutex::default(),
            label_ids: std::sync::Mutex::default(),
        })
    }

    /// The tree of commit `sha` of `repo`, when this client made or read it.
    pub(super) fn known_tree(&self, repo: &str, sha: &str) -> Option<String> {
        self.lock_trees()
            .get(&(repo.to_ascii_lowercase(), sha.to_ascii_lowercase()))
            .cloned()
    }

    /// Keeps the tree of commit `sha` of `repo`.
    pub(super) fn keep_tree(&self, repo: &str, sha: &str, tree: &str) {
        let mut trees = self.lock_trees();
        if trees.len() >= COMMIT_TREES {
            trees.clear();
        }
        trees.insert(
            (repo.to_ascii_lowercase(), sha.to_ascii_lowercase()),
            tree.to_owned(),
        );
    }

    /// Keeps the node id of pull request `number` of `repo`, just created.
    pub(super) fn keep_created(&self, repo: &str, number: u64, node_id: &str) {
        let mut created = lock(&self.created);
        if created.len() >= COMMIT_TREES {
            created.clear();
        }
        created.insert((repo.to_ascii_lowercase(), number), node_id.to_owned());
    }

    /// The node id of pull request `number` of `repo` when this client
    /// created it, taken: only its first note asks.
    pub(super) fn take_created(&self, repo: &str, number: u64) -> Option<String> {
        lock(&self.created).remove(&(repo.to_ascii_lowercase(), number))
    }

    /// The label node ids known for `repo`, by lower-case name.
    pub(super) fn known_label_ids(&self, repo: &str) -> std::collections::HashMap<String, String> {
        lock(&self.label_ids)
            .get(&repo.to_ascii_lowercase())
            .cloned()
            .unwrap_or_default()
    }

    /// Keeps label node ids of `repo` (`None` forgets them all).
    pub(super) fn keep_label_ids(&self, repo: &str, ids: Option<Vec<(String, String)>>) {
        let mut known = lock(&self.label_ids);
        match ids {
            Some(ids) => known
                .entry(repo.to_ascii_lowercase())
                .or_default()
                .extend(ids),
            None => {
                known.remove(&repo.to_ascii_lowercase());
            }
        }
    }

    fn lock_trees(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<(String, String), String>> {
        lock(&self.commit_trees)
    }

    /// Sets how `merge_change` follows a pending request: the wait between
    /// reads (never below [`MERGE_POLL_INTERVAL`]) and the total budget.
    pub fn with_merge_polling(mut self, interval: Duration, budget: Duration) -> Self {
        self.merge_poll_interval = interval.max(MERGE_POLL_INTERVAL);
        self.merge_budget = budget;
        self
    }

    /// (wait between pending reads, total budget) of `merge_change`.
    pub fn merge_polling(&self) -> (Duration, Duration) {
        (self.merge_poll_interval, self.merge_budget)
    }

    /// The REST base every request goes to.
    pub fn api_url(&self) -> &str {
        self.http.base().as_str()
    }

    /// The GraphQL endpoint.
    pub fn graphql_url(&self) -> &str {
        self.http.graphql_url().as_str()
    }

    /// `GET /user`, once: later calls answer from memory; a failed read is
    /// not kept, the next call asks again.
    pub(super) async fn current_user(&self) -> ForgeResult<crate::ForgeUser> {
        self.user
            .get_or_try_init(|| async {
                let user: wire::User = self
                    .http
                    .json(&Call::new(Method::GET, &["user"]), "a user")
                    .await?;
                Ok(crate::ForgeUser {
                    id: user.id,
                    username: user.login,
                })
            })
            .await
            .cloned()
    }

    /// `GET repos/{owner}/{repo}` → `full_name` (GitHub resolves the names
    /// case-insensitively).
    pub(super) async fn project_path(&self, project: &str) -> ForgeResult<String> {
        let repo = Repo::parse(project)?;
        let found: wire::Repository = self
            .http
            .json(&Call::repo(Method::GET, &repo, &[]), "a repository")
            .await?;
        Ok(found.full_name)
    }

    /// Classic protection (`protected` of an existing branch), else the
    /// rulesets that would apply to the name (see `ruleset_protects`; GitHub
    /// answers for branches that do not exist yet): any rule but the
    /// content-only ones ([`wire::BranchRule::protects`]) protects. A 404
    /// from the rules endpoint (a server without rulesets) means no rules;
    /// a missing repository is an error.
    pub(super) async fn branch_protected(&self, project: &str, branch: &str) -> ForgeResult<bool> {
        Ok(self.source_branch(project, branch).await?.protected)
    }

    /// The branch's head and protection: `GET branches/:branch` tells the
    /// head and the classic protection of a branch that exists, then the
    /// rulesets are read unless that said protected
    /// ([`GithubClient::branch_protected`]).
    pub(super) async fn source_branch(
        &self,
        project: &str,
        branch: &str,
    ) -> ForgeResult<SourceBranch> {
        let repo = Repo::parse(project)?;
        let call = Call::repo(Method::GET, &repo, &["branches"]).branch_path(branch);
        let head = match self.http.json::<wire::Branch>(&call, "a branch").await {
            Ok(found) if found.protected => {
                return Ok(SourceBranch {
                    head: Some(found.commit.sha),
                    protected: true,
                });
            }
            Ok(found) => Some(found.commit.sha),
            Err(error)
                if error.kind == ForgeErrorKind::NotFound
                    && error.message.contains("Branch not found") =>
            {
                None
            }
            Err(error) => return Err(error),
        };
        let protected = self.ruleset_protects(&repo, branch).await?;
        Ok(SourceBranch { head, protected })
    }

    /// Whether a branch about to be created is protected: its rulesets
    /// only (see [`crate::Forge::protects_new_branch`]).
    pub(super) async fn protects_new_branch(
        &self,
        project: &str,
        branch: &str,
    ) -> ForgeResult<bool> {
        let repo = Repo::parse(project)?;
        self.ruleset_protects(&repo, branch).await
    }

    /// Whether an active ruleset's rules other than content-only ones
    /// apply to the branch name. The repository's branch rulesets are
    /// listed first (`GET rulesets?targets=branch`, every page, which
    /// includes those of the organisation above it): a repository none of
    /// whose rulesets may apply to a branch
    /// ([`wire::RulesetSummary::may_apply_to_branches`]) protects no name,
    /// and that list is the same for every change, so after its first read
    /// it answers `304 Not Modified`, which GitHub does not count against
    /// the rate limit. Otherwise GitHub's own evaluation for the name
    /// decides (`GET rules/branches/:branch`, every page): names are never
    /// matched against patterns here. A 404 from the list leaves the
    /// decision to the rules endpoint, whose 404 is a server without
    /// rulesets.
    async fn ruleset_protects(&self, repo: &Repo<'_>, branch: &str) -> ForgeResult<bool> {
        let list = Call::repo(Method::GET, repo, &["rulesets"]).query("targets", "branch");
        match self
            .http
            .list::<wire::RulesetSummary>(list, "a list of rulesets")
            .await
        {
            Ok(rulesets)
                if !rulesets
                    .iter()
                    .any(wire::RulesetSummary::may_apply_to_branches) =>
            {
                return Ok(false);
            }
            Ok(_) => {}
            Err(error) if error.kind == ForgeErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        let call = Call::repo(Method::GET, repo, &["rules", "branches"]).branch_path(branch);
        match self
            .http
            .list::<wire::BranchRule>(call, "a list of branch rules")
            .await
        {
            Ok(rules) => Ok(rules.iter().any(wire::BranchRule::protects)),
            Err(error) if error.kind == ForgeErrorKind::NotFound => Ok(false),
            Err(error) => Err(error),
        }
    }

    pub(super) async fn branch_head(
        &self,
        project: &str,
        branch: &str,
    ) -> ForgeResult<Option<String>> {
        let repo = Repo::parse(project)?;
        Ok(self.branch(&repo, branch).await?.map(|commit| commit.sha))
    }

    /// The branch's head commit, `None` when GitHub says "Branch not found"
    /// (a missing repository is an error, not a missing branch).
    pub(super) async fn branch(
        &self,
        repo: &Repo<'_>,
        branch: &str,
    ) -> ForgeResult<Option<wire::Commit>> {
        let call = Call::repo(Method::GET, repo, &["branches"]).branch_path(branch);
        match self.http.json::<wire::Branch>(&call, "a branch").await {
            Ok(found) => Ok(Some(found.commit)),
            Err(error)
                if error.kind == ForgeErrorKind::NotFound
                    && error.message.contains("Branch not found") =>
            {
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_name_the_field() {
        let mut config = ForgeConfig::literal(
            ForgeKind::Github,
            "https://ghe.example.com/api/v3",
            "t",
            "s",
        );
        let client = GithubClient::new(&config).expect("valid");
        assert_eq!(client.api_url(), "https://ghe.example.com/api/v3");
        assert_eq!(client.graphql_url(), "https://ghe.example.com/api/graphql");
        // The shared checks (token, timeout) are ForgeConfig::client_settings'.
        config.token = None;
        let error = GithubClient::new(&config).expect_err("no token");
        assert!(error.message.starts_with("token: "), "{}", error.message);
        config.token = Some("t".into());
        config.url = "not a url".into();
        let error = GithubClient::new(&config).expect_err("bad url");
        assert!(error.message.starts_with("url: "), "{}", error.message);
        config.url = "https://api.github.com".into();
        config.kind = ForgeKind::Gitlab;
        let error = GithubClient::new(&config).expect_err("wrong kind");
        assert!(error.message.starts_with("kind: "), "{}", error.message);
    }

    #[test]
    fn merge_polling_never_below_one_second() {
        let config = ForgeConfig::literal(ForgeKind::Github, "https://api.github.com", "t", "s");
        let client = GithubClient::new(&config)
            .expect("client")
            .with_merge_polling(Duration::from_millis(10), Duration::from_secs(5));
        assert_eq!(
            client.merge_polling(),
            (Duration::from_secs(1), Duration::from_secs(5))
        );
        let default = GithubClient::new(&config).expect("client");
        assert_eq!(default.merge_polling(), (MERGE_POLL_INTERVAL, MERGE_BUDGET));
    }
}
