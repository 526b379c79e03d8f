//! Matching semantics, table-driven: each case is a job, a trace and the
//! expected steps (decided without the trace, or the verdict after it).

use std::time::Duration;

use wq_herder::{Herder, JobFacts, Preliminary, TraceRequest, Verdict};

use crate::support::*;

struct Case {
    what: &'static str,
    job: JobFacts,
    trace: String,
    expected: Steps,
}

fn case(what: &'static str, job: JobFacts, trace: impl Into<String>, expected: Steps) -> Case {
    Case {
        what,
        job,
        trace: trace.into(),
        expected,
    }
}

fn with_trace(asked_by: &str, verdict: Verdict) -> Steps {
    Steps::WithTrace {
        asked_by: asked_by.to_owned(),
        verdict,
    }
}

fn check_all(herder: &Herder, cases: &[Case]) {
    for case in cases {
        let steps = run(herder, &case.job, &case.trace);
        assert_eq!(steps, case.expected, "case: {}", case.what);
    }
}

#[test]
fn literal_and_regex_messages() {
    let herder = herder(
        r#"
matchers:
  - name: literal
    messages: connection refused
  - name: regex
    messages: "/exit code 1[0-9]{2}$/"
  - name: literal-with-regex-characters
    messages: ["a.b[c]", "(unused)"]
"#,
    );
    let job = failed_job("test");
    check_all(
        &herder,
        &[
            case(
                "literal anywhere in the trace",
                job.clone(),
                "step 1\ncurl: (7) connection refused\nstep 3\n",
                with_trace("literal", retry("literal", 0)),
            ),
            case(
                "literal is case-sensitive",
                job.clone(),
                "Connection Refused\n",
                with_trace("literal", Verdict::NoMatch),
            ),
            case(
                "regex",
                job.clone(),
                "ERROR: Job failed: exit code 137\n",
                with_trace("literal", retry("regex", 0)),
            ),
            case(
                "regex anchored at the line end",
                job.clone(),
                "exit code 137 (ignored)\n",
                with_trace("literal", Verdict::NoMatch),
            ),
            case(
                "regex that does not match",
                job.clone(),
                "ERROR: Job failed: exit code 1\n",
                with_trace("literal", Verdict::NoMatch),
            ),
            case(
                "literal with regex characters is taken literally",
                job.clone(),
                "got a.b[c] here\n",
                with_trace("literal", retry("literal-with-regex-characters", 0)),
            ),
            case(
                "and not as a regex",
                job.clone(),
                "got axbc here\n",
                with_trace("literal", Verdict::NoMatch),
            ),
            case(
                "first matching matcher in document order wins",
                job.clone(),
                "exit code 137\nconnection refused\n",
                with_trace("literal", retry("literal", 0)),
            ),
        ],
    );
}

#[test]
fn tail_lines_window() {
    let herder = herder(
        r#"
matchers:
  - name: tail
    tail_lines: 3
    messages: [MARKER, "/^ANCHORED$/"]
"#,
    );
    let job = failed_job("test");
    let asked = |verdict| with_trace("tail", verdict);
    check_all(
        &herder,
        &[
            case(
                "above the window does not count",
                job.clone(),
                format!("{}MARKER\n{}", filler(10), filler(3)),
                asked(Verdict::NoMatch),
            ),
            case(
                "first line of the window counts",
                job.clone(),
                format!("{}MARKER\n{}", filler(10), filler(2)),
                asked(retry("tail", 0)),
            ),
            case(
                "last line without a final newline",
                job.clone(),
                format!("{}MARKER", filler(10)),
                asked(retry("tail", 0)),
            ),
            case(
                "a final newline does not use up a line of the window",
                job.clone(),
                format!("{}MARKER\n{}\n", filler(10), "x\ny".to_owned()),
                asked(retry("tail", 0)),
            ),
            case(
                "regex in the window",
                job.clone(),
                format!("{}ANCHORED\r\n{}", filler(10), filler(1)),
                asked(retry("tail", 0)),
            ),
            case(
                "regex above the window",
                job.clone(),
                format!("ANCHORED\n{}", filler(3)),
                asked(Verdict::NoMatch),
            ),
            case(
                "a short trace is searched whole",
                job.clone(),
                "MARKER\n",
                asked(retry("tail", 0)),
            ),
        ],
    );
}

