//! The store port: every read and every atomic write the use cases need, in domain types.

use async_trait::async_trait;
use payoutd_domain::{
    Amount, ApiKeyHash, ApiKeyId, AssetCode, Attempt, AttemptSlot, BatchId, DepositId, DepositKey,
    EventId, EventType, Journal, MerchantId, Payout, PayoutId, PayoutKey, PayoutStatus, Transfer,
    TransferId,
};

/// Upper bound on one page of a listing.
pub const LIST_LIMIT_MAX: u32 = 100;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or the statement timed out: nothing is known to have changed.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A stored row does not parse into a domain value: someone wrote it outside payoutd, or a bug did.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The database refused a write that would break an invariant it enforces (constraint, check).
    #[error("store refused a write that breaks an invariant: {0}")]
    Invariant(String),
}

/// An outbox row, written in the same transaction as the change it announces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    pub id: EventId,
    pub event_type: EventType,
    pub entity_id: String,
    /// `None` for operator events that concern no merchant (a transfer no payout explains).
    pub merchant_id: Option<MerchantId>,
    pub payload_json: String,
    pub at_ms: i64,
}

impl NewEvent {
    pub fn for_payout(event_type: EventType, payout: &Payout, at_ms: i64) -> NewEvent {
        NewEvent {
            id: EventId::derive(event_type, payout.id.as_str()),
            event_type,
            entity_id: payout.id.as_str().to_owned(),
            merchant_id: Some(payout.merchant_id.clone()),
            payload_json: payout_event_json(payout),
            at_ms,
        }
    }
}

impl NewEvent {
    /// An event about a payout caused by its attempt `attempt`, which the payload names (number,
    /// rail, provider). The first attempt's events keep the payout as their entity; a later
    /// attempt's are keyed `payout_id/attempt_no`: a payout may pass through the same state once per
    /// attempt, and an entity never emits one type twice.
    pub fn for_payout_attempt(
        event_type: EventType,
        payout: &Payout,
        attempt: &EventAttemptBody,
        at_ms: i64,
    ) -> NewEvent {
        let mut event = NewEvent::for_payout(event_type, payout, at_ms);
        event.payload_json = payout_attempt_event_json(payout, attempt);
        if attempt.attempt_no > 1 {
            event.entity_id = format!("{}/{}", payout.id, attempt.attempt_no);
            event.id = EventId::derive(event_type, &event.entity_id);
        }
        event
    }
}

/// The attempt a payout's event is about, as its payload carries it beside the payout: which try,
/// on which rail family, and with which provider. `rail` and `provider` are absent when the attempt
/// is not made yet (a retry's event names the number it will have).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventAttemptBody {
    pub attempt_no: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rail: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

impl EventAttemptBody {
    pub fn of(attempt: &Attempt) -> EventAttemptBody {
        let provider = match &attempt.slot {
            AttemptSlot::Provider { provider, .. } => Some(provider.clone()),
            AttemptSlot::Evm(_) | AttemptSlot::Solana { .. } => None,
        };
        EventAttemptBody {
            attempt_no: attempt.attempt_no,
            rail: Some(attempt.slot.rail()),
            provider,
        }
    }

    /// Attempt `attempt_no`, before it exists.
    pub fn numbered(attempt_no: u32) -> EventAttemptBody {
        EventAttemptBody { attempt_no, rail: None, provider: None }
    }
}

/// The payout and the attempt that caused the event.
#[derive(serde::Serialize)]
struct PayoutAttemptEventBody<'a> {
    #[serde(flatten)]
    payout: PayoutBody,
    attempt: &'a EventAttemptBody,
}

/// The payout as an attempt's event carries it: the API's payout object plus `attempt`.
pub fn payout_attempt_event_json(p: &Payout, attempt: &EventAttemptBody) -> String {
    serde_json::to_string(&PayoutAttemptEventBody { payout: PayoutBody::from_domain(p), attempt })
        .expect("a payout body serializes")
}

