//! The EVM rail family: one chain's hot wallets, each a line of nonces; signing sessions, fee bumps, receipts and the final nonce as proof of death. Nothing outside this module knows a nonce.

mod balance;
mod behind;
#[cfg(feature = "defects")]
mod defects;
mod guard_record;
mod judge;
mod port;
mod proof;
mod reconcile;
mod relink;
mod resolve;
mod send;
mod sign;
mod store;

pub use judge::{ReceiptFacts, TransferLog};
pub use port::{
    EvmRail, ExpectedTransfer, FinalView, OutgoingScan, OutgoingTx, Receipt, SendOutcome,
    SignError, SignedBytes, WalletAtBlock,
};
pub use store::{EvmLineStore, SigningSession};

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Asset, AssetCode, Attempt, AttemptSlot, AttemptTx, ChainReference, Destination, EvmSlot,
    HotWallet, Journal, Payout, ReferenceKey, TxRef,
};

use crate::pipeline::{
    BalanceCheck, Core, Detection, Landing, NothingMoved, PaidFrom, Pipeline, PipelineError,
    RailFamily, Resolved, TickReport,
};
use crate::store::StoreError;

/// Freshly signed transactions handed to the rail at once (one JSON-RPC batch request on a node
/// that takes batches): the bytes are stored, so order inside a batch does not matter for safety.
pub const SEND_BATCH_MAX: usize = 32;
/// Send batches in flight at once per wallet.
pub const SEND_REQUESTS_IN_FLIGHT_MAX: usize = 4;
/// Final blocks one reconciliation pass reads per wallet (each is fetched whole from the node).
pub const RECONCILE_BLOCKS_PER_PASS_MAX: u64 = 200;
/// Batches one wallet signs in one pass at most; a pass goes on to the next batch only while the
/// last one came back full.
pub const SIGN_BATCHES_PER_PASS_MAX: u32 = 8;
/// Committed batches waiting for a wallet's sender while the next one is signed.
pub const SIGNED_BATCHES_AHEAD_MAX: usize = 1;

/// One EVM chain: its node port, its hot wallets and the assets paid from them (the chain's native
/// asset among them: network fees are booked in it).
#[derive(Clone)]
pub struct EvmChain {
    pub rail: Arc<dyn EvmRail>,
    pub wallets: Vec<HotWallet>,
    pub assets: Vec<Asset>,
}

impl EvmChain {
    /// The chain's native asset; `EvmFamily::new` refuses a chain without one.
    pub fn native_asset(&self) -> &Asset {
        self.assets.iter().find(|a| a.token == TokenKind::Native).unwrap_or_else(|| {
            panic!("chain {} has no native asset configured", self.rail.chain_id())
        })
    }
}

/// The EVM family on one chain: the chain, the family's own store port, and the wallets whose
/// node refused their transactions for want of funds (not signed for until a send of theirs is
/// accepted again; per process, another worker learns it from its own sends).
pub struct EvmFamily {
    lines: Arc<dyn EvmLineStore>,
    chain: EvmChain,
    paused_wallets: Mutex<HashSet<String>>,
    /// One past the highest final block this process has seen (0 for none): an endpoint behind
    /// the others answers a lower one, and the chain's final block never goes back.
    final_seen: AtomicU64,
    /// The deployment's reference key, read from the store before the first signature.
    reference_key: tokio::sync::OnceCell<ReferenceKey>,
    /// Wallets that may have an open `records_behind_chain` incident (`behind.rs`): every wallet
    /// at start, one found behind since; a line that holds its chain is asked once, then dropped.
    behind_seen: Mutex<HashSet<String>>,
}

/// One attempt with what it needs from its chain: the signing wallet and the transfer a landed
/// payout transaction must carry.
pub(crate) struct EvmAttempt<'a> {
    pub wallet: &'a HotWallet,
    pub expected: ExpectedTransfer,
}

impl Pipeline {
    /// Adds one EVM chain, paid through the EVM family's own store port.
    pub fn with_evm_chain(self, lines: Arc<dyn EvmLineStore>, chain: EvmChain) -> Pipeline {
        self.with_family(Box::new(EvmFamily::new(lines, chain)))
    }
}

