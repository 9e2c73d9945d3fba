//! The attempt lifecycle on a provider API: the key stored before any call, the same request re-sent only inside the key window, everything else decided by lookup.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use payoutd_domain::{Amount, Attempt, AttemptId, AttemptSlot, AttemptTx, Payout, TxKind, TxRef};
use payoutd_engine::clock::Clock;
use payoutd_engine::rail::{OutgoingSince, PrepareError, Prepared, ReadError, StandaloneRail, StandaloneStatus, SubmitOutcome};

use crate::api::{CallError, ProviderApi, ProviderState, ProviderTransfer};
use crate::key::{idempotency_key, our_reference};

/// How long a provider keeps an idempotency key when the configuration names nothing shorter:
/// Stripe, Coinbase and Bridge document 24 hours.
pub const KEY_WINDOW_MS_DEFAULT: i64 = 24 * 60 * 60 * 1_000;
/// Refusals remembered at most (a refusal forgotten is asked again with the same key: safe).
const REFUSALS_REMEMBERED_MAX: usize = 10_000;

#[derive(Debug, Clone)]
pub struct ProviderRailConfig {
    /// The provider's key window, as configured (at most what the provider documents): inside it
    /// a retry re-sends the same request with the same key; past it only a lookup decides.
    pub key_window_ms: i64,
}

impl Default for ProviderRailConfig {
    fn default() -> Self {
        ProviderRailConfig { key_window_ms: KEY_WINDOW_MS_DEFAULT }
    }
}

/// A provider rail: one adapter (`ProviderApi`) under the engine's attempt lifecycle.
pub struct ProviderRail {
    name: String,
    api: Arc<dyn ProviderApi>,
    clock: Arc<dyn Clock>,
    config: ProviderRailConfig,
    /// Attempts whose create the provider refused with proof that nothing was created.
    refused: Mutex<HashMap<AttemptId, String>>,
}

impl ProviderRail {
    pub fn new(api: Arc<dyn ProviderApi>, clock: Arc<dyn Clock>, config: ProviderRailConfig) -> ProviderRail {
        ProviderRail { name: format!("provider:{}", api.provider()), api, clock, config, refused: Mutex::new(HashMap::new()) }
    }

    fn key_of(attempt: &Attempt) -> Result<(&str, Option<&TxRef>), ReadError> {
        match &attempt.slot {
            AttemptSlot::Provider { idempotency_key, reference, .. } => Ok((idempotency_key, reference.as_ref())),
            other => Err(ReadError(format!("attempt {} is not a provider attempt: {}", attempt.id, other.rail()))),
        }
    }

    /// Past the window the provider may have forgotten the key: a create then could make a second
    /// transfer, so none is sent.
    fn past_window(&self, attempt: &Attempt) -> bool {
        self.clock.now_ms() - attempt.created_at_ms >= self.config.key_window_ms
    }

    fn remember_refusal(&self, attempt: &AttemptId, proof: String) {
        let mut refused = self.refused.lock().expect("refusals lock");
        if refused.len() >= REFUSALS_REMEMBERED_MAX {
            refused.clear();
        }
        refused.insert(attempt.clone(), proof);
    }

    /// The status a transfer the provider described means for the attempt.
    fn status_of(&self, transfer: ProviderTransfer, payout: &Payout) -> Result<StandaloneStatus, ReadError> {
        let reference = TxRef::parse(&transfer.id).map_err(|_| ReadError(format!("provider id {:?} is not a reference", transfer.id)))?;
        Ok(match transfer.state {
            ProviderState::Processing => StandaloneStatus::Landed { reference, final_: false, transfer_matches: transfer.matches(payout), fee_paid: Amount::ZERO },
            ProviderState::Completed => StandaloneStatus::Landed { reference, final_: true, transfer_matches: transfer.matches(payout), fee_paid: Amount::ZERO },
            ProviderState::Failed { proof } => StandaloneStatus::Dead { proof: format!("{} transfer {}: {proof}", self.api.provider(), transfer.id), cancel_fee_paid: Amount::ZERO },
            ProviderState::Unrecognised(state) => StandaloneStatus::Unrecognised { reference, detail: format!("state {state:?} is not one the adapter knows") },
        })
    }
}

fn read_error(e: CallError) -> ReadError {
    ReadError(e.to_string())
}

#[async_trait]
impl StandaloneRail for ProviderRail {
    fn name(&self) -> &str {
        &self.name
    }