#[test]
fn tail_lines_is_inherited_and_a_child_can_widen_it() {
    let herder = herder(
        r#"
matchers:
  - name: group
    tail_lines: 2
    matchers:
      - name: narrow
        messages: NARROW
      - name: wide
        tail_lines: 50
        messages: WIDE
"#,
    );
    let job = failed_job("test");
    check_all(
        &herder,
        &[
            case(
                "inherited window excludes",
                job.clone(),
                format!("NARROW\n{}", filler(2)),
                with_trace("narrow", Verdict::NoMatch),
            ),
            case(
                "inherited window includes",
                job.clone(),
                format!("NARROW\n{}", filler(1)),
                with_trace("narrow", retry("narrow", 0)),
            ),
            case(
                "own window",
                job.clone(),
                format!("WIDE\n{}", filler(40)),
                with_trace("narrow", retry("wide", 0)),
            ),
        ],
    );
}

#[test]
fn nested_matchers_inherit_the_action() {
    let herder = herder(
        r#"
matchers:
  - name: known-bugs
    action: report
    matchers:
      - name: kernel-panic
        messages: Kernel panic
      - name: flaky-but-retried
        action: retry
        messages: flaky test
      - name: deeper
        matchers:
          - name: deep-child
            messages: deep problem
  - name: also-panic
    messages: Kernel panic
"#,
    );
    let job = failed_job("test");
    check_all(
        &herder,
        &[
            case(
                "child of a report parent reports",
                job.clone(),
                "Kernel panic - not syncing\n",
                with_trace("kernel-panic", report("kernel-panic")),
            ),
            case(
                "a child can override the action",
                job.clone(),
                "flaky test\n",
                with_trace("kernel-panic", retry("flaky-but-retried", 0)),
            ),
            case(
                "the action is inherited through two levels",
                job.clone(),
                "deep problem\n",
                with_trace("kernel-panic", report("deep-child")),
            ),
            case(
                "the earlier subtree wins over a later sibling",
                job.clone(),
                "Kernel panic\n",
                with_trace("kernel-panic", report("kernel-panic")),
            ),
        ],
    );
    // A parent never decides itself: the verdicts name only leaves.
    let names: Vec<&str> = herder.matcher_names().collect();
    assert_eq!(
        names,
        [
            "kernel-panic",
            "flaky-but-retried",
            "deep-child",
            "also-panic"
        ]
    );
}

#[test]
fn parent_filters_apply_to_the_whole_subtree() {
    let herder = herder(
        r#"
matchers:
  - name: build-jobs-with-ccache
    job_name: "/^build /"
    messages: ccache
    matchers:
      - name: disk-full-in-build
        messages: No space left on device
  - name: disk-full
    action: report
    messages: No space left on device
"#,
    );
    let both = "ccache: hit\nwrite: No space left on device\n";
    check_all(
        &herder,
        &[
            case(
                "parent and child filters pass",
                failed_job("build x86_64"),
                both,
                with_trace("disk-full-in-build", retry("disk-full-in-build", 0)),
            ),
            case(
                "parent's messages fail: the next sibling decides",
                failed_job("build x86_64"),
                "write: No space left on device\n",
                with_trace("disk-full-in-build", report("disk-full")),
            ),
            case(
                "parent's job name fails: its subtree is skipped without the trace",
                failed_job("test x86_64"),
                both,
                with_trace("disk-full", report("disk-full")),
            ),
            case(
                "parent passes, no child matches: the walk goes on",
                failed_job("build x86_64"),
                "ccache: hit\nerror[E0308]: mismatched types\n",
                with_trace("disk-full-in-build", Verdict::NoMatch),
            ),
        ],
    );
}

