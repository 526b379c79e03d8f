//! Item types for tests and benchmarks. `chain` runs `step1` → `step2` →
//! `step3` in order and reacts to events; `noop` runs one no-op action.
//! Both count executions so tests can prove exactly-once behaviour.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use wq_core::{
    Action, DimensionUpdate, EventResult, ExecError, ExecOutcome, ItemId, ItemType, ItemView,
    PendingEvent, Phase,
};

/// Name of the chained test type.
pub const CHAIN: &str = "chain";
/// Name of the single-action benchmark type.
pub const NOOP: &str = "noop";

/// The chain's steps, in decider priority order.
pub const CHAIN_STEPS: [&str; 3] = ["step1", "step2", "step3"];

/// Executions per `(item, action)`.
#[derive(Debug, Default, Clone)]
pub struct Executions {
    counts: Arc<Mutex<HashMap<(ItemId, &'static str), u32>>>,
    order: Arc<Mutex<HashMap<ItemId, Vec<&'static str>>>>,
}

impl Executions {
    fn record(&self, id: ItemId, action: &'static str) {
        *self
            .counts
            .lock()
            .expect("executions lock")
            .entry((id, action))
            .or_default() += 1;
        self.order
            .lock()
            .expect("executions lock")
            .entry(id)
            .or_default()
            .push(action);
    }

    /// How often `action` ran for `id`.
    pub fn count(&self, id: ItemId, action: &str) -> u32 {
        self.counts
            .lock()
            .expect("executions lock")
            .iter()
            .filter(|((item, name), _)| *item == id && *name == action)
            .map(|(_, count)| *count)
            .sum()
    }

    /// The actions run for `id`, in order.
    pub fn order(&self, id: ItemId) -> Vec<&'static str> {
        self.order
            .lock()
            .expect("executions lock")
            .get(&id)
            .cloned()
            .unwrap_or_default()
    }

    /// Total executions over all items.
    pub fn total(&self) -> u64 {
        self.counts
            .lock()
            .expect("executions lock")
            .values()
            .map(|count| u64::from(*count))
            .sum()
    }

    /// Every `(item, action)` that ran more than once.
    pub fn repeated(&self) -> Vec<(ItemId, &'static str, u32)> {
        self.counts
            .lock()
            .expect("executions lock")
            .iter()
            .filter(|(_, count)| **count > 1)
            .map(|((id, action), count)| (*id, *action, *count))
            .collect()
    }
}

/// Three chained actions driven by `needs_step*` dimensions.
///
/// Events: `extra` sets `needs_extra` (the decider then runs `extra`),
/// `finish` completes the item, `cancel` cancels it. Failures can be
/// scripted per item with [`ChainType::fail_next`].
#[derive(Debug, Default, Clone)]
pub struct ChainType {
    pub executions: Executions,
    failures: Arc<Mutex<HashMap<ItemId, (u32, bool)>>>,
    panics: Arc<Mutex<HashMap<ItemId, u32>>>,
}

impl ChainType {
    pub fn new() -> Self {
        Self::default()
    }

    /// The next `times` executions for `id` fail (permanently if asked).
    pub fn fail_next(&self, id: ItemId, times: u32, permanent: bool) {
        self.failures
            .lock()
            .expect("failures lock")
            .insert(id, (times, permanent));
    }

    /// The next `times` executions for `id` panic (an executor bug).
    pub fn panic_next(&self, id: ItemId, times: u32) {
        self.panics.lock().expect("panics lock").insert(id, times);
    }

    fn take_panic(&self, id: ItemId) -> bool {
        let mut panics = self.panics.lock().expect("panics lock");
        match panics.get_mut(&id) {
            Some(left) if *left > 0 => {
                *left -= 1;
                true
            }
            _ => false,
        }
    }

    fn take_failure(&self, id: ItemId) -> Option<bool> {
        let mut failures = self.failures.lock().expect("failures lock");
        let entry = failures.get_mut(&id)?;
        if entry.0 == 0 {
            return None;
        }
        entry.0 -= 1;
        Some(entry.1)
    }
}

#[async_trait]
impl ItemType for ChainType {
    fn name(&self) -> &'static str {
        CHAIN
    }

    fn actions(&self) -> &'static [&'static str] {
        &["step1", "step2", "step3", "extra"]
    }

    fn decide(&self, view: &ItemView) -> Option<Action> {
        for step in CHAIN_STEPS {
            if view.needs(&format!("needs_{step}")) {
                return Some(Action::new(step));
            }
        }
        if view.needs_present("needs_extra", "") {
            return Some(Action::new("extra"));
        }
        None
    }

    async fn execute(&self, action: Action, view: &ItemView) -> Result<ExecOutcome, ExecError> {
        let id = view.item.id;
        assert!(!self.take_panic(id), "scripted panic in {action}");
        if let Some(permanent) = self.take_failure(id) {
            return Err(if permanent {
                ExecError::permanent(format!("scripted permanent failure of {action}"))
            } else {
                ExecError::transient(format!("scripted failure of {action}"))
            });
        }
        self.executions.record(id, action.name);
        Ok(ExecOutcome::done().with_dimension(
            DimensionUpdate::new(format!("needs_{}", action.name), false)
                .detail(serde_json::json!({ "ran_at": view.now.unix_timestamp() })),
        ))
    }

    async fn handle_event(
        &self,
        _view: &ItemView,
        event: &PendingEvent,
    ) -> Result<EventResult, ExecError> {
        Ok(match event.event_type.as_str() {
            "extra" => {
                EventResult::ignored().with_dimension(DimensionUpdate::new("needs_extra", true))
            }
            "finish" => EventResult::ignored().with_phase(Phase::Completed),
            "cancel" => EventResult::ignored().with_phase(Phase::Cancelled),
            _ => EventResult::ignored(),
        })
    }
}

/// One no-op action, for throughput benchmarks.
#[derive(Debug, Default, Clone)]
pub struct NoopType;

#[async_trait]
impl ItemType for NoopType {
    fn name(&self) -> &'static str {
        NOOP
    }

    fn actions(&self) -> &'static [&'static str] {
        &["noop"]
    }

    fn decide(&self, view: &ItemView) -> Option<Action> {
        view.needs("needs_noop").then_some(Action::new("noop"))
    }

    async fn execute(&self, _action: Action, _view: &ItemView) -> Result<ExecOutcome, ExecError> {
        Ok(ExecOutcome::done().with_dimension(DimensionUpdate::new("needs_noop", false)))
    }

    async fn handle_event(
        &self,
        _view: &ItemView,
        _event: &PendingEvent,
    ) -> Result<EventResult, ExecError> {
        Ok(EventResult::ignored())
    }
}
