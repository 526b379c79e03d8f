//! Rules: which remote identity (groups, or an issuer and claims) gets which
//! local permissions, and where (DDR-21 to DDR-23). Also the request side:
//! [`Permission`], [`Scope`] and the [`Forbidden`] answer.

use std::fmt;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde_json::{Map, Value};
use url::Url;
pub use wq_core::Permission;

/// A set of permissions.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct PermissionSet(u8);

impl PermissionSet {
    /// No permission.
    pub const EMPTY: PermissionSet = PermissionSet(0);

    pub fn insert(&mut self, permission: Permission) {
        self.0 |= 1 << permission.index();
    }

    /// Whether `permission` is in the set, or `admin` is.
    pub fn allows(self, permission: Permission) -> bool {
        let admin = 1 << Permission::Admin.index();
        self.0 & (admin | 1 << permission.index()) != 0
    }

    /// The permissions named in the set (without expanding `admin`).
    pub fn iter(self) -> impl Iterator<Item = Permission> {
        Permission::ALL
            .into_iter()
            .filter(move |permission| self.0 & (1 << permission.index()) != 0)
    }
}

impl fmt::Debug for PermissionSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<Permission> for PermissionSet {
    fn from_iter<I: IntoIterator<Item = Permission>>(iter: I) -> Self {
        let mut set = PermissionSet::EMPTY;
        for permission in iter {
            set.insert(permission);
        }
        set
    }
}

/// What a request touches. `None` means "not applicable": a rule scoped to
/// projects still grants `read` for listing, which names no project.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scope<'a> {
    pub item_type: Option<&'a str>,
    pub forge: Option<&'a str>,
    pub project: Option<&'a str>,
    /// The request touches a forge and project, but which is not known
    /// (e.g. an item whose type reports none): unlike "not applicable",
    /// only a rule with no forge or project restriction grants it.
    pub place_unknown: bool,
}

impl Scope<'_> {
    /// Nothing in particular (e.g. listing items).
    pub const ANY: Scope<'static> = Scope {
        item_type: None,
        forge: None,
        project: None,
        place_unknown: false,
    };
}

impl fmt::Display for Scope<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = [
            ("item type", self.item_type),
            ("forge", self.forge),
            ("project", self.project),
        ]
        .into_iter()
        .filter_map(|(label, value)| value.map(|value| format!("{label} {value}")))
        .chain(
            self.place_unknown
                .then(|| "an unknown forge and project".to_owned()),
        )
        .collect();
        if parts.is_empty() {
            f.write_str("any scope")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// A rule's `item_types`, `forges` and `projects` glob patterns as written
/// in the config file; `None` allows all. Project patterns match
/// case-insensitively and their `*` does not cross `/`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopeGlobs {
    pub item_types: Option<Vec<String>>,
    pub forges: Option<Vec<String>>,
    pub projects: Option<Vec<String>>,
}

/// A validated rule from `auth.rules`.
#[derive(Debug)]
pub struct Rule {
    pub(crate) name: String,
    pub(crate) identity: RuleIdentity,
    pub(crate) permissions: PermissionSet,
    pub(crate) scope: ScopePatterns,
}

impl Rule {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn permissions(&self) -> PermissionSet {
        self.permissions
    }

    /// Whether this rule grants `permission` for `scope`.
    pub fn permits(&self, permission: Permission, scope: &Scope<'_>) -> bool {
        self.permissions.allows(permission) && self.scope.contains(scope)
    }

    /// Whether this rule grants `permission` with no item type, forge or
    /// project restriction.
    pub fn permits_everywhere(&self, permission: Permission) -> bool {
        self.permissions.allows(permission)
            && self.scope.item_types.is_none()
            && self.scope.forges.is_none()
            && self.scope.projects.is_none()
    }

    /// The rule's scope as written (glob patterns; `None` allows all), for
    /// narrowing a listing in the database before [`Rule::permits`] decides.
    pub fn scope_globs(&self) -> ScopeGlobs {
        let sources = |patterns: &Option<Patterns>| {
            patterns.as_ref().map(|patterns| patterns.sources.clone())
        };
        ScopeGlobs {
            item_types: sources(&self.scope.item_types),
            forges: sources(&self.scope.forges),
            projects: sources(&self.scope.projects),
        }
    }

