//! The attempt lifecycle on a provider API: the key stored before any call, the same request re-sent only inside the key window, everything else decided by lookup.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use payoutd_domain::Asset;
use payoutd_domain::{Amount, Attempt, AttemptId, AttemptSlot, AttemptTx, Payout, TxKind, TxRef};
use payoutd_engine::clock::{CLOCK_SKEW_MAX_MS, Clock};
use payoutd_engine::rail::ReadError;
use payoutd_engine::standalone::{
    CarriedReference, OutgoingSince, PrepareError, Prepared, RailWallet, StandaloneRail,
    StandaloneStatus, SubmitOutcome,
};

use crate::api::{CallError, CreatedWithin, ProviderApi, ProviderState, ProviderTransfer};
use crate::config::ProviderRailConfig;
use crate::key::{action_key, idempotency_key, our_reference};

/// Attempts remembered as "looked up past the window, found nothing" at most; past it the memory
/// starts over, which only delays deaths.
const ABSENT_SIGHTINGS_MAX: usize = 10_000;

/// A provider rail: one adapter (`ProviderApi`) under the engine's attempt lifecycle.
pub struct ProviderRail {
    name: String,
    api: Arc<dyn ProviderApi>,
    clock: Arc<dyn Clock>,
    config: ProviderRailConfig,
    /// The provider account as a hot wallet the ledger keeps: payouts and fees leave its account,
    /// and the balance check compares it with the provider's balance.
    wallet: Option<RailWallet>,
    /// Attempts a lookup past the window plus the margin found nowhere, with when (our clock):
    /// dead only when a second lookup at least a margin later agrees.
    absent_since_ms: Mutex<HashMap<AttemptId, i64>>,
    /// The `retry_refusal_is_proof` defect's memory of refused retries.
    #[cfg(feature = "defects")]
    refused_retries: Mutex<HashMap<AttemptId, String>>,
}