#[test]
fn failure_reason_only_matchers_decide_without_the_trace() {
    let herder = herder(
        r#"
matchers:
  - name: runner
    failure_reason: [runner_system_failure, api_failure]
  - name: boom
    messages: boom
"#,
    );
    let job = failed_job("test");
    check_all(
        &herder,
        &[
            case(
                "runner_system_failure",
                with_reason(job.clone(), Some("runner_system_failure")),
                "boom\n",
                Steps::Decided(retry("runner", 0)),
            ),
            case(
                "api_failure (a scalar list entry)",
                with_reason(job.clone(), Some("api_failure")),
                "",
                Steps::Decided(retry("runner", 0)),
            ),
            case(
                "another reason needs the trace",
                with_reason(job.clone(), Some("script_failure")),
                "boom\n",
                with_trace("boom", retry("boom", 0)),
            ),
            case(
                "no reason at all needs the trace",
                with_reason(job.clone(), None),
                "nothing\n",
                with_trace("boom", Verdict::NoMatch),
            ),
        ],
    );
}

#[test]
fn a_message_matcher_before_a_reason_matcher_needs_the_trace() {
    // Document order decides, so the earlier message matcher must be read
    // first even when a later reason-only matcher would match.
    let herder = herder(
        r#"
matchers:
  - name: known-bug
    action: report
    messages: Segmentation fault in runner helper
  - name: runner
    failure_reason: runner_system_failure
"#,
    );
    let job = with_reason(failed_job("test"), Some("runner_system_failure"));
    check_all(
        &herder,
        &[
            case(
                "message found",
                job.clone(),
                "Segmentation fault in runner helper\n",
                with_trace("known-bug", report("known-bug")),
            ),
            case(
                "message absent: the reason matcher decides",
                job.clone(),
                "ok\n",
                with_trace("known-bug", retry("runner", 0)),
            ),
        ],
    );
}

#[test]
fn retry_limit_and_delays() {
    let herder = herder(
        r#"
matchers:
  - name: runner
    failure_reason: runner_system_failure
    retry_limit: 5
    retry_delays: [0, 60, 300]
  - name: never
    failure_reason: stuck_or_timeout_failure
    retry_limit: 0
  - name: defaults
    failure_reason: api_failure
  - name: group
    retry_limit: 1
    retry_delays: [30]
    matchers:
      - name: inherits
        failure_reason: scheduler_failure
  - name: reported
    action: report
    failure_reason: data_integrity_failure
    retry_limit: 1
"#,
    );
    let job = |reason: &str, retries: u32| {
        with_retries(with_reason(failed_job("test"), Some(reason)), retries)
    };
    let decided = Steps::Decided;
    check_all(
        &herder,
        &[
            case(
                "first retry",
                job("runner_system_failure", 0),
                "",
                decided(retry("runner", 0)),
            ),
            case(
                "second retry",
                job("runner_system_failure", 1),
                "",
                decided(retry("runner", 60)),
            ),
            case(
                "third retry",
                job("runner_system_failure", 2),
                "",
                decided(retry("runner", 300)),
            ),
            case(
                "the last delay repeats",
                job("runner_system_failure", 3),
                "",
                decided(retry("runner", 300)),
            ),
            case(
                "still repeating below the limit",
                job("runner_system_failure", 4),
                "",
                decided(retry("runner", 300)),
            ),
            case(
                "at the limit",
                job("runner_system_failure", 5),
                "",
                decided(limit_reached("runner", 5)),
            ),
            case(
                "past the limit",
                job("runner_system_failure", 9),
                "",
                decided(limit_reached("runner", 5)),
            ),
            case(
                "retry_limit 0 never retries",
                job("stuck_or_timeout_failure", 0),
                "",
                decided(limit_reached("never", 0)),
            ),
            case(
                "default delay 0",
                job("api_failure", 2),
                "",
                decided(retry("defaults", 0)),
            ),
            case(
                "default limit 3",
                job("api_failure", 3),
                "",
                decided(limit_reached("defaults", 3)),
            ),
            case(
                "inherited delays",
                job("scheduler_failure", 0),
                "",
                decided(retry("inherits", 30)),
            ),
            case(
                "inherited limit",
                job("scheduler_failure", 1),
                "",
                decided(limit_reached("inherits", 1)),
            ),
            case(
                "report ignores the limit",
                job("data_integrity_failure", 7),
                "",
                decided(report("reported")),
            ),
        ],
    );
}

