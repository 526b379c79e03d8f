//! The compiled matcher tree and its evaluation: [`Herder::prepare`] on the
//! job's facts alone, [`Herder::evaluate_with_trace`] once the trace is
//! there.

use std::collections::BTreeMap;
use std::time::Duration;

use time::OffsetDateTime;

use crate::pattern::{CombinedSets, PatternSet};
use crate::tail::tail_start;

/// What the herder knows about a finished job before reading its trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFacts {
    pub id: u64,
    /// The job's name, e.g. `test x86_64`.
    pub name: String,
    /// GitLab job status, e.g. `failed`.
    pub status: String,
    /// GitLab's `failure_reason`, e.g. `runner_system_failure`.
    pub failure_reason: Option<String>,
    /// How many times a job of this name was already retried in this
    /// pipeline.
    pub retry_count: u32,
    /// When the job finished (`build_finished_at` of the webhook).
    pub finished_at: Option<OffsetDateTime>,
}

/// The decision for one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No matcher applies: a genuine failure, or not a failure at all.
    NoMatch,
    /// Retry the job once `delay` has passed.
    Retry {
        matcher: String,
        /// `retry_delays[retry_count]`, the last value repeating.
        delay: Duration,
        /// `finished_at + delay`; `None` without `finished_at`.
        not_before: Option<OffsetDateTime>,
    },
    /// The matcher's action is `report`: a known problem a retry does not
    /// fix.
    Report { matcher: String },
    /// The matcher applies but the job was already retried `limit` times.
    LimitReached { matcher: String, limit: u32 },
}

impl Verdict {
    /// The name of the matcher that decided, if any.
    pub fn matcher(&self) -> Option<&str> {
        match self {
            Verdict::NoMatch => None,
            Verdict::Retry { matcher, .. }
            | Verdict::Report { matcher }
            | Verdict::LimitReached { matcher, .. } => Some(matcher),
        }
    }
}

/// The outcome of [`Herder::prepare`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preliminary {
    /// Final: [`Herder::evaluate_with_trace`] would give the same verdict
    /// for any trace, so do not download it.
    Decided(Verdict),
    /// A matcher whose cheap checks pass searches the trace; download it
    /// and call [`Herder::evaluate_with_trace`].
    NeedsTrace(TraceRequest),
}

/// Why and how much of the trace is needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRequest {
    /// The first matcher that reads the trace.
    pub matcher: String,
    /// The most lines from the end any candidate reads; `None`: the whole
    /// trace. A caller that streams the trace may keep only this many.
    pub tail_lines: Option<usize>,
    /// Whether the verdict can still be [`Verdict::Retry`]. `false` when
    /// every candidate is a `report` or at its retry limit: a caller that
    /// acts only on retries may skip the download.
    pub retry_possible: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Retry,
    Report,
}

/// One matcher's own checks (every matcher in the tree has one).
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) description: String,
    /// Empty: any reason.
    pub(crate) failure_reasons: Vec<String>,
    pub(crate) job_name: Option<PatternSet>,
    pub(crate) messages: Option<PatternSet>,
    /// Window of `messages` (own or inherited); `None`: the whole trace the
    /// forge client read (its last `wq_forge::TRACE_TAIL_BYTES`, 1 MiB).
    pub(crate) tail_lines: Option<usize>,
    /// `(group, position)`: this node's patterns are number `position` of
    /// `Herder::groups[group]`, the nodes sharing its window.
    pub(crate) group: Option<(usize, usize)>,
}

/// A matcher without children, with its settings resolved through
/// inheritance.
#[derive(Debug, Clone)]
pub(crate) struct Leaf {
    /// Its own node.
    pub(crate) node: usize,
    /// Nodes whose checks must all pass, from the top-level matcher down to
    /// `node`.
    pub(crate) chain: Vec<usize>,
    /// Empty: any status.
    pub(crate) job_status: Vec<String>,
    pub(crate) action: Action,
    pub(crate) retry_limit: u32,
    /// Never empty.
    pub(crate) retry_delays: Vec<Duration>,
}

