//! EVM signing (SPEC 4 step 3): per hot wallet, claim approved payouts and store signed bytes at consecutive nonces in one transaction, then hand them to the sender.

use std::sync::Arc;

use payoutd_domain::{
    AssetCode, Attempt, AttemptId, AttemptSlot, AttemptStatus, AttemptTx, Destination, EventType,
    EvmSlot, FeeBid, HotWallet, Payout, PayoutStatus, TxKind,
};

use super::{
    EvmFamily, ExpectedTransfer, SIGN_BATCHES_PER_PASS_MAX, SIGNED_BATCHES_AHEAD_MAX, SignError,
    SigningSession,
};
use crate::pipeline::{
    Core, PipelineError, TickReport, count_error, payout_transition, transition_after,
};
use crate::store::NewEvent;

/// Payouts awaiting their next attempt that one signing session takes at most.
const NEXT_ATTEMPTS_PER_SESSION_MAX: u32 = 32;

/// One committed signing session on one wallet.
/// What every step of one signing session shares.
struct SessionAt<'a> {
    core: &'a Core,
    wallet: &'a HotWallet,
    fees: FeeBid,
    now: i64,
}

struct SignedBatch {
    /// Attempts whose bytes are stored, ready to send, each with its payout.
    attempts: Vec<(Payout, Attempt)>,
    /// Payouts the session claimed (signed, held or left approved): a full claim means more may wait.
    claimed: usize,
    report: TickReport,
}

impl EvmFamily {
    /// Registers the configured hot wallets, a new one's counter starting at the chain's mined
    /// nonce (0 when it cannot be read). A known wallet's counter is never moved here: a chain
    /// ahead of it is lost commits or a key used elsewhere, which the signing pass proves
    /// explained before it signs (`records_hold_the_chain`), never a floor raised blindly (8.13).
    pub(super) async fn sync_wallets(&mut self) -> Result<(), PipelineError> {
        for wallet in &mut self.chain.wallets {
            let start = match self.chain.rail.mined_nonce(&wallet.address).await {
                Ok(mined) => mined,
                Err(e) => {
                    tracing::warn!(wallet = %wallet.address, error = %e, "cannot read the mined nonce; a new wallet's counter starts at 0");
                    0
                }
            };
            *wallet = self.lines.ensure_hot_wallet(wallet.chain_id, &wallet.address, start).await?;
        }
        Ok(())
    }

    /// Claims approved payouts per hot wallet, signs each at the wallet's next nonce inside one
    /// database transaction (bytes stored before anything is sent), commits, then sends. Wallets
    /// are independent lines of nonces, so they run concurrently.
    pub(super) async fn sign_lines(&self, core: &Core) -> TickReport {
        let chain = &self.chain;
        let mut report = TickReport::default();
        // Fees are quoted before any database transaction: no network wait while rows are locked.
        let fees = match chain.rail.fee_quote().await {
            Ok(f) => f.capped(chain.rail.max_fee_per_gas_cap()),
            Err(e) => {
                tracing::warn!(chain = chain.rail.chain_id(), error = %e, "no fee quote; not signing this pass");
                return report;
            }
        };
        // Read before any signing session opens (the sessions sign with it, asking no store).
        if let Err(e) = self.reference_key().await {
            tracing::warn!(chain = chain.rail.chain_id(), error = %e, "the reference key cannot be read; not signing this pass");
            return report;
        }
        if !self.records_hold_the_chain(core).await {
            return report;
        }
        let codes: Arc<[AssetCode]> = chain.assets.iter().map(|a| a.code.clone()).collect();
        let mut lines = Vec::new();
        for wallet in &chain.wallets {
            if self.is_paused(&wallet.id) {
                tracing::debug!(wallet = %wallet.id, "line paused (the node refused its transactions for want of funds); not signing");
                continue;
            }
            let codes = codes.clone();
            lines
                .push(async move { (wallet, self.sign_and_send(core, wallet, codes, fees).await) });
        }
        for (wallet, line) in futures::future::join_all(lines).await {
            match line {
                Ok(r) => report.add(r),
                Err(e) => {
                    count_error("sign", &e);
                    tracing::warn!(wallet = %wallet.id, error = %e, "signing on this wallet failed this pass; the other wallets went on");
                }
            }
        }
        report
    }

