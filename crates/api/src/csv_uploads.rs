//! CSV uploads under way: a few per process and one per merchant, so that no merchant fills the disk with spooled uploads or holds every blocking thread checking them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use payoutd_domain::MerchantId;

use crate::problem::Problem;

/// CSV uploads one API process spools, checks and writes at once: at most this many spool files
/// of `CSV_BATCH_BODY_MAX_BYTES` on its disk.
pub const CSV_UPLOADS_AT_ONCE_MAX: usize = 4;
/// CSV uploads one merchant may have under way at once: a payroll is one file, sent once.
pub const CSV_UPLOADS_PER_MERCHANT_MAX: usize = 1;
/// When a refused upload may be sent again: a batch of 100,000 lines takes seconds.
const RETRY_AFTER_S: u64 = 5;

/// The uploads under way in this process, per merchant.
#[derive(Debug, Default)]
pub struct CsvUploads {
    under_way: Mutex<HashMap<MerchantId, usize>>,
}

/// One upload's place, given back when it is dropped (its batch written, refused or cut short).
#[derive(Debug)]
pub struct CsvUpload {
    uploads: Arc<CsvUploads>,
    merchant: MerchantId,
}

impl CsvUploads {
    /// A place for `merchant`'s upload, or 429 `rate-limited` while the merchant or the process
    /// has as many under way as it may.
    pub fn begin(self: &Arc<Self>, merchant: &MerchantId) -> Result<CsvUpload, Problem> {
        let mut under_way = self.under_way.lock().expect("uploads lock");
        let total: usize = under_way.values().sum();
        let mine = under_way.get(merchant).copied().unwrap_or(0);
        if mine >= CSV_UPLOADS_PER_MERCHANT_MAX {
            return Err(refusal(format!(
                "this merchant has {mine} CSV batch upload(s) under way, the most it may; send this one once it is answered"
            )));
        }
        if total >= CSV_UPLOADS_AT_ONCE_MAX {
            return Err(refusal(format!(
                "{total} CSV batch uploads are under way, the most this server takes at once"
            )));
        }
        *under_way.entry(merchant.clone()).or_insert(0) += 1;
        Ok(CsvUpload { uploads: Arc::clone(self), merchant: merchant.clone() })
    }
}

impl Drop for CsvUpload {
    fn drop(&mut self) {
        let mut under_way = self.uploads.under_way.lock().expect("uploads lock");
        if let Some(n) = under_way.get_mut(&self.merchant) {
            *n -= 1;
            if *n == 0 {
                under_way.remove(&self.merchant);
            }
        }
    }
}

fn refusal(detail: String) -> Problem {
    let mut problem =
        Problem::new(StatusCode::TOO_MANY_REQUESTS, "rate-limited", "Too many uploads", detail);
    problem.retry_after_s = Some(RETRY_AFTER_S);
    problem
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_upload_per_merchant_and_a_few_per_process_each_given_back_when_dropped() {
        let uploads = Arc::new(CsvUploads::default());
        let merchants: Vec<MerchantId> =
            (0..=CSV_UPLOADS_AT_ONCE_MAX).map(|_| MerchantId::new()).collect();
        let first = uploads.begin(&merchants[0]).unwrap();
        assert!(uploads.begin(&merchants[0]).is_err(), "one per merchant");
        let mut others: Vec<CsvUpload> = merchants[1..CSV_UPLOADS_AT_ONCE_MAX]
            .iter()
            .map(|m| uploads.begin(m).unwrap())
            .collect();
        let last = &merchants[CSV_UPLOADS_AT_ONCE_MAX];
        assert!(uploads.begin(last).is_err(), "a few per process");
        others.pop();
        let again = uploads.begin(last).unwrap();
        drop(first);
        drop(again);
        drop(others);
        assert!(uploads.under_way.lock().unwrap().is_empty(), "every place given back");
        uploads.begin(&merchants[0]).unwrap();
    }
}