    pub(crate) fn matches_groups<'a>(&self, groups: impl IntoIterator<Item = &'a String>) -> bool {
        let RuleIdentity::Groups(wanted) = &self.identity else {
            return false;
        };
        groups.into_iter().any(|group| wanted.contains(group))
    }

    pub(crate) fn issuer(&self) -> Option<&IssuerRef> {
        match &self.identity {
            RuleIdentity::Issuer { issuer, .. } => Some(issuer),
            RuleIdentity::Groups(_) => None,
        }
    }

    /// The claim conditions of an issuer rule (empty for a group rule).
    pub(crate) fn claim_conditions(&self) -> &[ClaimCondition] {
        match &self.identity {
            RuleIdentity::Issuer { claims, .. } => claims,
            RuleIdentity::Groups(_) => &[],
        }
    }

    /// Whether every claim condition holds for `claims`.
    pub(crate) fn matches_claims(&self, claims: &Map<String, Value>) -> bool {
        match &self.identity {
            RuleIdentity::Issuer {
                claims: conditions, ..
            } => conditions.iter().all(|condition| condition.matches(claims)),
            RuleIdentity::Groups(_) => false,
        }
    }
}

/// Whom a rule matches.
#[derive(Debug)]
pub(crate) enum RuleIdentity {
    Groups(Vec<String>),
    Issuer {
        issuer: IssuerRef,
        claims: Vec<ClaimCondition>,
    },
}

/// A rule's `issuer:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IssuerRef {
    Url(Url),
    /// `k8s`: the cluster's own service-account issuer.
    KubernetesInCluster,
}

/// One `claims:` entry: the claim must have one of `accepted`, compared as
/// the scalars' text (see [`claim_text`]), exactly unless the rule folds
/// case.
#[derive(Debug)]
pub(crate) struct ClaimCondition {
    pub(crate) claim: String,
    /// The accepted values' text; lowercase when `case_insensitive`.
    pub(crate) accepted: Vec<String>,
    /// `claims_case_insensitive: true`: both sides are lowercased.
    pub(crate) case_insensitive: bool,
}

