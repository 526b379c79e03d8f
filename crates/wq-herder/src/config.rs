//! The `ci_retry:` section as written (serde types that accept what YAML
//! gives) and its compilation into a [`Herder`]. Compilation checks every
//! field, collects every problem, and names the matcher in each one:
//! `ci_retry.matchers[1] (name "oom").messages[0]: invalid regex: ...`.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use crate::herder::{Action, Herder, Leaf, Node};
use crate::pattern::{Pattern, PatternSet};

/// Where the matchers live in the service config; the prefix of every
/// error path.
pub const CONFIG_PATH: &str = "ci_retry.matchers";
/// `action` of a top-level matcher that sets none.
pub const DEFAULT_ACTION: &str = "retry";
/// `retry_limit` of a top-level matcher that sets none.
pub const DEFAULT_RETRY_LIMIT: u32 = 3;
/// `retry_delays` of a top-level matcher that sets none: retry at once.
pub const DEFAULT_RETRY_DELAYS_SECONDS: &[u64] = &[0];
/// `job_status` of a top-level matcher that sets none.
pub const DEFAULT_JOB_STATUS: &[&str] = &["failed"];
/// Largest accepted `retry_limit`.
pub const MAX_RETRY_LIMIT: u32 = 100;
/// Largest accepted retry delay: one week.
pub const MAX_RETRY_DELAY_SECONDS: u64 = 7 * 24 * 60 * 60;
/// Largest accepted `tail_lines`.
pub const MAX_TAIL_LINES: u64 = 100_000_000;

/// GitLab job statuses (`job_status` refuses anything else, so a typo such
/// as `fail` is caught at start-up instead of never matching).
pub const JOB_STATUSES: &[&str] = &[
    "created",
    "waiting_for_resource",
    "preparing",
    "pending",
    "running",
    "success",
    "failed",
    "canceling",
    "canceled",
    "skipped",
    "manual",
    "scheduled",
];

/// `ci_retry:` in the service config.
///
/// ```yaml
/// ci_retry:
///   matchers:            # absent: the default set; []: retry nothing
///     - name: oom
///       description: The job was killed for lack of memory
///       messages: [OOMKilled, "/^Killed$/"]
///       tail_lines: 100
/// ```
#[derive(Debug, Clone, PartialEq, Default, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HerderConfig {
    /// The matcher tree. When absent the default set
    /// ([`crate::DEFAULT_MATCHERS_YAML`]) is used; a list replaces it
    /// entirely.
    pub matchers: Option<Vec<MatcherConfig>>,
}

/// One matcher as written. Every field is optional; the crate docs give the
/// semantics and which fields children inherit.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MatcherConfig {
    /// Unique across the whole tree; the verdict names the matcher by it.
    pub name: String,
    /// For people: shown in reports.
    pub description: String,
    /// `retry` or `report`; inherited, top-level default [`DEFAULT_ACTION`].
    pub action: Option<String>,
    /// Any of these in the trace (window) matches: a literal substring, or
    /// `/regex/`. Empty: no trace needed.
    pub messages: StringList,
    /// Search only the last N lines of the trace; inherited, default the
    /// whole trace as read (forge clients keep a log's last 1 MiB).
    pub tail_lines: Option<ConfigNumber>,
    /// The job's `failure_reason` must be one of these. Empty: any.
    pub failure_reason: StringList,
    /// The job's name must contain one of these (literal or `/regex/`).
    /// Empty: any.
    pub job_name: StringList,
    /// The job's status must be one of these; inherited, top-level default
    /// [`DEFAULT_JOB_STATUS`]. `[]`: any status.
    pub job_status: Option<StringList>,
    /// Retries allowed per job name and pipeline; 0 never retries.
    /// Inherited, top-level default [`DEFAULT_RETRY_LIMIT`].
    pub retry_limit: Option<ConfigNumber>,
    /// Seconds to wait before the retry, indexed by the job's retry count;
    /// the last value repeats. Inherited, top-level default
    /// [`DEFAULT_RETRY_DELAYS_SECONDS`].
    pub retry_delays: Option<Vec<ConfigNumber>>,
    /// Children, tried in order once this matcher's own checks pass.
    pub matchers: Vec<MatcherConfig>,
}

/// A string or a list of strings (`job_name: test` or `job_name: [a, b]`).
/// Plain numbers and booleans are taken as their text.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[serde(transparent)]
pub struct StringList(pub Vec<String>);

impl StringList {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<Vec<String>> for StringList {
    fn from(items: Vec<String>) -> Self {
        StringList(items)
    }
}

impl<'de> Deserialize<'de> for StringList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StringListVisitor)
    }
}

struct StringListVisitor;