impl EvmFamily {
    pub fn new(lines: Arc<dyn EvmLineStore>, chain: EvmChain) -> EvmFamily {
        for wallet in &chain.wallets {
            assert_eq!(
                wallet.chain_id,
                chain.rail.chain_id(),
                "wallet {} configured on the wrong chain",
                wallet.id
            );
        }
        for asset in &chain.assets {
            assert_eq!(
                asset.evm_chain_id(),
                Some(chain.rail.chain_id()),
                "asset {} configured on the wrong chain",
                asset.code
            );
        }
        // Every mined transaction's fee is booked in it: without it the ledger could not explain the wallet.
        chain.native_asset();
        let behind_seen = Mutex::new(chain.wallets.iter().map(|w| w.id.clone()).collect());
        EvmFamily {
            lines,
            chain,
            paused_wallets: Mutex::new(HashSet::new()),
            final_seen: AtomicU64::new(0),
            reference_key: tokio::sync::OnceCell::new(),
            behind_seen,
        }
    }

    /// The deployment's reference key, read from the store the first time (the store makes it if
    /// no process has yet). Never inside a signing session: on SQLite the session holds the one
    /// writer slot that first read may need.
    async fn reference_key(&self) -> Result<&ReferenceKey, StoreError> {
        self.reference_key.get_or_try_init(|| self.lines.reference_key()).await
    }

    /// The reference `payout`'s transactions carry: its business event's, under the deployment's
    /// key.
    async fn reference_of(&self, payout: &Payout) -> Result<ChainReference, StoreError> {
        let key = self.reference_key().await?;
        Ok(ChainReference::of(key, &payout.merchant_id, &payout.key))
    }

    /// [`Self::reference_of`] where no store may be asked (inside a signing session): `None`
    /// until the key has been read.
    fn loaded_reference_of(&self, payout: &Payout) -> Option<ChainReference> {
        let key = self.reference_key.get()?;
        Some(ChainReference::of(key, &payout.merchant_id, &payout.key))
    }

    fn wallet(&self, wallet_id: &str) -> Option<&HotWallet> {
        self.chain.wallets.iter().find(|w| w.id == wallet_id)
    }

    fn asset(&self, code: &AssetCode) -> Option<&Asset> {
        self.chain.assets.iter().find(|a| &a.code == code)
    }

    fn is_paused(&self, wallet_id: &str) -> bool {
        self.paused_wallets.lock().expect("pause set lock").contains(wallet_id)
    }

    /// True if the wallet was not paused before.
    fn pause(&self, wallet_id: &str) -> bool {
        self.paused_wallets.lock().expect("pause set lock").insert(wallet_id.to_owned())
    }

    fn unpause(&self, wallet_id: &str) {
        if self.paused_wallets.lock().expect("pause set lock").remove(wallet_id) {
            tracing::info!(wallet = %wallet_id, "a send was accepted again: the wallet's line resumes");
        }
    }

    /// The attempt's wallet and expected transfer; `None` (logged) for a wallet or asset this
    /// process does not know.
    pub(crate) fn evm_attempt(&self, attempt: &Attempt, payout: &Payout) -> Option<EvmAttempt<'_>> {
        let slot = evm_slot(attempt);
        let Some(wallet) = self.wallet(&slot.wallet_id) else {
            tracing::error!(attempt = %attempt.id, wallet = %slot.wallet_id, "attempt on a wallet this process does not know");
            return None;
        };
        let expected = self.expected(wallet, payout)?;
        Some(EvmAttempt { wallet, expected })
    }

    /// The transfer `payout` makes from `wallet`: `None` for an asset or destination not of this chain.
    fn expected(&self, wallet: &HotWallet, payout: &Payout) -> Option<ExpectedTransfer> {
        let asset = self.asset(&payout.asset)?;
        let Destination::Evm(to) = payout.destination else { return None };
        Some(ExpectedTransfer {
            asset: asset.clone(),
            from: wallet.address,
            to,
            amount: payout.amount,
        })
    }
}

