//! `ProcessingManager`: intake (`notify`, sweep, the handled types' periodic
//! tasks), the bounded worker pool and the per-item loop of ARCHITECTURE.md.
//!
//! Invariants kept here:
//! - the decider is called in exactly one place, [`ItemRun::step`];
//! - `actionable` is never written `true` here and written `false` only by the
//!   park step, atomically with "no pending events" (DDR-49);
//! - every write of a run carries its lease, so a worker whose lease was
//!   reclaimed can no longer change the item.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use time::OffsetDateTime;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use wq_core::{
    Action, Clock, EventResult, ItemId, ItemType, ItemView, Periodic, PeriodicResult, Phase,
    TypeRegistry,
};
use wq_store::{
    ApplyEvent, ApplyOutcome, BeginAction, ClaimDueParams, ClaimParams, EventApplied, Leadership,
    Lease, OutcomeChanges, Park, ParkParams, RecordFailure, Snapshot, Store, StoreError,
};

use crate::config::EngineConfig;
use crate::metrics::{
    ACTIONS_FAILED_TOTAL, ACTIONS_TOTAL, EVENTS_TOTAL, LEASE_LOSSES_TOTAL, LOOP_DURATION_SECONDS,
    RUN_PANICS_TOTAL, SWEEP_BACKLOG,
};

/// Points in the loop where a test can stop the engine as a crash would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailPoint {
    /// The item is claimed; nothing else happened yet.
    AfterClaim,
    /// An event was applied and deleted (one transaction).
    AfterEventApplied,
    /// The executor returned; its outcome is not yet written.
    AfterExecute,
    /// The executor's outcome is written on its own, because another
    /// action or an event comes next.
    AfterOutcome,
    /// The decider returned no action; the park step, which also writes the
    /// last executor's outcome, comes next.
    BeforePark,
}

/// What a hook tells the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Stop now without another write, as a killed process would: the lease
    /// stays until it expires.
    Crash,
}

/// Test hooks called at each [`FailPoint`]. Production uses [`NoHooks`].
#[async_trait]
pub trait Hooks: Send + Sync + 'static {
    async fn at(&self, point: FailPoint, id: ItemId) -> Flow;

    /// The heartbeat renewed the item's lease until `until`, so a test can
    /// move a manual clock past the old lease and know it was renewed,
    /// instead of sleeping through heartbeat periods.
    fn lease_renewed(&self, _id: ItemId, _until: OffsetDateTime) {}
}

/// Hooks that do nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

#[async_trait]
impl Hooks for NoHooks {
    async fn at(&self, _point: FailPoint, _id: ItemId) -> Flow {
        Flow::Continue
    }
}

/// How one loop run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Someone else holds the lease, the item is gone or not handled here.
    NotClaimed,
    /// Nothing left to do: `actionable = false`.
    Parked,
    /// The deadline passed; the item stays actionable for the sweep.
    Deadline,
    /// A failure was recorded; the item waits out its backoff.
    Backoff,
    /// Shutdown: the lease was released, the item stays actionable.
    Shutdown,
    /// The lease was reclaimed by another worker.
    LeaseLost,
    /// A hook simulated a crash.
    Crashed,
    /// A store error ended the run; the lease expires on its own.
    StoreFailed(String),
}

/// An item claimed with its snapshot, and the run slot it will use.
struct Claimed {
    snapshot: Snapshot,
    lease: Lease,
    slot: OwnedSemaphorePermit,
}

/// Where a tracked item is.
enum Track {
    /// Notified; waiting in the intake queue for a run slot.
    Queued,
    /// A run is in progress. `dirty`: notified during it, so it runs once
    /// more afterwards. `next`: a batch claim took the item while this run
    /// was ending (its lease released, the run not yet untracked); that
    /// claim starts as soon as this run ends, so an item never has two runs
    /// in one engine.
    Running {
        dirty: bool,
        next: Option<Box<Claimed>>,
    },
}

/// The engine. Create with [`ProcessingManager::new`], then `start`.
pub struct ProcessingManager {
    /// This engine, for the tasks it spawns.
    me: std::sync::Weak<ProcessingManager>,
    store: Arc<dyn Store>,
    registry: Arc<TypeRegistry>,
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    hooks: Arc<dyn Hooks>,
    intake: mpsc::UnboundedSender<ItemId>,
    intake_rx: Mutex<Option<mpsc::UnboundedReceiver<ItemId>>>,
    tracked: Mutex<HashMap<ItemId, Track>>,
    idle: Notify,
    /// How many pool runs have finished; see [`ProcessingManager::runs_finished`].
    runs_finished: watch::Sender<u64>,
    /// Run slots: at most `max_runs` item runs at once.
    slots: Arc<Semaphore>,
    /// Signalled when a run ends and frees its slot.
    slot_freed: Notify,
    /// Workers: at most `workers` executor and event-handler calls at once.
    workers: Arc<Semaphore>,
    /// Runs waiting for a worker.
    waiting: AtomicUsize,
    /// Sweeps whose claimed items are not tracked yet: the engine is not
    /// idle while one runs.
    sweeping: AtomicUsize,
    /// Whether this engine hears the work hints of other processes
    /// ([`ProcessingManager::listening`]).
    listening: watch::Sender<bool>,
    /// One sweep at a time, so two do not split the free slots between
    /// them. It holds where the next claim goes on, while a backlog drains:
    /// the last id claimed and when the drain began.
    sweep_turn: tokio::sync::Mutex<Option<(ItemId, Instant)>>,
    shutdown: CancellationToken,
    /// Cancelled when a bounded shutdown gives up on the loops still
    /// running: their heartbeats stop, so their leases expire.
    abandoned: CancellationToken,
    tasks: TaskTracker,
}

