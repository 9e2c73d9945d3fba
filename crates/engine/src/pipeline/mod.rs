//! The payout pipeline: its configuration, the worker loop and what every stage shares; one module per stage.

mod balance;
#[cfg(feature = "defects")]
mod defects;
mod evm;
mod operator;
mod policy;
mod reconcile;
mod resolve;
mod send;
mod settle;
mod sign;
mod standalone;

pub use standalone::StandaloneLine;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Amount, Asset, AssetCode, Attempt, EventType, HotWallet, Journal, Payout, PayoutId, PayoutStatus};

use crate::clock::Clock;
use crate::pipeline_store::PipelineStore;
use crate::rail::{EvmRail, SendGuard};
use crate::store::{NewEvent, PayoutTransition, StoreError, TransitionOutcome};

/// Bounds of one pass of each worker, and the timers of recovery.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    pub policy_batch_max: u32,
    pub sign_batch_max: u32,
    pub resolve_batch_max: u32,
    /// Same merchant, destination, asset and amount within this window: held for review.
    pub near_duplicate_window_ms: i64,
    /// Re-send the stored bytes of an attempt with no receipt after this long (lost from mempools).
    pub rebroadcast_after_ms: i64,
    /// Replace (same nonce, higher fees) an attempt with no receipt after this long.
    pub replace_after_ms: i64,
    pub fee_bump_bps: u32,
    /// Pause between ticks of the worker loop when the last tick found no work.
    pub idle_sleep_ms: u64,
    /// Per-asset blast-radius caps (I8); assets without an entry are uncapped.
    pub caps: HashMap<AssetCode, Caps>,
    /// How often each hot wallet's balance on its chain is compared with the ledger.
    pub balance_check_interval_ms: i64,
    /// An attempt still live this long after its creation opens an `attempt_unresolved` incident.
    pub attempt_unresolved_after_ms: i64,
    #[cfg(feature = "defects")]
    pub defects: Defects,
}

/// Deliberately broken behaviours, compiled only with the `defects` feature: the simulator must
/// find a violation for each, or it proves nothing when it finds none.
#[cfg(feature = "defects")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Defects {
    /// On a send whose outcome is unknown, sign the payout again at a fresh nonce and send it.
    pub resign_on_timeout: bool,
    /// On a re-send, take a fresh nonce instead of re-sending the stored bytes.
    pub fresh_nonce_on_retry: bool,
    /// On a send whose outcome is unknown, fail the payout and release the hold.
    pub recredit_on_unknown: bool,
}

pub const POLICY_BATCH_MAX_DEFAULT: u32 = 256;
pub const SIGN_BATCH_MAX_DEFAULT: u32 = 256;
/// Attempts one sweep leases, reads and settles; a larger sweep spreads the sweep query and the
/// settlement transaction over more attempts (the node's receipt reads grow with it either way).
pub const RESOLVE_BATCH_MAX_DEFAULT: u32 = 1_024;
pub const NEAR_DUPLICATE_WINDOW_MS_DEFAULT: i64 = 10 * 60 * 1000;
pub const REBROADCAST_AFTER_MS_DEFAULT: i64 = 6_000;
pub const REPLACE_AFTER_MS_DEFAULT: i64 = 60_000;
/// Geth needs +10% on both fee fields; 12.5% leaves room for rounding on every client.
pub const FEE_BUMP_BPS_DEFAULT: u32 = 1_250;
pub const IDLE_SLEEP_MS_DEFAULT: u64 = 200;
pub const HOUR_MS: i64 = 3_600_000;
pub const BALANCE_CHECK_INTERVAL_MS_DEFAULT: i64 = 15_000;
/// A day's key window at a provider plus an hour: past it no rail's own reasoning is still waiting
/// for a proof that is due.
pub const ATTEMPT_UNRESOLVED_AFTER_MS_DEFAULT: i64 = 25 * HOUR_MS;
/// Freshly signed transactions handed to the rail at once (one JSON-RPC batch request on a node
/// that takes batches): the bytes are stored, so order inside a batch does not matter for safety.
pub const SEND_BATCH_MAX: usize = 32;
/// Send batches in flight at once per wallet.
pub const SEND_REQUESTS_IN_FLIGHT_MAX: usize = 4;
/// Live attempts resolved at once by one sweep (receipt reads and settlements in flight).
pub const RESOLVE_CONCURRENCY_MAX: usize = 16;
/// How long a sweep holds the attempts it took; a killed worker's are free again after it.
pub const RESOLVE_LEASE_MS: i64 = 10_000;
/// Final blocks one reconciliation pass reads per wallet (each is fetched whole from the node).
pub const RECONCILE_BLOCKS_PER_PASS_MAX: u64 = 200;
/// Batches one wallet signs in one pass at most; a pass goes on to the next batch only while the
/// last one came back full.
pub const SIGN_BATCHES_PER_PASS_MAX: u32 = 8;
/// Committed batches waiting for a wallet's sender while the next one is signed.
pub const SIGNED_BATCHES_AHEAD_MAX: usize = 1;