/// The EVM slot of an attempt handed to the EVM reasoning; any other rail there is a wiring bug.
pub(crate) fn evm_slot(attempt: &Attempt) -> &EvmSlot {
    attempt.slot.as_evm().unwrap_or_else(|| {
        panic!("attempt {} on rail {} reached the EVM reasoning", attempt.id, attempt.slot.rail())
    })
}

impl EvmFamily {
    /// The chain's last final block: the rail's answer, never below one seen before. A read at
    /// a block the answering endpoint lacks fails (unknown), never answers from an older view.
    async fn final_block(&self) -> Result<Option<u64>, crate::rail::ReadError> {
        let read = self.chain.rail.final_block().await?.map_or(0, |b| b + 1);
        let seen = self.final_seen.fetch_max(read, Ordering::Relaxed).max(read);
        Ok(seen.checked_sub(1))
    }
}

#[async_trait]
impl RailFamily for EvmFamily {
    fn assets(&self) -> Vec<&Asset> {
        self.chain.assets.iter().collect()
    }

    fn attempts_max(&self) -> u32 {
        self.chain.rail.attempts_max()
    }

    /// Any EVM slot: no route lists an EVM chain after its first rail, so the chain paying the
    /// payout's asset is the only EVM family its attempts can belong to.
    fn owns_slot(&self, slot: &AttemptSlot) -> bool {
        slot.as_evm().is_some()
    }

    /// An EVM attempt is signed at a wallet's nonce for the chain's own assets only.
    fn pays_routed_payouts(&self) -> bool {
        false
    }

    fn own_wallets(&self) -> Vec<Destination> {
        self.chain.wallets.iter().map(|w| Destination::Evm(w.address)).collect()
    }

    fn paid_from(&self, attempt: &Attempt, payout: &Payout) -> PaidFrom {
        self.paid_from_slot(attempt, payout)
    }

    async fn sync(&mut self, _core: &Core) -> Result<(), PipelineError> {
        self.sync_wallets().await
    }

    async fn sign_pass(&self, core: &Core) -> TickReport {
        self.sign_lines(core).await
    }

    async fn resolve<'a>(
        &self,
        core: &Core,
        live: &[&'a (Attempt, Payout)],
    ) -> Vec<(&'a Attempt, Result<Resolved, PipelineError>)> {
        self.resolve_live(core, live).await
    }

    fn detection_scope(&self) -> String {
        format!("evm:{}", self.chain.rail.chain_id())
    }

    async fn reconcile_pass(
        &self,
        _core: &Core,
        detection: &Detection<'_>,
    ) -> Result<TickReport, PipelineError> {
        self.reconcile_wallets(detection).await
    }

    async fn balance_pass(
        &self,
        core: &Core,
        balance: &BalanceCheck,
    ) -> Result<TickReport, PipelineError> {
        self.check_balances(core, balance).await
    }

    async fn duplicate_landing(
        &self,
        reference: &TxRef,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<Option<Landing>, PipelineError> {
        Ok(Some(self.mined_duplicate(reference, payout, attempt).await))
    }

    async fn cancel(
        &self,
        core: &Core,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<AttemptTx, PipelineError> {
        self.cancel_at_same_nonce(core, payout, attempt).await
    }

    async fn prove_cannot_land(
        &self,
        _core: &Core,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<(), PipelineError> {
        self.prove_nonce_used_without_it(attempt, payout).await
    }

    async fn prove_nothing_moved(
        &self,
        core: &Core,
        payout: &Payout,
        attempts: &[Attempt],
    ) -> Result<NothingMoved, PipelineError> {
        self.prove_last_moved_nothing(core, payout, attempts).await
    }

    async fn paid_journals(
        &self,
        core: &Core,
        payout: &Payout,
        attempts: &[Attempt],
    ) -> Result<Vec<Journal>, PipelineError> {
        self.journals_of_paid_verdict(core, payout, attempts).await
    }
}