/// The engine could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("handled type {0:?} is not a registered item type")]
    UnknownHandledType(String),
}

impl ProcessingManager {
    /// Builds an engine; every handled type must be registered.
    pub fn new(
        store: Arc<dyn Store>,
        registry: Arc<TypeRegistry>,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
    ) -> Result<Arc<Self>, EngineError> {
        Self::with_hooks(store, registry, clock, config, Arc::new(NoHooks))
    }

    /// Like [`ProcessingManager::new`], with test hooks.
    pub fn with_hooks(
        store: Arc<dyn Store>,
        registry: Arc<TypeRegistry>,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
        hooks: Arc<dyn Hooks>,
    ) -> Result<Arc<Self>, EngineError> {
        for name in &config.handled_types {
            if registry.get(name).is_none() {
                return Err(EngineError::UnknownHandledType(name.clone()));
            }
        }
        // Shown from the start (at 0), so an alert on its rate has a series.
        metrics::counter!(LEASE_LOSSES_TOTAL).increment(0);
        let (intake, intake_rx) = mpsc::unbounded_channel();
        let workers = Arc::new(Semaphore::new(config.workers.max(1)));
        let slots = Arc::new(Semaphore::new(config.max_runs.max(1)));
        Ok(Arc::new_cyclic(|me| Self {
            me: me.clone(),
            store,
            registry,
            clock,
            config,
            hooks,
            intake,
            intake_rx: Mutex::new(Some(intake_rx)),
            tracked: Mutex::new(HashMap::new()),
            idle: Notify::new(),
            runs_finished: watch::Sender::new(0),
            slots,
            slot_freed: Notify::new(),
            workers,
            waiting: AtomicUsize::new(0),
            sweeping: AtomicUsize::new(0),
            sweep_turn: tokio::sync::Mutex::new(None),
            listening: watch::Sender::new(false),
            shutdown: CancellationToken::new(),
            abandoned: CancellationToken::new(),
            tasks: TaskTracker::new(),
        }))
    }

    fn myself(&self) -> Option<Arc<Self>> {
        self.me.upgrade()
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Starts the dispatcher, the sweep (which runs at once, DDR-35) and the
    /// periodic tasks of the handled types. Calling it twice does nothing.
    pub fn start(self: &Arc<Self>) {
        let Some(intake_rx) = self.intake_rx.lock().expect("intake lock").take() else {
            return;
        };
        let dispatcher = Arc::clone(self);
        self.tasks
            .spawn(async move { dispatcher.dispatch(intake_rx).await });
        let sweeper = Arc::clone(self);
        self.tasks
            .spawn(async move { sweeper.sweep_forever().await });
        let listener = Arc::clone(self);
        self.tasks
            .spawn(async move { listener.hear_hints_forever().await });
        for task in self.periodic_tasks() {
            let runner = Arc::clone(self);
            let task = task.clone();
            self.tasks
                .spawn(async move { runner.run_periodic_forever(task).await });
        }
    }

    /// The periodic tasks of the handled types.
    fn periodic_tasks(&self) -> impl Iterator<Item = &Periodic> + '_ {
        self.config
            .handled_types
            .iter()
            .flat_map(|name| self.registry.periodic(name))
    }

    /// Runs the periodic task `name` of a handled type once now and notifies
    /// the items it returns; `None` when no handled type has such a task.
    pub async fn run_periodic(&self, name: &str) -> Option<PeriodicResult> {
        let task = self.periodic_tasks().find(|task| task.name == name)?;
        Some(self.run_periodic_once(task).await)
    }

    async fn run_periodic_once(&self, task: &Periodic) -> PeriodicResult {
        let ids = task.run().await?;
        for id in &ids {
            self.notify(*id);
        }
        Ok(ids)
    }