    async fn prepare(&self, payout: &Payout, attempt_no: u32) -> Result<Prepared, PrepareError> {
        let reference = our_reference(&payout.id, attempt_no);
        let body = self.api.request_for(payout, &reference).map_err(PrepareError::Refused)?;
        let key = idempotency_key(&payout.merchant_id, &payout.key, attempt_no);
        let hash = TxRef::parse(&reference).map_err(|_| PrepareError::Refused(format!("reference {reference:?} is not a reference")))?;
        Ok(Prepared {
            slot: AttemptSlot::Provider { provider: self.api.provider().to_owned(), idempotency_key: key.to_string(), reference: None },
            tx: AttemptTx { hash, kind: TxKind::Original, raw: body, fees: None, created_at_ms: 0 },
        })
    }

    async fn submit(&self, attempt: &Attempt) -> SubmitOutcome {
        let (key, _) = match Self::key_of(attempt) {
            Ok(k) => k,
            Err(e) => return SubmitOutcome::NotAccepted(e.to_string()),
        };
        if self.past_window(attempt) {
            return SubmitOutcome::NotAccepted(format!("past the {} key window: decided by lookup, never created again", self.api.provider()));
        }
        match self.api.create(key, &attempt.txs[0].raw).await {
            Ok(created) => match TxRef::parse(&created.transfer.id) {
                Ok(id) => SubmitOutcome::Accepted { reference: Some(id) },
                Err(_) => SubmitOutcome::NotAccepted(format!("provider id {:?} is not a reference; looked up instead", created.transfer.id)),
            },
            Err(CallError::Refused(why)) => {
                self.remember_refusal(&attempt.id, why.clone());
                SubmitOutcome::NotAccepted(why)
            }
            Err(e) => SubmitOutcome::NotAccepted(e.to_string()),
        }
    }

    async fn status(&self, attempt: &Attempt, payout: &Payout) -> Result<StandaloneStatus, ReadError> {
        let (_, provider_id) = Self::key_of(attempt)?;
        let ours = attempt.txs[0].hash.as_str();
        let found = match provider_id {
            Some(id) => Some(self.api.get(id.as_str()).await.map_err(read_error)?),
            None => {
                let mut carrying = self.api.find_by_reference(ours, attempt.created_at_ms).await.map_err(read_error)?;
                if carrying.len() > 1 {
                    let ids: Vec<&str> = carrying.iter().map(|t| t.id.as_str()).collect();
                    let reference = TxRef::parse(ours).map_err(|_| ReadError("our reference is not a reference".into()))?;
                    return Ok(StandaloneStatus::Unrecognised { reference, detail: format!("{} transfers carry our reference: {}", ids.len(), ids.join(", ")) });
                }
                carrying.pop()
            }
        };
        if let Some(transfer) = found {
            return self.status_of(transfer, payout);
        }
        if let Some(why) = self.refused.lock().expect("refusals lock").get(&attempt.id) {
            return Ok(StandaloneStatus::Dead { proof: format!("{} refused the create with key and reference {ours}: {why}", self.api.provider()), cancel_fee_paid: Amount::ZERO });
        }
        if self.past_window(attempt) {
            // Looked up after the window: a transfer made by any earlier call would carry our reference now.
            return Ok(StandaloneStatus::Dead {
                proof: format!("no {} transfer carries our reference {ours}, looked up after the key window passed", self.api.provider()),
                cancel_fee_paid: Amount::ZERO,
            });
        }
        Ok(StandaloneStatus::Pending)
    }

    fn reconcile_cursor_name(&self) -> Option<String> {
        Some(format!("{}/{}", self.name, self.api.account()))
    }

    async fn outgoing_since(&self, cursor: Option<&str>) -> Result<OutgoingSince, ReadError> {
        let Some(cursor) = cursor else {
            let start = self.api.starting_cursor(self.clock.now_ms()).await.map_err(read_error)?;
            return Ok(OutgoingSince { refs: Vec::new(), cursor: Some(start) });
        };
        let page = self.api.transfers_after(cursor).await.map_err(read_error)?;
        let refs = page
            .transfers
            .iter()
            .map(|t| {
                // Ours carry our reference, which is what the attempt stored; any other is named by its id.
                let text = t.reference.as_deref().unwrap_or(&t.id);
                TxRef::parse(text).map_err(|_| ReadError(format!("{text:?} is not a reference")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(OutgoingSince { refs, cursor: page.cursor })
    }
}
