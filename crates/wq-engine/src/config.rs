//! Engine settings; every default is a named constant.

use std::hash::{Hash, Hasher};
use std::time::Duration;

use wq_core::ItemId;

/// Worker pool size (DDR-41): executor and event-handler calls at once.
pub const DEFAULT_WORKERS: usize = 10;
/// Item runs in progress at once (claimed, between store steps, or at a
/// worker). Runs that wait on the store's writes hold no worker, and more
/// of them make larger batches: on PostgreSQL, whose claims and parks each
/// wait for a round trip and a commit, 2048 drained a backlog of no-op
/// items about 1.6x as fast as 256 (the machine was half idle at 256;
/// BENCHMARKS.md).
/// Items whose runs wait for a worker are not claimed past `workers` of
/// them waiting, so this bounds only runs that move.
pub const DEFAULT_MAX_RUNS: usize = 2048;
/// How often the sweep runs after the one at start.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(30);
/// How many items one sweep claims at most.
pub const DEFAULT_SWEEP_BATCH: u32 = 1_000;
/// Lease length; the heartbeat renews it every third of it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);
/// Wall-clock budget of one loop run (DDR-44).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);
/// Consecutive failures that fail an item (DDR-14).
pub const DEFAULT_MAX_ATTEMPTS: i32 = 5;
/// First backoff after a failure; doubles per attempt.
pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_secs(2);
/// Longest backoff.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(300);
/// How long a dependency's outage may fail an item before it fails for good
/// (six hours: a forge's incident, not a blip).
pub const DEFAULT_OUTAGE_BUDGET: Duration = Duration::from_secs(6 * 3600);

/// Settings of a [`crate::ProcessingManager`].
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Executor and event-handler calls at once: what reaches a forge
    /// (DDR-41).
    pub workers: usize,
    /// Item runs in progress at once. A run holds its slot from its claim
    /// to its park, and a worker only while its executor or event handler
    /// runs, so runs waiting on the store (whose writes batch) do not keep
    /// the workers idle.
    pub max_runs: usize,
    pub sweep_interval: Duration,
    pub sweep_batch: u32,
    pub lease: Duration,
    pub deadline: Duration,
    pub max_attempts: i32,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// How long failures from an outage ([`wq_core::ExecError::outage`])
    /// are retried before the item fails; they do not count against
    /// `max_attempts`.
    pub outage_budget: Duration,
    /// Item types this instance processes; empty processes nothing (DDR-25).
    pub handled_types: Vec<String>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            workers: DEFAULT_WORKERS,
            max_runs: DEFAULT_MAX_RUNS,
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
            sweep_batch: DEFAULT_SWEEP_BATCH,
            lease: DEFAULT_LEASE,
            deadline: DEFAULT_DEADLINE,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            backoff_base: DEFAULT_BACKOFF_BASE,
            backoff_max: DEFAULT_BACKOFF_MAX,
            outage_budget: DEFAULT_OUTAGE_BUDGET,
            handled_types: Vec::new(),
        }
    }
}

impl EngineConfig {
    /// Backoff before retrying after `attempts` consecutive failures,
    /// at least `floor` (e.g. a forge's `Retry-After`).
    pub fn backoff(&self, attempts: i32, floor: Option<Duration>) -> Duration {
        let exponent = attempts.clamp(1, 20) as u32 - 1;
        let computed = self
            .backoff_base
            .saturating_mul(2u32.saturating_pow(exponent))
            .min(self.backoff_max);
        floor.map_or(computed, |floor| computed.max(floor))
    }

    /// Up to a quarter of `backoff` more, fixed for one item and attempt:
    /// items that failed on the same outage come back spread out, and a
    /// test can still tell the earliest retry.
    pub fn jitter(&self, id: ItemId, attempts: i32, backoff: Duration) -> Duration {
        let mut hasher = std::hash::DefaultHasher::new();
        (id, attempts).hash(&mut hasher);
        let per_mille = u32::try_from(hasher.finish() % 1000).unwrap_or(0);
        backoff.saturating_mul(per_mille) / 4000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_adds_at_most_a_quarter_and_spreads_items() {
        let config = EngineConfig::default();
        let backoff = Duration::from_secs(40);
        let jitters: Vec<Duration> = (0..50)
            .map(|_| config.jitter(ItemId::new_v7(), 3, backoff))
            .collect();
        assert!(jitters.iter().all(|j| *j <= backoff / 4), "{jitters:?}");
        let distinct: std::collections::BTreeSet<Duration> = jitters.iter().copied().collect();
        assert!(distinct.len() > 10, "spread: {distinct:?}");
        let id = ItemId::new_v7();
        assert_eq!(
            config.jitter(id, 2, backoff),
            config.jitter(id, 2, backoff),
            "fixed for one item and attempt"
        );
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_honours_a_floor() {
        let config = EngineConfig::default();
        assert_eq!(config.backoff(1, None), Duration::from_secs(2));
        assert_eq!(config.backoff(2, None), Duration::from_secs(4));
        assert_eq!(config.backoff(4, None), Duration::from_secs(16));
        assert_eq!(config.backoff(30, None), DEFAULT_BACKOFF_MAX);
        assert_eq!(
            config.backoff(1, Some(Duration::from_secs(30))),
            Duration::from_secs(30)
        );
    }
}
