//! Internal transfers: the use case that moves a merchant's available balance to another merchant,
//! idempotent on the sender's key (SPEC 3's table: replay 200, reuse 422, races converge).

use payoutd_domain::{
    EventId, EventType, Journal, MerchantId, Transfer, TransferId, TransferRequest,
};

use crate::intake::{Engine, IntakeError, Replay};
use crate::store::{NewEvent, NewTransfer, TransferOutcome};

impl Engine {
    /// Moves `request.amount` from the merchant's available balance to the destination's, or
    /// returns the transfer this key already made.
    pub async fn create_transfer(
        &self,
        merchant: &MerchantId,
        request: TransferRequest,
    ) -> Result<(Transfer, Replay), IntakeError> {
        if &request.destination == merchant {
            return Err(IntakeError::Invalid(
                "a transfer needs another merchant as its destination".into(),
            ));
        }
        // The payouts' minimum and the merchant's minute hold for transfers too (a retry of a
        // transfer takes a place in the minute as well: the key is looked up in the store's write).
        self.check_minimum(&request.asset, request.amount)?;
        self.take_intake_place(merchant)?;
        let fingerprint = request.fingerprint();
        let at_ms = self.now_ms();
        let transfer = Transfer {
            id: TransferId::new(),
            merchant_id: merchant.clone(),
            key: request.key,
            fingerprint: fingerprint.clone(),
            destination: request.destination,
            asset: request.asset,
            amount: request.amount,
            created_at_ms: at_ms,
        };
        let journal = Journal::transfer(
            merchant,
            &transfer.destination,
            &transfer.asset,
            transfer.id.as_str(),
            transfer.amount,
        );
        let events = [
            completed_event(&transfer, transfer.id.as_str().to_owned(), merchant, at_ms),
            completed_event(&transfer, transfer.credit_entity_id(), &transfer.destination, at_ms),
        ];
        match self.store().insert_transfer(&NewTransfer { transfer, journal, events }).await? {
            TransferOutcome::Created(t) => Ok((t, Replay::Created)),
            TransferOutcome::Existing(t) if t.fingerprint == fingerprint => {
                Ok((t, Replay::Replayed))
            }
            TransferOutcome::Existing(_) => Err(IntakeError::KeyReused),
            TransferOutcome::InsufficientFunds => Err(IntakeError::InsufficientFunds),
            TransferOutcome::UnknownDestination => Err(IntakeError::UnknownMerchant),
        }
    }

    /// A transfer the merchant sent or received.
    pub async fn transfer(
        &self,
        merchant: &MerchantId,
        id: &TransferId,
    ) -> Result<Transfer, IntakeError> {
        self.store().transfer(merchant, id).await?.ok_or(IntakeError::NotFound)
    }
}

/// `transfer.completed` for one side; the destination's is keyed `tr_.../credit` (SPEC 6).
fn completed_event(
    transfer: &Transfer,
    entity_id: String,
    to: &MerchantId,
    at_ms: i64,
) -> NewEvent {
    NewEvent {
        id: EventId::derive(EventType::TransferCompleted, &entity_id),
        event_type: EventType::TransferCompleted,
        entity_id,
        merchant_id: Some(to.clone()),
        payload_json: transfer_json(transfer, to).to_string(),
        at_ms,
    }
}

/// A transfer as the API and its events show it.
/// The transfer as `viewer` sees it: the idempotency key is the sender's own (it names the sender's
/// business event), so the recipient sees `null` there.
pub fn transfer_json(t: &Transfer, viewer: &MerchantId) -> serde_json::Value {
    serde_json::json!({"id": t.id.as_str(), "object": "transfer", "status": "completed", "merchant_id": t.merchant_id.as_str(),
        "destination_merchant_id": t.destination.as_str(), "asset": t.asset.as_str(), "amount": t.amount.to_string(),
        "idempotency_key": t.key_seen_by(viewer), "created_at_ms": t.created_at_ms})
}