impl Default for PipelineConfig {
    fn default() -> PipelineConfig {
        PipelineConfig {
            policy_batch_max: POLICY_BATCH_MAX_DEFAULT,
            sign_batch_max: SIGN_BATCH_MAX_DEFAULT,
            resolve_batch_max: RESOLVE_BATCH_MAX_DEFAULT,
            near_duplicate_window_ms: NEAR_DUPLICATE_WINDOW_MS_DEFAULT,
            rebroadcast_after_ms: REBROADCAST_AFTER_MS_DEFAULT,
            replace_after_ms: REPLACE_AFTER_MS_DEFAULT,
            fee_bump_bps: FEE_BUMP_BPS_DEFAULT,
            idle_sleep_ms: IDLE_SLEEP_MS_DEFAULT,
            caps: HashMap::new(),
            balance_check_interval_ms: BALANCE_CHECK_INTERVAL_MS_DEFAULT,
            attempt_unresolved_after_ms: ATTEMPT_UNRESOLVED_AFTER_MS_DEFAULT,
            #[cfg(feature = "defects")]
            defects: Defects::default(),
        }
    }
}

/// Hourly ceilings on what may be signed, per destination and per hot wallet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub per_destination_per_hour: Amount,
    pub per_wallet_per_hour: Amount,
}

/// One EVM chain: its node port, its hot wallets and the assets paid from them (the chain's native
/// asset among them: network fees are booked in it).
#[derive(Clone)]
pub struct EvmChain {
    pub rail: Arc<dyn EvmRail>,
    pub wallets: Vec<HotWallet>,
    pub assets: Vec<Asset>,
}

impl EvmChain {
    /// The chain's native asset; `Pipeline::new` refuses a chain without one.
    pub fn native_asset(&self) -> &Asset {
        self.assets
            .iter()
            .find(|a| a.token == TokenKind::Native)
            .unwrap_or_else(|| panic!("chain {} has no native asset configured", self.rail.chain_id()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no such payout")]
    NotFound,
    #[error("payout is {0}; this action needs another state")]
    WrongState(PayoutStatus),
    #[error("refused: {0}")]
    Refused(String),
    #[error("the rail could not be read: {0}")]
    RailUnavailable(String),
}

/// What one tick did, for logs, metrics and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TickReport {
    pub approved: u32,
    pub held: u32,
    pub signed: u32,
    pub sent: u32,
    pub confirmed: u32,
    pub failed: u32,
    pub needs_attention: u32,
    pub rebroadcasts: u32,
    pub replacements: u32,
    /// Transfers out of a hot wallet that no stored transaction explains (incidents opened).
    pub unmatched_transfers: u32,
    /// Attempts proven dead whose payout now waits for its next attempt.
    pub next_attempts: u32,
    /// Hot wallet balances found different from the ledger (incidents opened).
    pub balance_mismatches: u32,
    /// Transfers of attempts declared dead found on the rail (incidents opened).
    pub duplicate_transfers: u32,
    /// Attempts left unresolved past the configured age (incidents opened).
    pub unresolved_attempts: u32,
}

impl TickReport {
    pub fn did_work(&self) -> bool {
        *self != TickReport::default()
    }

    /// Adds this tick's work to the process's Prometheus counters.
    fn export(&self) {
        for (name, n) in [
            ("payoutd_attempts_signed_total", self.signed),
            ("payoutd_sends_total", self.sent),
            ("payoutd_rebroadcasts_total", self.rebroadcasts),
            ("payoutd_replacements_total", self.replacements),
            ("payoutd_next_attempts_total", self.next_attempts),
            ("payoutd_unmatched_transfers_total", self.unmatched_transfers),
            ("payoutd_balance_mismatches_total", self.balance_mismatches),
            ("payoutd_duplicate_transfers_total", self.duplicate_transfers),
            ("payoutd_unresolved_attempts_total", self.unresolved_attempts),
        ] {
            metrics::counter!(name).increment(u64::from(n));
        }
        for (outcome, n) in [("paid", self.confirmed), ("failed", self.failed), ("needs_attention", self.needs_attention)] {
            metrics::counter!("payoutd_payouts_settled_total", "outcome" => outcome).increment(u64::from(n));
        }
    }

    pub(super) fn add(&mut self, other: TickReport) {
        self.approved += other.approved;
        self.held += other.held;
        self.signed += other.signed;
        self.sent += other.sent;
        self.confirmed += other.confirmed;
        self.failed += other.failed;
        self.needs_attention += other.needs_attention;
        self.rebroadcasts += other.rebroadcasts;
        self.replacements += other.replacements;
        self.unmatched_transfers += other.unmatched_transfers;
        self.next_attempts += other.next_attempts;
        self.balance_mismatches += other.balance_mismatches;
        self.duplicate_transfers += other.duplicate_transfers;
        self.unresolved_attempts += other.unresolved_attempts;
    }
}

/// How an operator settles a payout that needs attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Paid,
    Failed,
    /// The last attempt is proven to have moved nothing: start the next one under the same hold.
    Retry,
}

pub struct Pipeline {
    store: Arc<dyn PipelineStore>,
    clock: Arc<dyn Clock>,
    chains: Vec<EvmChain>,
    config: PipelineConfig,
    guard: Option<Arc<dyn SendGuard>>,
    /// Wallets whose node refused their transactions for want of funds: not signed for until a send
    /// of theirs is accepted again. Per process; another worker learns it from its own sends.
    paused_wallets: Mutex<HashSet<String>>,
    /// Rails without nonces (Solana, providers), each with the assets it pays.
    standalone: Vec<StandaloneLine>,
    /// When this process last compared each hot wallet's balance with the ledger.
    balance_checked_at_ms: Mutex<HashMap<String, i64>>,
}

impl Pipeline {
    pub fn new(store: Arc<dyn PipelineStore>, clock: Arc<dyn Clock>, chains: Vec<EvmChain>, config: PipelineConfig) -> Pipeline {
        for chain in &chains {
            for wallet in &chain.wallets {
                assert_eq!(wallet.chain_id, chain.rail.chain_id(), "wallet {} configured on the wrong chain", wallet.id);
            }
            for asset in &chain.assets {
                assert_eq!(asset.evm_chain_id(), Some(chain.rail.chain_id()), "asset {} configured on the wrong chain", asset.code);
            }
            // Every mined transaction's fee is booked in it: without it the ledger could not explain the wallet.
            chain.native_asset();
        }
        Pipeline {
            store,
            clock,
            chains,
            config,
            guard: None,
            paused_wallets: Mutex::new(HashSet::new()),
            standalone: Vec::new(),
            balance_checked_at_ms: Mutex::new(HashMap::new()),
        }
    }

