//! The CI retry herder's matcher engine (DDR-47): from a failed CI job's
//! facts, and its trace only when needed, decide whether to retry it, when,
//! or to report it. Pure: no I/O, no clock; the caller downloads traces and
//! passes times.
//!
//! # Use
//!
//! ```
//! use wq_herder::{Herder, JobFacts, Preliminary, Verdict};
//!
//! let herder = Herder::default_set();
//! let job = JobFacts {
//!     id: 42,
//!     name: "build x86_64".to_owned(),
//!     status: "failed".to_owned(),
//!     failure_reason: Some("script_failure".to_owned()),
//!     retry_count: 0,
//!     finished_at: None,
//! };
//! let verdict = match herder.prepare(&job) {
//!     Preliminary::Decided(verdict) => verdict,
//!     Preliminary::NeedsTrace(_request) => {
//!         let trace = "Cloning into 'repo'...\nerror: RPC failed; curl 56\n";
//!         herder.evaluate_with_trace(&job, trace)
//!     }
//! };
//! assert_eq!(verdict.matcher(), Some("git-fetch"));
//! ```
//!
//! # Configuration
//!
//! `ci_retry.matchers` is a tree of matchers ([`MatcherConfig`]); without
//! it the default set ([`DEFAULT_MATCHERS_YAML`]) applies, and a list
//! replaces that set entirely. [`HerderConfig::compile`] refuses a bad
//! regex, an unknown action or job status, a negative, fractional or huge
//! number, an empty or duplicate name, each error naming the matcher:
//! `ci_retry.matchers[1] (name "oom").messages[0]: invalid regex: ...`.
//!
//! | field | meaning | inherited | default |
//! |---|---|---|---|
//! | `name` | unique, required; the verdict names it | no | — |
//! | `description` | for people | no | empty |
//! | `action` | `retry` or `report` | yes | `retry` |
//! | `messages` | any of these in the trace window | no (a filter) | none: no trace read |
//! | `tail_lines` | window: the last N lines of the trace | yes | whole trace (as read: the forge client keeps the last 1 MiB) |
//! | `failure_reason` | the job's reason is one of these | no (a filter) | any |
//! | `job_name` | the job's name contains one of these | no (a filter) | any |
//! | `job_status` | the job's status is one of these; `[]` any | yes | `[failed]` |
//! | `retry_limit` | retries per job name and pipeline; 0 never | yes | 3 |
//! | `retry_delays` | seconds, by retry count; last repeats | yes | `[0]` |
//! | `matchers` | children | — | none |
//!
//! A pattern (`messages`, `job_name`) is a literal substring, or a regex
//! when written between slashes: `/exit code 13[0-9]/`. Regexes use the
//! `regex` crate's syntax in multi-line mode, so `^` and `$` anchor at line
//! ends (also before `\r\n`) and `.` never crosses a line, as if each line
//! were searched alone. Matching is case-sensitive; `(?i)` inside the
//! slashes changes that. A string or a list is accepted for every list
//! field (`job_name: test`).
//!
//! # Which matcher decides
//!
//! The tree is walked depth first in document order, and the first matcher
//! *without children* whose checks pass decides:
//!
//! - A matcher's `failure_reason`, `job_name` and `messages` are filters:
//!   they must all pass (each list is "any of"), and a parent's filters must
//!   pass before any of its children is tried. So a parent with `messages`
//!   and children is a filter on the trace for the whole subtree.
//! - A matcher with children never decides itself; when none of its
//!   children matches, the walk goes on with its next sibling.
//! - `action`, `tail_lines`, `job_status`, `retry_limit` and `retry_delays`
//!   are settings: a child without one takes its parent's. `job_status` is
//!   checked on the deciding matcher with its own or inherited list, so only
//!   failed jobs match unless a matcher lists other statuses (`[]`: any).
//!   A parent's `messages` are searched in the parent's window.
//!
//! The deciding matcher gives the [`Verdict`]: `report` gives
//! [`Verdict::Report`]; `retry` gives [`Verdict::LimitReached`] when the
//! job's `retry_count` is at `retry_limit` (so `retry_limit: 0` never
//! retries), otherwise [`Verdict::Retry`] with
//! `delay = retry_delays[min(retry_count, len - 1)]` and
//! `not_before = finished_at + delay`. No deciding matcher:
//! [`Verdict::NoMatch`].
//!
//! # Cheap checks first
//!
//! [`Herder::prepare`] applies the checks that need no trace (status,
//! failure reason, job name) to every candidate in order. When no candidate
//! remains, or the first one reads no trace (for example a
//! `failure_reason`-only matcher), the verdict is final:
//! [`Preliminary::Decided`]. Only when the first remaining candidate has
//! `messages` (its own or a parent's) does it return
//! [`Preliminary::NeedsTrace`], and the caller downloads the trace for
//! [`Herder::evaluate_with_trace`], which gives the same verdict as the
//! two steps would for any trace. The retry count never filters: a matcher
//! at its limit still decides, with [`Verdict::LimitReached`].
//!
//! The trace window is found by scanning backwards for newlines
//! (`memchr::memrchr_iter`), never by splitting the trace, once per distinct
//! `tail_lines`. A matcher alone in its window is searched in one pass
//! (`memchr::memmem` for a lone literal, one regex alternation otherwise).
//! The matchers that share a window are searched together: one regex of all
//! their patterns, whose single pass settles them all when it finds nothing
//! (as for most genuine failures), then a `regex::bytes::RegexSet` pass that
//! tells which of them match. A parent's messages are searched once however
//! many children ask.
//!
//! # Relation to the CKI pipeline-herder
//!
//! The model follows cki-project/cki-tools' `pipeline_herder` as DDR-47
//! describes it (recursive matchers, `/regex/` or literal messages,
//! `tail_lines`, the short-circuit filter chain, `retry_limit` 0 to disable,
//! `job_status: []` for any status), with the reduced field set DDR-47
//! names. Delays are plain seconds here (not `5m` strings) and `alert` is
//! not an action.

mod config;
mod herder;
mod pattern;
mod tail;

pub use config::{
    CONFIG_PATH, ConfigError, ConfigNumber, DEFAULT_ACTION, DEFAULT_JOB_STATUS,
    DEFAULT_RETRY_DELAYS_SECONDS, DEFAULT_RETRY_LIMIT, HerderConfig, JOB_STATUSES,
    MAX_RETRY_DELAY_SECONDS, MAX_RETRY_LIMIT, MAX_TAIL_LINES, MatcherConfig, StringList,
    matchers_from_yaml,
};
pub use herder::{Herder, JobFacts, Preliminary, TraceRequest, Verdict};
pub use pattern::PATTERN_SIZE_LIMIT_BYTES;

/// The shipped matchers, a YAML list in the form of `ci_retry.matchers`:
/// runner and scheduler failures, stuck or timed-out jobs, image pulls,
/// network and DNS errors, OOM kills, git fetch failures, and GitHub
/// Actions runners lost, shut down or past their maximum execution time,
/// each retried up to three times after 0, 60 and 300 seconds.
pub const DEFAULT_MATCHERS_YAML: &str = include_str!("defaults.yaml");
