//! Payout batches: many payouts in one request, each line a payout keyed by its external id, so a
//! resubmitted batch creates only the lines that do not exist yet (SPEC 3, SPEC 8 item 17).

use std::collections::{HashMap, HashSet};

use payoutd_domain::{BatchId, MerchantId, Payout, PayoutKey, PayoutRequest, batch_key_of};

use crate::intake::{Engine, IntakeError, Replay, outcome_of, replay_of};
use crate::store::{BATCH_PAGE_LINES_MAX, BatchLines, BatchPage, BatchView, NewBatch, NewPayout};

/// Lines in one JSON batch unless configured otherwise: the API parses it whole.
pub const BATCH_LINES_MAX_DEFAULT: usize = 10_000;
/// Lines in one CSV batch unless configured otherwise: the API streams it a chunk at a time.
pub const CSV_BATCH_LINES_MAX_DEFAULT: usize = 100_000;
/// The most lines any batch may be allowed (a CSV batch's configured maximum is at most this), so
/// the highest line number there can be.
pub const BATCH_LINES_MAX_ALLOWED: usize = 1_000_000;
/// Lines written in one store transaction (a few set statements): large enough that a batch is a
/// handful of round trips, small enough that one transaction holds the merchant's balance row briefly.
pub const BATCH_LINES_PER_WRITE_MAX: usize = 1_000;
/// Keys looked up in one read.
pub const BATCH_KEYS_PER_READ_MAX: usize = 1_000;

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

/// A batch opened before its lines are written, chunk by chunk.
#[derive(Debug, Clone)]
pub struct OpenBatch {
    pub id: BatchId,
    /// `Replayed` when this batch (same key) was submitted before.
    pub replay: Replay,
}

/// A chunk of a batch's lines checked and ready to write: replays and refusals answered, the new
/// payouts built, each one's place among the answers.
struct PreparedLines {
    first_line_no: u32,
    at_ms: i64,
    external_ids: Vec<PayoutKey>,
    /// Each line's answer, known now or once its payout is written.
    results: Vec<Option<Result<(Payout, Replay), IntakeError>>>,
    places: Vec<usize>,
    news: Vec<NewPayout>,
}