#[test]
fn not_before_is_finished_at_plus_delay_and_absent_without_finished_at() {
    let herder = herder(
        r#"
matchers:
  - name: runner
    failure_reason: runner_system_failure
    retry_delays: [90]
"#,
    );
    let mut job = with_reason(failed_job("test"), Some("runner_system_failure"));
    assert_eq!(
        herder.prepare(&job),
        Preliminary::Decided(Verdict::Retry {
            matcher: "runner".to_owned(),
            delay: Duration::from_secs(90),
            not_before: Some(FINISHED_AT + time::Duration::seconds(90)),
        })
    );
    job.finished_at = None;
    assert_eq!(
        herder.prepare(&job),
        Preliminary::Decided(Verdict::Retry {
            matcher: "runner".to_owned(),
            delay: Duration::from_secs(90),
            not_before: None,
        })
    );
}

#[test]
fn only_failed_jobs_match_unless_a_matcher_lists_other_statuses() {
    let herder = herder(
        r#"
matchers:
  - name: default-status
    messages: OOMKilled
  - name: canceled-too
    job_status: [failed, canceled]
    messages: runner went away
  - name: any-status
    job_status: []
    job_name: audit
    messages: audit finding
  - name: group
    job_status: [success]
    matchers:
      - name: inherited-status
        messages: tests did not run
"#,
    );
    let all = "OOMKilled\nrunner went away\naudit finding\ntests did not run\n";
    let job = failed_job("test");
    check_all(
        &herder,
        &[
            case(
                "failed",
                job.clone(),
                all,
                with_trace("default-status", retry("default-status", 0)),
            ),
            case(
                "success never matches a matcher with the default status",
                with_status(job.clone(), "success"),
                "OOMKilled\nrunner went away\n",
                with_trace("inherited-status", Verdict::NoMatch),
            ),
            case(
                "no matcher takes running: decided without the trace",
                with_status(job.clone(), "running"),
                all,
                Steps::Decided(Verdict::NoMatch),
            ),
            case(
                "canceled, listed explicitly",
                with_status(job.clone(), "canceled"),
                all,
                with_trace("canceled-too", retry("canceled-too", 0)),
            ),
            case(
                "[] is any status",
                with_status(failed_job("audit"), "manual"),
                all,
                with_trace("any-status", retry("any-status", 0)),
            ),
            case(
                "status inherited from the parent",
                with_status(job.clone(), "success"),
                all,
                with_trace("inherited-status", retry("inherited-status", 0)),
            ),
            case(
                "failed does not match the inherited [success]",
                job.clone(),
                "tests did not run\n",
                with_trace("default-status", Verdict::NoMatch),
            ),
        ],
    );
}

#[test]
fn job_name_filters() {
    let herder = herder(
        r#"
matchers:
  - name: arm
    job_name: ["/aarch64$/", arm64]
    failure_reason: script_failure
"#,
    );
    let arm = Steps::Decided(retry("arm", 0));
    let none = Steps::Decided(Verdict::NoMatch);
    check_all(
        &herder,
        &[
            case(
                "regex at the end",
                failed_job("build aarch64"),
                "",
                arm.clone(),
            ),
            case(
                "literal anywhere",
                failed_job("test arm64 kvm"),
                "",
                arm.clone(),
            ),
            case("neither", failed_job("build x86_64"), "", none.clone()),
            case(
                "regex anchored at the end",
                failed_job("aarch64 build"),
                "",
                none.clone(),
            ),
            case("case-sensitive", failed_job("build ARM64"), "", none),
        ],
    );
}