/// The payout as the outside world sees it: the API's payout object and its events' payload, one
/// shape built in one place.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PayoutBody {
    pub id: String,
    /// Always `payout`.
    pub object: &'static str,
    pub status: &'static str,
    pub asset: String,
    pub amount: String,
    /// Base units of `asset` charged beside `amount`; refunded if the payout ends without paying.
    pub network_fee: String,
    pub destination: String,
    pub idempotency_key: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub metadata: serde_json::Value,
    pub version: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl PayoutBody {
    pub fn from_domain(p: &Payout) -> PayoutBody {
        PayoutBody {
            id: p.id.to_string(),
            object: "payout",
            status: p.status.as_str(),
            asset: p.asset.to_string(),
            amount: p.amount.to_string(),
            network_fee: p.network_fee.to_string(),
            destination: p.destination.to_string(),
            idempotency_key: p.key.to_string(),
            // Stored metadata is a JSON object written by intake; anything else reads as null.
            metadata: serde_json::from_str(p.metadata.as_json()).unwrap_or(serde_json::Value::Null),
            version: p.version,
            created_at_ms: p.created_at_ms,
            updated_at_ms: p.updated_at_ms,
        }
    }
}

/// The payout as its events carry it: the API's payout object.
pub fn payout_event_json(p: &Payout) -> String {
    serde_json::to_string(&PayoutBody::from_domain(p)).expect("a payout body serializes")
}

/// A payout to insert together with its hold journal and its `payout.created` event (I2).
#[derive(Debug, Clone)]
pub struct NewPayout {
    /// Written with `payout.intake_journals()`: its hold and, when charged, its network fee.
    pub payout: Payout,
    pub event: NewEvent,
    /// New payouts its merchant may create in the clock hour of `payout.created_at_ms`, counted by
    /// the store across every process that writes to it.
    pub payouts_per_hour_max: u32,
}

/// The length of the window the hourly intake limit counts in.
pub const INTAKE_HOUR_MS: i64 = 3_600_000;

/// The clock hour (its first millisecond) a payout created at `at_ms` counts in.
pub fn intake_hour_ms(at_ms: i64) -> i64 {
    at_ms - at_ms.rem_euclid(INTAKE_HOUR_MS)
}

#[derive(Debug, Clone)]
pub enum InsertPayoutOutcome {
    Created(Payout),
    /// Another request with the same (merchant, key) won; this is its row.
    Existing(Payout),
    InsufficientFunds,
    /// The merchant created `payouts_per_hour_max` payouts in this clock hour already; nothing written.
    HourFull,
}

/// A conditional payout transition (I5): applied only if the row is still at `from` and `from_version`.
#[derive(Debug, Clone)]
pub struct PayoutTransition {
    pub payout_id: PayoutId,
    pub merchant_id: MerchantId,
    pub from: PayoutStatus,
    pub from_version: i64,
    pub to: PayoutStatus,
    /// Ledger effects of the transition (release, settle), applied in the same transaction.
    pub journals: Vec<Journal>,
    pub event: NewEvent,
    pub at_ms: i64,
}

// Returned once per conditional write and matched at once: a box would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum TransitionOutcome {
    Applied(Payout),
    /// The row was no longer at the expected state and version; nothing was written.
    Stale,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deposit {
    pub id: DepositId,
    pub merchant_id: MerchantId,
    pub key: DepositKey,
    pub asset: AssetCode,
    pub amount: Amount,
    pub created_at_ms: i64,
}

#[derive(Debug, Clone)]
pub struct NewDeposit {
    pub deposit: Deposit,
    pub journal: Journal,
    pub event: NewEvent,
}

#[derive(Debug, Clone)]
pub enum DepositOutcome {
    Created(Deposit),
    Existing(Deposit),
    UnknownMerchant,
}

/// A batch as opened, before its lines are written: `line_count` lines will follow, in chunks.
#[derive(Debug, Clone)]
pub struct NewBatch {
    pub id: BatchId,
    pub merchant_id: MerchantId,
    pub key: String,
    pub line_count: usize,
    pub at_ms: i64,
}

/// A chunk of a batch's lines, numbered from `first_line_no`: each line's external id and, for
/// each line without a payout, why.
#[derive(Debug, Clone, Copy)]
pub struct BatchLines<'a> {
    pub first_line_no: u32,
    pub lines: &'a [(PayoutKey, Option<String>)],
}

