//! Environment variables that override settings of the file:
//! `WORKQUEUE__SECTION__KEY=value`, nested with `__` (`WORKQUEUE__ENGINE__WORKERS=4`,
//! `WORKQUEUE__FORGES__GITLAB__URL=https://gitlab.example.com`). The file
//! is read first (defaults filled in); each variable then replaces (or
//! adds) the one value its path names, so the environment wins over the
//! file, and the result is validated as a whole, like a file.
//!
//! - Names are case-insensitive: every segment is lowercased, so it names
//!   a config key (or a map key such as a forge's name) written in lower
//!   case. A map key that is not (upper case, `/`, `*`, ...) is set with
//!   its parent, as a map.
//! - A value is a number, `true`/`false`, `null` (the setting's default), a
//!   list or map in YAML flow style (`[mr]`, `{forge: github, require_review:
//!   false}`: it replaces the whole list or map), a quoted YAML string
//!   (`"8080"`), or else the text itself, verbatim.
//! - Errors name the variable.

use serde_json::{Map, Value};

/// The prefix of every overriding variable.
pub const ENV_PREFIX: &str = "WORKQUEUE__";

/// One `WORKQUEUE__...` variable, read.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvOverride {
    /// The variable's name, as it was set.
    pub variable: String,
    /// The setting it names: lowercased segments (`["engine", "workers"]`).
    pub path: Vec<String>,
    pub value: Value,
}

impl EnvOverride {
    /// `engine.workers`
    pub fn dotted(&self) -> String {
        self.path.join(".")
    }
}