    /// One wallet's pass: batch after batch (at most `SIGN_BATCHES_PER_PASS_MAX`), each committed
    /// before it is handed to the sender, which sends it while the next one is signed. The next
    /// batch's nonces follow the committed counter, so the overlap never shares a nonce; at most
    /// `SIGNED_BATCHES_AHEAD_MAX` committed batches wait for the sender.
    async fn sign_and_send(
        &self,
        core: &Core,
        wallet: &HotWallet,
        codes: Arc<[AssetCode]>,
        fees: FeeBid,
    ) -> Result<TickReport, PipelineError> {
        let (to_sender, mut from_signer) =
            tokio::sync::mpsc::channel::<Vec<(Payout, Attempt)>>(SIGNED_BATCHES_AHEAD_MAX);
        let signing = async move {
            let mut report = TickReport::default();
            for _ in 0..SIGN_BATCHES_PER_PASS_MAX {
                let batch = self.sign_for_wallet(core, wallet, &codes, fees).await?;
                report.add(batch.report);
                // A closed channel means the sender failed: stop signing, its error is returned below.
                if !batch.attempts.is_empty() && to_sender.send(batch.attempts).await.is_err() {
                    break;
                }
                if batch.claimed < core.config.sign_batch_max as usize {
                    break;
                }
            }
            Ok::<_, PipelineError>(report)
        };
        let sending = async {
            let mut sent = 0;
            while let Some(attempts) = from_signer.recv().await {
                let outcomes = self.dispatch_all(core, &attempts).await?;
                sent += self.record_dispatches(core, outcomes).await?;
            }
            Ok::<_, PipelineError>(sent)
        };
        // Committed batches the sender never reached are re-sent by the resolver (their bytes are stored).
        let (signed, sent) = tokio::join!(signing, sending);
        let mut report = signed?;
        report.sent += sent?;
        Ok(report)
    }

    async fn sign_for_wallet(
        &self,
        core: &Core,
        wallet: &HotWallet,
        codes: &[AssetCode],
        fees: FeeBid,
    ) -> Result<SignedBatch, PipelineError> {
        let mut batch = SignedBatch { attempts: vec![], claimed: 0, report: TickReport::default() };
        let Some(mut session) = self.lines.begin_signing(&wallet.id).await? else {
            // Another worker is signing on this wallet right now.
            return Ok(batch);
        };
        let now = core.clock.now_ms();
        let mut lost = Vec::new();
        let at = SessionAt { core, wallet, fees, now };
        // Next attempts first: their payouts are the oldest obligations waiting, and they are rare.
        // An unreachable signer ends the session's signing: what it signed before is kept, the
        // rest stays as it was for the next pass.
        let signer_down =
            self.sign_next_attempts(&at, session.as_mut(), codes, &mut batch, &mut lost).await?;
        if !signer_down {
            self.sign_first_attempts(&at, session.as_mut(), codes, &mut batch, &mut lost).await?;
        }
        if batch.report == TickReport::default() {
            // Nothing written: let the session roll back on drop.
            return Ok(batch);
        }
        session.commit().await?;
        for (payout, attempt_no, record) in lost {
            core.open_lost_attempt_incident(&payout, attempt_no, &record, now).await?;
        }
        Ok(batch)
    }