/// One line of a stored batch, with its payout if it has one.
#[derive(Debug, Clone)]
pub struct BatchLineView {
    pub line_no: u32,
    pub external_id: PayoutKey,
    pub payout: Option<Payout>,
    pub error: Option<String>,
}

/// Lines of a batch read at once, unless asked for fewer: a JSON batch (10,000 lines at most) in
/// one page.
pub const BATCH_PAGE_LINES_DEFAULT: u32 = 10_000;
/// Lines of a batch read at most at once: a 100,000-line payroll is read in pages.
pub const BATCH_PAGE_LINES_MAX: u32 = 10_000;

/// Which of a batch's lines to read: those after `after_line_no`, at most `limit`.
#[derive(Debug, Clone, Copy)]
pub struct BatchPage {
    pub after_line_no: u32,
    pub limit: u32,
}

/// A page of a batch's lines, with the whole batch's counts.
#[derive(Debug, Clone)]
pub struct BatchView {
    pub id: BatchId,
    pub created_at_ms: i64,
    /// Every line of the batch by its payout's status (`not_created` for a line without one).
    pub counts: Vec<(String, i64)>,
    pub lines: Vec<BatchLineView>,
    /// Whether lines follow the last one of this page.
    pub has_more: bool,
}

/// An API key as listed: its id and life, nothing that would let anyone use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyInfo {
    pub id: ApiKeyId,
    pub merchant_id: MerchantId,
    pub created_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
}

/// A transfer with its journal (the conditional debit and the credit) and its two
/// `transfer.completed` events (source, destination), all in one transaction.
#[derive(Debug, Clone)]
pub struct NewTransfer {
    pub transfer: Transfer,
    pub journal: Journal,
    pub events: [NewEvent; 2],
}

#[derive(Debug, Clone)]
pub enum TransferOutcome {
    Created(Transfer),
    /// The (merchant, key) exists: this is its row (a replay, or a reuse if the fingerprint differs).
    Existing(Transfer),
    InsufficientFunds,
    UnknownDestination,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Balance {
    pub asset: AssetCode,
    pub available: Amount,
    pub held: Amount,
}

#[derive(Debug, Clone, Default)]
pub struct PayoutQuery {
    pub key: Option<PayoutKey>,
    pub status: Option<PayoutStatus>,
    /// Cursor: only payouts with an id below this one (ids are time-ordered; newest first).
    pub before: Option<PayoutId>,
    pub limit: u32,
}

/// What an auditor checks: journals sum to zero, balances equal what their entries derive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LedgerAudit {
    pub journals: u64,
    pub unbalanced_journals: u64,
    pub balance_rows: u64,
    pub balances_not_matching_entries: u64,
    pub negative_balances: u64,
}

impl LedgerAudit {
    pub fn is_clean(&self) -> bool {
        self.unbalanced_journals == 0
            && self.balances_not_matching_entries == 0
            && self.negative_balances == 0
    }
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    async fn ping(&self) -> Result<(), StoreError>;

