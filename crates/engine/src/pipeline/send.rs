//! Broadcast (SPEC 4 step 4): send stored bytes, behind the optional guard; only an explicit accept moves an attempt.

use futures::StreamExt;

use payoutd_domain::{Attempt, AttemptTx, IncidentKind, PayoutId};

use super::evm::evm_slot;
use super::{EvmChain, Pipeline, PipelineError, SEND_BATCH_MAX, SEND_REQUESTS_IN_FLIGHT_MAX};
use crate::pipeline_store::{IncidentSubject, NewIncident};
use crate::rail::SendOutcome;

/// What happened to one send, before anything is written about it.
pub(super) enum Dispatch {
    Accepted,
    /// Anything else the node said, or no answer: the resolver decides later.
    NotAccepted,
    /// Not sent at all (the guard refused, or a defect already wrote the outcome).
    Withheld,
}

/// What the send guard remembers of an attempt that went out: enough for the chain to show later
/// whether it can still land, even if the database lost the attempt (its wallet, nonce and the hash
/// of its first transaction, the one the guard let out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GuardRecord {
    pub attempt_id: String,
    pub wallet_id: String,
    pub nonce: u64,
    pub hash: String,
}

impl GuardRecord {
    const SEPARATOR: char = '|';

    fn of(attempt: &Attempt) -> GuardRecord {
        let slot = evm_slot(attempt);
        GuardRecord {
            attempt_id: attempt.id.to_string(),
            wallet_id: slot.wallet_id.clone(),
            nonce: slot.nonce,
            hash: attempt.txs[0].hash.to_string(),
        }
    }

    /// What the guard stores for `attempt`: on EVM its record; on a rail without nonces the
    /// attempt, its rail and the reference of its request (no nonce to ask a chain about: `parse`
    /// answers `None`, and a person's verdict then rests on the rail's own lookup).
    fn value_of(attempt: &Attempt) -> String {
        if attempt.slot.as_evm().is_some() {
            return GuardRecord::of(attempt).encode();
        }
        let s = GuardRecord::SEPARATOR;
        format!("{}{s}{}{s}{}", attempt.id, attempt.slot.rail(), attempt.txs[0].hash)
    }

    fn encode(&self) -> String {
        let s = GuardRecord::SEPARATOR;
        format!("{}{s}{}{s}{}{s}{}", self.attempt_id, self.wallet_id, self.nonce, self.hash)
    }

    /// `None` for a value this version did not write (then the chain cannot be asked about it).
    pub(super) fn parse(text: &str) -> Option<GuardRecord> {
        let mut parts = text.split(GuardRecord::SEPARATOR);
        let record = GuardRecord {
            attempt_id: parts.next()?.to_owned(),
            wallet_id: parts.next()?.to_owned(),
            nonce: parts.next()?.parse().ok()?,
            hash: parts.next()?.to_owned(),
        };
        parts.next().is_none().then_some(record)
    }

    /// The attempt id in a stored value (older values hold only the id).
    fn attempt_of(text: &str) -> &str {
        text.split(GuardRecord::SEPARATOR).next().unwrap_or(text)
    }
}

fn guard_key(attempt: &Attempt) -> String {
    guard_key_of(&attempt.payout_id, attempt.attempt_no)
}

/// The send guard's key of attempt `attempt_no` of a payout.
pub(super) fn guard_key_of(payout_id: &PayoutId, attempt_no: u32) -> String {
    format!("payoutd:sent:{payout_id}:{attempt_no}")
}

impl Pipeline {
    /// Sends freshly committed attempts in batches of `SEND_BATCH_MAX`, `SEND_REQUESTS_IN_FLIGHT_MAX`
    /// batches at a time; writes nothing (a signing session of the same wallet may be open meanwhile).
    pub(super) async fn dispatch_all<'a>(&self, chain: &EvmChain, attempts: &'a [Attempt]) -> Result<Vec<(&'a Attempt, Dispatch)>, PipelineError> {
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
    pub(super) async fn record_dispatches(&self, outcomes: Vec<(&Attempt, Dispatch)>) -> Result<u32, PipelineError> {
        let now = self.clock.now_ms();
        let mut accepted = Vec::with_capacity(outcomes.len());
        for (attempt, outcome) in outcomes {
            match outcome {
                Dispatch::Accepted => accepted.push(attempt.id.clone()),
                // False: the attempt ended meanwhile (another worker settled it); nothing to record.
                Dispatch::NotAccepted => _ = self.store.record_sent(&attempt.id, now).await?,
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
    pub(super) async fn send_tx(&self, chain: &EvmChain, attempt: &Attempt, tx: &AttemptTx) -> Result<bool, PipelineError> {
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
    pub(super) async fn guard_allows(&self, attempt: &Attempt) -> bool {
        let Some(guard) = &self.guard else { return true };
        match guard.record_or_get(&guard_key(attempt), &GuardRecord::value_of(attempt)).await {
            Ok(recorded) if GuardRecord::attempt_of(&recorded) == attempt.id.as_str() => true,
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
            SendOutcome::Accepted => {
                self.unpause(&evm_slot(attempt).wallet_id);
                return Ok(Dispatch::Accepted);
            }
            SendOutcome::InsufficientFunds => self.low_balance(chain, attempt).await?,
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

    /// The node refused the wallet's bytes for want of funds: pause the wallet's line (no payout
    /// fails; the stored bytes are re-sent on the resolver's timer and the line resumes when one is
    /// accepted) and open one `hot_wallet_low_balance` incident per stuck nonce.
    async fn low_balance(&self, chain: &EvmChain, attempt: &Attempt) -> Result<(), PipelineError> {
        let slot = evm_slot(attempt);
        let newly_paused = self.pause(&slot.wallet_id);
        let address = chain.wallets.iter().find(|w| w.id == slot.wallet_id).map(|w| w.address.to_string()).unwrap_or_default();
        if newly_paused {
            tracing::error!(wallet = %slot.wallet_id, %address, attempt = %attempt.id, "hot wallet cannot pay its transactions: line paused until it is funded");
        }
        let subject = IncidentSubject { attempt_id: Some(attempt.id.clone()), ..IncidentSubject::default() };
        let incident = NewIncident::new(
            IncidentKind::HotWalletLowBalance,
            subject,
            format!(
                "hot wallet {address} on chain {} cannot pay for nonce {}: the node refused it for insufficient funds; \
                 fund the wallet and its line resumes",
                chain.rail.chain_id(),
                slot.nonce
            ),
            self.clock.now_ms(),
        );
        self.store.open_incident_once(&incident, &format!("{}:{}", slot.wallet_id, slot.nonce)).await?;
        Ok(())
    }
}
