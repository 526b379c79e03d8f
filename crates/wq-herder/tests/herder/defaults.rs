//! The shipped default set: each matcher is hit by a realistic failure, and
//! genuine test failures are left alone.

use wq_herder::{Herder, Verdict};

use crate::support::*;

#[test]
fn the_default_set_compiles_with_the_documented_matchers() {
    let herder = Herder::default_set();
    assert_eq!(
        herder.matcher_names().collect::<Vec<_>>(),
        [
            "runner-system-failure",
            "stuck-or-timeout",
            "image-pull",
            "network",
            "oom-killed",
            "git-fetch",
            "github-runner-lost",
            "github-job-timeout",
            "github-runner-shutdown",
        ]
    );
    for name in herder.matcher_names() {
        assert!(
            !herder.description(name).unwrap_or_default().is_empty(),
            "{name} has no description"
        );
    }
}

#[test]
fn infrastructure_failure_reasons_are_retried_without_the_trace() {
    let herder = Herder::default_set();
    let cases = [
        ("runner_system_failure", "runner-system-failure"),
        ("scheduler_failure", "runner-system-failure"),
        ("api_failure", "runner-system-failure"),
        ("stuck_or_timeout_failure", "stuck-or-timeout"),
        ("timed_out", "stuck-or-timeout"),
    ];
    for (reason, matcher) in cases {
        let job = with_reason(failed_job("test"), Some(reason));
        let expected = [
            retry(matcher, 0),
            retry(matcher, 60),
            retry(matcher, 300),
            limit_reached(matcher, 3),
        ];
        for (retries, verdict) in (0..).zip(expected) {
            let steps = run(&herder, &with_retries(job.clone(), retries), "");
            assert_eq!(
                steps,
                Steps::Decided(verdict),
                "{reason}, {retries} retries"
            );
        }
    }
}

/// A realistic trace: job preamble, `noise` lines of output, then `ending`.
fn trace(noise: usize, ending: &str) -> String {
    format!(
        "Running with gitlab-runner 17.5.0 (abcdef12)\n  on runner-7 t3_abc\n\
         Preparing the \"docker\" executor\n{}{ending}",
        filler(noise)
    )
}