    /// Runs `task` every interval until shutdown, which also ends a run in
    /// progress (a task's run must be safe to stop at any await), on one
    /// process at a time: each interval, this engine runs the task only
    /// while it leads it ([`Store::lead`]); one that does not lead tries to
    /// take the lead, so a dead leader's task is taken up within one
    /// interval.
    async fn run_periodic_forever(self: Arc<Self>, task: Periodic) {
        let name = task.name;
        let mut leadership: Option<Leadership> = None;
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => break,
                _ = tokio::time::sleep(task.interval) => {}
            }
            if let Some(held) = leadership.as_mut()
                && !held.still_held().await
            {
                tracing::warn!(task = name, "lost the lead of periodic task {name}");
                leadership = None;
            }
            if leadership.is_none() {
                match self.store.lead(name).await {
                    Ok(Some(won)) => {
                        tracing::info!(task = name, "leading periodic task {name}");
                        leadership = Some(won);
                    }
                    Ok(None) => {
                        tracing::debug!(task = name, "another process leads periodic task {name}");
                        continue;
                    }
                    Err(error) => {
                        tracing::warn!(task = name, %error, "cannot elect a leader for periodic task {name}: {error}");
                        continue;
                    }
                }
            }
            let result = tokio::select! {
                _ = self.shutdown.cancelled() => break,
                result = self.run_periodic_once(&task) => result,
            };
            if let Err(error) = result {
                tracing::warn!(task = name, %error, "periodic task {name} failed: {error}");
            }
        }
        if let Some(held) = leadership {
            held.release().await;
        }
    }

    /// Asks for the item to be processed. Deduplicated: an item queued or
    /// running is not queued twice, but a notify during a run makes the item
    /// run once more after it (so nothing that arrives mid-run is missed).
    pub fn notify(&self, id: ItemId) {
        if self.shutdown.is_cancelled() {
            return;
        }
        let mut tracked = self.tracked.lock().expect("tracked lock");
        match tracked.get_mut(&id) {
            None => {
                tracked.insert(id, Track::Queued);
                if self.intake.send(id).is_err() {
                    tracked.remove(&id);
                }
            }
            Some(Track::Queued) => {}
            Some(Track::Running { dirty, .. }) => *dirty = true,
        }
    }

    /// Number of items queued or running.
    pub fn in_flight(&self) -> usize {
        self.tracked.lock().expect("tracked lock").len()
    }

    /// Waits until nothing is queued, running or being claimed.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.in_flight() == 0 && self.sweeping.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// The number of item runs of the pool that have finished, bumped after
    /// each (its outcome stored, its tracking updated). A watcher re-checks
    /// what it waits for after every run instead of polling.
    pub fn runs_finished(&self) -> watch::Receiver<u64> {
        self.runs_finished.subscribe()
    }

    /// Runs one sweep now: claims the items that are due, as many as there
    /// are free run slots (at most `sweep_batch`), with their snapshots in
    /// one statement, and starts their runs. Returns how many it claimed:
    /// 0 means nothing was due. While no slot is free, or `workers` runs
    /// already wait for a worker (claimed items hold their leases, which
    /// another replica could use), it waits for room first.
    pub async fn sweep_now(&self) -> Result<usize, StoreError> {
        Ok(self.sweep_round().await?.0)
    }

    /// [`ProcessingManager::sweep_now`], and how many it could have
    /// claimed.
    async fn sweep_round(&self) -> Result<(usize, u32), StoreError> {
        if self.config.handled_types.is_empty() || self.shutdown.is_cancelled() {
            return Ok((0, 0));
        }
        let mut cursor = self.sweep_turn.lock().await;
        let _sweeping = Sweeping::new(self);
        let limit = loop {
            let freed = self.slot_freed.notified();
            let limit = self.claim_capacity();
            if limit > 0 {
                break limit;
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return Ok((0, 0)),
                _ = freed => {}
                // A worker freed (not a slot) is seen within this time.
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        };
        let Ok(slots) = Arc::clone(&self.slots).try_acquire_many_owned(limit) else {
            return Ok((0, 0));
        };
        // While a backlog drains, each claim goes on after the last one
        // (oldest first, without walking again over what the earlier
        // claims took); once it runs short, or a sweep interval after the
        // drain began, it starts from the oldest again, so an old item that
        // became due again is not left behind.
        let after = cursor
            .filter(|(_, began)| began.elapsed() < self.config.sweep_interval)
            .map(|(id, _)| id);
        let now = self.clock.now();
        let mut claimed = self.claim_due(now, limit, after).await?;
        if after.is_some() && (claimed.len() as u32) < limit {
            let more = self
                .claim_due(now, limit - claimed.len() as u32, None)
                .await?;
            claimed.extend(more);
        }
        *cursor = if claimed.len() as u32 >= limit {
            let began = match (after, *cursor) {
                (Some(_), Some((_, began))) => began,
                _ => Instant::now(),
            };
            claimed
                .iter()
                .map(|(_, lease)| lease.id)
                .max()
                .map(|last| (last, began))
        } else {
            None
        };
        drop(cursor);
        metrics::gauge!(SWEEP_BACKLOG).set(claimed.len() as f64);
        let count = claimed.len();
        let mut slots = Some(slots);
        for (snapshot, lease) in claimed {
            let slot = match slots.take() {
                Some(mut rest) if rest.num_permits() > 1 => {
                    let one = rest.split(1).expect("a permit is left");
                    slots = Some(rest);
                    one
                }
                Some(last) => last,
                None => unreachable!("one slot per claimed item"),
            };
            self.start_claimed(Claimed {
                snapshot,
                lease,
                slot,
            });
        }
        // Unused slots go back with `slots`.
        Ok((count, limit))
    }

    /// One batch claim of up to `limit` due items (after `after` on the
    /// actionable branch).
    async fn claim_due(
        &self,
        now: OffsetDateTime,
        limit: u32,
        after: Option<ItemId>,
    ) -> Result<Vec<(Snapshot, Lease)>, StoreError> {
        self.store
            .item_claim_due(ClaimDueParams {
                now,
                lease_until: now + self.config.lease,
                handled_types: self.config.handled_types.clone(),
                limit,
                after,
            })
            .await
    }

    /// How many items a sweep may claim now: the free run slots, at most
    /// `sweep_batch`, and none while `workers` or more runs wait for a
    /// worker (the pool has enough to do).
    fn claim_capacity(&self) -> u32 {
        if self.waiting.load(Ordering::Relaxed) >= self.config.workers.max(1) {
            return 0;
        }
        let free = u32::try_from(self.slots.available_permits()).unwrap_or(u32::MAX);
        free.min(self.config.sweep_batch)
    }

    /// Starts the run of an item a batch claim took, or hands it to the
    /// run still ending on it.
    fn start_claimed(&self, claimed: Claimed) {
        let id = claimed.lease.id;
        let mut tracked = self.tracked.lock().expect("tracked lock");
        match tracked.get_mut(&id) {
            Some(Track::Running { next, .. }) => {
                // The lease was free, so that run is past its last write.
                *next = Some(Box::new(claimed));
                return;
            }
            Some(queued @ Track::Queued) => {
                // Notified while the claim ran: the claim's snapshot may
                // be older than what the notify announced, so run once
                // more after this run. The queued entry finds the item
                // running and is dropped.
                *queued = Track::Running {
                    dirty: true,
                    next: None,
                };
            }
            None => {
                tracked.insert(
                    id,
                    Track::Running {
                        dirty: false,
                        next: None,
                    },
                );
            }
        }
        drop(tracked);
        self.spawn_run(id, claimed.slot, Some((claimed.snapshot, claimed.lease)));
    }

    fn spawn_run(
        &self,
        id: ItemId,
        slot: OwnedSemaphorePermit,
        claimed: Option<(Snapshot, Lease)>,
    ) {
        let Some(manager) = self.myself() else {
            return;
        };
        self.tasks
            .spawn(async move { manager.work(id, slot, claimed).await });
    }

    /// Resolves once a shutdown has been asked for (at once if it already
    /// was): for code that must act while the engine drains.
    pub async fn shutdown_requested(&self) {
        self.shutdown.cancelled().await;
    }

    /// Stops intake, lets running items finish their current step (they then
    /// release their leases) and waits for them, however long a step takes.
    /// [`ProcessingManager::shutdown_within`] bounds the wait.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        self.tracked.lock().expect("tracked lock").clear();
        self.idle.notify_waiters();
    }

    /// [`ProcessingManager::shutdown`], waiting at most `grace` for the
    /// running steps. Answers whether every loop ended. Loops still running
    /// then (e.g. an executor stuck on a forge call) are abandoned: they are
    /// not waited for and their leases are not released (the step might
    /// still be writing to the forge), so they expire and the sweep of
    /// another replica, or of this one after a restart, resumes the items.
    /// The abandoned tasks end with the runtime.
    pub async fn shutdown_within(&self, grace: Duration) -> bool {
        self.shutdown.cancel();
        self.tasks.close();
        let ended = tokio::time::timeout(grace, self.tasks.wait()).await.is_ok();
        if !ended {
            self.abandoned.cancel();
            let running = self.tasks.len();
            tracing::warn!(
                running,
                grace_ms = grace.as_millis() as u64,
                "{running} item loop(s) still running after the shutdown grace; \
                 abandoning them (their leases expire)"
            );
        }
        self.tracked.lock().expect("tracked lock").clear();
        self.idle.notify_waiters();
        ended
    }

    /// Runs one item's loop inline, outside the pool: the one step tests
    /// drive deterministically.
    pub async fn run_item(&self, id: ItemId) -> RunOutcome {
        self.run_item_with(id, None).await
    }

    /// Claims `id` with its snapshot, unless this replica handles no type.
    async fn claim(&self, id: ItemId) -> Result<Option<(Snapshot, Lease)>, StoreError> {
        if self.config.handled_types.is_empty() {
            tracing::debug!(%id, "not claimed: this replica handles no item type");
            return Ok(None);
        }
        let now = self.clock.now();
        self.store
            .item_claim_snapshot(ClaimParams {
                id,
                now,
                lease_until: now + self.config.lease,
                handled_types: self.config.handled_types.clone(),
            })
            .await
    }

    /// One run of `id`: from the claim given, or claiming it first.
    async fn run_item_with(&self, id: ItemId, claimed: Option<(Snapshot, Lease)>) -> RunOutcome {
        let started = Instant::now();
        let outcome = self.run_item_inner(id, claimed).await;
        metrics::histogram!(LOOP_DURATION_SECONDS).record(started.elapsed().as_secs_f64());
        if outcome == RunOutcome::LeaseLost {
            metrics::counter!(LEASE_LOSSES_TOTAL).increment(1);
        }
        outcome
    }

    async fn dispatch(self: Arc<Self>, mut intake: mpsc::UnboundedReceiver<ItemId>) {
        loop {
            let id = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                id = intake.recv() => match id { Some(id) => id, None => return },
            };
            let slot = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                slot = Arc::clone(&self.slots).acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => return,
                },
            };
            {
                let mut tracked = self.tracked.lock().expect("tracked lock");
                match tracked.get_mut(&id) {
                    Some(queued @ Track::Queued) => {
                        *queued = Track::Running {
                            dirty: false,
                            next: None,
                        };
                    }
                    // A batch claim took it meanwhile (and runs it once
                    // more if needed), or that run already ended.
                    _ => continue,
                }
            }
            self.spawn_run(id, slot, None);
        }
    }

    async fn work(
        self: Arc<Self>,
        id: ItemId,
        slot: OwnedSemaphorePermit,
        claimed: Option<(Snapshot, Lease)>,
    ) {
        use futures::FutureExt as _;
        let mut slot = slot;
        let mut claimed = claimed;
        loop {
            // A panicking executor (a bug) ends this run as a crash would:
            // no further write, the lease expires and the sweep retries the
            // item. The pool, the tracking and the other items go on.
            let outcome = match std::panic::AssertUnwindSafe(self.run_item_with(id, claimed.take()))
                .catch_unwind()
                .await
            {
                Ok(outcome) => outcome,
                Err(panic) => {
                    let message = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a non-string panic".to_owned());
                    tracing::error!(item_id = %id, panic = %message, "item run for {id} panicked; the sweep retries it once its lease expires");
                    metrics::counter!(RUN_PANICS_TOTAL).increment(1);
                    RunOutcome::Crashed
                }
            };
            tracing::debug!(item_id = %id, ?outcome, "item run ended for {id}");
            let mut tracked = self.tracked.lock().expect("tracked lock");
            let (dirty, next) = match tracked.get_mut(&id) {
                Some(Track::Running { dirty, next }) => (*dirty, next.take()),
                _ => (false, None),
            };
            if let Some(next) = next {
                // A batch claim took the item as this run ended: run it now
                // on the claim's slot, still tracked as running.
                tracked.insert(id, Track::Running { dirty, next: None });
                drop(tracked);
                drop(std::mem::replace(&mut slot, next.slot));
                self.slot_freed.notify_waiters();
                claimed = Some((next.snapshot, next.lease));
                self.runs_finished.send_modify(|runs| *runs += 1);
                continue;
            }
            drop(slot);
            let again =
                dirty && !self.shutdown.is_cancelled() && !matches!(outcome, RunOutcome::Crashed);
            if again {
                tracked.insert(id, Track::Queued);
                if self.intake.send(id).is_err() {
                    tracked.remove(&id);
                }
            } else {
                tracked.remove(&id);
            }
            if tracked.is_empty() {
                self.idle.notify_waiters();
            }
            drop(tracked);
            self.slot_freed.notify_waiters();
            self.runs_finished.send_modify(|runs| *runs += 1);
            return;
        }
    }

    /// Whether this engine hears the work other processes make due
    /// ([`Store::work_hints`], PostgreSQL): true once it listens, false
    /// where there is nothing to hear (SQLite) or while it cannot.
    pub fn listening(&self) -> watch::Receiver<bool> {
        self.listening.subscribe()
    }

    /// Takes the items other processes make due as they hear of them, so
    /// another replica's work (a submission through an API-only replica, a
    /// webhook another replica received) starts at once instead of at the
    /// next sweep. Hints missed while not listening are swept up: a sweep
    /// follows every (re)start of the listener and every lost connection.
    async fn hear_hints_forever(self: Arc<Self>) {
        if self.config.handled_types.is_empty() {
            return;
        }
        loop {
            let mut hints = match self.store.work_hints().await {
                Ok(Some(hints)) => hints,
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for work hints: {error}; the sweep finds their items");
                    tokio::select! {
                        _ = self.shutdown.cancelled() => return,
                        _ = tokio::time::sleep(self.config.sweep_interval.min(Duration::from_secs(5))) => {}
                    }
                    continue;
                }
            };
            self.listening.send_replace(true);
            let mut sweep = true;
            loop {
                if std::mem::take(&mut sweep)
                    && let Err(error) = self.sweep_now().await
                {
                    tracing::warn!(%error, "sweep after hints were missed failed: {error}");
                }
                let hint = tokio::select! {
                    _ = self.shutdown.cancelled() => return,
                    hint = hints.next() => hint,
                };
                match hint {
                    Some(wq_store::Hint::Due(id)) => self.notify(id),
                    Some(wq_store::Hint::Lost) => sweep = true,
                    None => break,
                }
            }
            self.listening.send_replace(false);
        }
    }

    /// Sweeps at start and every `sweep_interval`; after a sweep that
    /// filled its claim, again as soon as run slots free up, so a backlog
    /// drains at the pool's pace.
    async fn sweep_forever(self: Arc<Self>) {
        if self.config.handled_types.is_empty() {
            return;
        }
        loop {
            if self.shutdown.is_cancelled() {
                return;
            }
            // A full claim means there may be more: sweep again once
            // there is room.
            let backlog = match self.sweep_round().await {
                Ok((found, limit)) => limit > 0 && found as u32 >= limit,
                Err(error) => {
                    tracing::warn!(%error, "sweep failed: {error}");
                    false
                }
            };
            if !backlog {
                tokio::select! {
                    _ = self.shutdown.cancelled() => return,
                    _ = tokio::time::sleep(self.config.sweep_interval) => {}
                }
                continue;
            }
            // Wait for room: half a batch of free slots (or every slot),
            // and not more runs waiting for a worker than there are
            // workers.
            let wanted =
                (self.config.sweep_batch as usize / 2).clamp(1, self.config.max_runs.max(1));
            loop {
                let freed = self.slot_freed.notified();
                if self.claim_capacity() as usize >= wanted {
                    break;
                }
                tokio::select! {
                    _ = self.shutdown.cancelled() => return,
                    _ = freed => {}
                    // A run that frees no slot (a worker freed) is seen
                    // within this time.
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
        }
    }

    async fn run_item_inner(&self, id: ItemId, claimed: Option<(Snapshot, Lease)>) -> RunOutcome {
        let (snapshot, lease) = match claimed {
            Some(claimed) => claimed,
            None => match self.claim(id).await {
                Ok(Some(claimed)) => claimed,
                Ok(None) => return RunOutcome::NotClaimed,
                Err(error) => return store_failed(id, error),
            },
        };
        let Some(item_type) = self.registry.get(&snapshot.view.item.item_type).cloned() else {
            // Claim filters by handled types and `new` checked them.
            return RunOutcome::NotClaimed;
        };
        let run = ItemRun {
            manager: self,
            id,
            item_type,
            epoch: lease.epoch,
            lease: Arc::new(tokio::sync::Mutex::new(lease)),
            lease_lost: CancellationToken::new(),
        };
        // Stopped however the run ends: a panicking executor must not leave
        // a heartbeat renewing the lease of an item nobody works on.
        let _heartbeat = AbortOnDrop(run.start_heartbeat());
        run.run(snapshot).await
    }
}

/// A sweep in progress, from before its claim until its runs are tracked:
/// [`ProcessingManager::wait_idle`] waits for it.
struct Sweeping<'a>(&'a ProcessingManager);