    async fn create_merchant(
        &self,
        id: &MerchantId,
        name: &str,
        key_hash: &ApiKeyHash,
        at_ms: i64,
    ) -> Result<(), StoreError>;
    async fn merchant_by_key_hash(
        &self,
        key_hash: &ApiKeyHash,
    ) -> Result<Option<MerchantId>, StoreError>;
    /// Adds a key to an existing merchant; false when there is no such merchant.
    async fn add_api_key(
        &self,
        merchant: &MerchantId,
        key_hash: &ApiKeyHash,
        at_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Revokes a key that is not revoked yet; false when there is none by that id.
    async fn revoke_api_key(&self, id: &ApiKeyId, at_ms: i64) -> Result<bool, StoreError>;
    /// The merchant's keys, revoked ones too, oldest first (never the key itself: only its hash is stored).
    async fn api_keys(&self, merchant: &MerchantId) -> Result<Vec<ApiKeyInfo>, StoreError>;

    /// Idempotent credit: keyed by (merchant, deposit key).
    async fn record_deposit(&self, deposit: &NewDeposit) -> Result<DepositOutcome, StoreError>;

    async fn payout_by_key(
        &self,
        merchant: &MerchantId,
        key: &PayoutKey,
    ) -> Result<Option<Payout>, StoreError>;
    /// The merchant of a live API key (by its hash) and that merchant's payout under `key`, in one
    /// read: a replay, the common retry, costs one round trip. `None` when the key is unknown or revoked.
    async fn merchant_and_payout_by_key(
        &self,
        key_hash: &ApiKeyHash,
        key: &PayoutKey,
    ) -> Result<Option<(MerchantId, Option<Payout>)>, StoreError>;
    /// Under a lock on (merchant, key): re-check the key, hold, insert payout and event, commit.
    /// A unique-constraint loss is resolved to the winner's row.
    async fn insert_payout(&self, new: &NewPayout) -> Result<InsertPayoutOutcome, StoreError>;
    /// `insert_payout` for each of `lines` (one merchant's), in one transaction, deciding them in
    /// order as one call after the other would: a line whose key exists answers `Existing`, a line
    /// the balance (or the hour) no longer covers is refused and the others go on.
    async fn insert_payouts(
        &self,
        lines: &[NewPayout],
    ) -> Result<Vec<InsertPayoutOutcome>, StoreError>;
    /// The merchant's payouts with these keys (those that exist), in no order.
    async fn payouts_by_keys(
        &self,
        merchant: &MerchantId,
        keys: &[payoutd_domain::PayoutKey],
    ) -> Result<Vec<Payout>, StoreError>;
    async fn payout(
        &self,
        merchant: &MerchantId,
        id: &PayoutId,
    ) -> Result<Option<Payout>, StoreError>;
    async fn list_payouts(
        &self,
        merchant: &MerchantId,
        query: &PayoutQuery,
    ) -> Result<Vec<Payout>, StoreError>;
    async fn transition_payout(
        &self,
        transition: &PayoutTransition,
    ) -> Result<TransitionOutcome, StoreError>;

    /// Under a lock on (merchant, key): re-check the key, debit if the balance allows, credit,
    /// insert the transfer and its events, commit; a unique-constraint loss resolves to the winner.
    async fn insert_transfer(&self, new: &NewTransfer) -> Result<TransferOutcome, StoreError>;
    /// A transfer the merchant sent or received.
    async fn transfer(
        &self,
        merchant: &MerchantId,
        id: &TransferId,
    ) -> Result<Option<Transfer>, StoreError>;

    /// Stores a batch's head, or finds the merchant's batch with the same key; returns that
    /// batch's id either way. A batch is never completed before all its `line_count` lines exist.
    async fn open_batch(&self, batch: &NewBatch) -> Result<BatchId, StoreError>;
    /// Stores a chunk of a batch's lines, or, where a line exists, updates its error.
    async fn save_batch_lines(&self, id: &BatchId, lines: BatchLines<'_>)
    -> Result<(), StoreError>;
    /// A page of a batch of the merchant's, each line with its payout (found by external id) or
    /// its error, and the whole batch's counts.
    async fn batch(
        &self,
        merchant: &MerchantId,
        id: &BatchId,
        page: BatchPage,
    ) -> Result<Option<BatchView>, StoreError>;

    async fn balances(&self, merchant: &MerchantId) -> Result<Vec<Balance>, StoreError>;
    /// Every payout per status (reads the whole table).
    async fn count_payouts_by_status(&self) -> Result<Vec<(PayoutStatus, u64)>, StoreError>;
    /// Payouts per status that is not final, through an index: the cost follows the backlog.
    async fn count_live_payouts_by_status(&self) -> Result<Vec<(PayoutStatus, u64)>, StoreError>;
    /// Open incidents per kind (as stored), for the metrics a pager watches.
    async fn count_open_incidents_by_kind(&self) -> Result<Vec<(String, u64)>, StoreError>;
    async fn count_events(
        &self,
        merchant: &MerchantId,
        event_type: EventType,
    ) -> Result<u64, StoreError>;
    async fn audit_ledger(&self) -> Result<LedgerAudit, StoreError>;
}