impl ClaimCondition {
    pub(crate) fn new(
        claim: &str,
        value: &Value,
        case_insensitive: bool,
    ) -> Result<ClaimCondition, String> {
        let fold = |text: String| {
            if case_insensitive {
                text.to_lowercase()
            } else {
                text
            }
        };
        let accepted =
            match value {
                Value::Array(values) if values.is_empty() => {
                    return Err("must not be an empty list".to_owned());
                }
                Value::Array(values) => values
                    .iter()
                    .map(|value| {
                        claim_text(value).map(fold).ok_or_else(|| {
                            "a list may only hold strings, numbers and booleans".to_owned()
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                value => vec![claim_text(value).map(fold).ok_or_else(|| {
                    "must be a string, number, boolean or a list of them".to_owned()
                })?],
            };
        Ok(ClaimCondition {
            claim: claim.to_owned(),
            accepted,
            case_insensitive,
        })
    }

    /// The claim is present and equals one of the accepted values; a list
    /// claim (like `aud`) matches when any of its items does.
    pub(crate) fn matches(&self, claims: &Map<String, Value>) -> bool {
        match claims.get(&self.claim) {
            Some(Value::Array(items)) => items.iter().any(|item| self.accepts(item)),
            Some(value) => self.accepts(value),
            None => false,
        }
    }

    pub(crate) fn accepts(&self, value: &Value) -> bool {
        let Some(text) = claim_text(value) else {
            return false;
        };
        if self.case_insensitive {
            self.accepted.contains(&text.to_lowercase())
        } else {
            self.accepted.contains(&text)
        }
    }
}

/// The text a scalar claim value is compared by, unchanged: a string as
/// it is (`"Main"` stays "Main"), a number as JSON writes it (`42` → "42",
/// so a rule's `project_id: 42` matches GitLab's string `"42"`, but not
/// `"042"` or `42.0`), a boolean as `true`/`false` (so `ref_protected:
/// true` matches GitLab's string `"true"`, not `"TRUE"`). Null, lists and
/// objects have none and never match.
pub(crate) fn claim_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// A rule's `item_types`, `forges` and `projects`; `None` allows all.
#[derive(Debug)]
pub(crate) struct ScopePatterns {
    pub(crate) item_types: Option<Patterns>,
    pub(crate) forges: Option<Patterns>,
    pub(crate) projects: Option<Patterns>,
}

impl ScopePatterns {
    fn contains(&self, scope: &Scope<'_>) -> bool {
        fn allows(patterns: Option<&Patterns>, value: Option<&str>) -> bool {
            match (patterns, value) {
                (Some(patterns), Some(value)) => patterns.matches(value),
                _ => true,
            }
        }
        if scope.place_unknown && (self.forges.is_some() || self.projects.is_some()) {
            return false;
        }
        allows(self.item_types.as_ref(), scope.item_type)
            && allows(self.forges.as_ref(), scope.forge)
            && allows(self.projects.as_ref(), scope.project)
    }
}

/// Compiled glob patterns.
#[derive(Debug)]
pub(crate) struct Patterns {
    set: GlobSet,
    /// The patterns as written, for [`Rule::scope_globs`].
    sources: Vec<String>,
}

impl Patterns {
    /// For paths `*` does not cross `/` (`**` does) and case is ignored.
    /// On error: the index of the bad pattern and why.
    pub(crate) fn new(patterns: &[String], is_path: bool) -> Result<Patterns, (usize, String)> {
        let mut builder = GlobSetBuilder::new();
        for (index, pattern) in patterns.iter().enumerate() {
            if pattern.trim().is_empty() {
                return Err((index, "must not be empty".to_owned()));
            }
            let glob = GlobBuilder::new(pattern)
                .literal_separator(is_path)
                .case_insensitive(is_path)
                .backslash_escape(true)
                .build()
                .map_err(|error| {
                    (
                        index,
                        format!("{pattern:?} is not a valid glob: {}", error.kind()),
                    )
                })?;
            builder.add(glob);
        }
        let set = builder
            .build()
            .map_err(|error| (0, format!("the patterns do not compile: {error}")))?;
        Ok(Patterns {
            set,
            sources: patterns.to_vec(),
        })
    }

    pub(crate) fn matches(&self, value: &str) -> bool {
        self.set.is_match(value)
    }
}

/// No rule that matched the caller grants the permission for the scope:
/// a 403 at the API. Display gives the detail for logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no rule grants {permission} for {scope} ({})", describe_rules(.matched_rules))]
pub struct Forbidden {
    pub permission: Permission,
    pub scope: String,
    /// Names of the rules that matched the caller.
    pub matched_rules: Vec<String>,
}

fn describe_rules(rules: &[String]) -> String {
    if rules.is_empty() {
        "no rule matches the caller".to_owned()
    } else {
        format!("rules matching the caller: {}", rules.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn admin_implies_every_permission() {
        let admin: PermissionSet = [Permission::Admin].into_iter().collect();
        for permission in Permission::ALL {
            assert!(admin.allows(permission), "{permission}");
        }
        let read: PermissionSet = [Permission::Read].into_iter().collect();
        assert!(read.allows(Permission::Read));
        assert!(!read.allows(Permission::Submit));
        assert!(!read.allows(Permission::Admin));
    }

    #[test]
    fn claims_compare_exactly_as_text() {
        let claims = json!({"project_id": 42, "namespace_id": "7", "ref_protected": true,
            "protected_text": "true", "ref": "Main", "aud": ["a", "workqueue"]});
        let claims = claims.as_object().unwrap();
        let condition =
            |name: &str, value: Value| ClaimCondition::new(name, &value, false).unwrap();
        // Numbers and their decimal text are the same value, nothing else is.
        assert!(condition("project_id", json!("42")).matches(claims));
        assert!(condition("project_id", json!(42)).matches(claims));
        assert!(!condition("project_id", json!(43)).matches(claims));
        assert!(!condition("project_id", json!("042")).matches(claims));
        assert!(!condition("project_id", json!(42.0)).matches(claims));
        assert!(condition("namespace_id", json!(7)).matches(claims));
        // Booleans and their text `true`/`false`, in that case only.
        assert!(condition("ref_protected", json!(true)).matches(claims));
        assert!(condition("ref_protected", json!("true")).matches(claims));
        assert!(!condition("ref_protected", json!("TRUE")).matches(claims));
        assert!(!condition("ref_protected", json!(false)).matches(claims));
        assert!(condition("protected_text", json!(true)).matches(claims));
        assert!(!condition("protected_text", json!(1)).matches(claims));
        // Strings exactly: case matters.
        assert!(condition("ref", json!("Main")).matches(claims));
        assert!(!condition("ref", json!("main")).matches(claims));
        assert!(!condition("ref", json!("MAIN")).matches(claims));
        assert!(!condition("ref", json!("Main ")).matches(claims));
        assert!(condition("ref", json!(["stable", "Main"])).matches(claims));
        assert!(!condition("ref", json!(["stable", "main"])).matches(claims));
        assert!(condition("aud", json!("workqueue")).matches(claims));
        assert!(!condition("aud", json!("WorkQueue")).matches(claims));
        assert!(!condition("aud", json!("other")).matches(claims));
        assert!(!condition("missing", json!("x")).matches(claims));
    }

    #[test]
    fn case_folding_is_the_rules_choice() {
        let claims = json!({"ref": "Main", "project_path": "Team/App", "ref_protected": "TRUE"});
        let claims = claims.as_object().unwrap();
        let folded = |name: &str, value: Value| ClaimCondition::new(name, &value, true).unwrap();
        assert!(folded("ref", json!("main")).matches(claims));
        assert!(folded("ref", json!("MAIN")).matches(claims));
        assert!(folded("project_path", json!(["other/x", "team/app"])).matches(claims));
        assert!(folded("ref_protected", json!(true)).matches(claims));
        assert!(!folded("ref", json!("mainline")).matches(claims));
    }

    #[test]
    fn bad_claim_values_are_refused() {
        assert!(ClaimCondition::new("x", &json!(null), false).is_err());
        assert!(ClaimCondition::new("x", &json!({"a": 1}), false).is_err());
        assert!(ClaimCondition::new("x", &json!([]), false).is_err());
        assert!(ClaimCondition::new("x", &json!([["a"]]), false).is_err());
    }

    #[test]
    fn project_patterns_keep_to_one_segment_and_ignore_case() {
        let patterns = Patterns::new(&["team/*".to_owned()], true).unwrap();
        assert!(patterns.matches("team/x"));
        assert!(patterns.matches("Team/X"));
        assert!(!patterns.matches("team/sub/x"));
        assert!(!patterns.matches("other/x"));
        assert!(!patterns.matches("teamx/y"));
        let deep = Patterns::new(&["team/**".to_owned()], true).unwrap();
        assert!(deep.matches("team/sub/x"));
        assert_eq!(
            Patterns::new(&["ok".to_owned(), "a[".to_owned()], true)
                .unwrap_err()
                .0,
            1
        );
    }

    #[test]
    fn an_absent_scope_part_is_not_applicable() {
        let scope = ScopePatterns {
            item_types: None,
            forges: None,
            projects: Some(Patterns::new(&["team/*".to_owned()], true).unwrap()),
        };
        assert!(scope.contains(&Scope::ANY));
        assert!(scope.contains(&Scope {
            project: Some("team/a"),
            ..Scope::ANY
        }));
        assert!(!scope.contains(&Scope {
            project: Some("other/a"),
            ..Scope::ANY
        }));
    }

    #[test]
    fn an_unknown_place_is_granted_only_by_rules_without_a_place_restriction() {
        let patterns = |pattern: &str| Some(Patterns::new(&[pattern.to_owned()], true).unwrap());
        let unknown = Scope {
            item_type: Some("mr"),
            place_unknown: true,
            ..Scope::ANY
        };
        let by_project = ScopePatterns {
            item_types: None,
            forges: None,
            projects: patterns("team/*"),
        };
        assert!(!by_project.contains(&unknown));
        let by_forge = ScopePatterns {
            item_types: None,
            forges: patterns("gitlab"),
            projects: None,
        };
        assert!(!by_forge.contains(&unknown));
        // Even a pattern that matches every project is a restriction.
        let any_project = ScopePatterns {
            item_types: None,
            forges: None,
            projects: patterns("**"),
        };
        assert!(!any_project.contains(&unknown));
        let unrestricted = ScopePatterns {
            item_types: None,
            forges: None,
            projects: None,
        };
        assert!(unrestricted.contains(&unknown));
        // The item type is still checked.
        let by_type = ScopePatterns {
            item_types: patterns("mr"),
            forges: None,
            projects: None,
        };
        assert!(by_type.contains(&unknown));
        let other_type = ScopePatterns {
            item_types: patterns("deploy"),
            forges: None,
            projects: None,
        };
        assert!(!other_type.contains(&unknown));
        // What the place is not known is named for the log.
        assert_eq!(
            unknown.to_string(),
            "item type mr, an unknown forge and project"
        );
    }
}