impl<'de> Visitor<'de> for StringListVisitor {
    type Value = StringList;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a string or a list of strings")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<StringList, E> {
        Ok(StringList(vec![value.to_owned()]))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<StringList, E> {
        Ok(StringList(vec![value.to_string()]))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<StringList, E> {
        Ok(StringList(vec![value.to_string()]))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<StringList, E> {
        Ok(StringList(vec![value.to_string()]))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<StringList, E> {
        Ok(StringList(vec![value.to_string()]))
    }

    fn visit_unit<E: de::Error>(self) -> Result<StringList, E> {
        Ok(StringList::default())
    }

    fn visit_none<E: de::Error>(self) -> Result<StringList, E> {
        Ok(StringList::default())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StringList, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Scalar>()? {
            items.push(item.0);
        }
        Ok(StringList(items))
    }
}

/// One list element of a [`StringList`].
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl Visitor<'_> for ScalarVisitor {
            type Value = Scalar;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<Scalar, E> {
                Ok(Scalar(value.to_owned()))
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Scalar, E> {
                Ok(Scalar(value.to_string()))
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<Scalar, E> {
                Ok(Scalar(value.to_string()))
            }
            fn visit_f64<E: de::Error>(self, value: f64) -> Result<Scalar, E> {
                Ok(Scalar(value.to_string()))
            }
            fn visit_bool<E: de::Error>(self, value: bool) -> Result<Scalar, E> {
                Ok(Scalar(value.to_string()))
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

/// A number as written, so that `-5`, `1.5` or `5m` reach [`compile`]
/// (which names the matcher) instead of failing inside the YAML parser.
///
/// [`compile`]: HerderConfig::compile
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigNumber {
    Integer(i128),
    Float(f64),
    Text(String),
}

impl From<i64> for ConfigNumber {
    fn from(value: i64) -> Self {
        ConfigNumber::Integer(value.into())
    }
}

impl fmt::Display for ConfigNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigNumber::Integer(value) => write!(f, "{value}"),
            ConfigNumber::Float(value) => write!(f, "{value}"),
            ConfigNumber::Text(value) => write!(f, "{value:?}"),
        }
    }
}

impl ConfigNumber {
    /// The value when it is an integer in `min..=max`; otherwise the error
    /// text, e.g. `must be an integer between 0 and 100, not 1.5`.
    fn integer_in(&self, min: u64, max: u64) -> Result<u64, String> {
        let refuse = || format!("must be an integer between {min} and {max}, not {self}");
        match self {
            ConfigNumber::Integer(value) => u64::try_from(*value)
                .ok()
                .filter(|value| (min..=max).contains(value))
                .ok_or_else(refuse),
            ConfigNumber::Float(_) | ConfigNumber::Text(_) => Err(refuse()),
        }
    }
}

impl serde::Serialize for ConfigNumber {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ConfigNumber::Integer(value) => match i64::try_from(*value) {
                Ok(value) => serializer.serialize_i64(value),
                Err(_) => serializer.serialize_str(&value.to_string()),
            },
            ConfigNumber::Float(value) => serializer.serialize_f64(*value),
            ConfigNumber::Text(value) => serializer.serialize_str(value),
        }
    }
}

impl<'de> Deserialize<'de> for ConfigNumber {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NumberVisitor;
        impl Visitor<'_> for NumberVisitor {
            type Value = ConfigNumber;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a number")
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<ConfigNumber, E> {
                Ok(ConfigNumber::Integer(value.into()))
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<ConfigNumber, E> {
                Ok(ConfigNumber::Integer(value.into()))
            }
            fn visit_i128<E: de::Error>(self, value: i128) -> Result<ConfigNumber, E> {
                Ok(ConfigNumber::Integer(value))
            }
            fn visit_u128<E: de::Error>(self, value: u128) -> Result<ConfigNumber, E> {
                Ok(ConfigNumber::Integer(
                    i128::try_from(value).unwrap_or(i128::MAX),
                ))
            }
            fn visit_f64<E: de::Error>(self, value: f64) -> Result<ConfigNumber, E> {
                Ok(ConfigNumber::Float(value))
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<ConfigNumber, E> {
                Ok(ConfigNumber::Text(value.to_owned()))
            }
            fn visit_bool<E: de::Error>(self, value: bool) -> Result<ConfigNumber, E> {
                Ok(ConfigNumber::Text(value.to_string()))
            }
        }
        deserializer.deserialize_any(NumberVisitor)
    }
}

/// One problem in the configuration: `path: message`, where the path names
/// the matcher and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    /// `ci_retry.matchers[1] (name "oom").messages[0]`
    pub path: String,
    pub message: String,
}