impl ProviderRail {
    pub fn new(
        api: Arc<dyn ProviderApi>,
        clock: Arc<dyn Clock>,
        config: ProviderRailConfig,
    ) -> ProviderRail {
        ProviderRail {
            name: format!("provider:{}", api.provider()),
            api,
            clock,
            config,
            wallet: None,
            absent_since_ms: Mutex::new(HashMap::new()),
            #[cfg(feature = "defects")]
            refused_retries: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps the provider account in the ledger as `wallet` (its row in `hot_wallets`; `native`
    /// the asset the provider charges fees in): attempts made from now on name it.
    pub fn with_wallet(mut self, wallet: RailWallet) -> ProviderRail {
        self.wallet = Some(wallet);
        self
    }

    fn key_of(attempt: &Attempt) -> Result<(&str, Option<&TxRef>), ReadError> {
        match &attempt.slot {
            AttemptSlot::Provider { idempotency_key, reference, .. } => {
                Ok((idempotency_key, reference.as_ref()))
            }
            other => Err(ReadError(format!(
                "attempt {} is not a provider attempt: {}",
                attempt.id,
                other.rail()
            ))),
        }
    }

    /// When the provider first replayed a saved error for the attempt's key, as the engine recorded
    /// it (the database's clock); `None` while no replay is recorded.
    fn key_spent_at_ms(attempt: &Attempt) -> Option<i64> {
        match &attempt.slot {
            AttemptSlot::Provider { key_spent_at_ms, .. } => *key_spent_at_ms,
            _ => None,
        }
    }

    /// A call that made nothing we know of: a replayed saved error spends the key, which the engine
    /// records on the database's clock, but only from a worker whose clock is in step with it (the
    /// time starts the margin a proof of death waits for); anything else proves nothing.
    fn not_accepted(&self, why: String, e: &CallError) -> SubmitOutcome {
        match e {
            CallError::Replayed(_) if self.clock.in_step() => SubmitOutcome::KeySpent(why),
            _ => SubmitOutcome::NotAccepted(why),
        }
    }

    fn age_ms(&self, attempt: &Attempt) -> i64 {
        self.clock.now_ms() - attempt.created_at_ms
    }

    /// Creates go out only until the resend horizon, and never past a margin before the window
    /// ends: a create sent then reaches the provider, and every retry of it, while the provider
    /// still holds the key.
    fn may_create(&self, attempt: &Attempt) -> bool {
        self.age_ms(attempt) < self.creates_for_ms(attempt)
    }

    /// How long after it began the attempt's creates may go out: as fixed when it was made (the
    /// horizon configured then, whatever it is now), or, for an attempt made before that was
    /// stored, until a margin before the key window's end.
    fn creates_for_ms(&self, attempt: &Attempt) -> i64 {
        match &attempt.slot {
            AttemptSlot::Provider { creates_for_ms: Some(ms), .. } => *ms,
            _ => self.config.creates_for_unstored_ms(),
        }
    }

    /// When a transfer the attempt made can have been created (see
    /// [`ProviderRailConfig::lookup_window`]).
    fn created_within(&self, attempt: &Attempt) -> CreatedWithin {
        self.config.lookup_window(attempt.created_at_ms, self.creates_for_ms(attempt))
    }

    /// A lookup that finds nothing proves something only a margin after the window: by then the
    /// last create any worker could have sent has been answered or given up on. Or a margin after
    /// the provider replayed a saved error for the key: no create with it can make anything since.
    /// Never on a clock out of step with the database's, whose age of the attempt proves nothing.
    fn past_window_and_margin(&self, attempt: &Attempt) -> bool {
        let margin_ms = self.config.margin_ms();
        self.clock.in_step()
            && (self.age_ms(attempt) >= self.config.key_window_ms + margin_ms
                || Self::key_spent_at_ms(attempt)
                    .is_some_and(|at| self.clock.now_ms() - at >= margin_ms))
    }

    /// A lookup past the window found nothing: dead only when an earlier lookup, at least a
    /// margin before, found nothing too (a provider's list can lag its creates).
    fn absent_twice(&self, attempt: &Attempt) -> Option<i64> {
        let now = self.clock.now_ms();
        let mut seen = self.absent_since_ms.lock().expect("absence lock");
        match seen.get(&attempt.id).copied() {
            Some(first) if now - first >= self.config.margin_ms() => {
                seen.remove(&attempt.id);
                Some(first)
            }
            Some(_) => None,
            None if self.config.margin_ms() == 0 => Some(now), // only a deliberate defect has no margin
            None => {
                if seen.len() >= ABSENT_SIGHTINGS_MAX {
                    seen.clear();
                }
                seen.insert(attempt.id.clone(), now);
                None
            }
        }
    }

    async fn create(&self, attempt: &Attempt) -> Result<SubmitOutcome, (String, CallError)> {
        let (key, _) = match Self::key_of(attempt) {
            Ok(k) => k,
            Err(e) => return Ok(SubmitOutcome::NotAccepted(e.to_string())),
        };
        if !self.clock.in_step() {
            return Ok(SubmitOutcome::NotAccepted(format!(
                "this worker's clock is not known to be within {CLOCK_SKEW_MAX_MS} ms of the database's: \
                 no {} create until it is, the attempt is decided by lookup meanwhile",
                self.api.provider()
            )));
        }
        if Self::key_spent_at_ms(attempt).is_some() {
            return Ok(SubmitOutcome::NotAccepted(format!(
                "{} replayed a saved error for this key: it creates nothing more, a lookup decides",
                self.api.provider()
            )));
        }
        if !self.may_create(attempt) {
            return Ok(SubmitOutcome::NotAccepted(format!(
                "{} ms after its attempt began, past the last create it may send to {}: decided by lookup, never created again",
                self.age_ms(attempt),
                self.api.provider()
            )));
        }
        match self.api.create(key, &attempt.txs[0].raw).await {
            Ok(created) => Ok(match TxRef::parse(&created.transfer.id) {
                Ok(id) => SubmitOutcome::Accepted { reference: Some(id) },
                Err(_) => SubmitOutcome::NotAccepted(format!(
                    "provider id {:?} is not a reference; looked up instead",
                    created.transfer.id
                )),
            }),
            Err(e) => Err((e.to_string(), e)),
        }
    }

    /// The fee the transfer cost the account, when the ledger keeps the account (else nobody books it).
    fn fee_of(&self, transfer: &ProviderTransfer) -> Amount {
        if self.wallet.is_some() { transfer.fee } else { Amount::ZERO }
    }

    /// The status a transfer the provider described means for the attempt.
    fn status_of(
        &self,
        transfer: ProviderTransfer,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<StandaloneStatus, ReadError> {
        let reference = TxRef::parse(&transfer.id)
            .map_err(|_| ReadError(format!("provider id {:?} is not a reference", transfer.id)))?;
        let fee_paid = self.fee_of(&transfer);
        let withheld_within_tolerance = !transfer.matches(payout)
            && transfer.matches_less_withheld(payout, self.config.withheld_max);
        let transfer_matches = transfer.matches(payout) || withheld_within_tolerance;
        // What it moved, as the provider says (the payout's amount where it says nothing); for a
        // transfer the provider took its gas out of, what arrived: the engine books the rest as
        // withheld.
        let moved = match transfer.amount {
            Some(arrived) if withheld_within_tolerance => arrived,
            _ => transfer.moved().unwrap_or(payout.amount),
        };
        Ok(match transfer.state {
            ProviderState::AwaitingFunds
                if self.age_ms(attempt) >= self.config.awaiting_funds_incident_after_ms =>
            {
                StandaloneStatus::Stalled {
                    reference,
                    detail: format!(
                        "awaiting its source's funds for {} s (the source is not a funded provider wallet?)",
                        self.age_ms(attempt) / 1_000
                    ),
                }
            }
            ProviderState::Processing | ProviderState::AwaitingFunds | ProviderState::Stuck => {
                StandaloneStatus::Landed {
                    reference,
                    final_: false,
                    transfer_matches,
                    moved,
                    fee_paid,
                }
            }
            ProviderState::Completed => StandaloneStatus::Landed {
                reference,
                final_: true,
                transfer_matches,
                moved,
                fee_paid,
            },
            // It failed and still cost the account a fee (Circle's `networkFee` on a FAILED
            // transaction): it reached the chain and failed there, as a revert; the fee is booked
            // and a person decides, as for a revert on any chain.
            ProviderState::Failed { proof } if !fee_paid.is_zero() => StandaloneStatus::Reverted {
                reference,
                detail: format!("{} transfer failed on chain: {proof}", self.api.provider()),
                fee_paid,
            },
            ProviderState::Failed { proof } => StandaloneStatus::Dead {
                proof: format!("{} transfer {}: {proof}", self.api.provider(), transfer.id),
                cancel_fee_paid: Amount::ZERO,
            },
            ProviderState::Reversed { detail } => {
                StandaloneStatus::Reverted { reference, detail, fee_paid }
            }
            ProviderState::Unrecognised(state) => StandaloneStatus::Unrecognised {
                reference,
                detail: format!("state {state:?} is not one the adapter knows"),
            },
        })
    }

    /// The recorded transfer failed while others carrying our reference did not: no proof of
    /// death, and no proof of payment by the attempt's own record either; a person decides, and
    /// the hold stays (a next attempt could pay a second time).
    fn several_carrying(
        &self,
        recorded_id: &TxRef,
        recorded: &ProviderTransfer,
        alive: &[ProviderTransfer],
    ) -> StandaloneStatus {
        let ids: Vec<String> = alive.iter().map(|t| format!("{} ({:?})", t.id, t.state)).collect();
        let reference = TxRef::parse(&alive[0].id).unwrap_or_else(|_| recorded_id.clone());
        StandaloneStatus::Unrecognised {
            reference,
            detail: format!(
                "{} transfer {} failed, but {} other transfer(s) carry our reference and did not: {}",
                self.api.provider(),
                recorded.id,
                alive.len(),
                ids.join(", ")
            ),
        }
    }
}

impl ProviderRail {
    /// Asks the provider to get transfer `id`, stuck on its way, moving: accelerated from the first
    /// sight on, and cancelled (best effort: it may still land) once its attempt is older than the
    /// configured wait. Each ask carries a key derived from the attempt's, so every worker and
    /// every retry asks the same and the provider answers a repeat with its first answer. The
    /// attempt stays live whatever the answer: only the provider's final state decides it.
    async fn unstick(&self, attempt: &Attempt, id: &str) {
        let Ok((attempt_key, _)) = Self::key_of(attempt) else { return };
        let action = if self.age_ms(attempt) >= self.config.stuck_cancel_after_ms {
            "cancel"
        } else {
            "accelerate"
        };
        let key = action_key(attempt_key, action).to_string();
        let asked = match action {
            "cancel" => self.api.cancel(id, &key).await,
            _ => self.api.accelerate(id, &key).await,
        };
        match asked {
            Ok(()) => tracing::info!(
                provider = self.api.provider(),
                transfer = id,
                action,
                "asked the provider to move a stuck transfer"
            ),
            Err(e) => {
                tracing::warn!(provider = self.api.provider(), transfer = id, action, error = %e, "the provider did not take the ask; the transfer stays stuck and is read again")
            }
        }
    }

    /// The status of an attempt whose transfer id was recorded, from that transfer as read now.
    async fn status_of_recorded(
        &self,
        id: &TxRef,
        recorded: ProviderTransfer,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<StandaloneStatus, ReadError> {
        if recorded.state == ProviderState::Stuck {
            self.unstick(attempt, &recorded.id).await;
        }
        if !matches!(recorded.state, ProviderState::Failed { .. }) {
            return self.status_of(recorded, attempt, payout);
        }
        #[cfg(feature = "defects")]
        if self.config.defects.recorded_failure_is_proof {
            return self.status_of(recorded, attempt, payout);
        }
        // The recorded transfer failed, but a retry the provider took as new may have made
        // another behind our reference: dead only when every one of them failed, in a listing
        // that has caught up with the recorded one at least (a lookup behind its own list,
        // which a provider's lookup by id is not, could miss the other too).
        let ours = attempt.txs[0].hash.as_str();
        let carrying = self
            .api
            .find_by_reference(ours, &attempt.txs[0].raw, self.created_within(attempt))
            .await
            .map_err(read_error)?;
        if !carrying.iter().any(|t| t.id == recorded.id) {
            return Err(ReadError(format!(
                "{} transfer {} failed, but the lookup by our reference {ours} does not list it yet: \
                 a listing behind proves no death",
                self.api.provider(),
                recorded.id
            )));
        }
        match others_alive(&recorded, carrying) {
            None => self.status_of(recorded, attempt, payout),
            Some(alive) => Ok(self.several_carrying(id, &recorded, &alive)),
        }
    }
}

/// The transfers carrying our reference, other than the failed `recorded` one, that did not fail:
/// `None` when there are none (the recorded one's failure then speaks for the attempt).
fn others_alive(
    recorded: &ProviderTransfer,
    carrying: Vec<ProviderTransfer>,
) -> Option<Vec<ProviderTransfer>> {
    let alive: Vec<ProviderTransfer> = carrying
        .into_iter()
        .filter(|t| t.id != recorded.id && !matches!(t.state, ProviderState::Failed { .. }))
        .collect();
    (!alive.is_empty()).then_some(alive)
}

fn read_error(e: CallError) -> ReadError {
    ReadError(e.to_string())
}

#[async_trait]
impl StandaloneRail for ProviderRail {
    fn name(&self) -> &str {
        &self.name
    }

    fn first_send_within_ms(&self) -> i64 {
        self.config.first_send_within_ms()
    }

    /// A provider slot of this provider's kind: a route never lists two providers of one kind.
    fn owns(&self, slot: &AttemptSlot) -> bool {
        matches!(slot, AttemptSlot::Provider { provider, .. } if provider == self.api.provider())
    }

    async fn prepare(
        &self,
        payout: &Payout,
        attempt_no: u32,
        _reference: &payoutd_domain::ChainReference,
    ) -> Result<Prepared, PrepareError> {
        // The attempt's start, stamped now on this worker's reading of the database's clock,
        // bounds the window its lookups read: only a reading known to be in step may stamp it.
        if !self.clock.in_step() {
            return Err(PrepareError::Unavailable(ReadError(format!(
                "this worker's clock is not known to be within {CLOCK_SKEW_MAX_MS} ms of the database's: no {} attempt starts on it",
                self.api.provider()
            ))));
        }
        let reference = our_reference(&payout.id, attempt_no);
        let body = self.api.request_for(payout, &reference).map_err(PrepareError::Refused)?;
        let key = idempotency_key(&payout.merchant_id, &payout.key, attempt_no);
        let hash = TxRef::parse(&reference).map_err(|_| {
            PrepareError::Refused(format!("reference {reference:?} is not a reference"))
        })?;
        Ok(Prepared {
            slot: AttemptSlot::Provider {
                provider: self.api.provider().to_owned(),
                idempotency_key: key.to_string(),
                reference: None,
                wallet: self.wallet.as_ref().map(|w| w.id.clone()),
                key_spent_at_ms: None,
                creates_for_ms: Some(self.config.creates_until_ms()),
            },
            tx: AttemptTx { hash, kind: TxKind::Original, raw: body, fees: None, created_at_ms: 0 },
        })
    }

    /// A re-send: an earlier call with this key may have created the transfer, and a provider
    /// that validates before it looks at the key (or a Circle retry, with a fresh ciphertext) can
    /// refuse the retry all the same; so a refusal here proves nothing and only a lookup decides.
    async fn submit(&self, attempt: &Attempt) -> SubmitOutcome {
        #[cfg(feature = "defects")]
        if self.config.defects.retry_refusal_is_proof
            && let Err((why, CallError::Refused(_))) = self.create(attempt).await
        {
            self.refused_retries
                .lock()
                .expect("refusals lock")
                .insert(attempt.id.clone(), why.clone());
            return SubmitOutcome::NotAccepted(why);
        }
        self.create(attempt).await.unwrap_or_else(|(why, e)| self.not_accepted(why, &e))
    }

    /// The first call with this key: a refusal that proves nothing was created ends the attempt.
    async fn submit_first(&self, attempt: &Attempt) -> SubmitOutcome {
        match self.create(attempt).await {
            Ok(outcome) => outcome,
            // A create answered "not found" names something that does not exist (a wallet, an
            // account): nothing was made by it.
            Err((why, CallError::Refused(_) | CallError::NotFound(_))) => {
                SubmitOutcome::Refused { proof: why }
            }
            Err((why, e)) => self.not_accepted(why, &e),
        }
    }

    async fn status(
        &self,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<StandaloneStatus, ReadError> {
        let (_, provider_id) = Self::key_of(attempt)?;
        let ours = attempt.txs[0].hash.as_str();
        let found = match provider_id {
            Some(id) => {
                let recorded = self.api.get(id.as_str()).await.map_err(read_error)?;
                return self.status_of_recorded(id, recorded, attempt, payout).await;
            }
            None => {
                let mut carrying = self
                    .api
                    .find_by_reference(ours, &attempt.txs[0].raw, self.created_within(attempt))
                    .await
                    .map_err(read_error)?;
                if carrying.len() > 1 {
                    // The first the provider lists is recorded as the attempt's own; reconciliation
                    // then reports every other as a second payment.
                    let ids: Vec<&str> = carrying.iter().map(|t| t.id.as_str()).collect();
                    let reference = TxRef::parse(ids[0]).map_err(|_| {
                        ReadError(format!("provider id {:?} is not a reference", ids[0]))
                    })?;
                    return Ok(StandaloneStatus::Unrecognised {
                        reference,
                        detail: format!(
                            "{} transfers carry our reference {ours}: {}",
                            ids.len(),
                            ids.join(", ")
                        ),
                    });
                }
                carrying.pop()
            }
        };
        if let Some(transfer) = found {
            self.absent_since_ms.lock().expect("absence lock").remove(&attempt.id);
            return self.status_of(transfer, attempt, payout);
        }
        #[cfg(feature = "defects")]
        if let Some(why) = self.refused_retries.lock().expect("refusals lock").get(&attempt.id) {
            return Ok(StandaloneStatus::Dead {
                proof: format!("a retry was refused: {why}"),
                cancel_fee_paid: Amount::ZERO,
            });
        }
        #[cfg(feature = "defects")]
        if self.config.defects.replayed_error_is_proof && Self::key_spent_at_ms(attempt).is_some() {
            return Ok(StandaloneStatus::Dead {
                proof: "the provider replayed a saved error".into(),
                cancel_fee_paid: Amount::ZERO,
            });
        }
        if !self.past_window_and_margin(attempt) {
            return Ok(StandaloneStatus::Pending);
        }
        // Looked up a margin after the window, twice, a margin apart: a transfer made by any
        // earlier call would carry our reference by now.
        let Some(first_ms) = self.absent_twice(attempt) else {
            return Ok(StandaloneStatus::Pending);
        };
        Ok(StandaloneStatus::Dead {
            proof: format!(
                "no {} transfer carries our reference {ours}: looked up at {first_ms} and at {} (unix ms), both over {} ms past the key window",
                self.api.provider(),
                self.clock.now_ms(),
                self.config.margin_ms()
            ),
            cancel_fee_paid: Amount::ZERO,
        })
    }

    fn hot_wallet(&self) -> Option<&RailWallet> {
        self.wallet.as_ref()
    }

    async fn wallet_balances(&self, assets: &[Asset]) -> Result<Vec<Amount>, ReadError> {
        self.api.balances(assets).await.map_err(read_error)
    }

    fn reconcile_cursor_name(&self) -> Option<String> {
        Some(format!("{}/{}", self.name, self.api.account()))
    }

    async fn outgoing_since(&self, cursor: Option<&str>) -> Result<OutgoingSince, ReadError> {
        let Some(cursor) = cursor else {
            let start = self.api.starting_cursor(self.clock.now_ms()).await.map_err(read_error)?;
            return Ok(OutgoingSince {
                refs: Vec::new(),
                cursor: Some(start),
                carried: Vec::new(),
            });
        };
        let page = self.api.transfers_after(cursor).await.map_err(read_error)?;
        let parse = |text: &str| {
            TxRef::parse(text).map_err(|_| ReadError(format!("{text:?} is not a reference")))
        };
        let mut since = OutgoingSince { cursor: page.cursor, ..OutgoingSince::default() };
        for transfer in &page.transfers {
            // Ours carry our reference, which is what the attempt stored; any other is named by its id.
            let Some(reference) = transfer.reference.as_deref() else {
                since.refs.push(parse(&transfer.id)?);
                continue;
            };
            let reference = parse(reference)?;
            since.carried.push(CarriedReference {
                reference: reference.clone(),
                transfer_id: parse(&transfer.id)?,
            });
            since.refs.push(reference);
        }
        Ok(since)
    }

    async fn transfer_status(
        &self,
        transfer_id: &TxRef,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<StandaloneStatus, ReadError> {
        let transfer = self.api.get(transfer_id.as_str()).await.map_err(read_error)?;
        self.status_of(transfer, attempt, payout)
    }
}
