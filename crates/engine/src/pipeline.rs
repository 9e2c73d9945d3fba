//! The payout pipeline: policy, sign, broadcast, resolve-and-recover and settle workers, and operator actions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use payoutd_domain::{
    Amount, Asset, AssetCode, Attempt, AttemptId, AttemptStatus, AttemptTx, Destination, EventId, EventType, FeeBid,
    HotWallet, IncidentId, IncidentKind, Journal, Payout, PayoutId, PayoutStatus, TxKind,
};

use crate::clock::Clock;
use crate::pipeline_store::{AttemptSettlement, NewIncident, PipelineStore};
use crate::rail::{EvmRail, ExpectedTransfer, SendGuard, SendOutcome};
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
pub const RESOLVE_BATCH_MAX_DEFAULT: u32 = 256;
pub const NEAR_DUPLICATE_WINDOW_MS_DEFAULT: i64 = 10 * 60 * 1000;
pub const REBROADCAST_AFTER_MS_DEFAULT: i64 = 6_000;
pub const REPLACE_AFTER_MS_DEFAULT: i64 = 60_000;
/// Geth needs +10% on both fee fields; 12.5% leaves room for rounding on every client.
pub const FEE_BUMP_BPS_DEFAULT: u32 = 1_250;
pub const IDLE_SLEEP_MS_DEFAULT: u64 = 200;
pub const HOUR_MS: i64 = 3_600_000;
/// Freshly signed transactions handed to the rail at once (one JSON-RPC batch request on a node
/// that takes batches): the bytes are stored, so order inside a batch does not matter for safety.
pub const SEND_BATCH_MAX: usize = 32;
/// Send batches in flight at once per wallet.
pub const SEND_REQUESTS_IN_FLIGHT_MAX: usize = 4;
/// Live attempts resolved at once by one sweep (receipt reads and settlements in flight).
pub const RESOLVE_CONCURRENCY_MAX: usize = 16;
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

/// One EVM chain: its node port, its hot wallets and the assets paid from them.
#[derive(Clone)]
pub struct EvmChain {
    pub rail: Arc<dyn EvmRail>,
    pub wallets: Vec<HotWallet>,
    pub assets: Vec<Asset>,
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
}

impl TickReport {
    pub fn did_work(&self) -> bool {
        *self != TickReport::default()
    }

    fn add(&mut self, other: TickReport) {
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
    }
}

/// How an operator settles a payout that needs attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Paid,
    Failed,
}

pub struct Pipeline {
    store: Arc<dyn PipelineStore>,
    clock: Arc<dyn Clock>,
    chains: Vec<EvmChain>,
    config: PipelineConfig,
    guard: Option<Arc<dyn SendGuard>>,
}

/// What happened to one send, before anything is written about it.
enum Dispatch {
    Accepted,
    /// Anything else the node said, or no answer: the resolver decides later.
    NotAccepted,
    /// Not sent at all (the guard refused, or a defect already wrote the outcome).
    Withheld,
}

/// One committed signing session on one wallet.
struct SignedBatch {
    /// Attempts whose bytes are stored, ready to send.
    attempts: Vec<Attempt>,
    /// Payouts the session claimed (signed, held or left approved): a full claim means more may wait.
    claimed: usize,
    report: TickReport,
}

