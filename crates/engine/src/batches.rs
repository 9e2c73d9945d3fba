//! Payout batches: many payouts in one request, each line a payout keyed by its external id, so a
//! resubmitted batch creates only the lines that do not exist yet (SPEC 3, SPEC 8 item 17).

use std::collections::HashSet;

use futures::stream::{self, StreamExt};
use payoutd_domain::{batch_key_of, BatchId, MerchantId, Payout, PayoutKey, PayoutRequest};

use crate::intake::{Engine, IntakeError, Replay};
use crate::store::{BatchView, NewBatch};

/// Lines in one batch unless configured otherwise.
pub const BATCH_LINES_MAX_DEFAULT: usize = 10_000;
/// Lines created at once: each is its own transaction, so a few in flight keep the database busy
/// without taking every connection.
pub const BATCH_LINE_CONCURRENCY: usize = 8;

/// What became of one line.
#[derive(Debug)]
pub struct BatchLineOutcome {
    pub external_id: PayoutKey,
    pub result: Result<(Payout, Replay), IntakeError>,
}

#[derive(Debug)]
pub struct BatchOutcome {
    pub id: BatchId,
    /// `Replayed` when this batch (same key) was submitted before.
    pub replay: Replay,
    pub lines: Vec<BatchLineOutcome>,
}

impl Engine {
    /// Creates each line's payout (or finds it, when its external id exists) and records the batch.
    /// The caller has refused the whole batch if any line did not parse; external ids are distinct.
    pub async fn submit_batch(
        &self,
        merchant: &MerchantId,
        key: Option<String>,
        requests: Vec<PayoutRequest>,
    ) -> Result<BatchOutcome, IntakeError> {
        let mut seen = HashSet::with_capacity(requests.len());
        if let Some(dup) = requests.iter().find(|r| !seen.insert(r.key.as_str())) {
            return Err(IntakeError::Invalid(format!("external_id {} appears twice in the batch", dup.key)));
        }
        if requests.is_empty() {
            return Err(IntakeError::Invalid("a batch needs at least one line".into()));
        }
        let key = key.unwrap_or_else(|| batch_key_of(requests.iter().map(|r| &r.key)));
        let lines: Vec<BatchLineOutcome> = stream::iter(requests)
            .map(|request| async move {
                let external_id = request.key.clone();
                BatchLineOutcome { external_id, result: self.create_payout(merchant, request).await }
            })
            .buffered(BATCH_LINE_CONCURRENCY)
            .collect()
            .await;
        let new = NewBatch {
            id: BatchId::new(),
            merchant_id: merchant.clone(),
            key,
            lines: lines.iter().map(|l| (l.external_id.clone(), l.result.as_ref().err().map(ToString::to_string))).collect(),
            at_ms: self.now_ms(),
        };
        let id = self.store().save_batch(&new).await?;
        let replay = if id == new.id { Replay::Created } else { Replay::Replayed };
        Ok(BatchOutcome { id, replay, lines })
    }

    pub async fn batch(&self, merchant: &MerchantId, id: &BatchId) -> Result<BatchView, IntakeError> {
        self.store().batch(merchant, id).await?.ok_or(IntakeError::NotFound)
    }
}