/// The compiled matcher tree. Build it with [`crate::HerderConfig::compile`]
/// or [`Herder::default_set`]; it is immutable and cheap to share.
#[derive(Debug, Clone)]
pub struct Herder {
    /// Every matcher in document order (depth first).
    nodes: Vec<Node>,
    /// The matchers without children in document order: the candidates.
    leaves: Vec<Leaf>,
    /// The patterns of the nodes that share a window, searched together.
    groups: Vec<CombinedSets>,
}

impl Herder {
    pub(crate) fn new(mut nodes: Vec<Node>, leaves: Vec<Leaf>) -> Herder {
        debug_assert!(leaves.iter().all(|leaf| !leaf.retry_delays.is_empty()));
        let mut by_window: BTreeMap<Option<usize>, Vec<usize>> = BTreeMap::new();
        for (index, node) in nodes.iter().enumerate() {
            if node.messages.is_some() {
                by_window.entry(node.tail_lines).or_default().push(index);
            }
        }
        let mut groups = Vec::new();
        for members in by_window.into_values().filter(|members| members.len() > 1) {
            let sets = members
                .iter()
                .filter_map(|&index| nodes[index].messages.as_ref());
            if let Some(combined) = CombinedSets::of(sets) {
                for (position, &index) in members.iter().enumerate() {
                    nodes[index].group = Some((groups.len(), position));
                }
                groups.push(combined);
            }
        }
        Herder {
            nodes,
            leaves,
            groups,
        }
    }

    /// Names of the matchers that can decide (those without children), in
    /// the order they are tried.
    pub fn matcher_names(&self) -> impl Iterator<Item = &str> {
        self.leaves
            .iter()
            .map(|leaf| self.nodes[leaf.node].name.as_str())
    }

    /// The `description` of the matcher called `name`.
    pub fn description(&self, name: &str) -> Option<&str> {
        self.nodes
            .iter()
            .find(|node| node.name == name)
            .map(|node| node.description.as_str())
    }

    /// Decides from the job's facts alone where it can. A job no matcher can
    /// take, and a job whose first candidate reads no trace (such as a
    /// `failure_reason`-only matcher), is `Decided`; otherwise the trace is
    /// needed.
    pub fn prepare(&self, job: &JobFacts) -> Preliminary {
        let mut candidates = self
            .leaves
            .iter()
            .filter(|leaf| self.passes_cheap_checks(leaf, job));
        let Some(first) = candidates.next() else {
            return Preliminary::Decided(Verdict::NoMatch);
        };
        if !self.reads_trace(first) {
            return Preliminary::Decided(self.verdict(first, job));
        }
        let mut request = TraceRequest {
            matcher: self.nodes[first.node].name.clone(),
            tail_lines: Some(0),
            retry_possible: false,
        };
        // Every candidate up to (and including) the first that reads no
        // trace may decide; later ones never do.
        for leaf in std::iter::once(first).chain(candidates) {
            request.retry_possible |= self.would_retry(leaf, job);
            if !self.reads_trace(leaf) {
                break;
            }
            for node in self.chain(leaf) {
                if node.messages.is_some() {
                    request.tail_lines = match (request.tail_lines, node.tail_lines) {
                        (Some(widest), Some(lines)) => Some(widest.max(lines)),
                        _ => None,
                    };
                }
            }
        }
        Preliminary::NeedsTrace(request)
    }

    /// The verdict with the trace at hand: the first matcher (depth first,
    /// in document order) whose checks all pass.
    pub fn evaluate_with_trace(&self, job: &JobFacts, trace: &str) -> Verdict {
        self.evaluate_with_trace_bytes(job, trace.as_bytes())
    }

    /// [`Herder::evaluate_with_trace`] for a trace that may not be UTF-8.
    pub fn evaluate_with_trace_bytes(&self, job: &JobFacts, trace: &[u8]) -> Verdict {
        let mut scan = Scan::new(self, trace);
        for leaf in &self.leaves {
            if !self.passes_cheap_checks(leaf, job) {
                continue;
            }
            if leaf.chain.iter().all(|&index| scan.messages_found(index)) {
                return self.verdict(leaf, job);
            }
        }
        Verdict::NoMatch
    }

