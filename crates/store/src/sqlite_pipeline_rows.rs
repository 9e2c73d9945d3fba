//! SQLite rows of the pipeline's tables (hot wallets, attempts, their transactions) read into the store's row types.

use payoutd_domain::HotWallet;
use payoutd_engine::StoreError;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::classify;
use crate::rows::{self, AttemptRow, AttemptTxRow, HotWalletRow};

pub(super) fn hot_wallet_row(row: &SqliteRow) -> Result<HotWallet, StoreError> {
    HotWalletRow {
        id: row.try_get("id").map_err(classify)?,
        chain: row.try_get("chain").map_err(classify)?,
        address: row.try_get("address").map_err(classify)?,
        next_nonce: row.try_get("next_nonce").map_err(classify)?,
    }
    .into_domain()
}

pub(super) fn attempt_row(row: &SqliteRow) -> Result<AttemptRow, StoreError> {
    Ok(AttemptRow {
        id: row.try_get("a_id").map_err(classify)?,
        payout_id: row.try_get("a_payout_id").map_err(classify)?,
        attempt_no: row.try_get("a_attempt_no").map_err(classify)?,
        status: row.try_get("a_status").map_err(classify)?,
        slot: rows::SlotColumns {
            rail: row.try_get("a_rail").map_err(classify)?,
            hot_wallet_id: row.try_get("a_hot_wallet_id").map_err(classify)?,
            nonce: row.try_get("a_nonce").map_err(classify)?,
            provider: row.try_get("a_provider").map_err(classify)?,
            provider_key: row.try_get("a_provider_key").map_err(classify)?,
            provider_ref: row.try_get("a_provider_ref").map_err(classify)?,
            last_valid_block_height: row.try_get("a_last_valid_block_height").map_err(classify)?,
            nonce_account: row.try_get("a_nonce_account").map_err(classify)?,
            nonce_value: row.try_get("a_nonce_value").map_err(classify)?,
            signed_at_block_height: row.try_get("a_signed_at_block_height").map_err(classify)?,
        },
        mined_block: row.try_get("a_mined_block").map_err(classify)?,
        mined_hash: row.try_get("a_mined_hash").map_err(classify)?,
        last_sent_at_ms: row.try_get("a_last_sent_at_ms").map_err(classify)?,
        created_at_ms: row.try_get("a_created_at_ms").map_err(classify)?,
        updated_at_ms: row.try_get("a_updated_at_ms").map_err(classify)?,
    })
}

pub(super) fn attempt_tx_row(row: &SqliteRow) -> Result<AttemptTxRow, StoreError> {
    Ok(AttemptTxRow {
        attempt_id: row.try_get("attempt_id").map_err(classify)?,
        hash: row.try_get("tx_hash").map_err(classify)?,
        kind: row.try_get("kind").map_err(classify)?,
        raw: row.try_get("raw").map_err(classify)?,
        max_fee_per_gas: row.try_get("max_fee_per_gas").map_err(classify)?,
        max_priority_fee_per_gas: row.try_get("max_priority_fee_per_gas").map_err(classify)?,
        created_at_ms: row.try_get("created_at_ms").map_err(classify)?,
    })
}