fn guard_key(attempt: &Attempt) -> String {
    format!("payoutd:sent:{}:{}", attempt.payout_id, attempt.attempt_no)
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
        }
        Pipeline { store, clock, chains, config, guard: None }
    }

    /// Adds the optional Redis send guard (SPEC 4 step 3).
    pub fn with_guard(mut self, guard: Arc<dyn SendGuard>) -> Pipeline {
        self.guard = Some(guard);
        self
    }

    pub fn store(&self) -> &Arc<dyn PipelineStore> {
        &self.store
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

    fn chain_of(&self, asset: &AssetCode) -> Option<(&EvmChain, &Asset)> {
        self.chains.iter().find_map(|c| c.assets.iter().find(|a| &a.code == asset).map(|a| (c, a)))
    }

    fn wallet_of(&self, wallet_id: &str) -> Option<(&EvmChain, &HotWallet)> {
        self.chains.iter().find_map(|c| c.wallets.iter().find(|w| w.id == wallet_id).map(|w| (c, w)))
    }

    /// One round of every worker, in pipeline order.
    pub async fn tick(&self) -> Result<TickReport, PipelineError> {
        let mut report = self.policy_pass().await?;
        report.add(self.sign_pass().await?);
        report.add(self.resolve_pass().await?);
        report.add(self.reconcile_pass().await?);
        Ok(report)
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
                    }
                    !report.did_work()
                }
                Err(e) => {
                    tracing::warn!(error = %e, "pipeline tick failed; retrying");
                    true
                }
            };
            let pause = if idle { self.config.idle_sleep_ms } else { 0 };
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(Duration::from_millis(pause)) => {}
            }
        }
    }

    // ---- policy -------------------------------------------------------------------------------

    /// requested -> approved, or held_for_review for near-duplicates and cap breaches (SPEC 5).
    pub async fn policy_pass(&self) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let now = self.clock.now_ms();
        for payout in self.store.payouts_in_status(PayoutStatus::Requested, self.config.policy_batch_max).await? {
            let similar = self.store.count_similar_payouts(&payout, now - self.config.near_duplicate_window_ms).await?;
            let over_cap = self.over_destination_cap(&payout, Amount::ZERO, now).await?;
            let (to, event_type) = if similar > 0 || over_cap {
                (PayoutStatus::HeldForReview, EventType::PayoutHeldForReview)
            } else {
                (PayoutStatus::Approved, EventType::PayoutApproved)
            };
            if let TransitionOutcome::Applied(_) = self.transition(&payout, to, event_type, vec![], now).await? {
                match to {
                    PayoutStatus::Approved => report.approved += 1,
                    _ => report.held += 1,
                }
            }
        }
        Ok(report)
    }

    async fn over_destination_cap(&self, payout: &Payout, pending: Amount, now: i64) -> Result<bool, PipelineError> {
        let Some(caps) = self.config.caps.get(&payout.asset) else { return Ok(false) };
        let volume = self.store.destination_volume_since(&payout.asset, &payout.destination, now - HOUR_MS).await?;
        let total = volume.checked_add(pending).and_then(|v| v.checked_add(payout.amount));
        Ok(total.is_none_or(|t| t > caps.per_destination_per_hour))
    }

    async fn transition(
        &self,
        payout: &Payout,
        to: PayoutStatus,
        event_type: EventType,
        journals: Vec<Journal>,
        now: i64,
    ) -> Result<TransitionOutcome, PipelineError> {
        Ok(self.store.transition_payout(&payout_transition(payout, to, event_type, journals, now)).await?)
    }

    // ---- sign and broadcast -------------------------------------------------------------------

    /// Claims approved payouts per hot wallet, signs each at the wallet's next nonce inside one
    /// database transaction (bytes stored before anything is sent), commits, then sends. Wallets
    /// are independent lines of nonces, so they run concurrently.
    pub async fn sign_pass(&self) -> Result<TickReport, PipelineError> {
        let mut lines = Vec::new();
        for chain in &self.chains {
            // Fees are quoted before any database transaction: no network wait while rows are locked.
            let fees = match chain.rail.fee_quote().await {
                Ok(f) => f.capped(chain.rail.max_fee_per_gas_cap()),
                Err(e) => {
                    tracing::warn!(chain = chain.rail.chain_id(), error = %e, "no fee quote; not signing this pass");
                    continue;
                }
            };
            let codes: Arc<[AssetCode]> = chain.assets.iter().map(|a| a.code.clone()).collect();
            for wallet in &chain.wallets {
                lines.push(self.sign_and_send(chain, wallet, codes.clone(), fees));
            }
        }
        let mut report = TickReport::default();
        for line in futures::future::join_all(lines).await {
            report.add(line?);
        }
        Ok(report)
    }

    /// One wallet's pass: batch after batch (at most `SIGN_BATCHES_PER_PASS_MAX`), each committed
    /// before it is handed to the sender, which sends it while the next one is signed. The next
    /// batch's nonces follow the committed counter, so the overlap never shares a nonce; at most
    /// `SIGNED_BATCHES_AHEAD_MAX` committed batches wait for the sender.
    async fn sign_and_send(&self, chain: &EvmChain, wallet: &HotWallet, codes: Arc<[AssetCode]>, fees: FeeBid) -> Result<TickReport, PipelineError> {
        let (to_sender, mut from_signer) = tokio::sync::mpsc::channel::<Vec<Attempt>>(SIGNED_BATCHES_AHEAD_MAX);
        let signing = async move {
            let mut report = TickReport::default();
            for _ in 0..SIGN_BATCHES_PER_PASS_MAX {
                let batch = self.sign_for_wallet(chain, wallet, &codes, fees).await?;
                report.add(batch.report);
                // A closed channel means the sender failed: stop signing, its error is returned below.
                if !batch.attempts.is_empty() && to_sender.send(batch.attempts).await.is_err() {
                    break;
                }
                if batch.claimed < self.config.sign_batch_max as usize {
                    break;
                }
            }
            Ok::<_, PipelineError>(report)
        };
        let sending = async {
            let mut sent = 0;
            while let Some(attempts) = from_signer.recv().await {
                let outcomes = self.dispatch_all(chain, &attempts).await?;
                sent += self.record_dispatches(outcomes).await?;
            }
            Ok::<_, PipelineError>(sent)
        };
        // Committed batches the sender never reached are re-sent by the resolver (their bytes are stored).
        let (signed, sent) = tokio::join!(signing, sending);
        let mut report = signed?;
        report.sent += sent?;
        Ok(report)
    }

    async fn sign_for_wallet(&self, chain: &EvmChain, wallet: &HotWallet, codes: &[AssetCode], fees: FeeBid) -> Result<SignedBatch, PipelineError> {
        let mut report = TickReport::default();
        let Some(mut session) = self.store.begin_signing(&wallet.id).await? else {
            // Another worker is signing on this wallet right now.
            return Ok(SignedBatch { attempts: vec![], claimed: 0, report });
        };
        let payouts = session.claim_approved(codes, self.config.sign_batch_max).await?;
        let claimed = payouts.len();
        if payouts.is_empty() {
            return Ok(SignedBatch { attempts: vec![], claimed, report });
        }
        let now = self.clock.now_ms();
        let mut signed = Vec::with_capacity(payouts.len());
        let mut wallet_pending: HashMap<AssetCode, Amount> = HashMap::new();
        let mut destination_pending: HashMap<(AssetCode, Destination), Amount> = HashMap::new();
        for payout in payouts {
            let asset = chain.assets.iter().find(|a| a.code == payout.asset).expect("claimed only this chain's assets");
            let Destination::Evm(to) = payout.destination else {
                panic!("payout {} on an EVM asset has a non-EVM destination", payout.id);
            };
            let dest_key = (payout.asset.clone(), payout.destination);
            let dest_pending = destination_pending.get(&dest_key).copied().unwrap_or_default();
            let wal_pending = wallet_pending.get(&payout.asset).copied().unwrap_or_default();
            // I8: caps again at signing, unless a person already reviewed this payout.
            let capped = self.config.caps.contains_key(&payout.asset);
            let reviewed = capped && self.store.event_exists(&EventId::derive(EventType::PayoutReviewApproved, payout.id.as_str())).await?;
            let previously_sent = match &self.guard {
                Some(guard) => guard.get(&format!("payoutd:sent:{}:1", payout.id)).await.map_err(|e| PipelineError::RailUnavailable(e.0))?,
                None => None,
            };
            if previously_sent.is_some()
                || (capped && !reviewed && (self.over_destination_cap(&payout, dest_pending, now).await? || self.over_wallet_cap(wallet, &payout, wal_pending, now).await?))
            {
                if let Some(attempt) = previously_sent {
                    tracing::error!(payout = %payout.id, %attempt, "the send guard has an attempt the database does not: holding for review");
                }
                let mut after = payout.clone();
                after.status = PayoutStatus::HeldForReview;
                after.version += 1;
                session.hold_for_review(&payout, &NewEvent::for_payout(EventType::PayoutHeldForReview, &after, now), now).await?;
                report.held += 1;
                continue;
            }
            let nonce = session.next_nonce();
            let expected = ExpectedTransfer { asset: asset.clone(), from: wallet.address, to, amount: payout.amount };
            let bytes = match chain.rail.sign_transfer(wallet, &expected, nonce, fees) {
                Ok(b) => b,
                Err(e) => {
                    // Nothing was produced: the payout stays approved and is tried again next pass.
                    tracing::error!(payout = %payout.id, error = %e, "signer refused; payout stays approved");
                    continue;
                }
            };
            let attempt = Attempt {
                id: AttemptId::new(),
                payout_id: payout.id.clone(),
                attempt_no: 1,
                status: AttemptStatus::Signed,
                hot_wallet_id: wallet.id.clone(),
                nonce,
                txs: vec![AttemptTx { hash: bytes.hash, kind: TxKind::Original, raw: bytes.raw, fees: bytes.fees, created_at_ms: now }],
                mined: None,
                last_sent_at_ms: 0,
                created_at_ms: now,
                updated_at_ms: now,
            };
            let mut after = payout.clone();
            after.status = PayoutStatus::Processing;
            after.version += 1;
            session.record_signed(&payout, &attempt, &NewEvent::for_payout(EventType::PayoutProcessing, &after, now)).await?;
            *destination_pending.entry(dest_key).or_default() = dest_pending.checked_add(payout.amount).unwrap_or(dest_pending);
            *wallet_pending.entry(payout.asset.clone()).or_default() = wal_pending.checked_add(payout.amount).unwrap_or(wal_pending);
            report.signed += 1;
            signed.push(attempt);
        }
        session.commit().await?;
        Ok(SignedBatch { attempts: signed, claimed, report })
    }

    async fn over_wallet_cap(&self, wallet: &HotWallet, payout: &Payout, pending: Amount, now: i64) -> Result<bool, PipelineError> {
        let Some(caps) = self.config.caps.get(&payout.asset) else { return Ok(false) };
        let volume = self.store.wallet_volume_since(&wallet.id, &payout.asset, now - HOUR_MS).await?;
        let total = volume.checked_add(pending).and_then(|v| v.checked_add(payout.amount));
        Ok(total.is_none_or(|t| t > caps.per_wallet_per_hour))
    }

    /// Sends freshly committed attempts in batches of `SEND_BATCH_MAX`, `SEND_REQUESTS_IN_FLIGHT_MAX`
    /// batches at a time; writes nothing (a signing session of the same wallet may be open meanwhile).
    async fn dispatch_all<'a>(&self, chain: &EvmChain, attempts: &'a [Attempt]) -> Result<Vec<(&'a Attempt, Dispatch)>, PipelineError> {
        // The futures are built first: a lazy `map` over the stream trips the compiler's Send check.
        let batches: Vec<_> = attempts.chunks(SEND_BATCH_MAX).map(|batch| self.dispatch_batch(chain, batch)).collect();
        let mut dispatched = Vec::with_capacity(attempts.len());
        for batch in futures::stream::iter(batches).buffer_unordered(SEND_REQUESTS_IN_FLIGHT_MAX).collect::<Vec<_>>().await {
            dispatched.extend(batch?);
        }
        Ok(dispatched)
    }

    /// Records what the node said to `dispatch_all`'s sends: the accepted ones broadcast in one
    /// statement, the others' send time. Returns how many the node accepted.
    async fn record_dispatches(&self, outcomes: Vec<(&Attempt, Dispatch)>) -> Result<u32, PipelineError> {
        let now = self.clock.now_ms();
        let mut accepted = Vec::with_capacity(outcomes.len());
        for (attempt, outcome) in outcomes {
            match outcome {
                Dispatch::Accepted => accepted.push(attempt.id.clone()),
                Dispatch::NotAccepted => self.store.record_sent(&attempt.id, now).await?,
                Dispatch::Withheld => {}
            }
        }
        if !accepted.is_empty() {
            self.store.mark_broadcast_many(&accepted, now).await?;
        }
        Ok(accepted.len() as u32)
    }

    /// Sends stored bytes and records what the node said. Only `Accepted` moves anything
    /// (signed -> broadcast); every other answer leaves the attempt for the resolver, which looks
    /// hashes up before deciding (4.4).
    async fn send_tx(&self, chain: &EvmChain, attempt: &Attempt, tx: &AttemptTx) -> Result<bool, PipelineError> {
        let outcome = self.dispatch(chain, attempt, tx).await?;
        let now = self.clock.now_ms();
        match outcome {
            Dispatch::Accepted => {
                if !self.store.mark_broadcast(&attempt.id, now).await? {
                    self.store.record_sent(&attempt.id, now).await?;
                }
                Ok(true)
            }
            Dispatch::NotAccepted => {
                self.store.record_sent(&attempt.id, now).await?;
                Ok(false)
            }
            Dispatch::Withheld => Ok(false),
        }
    }

    /// The send itself, behind the optional guard; writes nothing about the attempt.
    async fn dispatch(&self, chain: &EvmChain, attempt: &Attempt, tx: &AttemptTx) -> Result<Dispatch, PipelineError> {
        if !self.guard_allows(attempt).await {
            return Ok(Dispatch::Withheld);
        }
        let outcome = chain.rail.send(&tx.raw).await;
        self.interpret(chain, attempt, tx, outcome).await
    }

    /// `dispatch` for freshly signed attempts, in one batch request where the rail allows.
    async fn dispatch_batch<'a>(&self, chain: &EvmChain, attempts: &'a [Attempt]) -> Result<Vec<(&'a Attempt, Dispatch)>, PipelineError> {
        let mut dispatched = Vec::with_capacity(attempts.len());
        let mut cleared = Vec::with_capacity(attempts.len());
        for attempt in attempts {
            if self.guard_allows(attempt).await {
                cleared.push(attempt);
            } else {
                dispatched.push((attempt, Dispatch::Withheld));
            }
        }
        let raws: Vec<&[u8]> = cleared.iter().map(|a| a.latest_tx().raw.as_slice()).collect();
        let outcomes = chain.rail.send_batch(&raws).await;
        assert_eq!(outcomes.len(), raws.len(), "the rail answers one outcome per transaction");
        for (attempt, outcome) in cleared.into_iter().zip(outcomes) {
            dispatched.push((attempt, self.interpret(chain, attempt, attempt.latest_tx(), outcome).await?));
        }
        Ok(dispatched)
    }

    /// The optional send guard (SPEC 4 step 3): false when another attempt of this payout already
    /// went out, or when the guard cannot be asked (then nothing is sent this pass).
    async fn guard_allows(&self, attempt: &Attempt) -> bool {
        let Some(guard) = &self.guard else { return true };
        match guard.record_or_get(&guard_key(attempt), attempt.id.as_str()).await {
            Ok(recorded) if recorded == attempt.id.as_str() => true,
            Ok(recorded) => {
                tracing::error!(attempt = %attempt.id, %recorded, "send guard: another attempt of this payout went out; not sending");
                false
            }
            Err(e) => {
                tracing::warn!(attempt = %attempt.id, error = %e, "send guard unreachable; not sending this pass");
                false
            }
        }
    }

    /// What the node's answer to a send means. Only `Accepted` is taken as sent; anything else is
    /// left for the resolver, which looks the hashes up before deciding (4.4).
    #[cfg_attr(not(feature = "defects"), allow(unused_variables))]
    async fn interpret(&self, chain: &EvmChain, attempt: &Attempt, tx: &AttemptTx, outcome: SendOutcome) -> Result<Dispatch, PipelineError> {
        match outcome {
            SendOutcome::Accepted => return Ok(Dispatch::Accepted),
            SendOutcome::MaybeAlreadySent => tracing::debug!(attempt = %attempt.id, hash = %tx.hash, "node may already have it"),
            SendOutcome::SlotHeldByOther => {
                tracing::warn!(attempt = %attempt.id, hash = %tx.hash, "another transaction holds this nonce in the pool (not ours)")
            }
            SendOutcome::Refused(why) => tracing::warn!(attempt = %attempt.id, hash = %tx.hash, %why, "node refused the bytes"),
            SendOutcome::Unknown(why) => {
                tracing::info!(attempt = %attempt.id, hash = %tx.hash, %why, "send outcome unknown");
                #[cfg(feature = "defects")]
                if self.defective_on_unknown(chain, attempt).await? {
                    return Ok(Dispatch::Withheld);
                }
            }
        }
        Ok(Dispatch::NotAccepted)
    }

    #[cfg(feature = "defects")]
    async fn defective_on_unknown(&self, chain: &EvmChain, attempt: &Attempt) -> Result<bool, PipelineError> {
        let defects = self.config.defects;
        if defects.resign_on_timeout {
            self.defective_fresh_nonce_send(chain, attempt, false).await?;
        }
        if defects.recredit_on_unknown {
            let Some(payout) = self.store.payout_by_id(&attempt.payout_id).await? else { return Ok(false) };
            if payout.status == PayoutStatus::Processing {
                let release = Journal::release(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount);
                let now = self.clock.now_ms();
                let current = self.store.attempts_of(&payout.id).await?.into_iter().find(|a| a.id == attempt.id);
                if let Some(current) = current.filter(|a| a.status.is_live()) {
                    self.settle(&current, AttemptStatus::Dead, "defect: timeout taken as failure".into(), &payout, PayoutStatus::Failed, EventType::PayoutFailed, vec![release], None, now)
                        .await?;
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// The classic double-pay: a new transaction for the same payout at a nonce nobody else will use.
    #[cfg(feature = "defects")]
    async fn defective_fresh_nonce_send(&self, chain: &EvmChain, attempt: &Attempt, store_it: bool) -> Result<(), PipelineError> {
        let Some(payout) = self.store.payout_by_id(&attempt.payout_id).await? else { return Ok(()) };
        let Some(wallet) = chain.wallets.iter().find(|w| w.id == attempt.hot_wallet_id) else { return Ok(()) };
        let Some((_, asset)) = self.chain_of(&payout.asset) else { return Ok(()) };
        let Destination::Evm(to) = payout.destination else { return Ok(()) };
        let Some(current) = self.store.hot_wallet(&wallet.id).await? else { return Ok(()) };
        let fresh = current.next_nonce;
        self.store.raise_nonce_floor(&wallet.id, fresh + 1).await?;
        let expected = ExpectedTransfer { asset: asset.clone(), from: wallet.address, to, amount: payout.amount };
        let Ok(bytes) = chain.rail.sign_transfer(wallet, &expected, fresh, attempt.latest_tx().fees) else { return Ok(()) };
        if store_it {
            let tx = AttemptTx { hash: bytes.hash.clone(), kind: TxKind::Replacement, raw: bytes.raw.clone(), fees: bytes.fees, created_at_ms: self.clock.now_ms() };
            self.store.add_attempt_tx(&attempt.id, &tx).await?;
        }
        let _ = chain.rail.send(&bytes.raw).await;
        Ok(())
    }

    // ---- resolve and recover ------------------------------------------------------------------

    /// The sweep over every live attempt (SPEC 4.5): receipts of every hash, finality, proof of
    /// death, nonce consumed by someone else; re-send or replace what may still be pending. Up to
    /// `RESOLVE_CONCURRENCY_MAX` attempts are resolved at once: each decision rests on its own
    /// attempt's receipts and every write is conditional (I5), so their order does not matter.
    pub async fn resolve_pass(&self) -> Result<TickReport, PipelineError> {
        let live = self.store.live_attempts(self.config.resolve_batch_max).await?;
        // Per wallet, the mined nonce and the head are read once per pass, before any receipt of the
        // pass: if the nonce is past an attempt's and no receipt of it exists afterwards, none of its
        // transactions was mined (no race with a late receipt). A head read early only undercounts
        // confirmations, which errs on the safe side.
        let mut views: HashMap<&str, Option<(u64, u64)>> = HashMap::new();
        for (attempt, _) in &live {
            if !views.contains_key(attempt.hot_wallet_id.as_str()) {
                views.insert(attempt.hot_wallet_id.as_str(), self.wallet_view(&attempt.hot_wallet_id).await);
            }
        }
        // An unreadable chain decides nothing this pass, and the attempt keeps its place at the
        // front of the sweep (marking it checked would starve a stuck nonce behind the others).
        let resolutions: Vec<_> = live
            .iter()
            .filter_map(|(attempt, payout)| {
                let (mined_nonce, head) = views.get(attempt.hot_wallet_id.as_str()).copied().flatten()?;
                Some(self.resolve_one(attempt, payout, mined_nonce, head))
            })
            .collect();
        let outcomes = futures::stream::iter(resolutions).buffer_unordered(RESOLVE_CONCURRENCY_MAX).collect::<Vec<_>>().await;
        let mut report = TickReport::default();
        let mut checked = Vec::with_capacity(outcomes.len());
        let mut first_error = None;
        for (attempt_id, outcome) in outcomes {
            match outcome {
                Ok(r) => {
                    report.add(r);
                    checked.push(attempt_id);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if !checked.is_empty() {
            self.store.record_checked(&checked, self.clock.now_ms()).await?;
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// The mined nonce and head block of a wallet's chain, or `None` when either cannot be read.
    async fn wallet_view(&self, wallet_id: &str) -> Option<(u64, u64)> {
        let (chain, wallet) = self.wallet_of(wallet_id)?;
        match (chain.rail.mined_nonce(&wallet.address).await, chain.rail.head_block().await) {
            (Ok(nonce), Ok(head)) => Some((nonce, head)),
            _ => None,
        }
    }

    async fn resolve_one(&self, attempt: &Attempt, payout: &Payout, mined_nonce: u64, head: u64) -> (AttemptId, Result<TickReport, PipelineError>) {
        (attempt.id.clone(), self.resolve_attempt(attempt, payout, mined_nonce, head).await)
    }

    async fn resolve_attempt(&self, attempt: &Attempt, payout: &Payout, mined_nonce: u64, head: u64) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let Some((chain, wallet)) = self.wallet_of(&attempt.hot_wallet_id) else {
            tracing::error!(attempt = %attempt.id, wallet = %attempt.hot_wallet_id, "attempt on a wallet this process does not know");
            return Ok(report);
        };
        let Some((_, asset)) = self.chain_of(&payout.asset) else { return Ok(report) };
        let Destination::Evm(to) = payout.destination else { return Ok(report) };
        let expected = ExpectedTransfer { asset: asset.clone(), from: wallet.address, to, amount: payout.amount };
        let mut landed = None;
        for tx in &attempt.txs {
            match chain.rail.receipt(&tx.hash, &expected).await {
                Ok(Some(receipt)) => {
                    landed = Some((tx, receipt));
                    break;
                }
                Ok(None) => {}
                // An error is "unknown", never "absent": decide nothing on this pass.
                Err(_) => return Ok(report),
            }
        }
        let now = self.clock.now_ms();
        if let Some((tx, receipt)) = landed {
            let confirmations = head.saturating_sub(receipt.block) + 1;
            if confirmations < chain.rail.finality_confirmations() {
                if attempt.mined.as_ref().map(|(b, h)| (*b, h.as_str())) != Some((receipt.block, tx.hash.as_str())) {
                    self.store.record_mined(&attempt.id, receipt.block, &tx.hash).await?;
                }
                return Ok(report);
            }
            let evidence = format!("{} {} mined in block {} with {} confirmations", tx.kind.as_str(), tx.hash, receipt.block, confirmations);
            let settled = match (tx.kind, receipt.succeeded, receipt.transfer_matches) {
                (TxKind::Cancel, true, _) => {
                    // Our cancel used the nonce: no payout transaction of this attempt can ever land.
                    let release = Journal::release(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount);
                    report.failed += 1;
                    self.settle(attempt, AttemptStatus::Dead, evidence, payout, PayoutStatus::Failed, EventType::PayoutFailed, vec![release], None, now)
                        .await?
                }
                (TxKind::Original | TxKind::Replacement, true, true) => {
                    let settle = Journal::settle(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount);
                    report.confirmed += 1;
                    self.settle(attempt, AttemptStatus::Confirmed, evidence, payout, PayoutStatus::Paid, EventType::PayoutPaid, vec![settle], None, now)
                        .await?
                }
                (_, _, _) if payout.status == PayoutStatus::NeedsAttention => {
                    // Already waiting for a person (e.g. after a reorg brought this receipt back): do not
                    // try needs_attention -> needs_attention; leave the attempt for the person to see.
                    tracing::warn!(attempt = %attempt.id, %evidence, "mined without the expected transfer; payout already needs attention");
                    return Ok(report);
                }
                (_, succeeded, _) => {
                    // Reverted, or mined without the transfer it should carry: the nonce is used,
                    // the money did not move as intended. A person decides; the hold stays (I6).
                    let kind = if succeeded { IncidentKind::TransferMismatch } else { IncidentKind::Reverted };
                    report.needs_attention += 1;
                    let incident = self.incident(kind, payout, attempt, evidence.clone(), now);
                    self.settle(attempt, AttemptStatus::Reverted, evidence, payout, PayoutStatus::NeedsAttention, EventType::PayoutNeedsAttention, vec![], Some(incident), now)
                        .await?
                }
            };
            if !settled {
                report = TickReport::default(); // someone else settled it first (I5): nothing done here
            }
            return Ok(report);
        }
        if attempt.mined.is_some() {
            // The receipt we saw is gone: a reorg. The attempt is plainly broadcast again.
            tracing::warn!(attempt = %attempt.id, "receipt disappeared (reorg); back to waiting");
            self.store.clear_mined(&attempt.id).await?;
        }
        if mined_nonce > attempt.nonce {
            // Every stored hash was checked after the nonce was seen used, and none landed. The sweep
            // works from a snapshot: another worker may have stored (and the chain mined) a newer
            // transaction of this attempt since, so look again at the attempt as stored now.
            let fresh = self.store.attempts_of(&attempt.payout_id).await?.into_iter().find(|a| a.id == attempt.id);
            let Some(fresh) = fresh.filter(|a| a.status.is_live()) else { return Ok(report) };
            for tx in fresh.txs.iter().filter(|t| !attempt.txs.iter().any(|o| o.hash == t.hash)) {
                match chain.rail.receipt(&tx.hash, &expected).await {
                    Ok(None) => {}
                    // A newer transaction landed (or the read failed): the next pass settles it.
                    Ok(Some(_)) | Err(_) => return Ok(report),
                }
            }
            if payout.status == PayoutStatus::Processing {
                let detail = format!(
                    "wallet {} mined nonce {mined_nonce} > attempt nonce {} and none of {} stored hashes has a receipt",
                    wallet.address,
                    attempt.nonce,
                    attempt.txs.len()
                );
                if let TransitionOutcome::Applied(_) =
                    self.transition(payout, PayoutStatus::NeedsAttention, EventType::PayoutNeedsAttention, vec![], now).await?
                {
                    self.store.open_incident(&self.incident(IncidentKind::NonceConsumedByUnknownTx, payout, attempt, detail, now)).await?;
                    report.needs_attention += 1;
                }
            }
            // Stop: nothing is re-sent at a used nonce. The attempt stays live so that a late
            // receipt of ours (after a reorg) still pays the payout.
            return Ok(report);
        }
        // The nonce is free (again) here. A payout waiting for a person with a live attempt was put there
        // because its nonce looked used; a reorg can take that use back (SPEC 4: only final blocks are
        // proof). Its stored bytes are then the only thing that can fill the gap for the wallet's line,
        // and sending them again can never pay twice: so re-send them as for any processing payout.
        if !matches!(payout.status, PayoutStatus::Processing | PayoutStatus::NeedsAttention)
            || now - attempt.last_sent_at_ms < self.config.rebroadcast_after_ms
        {
            return Ok(report);
        }
        let latest = attempt.latest_tx();
        // Only the wallet's next executable nonce can be stuck on fees; a later one waits behind a gap,
        // and outbidding it would spend fees for nothing.
        let next_executable = mined_nonce == attempt.nonce;
        if next_executable
            && now - latest.created_at_ms >= self.config.replace_after_ms
            && !attempt.has_cancel()
            && let Some(replacement) = self.sign_bumped(chain, wallet, attempt, &expected, TxKind::Replacement, now).await?
        {
            // Stored first, sent second: a replacement the database does not know can never exist.
            self.store_attempt_tx(attempt, &replacement).await?;
            self.send_tx(chain, attempt, &replacement).await?;
            report.replacements += 1;
            return Ok(report);
        }
        #[cfg(feature = "defects")]
        if self.config.defects.fresh_nonce_on_retry {
            self.defective_fresh_nonce_send(chain, attempt, true).await?;
            report.rebroadcasts += 1;
            return Ok(report);
        }
        // Mempools lose transactions: re-send the stored bytes (never new ones) on a timer.
        self.send_tx(chain, attempt, latest).await?;
        report.rebroadcasts += 1;
        Ok(report)
    }

    /// Stores a replacement or cancel before it is sent. Two workers that built the same bytes (signing is
    /// deterministic) store one row: the second finds its hash already on the attempt and goes on.
    async fn store_attempt_tx(&self, attempt: &Attempt, tx: &AttemptTx) -> Result<(), PipelineError> {
        match self.store.add_attempt_tx(&attempt.id, tx).await {
            Ok(()) => Ok(()),
            Err(StoreError::Invariant(why)) => {
                let stored = self.store.attempts_of(&attempt.payout_id).await?;
                if stored.iter().any(|a| a.id == attempt.id && a.txs.iter().any(|t| t.hash == tx.hash)) {
                    Ok(())
                } else {
                    Err(StoreError::Invariant(why).into())
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A transaction at the attempt's nonce that outbids everything sent at it so far, within the cap.
    async fn sign_bumped(
        &self,
        chain: &EvmChain,
        wallet: &HotWallet,
        attempt: &Attempt,
        expected: &ExpectedTransfer,
        kind: TxKind,
        now: i64,
    ) -> Result<Option<AttemptTx>, PipelineError> {
        let highest = attempt.highest_fees();
        let quote = chain.rail.fee_quote().await.map_err(|e| PipelineError::RailUnavailable(e.0))?;
        let cap = chain.rail.max_fee_per_gas_cap();
        let bid = highest.bumped(self.config.fee_bump_bps).max(quote).capped(cap);
        let floor = highest.bumped(self.config.fee_bump_bps);
        if bid.max_fee_per_gas < floor.max_fee_per_gas || bid.max_priority_fee_per_gas < floor.max_priority_fee_per_gas {
            tracing::warn!(attempt = %attempt.id, cap, "fee cap reached: cannot outbid, re-sending instead");
            return Ok(None);
        }
        let signed = match kind {
            TxKind::Cancel => chain.rail.sign_cancel(wallet, attempt.nonce, bid),
            TxKind::Original | TxKind::Replacement => chain.rail.sign_transfer(wallet, expected, attempt.nonce, bid),
        }
        .map_err(|e| PipelineError::Refused(e.to_string()))?;
        Ok(Some(AttemptTx { hash: signed.hash, kind, raw: signed.raw, fees: signed.fees, created_at_ms: now }))
    }

    // ---- reconcile ----------------------------------------------------------------------------

    /// I7 in production (SPEC 8.10): every transaction a final block lists as sent from a hot
    /// wallet must be one whose bytes payoutd stored before sending (I4); any other is an
    /// `unmatched_transfer` incident, opened once per hash. Each wallet's scan goes on from a stored
    /// cursor, `RECONCILE_BLOCKS_PER_PASS_MAX` blocks per pass; it starts at the first block that
    /// was not final yet at the wallet's first pass. Only final blocks are read, so a reorg cannot slip a
    /// transaction in behind the cursor.
    pub async fn reconcile_pass(&self) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        for chain in &self.chains {
            let head = match chain.rail.head_block().await {
                Ok(head) => head,
                Err(e) => {
                    tracing::warn!(chain = chain.rail.chain_id(), error = %e, "no head block; not reconciling this pass");
                    continue;
                }
            };
            // Block b has head - b + 1 confirmations; this is the first one that is not final yet.
            let first_unfinal = (head + 2).saturating_sub(chain.rail.finality_confirmations());
            for wallet in &chain.wallets {
                report.add(self.reconcile_wallet(chain, wallet, first_unfinal).await?);
            }
        }
        Ok(report)
    }

    async fn reconcile_wallet(&self, chain: &EvmChain, wallet: &HotWallet, first_unfinal: u64) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let from = match self.store.reconcile_cursor(&wallet.id).await? {
            Some(block) => block,
            None => self.store.start_reconcile_cursor(&wallet.id, first_unfinal).await?,
        };
        if from >= first_unfinal {
            return Ok(report);
        }
        let to = (first_unfinal - 1).min(from + RECONCILE_BLOCKS_PER_PASS_MAX - 1);
        let scan = match chain.rail.outgoing(&wallet.address, from, to).await {
            Ok(scan) => scan,
            Err(e) => {
                // Unread blocks are read on a later pass: the cursor stays.
                tracing::warn!(wallet = %wallet.id, from, to, error = %e, "cannot read outgoing transactions; not reconciling this pass");
                return Ok(report);
            }
        };
        assert!(scan.next_block >= from && scan.next_block <= to + 1, "the rail scanned outside {from}..={to}: next {}", scan.next_block);
        let hashes: Vec<String> = scan.txs.iter().map(|t| t.hash.to_ascii_lowercase()).collect();
        // Read after the scan: a transaction of ours was stored before it was sent, so before it was mined.
        let known = self.store.known_tx_hashes(&hashes).await?;
        let now = self.clock.now_ms();
        for tx in scan.txs.iter().filter(|t| !known.iter().any(|k| k.eq_ignore_ascii_case(&t.hash))) {
            tracing::error!(wallet = %wallet.address, hash = %tx.hash, nonce = tx.nonce, block = tx.block, "transfer out of a hot wallet matches no stored transaction");
            let detail = format!(
                "hot wallet {} sent {} (nonce {}, block {}), which matches no transaction payoutd stored",
                wallet.address, tx.hash, tx.nonce, tx.block
            );
            let incident = NewIncident {
                id: IncidentId::new(),
                kind: IncidentKind::UnmatchedTransfer,
                merchant_id: None,
                payout_id: None,
                attempt_id: None,
                detail,
                event: None,
                at_ms: now,
            };
            if self.store.open_incident_once(&incident, &tx.hash.to_ascii_lowercase()).await? {
                report.unmatched_transfers += 1;
            }
        }
        self.store.advance_reconcile_cursor(&wallet.id, from, scan.next_block).await?;
        Ok(report)
    }

    fn incident(&self, kind: IncidentKind, payout: &Payout, attempt: &Attempt, detail: String, now: i64) -> NewIncident {
        let id = IncidentId::new();
        NewIncident {
            event: Some(NewEvent {
                id: EventId::derive(EventType::IncidentOpened, id.as_str()),
                event_type: EventType::IncidentOpened,
                entity_id: id.as_str().to_owned(),
                merchant_id: payout.merchant_id.clone(),
                payload_json: format!(
                    "{{\"id\":\"{id}\",\"object\":\"incident\",\"kind\":\"{}\",\"payout_id\":\"{}\",\"attempt_id\":\"{}\"}}",
                    kind.as_str(),
                    payout.id,
                    attempt.id
                ),
                at_ms: now,
            }),
            id,
            kind,
            merchant_id: Some(payout.merchant_id.clone()),
            payout_id: Some(payout.id.clone()),
            attempt_id: Some(attempt.id.clone()),
            detail,
            at_ms: now,
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn settle(
        &self,
        attempt: &Attempt,
        attempt_to: AttemptStatus,
        evidence: String,
        payout: &Payout,
        to: PayoutStatus,
        event_type: EventType,
        journals: Vec<Journal>,
        incident: Option<NewIncident>,
        now: i64,
    ) -> Result<bool, PipelineError> {
        let settlement = AttemptSettlement {
            attempt_id: attempt.id.clone(),
            attempt_from: attempt.status,
            attempt_to,
            evidence,
            payout: payout_transition(payout, to, event_type, journals, now),
            incident,
        };
        Ok(matches!(self.store.settle_attempt(&settlement).await?, TransitionOutcome::Applied(_)))
    }

    // ---- operator actions ---------------------------------------------------------------------

    /// held_for_review -> approved; the signing caps no longer apply to this payout.
    pub async fn approve(&self, id: &PayoutId) -> Result<Payout, PipelineError> {
        let payout = self.operator_payout(id, PayoutStatus::HeldForReview).await?;
        self.applied(self.transition(&payout, PayoutStatus::Approved, EventType::PayoutReviewApproved, vec![], self.clock.now_ms()).await?)
    }

    /// held_for_review -> rejected, releasing the hold.
    pub async fn reject(&self, id: &PayoutId) -> Result<Payout, PipelineError> {
        let payout = self.operator_payout(id, PayoutStatus::HeldForReview).await?;
        let release = Journal::release(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount);
        self.applied(self.transition(&payout, PayoutStatus::Rejected, EventType::PayoutRejected, vec![release], self.clock.now_ms()).await?)
    }

    /// Cancel after signing: a zero-value self-send at the attempt's nonce, stored, then sent. The
    /// payout fails only when the resolver sees the cancel final; if the payout lands first, it is paid.
    pub async fn cancel_signed(&self, id: &PayoutId) -> Result<AttemptTx, PipelineError> {
        let payout = self.operator_payout(id, PayoutStatus::Processing).await?;
        let attempt = self.live_attempt(&payout).await?;
        let (chain, wallet) = self.wallet_of(&attempt.hot_wallet_id).ok_or_else(|| PipelineError::Refused("unknown wallet".into()))?;
        let Some((_, asset)) = self.chain_of(&payout.asset) else { return Err(PipelineError::Refused("unknown asset".into())) };
        let Destination::Evm(to) = payout.destination else { return Err(PipelineError::Refused("not an EVM payout".into())) };
        let expected = ExpectedTransfer { asset: asset.clone(), from: wallet.address, to, amount: payout.amount };
        let now = self.clock.now_ms();
        let cancel = self
            .sign_bumped(chain, wallet, &attempt, &expected, TxKind::Cancel, now)
            .await?
            .ok_or_else(|| PipelineError::Refused("the fee cap does not allow outbidding the pending transaction".into()))?;
        self.store_attempt_tx(&attempt, &cancel).await?;
        self.send_tx(chain, &attempt, &cancel).await?;
        Ok(cancel)
    }

    /// A person settles a payout in needs_attention. With a live attempt, either verdict is accepted only
    /// when the chain proves it can no longer land (its nonce is used and none of its hashes was mined).
    pub async fn resolve_needs_attention(&self, id: &PayoutId, verdict: Verdict, evidence: &str) -> Result<Payout, PipelineError> {
        let payout = self.operator_payout(id, PayoutStatus::NeedsAttention).await?;
        if evidence.trim().is_empty() {
            return Err(PipelineError::Refused("evidence is required".into()));
        }
        let now = self.clock.now_ms();
        let (to, event_type, journal) = match verdict {
            Verdict::Paid => (PayoutStatus::Paid, EventType::PayoutPaid, Journal::settle(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount)),
            Verdict::Failed => (PayoutStatus::Failed, EventType::PayoutFailed, Journal::release(&payout.merchant_id, &payout.asset, payout.id.as_str(), payout.amount)),
        };
        let live: Vec<Attempt> = self.store.attempts_of(&payout.id).await?.into_iter().filter(|a| a.status.is_live()).collect();
        let Some(attempt) = live.first() else {
            return self.applied(self.transition(&payout, to, event_type, vec![journal], now).await?);
        };
        // Either verdict ends the attempt: its bytes must provably be unable to land, or the payout
        // could be paid again (Paid) or re-credited while the money leaves (Failed).
        self.prove_cannot_land(attempt, &payout).await?;
        let proof = format!("operator resolved the payout as {}: {evidence}", to.as_str());
        let settled = self.settle(attempt, AttemptStatus::Dead, proof, &payout, to, event_type, vec![journal], None, now).await?;
        if !settled {
            return Err(PipelineError::Refused("the payout changed concurrently; look again".into()));
        }
        self.store.payout_by_id(id).await?.ok_or(PipelineError::NotFound)
    }

    async fn prove_cannot_land(&self, attempt: &Attempt, payout: &Payout) -> Result<(), PipelineError> {
        let (chain, wallet) = self.wallet_of(&attempt.hot_wallet_id).ok_or_else(|| PipelineError::Refused("unknown wallet".into()))?;
        let Some((_, asset)) = self.chain_of(&payout.asset) else { return Err(PipelineError::Refused("unknown asset".into())) };
        let Destination::Evm(to) = payout.destination else { return Err(PipelineError::Refused("not an EVM payout".into())) };
        let expected = ExpectedTransfer { asset: asset.clone(), from: wallet.address, to, amount: payout.amount };
        // Only a final block proves the nonce used: a use seen in a block a reorg can drop could be
        // taken back, and then these bytes could still land after the hold was released (I6).
        let final_nonce = chain.rail.final_nonce(&wallet.address).await.map_err(|e| PipelineError::RailUnavailable(e.0))?;
        if final_nonce <= attempt.nonce {
            return Err(PipelineError::Refused(format!(
                "attempt nonce {} is not used by a final block yet (final nonce {final_nonce}): its bytes may still land; \
                 cancel it first, or wait for finality",
                attempt.nonce
            )));
        }
        for tx in &attempt.txs {
            if chain.rail.receipt(&tx.hash, &expected).await.map_err(|e| PipelineError::RailUnavailable(e.0))?.is_some() {
                return Err(PipelineError::Refused(format!("{} {} has a receipt: look at it before failing the payout", tx.kind.as_str(), tx.hash)));
            }
        }
        Ok(())
    }

    async fn live_attempt(&self, payout: &Payout) -> Result<Attempt, PipelineError> {
        self.store
            .attempts_of(&payout.id)
            .await?
            .into_iter()
            .find(|a| a.status.is_live())
            .ok_or_else(|| PipelineError::Refused("the payout has no live attempt".into()))
    }

    async fn operator_payout(&self, id: &PayoutId, expected: PayoutStatus) -> Result<Payout, PipelineError> {
        let payout = self.store.payout_by_id(id).await?.ok_or(PipelineError::NotFound)?;
        if payout.status != expected {
            return Err(PipelineError::WrongState(payout.status));
        }
        Ok(payout)
    }

    fn applied(&self, outcome: TransitionOutcome) -> Result<Payout, PipelineError> {
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
