//! The processing engine: [`ProcessingManager`] takes `notify(id)` calls and
//! claims due items in batches, runs each item's loop (claim → drain events
//! → decide → execute → park) with a bounded number of runs and of workers, keeps leases alive with a
//! heartbeat and shuts down in order. It knows no item type: it talks to
//! them through `wq_core::ItemType` and to the database through
//! `wq_store::Store`. The loop is drawn in ARCHITECTURE.md.
//!
//! - **One commit per step.** An executor's outcome is applied to the
//!   in-memory view and written together with whatever comes next: before
//!   the next action runs, before an event is handled, at release, or inside
//!   the park. An item whose one action needs no follow-up costs its share
//!   of two statements: the batch claim that also reads the items
//!   (`item_claim_due`; a notified item is claimed alone with
//!   `item_claim_snapshot`) and the batch of parks it joins (lease check,
//!   outcome, event check, park and the outcome's audit records).
//! - **Leases.** A claim sets `leased_until = now + lease` only when the item
//!   is unleased or expired (on PostgreSQL it also requires the row version
//!   its snapshot saw; `wq-store/tests/pg_claim_race.rs`). A heartbeat renews
//!   it every third of the lease. Every write of a run compares the lease it
//!   holds, so a worker whose lease was reclaimed cannot change the item.
//!   Each claim also draws the item's next lease epoch, which heartbeats
//!   keep; every view the run hands to its type names it
//!   (`ItemView::lease`), so an executor's own transaction can write under
//!   this run's lease and no later claim's (`wq_store`'s `finish_leased`).
//! - **Backoff.** A failed action keeps the item leased until the backoff
//!   ends ([`EngineConfig::backoff`]: doubling from `backoff_base`, 2 s,
//!   at least the forge's `Retry-After`); the sweep skips leased items, so
//!   no timer table is needed. Past `max_attempts`, or on a permanent
//!   error, the item fails. An outage (`ExecError::outage`: a forge down or
//!   rate limited) is not counted: its backoff gets a jitter
//!   ([`EngineConfig::jitter`]) and the item fails only once its streak of
//!   failures (`work_items.failing_since`) has lasted `outage_budget`.
//! - **Events.** `event_insert` writes the event and `actionable = true` in
//!   one transaction under the item's advisory lock (PostgreSQL) or the write
//!   lock (SQLite). The park takes the same lock, so an event arriving while
//!   a worker decides to exit is either seen by the park's check or inserted
//!   after the lease is free, when `notify` can claim the item at once.
//! - **Intake.** `notify(id)` is deduplicated; a notify during a run makes
//!   the item run once more afterwards. The items an executor's outcome
//!   names in `wake` (items it enqueued in its own transaction) are
//!   notified as soon as it returns.
//! - **Runs and workers.** At most `max_runs` item runs are in progress at
//!   once (256 by default); a run holds its slot from its claim to its
//!   park. At most `workers` of them (10 by default) call an executor or an
//!   event handler at once: those calls are what reaches a forge (DDR-41).
//!   A run waiting on the store does not hold a worker, so the store's
//!   batches (PostgreSQL's coalesced parks, SQLite's group commit and
//!   set-based parks) fill up while the workers stay busy.
//! - **Sweep.** At start and every `sweep_interval` the engine claims what
//!   is due, with the snapshots, in one statement
//!   (`wq_store::Store::item_claim_due`: items that are actionable and not
//!   leased, items with pending events, and active items with an expired
//!   `pending_until`, only of `handled_types`, none when empty), as many as
//!   it has free run slots (at most `sweep_batch`), and starts their runs.
//!   It claims nothing while `workers` or more runs wait for a worker:
//!   claimed items hold leases another replica could use. A full claim
//!   means a backlog: the sweep claims again as soon as half a batch of
//!   slots is free.
//! - **Hints.** On PostgreSQL an engine also listens for the work other
//!   replicas make due (`wq_store::Store::work_hints`: a notification each
//!   transaction that creates an item, gives it an event, retries it or
//!   marks it actionable sends on commit) and takes each item at once,
//!   as a `notify`. Hints are hints: one lost (a full buffer, a dropped
//!   connection) only waits for a sweep, and a sweep follows every start
//!   of the listener and every lost connection.
//!   [`ProcessingManager::listening`] says whether it hears them.
//! - **Periodic tasks.** Beside the sweep, the engine runs the
//!   `wq_core::Periodic` tasks of its `handled_types` (e.g. `mr.queue_sync`),
//!   each every its interval, the first one interval after the start; the
//!   items a run returns are notified at once, a failed run is logged and
//!   the next one tries again. A task runs on one process at a time: each
//!   interval an engine runs it only while it leads it
//!   (`wq_store::Store::lead`: a PostgreSQL session advisory lock, always
//!   granted on SQLite), and one that does not lead asks again, so a dead
//!   leader's task is taken up within one interval.
//!   [`ProcessingManager::run_periodic`] runs one now, leader or not.
//! - **Crash safety.** Each step that must not repeat commits with its
//!   effect: an event is applied and deleted in one transaction, an
//!   executor's outcome is written before the item's next step. A crash
//!   between an executor's side effect and that write re-runs the action
//!   after the lease expires, so executors are idempotent with respect to
//!   their external effect. A panicking run ends as a crash would: the
//!   unwind is caught at the task, nothing is written, the heartbeat stops,
//!   and the sweep retries the item once its lease has expired.
//!   `wq-testkit/tests/engine.rs` stops the engine at every step ([`Hooks`])
//!   and shows convergence on both backends.
//! - **Shutdown.** Intake stops, periodic tasks stop (a run in progress is
//!   dropped), running loops finish their current step and release their
//!   leases; queued items stay actionable for the next start.
//!   [`ProcessingManager::shutdown`] waits without a bound;
//!   [`ProcessingManager::shutdown_within`] abandons loops still running
//!   after the grace (an executor stuck on a forge call): their heartbeats
//!   stop and their leases are *not* released (the step may still be writing
//!   to the forge), so the leases expire and the sweep resumes the items.
//!   `workqueue serve` (`workqueue::serve::serve_until`) stops the HTTP
//!   server and the engine together on SIGTERM or SIGINT, each within
//!   `server.shutdown_grace_seconds`; connections still open after the
//!   grace are dropped.

mod config;
mod manager;
pub mod metrics;

pub use config::{DEFAULT_MAX_RUNS, DEFAULT_WORKERS, EngineConfig};
pub use manager::{EngineError, FailPoint, Flow, Hooks, NoHooks, ProcessingManager, RunOutcome};
