//! The client itself: construction, the project settings cache, and the
//! reads of the token's user, a project and its branches.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::http::{Call, Http};
use super::wire::{self, ProjectSettings};
use crate::config::{ForgeConfig, ForgeKind};
use crate::error::{ForgeError, ForgeErrorKind, ForgeResult};

/// How long a project's settings (`merge_trains_enabled`, `merge_method`,
/// and `reset_approvals_on_push` of its approval settings) are reused
/// before `GET /projects/:id` (or `GET /projects/:id/approvals`) is asked
/// again.
pub const PROJECT_SETTINGS_TTL: Duration = Duration::from_secs(300);

/// A GitLab instance.
pub struct GitlabClient {
    pub(super) http: Http,
    pub(super) webhook_secret: Option<String>,
    projects: Mutex<HashMap<String, (Instant, ProjectSettings)>>,
    /// Each project's approval settings, reused for [`PROJECT_SETTINGS_TTL`].
    approval_settings: Mutex<HashMap<String, (Instant, wire::ApprovalSettings)>>,
    /// The token's user, read once.
    user: tokio::sync::OnceCell<crate::ForgeUser>,
}

impl fmt::Debug for GitlabClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitlabClient")
            .field("api", &self.http.base().as_str())
            .field("webhook_secret", &self.webhook_secret.as_ref().map(|_| "…"))
            .finish_non_exhaustive()
    }
}

impl GitlabClient {
    /// A client for `config.url` (the server, or its `/api/v4` base) with
    /// `config.token`. Errors name the field (`url`, `token`,
    /// `timeout_seconds`); `config.token_env` must already be resolved
    /// ([`ForgeConfig::resolve_secrets`]).
    pub fn new(config: &ForgeConfig) -> ForgeResult<Self> {
        let settings = config.client_settings(ForgeKind::Gitlab)?;
        let http = Http::new(&config.url, settings.token, settings.timeout)?;
        Ok(Self {
            http,
            webhook_secret: settings.webhook_secret,
            projects: Mutex::new(HashMap::new()),
            approval_settings: Mutex::new(HashMap::new()),
            user: tokio::sync::OnceCell::new(),
        })
    }

    /// The API base every request goes to (`.../api/v4`).
    pub fn api_url(&self) -> &str {
        self.http.base().as_str()
    }

    /// The project's merge settings, from the cache while fresh.
    pub(super) async fn project_settings(&self, project: &str) -> ForgeResult<ProjectSettings> {
        if let Some((read_at, settings)) = self.lock_projects().get(project)
            && read_at.elapsed() < PROJECT_SETTINGS_TTL
        {
            return Ok(settings.clone());
        }
        let settings: ProjectSettings = self
            .http
            .json(&Call::get(&["projects", project]), "a project")
            .await?;
        self.lock_projects()
            .insert(project.to_owned(), (Instant::now(), settings.clone()));
        Ok(settings)
    }

    /// The project's approval settings, from the cache while fresh.
    pub(super) async fn approval_settings(
        &self,
        project: &str,
    ) -> ForgeResult<wire::ApprovalSettings> {
        if let Some((read_at, settings)) = self.lock_approval_settings().get(project)
            && read_at.elapsed() < PROJECT_SETTINGS_TTL
        {
            return Ok(*settings);
        }
        let settings: wire::ApprovalSettings = self
            .http
            .json(
                &Call::get(&["projects", project, "approvals"]),
                "the approval settings of a project",
            )
            .await?;
        self.lock_approval_settings()
            .insert(project.to_owned(), (Instant::now(), settings));
        Ok(settings)
    }

    fn lock_approval_settings(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, wire::ApprovalSettings)>> {
        // The map only caches; a panic elsewhere cannot leave it invalid.
        self.approval_settings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn lock_projects(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, ProjectSettings)>> {
        // The map only caches; a panic elsewhere cannot leave it invalid.
        self.projects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `GET /user`, once: later calls answer from memory; a failed read is
    /// not kept, the next call asks again.
    pub(super) async fn current_user(&self) -> ForgeResult<crate::ForgeUser> {
        self.user
            .get_or_try_init(|| async {
                let user: wire::User = self.http.json(&Call::get(&["user"]), "a user").await?;
                Ok(crate::ForgeUser {
                    id: user.id,
                    username: user.username,
                })
            })
            .await
            .cloned()
    }

    /// `GET /projects/:path` → `path_with_namespace` (GitLab resolves the
    /// path case-insensitively). Read through the project settings cache.
    pub(super) async fn project_path(&self, project: &str) -> ForgeResult<String> {
        let settings = self.project_settings(project).await?;
        if settings.path_with_namespace.is_empty() {
            return Err(ForgeError::rejected(
                None,
                format!("project {project}: GitLab answered without path_with_namespace"),
            ));
        }
        Ok(settings.path_with_namespace)
    }

    /// Every page of `GET protected_branches`; `branch` is protected when an
    /// entry's name equals it or, as a wildcard, matches it
    /// ([`wire::protected_name_matches`]). The branch need not exist.
    pub(super) async fn branch_protected(&self, project: &str, branch: &str) -> ForgeResult<bool> {
        let call = Call::get(&["projects", project, "protected_branches"]);
        let entries: Vec<wire::ProtectedBranch> =
            self.http.list(call, "a list of protected branches").await?;
        Ok(entries
            .iter()
            .any(|entry| wire::protected_name_matches(&entry.name, branch)))
    }

    /// 404 is `None` unless GitLab says the project is missing: a missing
    /// project must not read as "create the branch".
    pub(super) async fn branch_head(
        &self,
        project: &str,
        branch: &str,
    ) -> ForgeResult<Option<String>> {
        let call = Call::get(&["projects", project, "repository", "branches", branch]);
        match self.http.json::<wire::Branch>(&call, "a branch").await {
            Ok(branch) => Ok(Some(branch.commit.id)),
            Err(error)
                if error.kind == ForgeErrorKind::NotFound
                    && !error.message.contains("Project Not Found") =>
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
        let mut config =
            ForgeConfig::literal(ForgeKind::Gitlab, "https://gitlab.example.com", "t", "s");
        assert_eq!(
            GitlabClient::new(&config).expect("valid").api_url(),
            "https://gitlab.example.com/api/v4"
        );
        // The shared checks (token, timeout) are ForgeConfig::client_settings'.
        config.token = None;
        let error = GitlabClient::new(&config).expect_err("no token");
        assert!(error.message.starts_with("token: "), "{}", error.message);
        config.token = Some("t".into());
        config.url = "not a url".into();
        let error = GitlabClient::new(&config).expect_err("bad url");
        assert!(error.message.starts_with("url: "), "{}", error.message);
        config.url = "https://gitlab.example.com".into();
        config.kind = ForgeKind::Github;
        let error = GitlabClient::new(&config).expect_err("wrong kind");
        assert!(error.message.starts_with("kind: "), "{}", error.message);
    }
}