    /// Next attempts of payouts whose last attempt was proven dead; `true` when the signer could
    /// not be reached (the session signs nothing more).
    async fn sign_next_attempts(
        &self,
        at: &SessionAt<'_>,
        session: &mut dyn SigningSession,
        codes: &[AssetCode],
        batch: &mut SignedBatch,
        lost: &mut Vec<(Payout, u32, String)>,
    ) -> Result<bool, PipelineError> {
        let (core, now) = (at.core, at.now);
        // A routed asset's next attempts are made on the rails after its own, never here.
        let unrouted: Vec<AssetCode> =
            codes.iter().filter(|code| !core.routes.is_routed(code)).cloned().collect();
        for (payout, attempt_no) in
            session.claim_awaiting_next_attempt(&unrouted, NEXT_ATTEMPTS_PER_SESSION_MAX).await?
        {
            let Some(payout) =
                set_aside_if_remembered(at, session, payout, attempt_no, batch, lost).await?
            else {
                continue;
            };
            match self
                .sign_attempt(at.wallet, &payout, attempt_no, session.next_nonce(), at.fees, now)
                .await
            {
                Signing::Signed(attempt) => {
                    session.record_next_attempt(&payout, &attempt).await?;
                    tracing::info!(payout = %payout.id, attempt = %attempt.id, attempt_no, "next attempt signed after a proven death");
                    batch.report.signed += 1;
                    batch.attempts.push((payout, attempt));
                }
                Signing::Refused => {
                    session.transition(&core.fail_unsent(&payout, now)).await?;
                    batch.report.failed += 1;
                }
                Signing::SignerDown => return Ok(true),
            }
        }
        Ok(false)
    }

    /// First attempts of approved payouts, each re-checked before signing: an attempt only the
    /// send guard remembers, a destination that is one of our own wallets, the caps.
    async fn sign_first_attempts(
        &self,
        at: &SessionAt<'_>,
        session: &mut dyn SigningSession,
        codes: &[AssetCode],
        batch: &mut SignedBatch,
        lost: &mut Vec<(Payout, u32, String)>,
    ) -> Result<(), PipelineError> {
        let (core, now) = (at.core, at.now);
        let payouts = session.claim_approved(codes, core.config.sign_batch_max).await?;
        batch.claimed = payouts.len();
        // Before any cap is read: a session of another wallet paying the same destination commits first.
        let capped: Vec<(AssetCode, Destination)> = payouts
            .iter()
            .filter(|p| core.config.caps.contains_key(&p.asset))
            .map(|p| (p.asset.clone(), p.destination))
            .collect();
        session.lock_destinations(&capped).await?;
        for payout in payouts {
            let Some(payout) = set_aside_if_remembered(at, session, payout, 1, batch, lost).await?
            else {
                continue;
            };
            if core.pays_own_wallet(&payout) {
                tracing::error!(payout = %payout.id, destination = %payout.destination, "the destination is one of this deployment's hot wallets: the payout fails unsent");
                session.transition(&core.fail_unsent(&payout, now)).await?;
                batch.report.failed += 1;
                continue;
            }
            if let Some(why) = cap_breach_at_signing(core, session, &payout, now).await? {
                tracing::warn!(payout = %payout.id, %why, "over a cap at signing: held for review");
                session
                    .transition(&payout_transition(
                        &payout,
                        PayoutStatus::HeldForReview,
                        EventType::PayoutHeldForReview,
                        vec![],
                        now,
                    ))
                    .await?;
                batch.report.held += 1;
                continue;
            }
            let attempt = match self
                .sign_attempt(at.wallet, &payout, 1, session.next_nonce(), at.fees, now)
                .await
            {
                Signing::Signed(attempt) => attempt,
                Signing::Refused => {
                    session.transition(&core.fail_unsent(&payout, now)).await?;
                    batch.report.failed += 1;
                    continue;
                }
                Signing::SignerDown => break,
            };
            // The event carries the payout as the session stores it, updated at `now`.
            let after = transition_after(&payout, PayoutStatus::Processing, now);
            session
                .record_signed(
                    &payout,
                    &attempt,
                    &NewEvent::for_payout(EventType::PayoutProcessing, &after, now),
                )
                .await?;
            batch.report.signed += 1;
            batch.attempts.push((payout, attempt));
        }
        Ok(())
    }