/// The overrides among `vars` (name, value), sorted by name; an error
/// names each variable that cannot be one.
pub fn from_vars(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Result<Vec<EnvOverride>, Vec<String>> {
    let mut overrides = Vec::new();
    let mut errors = Vec::new();
    for (name, value) in vars {
        let Some(name) = name.to_str() else { continue };
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let Some(value) = value.to_str() else {
            errors.push(format!("{name}: the value is not UTF-8"));
            continue;
        };
        let path: Vec<String> = rest.split("__").map(str::to_lowercase).collect();
        if path.iter().any(String::is_empty) {
            errors.push(format!(
                "{name}: names no setting (WORKQUEUE__SECTION__KEY, segments separated by \
                 two underscores, none empty)"
            ));
            continue;
        }
        match parse_value(value) {
            Ok(value) => overrides.push(EnvOverride {
                variable: name.to_owned(),
                path,
                value,
            }),
            Err(message) => errors.push(format!("{name}: {message}")),
        }
    }
    if !errors.is_empty() {
        errors.sort();
        return Err(errors);
    }
    overrides.sort_by(|a, b| a.variable.cmp(&b.variable));
    Ok(overrides)
}

/// A variable's text as a config value (see the module doc).
fn parse_value(raw: &str) -> Result<Value, String> {
    let trimmed = raw.trim();
    let flow = trimmed.starts_with('[') || trimmed.starts_with('{');
    let quoted = trimmed.len() >= 2
        && ((trimmed.starts_with('"') && trimmed.ends_with('"'))
            || (trimmed.starts_with('\'') && trimmed.ends_with('\'')));
    if flow || quoted {
        return serde_saphyr::from_str::<Value>(trimmed).map_err(|error| {
            let what = if flow {
                "a YAML flow list or map"
            } else {
                "a quoted YAML string"
            };
            let first = error.to_string();
            let first = first.lines().next().unwrap_or_default().to_owned();
            format!("not {what}: {first}")
        });
    }
    Ok(match trimmed {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "null" | "~" => Value::Null,
        _ => {
            if let Ok(number) = trimmed.parse::<i64>() {
                Value::from(number)
            } else if let Ok(number) = trimmed.parse::<u64>() {
                Value::from(number)
            } else if trimmed.contains('.')
                && let Ok(number) = trimmed.parse::<f64>()
                && number.is_finite()
            {
                Value::from(number)
            } else {
                Value::String(raw.to_owned())
            }
        }
    })
}

/// Sets every override in `tree` (the file's settings as a value), in order; an error
/// names the variable whose path crosses a value that is not a map.
pub fn apply(tree: &mut Value, overrides: &[EnvOverride]) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    for found in overrides {
        if let Err(message) = set(tree, &found.path, found.value.clone()) {
            errors.push(format!("{}: {message}", found.variable));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn set(tree: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    if tree.is_null() {
        *tree = Value::Object(Map::new());
    }
    let mut node = tree;
    for (depth, segment) in path.iter().enumerate() {
        let Value::Object(map) = node else {
            return Err(format!(
                "{} is not a map, so it has no key {segment:?}",
                path[..depth].join(".")
            ));
        };
        if depth + 1 == path.len() {
            map.insert(segment.clone(), value);
            return Ok(());
        }
        let child = map
            .entry(segment.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if child.is_null() {
            *child = Value::Object(Map::new());
        }
        node = child;
    }
    Ok(())
}

/// The problem `line` (`field: message (line L, column C)` of the merged
/// document) said of the variable whose setting contains `field`, without
/// the location (which is in no file); `line` as it is when no variable's
/// path covers it.
pub fn attribute(line: &str, overrides: &[EnvOverride]) -> String {
    let line = without_location(line);
    let field = line.split_once(": ").map_or("", |(field, _)| field);
    let covering = overrides
        .iter()
        .filter(|found| {
            let dotted = found.dotted();
            field == dotted
                || field.starts_with(&format!("{dotted}."))
                || field.starts_with(&format!("{dotted}["))
                || field.starts_with(&format!("{dotted} ("))
        })
        .max_by_key(|found| found.path.len());
    match covering {
        Some(found) => format!("{}: {line}", found.variable),
        None => line.to_owned(),
    }
}

fn without_location(line: &str) -> &str {
    if let Some((before, location)) = line.rsplit_once(" (line ")
        && location.ends_with(')')
        && location.contains(", column ")
    {
        return before;
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).into(), (*value).into()))
            .collect()
    }

    #[test]
    fn variables_become_lowercased_paths_and_typed_values() {
        let found = from_vars(vars(&[
            ("WORKQUEUE__ENGINE__WORKERS", "4"),
            ("WORKQUEUE__ENGINE__HANDLED_TYPES", "[mr]"),
            (
                "WORKQUEUE__FORGES__GITLAB__URL",
                "https://gitlab.example.com",
            ),
            ("WORKQUEUE__MR__REQUIRE_REVIEW", "false"),
            ("WORKQUEUE__MR__MANAGED_LABEL", "'123'"),
            ("WORKQUEUE__SERVER__BIND", "0.0.0.0:8080"),
            ("WORKQUEUE_URL", "http://not-an-override"),
            ("PATH", "/bin"),
        ]))
        .unwrap();
        let pairs: Vec<(String, Value)> = found
            .iter()
            .map(|found| (found.dotted(), found.value.clone()))
            .collect();
        assert_eq!(
            pairs,
            vec![
                ("engine.handled_types".to_owned(), serde_json::json!(["mr"])),
                ("engine.workers".to_owned(), serde_json::json!(4)),
                (
                    "forges.gitlab.url".to_owned(),
                    serde_json::json!("https://gitlab.example.com")
                ),
                ("mr.managed_label".to_owned(), serde_json::json!("123")),
                ("mr.require_review".to_owned(), serde_json::json!(false)),
                ("server.bind".to_owned(), serde_json::json!("0.0.0.0:8080")),
            ]
        );
    }

    #[test]
    fn bad_variables_are_named() {
        let errors = from_vars(vars(&[
            ("WORKQUEUE__ENGINE____WORKERS", "4"),
            ("WORKQUEUE__", "x"),
            ("WORKQUEUE__ENGINE__HANDLED_TYPES", "[mr"),
        ]))
        .unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors[0].starts_with("WORKQUEUE__: names no setting"),
            "{errors:?}"
        );
        assert!(
            errors[1].starts_with("WORKQUEUE__ENGINE__HANDLED_TYPES: not a YAML flow list or map"),
            "{errors:?}"
        );
        assert!(
            errors[2].starts_with("WORKQUEUE__ENGINE____WORKERS: names no setting"),
            "{errors:?}"
        );
    }

    #[test]
    fn overrides_replace_and_add_values_in_the_tree() {
        let mut tree =
            serde_json::json!({"engine": {"workers": 2, "lease_seconds": 9}, "server": 3});
        let found = from_vars(vars(&[
            ("WORKQUEUE__ENGINE__WORKERS", "4"),
            ("WORKQUEUE__DATABASE__URL", "sqlite::memory:"),
        ]))
        .unwrap();
        apply(&mut tree, &found).unwrap();
        assert_eq!(
            tree,
            serde_json::json!({
                "engine": {"workers": 4, "lease_seconds": 9},
                "server": 3,
                "database": {"url": "sqlite::memory:"},
            })
        );
        let crossing = from_vars(vars(&[("WORKQUEUE__SERVER__BIND", "x")])).unwrap();
        assert_eq!(
            apply(&mut tree, &crossing).unwrap_err(),
            vec!["WORKQUEUE__SERVER__BIND: server is not a map, so it has no key \"bind\""]
        );
    }

    #[test]
    fn problems_are_said_of_the_variable_that_covers_them() {
        let found = from_vars(vars(&[
            ("WORKQUEUE__ENGINE__WORKERS", "0"),
            ("WORKQUEUE__ENGINE", "{handled_types: [x]}"),
        ]))
        .unwrap();
        assert_eq!(
            attribute(
                "engine.workers: must be between 1 and 1000, got 0 (line 3, column 12)",
                &found
            ),
            "WORKQUEUE__ENGINE__WORKERS: engine.workers: must be between 1 and 1000, got 0"
        );
        assert_eq!(
            attribute("engine.handled_types[0]: bad", &found),
            "WORKQUEUE__ENGINE: engine.handled_types[0]: bad"
        );
        assert_eq!(attribute("server.bind: bad", &found), "server.bind: bad");
    }
}
