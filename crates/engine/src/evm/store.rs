//! The EVM family's store port: hot wallets and their nonce counters, signing sessions on a wallet's line of nonces, per-wallet volumes and block cursors.

use async_trait::async_trait;
use payoutd_domain::{
    AssetCode, Attempt, Destination, EvmAddress, HotWallet, Payout, ReferenceKey,
};

use crate::pipeline_store::{CapCheck, CapReading, WalletBooks};
use crate::store::{NewEvent, PayoutTransition, StoreError};

/// One signing transaction on one hot wallet: the wallet row is locked for its whole life,
/// so nonces are allocated one after another and a crash before `commit` leaves no trace (8.12).
#[async_trait]
pub trait SigningSession: Send {
    /// The nonce the next `record_signed` must use.
    fn next_nonce(&self) -> u64;
    /// Approved payouts in these assets, oldest first, locked (PostgreSQL: `FOR UPDATE SKIP LOCKED`).
    async fn claim_approved(
        &mut self,
        assets: &[AssetCode],
        limit: u32,
    ) -> Result<Vec<Payout>, StoreError>;
    /// Stores the attempt (status `signed`, nonce = `next_nonce()`, its one original transaction with
    /// raw bytes), moves the payout approved -> processing with `event`, and advances the nonce.
    /// A store may defer the writes to `commit` (PostgreSQL batches them): a refusal (a second live
    /// attempt, I3; a payout no longer approved at its version, I5) then comes back from `commit`,
    /// and either way nothing of the session is stored.
    async fn record_signed(
        &mut self,
        payout: &Payout,
        attempt: &Attempt,
        event: &NewEvent,
    ) -> Result<(), StoreError>;
    /// Serialises the cap checks towards these destinations with every other signing session until
    /// this one ends (I8 across wallets: two sessions must not both read a destination's volume
    /// before either commits). PostgreSQL: transaction-level advisory locks, all taken in one sorted
    /// statement so sessions cannot deadlock on them; SQLite: the single writer already serialises.
    async fn lock_destinations(
        &mut self,
        destinations: &[(AssetCode, Destination)],
    ) -> Result<(), StoreError>;
    /// What the caps (I8) count for `payout` at signing, read inside the session (under its
    /// destination locks, and on its own connection: a session never waits for a second one),
    /// the attempts this session already signed included.
    async fn cap_reading(
        &mut self,
        payout: &Payout,
        caps: &CapCheck,
    ) -> Result<CapReading, StoreError>;
    /// `processing` payouts in these assets whose last attempt is proven dead, oldest first, locked
    /// like `claim_approved`, each with the number its next attempt must carry.
    async fn claim_awaiting_next_attempt(
        &mut self,
        assets: &[AssetCode],
        limit: u32,
    ) -> Result<Vec<(Payout, u32)>, StoreError>;
    /// Stores attempt n+1 of a payout waiting for it (status `signed`, nonce = `next_nonce()`, its
    /// original transaction) and clears the wait, conditional on the payout's version and on
    /// `attempt.attempt_no` being the awaited number; the payout stays `processing`. Written at once
    /// (next attempts are rare); a refusal fails the session.
    async fn record_next_attempt(
        &mut self,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<(), StoreError>;
    /// A claimed payout leaves signing without an attempt, inside the session: caps exceeded at
    /// signing time (I8: -> held_for_review), or the signer refused (-> failed, hold released).
    /// Stale is an error: claimed rows are locked by the session.
    async fn transition(&mut self, transition: &PayoutTransition) -> Result<(), StoreError>;
    /// Writes whatever `record_signed` deferred, moves the wallet's counter and commits: all or nothing.
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;
}

/// The store operations only the EVM family needs: hot wallets and their nonce counters, signing
/// sessions on a wallet's line of nonces, per-wallet volumes (I8), per-wallet block cursors and the
/// books of a wallet at a nonce. The neutral `PipelineStore` knows none of them.
#[async_trait]
pub trait EvmLineStore: Send + Sync {
    /// Registers the wallet if new (its counter starting at `start_nonce`) and returns it.
    async fn ensure_hot_wallet(
        &self,
        chain_id: u64,
        address: &EvmAddress,
        start_nonce: u64,
    ) -> Result<HotWallet, StoreError>;
    async fn hot_wallet(&self, wallet_id: &str) -> Result<Option<HotWallet>, StoreError>;
    /// Moves the counter up to `floor` if it is below; never down (8.13). Returns the counter.
    async fn raise_nonce_floor(&self, wallet_id: &str, floor: u64) -> Result<u64, StoreError>;
    /// The deployment's reference key: made at random and stored the first time it is asked for,
    /// the same ever after (every transaction's reference must still link years later).
    async fn reference_key(&self) -> Result<ReferenceKey, StoreError>;

    /// `None` when another worker holds this wallet's signing lock (PostgreSQL: `FOR UPDATE SKIP LOCKED`).
    async fn begin_signing(
        &self,
        wallet_id: &str,
    ) -> Result<Option<Box<dyn SigningSession>>, StoreError>;

    /// The next block the reconciliation of this wallet scans; `None` before its first pass.
    async fn reconcile_cursor(&self, wallet_id: &str) -> Result<Option<u64>, StoreError>;
    /// Sets the cursor to `block` if it was never set; returns the cursor.
    async fn start_reconcile_cursor(&self, wallet_id: &str, block: u64) -> Result<u64, StoreError>;
    /// Moves the cursor from `from` to `to` (conditional: false if another worker moved it first).
    async fn advance_reconcile_cursor(
        &self,
        wallet_id: &str,
        from: u64,
        to: u64,
    ) -> Result<bool, StoreError>;

    /// What the ledger says hot wallet `wallet_id` holds, read in one snapshot, if that snapshot
    /// describes the chain at the block where the wallet's nonce was `nonce`: every attempt below
    /// `nonce` settled, none at or above it settled with a mined transaction.
    async fn wallet_books(&self, wallet_id: &str, nonce: u64) -> Result<WalletBooks, StoreError>;
}