impl PreparedLines {
    fn len(&self) -> usize {
        self.external_ids.len()
    }
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
            return Err(IntakeError::Invalid(format!(
                "external_id {} appears twice in the batch",
                dup.key
            )));
        }
        let key = key.unwrap_or_else(|| batch_key_of(requests.iter().map(|r| &r.key)));
        let open = self.open_batch(merchant, key, requests.len()).await?;
        let mut lines = Vec::with_capacity(requests.len());
        let mut requests = requests.into_iter();
        let mut chunk = || -> Vec<PayoutRequest> {
            requests.by_ref().take(BATCH_LINES_PER_WRITE_MAX).collect()
        };
        let mut prepared = self.prepare_lines(merchant, line_no(1)?, chunk()).await?;
        loop {
            let next = chunk();
            if next.is_empty() {
                lines.extend(self.write_lines(&open.id, prepared).await?);
                break;
            }
            let first_line_no = line_no(lines.len() + prepared.len() + 1)?;
            // The next chunk is read and checked while this one is written, so payoutd's work and
            // the database's overlap. None of its keys is this chunk's (external ids are distinct
            // across the batch), and the store decides every line again under its locks.
            let (written, following) = tokio::join!(
                self.write_lines(&open.id, prepared),
                self.prepare_lines(merchant, first_line_no, next)
            );
            lines.extend(written?);
            prepared = following?;
        }
        Ok(BatchOutcome { id: open.id, replay: open.replay, lines })
    }

    /// Opens a batch of `line_count` lines, or finds the merchant's batch with the same key. Its
    /// lines follow with `submit_batch_lines`; it is not completed before they all exist.
    pub async fn open_batch(
        &self,
        merchant: &MerchantId,
        key: String,
        line_count: usize,
    ) -> Result<OpenBatch, IntakeError> {
        if line_count == 0 {
            return Err(IntakeError::Invalid("a batch needs at least one line".into()));
        }
        let new = NewBatch {
            id: BatchId::new(),
            merchant_id: merchant.clone(),
            key,
            line_count,
            at_ms: self.now_ms(),
        };
        let id = self.store().open_batch(&new).await?;
        let replay = if id == new.id { Replay::Created } else { Replay::Replayed };
        Ok(OpenBatch { id, replay })
    }

    /// Lines `first_line_no..` of an opened batch (at most `BATCH_LINES_PER_WRITE_MAX`): each
    /// line's payout created or found, then the lines recorded with each one's error. The caller
    /// has checked that external ids are distinct across the whole batch.
    pub async fn submit_batch_lines(
        &self,
        merchant: &MerchantId,
        batch: &BatchId,
        first_line_no: u32,
        requests: Vec<PayoutRequest>,
    ) -> Result<Vec<BatchLineOutcome>, IntakeError> {
        if requests.len() > BATCH_LINES_PER_WRITE_MAX {
            return Err(IntakeError::Invalid(format!(
                "at most {BATCH_LINES_PER_WRITE_MAX} batch lines are written at once"
            )));
        }
        let prepared = self.prepare_lines(merchant, first_line_no, requests).await?;
        self.write_lines(batch, prepared).await
    }

    /// Each line as `create_payout` would answer it, up to its write: the existing keys read in a
    /// few reads (a replay is answered as it stands, before any other rule), every other line
    /// checked by the same rules as a single payout (`new_payout`).
    async fn prepare_lines(
        &self,
        merchant: &MerchantId,
        first_line_no: u32,
        requests: Vec<PayoutRequest>,
    ) -> Result<PreparedLines, IntakeError> {
        let keys: Vec<PayoutKey> = requests.iter().map(|r| r.key.clone()).collect();
        let mut existing: HashMap<PayoutKey, Payout> = HashMap::new();
        for chunk in keys.chunks(BATCH_KEYS_PER_READ_MAX) {
            existing.extend(
                self.store()
                    .payouts_by_keys(merchant, chunk)
                    .await?
                    .into_iter()
                    .map(|p| (p.key.clone(), p)),
            );
        }
        let at_ms = self.now_ms();
        let mut prepared = PreparedLines {
            first_line_no,
            at_ms,
            external_ids: Vec::with_capacity(requests.len()),
            results: Vec::with_capacity(requests.len()),
            places: Vec::new(),
            news: Vec::new(),
        };
        for request in requests {
            prepared.external_ids.push(request.key.clone());
            let result = match existing.remove(&request.key) {
                Some(payout) => Some(replay_of(payout, &request.fingerprint())),
                None => match self.new_payout(merchant, request, at_ms) {
                    Ok(new) => {
                        prepared.places.push(prepared.results.len());
                        prepared.news.push(new);
                        None
                    }
                    Err(e) => Some(Err(e)),
                },
            };
            prepared.results.push(result);
        }
        Ok(prepared)
    }

    /// The prepared lines' new payouts written as sets (each chunk one store transaction that
    /// decides its lines in order: a line the balance cannot cover is refused, the others go on),
    /// then the lines recorded in the batch with each one's error.
    async fn write_lines(
        &self,
        batch: &BatchId,
        prepared: PreparedLines,
    ) -> Result<Vec<BatchLineOutcome>, IntakeError> {
        let PreparedLines { first_line_no, at_ms, external_ids, mut results, places, news } =
            prepared;
        for (chunk, chunk_places) in
            news.chunks(BATCH_LINES_PER_WRITE_MAX).zip(places.chunks(BATCH_LINES_PER_WRITE_MAX))
        {
            let outcomes = self.store().insert_payouts(chunk).await?;
            assert_eq!(outcomes.len(), chunk.len(), "the store answers every line it was given");
            for ((place, new), outcome) in chunk_places.iter().zip(chunk).zip(outcomes) {
                results[*place] = Some(outcome_of(outcome, &new.payout.fingerprint, at_ms));
            }
        }
        let lines: Vec<BatchLineOutcome> = external_ids
            .into_iter()
            .zip(results)
            .map(|(external_id, result)| BatchLineOutcome {
                external_id,
                result: result.expect("every line is answered"),
            })
            .collect();
        let recorded: Vec<(PayoutKey, Option<String>)> = lines
            .iter()
            .map(|l| (l.external_id.clone(), l.result.as_ref().err().map(ToString::to_string)))
            .collect();
        let chunk = BatchLines { first_line_no, lines: &recorded };
        self.store().save_batch_lines(batch, chunk).await?;
        Ok(lines)
    }

    pub async fn batch(
        &self,
        merchant: &MerchantId,
        id: &BatchId,
        page: BatchPage,
    ) -> Result<BatchView, IntakeError> {
        if !(1..=BATCH_PAGE_LINES_MAX).contains(&page.limit) {
            return Err(IntakeError::Invalid(format!("limit must be 1-{BATCH_PAGE_LINES_MAX}")));
        }
        self.store().batch(merchant, id, page).await?.ok_or(IntakeError::NotFound)
    }
}

/// A line's number (from 1) as the store keeps it.
fn line_no(n: usize) -> Result<u32, IntakeError> {
    u32::try_from(n).map_err(|_| IntakeError::Invalid(format!("line {n} is beyond any batch")))
}
