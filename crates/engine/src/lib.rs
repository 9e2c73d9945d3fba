//! payoutd's use cases and workers, and the ports (store, clock, rails) they drive; no I/O of its own.

pub mod batches;
pub mod clock;
pub mod endpoints;
pub mod evm;
pub mod intake;
pub mod intake_rate;
pub mod operator_view;
pub mod pipeline;
pub mod pipeline_store;
pub mod rail;
pub mod standalone;
pub mod statement_text;
pub mod statements;
pub mod store;
pub mod transfers;
pub mod webhook_store;
pub mod webhooks;

pub use clock::{Clock, DatabaseClock, DatabaseTime, SystemClock};
pub use evm::{EvmChain, EvmLineStore, SigningSession};
pub use intake::{Engine, IntakeError, Payable, PayoutPage, Replay};
pub use operator_view::{
    BatchSummary, MerchantEntry, MerchantSummary, OperatorAction, OperatorPayoutQuery,
    OperatorViewStore, PayoutHistory, StatusAge, TransferSummary, WalletSummary,
};
#[cfg(feature = "defects")]
pub use pipeline::Defects;
pub use pipeline::{
    Caps, Lane, Pipeline, PipelineConfig, PipelineError, TickReport, Verdict, guard_key_of,
};
pub use pipeline_store::{
    AttemptSettlement, CapCheck, CapReading, FirstAttempt, IncidentSubject, NewIncident,
    PipelineStore,
};
pub use standalone::StandaloneLine;
pub use store::{Store, StoreError};
pub use webhook_store::WebhookStore;
pub use webhooks::{Dispatcher, WebhookConfig, WebhookError, WebhookTransport, Webhooks};
