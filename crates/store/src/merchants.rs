//! Merchants and their API keys on both databases: one text per statement, expanded once per store; the stores differ only in how a write transaction begins (SQLite's one writer).

use payoutd_domain::{ApiKeyHash, ApiKeyId, MerchantId};
use payoutd_engine::StoreError;
use payoutd_engine::store::ApiKeyInfo;
use sqlx::Row;

use crate::{classify, rows, shared_sql};

macro_rules! merchant_store {
    ($store:ty) => {
        pub(crate) async fn create_merchant(
            store: &$store,
            id: &MerchantId,
            name: &str,
            key_hash: &ApiKeyHash,
            at_ms: i64,
        ) -> Result<(), StoreError> {
            let (_guard, mut tx) = store.write_tx().await?;
            sqlx::query(shared_sql::INSERT_MERCHANT)
                .bind(id.as_str())
                .bind(name)
                .bind(at_ms)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
            sqlx::query(shared_sql::INSERT_API_KEY)
                .bind(key_hash.as_str())
                .bind(id.as_str())
                .bind(at_ms)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
            tx.commit().await.map_err(classify)
        }

        pub(crate) async fn merchant_by_key_hash(
            store: &$store,
            key_hash: &ApiKeyHash,
        ) -> Result<Option<MerchantId>, StoreError> {
            let id: Option<String> = sqlx::query_scalar(shared_sql::MERCHANT_BY_KEY_HASH)
                .bind(key_hash.as_str())
                .fetch_optional(&store.pool)
                .await
                .map_err(classify)?;
            id.map(|s| MerchantId::parse(&s).map_err(|e| StoreError::Corrupt(e.to_string())))
                .transpose()
        }

        /// False when the merchant does not exist (nothing written).
        pub(crate) async fn add_api_key(
            store: &$store,
            merchant: &MerchantId,
            key_hash: &ApiKeyHash,
            at_ms: i64,
        ) -> Result<bool, StoreError> {
            let (_guard, mut tx) = store.write_tx().await?;
            let known: i64 = sqlx::query_scalar(shared_sql::MERCHANT_EXISTS)
                .bind(merchant.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(classify)?;
            if known == 0 {
                return Ok(false);
            }
            sqlx::query(shared_sql::INSERT_API_KEY)
                .bind(key_hash.as_str())
                .bind(merchant.as_str())
                .bind(at_ms)
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
            tx.commit().await.map_err(classify)?;
            Ok(true)
        }

        pub(crate) async fn revoke_api_key(
            store: &$store,
            id: &ApiKeyId,
            at_ms: i64,
        ) -> Result<bool, StoreError> {
            let (_guard, mut tx) = store.write_tx().await?;
            let revoked = sqlx::query(shared_sql::REVOKE_API_KEY)
                .bind(at_ms)
                .bind(id.as_str())
                .execute(&mut *tx)
                .await
                .map_err(classify)?;
            tx.commit().await.map_err(classify)?;
            Ok(revoked.rows_affected() == 1)
        }

        pub(crate) async fn api_keys(
            store: &$store,
            merchant: &MerchantId,
        ) -> Result<Vec<ApiKeyInfo>, StoreError> {
            let rows = sqlx::query(shared_sql::SELECT_API_KEYS)
                .bind(merchant.as_str())
                .fetch_all(&store.pool)
                .await
                .map_err(classify)?;
            rows.iter()
                .map(|r| {
                    rows::api_key_info(
                        r.try_get("id").map_err(classify)?,
                        r.try_get("merchant_id").map_err(classify)?,
                        r.try_get("created_at_ms").map_err(classify)?,
                        r.try_get("revoked_at_ms").map_err(classify)?,
                    )
                })
                .collect()
        }
    };
}

pub(crate) mod pg {
    use super::*;
    use crate::PgStore;
    merchant_store!(PgStore);
}

pub(crate) mod sqlite {
    use super::*;
    use crate::SqliteStore;
    merchant_store!(SqliteStore);
}
