//! The store port of the pipeline workers: hot wallets, signing sessions, attempts, settlement, incidents.

use async_trait::async_trait;
use payoutd_domain::{
    Amount, AssetCode, Attempt, AttemptId, AttemptStatus, AttemptTx, Destination, EvmAddress, HotWallet, Incident,
    IncidentId, IncidentKind, MerchantId, Payout, PayoutId, PayoutStatus,
};

use crate::store::{NewEvent, PayoutTransition, Store, StoreError, TransitionOutcome};

/// An incident to open, with its `incident.opened` event, in the same transaction as what caused it.
#[derive(Debug, Clone)]
pub struct NewIncident {
    pub id: IncidentId,
    pub kind: IncidentKind,
    pub merchant_id: Option<MerchantId>,
    pub payout_id: Option<PayoutId>,
    pub attempt_id: Option<AttemptId>,
    pub detail: String,
    /// `incident.opened` for the merchant concerned; `None` for operator-only incidents (a transfer
    /// out of a hot wallet that no payout explains concerns no merchant).
    pub event: Option<NewEvent>,
    pub at_ms: i64,
}

/// An attempt reaching a final state together with its payout's transition (and maybe an incident),
/// all or nothing: the attempt must still be at `attempt_from`, the payout at its expected state.
#[derive(Debug, Clone)]
pub struct AttemptSettlement {
    pub attempt_id: AttemptId,
    pub attempt_from: AttemptStatus,
    pub attempt_to: AttemptStatus,
    /// Why the attempt can never land (required for `dead`), or the landed hash (for `confirmed`).
    pub evidence: String,
    pub payout: PayoutTransition,
    pub incident: Option<NewIncident>,
}

/// One signing transaction on one hot wallet: the wallet row is locked for its whole life,
/// so nonces are allocated one after another and a crash before `commit` leaves no trace (8.12).
#[async_trait]
pub trait SigningSession: Send {
    /// The nonce the next `record_signed` must use.
    fn next_nonce(&self) -> u64;
    /// Approved payouts in these assets, oldest first, locked (PostgreSQL: `FOR UPDATE SKIP LOCKED`).
    async fn claim_approved(&mut self, assets: &[AssetCode], limit: u32) -> Result<Vec<Payout>, StoreError>;
    /// Stores the attempt (status `signed`, nonce = `next_nonce()`, its one original transaction with
    /// raw bytes), moves the payout approved -> processing with `event`, and advances the nonce.
    /// A store may defer the writes to `commit` (PostgreSQL batches them): a refusal (a second live
    /// attempt, I3; a payout no longer approved at its version, I5) then comes back from `commit`,
    /// and either way nothing of the session is stored.
    async fn record_signed(&mut self, payout: &Payout, attempt: &Attempt, event: &NewEvent) -> Result<(), StoreError>;
    /// Caps exceeded at signing time (I8): approved -> held_for_review; no nonce used.
    async fn hold_for_review(&mut self, payout: &Payout, event: &NewEvent, at_ms: i64) -> Result<(), StoreError>;
    /// Writes whatever `record_signed` deferred, moves the wallet's counter and commits: all or nothing.
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;
}

#[async_trait]
pub trait PipelineStore: Store {
    /// Registers the wallet if new (its counter starting at `start_nonce`) and returns it.
    async fn ensure_hot_wallet(&self, chain_id: u64, address: &EvmAddress, start_nonce: u64) -> Result<HotWallet, StoreError>;
    async fn hot_wallet(&self, wallet_id: &str) -> Result<Option<HotWallet>, StoreError>;
    /// Moves the counter up to `floor` if it is below; never down (8.13). Returns the counter.
    async fn raise_nonce_floor(&self, wallet_id: &str, floor: u64) -> Result<u64, StoreError>;

    /// Oldest first, across merchants (workers are not merchant-scoped).
    async fn payouts_in_status(&self, status: PayoutStatus, limit: u32) -> Result<Vec<Payout>, StoreError>;
    async fn payout_by_id(&self, id: &PayoutId) -> Result<Option<Payout>, StoreError>;
    /// Same merchant, asset, destination and amount, created at or after `since_ms`, other than
    /// `payout` itself, not canceled, rejected or failed.
    async fn count_similar_payouts(&self, payout: &Payout, since_ms: i64) -> Result<u64, StoreError>;
    /// Sum of amounts of attempts signed since `since_ms` towards `destination` in `asset` (any merchant).
    async fn destination_volume_since(&self, asset: &AssetCode, destination: &Destination, since_ms: i64) -> Result<Amount, StoreError>;
    /// Sum of amounts of attempts signed since `since_ms` by `wallet_id` in `asset`.
    async fn wallet_volume_since(&self, wallet_id: &str, asset: &AssetCode, since_ms: i64) -> Result<Amount, StoreError>;

