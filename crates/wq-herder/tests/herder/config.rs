//! Configuration: bad input is refused with every problem named by matcher
//! path and field; absent matchers mean the default set.

use wq_herder::{DEFAULT_MATCHERS_YAML, Herder, HerderConfig, Verdict};

use crate::support::*;

/// The errors of a config that must be refused, as `path: message` lines.
fn refused(yaml: &str) -> Vec<String> {
    match Herder::from_yaml(yaml) {
        Ok(_) => panic!("config accepted:\n{yaml}"),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

/// Exactly one error, starting with `expected`.
fn refused_once(yaml: &str, expected: &str) {
    let errors = refused(yaml);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0].starts_with(expected),
        "expected {expected:?}, got {:?}",
        errors[0]
    );
}

#[test]
fn bad_regex_names_the_matcher_and_the_message() {
    refused_once(
        r#"
matchers:
  - name: fine
    messages: x
  - name: oom
    messages: ["/(unclosed/", OOMKilled]
"#,
        r#"ci_retry.matchers[1] (name "oom").messages[0]: invalid regex: regex parse error:"#,
    );
}

#[test]
fn bad_job_name_regex() {
    refused_once(
        r#"
matchers:
  - name: arm
    job_name: "/[z-a]/"
"#,
        r#"ci_retry.matchers[0] (name "arm").job_name[0]: invalid regex"#,
    );
}

#[test]
fn empty_patterns_are_refused() {
    let errors = refused(
        r#"
matchers:
  - name: empty
    messages: ["", "//"]
"#,
    );
    assert_eq!(
        errors,
        [
            r#"ci_retry.matchers[0] (name "empty").messages[0]: must not be empty"#,
            r#"ci_retry.matchers[0] (name "empty").messages[1]: the regex `//` is empty and would match every text"#,
        ]
    );
}

#[test]
fn unknown_action() {
    refused_once(
        r#"
matchers:
  - name: a
    action: alert
    messages: x
"#,
        r#"ci_retry.matchers[0] (name "a").action: unknown action "alert" (expected "retry" or "report")"#,
    );
}

#[test]
fn delays_must_be_whole_non_negative_seconds() {
    let errors = refused(
        r#"
matchers:
  - name: delays
    failure_reason: api_failure
    retry_delays: [0, -5, 1.5, 5m, 999999999]
"#,
    );
    let prefix = r#"ci_retry.matchers[0] (name "delays").retry_delays"#;
    assert_eq!(
        errors,
        [
            format!("{prefix}[1]: must be an integer between 0 and 604800, not -5 seconds"),
            format!("{prefix}[2]: must be an integer between 0 and 604800, not 1.5 seconds"),
            format!("{prefix}[3]: must be an integer between 0 and 604800, not \"5m\" seconds"),
            format!("{prefix}[4]: must be an integer between 0 and 604800, not 999999999 seconds"),
        ]
    );
}

#[test]
fn delays_must_not_be_empty() {
    refused_once(
        r#"
matchers:
  - name: none
    failure_reason: api_failure
    retry_delays: []
"#,
        r#"ci_retry.matchers[0] (name "none").retry_delays: must list at least one delay"#,
    );
}

#[test]
fn retry_limit_and_tail_lines_ranges() {
    let errors = refused(
        r#"
matchers:
  - name: limits
    retry_limit: -1
    tail_lines: 0
    messages: x
  - name: huge
    retry_limit: 1000
    tail_lines: 2.5
    messages: y
"#,
    );
    assert_eq!(
        errors,
        [
            r#"ci_retry.matchers[0] (name "limits").tail_lines: must be an integer between 1 and 100000000, not 0"#,
            r#"ci_retry.matchers[0] (name "limits").retry_limit: must be an integer between 0 and 100, not -1"#,
            r#"ci_retry.matchers[1] (name "huge").tail_lines: must be an integer between 1 and 100000000, not 2.5"#,
            r#"ci_retry.matchers[1] (name "huge").retry_limit: must be an integer between 0 and 100, not 1000"#,
        ]
    );
}

