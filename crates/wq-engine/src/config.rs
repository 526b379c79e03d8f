//! Engine settings; every default is a named constant.

use std::time::Duration;

/// Worker pool size (DDR-41).
pub const DEFAULT_WORKERS: usize = 10;
/// How often the sweep runs after the one at start.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(30);
/// How many ids one sweep returns at most.
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

/// Settings of a [`crate::ProcessingManager`].
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub workers: usize,
    pub sweep_interval: Duration,
    pub sweep_batch: u32,
    pub lease: Duration,
    pub deadline: Duration,
    pub max_attempts: i32,
    pub backoff_base: Duration,
    pub backoff_max: Duration,
    /// Item types this instance processes; empty processes nothing (DDR-25).
    pub handled_types: Vec<String>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            workers: DEFAULT_WORKERS,
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
            sweep_batch: DEFAULT_SWEEP_BATCH,
            lease: DEFAULT_LEASE,
            deadline: DEFAULT_DEADLINE,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            backoff_base: DEFAULT_BACKOFF_BASE,
            backoff_max: DEFAULT_BACKOFF_MAX,
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