    /// `None` when another worker holds this wallet's signing lock (PostgreSQL: `FOR UPDATE SKIP LOCKED`).
    async fn begin_signing(&self, wallet_id: &str) -> Result<Option<Box<dyn SigningSession>>, StoreError>;

    /// Live attempts (signed, broadcast) with their payouts: lowest nonce first (the head of each
    /// wallet's line blocks everything behind it), attempts of payouts waiting for a person last,
    /// then least recently checked.
    async fn live_attempts(&self, limit: u32) -> Result<Vec<(Attempt, Payout)>, StoreError>;
    async fn attempts_of(&self, payout_id: &PayoutId) -> Result<Vec<Attempt>, StoreError>;
    /// signed -> broadcast (conditional); false if it was not `signed`. Also records the send time.
    async fn mark_broadcast(&self, attempt_id: &AttemptId, at_ms: i64) -> Result<bool, StoreError>;
    /// `mark_broadcast` for many attempts in one statement (one commit); returns how many moved.
    async fn mark_broadcast_many(&self, attempt_ids: &[AttemptId], at_ms: i64) -> Result<u64, StoreError>;
    async fn record_sent(&self, attempt_id: &AttemptId, at_ms: i64) -> Result<(), StoreError>;
    /// Moves these attempts to the back of the sweep's tie order, in one statement; every id must exist.
    async fn record_checked(&self, attempt_ids: &[AttemptId], at_ms: i64) -> Result<(), StoreError>;
    /// Stores a replacement or cancel transaction before it is sent (I4); the attempt must be live.
    async fn add_attempt_tx(&self, attempt_id: &AttemptId, tx: &AttemptTx) -> Result<(), StoreError>;
    /// A receipt below the finality threshold.
    async fn record_mined(&self, attempt_id: &AttemptId, block: u64, hash: &str) -> Result<(), StoreError>;
    /// The receipt disappeared (reorg): the attempt is plainly broadcast again.
    async fn clear_mined(&self, attempt_id: &AttemptId) -> Result<(), StoreError>;
    async fn settle_attempt(&self, settlement: &AttemptSettlement) -> Result<TransitionOutcome, StoreError>;

    /// Whether the outbox holds this event (ids are derived from type and entity, so this asks
    /// "did entity X ever emit type T").
    async fn event_exists(&self, id: &payoutd_domain::EventId) -> Result<bool, StoreError>;

    async fn open_incident(&self, incident: &NewIncident) -> Result<(), StoreError>;
    /// Opens `incident` unless one of the same kind about the same `subject` (a transaction hash)
    /// exists, open or resolved: two workers scanning the same block open it once. True if opened.
    async fn open_incident_once(&self, incident: &NewIncident, subject: &str) -> Result<bool, StoreError>;

    /// The next block the reconciliation of this wallet scans; `None` before its first pass.
    async fn reconcile_cursor(&self, wallet_id: &str) -> Result<Option<u64>, StoreError>;
    /// Sets the cursor to `block` if it was never set; returns the cursor.
    async fn start_reconcile_cursor(&self, wallet_id: &str, block: u64) -> Result<u64, StoreError>;
    /// Moves the cursor from `from` to `to` (conditional: false if another worker moved it first).
    async fn advance_reconcile_cursor(&self, wallet_id: &str, from: u64, to: u64) -> Result<bool, StoreError>;
    /// Which of these hashes belong to a stored attempt transaction (original, replacement or cancel).
    async fn known_tx_hashes(&self, hashes: &[String]) -> Result<Vec<String>, StoreError>;
    async fn open_incidents(&self, limit: u32) -> Result<Vec<Incident>, StoreError>;
    /// False if it was already resolved or does not exist.
    async fn resolve_incident(&self, id: &IncidentId, resolution: &str, at_ms: i64) -> Result<bool, StoreError>;
}
