//! What the operator's dashboard reads and writes beyond the use cases: payouts of every merchant by filter, their ages, the recent rate, and the audit log of operator actions.

use async_trait::async_trait;
use payoutd_domain::{Amount, AssetCode, MerchantId, Payout, PayoutId, PayoutKey, PayoutStatus};

use crate::store::StoreError;

/// Payouts a dashboard page shows at most.
pub const OPERATOR_PAGE_MAX: u32 = 200;
/// Audit log entries read at most at once.
pub const AUDIT_PAGE_MAX: u32 = 500;
/// An audit entry's free text (a resolution, evidence) is cut to this many characters.
pub const AUDIT_DETAIL_CHARS_MAX: usize = 2_000;

/// Filters over all merchants' payouts, newest first, from a cursor.
#[derive(Debug, Clone, Default)]
pub struct OperatorPayoutQuery {
    pub status: Option<PayoutStatus>,
    pub merchant: Option<MerchantId>,
    pub asset: Option<AssetCode>,
    pub key: Option<PayoutKey>,
    /// The destination exactly as stored (`Destination::to_string`).
    pub destination: Option<String>,
    /// Only payouts created at or after this time.
    pub created_from_ms: Option<i64>,
    /// Only payouts created before this time.
    pub created_before_ms: Option<i64>,
    /// Only payouts with an id below this one (ids are time-ordered).
    pub before: Option<PayoutId>,
    pub limit: u32,
}

/// The oldest payout in one status, and how many are in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusAge {
    pub status: PayoutStatus,
    pub count: u64,
    pub oldest: PayoutId,
    /// When that payout last changed (it has been in the status since).
    pub oldest_since_ms: i64,
}

/// One operator action, as the audit log keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorAction {
    pub at_ms: i64,
    /// Who: the dashboard session (a short id derived from it), or `api` / `cli`.
    pub actor: String,
    /// `sign_in`, `sign_out`, `approve`, `reject`, `resolve`, `resolve_incident`, ...
    pub action: String,
    /// The payout or incident acted on; empty for a sign-in.
    pub subject: String,
    /// The outcome, the verdict and its evidence, as written.
    pub detail: String,
}

/// A merchant as the dashboard lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MerchantSummary {
    pub id: MerchantId,
    pub name: String,
    pub created_at_ms: i64,
}

/// A hot wallet with what the ledger says it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalletSummary {
    pub id: String,
    /// `evm:1`-style chain or `solana:<cluster>`, as the wallet row names it.
    pub chain: String,
    pub address: String,
    /// Where the wallet's signing line stands, on a family that lines attempts up (the next EVM
    /// transaction count it signs at); `None` where each attempt stands alone.
    pub next_in_line: Option<u64>,
    /// Per asset the wallet's account moved in: what arrived less what left.
    pub balances: Vec<(AssetCode, Amount)>,
}

/// A payout batch as the dashboard lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSummary {
    pub id: String,
    pub merchant: MerchantId,
    pub lines: u64,
    pub created_at_ms: i64,
    /// When every line's payout was final (`batch.completed`).
    pub completed_at_ms: Option<i64>,
}

/// A transfer between merchants as the dashboard lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferSummary {
    pub id: String,
    pub from: MerchantId,
    pub to: MerchantId,
    pub asset: AssetCode,
    pub amount: Amount,
    pub created_at_ms: i64,
}

/// Batches and transfers a page lists at most (newest first).
pub const RECENT_SHOWN_MAX: u32 = 200;

/// Hot wallets the overview lists at most.
pub const WALLETS_SHOWN_MAX: u32 = 100;

/// Merchants a page lists at most.
pub const MERCHANTS_PAGE_MAX: u32 = 500;

/// A payout's events and operator actions its page shows at most.
pub const PAYOUT_HISTORY_MAX: u32 = 200;

/// What a payout's page tells beyond the payout and its attempts, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PayoutHistory {
    /// Its events, of every attempt: (`payout.review_approved`, ..., when).
    pub events: Vec<(String, i64)>,
    /// Each ended attempt's evidence: the proof that it can never land, or what was seen landed.
    pub evidence: Vec<(u32, String)>,
    /// What operators did to it, and who.
    pub actions: Vec<OperatorAction>,
}

#[async_trait]
pub trait OperatorViewStore: Send + Sync {
    /// Oldest first.
    async fn merchants(&self, limit: u32) -> Result<Vec<MerchantSummary>, StoreError>;
    /// The newest batches and transfers of every merchant.
    async fn recent_batches(&self, limit: u32) -> Result<Vec<BatchSummary>, StoreError>;
    async fn recent_transfers(&self, limit: u32) -> Result<Vec<TransferSummary>, StoreError>;
    /// Every hot wallet (up to [`WALLETS_SHOWN_MAX`]) with its ledger balances.
    async fn hot_wallets(&self) -> Result<Vec<WalletSummary>, StoreError>;
    async fn operator_payouts(
        &self,
        query: &OperatorPayoutQuery,
    ) -> Result<Vec<Payout>, StoreError>;
    /// For each of `statuses` that holds payouts: the count and the payout waiting longest.
    async fn status_ages(&self, statuses: &[PayoutStatus]) -> Result<Vec<StatusAge>, StoreError>;
    /// Payouts created per minute since `since_ms`: (minute start in ms, count), oldest first,
    /// minutes without payouts left out.
    async fn payouts_per_minute(&self, since_ms: i64) -> Result<Vec<(i64, u64)>, StoreError>;
    async fn record_operator_action(&self, action: &OperatorAction) -> Result<(), StoreError>;
    /// Newest first.
    async fn operator_actions(&self, limit: u32) -> Result<Vec<OperatorAction>, StoreError>;
    /// The payout's events (its own and those of its later attempts, `attempts` of them), each
    /// ended attempt's evidence and the operator actions on it.
    async fn payout_history(
        &self,
        id: &PayoutId,
        attempts: u32,
    ) -> Result<PayoutHistory, StoreError>;
    /// The payout one of whose attempts the provider knows by `reference` (its transfer's id).
    async fn payout_by_provider_reference(
        &self,
        reference: &str,
    ) -> Result<Option<PayoutId>, StoreError>;
    /// The ledger entries of the merchant's available and held accounts in `asset`, in the order
    /// they were written, after entry `after_entry` (0: from the first), at most `limit`
    /// (capped at [`crate::statements::ENTRIES_PER_READ_MAX`]).
    async fn merchant_entries(
        &self,
        merchant: &MerchantId,
        asset: &AssetCode,
        after_entry: i64,
        limit: u32,
    ) -> Result<Vec<MerchantEntry>, StoreError>;
}

/// One ledger entry of a merchant's account, with its journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MerchantEntry {
    /// The entry's place in the ledger: entries are read after it.
    pub entry_id: i64,
    pub journal_id: String,
    /// The journal's kind (`deposit`, `hold`, `release`, `settle`, `transfer`, `fee`).
    pub kind: String,
    /// What the journal is about (a deposit, payout or transfer id).
    pub reference: String,
    pub at_ms: i64,
    pub bucket: payoutd_domain::Bucket,
    /// Into the account (`true`) or out of it.
    pub arrives: bool,
    pub amount: Amount,
}