impl<'a> Sweeping<'a> {
    fn new(manager: &'a ProcessingManager) -> Self {
        manager.sweeping.fetch_add(1, Ordering::SeqCst);
        Self(manager)
    }
}

impl Drop for Sweeping<'_> {
    fn drop(&mut self) {
        let manager = self.0;
        if manager.sweeping.fetch_sub(1, Ordering::SeqCst) == 1 {
            // Checked under the tracking lock, as a run's end does.
            let tracked = manager.tracked.lock().expect("tracked lock");
            if tracked.is_empty() {
                manager.idle.notify_waiters();
            }
        }
    }
}

/// Aborts the task when dropped (also while unwinding).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One claimed run of one item.
struct ItemRun<'a> {
    manager: &'a ProcessingManager,
    id: ItemId,
    item_type: Arc<dyn ItemType>,
    /// The claim this run holds (every view it hands out names it).
    epoch: wq_core::LeaseEpoch,
    /// The lease as last written; held while writing so the heartbeat and
    /// the loop never race on the compare-and-set.
    lease: Arc<tokio::sync::Mutex<Lease>>,
    lease_lost: CancellationToken,
}

enum Step {
    Continue,
    Done(RunOutcome),
}

/// What one run carries between iterations.
#[derive(Default)]
struct LoopState {
    /// The item as last read or as changed by the last outcome; `None`
    /// means read it again.
    snapshot: Option<Snapshot>,
    /// The last executor's outcome, not written yet.
    pending: Option<OutcomeChanges>,
}

