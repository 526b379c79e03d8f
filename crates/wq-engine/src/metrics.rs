//! The names of the metrics the engine records. The API describes them when
//! it installs the Prometheus recorder.

/// Actions executed, by `item_type` and `action`.
pub const ACTIONS_TOTAL: &str = "workqueue_actions_total";
/// Executor failures, by `item_type` and `action`.
pub const ACTIONS_FAILED_TOTAL: &str = "workqueue_actions_failed_total";
/// Events applied, by `item_type`.
pub const EVENTS_TOTAL: &str = "workqueue_events_total";
/// Duration of one item's loop run, in seconds.
pub const LOOP_DURATION_SECONDS: &str = "workqueue_loop_duration_seconds";
/// Item runs that panicked (each is contained as a crash).
pub const RUN_PANICS_TOTAL: &str = "workqueue_run_panics_total";
/// Item runs that ended because another worker (or replica) had taken the
/// lease over (the heartbeat or a write found it gone).
pub const LEASE_LOSSES_TOTAL: &str = "workqueue_lease_losses_total";
/// Items the last sweep found due (actionable and unleased, or with an
/// expired lease or timer), up to the sweep batch: a backlog that does not
/// shrink means the workers do not keep up.
pub const SWEEP_BACKLOG: &str = "workqueue_sweep_backlog";