    fn chain<'a>(&'a self, leaf: &'a Leaf) -> impl Iterator<Item = &'a Node> + 'a {
        leaf.chain.iter().map(|&index| &self.nodes[index])
    }

    fn reads_trace(&self, leaf: &Leaf) -> bool {
        self.chain(leaf).any(|node| node.messages.is_some())
    }

    /// Status, failure reason and job name: everything but the trace.
    fn passes_cheap_checks(&self, leaf: &Leaf, job: &JobFacts) -> bool {
        if !leaf.job_status.is_empty() && !leaf.job_status.contains(&job.status) {
            return false;
        }
        self.chain(leaf).all(|node| {
            let reason_ok = node.failure_reasons.is_empty()
                || job
                    .failure_reason
                    .as_ref()
                    .is_some_and(|reason| node.failure_reasons.contains(reason));
            let name_ok = node
                .job_name
                .as_ref()
                .is_none_or(|patterns| patterns.is_match(job.name.as_bytes()));
            reason_ok && name_ok
        })
    }

    fn would_retry(&self, leaf: &Leaf, job: &JobFacts) -> bool {
        leaf.action == Action::Retry && job.retry_count < leaf.retry_limit
    }

    fn verdict(&self, leaf: &Leaf, job: &JobFacts) -> Verdict {
        let matcher = self.nodes[leaf.node].name.clone();
        match leaf.action {
            Action::Report => Verdict::Report { matcher },
            Action::Retry if job.retry_count >= leaf.retry_limit => Verdict::LimitReached {
                matcher,
                limit: leaf.retry_limit,
            },
            Action::Retry => {
                let index = usize::try_from(job.retry_count)
                    .unwrap_or(usize::MAX)
                    .min(leaf.retry_delays.len() - 1);
                let delay = leaf.retry_delays[index];
                let not_before = job.finished_at.and_then(|finished| {
                    finished.checked_add(time::Duration::try_from(delay).ok()?)
                });
                Verdict::Retry {
                    matcher,
                    delay,
                    not_before,
                }
            }
        }
    }
}

/// One trace being searched: what was found so far, so that each node's
/// messages, each group of nodes and each window are searched at most once.
struct Scan<'h, 't> {
    herder: &'h Herder,
    trace: &'t [u8],
    /// Per node: whether its messages were found.
    found: Vec<Option<bool>>,
    /// Per group: whether each member's messages were found.
    group_found: Vec<Option<Vec<bool>>>,
    /// `(tail_lines, start)` of the windows seen so far.
    tail_starts: Vec<(usize, usize)>,
}

impl<'h, 't> Scan<'h, 't> {
    fn new(herder: &'h Herder, trace: &'t [u8]) -> Scan<'h, 't> {
        Scan {
            herder,
            trace,
            found: vec![None; herder.nodes.len()],
            group_found: vec![None; herder.groups.len()],
            tail_starts: Vec::new(),
        }
    }

    /// Whether node `index` has no messages or one of them is in its window.
    fn messages_found(&mut self, index: usize) -> bool {
        let node = &self.herder.nodes[index];
        let Some(messages) = &node.messages else {
            return true;
        };
        if let Some(found) = self.found[index] {
            return found;
        }
        let window = self.window(node.tail_lines);
        let found = match node.group {
            Some((group, position)) => {
                let herder = self.herder;
                self.group_found[group].get_or_insert_with(|| herder.groups[group].matches(window))
                    [position]
            }
            None => messages.is_match(window),
        };
        self.found[index] = Some(found);
        found
    }

    fn window(&mut self, tail_lines: Option<usize>) -> &'t [u8] {
        let Some(lines) = tail_lines else {
            return self.trace;
        };
        let known = self.tail_starts.iter().find(|(known, _)| *known == lines);
        let start = match known {
            Some(&(_, start)) => start,
            None => {
                let start = tail_start(self.trace, lines);
                self.tail_starts.push((lines, start));
                start
            }
        };
        &self.trace[start..]
    }
}
