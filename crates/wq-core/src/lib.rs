//! Domain of workqueue: work items, phases, dimensions, actions, events and
//! the `ItemType` trait that item types implement. This crate does no I/O;
//! the store, engine and API build on it.

pub mod api;
pub mod clock;
pub mod dimension;
pub mod event;
pub mod item;
pub mod item_type;
pub mod permission;
pub mod status;

pub use api::{
    CHANNEL_HEADER, CommandReply, CommandSpec, CommandStatus, DeliveryTrust, FieldError, Headers,
    OWNED_BY_ANOTHER_CALLER, RequestError, Submission, SubmitOutcome, Submitted, WebhookError,
    WebhookReceipt, WebhookReceiver,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use dimension::{Dimension, DimensionStatus, DimensionUpdate};
pub use event::{EventResult, PendingEvent};
pub use item::{ItemId, ItemView, LeaseEpoch, Phase, WorkItem};
pub use item_type::{
    Action, BoxError, BoxFuture, ExecError, ExecOutcome, ItemType, MigrateError, OutcomeRecord,
    Periodic, PeriodicResult, RegistryError, TypeRegistry, TypeRegistryBuilder,
};
pub use permission::Permission;
pub use status::{DisplayState, StatusSummary};
