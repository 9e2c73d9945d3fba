//! EVM broadcast (SPEC 4 step 4): send stored bytes, behind the optional guard; only an explicit accept moves an attempt, and a refusal for want of funds pauses the wallet's line.

use futures::StreamExt;

use payoutd_domain::{Attempt, AttemptTx, IncidentKind, Payout};

use super::guard_record::GuardRecord;
use super::{EvmFamily, SEND_BATCH_MAX, SEND_REQUESTS_IN_FLIGHT_MAX, SendOutcome, evm_slot};
use crate::pipeline::{Core, PipelineError};
use crate::pipeline_store::{IncidentSubject, NewIncident};

/// What happened to one send, before anything is written about it.
pub(super) enum Dispatch {
    Accepted,
    /// Anything else the node said, or no answer: the resolver decides later.
    NotAccepted,
    /// Not sent at all (the guard refused, or a defect already wrote the outcome).
    Withheld,
}

impl EvmFamily {
    /// Sends freshly committed attempts in batches of `SEND_BATCH_MAX`, `SEND_REQUESTS_IN_FLIGHT_MAX`
    /// batches at a time; writes nothing (a signing session of the same wallet may be open meanwhile).
    pub(super) async fn dispatch_all<'a>(
        &self,
        core: &Core,
        signed: &'a [(Payout, Attempt)],
    ) -> Result<Vec<(&'a Attempt, Dispatch)>, PipelineError> {
        // The futures are built first: a lazy `map` over the stream trips the compiler's Send check.
        let batches: Vec<_> =
            signed.chunks(SEND_BATCH_MAX).map(|batch| self.dispatch_batch(core, batch)).collect();
        let mut dispatched = Vec::with_capacity(signed.len());
        for batch in futures::stream::iter(batches)
            .buffer_unordered(SEND_REQUESTS_IN_FLIGHT_MAX)
            .collect::<Vec<_>>()
            .await
        {
            dispatched.extend(batch?);
        }
        Ok(dispatched)
    }

    /// Records what the node said to `dispatch_all`'s sends: the accepted ones broadcast in one
    /// statement, the others' send time. Returns how many the node accepted.
    pub(super) async fn record_dispatches(
        &self,
        core: &Core,
        outcomes: Vec<(&Attempt, Dispatch)>,
    ) -> Result<u32, PipelineError> {
        let now = core.clock.now_ms();
        let mut accepted = Vec::with_capacity(outcomes.len());
        for (attempt, outcome) in outcomes {
            match outcome {
                Dispatch::Accepted => accepted.push(attempt.id.clone()),
                // False: the attempt ended meanwhile (another worker settled it); nothing to record.
                Dispatch::NotAccepted => _ = core.store.record_sent(&attempt.id, now).await?,
                Dispatch::Withheld => {}
            }
        }
        if !accepted.is_empty() {
            core.store.mark_broadcast_many(&accepted, now).await?;
        }
        Ok(accepted.len() as u32)
    }

    /// Sends stored bytes and records what the node said. Only `Accepted` moves anything
    /// (signed -> broadcast); every other answer leaves the attempt for the resolver, which looks
    /// hashes up before deciding (4.4).
    pub(super) async fn send_tx(
        &self,
        core: &Core,
        payout: &Payout,
        attempt: &Attempt,
        tx: &AttemptTx,
    ) -> Result<bool, PipelineError> {
        let outcome = self.dispatch(core, payout, attempt, tx).await?;
        let now = core.clock.now_ms();
        match outcome {
            Dispatch::Accepted => {
                if !core.store.mark_broadcast(&attempt.id, now).await? {
                    core.store.record_sent(&attempt.id, now).await?;
                }
                Ok(true)
            }
            Dispatch::NotAccepted => {
                core.store.record_sent(&attempt.id, now).await?;
                Ok(false)
            }
            Dispatch::Withheld => Ok(false),
        }
    }

    /// The send itself, behind the optional guard; writes nothing about the attempt.
    async fn dispatch(
        &self,
        core: &Core,
        payout: &Payout,
        attempt: &Attempt,
        tx: &AttemptTx,
    ) -> Result<Dispatch, PipelineError> {
        if !core.guard.allows(payout, attempt, &GuardRecord::of(attempt).encode()).await {
            return Ok(Dispatch::Withheld);
        }
        let outcome = self.chain.rail.send(&tx.raw).await;
        self.interpret(core, attempt, tx, outcome).await
    }

    /// `dispatch` for freshly signed attempts, in one batch request where the rail allows.
    async fn dispatch_batch<'a>(
        &self,
        core: &Core,
        signed: &'a [(Payout, Attempt)],
    ) -> Result<Vec<(&'a Attempt, Dispatch)>, PipelineError> {
        let mut dispatched = Vec::with_capacity(signed.len());
        let mut cleared = Vec::with_capacity(signed.len());
        for (payout, attempt) in signed {
            if core.guard.allows(payout, attempt, &GuardRecord::of(attempt).encode()).await {
                cleared.push(attempt);
            } else {
                dispatched.push((attempt, Dispatch::Withheld));
            }
        }
        let raws: Vec<&[u8]> = cleared.iter().map(|a| a.latest_tx().raw.as_slice()).collect();
        let outcomes = self.chain.rail.send_batch(&raws).await;
        assert_eq!(outcomes.len(), raws.len(), "the rail answers one outcome per transaction");
        for (attempt, outcome) in cleared.into_iter().zip(outcomes) {
            dispatched.push((
                attempt,
                self.interpret(core, attempt, attempt.latest_tx(), outcome).await?,
            ));
        }
        Ok(dispatched)
    }

    /// What the node's answer to a send means. Only `Accepted` is taken as sent; anything else is
    /// left for the resolver, which looks the hashes up before deciding (4.4).
    #[cfg_attr(not(feature = "defects"), allow(unused_variables))]
    async fn interpret(
        &self,
        core: &Core,
        attempt: &Attempt,
        tx: &AttemptTx,
        outcome: SendOutcome,
    ) -> Result<Dispatch, PipelineError> {
        match outcome {
            SendOutcome::Accepted => {
                self.unpause(&evm_slot(attempt).wallet_id);
                return Ok(Dispatch::Accepted);
            }
            SendOutcome::InsufficientFunds => self.low_balance(core, attempt).await?,
            SendOutcome::MaybeAlreadySent => {
                tracing::debug!(attempt = %attempt.id, hash = %tx.hash, "node may already have it")
            }
            SendOutcome::SlotHeldByOther => {
                tracing::warn!(attempt = %attempt.id, hash = %tx.hash, "another transaction holds this nonce in the pool (not ours)")
            }
            SendOutcome::Refused(why) => {
                tracing::warn!(attempt = %attempt.id, hash = %tx.hash, %why, "node refused the bytes")
            }
            SendOutcome::Unknown(why) => {
                tracing::info!(attempt = %attempt.id, hash = %tx.hash, %why, "send outcome unknown");
                #[cfg(feature = "defects")]
                if self.defective_on_unknown(core, attempt).await? {
                    return Ok(Dispatch::Withheld);
                }
            }
        }
        Ok(Dispatch::NotAccepted)
    }

    /// The node refused the wallet's bytes for want of funds: pause the wallet's line (no payout
    /// fails; the stored bytes are re-sent on the resolver's timer and the line resumes when one is
    /// accepted) and open one `hot_wallet_low_balance` incident per stuck nonce.
    async fn low_balance(&self, core: &Core, attempt: &Attempt) -> Result<(), PipelineError> {
        let slot = evm_slot(attempt);
        let newly_paused = self.pause(&slot.wallet_id);
        let address =
            self.wallet(&slot.wallet_id).map(|w| w.address.to_string()).unwrap_or_default();
        if newly_paused {
            tracing::error!(wallet = %slot.wallet_id, %address, attempt = %attempt.id, "hot wallet cannot pay its transactions: line paused until it is funded");
        }
        let subject =
            IncidentSubject { attempt_id: Some(attempt.id.clone()), ..IncidentSubject::default() };
        let incident = NewIncident::new(
            IncidentKind::HotWalletLowBalance,
            subject,
            format!(
                "hot wallet {address} on chain {} cannot pay for nonce {}: the node refused it for insufficient funds; \
                 fund the wallet and its line resumes",
                self.chain.rail.chain_id(),
                slot.nonce
            ),
            core.clock.now_ms(),
        );
        core.store
            .open_incident_once(&incident, &format!("{}:{}", slot.wallet_id, slot.nonce))
            .await?;
        Ok(())
    }
}
