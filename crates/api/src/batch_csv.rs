//! CSV payout batches, streamed: the upload spooled to an unlinked file and every line checked, then
//! written and answered a chunk of lines at a time, so a payroll of 100,000 lines holds one chunk in
//! memory, never the whole batch.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use payoutd_domain::{BatchKeyDigest, MerchantId, PayoutKey, PayoutRequest};
use payoutd_engine::Replay;
use payoutd_engine::batches::{BATCH_LINES_PER_WRITE_MAX, OpenBatch};

use crate::AppState;
use crate::batch_api::{CSV_HEADER, LineChecker, RawLine, Tally};
use crate::idempotency;
use crate::problem::Problem;

/// Largest CSV upload: 100,000 lines at their longest (a 128-character key, a 78-digit amount, a
/// long asset code and destination) fit, with room.
pub const CSV_BATCH_BODY_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Upload bytes gathered before one write to the spool file.
const SPOOL_WRITE_BYTES: usize = 256 * 1024;
/// Answer chunks (one per chunk of lines written) queued for a slow client; writing waits beyond.
const ANSWER_CHUNKS_QUEUED_MAX: usize = 2;
/// How long the lines may take to be written and answered once the answer has begun.
const ANSWER_TIMEOUT_MS: u64 = crate::BATCH_REQUEST_TIMEOUT_MS;

/// What an answer chunk carries: bytes, or the error that cuts the answer short.
type AnswerChunk = Result<Bytes, std::io::Error>;

/// The CSV form's lines, record by record, after its header is checked; a record that is not four
/// fields is a bad line.
pub(crate) struct CsvLines<R: Read> {
    records: csv::StringRecordsIntoIter<R>,
}

impl<R: Read> CsvLines<R> {
    pub(crate) fn new(source: R) -> Result<Self, Problem> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(source);
        let header = reader.headers().map_err(|e| Problem::invalid(format!("CSV header: {e}")))?;
        if header.iter().ne(CSV_HEADER) {
            return Err(Problem::invalid(format!(
                "the CSV header must be exactly `{}`",
                CSV_HEADER.join(",")
            )));
        }
        Ok(CsvLines { records: reader.into_records() })
    }
}

impl<R: Read> Iterator for CsvLines<R> {
    type Item = Result<RawLine, String>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(match self.records.next()? {
            Ok(r) if r.len() == CSV_HEADER.len() => Ok(RawLine {
                external_id: r[0].to_owned(),
                asset: r[1].to_owned(),
                amount: serde_json::Value::String(r[2].to_owned()),
                destination: r[3].to_owned(),
                metadata: None,
            }),
            Ok(r) => Err(format!("expected {} fields, found {}", CSV_HEADER.len(), r.len())),
            Err(e) => Err(format!("not CSV: {e}")),
        })
    }
}

/// `POST /v1/payout_batches` with `text/csv`: spooled, checked whole (any bad line refuses the
/// batch and nothing is written), then streamed: each chunk of lines written, then answered.
pub(crate) async fn create_csv_batch(
    state: AppState,
    merchant: MerchantId,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    let key = idempotency::collect(headers, None)?;
    if let Some(k) = &key {
        PayoutKey::parse(k).map_err(|e| idempotency::key_problem(e.to_string()))?;
    }
    // Held until the batch's answer is written (or refused): the spool file lives as long.
    let upload = state.csv_uploads.begin(&merchant)?;
    let spooled = spool(body).await?;
    let checking = state.clone();
    let lines_max = state.csv_batch_lines_max;
    let (spooled, checked) = blocking(move || {
        let mut spooled = spooled;
        let checked = check(&checking, &mut spooled, lines_max);
        (spooled, checked)
    })
    .await?;
    let (line_count, digest) = checked?;
    let key = key.unwrap_or_else(|| digest.finish());
    let open = state.engine.open_batch(&merchant, key, line_count).await?;
    let location = format!("/v1/payout_batches/{}", open.id);
    let (sender, receiver) =
        futures::channel::mpsc::channel::<AnswerChunk>(ANSWER_CHUNKS_QUEUED_MAX);
    let answer = Answer { state, merchant, open: open.clone(), sender, _upload: upload };
    tokio::spawn(answer.write_within_deadline(CsvLines::new(BufReader::new(spooled))?));
    let mut response = Response::new(Body::from_stream(receiver));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    match open.replay {
        Replay::Created => {
            *response.status_mut() = StatusCode::CREATED;
            if let Ok(v) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(header::LOCATION, v);
            }
        }
        Replay::Replayed => {
            response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
        }
    }
    Ok(response)
}

/// The upload written to a file that is unlinked as soon as it is made: only this request holds it,
/// and nothing is left behind whatever becomes of the process.
async fn spool(body: Body) -> Result<File, Problem> {
    let path = std::env::temp_dir().join(format!("payoutd-batch-{}.csv", uuid::Uuid::new_v4()));
    let mut file = blocking(move || {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        std::fs::remove_file(&path)?;
        Ok::<File, std::io::Error>(file)
    })
    .await?
    .map_err(spool_failed)?;
    let (mut stream, mut pending, mut total_bytes) = (body.into_data_stream(), Vec::new(), 0u64);
    loop {
        let next = stream.next().await;
        if let Some(chunk) = &next {
            let chunk = chunk
                .as_ref()
                .map_err(|e| Problem::invalid(format!("the upload broke off: {e}")))?;
            total_bytes += chunk.len() as u64;
            if total_bytes > CSV_BATCH_BODY_MAX_BYTES {
                return Err(too_large());
            }
            pending.extend_from_slice(chunk);
            if pending.len() < SPOOL_WRITE_BYTES {
                continue;
            }
        }
        let bytes = std::mem::take(&mut pending);
        file =
            blocking(move || file.write_all(&bytes).map(|()| file)).await?.map_err(spool_failed)?;
        if next.is_none() {
            return Ok(file);
        }
    }
}