#[test]
fn names_must_be_present_and_unique_across_the_tree() {
    let errors = refused(
        r#"
matchers:
  - name: dup
    messages: x
  - description: no name
    messages: y
  - name: group
    matchers:
      - name: dup
        messages: z
      - name: "  "
        messages: w
"#,
    );
    assert_eq!(
        errors,
        [
            "ci_retry.matchers[1].name: must not be empty",
            r#"ci_retry.matchers[2].matchers[0] (name "dup").name: "dup" is already the name of ci_retry.matchers[0]"#,
            r#"ci_retry.matchers[2].matchers[1] (name "  ").name: must not be empty"#,
        ]
    );
}

#[test]
fn job_status_and_failure_reason_values_are_checked() {
    let errors = refused(
        r#"
matchers:
  - name: typos
    job_status: [failed, fail]
    failure_reason: ["Runner System Failure", runner_system_failure]
"#,
    );
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(
        errors[0].starts_with(
            r#"ci_retry.matchers[0] (name "typos").job_status[1]: unknown job status "fail" (expected one of created, "#
        ),
        "{}",
        errors[0]
    );
    assert!(
        errors[1].starts_with(
            r#"ci_retry.matchers[0] (name "typos").failure_reason[0]: "Runner System Failure" is not a GitLab failure reason"#
        ),
        "{}",
        errors[1]
    );
}

#[test]
fn every_problem_is_reported_at_once_down_the_tree() {
    let errors = refused(
        r#"
matchers:
  - name: parent
    action: maybe
    matchers:
      - name: child
        messages: "/(/"
        matchers:
          - name: grandchild
            retry_delays: [-1]
"#,
    );
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert!(errors[0].starts_with(r#"ci_retry.matchers[0] (name "parent").action: "#));
    assert!(errors[1].starts_with(
        r#"ci_retry.matchers[0].matchers[0] (name "child").messages[0]: invalid regex"#
    ));
    assert!(errors[2].starts_with(
        r#"ci_retry.matchers[0].matchers[0].matchers[0] (name "grandchild").retry_delays[0]: "#
    ));
}

#[test]
fn unknown_fields_and_wrong_shapes_are_parse_errors() {
    let typo = refused(
        r#"
matchers:
  - name: typo
    mesages: x
"#,
    );
    assert_eq!(typo.len(), 1);
    assert!(typo[0].starts_with("ci_retry: "), "{}", typo[0]);
    assert!(typo[0].contains("mesages"), "{}", typo[0]);

    let shape = refused("matchers:\n  - name: x\n    messages: {a: b}\n");
    assert!(
        shape[0].contains("a string or a list of strings"),
        "{}",
        shape[0]
    );
}

#[test]
fn scalars_and_lists_are_both_accepted() {
    let herder = herder(
        r#"
matchers:
  - name: scalar
    job_name: build
    failure_reason: script_failure
    job_status: failed
    messages: 137
"#,
    );
    let job = failed_job("build");
    assert_eq!(
        herder.evaluate_with_trace(&job, "code 137\n"),
        retry("scalar", 0)
    );
}

#[test]
fn absent_matchers_mean_the_default_set_and_a_list_replaces_it() {
    let absent = HerderConfig::from_yaml("{}").unwrap();
    assert_eq!(absent.matchers, None);
    let compiled = absent.compile().unwrap();
    let default_names: Vec<String> = Herder::default_set()
        .matcher_names()
        .map(str::to_owned)
        .collect();
    assert!(!default_names.is_empty());
    assert_eq!(compiled.matcher_names().collect::<Vec<_>>(), default_names);

    let replaced = HerderConfig::from_yaml("matchers:\n  - name: only\n    messages: x\n")
        .unwrap()
        .compile()
        .unwrap();
    assert_eq!(replaced.matcher_names().collect::<Vec<_>>(), ["only"]);
    let runner = with_reason(failed_job("test"), Some("runner_system_failure"));
    assert_eq!(replaced.evaluate_with_trace(&runner, ""), Verdict::NoMatch);
}

#[test]
fn the_default_yaml_is_a_valid_matchers_list() {
    // An operator can paste it under `ci_retry.matchers`.
    let indented: String = DEFAULT_MATCHERS_YAML
        .lines()
        .map(|line| format!("  {line}\n"))
        .collect();
    let pasted = herder(&format!("matchers:\n{indented}"));
    assert_eq!(
        pasted.matcher_names().collect::<Vec<_>>(),
        Herder::default_set().matcher_names().collect::<Vec<_>>()
    );
}
