//! The pure domain of payoutd: values that cannot be invalid, state machines and ledger rules, no I/O.

pub mod address;
pub mod asset;
pub mod attempt;
pub mod chain_reference;
pub mod event;
pub mod explorer;
pub mod ids;
pub mod keys;
pub mod ledger;
pub mod money;
pub mod payout;
pub mod route;
pub mod secret;
pub mod status;
pub mod transfer;
pub mod webhook;

pub use address::{Destination, DestinationKind, EvmAddress, ProviderAccount, SolanaAddress};
pub use asset::{Asset, AssetCode, AssetRegistry, RailFamily};
pub use attempt::{
    Attempt, AttemptSlot, AttemptTx, EvmSlot, FeeBid, HotWallet, Incident, IncidentKind,
    SolanaExpiry, TxKind, TxRef, TxRefError,
};
pub use chain_reference::{CHAIN_REFERENCE_BYTES, ChainReference, ReferenceKey};
pub use event::{EventId, EventType, UnknownEventType};
pub use explorer::ExplorerUrl;
pub use ids::{
    ApiKeyId, AttemptId, BatchId, DepositId, IncidentId, JournalId, MerchantId, PayoutId,
    TransferId, WebhookEndpointId,
};
pub use keys::{DepositKey, PayoutKey, TransferKey};
pub use ledger::{Account, Bucket, Journal, JournalKind, WalletSend};
pub use money::Amount;
pub use payout::{
    BatchKeyDigest, Fingerprint, Metadata, Payout, PayoutRequest, batch_key_of, business_event_of,
};
pub use route::{AttemptTurn, Route, RouteError, Routes};
pub use secret::{ApiKey, ApiKeyHash, Secret, SecretUrl};
pub use status::{AttemptStatus, PayoutStatus, TransitionError};
pub use transfer::{Transfer, TransferRequest};
pub use webhook::{EndpointOwner, EventFilter, WebhookSecret, WebhookUrl};