    /// Adds the optional Redis send guard (SPEC 4 step 3).
    pub fn with_guard(mut self, guard: Arc<dyn SendGuard>) -> Pipeline {
        self.guard = Some(guard);
        self
    }

    pub fn store(&self) -> &Arc<dyn PipelineStore> {
        &self.store
    }

    /// Every asset a configured rail pays: intake refuses the others (`Engine::with_payable`).
    pub fn payable_assets(&self) -> std::collections::BTreeSet<AssetCode> {
        let evm = self.chains.iter().flat_map(|c| c.assets.iter());
        let standalone = self.standalone.iter().flat_map(|l| l.assets.iter());
        evm.chain(standalone).map(|a| a.code.clone()).collect()
    }

    /// Registers the configured hot wallets and raises each nonce counter to the chain's mined
    /// nonce (transactions sent from elsewhere). A failed read leaves the counter alone (8.13).
    pub async fn sync_wallets(&mut self) -> Result<(), PipelineError> {
        for chain in &mut self.chains {
            for wallet in &mut chain.wallets {
                let stored = self.store.ensure_hot_wallet(wallet.chain_id, &wallet.address, 0).await?;
                let next = match chain.rail.mined_nonce(&wallet.address).await {
                    Ok(mined) => self.store.raise_nonce_floor(&stored.id, mined).await?,
                    Err(e) => {
                        tracing::warn!(wallet = %stored.id, error = %e, "cannot read the mined nonce; counter left as it is");
                        stored.next_nonce
                    }
                };
                *wallet = HotWallet { next_nonce: next, ..stored };
            }
        }
        Ok(())
    }

    pub(super) fn chain_of(&self, asset: &AssetCode) -> Option<(&EvmChain, &Asset)> {
        self.chains.iter().find_map(|c| c.assets.iter().find(|a| &a.code == asset).map(|a| (c, a)))
    }

    pub(super) fn wallet_of(&self, wallet_id: &str) -> Option<(&EvmChain, &HotWallet)> {
        self.chains.iter().find_map(|c| c.wallets.iter().find(|w| w.id == wallet_id).map(|w| (c, w)))
    }

