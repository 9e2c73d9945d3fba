//! The `EvmLineStore` port on both databases from one macro: a hot wallet's row, its nonce floor, its cursors and its books are the same statements on PostgreSQL and SQLite; each store passes in only how a signing session opens (a row lock that skips a busy wallet, against SQLite's single writer slot).

/// The one statement reading a hot wallet's row; `$1` binds by number on both databases.
pub(crate) const SELECT_HOT_WALLET: &str =
    "SELECT id, chain, address, next_nonce FROM hot_wallets WHERE id = $1";

use payoutd_domain::ReferenceKey;
use payoutd_engine::StoreError;
use payoutd_engine::store::{PayoutTransition, TransitionOutcome};

/// The deployment's key for chain references, in `deployment_keys`.
pub(crate) const REFERENCE_KEY_NAME: &str = "chain_reference";
pub(crate) const INSERT_REFERENCE_KEY: &str =
    "INSERT INTO deployment_keys (name, key_hex) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING";
pub(crate) const SELECT_REFERENCE_KEY: &str = "SELECT key_hex FROM deployment_keys WHERE name = $1";

/// A new reference key, as stored: 32 random bytes in hex.
pub(crate) fn random_key_hex() -> Result<String, StoreError> {
    let mut made = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut made)
        .map_err(|_| StoreError::Unavailable("the system's random source failed".into()))?;
    Ok(hex::encode(made))
}

/// The stored key, parsed.
pub(crate) fn reference_key_of(stored: &str) -> Result<ReferenceKey, StoreError> {
    ReferenceKey::parse_hex(stored).ok_or_else(|| {
        StoreError::Corrupt(format!("deployment key {REFERENCE_KEY_NAME} is not 32 bytes of hex"))
    })
}

/// `$db` names the store's own modules (`cursors::$db`, `wallet_books::$db`); `{ .. }` holds the
/// store's `begin_signing`.
macro_rules! evm_line_port {
    ($store:ty, $db:ident, { $($own:tt)* }) => {
        #[async_trait::async_trait]
        impl payoutd_engine::EvmLineStore for $store {
            async fn ensure_hot_wallet(
                &self,
                chain_id: u64,
                address: &EvmAddress,
                start_nonce: u64,
            ) -> Result<HotWallet, StoreError> {
                let id = HotWallet::id_for(chain_id, address);
                {
                    let _writer = self.write_guard().await;
                    sqlx::query(
                        "INSERT INTO hot_wallets (id, chain, address, next_nonce) \
                         VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
                    )
                    .bind(&id)
                    .bind(crate::rows::chain_text(chain_id))
                    .bind(address.to_string())
                    .bind(crate::rows::to_db_int(start_nonce, "start nonce")?)
                    .execute(&self.pool)
                    .await
                    .map_err(crate::classify)?;
                }
                self.hot_wallet(&id).await?.ok_or_else(|| {
                    StoreError::Invariant(format!("hot wallet {id} vanished after insert"))
                })
            }

            async fn hot_wallet(&self, wallet_id: &str) -> Result<Option<HotWallet>, StoreError> {
                let row = sqlx::query(crate::evm_line_port::SELECT_HOT_WALLET)
                    .bind(wallet_id)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(crate::classify)?;
                row.as_ref().map(hot_wallet_row).transpose()
            }

            async fn raise_nonce_floor(
                &self,
                wallet_id: &str,
                floor: u64,
            ) -> Result<u64, StoreError> {
                // Waits behind an open signing session on the wallet (PostgreSQL's row lock,
                // SQLite's writer slot), then compares with what it committed.
                let _writer = self.write_guard().await;
                let next: Option<i64> = sqlx::query_scalar(
                    "UPDATE hot_wallets \
                     SET next_nonce = CASE WHEN next_nonce < $2 THEN $2 ELSE next_nonce END \
                     WHERE id = $1 RETURNING next_nonce",
                )
                .bind(wallet_id)
                .bind(crate::rows::to_db_int(floor, "nonce floor")?)
                .fetch_optional(&self.pool)
                .await
                .map_err(crate::classify)?;
                let next = next
                    .ok_or_else(|| StoreError::Invariant(format!("no hot wallet {wallet_id}")))?;
                u64::try_from(next)
                    .map_err(|e| StoreError::Corrupt(format!("hot wallet next_nonce: {e}")))
            }

            async fn reference_key(&self) -> Result<payoutd_domain::ReferenceKey, StoreError> {
                use crate::evm_line_port::{INSERT_REFERENCE_KEY, REFERENCE_KEY_NAME};
                let made = crate::evm_line_port::random_key_hex()?;
                {
                    // The first process to ask makes it; every other reads that one.
                    let _writer = self.write_guard().await;
                    sqlx::query(INSERT_REFERENCE_KEY)
                        .bind(REFERENCE_KEY_NAME)
                        .bind(made)
                        .execute(&self.pool)
                        .await
                        .map_err(crate::classify)?;
                }
                let stored: String = sqlx::query_scalar(crate::evm_line_port::SELECT_REFERENCE_KEY)
                    .bind(REFERENCE_KEY_NAME)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(crate::classify)?;
                crate::evm_line_port::reference_key_of(&stored)
            }

            async fn reconcile_cursor(&self, wallet_id: &str) -> Result<Option<u64>, StoreError> {
                crate::cursors::$db::block_cursor(self, wallet_id).await
            }

            async fn start_reconcile_cursor(
                &self,
                wallet_id: &str,
                block: u64,
            ) -> Result<u64, StoreError> {
                crate::cursors::$db::start_block_cursor(self, wallet_id, block).await
            }

            async fn advance_reconcile_cursor(
                &self,
                wallet_id: &str,
                from: u64,
                to: u64,
            ) -> Result<bool, StoreError> {
                crate::cursors::$db::advance_block_cursor(self, wallet_id, from, to).await
            }

            async fn wallet_books(
                &self,
                wallet_id: &str,
                nonce: u64,
            ) -> Result<payoutd_engine::pipeline_store::WalletBooks, StoreError> {
                crate::wallet_books::$db::wallet_books(self, wallet_id, nonce).await
            }

            $($own)*
        }
    };
}

pub(crate) use evm_line_port;

/// Moves a hot wallet's counter from `$start` to `$next` inside a signing session's open
/// transaction `$tx`; a counter that is no longer `$start` means the session's lock did not hold.
macro_rules! advance_counter {
    ($tx:expr, $wallet_id:expr, $start:expr, $next:expr) => {{
        let updated =
            sqlx::query("UPDATE hot_wallets SET next_nonce = $2 WHERE id = $1 AND next_nonce = $3")
                .bind($wallet_id)
                .bind(crate::rows::to_db_int($next, "next_nonce")?)
                .bind(crate::rows::to_db_int($start, "next_nonce")?)
                .execute(&mut *$tx)
                .await
                .map_err(crate::classify)?;
        if updated.rows_affected() != 1 {
            return Err(StoreError::Invariant(format!(
                "hot wallet {} counter moved under its signing lock",
                $wallet_id
            )));
        }
    }};
}
pub(crate) use advance_counter;

/// A signing session's own transition: stale means the session's claim did not hold, which its
/// locks rule out, so it is an invariant breach, never a retry.
pub(crate) fn session_transition(
    outcome: TransitionOutcome,
    transition: &PayoutTransition,
) -> Result<(), StoreError> {
    match outcome {
        TransitionOutcome::Applied(_) => Ok(()),
        TransitionOutcome::Stale => Err(StoreError::Invariant(format!(
            "payout {} is not {} at version {}",
            transition.payout_id, transition.from, transition.from_version
        ))),
    }
}