impl HerderConfig {
    /// Parses the YAML of a `ci_retry:` section (a mapping with `matchers`).
    pub fn from_yaml(text: &str) -> Result<HerderConfig, ConfigError> {
        serde_saphyr::from_str(text).map_err(|error| parse_error("ci_retry", &error))
    }

    /// Checks every field and compiles every pattern once. All problems are
    /// returned, each naming its matcher.
    pub fn compile(&self) -> Result<Herder, Vec<ConfigError>> {
        match &self.matchers {
            None => Ok(Herder::default_set()),
            Some(matchers) => compile_matchers(matchers),
        }
    }
}

impl Herder {
    /// The shipped matchers ([`crate::DEFAULT_MATCHERS_YAML`]).
    pub fn default_set() -> Herder {
        let matchers = matchers_from_yaml(crate::DEFAULT_MATCHERS_YAML)
            .expect("DEFAULT_MATCHERS_YAML parses (tested)");
        compile_matchers(&matchers).expect("DEFAULT_MATCHERS_YAML compiles (tested)")
    }

    /// Parses and compiles a `ci_retry:` section.
    pub fn from_yaml(text: &str) -> Result<Herder, Vec<ConfigError>> {
        HerderConfig::from_yaml(text)
            .map_err(|error| vec![error])?
            .compile()
    }
}

/// Parses a YAML list of matchers (the form of
/// [`crate::DEFAULT_MATCHERS_YAML`]).
pub fn matchers_from_yaml(text: &str) -> Result<Vec<MatcherConfig>, ConfigError> {
    serde_saphyr::from_str(text).map_err(|error| parse_error(CONFIG_PATH, &error))
}

fn parse_error(path: &str, error: &serde_saphyr::Error) -> ConfigError {
    let rendered = error.to_string();
    let message = rendered.lines().next().unwrap_or("invalid YAML").to_owned();
    ConfigError {
        path: path.to_owned(),
        message,
    }
}

/// What a matcher hands down to its children.
#[derive(Debug, Clone)]
struct Inherited {
    action: Action,
    tail_lines: Option<usize>,
    job_status: Vec<String>,
    retry_limit: u32,
    retry_delays: Vec<Duration>,
    /// Indices in `Compiler::nodes` from the top-level matcher down.
    chain: Vec<usize>,
}

impl Inherited {
    fn top_level() -> Inherited {
        Inherited {
            action: Action::Retry,
            tail_lines: None,
            job_status: DEFAULT_JOB_STATUS.iter().map(|s| (*s).to_owned()).collect(),
            retry_limit: DEFAULT_RETRY_LIMIT,
            retry_delays: DEFAULT_RETRY_DELAYS_SECONDS
                .iter()
                .map(|seconds| Duration::from_secs(*seconds))
                .collect(),
            chain: Vec::new(),
        }
    }
}

pub(crate) fn compile_matchers(matchers: &[MatcherConfig]) -> Result<Herder, Vec<ConfigError>> {
    let mut compiler = Compiler::default();
    compiler.compile_list(matchers, CONFIG_PATH, &Inherited::top_level());
    if compiler.errors.is_empty() {
        Ok(Herder::new(compiler.nodes, compiler.leaves))
    } else {
        Err(compiler.errors)
    }
}

#[derive(Default)]
struct Compiler {
    nodes: Vec<Node>,
    leaves: Vec<Leaf>,
    errors: Vec<ConfigError>,
    /// Name to the path of the matcher that first used it.
    names: HashMap<String, String>,
}

impl Compiler {
    fn compile_list(&mut self, matchers: &[MatcherConfig], list_path: &str, parent: &Inherited) {
        for (index, matcher) in matchers.iter().enumerate() {
            self.compile_one(matcher, &format!("{list_path}[{index}]"), parent);
        }
    }

