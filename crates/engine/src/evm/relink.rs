//! Relinking a lost attempt: a final transaction out of a hot wallet that no stored attempt explains but that carries the reference of a payout waiting to be signed is that payout's attempt whose commit was lost after it was sent; it is recorded as the payout's attempt at its nonce, so the payout settles by its receipt and is never signed again.

use payoutd_domain::{
    Attempt, AttemptId, AttemptSlot, AttemptStatus, AttemptTx, EventType, EvmSlot, FeeBid,
    HotWallet, Payout, PayoutId, PayoutStatus, TxKind,
};

use super::{EvmFamily, OutgoingTx};
use crate::pipeline::{Core, PipelineError, transition_after};
use crate::store::NewEvent;

/// What became of one unexplained transaction.
pub(super) enum Relink {
    /// Recorded as the first attempt of the payout it names.
    Relinked,
    /// It names no payout waiting to be signed: someone else's, or a payout not (yet) recreated.
    Unnamed,
    /// It names this payout, which cannot take it as its attempt now: a person decides.
    Named { payout: PayoutId, why: String },
    /// The wallet's line is busy (another worker's signing session): read again on a later pass.
    Later,
}

impl EvmFamily {
    /// Records `tx`, sent from `wallet` and final, as the attempt of the approved payout whose
    /// reference it carries, at its nonce, in a signing session on the wallet (the counter moves
    /// past it as for any attempt signed there).
    pub(super) async fn relink(
        &self,
        core: &Core,
        wallet: &HotWallet,
        tx: &OutgoingTx,
    ) -> Result<Relink, PipelineError> {
        let Some(reference) = tx.reference else { return Ok(Relink::Unnamed) };
        let pays = |code: &payoutd_domain::AssetCode| self.asset(code).is_some();
        let Some(payout) = core.approved_payout_carrying(&reference, pays).await? else {
            return Ok(Relink::Unnamed);
        };
        let named = |why: String| Ok(Relink::Named { payout: payout.id.clone(), why });
        if self.expected(wallet, &payout).is_none() {
            return named(format!("its asset {} is not paid on this chain", payout.asset));
        }
        self.lines.raise_nonce_floor(&wallet.id, tx.nonce).await?;
        let Some(mut session) = self.lines.begin_signing(&wallet.id).await? else {
            return Ok(Relink::Later);
        };
        if session.next_nonce() != tx.nonce {
            return named(format!(
                "the wallet's records already hold nonce {} (they go on at {})",
                tx.nonce,
                session.next_nonce()
            ));
        }
        let now = core.clock.now_ms();
        let attempt = relinked_attempt(wallet, &payout, tx, now);
        let after = transition_after(&payout, PayoutStatus::Processing, now);
        let event = NewEvent::for_payout(EventType::PayoutProcessing, &after, now);
        session.record_signed(&payout, &attempt, &event).await?;
        session.commit().await?;
        tracing::warn!(payout = %payout.id, attempt = %attempt.id, hash = %tx.hash, nonce = tx.nonce, "a transaction the database lost was found on chain carrying the payout's reference: recorded as its attempt, the payout is never signed again");
        Ok(Relink::Relinked)
    }
}

/// The attempt a relinked transaction stands for: signed at its nonce with its hash. Its bytes
/// and fee bid were never stored (the commit that held them was lost); nothing needs them: the
/// transaction is final, and its receipt says what it moved and cost.
fn relinked_attempt(wallet: &HotWallet, payout: &Payout, tx: &OutgoingTx, now: i64) -> Attempt {
    Attempt {
        id: AttemptId::new(),
        payout_id: payout.id.clone(),
        attempt_no: 1,
        status: AttemptStatus::Signed,
        slot: AttemptSlot::Evm(EvmSlot { wallet_id: wallet.id.clone(), nonce: tx.nonce }),
        txs: vec![AttemptTx {
            hash: tx.hash.clone(),
            kind: TxKind::Original,
            raw: Vec::new(),
            fees: Some(FeeBid::default()),
            created_at_ms: now,
        }],
        mined: None,
        last_sent_at_ms: now,
        created_at_ms: now,
        updated_at_ms: now,
    }
}
