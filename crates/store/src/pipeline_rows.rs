//! The pipeline's rows (hot wallets, attempts, their transactions) read into the store's row types: one reader for both databases, instantiated per row type.

/// Defines `hot_wallet_row`, `attempt_row` and `attempt_tx_row` over `$row` (a `PgRow` or a
/// `SqliteRow`): the same columns, read the same way, on both databases.
macro_rules! pipeline_row_readers {
    ($row:ty) => {
        use sqlx::Row;

        pub(super) fn hot_wallet_row(
            row: &$row,
        ) -> Result<payoutd_domain::HotWallet, payoutd_engine::StoreError> {
            $crate::rows::HotWalletRow {
                id: row.try_get("id").map_err($crate::classify)?,
                chain: row.try_get("chain").map_err($crate::classify)?,
                address: row.try_get("address").map_err($crate::classify)?,
                next_nonce: row.try_get("next_nonce").map_err($crate::classify)?,
            }
            .into_domain()
        }

        pub(super) fn attempt_row(
            row: &$row,
        ) -> Result<$crate::rows::AttemptRow, payoutd_engine::StoreError> {
            Ok($crate::rows::AttemptRow {
                id: row.try_get("a_id").map_err($crate::classify)?,
                payout_id: row.try_get("a_payout_id").map_err($crate::classify)?,
                attempt_no: row.try_get("a_attempt_no").map_err($crate::classify)?,
                status: row.try_get("a_status").map_err($crate::classify)?,
                slot: $crate::rows::SlotColumns {
                    rail: row.try_get("a_rail").map_err($crate::classify)?,
                    hot_wallet_id: row.try_get("a_hot_wallet_id").map_err($crate::classify)?,
                    nonce: row.try_get("a_nonce").map_err($crate::classify)?,
                    provider: row.try_get("a_provider").map_err($crate::classify)?,
                    provider_key: row.try_get("a_provider_key").map_err($crate::classify)?,
                    provider_ref: row.try_get("a_provider_ref").map_err($crate::classify)?,
                    provider_key_spent_at_ms: row
                        .try_get("a_provider_key_spent_at_ms")
                        .map_err($crate::classify)?,
                    provider_creates_for_ms: row
                        .try_get("a_provider_creates_for_ms")
                        .map_err($crate::classify)?,
                    last_valid_block_height: row
                        .try_get("a_last_valid_block_height")
                        .map_err($crate::classify)?,
                    nonce_account: row.try_get("a_nonce_account").map_err($crate::classify)?,
                    nonce_value: row.try_get("a_nonce_value").map_err($crate::classify)?,
                    signed_at_block_height: row
                        .try_get("a_signed_at_block_height")
                        .map_err($crate::classify)?,
                },
                mined_block: row.try_get("a_mined_block").map_err($crate::classify)?,
                mined_hash: row.try_get("a_mined_hash").map_err($crate::classify)?,
                last_sent_at_ms: row.try_get("a_last_sent_at_ms").map_err($crate::classify)?,
                created_at_ms: row.try_get("a_created_at_ms").map_err($crate::classify)?,
                updated_at_ms: row.try_get("a_updated_at_ms").map_err($crate::classify)?,
            })
        }

        pub(super) fn attempt_tx_row(
            row: &$row,
        ) -> Result<$crate::rows::AttemptTxRow, payoutd_engine::StoreError> {
            Ok($crate::rows::AttemptTxRow {
                attempt_id: row.try_get("attempt_id").map_err($crate::classify)?,
                hash: row.try_get("tx_hash").map_err($crate::classify)?,
                kind: row.try_get("kind").map_err($crate::classify)?,
                raw: row.try_get("raw").map_err($crate::classify)?,
                max_fee_per_gas: row.try_get("max_fee_per_gas").map_err($crate::classify)?,
                max_priority_fee_per_gas: row
                    .try_get("max_priority_fee_per_gas")
                    .map_err($crate::classify)?,
                created_at_ms: row.try_get("created_at_ms").map_err($crate::classify)?,
            })
        }
    };
}

pub(crate) use pipeline_row_readers;