impl ItemRun<'_> {
    fn start_heartbeat(&self) -> tokio::task::JoinHandle<()> {
        let store = Arc::clone(&self.manager.store);
        let clock = Arc::clone(&self.manager.clock);
        let lease_length = self.manager.config.lease;
        let period = (lease_length / 3).max(Duration::from_millis(10));
        let lease = Arc::clone(&self.lease);
        let lost = self.lease_lost.clone();
        let abandoned = self.manager.abandoned.clone();
        let hooks = Arc::clone(&self.manager.hooks);
        let id = self.id;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(period) => {}
                    () = abandoned.cancelled() => return,
                }
                let mut held = lease.lock().await;
                if lost.is_cancelled() {
                    return;
                }
                let until = clock.now() + lease_length;
                match store.item_heartbeat(*held, until).await {
                    Ok(renewed) => {
                        *held = renewed;
                        hooks.lease_renewed(id, renewed.until);
                    }
                    Err(error) => {
                        tracing::warn!(item_id = %id, %error, "heartbeat for {id} failed: {error}");
                        if matches!(error, StoreError::LeaseLost(_)) {
                            lost.cancel();
                            return;
                        }
                    }
                }
            }
        })
    }

    /// A worker for one executor or event-handler call: at most `workers`
    /// such calls run at once (DDR-41: they are what reaches a forge).
    async fn worker(&self) -> tokio::sync::SemaphorePermit<'_> {
        let manager = self.manager;
        manager.waiting.fetch_add(1, Ordering::Relaxed);
        let permit = manager
            .workers
            .acquire()
            .await
            .expect("the worker semaphore is never closed");
        manager.waiting.fetch_sub(1, Ordering::Relaxed);
        permit
    }

    async fn hook(&self, point: FailPoint) -> Flow {
        self.manager.hooks.at(point, self.id).await
    }

    async fn run(&self, claimed: Snapshot) -> RunOutcome {
        if self.hook(FailPoint::AfterClaim).await == Flow::Crash {
            return RunOutcome::Crashed;
        }
        let deadline = Instant::now() + self.manager.config.deadline;
        let mut state = LoopState {
            snapshot: Some(claimed),
            pending: None,
        };
        loop {
            if self.lease_lost.is_cancelled() {
                return RunOutcome::LeaseLost;
            }
            if self.manager.shutdown.is_cancelled() {
                return self.release(&mut state, RunOutcome::Shutdown).await;
            }
            if Instant::now() >= deadline {
                tracing::info!(item_id = %self.id, "item {} reached its deadline; the sweep resumes it", self.id);
                return self.release(&mut state, RunOutcome::Deadline).await;
            }
            match self.step(&mut state).await {
                Ok(Step::Continue) => {}
                Ok(Step::Done(outcome)) => return outcome,
                Err(StoreError::LeaseLost(_)) => return RunOutcome::LeaseLost,
                Err(error) => return store_failed(self.id, error),
            }
        }
    }

    /// One iteration: an event if one is pending, else decide and execute,
    /// else park.
    ///
    /// The last executor's outcome is kept in `state.pending` and applied to
    /// the in-memory view; it is written before anything else happens to the
    /// item (the next action, an event, a release) or together with the park,
    /// so a run whose last action needs no follow-up commits once.
    async fn step(&self, state: &mut LoopState) -> Result<Step, StoreError> {
        let store = &self.manager.store;
        let now = self.manager.clock.now();
        let mut snapshot = match state.snapshot.take() {
            Some(snapshot) => snapshot,
            None => self.snapshot(now).await?,
        };
        snapshot.view.now = now;
        snapshot.view.lease = Some(self.epoch);

        if snapshot.has_events {
            if self.flush(state, now).await? == Flow::Crash {
                return Ok(Step::Done(RunOutcome::Crashed));
            }
            let Some(event) = store.event_next(self.id).await? else {
                return Ok(Step::Continue);
            };
            let view = &snapshot.view;
            let result = if view.item.phase == Phase::Active {
                let handled = {
                    let _worker = self.worker().await;
                    self.item_type.handle_event(view, &event).await
                };
                match handled {
                    Ok(result) => result,
                    Err(error) => {
                        let message = format!("handling event {}: {}", event.event_type, error);
                        return self.fail(view, now, "handle_event", message, &error).await;
                    }
                }
            } else {
                EventResult::ignored()
            };
            let applied = {
                let lease = self.lease.lock().await;
                store
                    .event_apply(ApplyEvent {
                        lease: *lease,
                        event_id: event.id,
                        now,
                        result,
                    })
                    .await?
            };
            metrics::counter!(EVENTS_TOTAL, "item_type" => self.item_type.name()).increment(1);
            if applied == EventApplied::StalePhase {
                tracing::info!(item_id = %self.id, event_id = event.id, "stale phase change in event {} ignored for {}", event.id, self.id);
            }
            if self.hook(FailPoint::AfterEventApplied).await == Flow::Crash {
                return Ok(Step::Done(RunOutcome::Crashed));
            }
            return Ok(Step::Continue);
        }

        // The only call of the decider (DDR-49). Only active items act.
        let action = if snapshot.view.item.phase == Phase::Active {
            self.item_type.decide(&snapshot.view)
        } else {
            None
        };
        let Some(action) = action else {
            if self.hook(FailPoint::BeforePark).await == Flow::Crash {
                return Ok(Step::Done(RunOutcome::Crashed));
            }
            let parked = {
                let lease = self.lease.lock().await;
                store
                    .item_park_with(ParkParams {
                        lease: *lease,
                        now,
                        outcome: state.pending.take(),
                    })
                    .await?
            };
            return Ok(match parked {
                Park::Parked => Step::Done(RunOutcome::Parked),
                Park::EventsPending => Step::Continue,
            });
        };

        let type_name = self.item_type.name();
        let known = TypeRegistry::knows_action(self.item_type.as_ref(), action);
        let flow = if known && self.item_type.has_outside_effects(action) {
            self.begin(state, now, action).await?
        } else {
            self.flush(state, now).await?
        };
        if flow == Flow::Crash {
            return Ok(Step::Done(RunOutcome::Crashed));
        }
        if !known {
            let error = wq_core::ExecError::permanent(format!(
                "decider of {type_name} chose unknown action {action}"
            ));
            return self
                .fail(
                    &snapshot.view,
                    now,
                    action.name,
                    error.message.clone(),
                    &error,
                )
                .await;
        }
        metrics::counter!(ACTIONS_TOTAL, "item_type" => type_name, "action" => action.name)
            .increment(1);
        let result = {
            let _worker = self.worker().await;
            self.item_type.execute(action, &snapshot.view).await
        };
        if self.hook(FailPoint::AfterExecute).await == Flow::Crash {
            return Ok(Step::Done(RunOutcome::Crashed));
        }
        let now = self.manager.clock.now();
        match result {
            Ok(outcome) => {
                // Committed by the executor already: safe to run now.
                for id in &outcome.wake {
                    self.manager.notify(*id);
                }
                snapshot.view.apply_outcome(
                    outcome.phase,
                    outcome.reason.clone(),
                    &outcome.dimensions,
                    now,
                );
                state.pending = Some(OutcomeChanges {
                    phase: outcome.phase,
                    error: outcome.reason,
                    dimensions: outcome.dimensions,
                    action: Some(action.name.to_owned()),
                    records: outcome.records,
                });
                state.snapshot = Some(snapshot);
                Ok(Step::Continue)
            }
            Err(error) => {
                metrics::counter!(ACTIONS_FAILED_TOTAL, "item_type" => type_name, "action" => action.name)
                    .increment(1);
                let message = format!("{action}: {error}");
                self.fail(&snapshot.view, now, action.name, message, &error)
                    .await
            }
        }
    }

    async fn snapshot(&self, now: OffsetDateTime) -> Result<Snapshot, StoreError> {
        self.manager
            .store
            .item_snapshot(self.id, now)
            .await?
            .ok_or(StoreError::NotFound(self.id))
    }

    /// Writes the pending outcome, if any.
    async fn flush(&self, state: &mut LoopState, now: OffsetDateTime) -> Result<Flow, StoreError> {
        let Some(changes) = state.pending.take() else {
            return Ok(Flow::Continue);
        };
        {
            let lease = self.lease.lock().await;
            self.manager
                .store
                .item_apply_outcome(ApplyOutcome {
                    lease: *lease,
                    now,
                    phase: changes.phase,
                    error: changes.error,
                    dimensions: changes.dimensions,
                    action: changes.action,
                    records: changes.records,
                })
                .await?;
        }
        Ok(self.hook(FailPoint::AfterOutcome).await)
    }

    /// Records that `action`, which has outside effects, starts: with the
    /// pending outcome, if any, in one transaction.
    async fn begin(
        &self,
        state: &mut LoopState,
        now: OffsetDateTime,
        action: Action,
    ) -> Result<Flow, StoreError> {
        let outcome = state.pending.take();
        let wrote_outcome = outcome.is_some();
        {
            let lease = self.lease.lock().await;
            self.manager
                .store
                .item_begin_action(BeginAction {
                    lease: *lease,
                    now,
                    action: action.name.to_owned(),
                    outcome,
                })
                .await?;
        }
        if wrote_outcome {
            return Ok(self.hook(FailPoint::AfterOutcome).await);
        }
        Ok(Flow::Continue)
    }

    /// Records a failure. A failed item loops on to park; an item still
    /// active ends the run and waits out its backoff under its lease.
    async fn fail(
        &self,
        view: &ItemView,
        now: OffsetDateTime,
        action: &str,
        message: String,
        error: &wq_core::ExecError,
    ) -> Result<Step, StoreError> {
        let config = &self.manager.config;
        let mut lease = self.lease.lock().await;
        let attempts = view.item.attempts + 1;
        let mut backoff = config.backoff(attempts, error.retry_after);
        if error.outage {
            // Items failing on the same outage spread out instead of
            // returning together.
            backoff += config.jitter(self.id, attempts, backoff);
        }
        let retry_at = now + backoff;
        tracing::warn!(item_id = %self.id, attempts, error = %message, "item {} failed (attempt {attempts}): {message}", self.id);
        let item = self
            .manager
            .store
            .item_record_failure(RecordFailure {
                lease: *lease,
                now,
                error: message,
                max_attempts: config.max_attempts,
                permanent: error.permanent,
                retry_at,
                outage: error.outage,
                outage_started_before: now - config.outage_budget,
                action: Some(action.to_owned()),
            })
            .await?;
        if item.phase == Phase::Active {
            // The lease now runs until `retry_at`; stop renewing it.
            self.lease_lost.cancel();
            Ok(Step::Done(RunOutcome::Backoff))
        } else {
            *lease = Lease {
                id: self.id,
                until: item.leased_until.unwrap_or(lease.until),
                epoch: lease.epoch,
            };
            Ok(Step::Continue)
        }
    }

    async fn release(&self, state: &mut LoopState, outcome: RunOutcome) -> RunOutcome {
        let now = self.manager.clock.now();
        match self.flush(state, now).await {
            Ok(Flow::Continue) => {}
            Ok(Flow::Crash) => return RunOutcome::Crashed,
            Err(StoreError::LeaseLost(_)) => return RunOutcome::LeaseLost,
            Err(error) => return store_failed(self.id, error),
        }
        let lease = self.lease.lock().await;
        match self.manager.store.item_release(*lease, None).await {
            Ok(()) => outcome,
            Err(StoreError::LeaseLost(_)) => RunOutcome::LeaseLost,
            Err(error) => store_failed(self.id, error),
        }
    }
}

fn store_failed(id: ItemId, error: StoreError) -> RunOutcome {
    tracing::error!(item_id = %id, %error, "store error while processing {id}: {error}");
    RunOutcome::StoreFailed(error.to_string())
}