    /// Attempt `attempt_no` of `payout` signed at `nonce`, or why not: a signer that refused
    /// produced nothing, so nothing can land (the payout fails); one that could not be reached
    /// leaves the payout for the next pass.
    async fn sign_attempt(
        &self,
        wallet: &HotWallet,
        payout: &Payout,
        attempt_no: u32,
        nonce: u64,
        fees: FeeBid,
        now: i64,
    ) -> Signing {
        let chain = &self.chain;
        let asset = self.asset(&payout.asset).expect("claimed only this chain's assets");
        let Destination::Evm(to) = payout.destination else {
            panic!("payout {} on an EVM asset has a non-EVM destination", payout.id);
        };
        let expected = ExpectedTransfer {
            asset: asset.clone(),
            from: wallet.address,
            to,
            amount: payout.amount,
        };
        let Some(reference) = self.loaded_reference_of(payout) else {
            tracing::warn!(payout = %payout.id, "the reference key is not read yet; signing stops until the next pass");
            return Signing::SignerDown;
        };
        let bytes = match chain.rail.sign_transfer(wallet, &expected, &reference, nonce, fees).await
        {
            Ok(bytes) => bytes,
            Err(e @ SignError::Refused(_)) => {
                tracing::error!(payout = %payout.id, wallet = %wallet.id, error = %e, "signer refused; nothing was signed, the payout fails");
                return Signing::Refused;
            }
            Err(e @ SignError::Unavailable(_)) => {
                tracing::warn!(payout = %payout.id, wallet = %wallet.id, error = %e, "signer unavailable; signing stops until the next pass");
                return Signing::SignerDown;
            }
        };
        Signing::Signed(Attempt {
            id: AttemptId::new(),
            payout_id: payout.id.clone(),
            attempt_no,
            status: AttemptStatus::Signed,
            slot: AttemptSlot::Evm(EvmSlot { wallet_id: wallet.id.clone(), nonce }),
            txs: vec![AttemptTx {
                hash: bytes.hash,
                kind: TxKind::Original,
                raw: bytes.raw,
                fees: Some(bytes.fees),
                created_at_ms: now,
            }],
            mined: None,
            last_sent_at_ms: 0,
            created_at_ms: now,
            updated_at_ms: now,
        })
    }
}

/// What the wallet's signer made of one attempt.
// Made and matched once per payout, never held in bulk: a box would only add an allocation.
#[allow(clippy::large_enum_variant)]
enum Signing {
    Signed(Attempt),
    /// It refused: nothing was produced, the payout fails unsent.
    Refused,
    /// It could not be reached: the payout is left as it was.
    SignerDown,
}

/// I8 again at signing, read inside the session (under its destination locks, this session's
/// signed attempts included) and decided by the core's one rule; why the payout must wait for a
/// person, or `None`.
async fn cap_breach_at_signing(
    core: &Core,
    session: &mut dyn SigningSession,
    payout: &Payout,
    now: i64,
) -> Result<Option<String>, PipelineError> {
    let Some(caps) = core.signing_caps(payout, now) else { return Ok(None) };
    let reading = session.cap_reading(payout, &caps).await?;
    Ok(caps.breach(payout.amount, &reading))
}

/// An attempt the send guard remembers and the database is about to make again was lost after it
/// may have gone out: its payout waits for a person (`lost`) and is not signed; any other payout
/// comes back to be signed.
async fn set_aside_if_remembered(
    at: &SessionAt<'_>,
    session: &mut dyn SigningSession,
    payout: Payout,
    attempt_no: u32,
    batch: &mut SignedBatch,
    lost: &mut Vec<(Payout, u32, String)>,
) -> Result<Option<Payout>, PipelineError> {
    let Some(record) = at.core.remembered(&payout, attempt_no).await? else {
        return Ok(Some(payout));
    };
    session.transition(&at.core.lost_attempt_transition(&payout, attempt_no, at.now)).await?;
    batch.report.needs_attention += 1;
    lost.push((payout, attempt_no, record));
    Ok(None)
}
