//! The detection port on PostgreSQL (`detection.rs`): a list of hashes is bound as an array.

use super::*;
use payoutd_engine::pipeline_store::DetectionStore;

fn text_array(hashes: &[TxRef]) -> Vec<&str> {
    hashes.iter().map(TxRef::as_str).collect()
}

crate::detection::detection_store!(PgStore, pg, "= ANY($1)", text_array);