    /// One round of every worker, in pipeline order. Every pass runs whatever the one before it
    /// met: a persistent failure in signing must not stop settlement or detection. The first error
    /// is returned after all passes ran (each is logged and counted where it happened).
    pub async fn tick(&self) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let mut first_error = None;
        let passes = [
            ("policy", self.policy_pass().await),
            ("sign", self.sign_pass().await),
            ("resolve", self.resolve_pass().await),
            ("reconcile", self.reconcile_pass().await),
            ("balance", self.balance_check_pass().await),
        ];
        for (stage, outcome) in passes {
            match outcome {
                Ok(r) => report.add(r),
                Err(e) => {
                    count_error(stage, &e);
                    tracing::warn!(stage, error = %e, "pipeline pass failed; the other passes ran");
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    pub(super) fn is_paused(&self, wallet_id: &str) -> bool {
        self.paused_wallets.lock().expect("pause set lock").contains(wallet_id)
    }

    /// True if the wallet was not paused before.
    pub(super) fn pause(&self, wallet_id: &str) -> bool {
        self.paused_wallets.lock().expect("pause set lock").insert(wallet_id.to_owned())
    }

    pub(super) fn unpause(&self, wallet_id: &str) {
        if self.paused_wallets.lock().expect("pause set lock").remove(wallet_id) {
            tracing::info!(wallet = %wallet_id, "a send was accepted again: the wallet's line resumes");
        }
    }

    /// Runs ticks until `shutdown` resolves. Errors are logged and retried: recovery is a sweep
    /// over the database, so nothing is lost when a tick fails half way.
    pub async fn run(&self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let idle = match self.tick().await {
                Ok(report) => {
                    if report.did_work() {
                        tracing::debug!(?report, "pipeline tick");
                        report.export();
                    }
                    !report.did_work()
                }
                // Logged and counted per pass already.
                Err(_) => true,
            };
            let pause = if idle { self.config.idle_sleep_ms } else { 0 };
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(Duration::from_millis(pause)) => {}
            }
        }
    }


    pub(super) async fn transition(
        &self,
        payout: &Payout,
        to: PayoutStatus,
        event_type: EventType,
        journals: Vec<Journal>,
        now: i64,
    ) -> Result<TransitionOutcome, PipelineError> {
        Ok(self.store.transition_payout(&payout_transition(payout, to, event_type, journals, now)).await?)
    }

    pub(super) async fn live_attempt(&self, payout: &Payout) -> Result<Attempt, PipelineError> {
        self.store
            .attempts_of(&payout.id)
            .await?
            .into_iter()
            .find(|a| a.status.is_live())
            .ok_or_else(|| PipelineError::Refused("the payout has no live attempt".into()))
    }

    pub(super) async fn operator_payout(&self, id: &PayoutId, expected: PayoutStatus) -> Result<Payout, PipelineError> {
        let payout = self.store.payout_by_id(id).await?.ok_or(PipelineError::NotFound)?;
        if payout.status != expected {
            return Err(PipelineError::WrongState(payout.status));
        }
        Ok(payout)
    }

    pub(super) fn applied(&self, outcome: TransitionOutcome) -> Result<Payout, PipelineError> {
        match outcome {
            TransitionOutcome::Applied(p) => Ok(p),
            TransitionOutcome::Stale => Err(PipelineError::Refused("the payout changed concurrently; look again".into())),
        }
    }
}


/// The conditional transition of `payout` to `to`, with its event carrying the state after it.
fn payout_transition(payout: &Payout, to: PayoutStatus, event_type: EventType, journals: Vec<Journal>, now: i64) -> PayoutTransition {
    let mut after = payout.clone();
    after.status = to;
    after.version += 1;
    after.updated_at_ms = now;
    PayoutTransition {
        payout_id: payout.id.clone(),
        merchant_id: payout.merchant_id.clone(),
        from: payout.status,
        from_version: payout.version,
        to: payout.status.transition(to).unwrap_or_else(|e| panic!("pipeline attempted {e}")),
        journals,
        event: NewEvent::for_payout(event_type, &after, now),
        at_ms: now,
    }
}

/// Counts a pipeline error in `/metrics` by stage and kind (never by message: labels stay few).
pub(super) fn count_error(stage: &'static str, error: &PipelineError) {
    let kind = match error {
        PipelineError::Store(_) => "store",
        PipelineError::NotFound => "not_found",
        PipelineError::WrongState(_) => "wrong_state",
        PipelineError::Refused(_) => "refused",
        PipelineError::RailUnavailable(_) => "rail_unavailable",
    };
    metrics::counter!("payoutd_pipeline_errors_total", "stage" => stage, "kind" => kind).increment(1);
}