#[test]
fn realistic_traces_hit_each_message_matcher() {
    let herder = Herder::default_set();
    let cases = [
        (
            "image-pull",
            "WARNING: Failed to pull image with policy \"always\": Error response from daemon: \
             manifest for registry.example.com/ci/builder:latest not found: manifest unknown: \
             manifest unknown (manager.go:250:0s)\n\
             ERROR: Job failed: failed to pull image \"registry.example.com/ci/builder:latest\"\n",
        ),
        (
            "image-pull",
            "Waiting for pod ci/runner-abc-project-1-concurrent-0 to be running, status is Pending\n\
             \tContainer \"build\" is waiting: ErrImagePull\n\
             ERROR: Job failed (system failure): prepare environment: waiting for pod running: \
             pulling image \"registry.example.com/ci/builder:latest\": image pull failed: \
             Back-off pulling image\n",
        ),
        (
            "image-pull",
            "Error response from daemon: toomanyrequests: You have reached your pull rate limit. \
             You may increase the limit by authenticating and upgrading\n",
        ),
        (
            "network",
            "$ curl -fsSL https://static.example.com/tool.tar.gz -o tool.tar.gz\n\
             curl: (6) Could not resolve host: static.example.com\n\
             ERROR: Job failed: exit code 6\n",
        ),
        (
            "network",
            "Err:1 http://deb.debian.org/debian bookworm InRelease\n  \
             Temporary failure in name resolution\n\
             E: Unable to locate package build-essential\n\
             ERROR: Job failed: exit code 100\n",
        ),
        (
            "network",
            "go: downloading golang.org/x/sys v0.20.0\n\
             go: golang.org/x/sys@v0.20.0: Get \"https://proxy.golang.org/golang.org/x/sys/@v/v0.20.0.zip\": \
             dial tcp 142.250.0.1:443: i/o timeout\n\
             ERROR: Job failed: exit code 1\n",
        ),
        (
            "network",
            "Error response from daemon: Get \"https://registry-1.docker.io/v2/\": \
             net/http: TLS handshake timeout\n",
        ),
        (
            "network",
            "npm ERR! code ECONNRESET\nnpm ERR! errno ECONNRESET\n\
             npm ERR! network read ECONNRESET: Connection reset by peer\n",
        ),
        (
            "oom-killed",
            "ERROR: Job failed (system failure): pod \"ci/runner-abc\" status is \"Failed\": \
             container \"build\" terminated: OOMKilled\n",
        ),
        (
            "oom-killed",
            "[ 1234.5678] Out of memory: Killed process 4242 (cc1plus) total-vm:4194304kB\n",
        ),
        (
            "oom-killed",
            "c++: fatal error: Killed signal terminated program cc1plus\n\
             ERROR: Job failed: exit code 137\n",
        ),
        (
            "oom-killed",
            "/usr/bin/bash: line 154:   4711 Killed                  make -j16 all\n\
             ERROR: Job failed: exit code 1\n",
        ),
        ("oom-killed", "running the linker\nKilled\n"),
        (
            "git-fetch",
            "Fetching changes with git depth set to 20...\n\
             fatal: unable to access 'https://gitlab.example.com/group/project.git/': \
             The requested URL returned error: 502\n",
        ),
        (
            "git-fetch",
            "error: RPC failed; curl 18 transfer closed with outstanding read data remaining\n\
             fetch-pack: unexpected disconnect while reading sideband packet\n\
             fatal: early EOF\nfatal: fetch-pack: invalid index-pack output\n",
        ),
    ];
    for (matcher, ending) in cases {
        let job = failed_job("build x86_64");
        let text = trace(500, ending);
        assert_eq!(
            run(&herder, &job, &text),
            Steps::WithTrace {
                asked_by: "image-pull".to_owned(),
                verdict: retry(matcher, 0),
            },
            "{ending}"
        );
    }
}

/// A GitHub Actions job log: timestamped lines, `noise` of output, then
/// `ending` (each of its lines timestamped too).
fn github_log(noise: usize, ending: &str) -> String {
    let stamp = "2026-11-30T12:00:00.0000000Z";
    let mut text =
        format!("{stamp} Current runner version: '2.321.0'\n{stamp} ##[group]Run make test\n");
    for line in filler(noise).lines().chain(ending.lines()) {
        text.push_str(&format!("{stamp} {line}\n"));
    }
    text
}

#[test]
fn github_actions_runner_failures_hit_their_matchers() {
    let herder = Herder::default_set();
    let cases = [
        (
            "github-runner-lost",
            "##[error]The self-hosted runner: ci-runner-7 lost communication with the server. \
             Verify the machine is running and has a healthy network connection. Anything in \
             your workflow that terminates the runner process, starves it for CPU/Memory, or \
             blocks its network access can cause this error.",
        ),
        (
            "github-runner-lost",
            "##[error]The hosted runner: GitHub Actions 9 lost communication with the server. \
             Anything in your workflow that terminates the runner process, starves it for \
             CPU/Memory, or blocks its network access can cause this error.",
        ),
        (
            "github-runner-shutdown",
            "##[error]The runner has received a shutdown signal. This can happen when the runner \
             service is stopped, or a manually started runner is canceled.\n\
             ##[error]Process completed with exit code 143.\n\
             Cleaning up orphan processes",
        ),
        (
            "github-runner-shutdown",
            "npm run build\n##[error]The operation was canceled.\nCleaning up orphan processes",
        ),
        (
            "github-job-timeout",
            "##[error]The job running on runner GitHub Actions 3 has exceeded the maximum \
             execution time of 360 minutes.\n##[error]The operation was canceled.",
        ),
        (
            "github-job-timeout",
            "##[error]The job has exceeded the maximum execution time of 6h0m0s",
        ),
    ];
    for (matcher, ending) in cases {
        // A failed step's name is the GitHub job's failure reason.
        let job = with_reason(failed_job("unit"), Some("Run tests"));
        let text = github_log(300, ending);
        assert_eq!(
            run(&herder, &job, &text).verdict(),
            &retry(matcher, 0),
            "{ending}"
        );
    }
    // A cancelled job (by a person or a newer run) is not failed: left alone.
    let cancelled = with_status(
        with_reason(failed_job("unit"), Some("cancelled")),
        "canceled",
    );
    assert_eq!(
        run(
            &herder,
            &cancelled,
            &github_log(10, "##[error]The operation was canceled.")
        ),
        Steps::Decided(Verdict::NoMatch)
    );
    // A genuine GitHub failure.
    let failed = with_reason(failed_job("unit"), Some("Run tests"));
    let text = github_log(
        300,
        "test result: FAILED. 11 passed; 1 failed; 0 ignored\n\
         ##[error]Process completed with exit code 101.",
    );
    assert_eq!(run(&herder, &failed, &text).verdict(), &Verdict::NoMatch);
}

