//! Matcher throughput on a 10 MB synthetic trace: 50 matchers (literals and
//! regexes, a few with `tail_lines`), none of which match before the last,
//! so every window is scanned in full. Prints MB/s of trace per evaluation.
//!
//! `cargo bench -p wq-herder`

use std::hint::black_box;
use std::time::{Duration, Instant};

use wq_herder::{Herder, JobFacts, Preliminary, Verdict};

const TRACE_BYTES: usize = 10 * 1024 * 1024;
const MATCHERS: usize = 50;

fn main() {
    let trace = synthetic_trace(TRACE_BYTES, "ERROR: Job failed: exit code 42\n");
    let genuine = synthetic_trace(TRACE_BYTES, "ERROR: Job failed: exit code 1\n");
    let megabytes = trace.len() as f64 / (1024.0 * 1024.0);
    println!("trace: {megabytes:.1} MiB, {} lines", trace.lines().count());
    let job = JobFacts {
        id: 1,
        name: "test x86_64".to_owned(),
        status: "failed".to_owned(),
        failure_reason: Some("script_failure".to_owned()),
        retry_count: 0,
        finished_at: None,
    };

    let mixed = herder(&matchers_yaml(TailLines::SomeMatchers));
    let expect_last = |verdict: &Verdict| {
        assert_eq!(
            verdict.matcher(),
            Some("last"),
            "only the last matcher matches"
        );
    };
    expect_last(&mixed.evaluate_with_trace(&job, &trace));
    let per_run = time(|| mixed.evaluate_with_trace(&job, &trace), expect_last);
    report(
        "50 matchers (25 literal, 20 regex, 5 with tail_lines), whole trace",
        per_run,
        megabytes,
    );

    let per_run = time(
        || mixed.evaluate_with_trace(&job, &genuine),
        |verdict| assert_eq!(verdict, &Verdict::NoMatch),
    );
    report(
        "the same, no matcher matches (a genuine failure)",
        per_run,
        megabytes,
    );

    let whole = herder(&matchers_yaml(TailLines::None));
    let per_run = time(|| whole.evaluate_with_trace(&job, &trace), expect_last);
    report("50 matchers, all on the whole trace", per_run, megabytes);
    let per_run = time(
        || whole.evaluate_with_trace(&job, &genuine),
        |verdict| assert_eq!(verdict, &Verdict::NoMatch),
    );
    report("the same, no matcher matches", per_run, megabytes);

    for lines in [100, 1_000, 10_000] {
        let tailed = herder(&matchers_yaml(TailLines::All(lines)));
        let per_run = time(|| tailed.evaluate_with_trace(&job, &trace), expect_last);
        println!(
            "{:<72} {:>10.1} µs per evaluation",
            format!("50 matchers, all with tail_lines: {lines}"),
            per_run.as_secs_f64() * 1e6
        );
    }

    let defaults = Herder::default_set();
    let per_run = time(
        || defaults.evaluate_with_trace(&job, &trace),
        |verdict| assert_eq!(verdict, &Verdict::NoMatch),
    );
    println!(
        "{:<72} {:>10.1} µs per evaluation",
        "default set (tail_lines: 100), no match",
        per_run.as_secs_f64() * 1e6
    );

    let runner = JobFacts {
        failure_reason: Some("runner_system_failure".to_owned()),
        ..job.clone()
    };
    let per_run = time(
        || defaults.prepare(&runner),
        |preliminary| assert!(matches!(preliminary, Preliminary::Decided(_))),
    );
    println!(
        "{:<72} {:>10.0} ns per call",
        "prepare, default set, decided by failure_reason",
        per_run.as_secs_f64() * 1e9
    );
    let per_run = time(
        || mixed.prepare(&job),
        |preliminary| assert!(matches!(preliminary, Preliminary::NeedsTrace(_))),
    );
    println!(
        "{:<72} {:>10.0} ns per call",
        "prepare, 50 matchers, needs the trace",
        per_run.as_secs_f64() * 1e9
    );
}

fn herder(yaml: &str) -> Herder {
    Herder::from_yaml(yaml).unwrap_or_else(|errors| panic!("{errors:#?}"))
}

fn report(what: &str, per_run: Duration, megabytes: f64) {
    println!(
        "{what:<72} {:>10.1} ms {:>8.0} MB/s of trace",
        per_run.as_secs_f64() * 1e3,
        megabytes / per_run.as_secs_f64()
    );
}

/// The median time of one call, over enough calls to fill about a second
/// (at least 5).
fn time<T>(mut run: impl FnMut() -> T, check: impl Fn(&T)) -> Duration {
    check(&run());
    let started = Instant::now();
    black_box(run());
    let once = started.elapsed().max(Duration::from_nanos(1));
    let runs = (Duration::from_secs(1).as_nanos() / once.as_nanos()).clamp(5, 1_000_000) as usize;
    let mut samples = Vec::with_capacity(runs.min(101));
    let batch = runs.div_ceil(101).max(1);
    while samples.len() < runs.min(101) {
        let started = Instant::now();
        for _ in 0..batch {
            black_box(run());
        }
        samples.push(started.elapsed() / batch as u32);
    }
    samples.sort();
    samples[samples.len() / 2]
}

enum TailLines {
    /// Five of the fifty matchers have a window.
    SomeMatchers,
    /// No matcher has one.
    None,
    /// Every matcher has this one.
    All(usize),
}