#[test]
fn the_trace_request_says_how_much_is_needed_and_whether_a_retry_can_follow() {
    let herder = herder(
        r#"
matchers:
  - name: short
    tail_lines: 10
    messages: a
  - name: long
    tail_lines: 500
    messages: b
  - name: reason
    failure_reason: runner_system_failure
    retry_limit: 1
  - name: whole
    messages: c
  - name: reported
    action: report
    messages: d
"#,
    );
    let job = failed_job("test");
    assert_eq!(
        herder.prepare(&job),
        Preliminary::NeedsTrace(TraceRequest {
            matcher: "short".to_owned(),
            tail_lines: None,
            retry_possible: true,
        }),
        "`whole` reads the whole trace"
    );
    // A reason-only candidate ends the list: `whole` can never decide.
    let runner = with_reason(job.clone(), Some("runner_system_failure"));
    assert_eq!(
        herder.prepare(&runner),
        Preliminary::NeedsTrace(TraceRequest {
            matcher: "short".to_owned(),
            tail_lines: Some(500),
            retry_possible: true,
        })
    );
    // At every limit only `reported` or a LimitReached can follow.
    let exhausted = with_retries(runner, 3);
    assert_eq!(
        herder.prepare(&exhausted),
        Preliminary::NeedsTrace(TraceRequest {
            matcher: "short".to_owned(),
            tail_lines: Some(500),
            retry_possible: false,
        })
    );
    assert_eq!(
        herder.evaluate_with_trace(&exhausted, "b\n"),
        limit_reached("long", 3)
    );
    assert_eq!(
        herder.evaluate_with_trace(&exhausted, "x\n"),
        limit_reached("reason", 1)
    );
}

#[test]
fn a_herder_without_matchers_never_matches() {
    let herder = herder("matchers: []\n");
    let job = with_reason(failed_job("test"), Some("runner_system_failure"));
    assert_eq!(herder.prepare(&job), Preliminary::Decided(Verdict::NoMatch));
    assert_eq!(
        herder.evaluate_with_trace(&job, "OOMKilled\n"),
        Verdict::NoMatch
    );
    assert_eq!(herder.matcher_names().count(), 0);
}

#[test]
fn a_trace_that_is_not_utf8_is_searched_as_bytes() {
    let herder = herder(
        r#"
matchers:
  - name: literal
    messages: connection reset
  - name: regex
    messages: "/^fatal: .*EOF$/"
"#,
    );
    let job = failed_job("test");
    let mut trace = b"binary \xff\xfe garbage\n".to_vec();
    trace.extend_from_slice(b"fatal: early EOF\n");
    assert_eq!(
        herder.evaluate_with_trace_bytes(&job, &trace),
        retry("regex", 0)
    );
    trace.extend_from_slice(b"connection reset\n");
    assert_eq!(
        herder.evaluate_with_trace_bytes(&job, &trace),
        retry("literal", 0)
    );
}

#[test]
fn descriptions_are_looked_up_by_name() {
    let herder = herder(
        r#"
matchers:
  - name: group
    description: A group
    matchers:
      - name: leaf
        description: A leaf
        messages: x
"#,
    );
    assert_eq!(herder.description("leaf"), Some("A leaf"));
    assert_eq!(herder.description("group"), Some("A group"));
    assert_eq!(herder.description("missing"), None);
}

#[test]
fn matchers_with_different_windows_each_search_their_own() {
    let herder = herder(
        r#"
matchers:
  - name: tail-x
    tail_lines: 2
    messages: X
  - name: tail-y
    tail_lines: 2
    messages: "/^Y$/"
  - name: whole-y
    messages: "/^Y$/"
  - name: whole-x
    messages: X
"#,
    );
    let job = failed_job("test");
    check_all(
        &herder,
        &[
            case(
                "both above the short window",
                job.clone(),
                format!("X\nY\n{}", filler(5)),
                with_trace("tail-x", retry("whole-y", 0)),
            ),
            case(
                "only X above the short window",
                job.clone(),
                format!("X\n{}Y\n", filler(5)),
                with_trace("tail-x", retry("tail-y", 0)),
            ),
            case(
                "X inside it",
                job.clone(),
                format!("{}Y\nX\n", filler(5)),
                with_trace("tail-x", retry("tail-x", 0)),
            ),
            case(
                "only X, far up",
                job.clone(),
                format!("X\n{}", filler(5)),
                with_trace("tail-x", retry("whole-x", 0)),
            ),
            case(
                "neither",
                job.clone(),
                filler(5),
                with_trace("tail-x", Verdict::NoMatch),
            ),
        ],
    );
}