/// Every line checked from the start of the file; the line count and the batch's digest if all
/// are good, else every bad line. The file is left at its start for the writing pass.
fn check(
    state: &AppState,
    spooled: &mut File,
    lines_max: usize,
) -> Result<(usize, BatchKeyDigest), Problem> {
    spooled.seek(SeekFrom::Start(0)).map_err(spool_failed)?;
    let mut checker = LineChecker::new(state);
    let mut digest = BatchKeyDigest::default();
    for (i, line) in CsvLines::new(BufReader::new(&mut *spooled))?.enumerate() {
        if i == lines_max {
            return Err(crate::batch_api::too_many(lines_max));
        }
        if let Some(request) = checker.check(line) {
            digest.push(&request.key);
        }
    }
    let line_count = checker.finish()?;
    spooled.seek(SeekFrom::Start(0)).map_err(spool_failed)?;
    Ok((line_count, digest))
}

/// The writing pass: the batch's lines written a chunk at a time, each chunk answered as soon as
/// it is written.
struct Answer {
    state: AppState,
    merchant: MerchantId,
    open: OpenBatch,
    sender: futures::channel::mpsc::Sender<AnswerChunk>,
    /// The upload's place among those under way, given back when the answer ends.
    _upload: crate::csv_uploads::CsvUpload,
}

/// Why the answer stopped before its end; the client sees the body cut short and resubmits (the
/// lines written stay written, and a resubmission creates only the rest).
#[derive(Debug, thiserror::Error)]
enum Cut {
    #[error("the client went away")]
    ClientGone,
    #[error("{0}")]
    Failed(String),
}

impl Answer {
    async fn write_within_deadline(mut self, lines: CsvLines<BufReader<File>>) {
        let deadline = std::time::Duration::from_millis(ANSWER_TIMEOUT_MS);
        let outcome = match tokio::time::timeout(deadline, self.write(lines)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Cut::Failed(format!("not written within {ANSWER_TIMEOUT_MS} ms"))),
        };
        match outcome {
            Ok(()) | Err(Cut::ClientGone) => {}
            Err(Cut::Failed(why)) => {
                tracing::warn!(batch = %self.open.id, %why, "a CSV batch's answer was cut short");
                let _ = self.sender.send(Err(std::io::Error::other(why))).await;
            }
        }
    }

    async fn write(&mut self, mut lines: CsvLines<BufReader<File>>) -> Result<(), Cut> {
        let head = format!(r#"{{"id":"{}","object":"payout_batch","lines":["#, self.open.id);
        self.send(head.into_bytes()).await?;
        let (mut tally, mut written) = (Tally::default(), 0usize);
        loop {
            let (rest, chunk) = blocking(move || {
                let chunk: Vec<_> = lines.by_ref().take(BATCH_LINES_PER_WRITE_MAX).collect();
                (lines, chunk)
            })
            .await
            .map_err(|p| Cut::Failed(p.detail))?;
            lines = rest;
            if chunk.is_empty() {
                break;
            }
            let requests = self.requests(chunk)?;
            let first = written + 1;
            let first_line_no = u32::try_from(first).map_err(|e| Cut::Failed(e.to_string()))?;
            let outcomes = self
                .state
                .engine
                .submit_batch_lines(&self.merchant, &self.open.id, first_line_no, requests)
                .await
                .map_err(|e| Cut::Failed(e.to_string()))?;
            written += outcomes.len();
            let mut text = Vec::new();
            for (n, outcome) in (first..).zip(outcomes) {
                if n > 1 {
                    text.push(b',');
                }
                serde_json::to_writer(&mut text, &tally.line(n, outcome))
                    .map_err(|e| Cut::Failed(e.to_string()))?;
            }
            self.send(text).await?;
        }
        let tail = format!(
            r#"],"created":{},"existing":{},"failed":{}}}"#,
            tally.created, tally.existing, tally.failed
        );
        self.send(tail.into_bytes()).await
    }

    /// The chunk's lines as requests, as the checking pass saw them.
    fn requests(&self, chunk: Vec<Result<RawLine, String>>) -> Result<Vec<PayoutRequest>, Cut> {
        chunk
            .into_iter()
            .map(|line| {
                line.and_then(|l| crate::batch_api::request(&self.state, l)).map_err(|why| {
                    Cut::Failed(format!("a line checked before reads differently: {why}"))
                })
            })
            .collect()
    }

    async fn send(&mut self, bytes: Vec<u8>) -> Result<(), Cut> {
        self.sender.send(Ok(Bytes::from(bytes))).await.map_err(|_| Cut::ClientGone)
    }
}

/// File work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Problem> {
    tokio::task::spawn_blocking(work).await.map_err(|e| {
        tracing::error!(error = %e, "a CSV batch's file work stopped");
        Problem::internal()
    })
}

fn spool_failed(e: std::io::Error) -> Problem {
    tracing::error!(error = %e, "a CSV batch could not be spooled");
    Problem::internal()
}

fn too_large() -> Problem {
    Problem::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
        "The body is too large",
        format!("CSV batch bodies are limited to {CSV_BATCH_BODY_MAX_BYTES} bytes"),
    )
}
