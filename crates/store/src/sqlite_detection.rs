//! The detection port on SQLite (`detection.rs`): a list of hashes is bound as one JSON array.

use super::*;
use payoutd_engine::pipeline_store::DetectionStore;

fn json_list(hashes: &[TxRef]) -> String {
    json_array(hashes.iter().map(TxRef::as_str))
}

crate::detection::detection_store!(
    SqliteStore,
    sqlite,
    "IN (SELECT value FROM json_each($1))",
    json_list
);