    fn compile_one(&mut self, config: &MatcherConfig, path: &str, parent: &Inherited) {
        // The label names the matcher; a field is appended to it.
        let label = if config.name.is_empty() {
            path.to_owned()
        } else {
            format!("{path} (name {:?})", config.name)
        };
        let mut field_errors = Vec::new();
        let mut refuse = |field: String, message: String| {
            field_errors.push(ConfigError {
                path: format!("{label}.{field}"),
                message,
            });
        };

        if config.name.trim().is_empty() {
            refuse("name".to_owned(), "must not be empty".to_owned());
        } else if let Some(first) = self.names.get(&config.name) {
            refuse(
                "name".to_owned(),
                format!("{:?} is already the name of {first}", config.name),
            );
        } else {
            self.names.insert(config.name.clone(), path.to_owned());
        }

        let action = match config.action.as_deref() {
            None => parent.action,
            Some("retry") => Action::Retry,
            Some("report") => Action::Report,
            Some(other) => {
                refuse(
                    "action".to_owned(),
                    format!("unknown action {other:?} (expected \"retry\" or \"report\")"),
                );
                parent.action
            }
        };

        let tail_lines = match &config.tail_lines {
            None => parent.tail_lines,
            Some(number) => match number.integer_in(1, MAX_TAIL_LINES) {
                Ok(lines) => usize::try_from(lines).ok(),
                Err(message) => {
                    refuse("tail_lines".to_owned(), message);
                    parent.tail_lines
                }
            },
        };

        let retry_limit = match &config.retry_limit {
            None => parent.retry_limit,
            Some(number) => match number.integer_in(0, MAX_RETRY_LIMIT.into()) {
                Ok(limit) => u32::try_from(limit).unwrap_or(MAX_RETRY_LIMIT),
                Err(message) => {
                    refuse("retry_limit".to_owned(), message);
                    parent.retry_limit
                }
            },
        };

        let retry_delays = match &config.retry_delays {
            None => parent.retry_delays.clone(),
            Some(delays) if delays.is_empty() => {
                refuse(
                    "retry_delays".to_owned(),
                    "must list at least one delay (seconds); use [0] to retry at once".to_owned(),
                );
                parent.retry_delays.clone()
            }
            Some(delays) => {
                let mut parsed = Vec::with_capacity(delays.len());
                for (index, delay) in delays.iter().enumerate() {
                    match delay.integer_in(0, MAX_RETRY_DELAY_SECONDS) {
                        Ok(seconds) => parsed.push(Duration::from_secs(seconds)),
                        Err(message) => refuse(
                            format!("retry_delays[{index}]"),
                            format!("{message} seconds"),
                        ),
                    }
                }
                if parsed.len() == delays.len() {
                    parsed
                } else {
                    parent.retry_delays.clone()
                }
            }
        };

        let job_status = match &config.job_status {
            None => parent.job_status.clone(),
            Some(statuses) => {
                for (index, status) in statuses.0.iter().enumerate() {
                    if !JOB_STATUSES.contains(&status.as_str()) {
                        refuse(
                            format!("job_status[{index}]"),
                            format!(
                                "unknown job status {status:?} (expected one of {})",
                                JOB_STATUSES.join(", ")
                            ),
                        );
                    }
                }
                statuses.0.clone()
            }
        };

        for (index, reason) in config.failure_reason.0.iter().enumerate() {
            let snake_case = reason.starts_with(|c: char| c.is_ascii_lowercase())
                && reason
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !snake_case {
                refuse(
                    format!("failure_reason[{index}]"),
                    format!(
                        "{reason:?} is not a GitLab failure reason (lower-case words joined \
                         by `_`, such as runner_system_failure)"
                    ),
                );
            }
        }

        let job_name = compile_patterns(&config.job_name, "job_name", &mut refuse);
        let messages = compile_patterns(&config.messages, "messages", &mut refuse);

        self.errors.append(&mut field_errors);

        let index = self.nodes.len();
        self.nodes.push(Node {
            name: config.name.clone(),
            description: config.description.clone(),
            failure_reasons: config.failure_reason.0.clone(),
            job_name,
            messages,
            tail_lines,
            group: None,
        });
        let mut chain = parent.chain.clone();
        chain.push(index);

        if config.matchers.is_empty() {
            self.leaves.push(Leaf {
                node: index,
                chain,
                job_status,
                action,
                retry_limit,
                retry_delays,
            });
        } else {
            let inherited = Inherited {
                action,
                tail_lines,
                job_status,
                retry_limit,
                retry_delays,
                chain,
            };
            self.compile_list(&config.matchers, &format!("{path}.matchers"), &inherited);
        }
    }
}

/// Parses and compiles `patterns`; `None` when there are none (or when one
/// is bad, after reporting it).
fn compile_patterns(
    patterns: &StringList,
    field: &str,
    refuse: &mut impl FnMut(String, String),
) -> Option<PatternSet> {
    if patterns.is_empty() {
        return None;
    }
    let mut parsed = Vec::with_capacity(patterns.0.len());
    for (index, text) in patterns.0.iter().enumerate() {
        match Pattern::parse(text) {
            Ok(pattern) => parsed.push(pattern),
            Err(message) => refuse(format!("{field}[{index}]"), message),
        }
    }
    if parsed.len() != patterns.0.len() {
        return None;
    }
    match PatternSet::compile(&parsed) {
        Ok(set) => Some(set),
        Err(message) => {
            refuse(
                field.to_owned(),
                format!("the patterns together: {message}"),
            );
            None
        }
    }
}