/// 25 literal matchers (1 to 3 literals), 20 regex matchers, 4 mixed, and
/// `last`, the only one whose message is in the trace (on its last line).
fn matchers_yaml(tail: TailLines) -> String {
    let mut yaml = String::from("matchers:\n");
    for index in 0..MATCHERS - 1 {
        yaml.push_str(&format!("  - name: m{index}\n"));
        let window = match tail {
            TailLines::SomeMatchers if index % 10 == 3 => {
                Some([100, 1_000, 10_000, 100_000, 500][index / 10])
            }
            TailLines::SomeMatchers | TailLines::None => None,
            TailLines::All(lines) => Some(lines),
        };
        if let Some(lines) = window {
            yaml.push_str(&format!("    tail_lines: {lines}\n"));
        }
        yaml.push_str("    messages:\n");
        let messages: Vec<String> = match index {
            0..25 => (0..=(index % 3))
                .map(|variant| {
                    LITERALS[(index + variant * 7) % LITERALS.len()]
                        .replace('#', &index.to_string())
                })
                .collect(),
            25..45 => vec![REGEXES[index % REGEXES.len()].replace('#', &index.to_string())],
            _ => vec![
                LITERALS[index % LITERALS.len()].replace('#', &index.to_string()),
                REGEXES[index % REGEXES.len()].replace('#', &index.to_string()),
            ],
        };
        for message in messages {
            yaml.push_str(&format!("      - {message:?}\n"));
        }
    }
    let last_window = match tail {
        TailLines::All(lines) => format!("    tail_lines: {lines}\n"),
        _ => String::new(),
    };
    yaml.push_str(&format!(
        "  - name: last\n{last_window}    messages: \"/^ERROR: Job failed: exit code 4[0-9]$/\"\n"
    ));
    yaml
}

/// Messages that never occur in the trace (`#` becomes the matcher index).
const LITERALS: &[&str] = &[
    "Segmentation fault in helper #",
    "ERR_SOCKET_TIMEOUT_#",
    "panic: runtime error: index out of range [#]",
    "No space left on device (matcher #)",
    "java.lang.OutOfMemoryError: Metaspace #",
    "Too many open files #",
    "fatal: reference is not a tree: #",
    "Service 'postgres-#' is not ready",
    "context deadline exceeded #",
    "HTTP 503 from artifact server #",
    "Bus error (core dumped) #",
];

const REGEXES: &[&str] = &[
    "/^E[0-9]+: lock #[a-z]+ timed out$/",
    "/runner [a-f0-9]{8} lost contact \\(#\\)/",
    "/(?i)certificate verify failed #/",
    "/^fatal: could not read Username for '[^']+' #/",
    "/Killed process [0-9]+ \\(#[a-z]+\\)/",
    "/HTTP (502|503|504) .* #$/",
    "/\\bdeadlock detected #\\b/",
];

/// Deterministic build-and-test output with ANSI colours, section markers,
/// UTF-8 text and long lines, `bytes` long with its last line `ending`.
fn synthetic_trace(bytes: usize, ending: &str) -> String {
    let mut trace = String::with_capacity(bytes + 256);
    trace.push_str("Running with gitlab-runner 17.5.0 (abcdef12)\n");
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut line = 0_u64;
    while trace.len() < bytes - ending.len() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        line += 1;
        match state % 9 {
            0 => trace.push_str(&format!(
                "   Compiling crate-{} v0.{}.{} (/builds/group/project/crates/c{})\n",
                state % 977,
                state % 13,
                state % 7,
                line % 100
            )),
            1 => trace.push_str(&format!(
                "test module_{}::case_{} ... \x1b[32mok\x1b[0m\n",
                state % 311,
                line
            )),
            2 => trace.push_str(&format!(
                "[{:02}:{:02}:{:02}] INFO request id={:016x} path=/api/v4/items/{} status=200 duration_ms={}\n",
                line / 3600 % 24,
                line / 60 % 60,
                line % 60,
                state,
                state % 100_000,
                state % 900
            )),
            3 => trace.push_str(&format!(
                "warning: unused variable: `value_{}`\n  --> src/module_{}.rs:{}:{}\n",
                state % 50,
                state % 40,
                state % 900,
                state % 80
            )),
            4 => trace.push_str(&format!(
                "section_start:{}:step_{}\r\x1b[0K\x1b[36;1mRunning step {}\x1b[0;m\n",
                1_700_000_000 + line,
                line % 20,
                line % 20
            )),
            5 => trace.push_str(&format!(
                "PASSED tests/test_module_{}.py::test_case_{} [{:>3}%]\n",
                state % 97,
                line,
                line % 100
            )),
            6 => trace.push_str(&format!(
                "  {}\n",
                "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
                    .repeat(1 + (state % 3) as usize)
                    .trim_end()
            )),
            7 => trace.push_str(&format!(
                "  \u{2713} renders “{}” in {} ms — café_{}\n",
                state % 1000,
                state % 90,
                line
            )),
            _ => trace.push_str(&format!(
                "Downloading https://registry.example.com/packages/pkg-{}/{}.tar.gz ({} kB)\n",
                state % 5000,
                state % 10,
                state % 4096
            )),
        }
    }
    trace.push_str(ending);
    trace
}