#[test]
fn genuine_failures_are_not_retried() {
    let herder = Herder::default_set();
    let endings = [
        // pytest
        "tests/test_x.py::test_parse FAILED                                  [ 50%]\n\
         E       assert 1 == 2\n\
         FAILED tests/test_x.py::test_parse - assert 1 == 2\n\
         ========================= 1 failed, 41 passed in 3.21s =========================\n\
         ERROR: Job failed: exit code 1\n",
        // cargo test
        "---- tests::parses stdout ----\n\
         thread 'tests::parses' panicked at src/lib.rs:10:9:\n\
         assertion failed: `(left == right)`\n  left: `1`,\n right: `2`\n\
         test result: FAILED. 11 passed; 1 failed; 0 ignored\n\
         error: test failed, to rerun pass `--lib`\n\
         ERROR: Job failed: exit code 101\n",
        // a compiler error
        "error[E0308]: mismatched types\n --> src/main.rs:4:18\n\
         error: could not compile `app` (bin \"app\") due to 1 previous error\n\
         ERROR: Job failed: exit code 101\n",
        // a test about killing processes
        "FAILED tests/test_signals.py::test_child_is_Killed_on_timeout\n\
         ERROR: Job failed: exit code 1\n",
    ];
    for ending in endings {
        let job = failed_job("test");
        let steps = run(&herder, &job, &trace(500, ending));
        assert_eq!(steps.verdict(), &Verdict::NoMatch, "{ending}");
    }
}

#[test]
fn transient_messages_far_above_the_end_do_not_count() {
    // A test suite that logged a reset connection early, then failed an
    // assertion: the window of the last 100 lines leaves the old message out.
    let herder = Herder::default_set();
    let text = format!(
        "{}WARN retrying after: Connection reset by peer\n{}\
         FAILED tests/test_x.py::test_y - assert 1 == 2\n",
        filler(50),
        filler(150)
    );
    let steps = run(&herder, &failed_job("test"), &text);
    assert_eq!(steps.verdict(), &Verdict::NoMatch);
    // The same message near the end is taken.
    let near_the_end = format!("{}Connection reset by peer\n{}", filler(150), filler(20));
    let steps = run(&herder, &failed_job("test"), &near_the_end);
    assert_eq!(steps.verdict(), &retry("network", 0));
}

#[test]
fn the_default_set_leaves_jobs_that_did_not_fail_alone() {
    let herder = Herder::default_set();
    for status in ["success", "canceled", "running", "skipped", "manual"] {
        let job = with_status(
            with_reason(failed_job("test"), Some("runner_system_failure")),
            status,
        );
        assert_eq!(
            run(&herder, &job, "OOMKilled\n"),
            Steps::Decided(Verdict::NoMatch),
            "{status}"
        );
    }
}
