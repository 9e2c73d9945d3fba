//! An attempt's rows (its slot's columns, its transactions) and their one conversion into domain values, with the checks every store makes before it writes an attempt.

use payoutd_domain::{Payout, PayoutId};
use payoutd_engine::StoreError;

use super::{corrupt, fee, from_db_int, to_db_int};

pub(crate) struct AttemptRow {
    pub id: String,
    pub payout_id: String,
    pub attempt_no: i32,
    pub status: String,
    pub slot: SlotColumns,
    pub mined_block: Option<i64>,
    pub mined_hash: Option<String>,
    pub last_sent_at_ms: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl AttemptRow {
    /// `txs` oldest first; an attempt is stored with its original transaction, so none is corruption.
    pub(crate) fn into_domain(
        self,
        txs: Vec<payoutd_domain::AttemptTx>,
    ) -> Result<payoutd_domain::Attempt, StoreError> {
        if txs.is_empty() {
            return Err(corrupt("attempt", format!("{} has no stored transaction", self.id)));
        }
        let mined = match (self.mined_block, self.mined_hash) {
            (Some(block), Some(hash)) => Some((from_db_int(block, "mined block")?, tx_ref(&hash)?)),
            (None, None) => None,
            _ => return Err(corrupt("attempt", format!("{} has half a mined receipt", self.id))),
        };
        Ok(payoutd_domain::Attempt {
            id: payoutd_domain::AttemptId::parse(&self.id).map_err(|e| corrupt("attempt id", e))?,
            payout_id: PayoutId::parse(&self.payout_id).map_err(|e| corrupt("payout id", e))?,
            attempt_no: u32::try_from(self.attempt_no).map_err(|e| corrupt("attempt_no", e))?,
            status: payoutd_domain::AttemptStatus::parse(&self.status)
                .map_err(|e| corrupt("attempt status", e))?,
            slot: self.slot.into_domain()?,
            txs,
            mined,
            last_sent_at_ms: self.last_sent_at_ms,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
        })
    }
}

pub(crate) fn payout_id(text: &str) -> Result<PayoutId, StoreError> {
    PayoutId::parse(text).map_err(|e| corrupt("payout id", e))
}

pub(crate) fn tx_ref(text: &str) -> Result<payoutd_domain::TxRef, StoreError> {
    payoutd_domain::TxRef::parse(text).map_err(|e| corrupt("transaction reference", e))
}

/// An attempt's slot as columns: what `attempts` stores of each kind, and nothing of the others.
#[derive(Default)]
pub(crate) struct SlotColumns {
    pub rail: String,
    pub hot_wallet_id: Option<String>,
    pub nonce: Option<i64>,
    pub provider: Option<String>,
    pub provider_key: Option<String>,
    pub provider_ref: Option<String>,
    pub provider_key_spent_at_ms: Option<i64>,
    pub provider_creates_for_ms: Option<i64>,
    pub last_valid_block_height: Option<i64>,
    pub nonce_account: Option<String>,
    pub nonce_value: Option<String>,
    pub signed_at_block_height: Option<i64>,
}

impl SlotColumns {
    pub(crate) fn of(slot: &payoutd_domain::AttemptSlot) -> Result<SlotColumns, StoreError> {
        use payoutd_domain::{AttemptSlot, SolanaExpiry};
        let rail = slot.rail().to_owned();
        Ok(match slot {
            AttemptSlot::Evm(evm) => SlotColumns {
                rail,
                hot_wallet_id: Some(evm.wallet_id.clone()),
                nonce: Some(to_db_int(evm.nonce, "nonce")?),
                ..SlotColumns::default()
            },
            AttemptSlot::Solana { fee_payer, expiry } => {
                let mut columns = SlotColumns {
                    rail,
                    hot_wallet_id: Some(fee_payer.clone()),
                    ..SlotColumns::default()
                };
                match expiry {
                    SolanaExpiry::LastValidBlockHeight(height) => {
                        columns.last_valid_block_height = Some(to_db_int(*height, "block height")?)
                    }
                    SolanaExpiry::DurableNonce { account, value, signed_at_block_height } => {
                        columns.nonce_account = Some(account.clone());
                        columns.nonce_value = Some(value.clone()).filter(|v| !v.is_empty());
                        columns.signed_at_block_height =
                            Some(to_db_int(*signed_at_block_height, "block height")?);
                    }
                }
                columns
            }
            AttemptSlot::Provider {
                provider,
                idempotency_key,
                reference,
                wallet,
                key_spent_at_ms,
                creates_for_ms,
            } => SlotColumns {
                rail,
                hot_wallet_id: wallet.clone(),
                provider: Some(provider.clone()),
                provider_key: Some(idempotency_key.clone()),
                provider_ref: reference.as_ref().map(|r| r.as_str().to_owned()),
                provider_key_spent_at_ms: *key_spent_at_ms,
                provider_creates_for_ms: *creates_for_ms,
                ..SlotColumns::default()
            },
        })
    }

    fn into_domain(self) -> Result<payoutd_domain::AttemptSlot, StoreError> {
        use payoutd_domain::{
            AttemptSlot, EvmSlot, SolanaExpiry,
            attempt::{RAIL_EVM, RAIL_PROVIDER, RAIL_SOLANA},
        };
        let missing =
            |what: &str| corrupt("attempt slot", format!("a {} attempt without {what}", self.rail));
        match self.rail.as_str() {
            RAIL_EVM => Ok(AttemptSlot::Evm(EvmSlot {
                wallet_id: self.hot_wallet_id.clone().ok_or_else(|| missing("hot wallet"))?,
                nonce: from_db_int(self.nonce.ok_or_else(|| missing("nonce"))?, "nonce")?,
            })),
            RAIL_SOLANA => {
                let expiry = match (self.last_valid_block_height, self.nonce_account.clone()) {
                    (Some(height), None) => {
                        SolanaExpiry::LastValidBlockHeight(from_db_int(height, "block height")?)
                    }
                    // Attempts signed before the value was stored hold NULLs: the rail reads the
                    // value from their bytes, and their node history must reach genesis.
                    (None, Some(account)) => SolanaExpiry::DurableNonce {
                        account,
                        value: self.nonce_value.clone().unwrap_or_default(),
                        signed_at_block_height: self
                            .signed_at_block_height
                            .map(|h| from_db_int(h, "block height"))
                            .transpose()?
                            .unwrap_or(0),
                    },
                    _ => {
                        return Err(missing(
                            "exactly one of a last valid block height and a nonce account",
                        ));
                    }
                };
                Ok(AttemptSlot::Solana {
                    fee_payer: self.hot_wallet_id.clone().ok_or_else(|| missing("fee payer"))?,
                    expiry,
                })
            }
            RAIL_PROVIDER => Ok(AttemptSlot::Provider {
                provider: self.provider.clone().ok_or_else(|| missing("provider"))?,
                idempotency_key: self
                    .provider_key
                    .clone()
                    .ok_or_else(|| missing("idempotency key"))?,
                reference: self.provider_ref.as_deref().map(tx_ref).transpose()?,
                wallet: self.hot_wallet_id.clone(),
                key_spent_at_ms: self.provider_key_spent_at_ms,
                creates_for_ms: self.provider_creates_for_ms,
            }),
            other => Err(corrupt("attempt rail", other)),
        }
    }
}

pub(crate) struct AttemptTxRow {
    pub attempt_id: String,
    pub hash: String,
    pub kind: String,
    pub raw: Vec<u8>,
    pub max_fee_per_gas: Option<String>,
    pub max_priority_fee_per_gas: Option<String>,
    pub created_at_ms: i64,
}

impl AttemptTxRow {
    pub(crate) fn into_domain(self) -> Result<(String, payoutd_domain::AttemptTx), StoreError> {
        let tx = payoutd_domain::AttemptTx {
            hash: tx_ref(&self.hash)?,
            kind: payoutd_domain::TxKind::parse(&self.kind)
                .ok_or_else(|| corrupt("transaction kind", &self.kind))?,
            raw: self.raw,
            fees: match (self.max_fee_per_gas, self.max_priority_fee_per_gas) {
                (Some(max), Some(priority)) => Some(payoutd_domain::FeeBid {
                    max_fee_per_gas: fee(Some(max))?,
                    max_priority_fee_per_gas: fee(Some(priority))?,
                }),
                (None, None) => None,
                _ => return Err(corrupt("fee", "half a fee bid")),
            },
            created_at_ms: self.created_at_ms,
        };
        Ok((self.attempt_id, tx))
    }
}

/// Attaches to each attempt its transactions (already in the order they were signed).
pub(crate) fn assemble_attempts(
    attempts: Vec<AttemptRow>,
    txs: Vec<AttemptTxRow>,
) -> Result<Vec<payoutd_domain::Attempt>, StoreError> {
    let mut by_attempt: std::collections::HashMap<String, Vec<payoutd_domain::AttemptTx>> =
        std::collections::HashMap::new();
    for row in txs {
        let (attempt_id, tx) = row.into_domain()?;
        by_attempt.entry(attempt_id).or_default().push(tx);
    }
    attempts
        .into_iter()
        .map(|a| {
            let txs = by_attempt.remove(&a.id).unwrap_or_default();
            a.into_domain(txs)
        })
        .collect()
}

/// Checks a freshly signed attempt before it is stored: the session's wallet and next nonce,
/// exactly one original transaction (replacements come later through `add_attempt_tx`).
pub(crate) fn assert_signed_attempt(
    payout: &Payout,
    attempt: &payoutd_domain::Attempt,
    event: &payoutd_engine::store::NewEvent,
    wallet_id: &str,
    next_nonce: u64,
) {
    assert_new_attempt(payout, attempt, wallet_id, next_nonce);
    assert_eq!(event.entity_id, payout.id.as_str(), "the event announces this payout");
}

fn assert_new_attempt(
    payout: &Payout,
    attempt: &payoutd_domain::Attempt,
    wallet_id: &str,
    next_nonce: u64,
) {
    assert_eq!(attempt.payout_id, payout.id, "the attempt belongs to this payout");
    let slot = attempt.slot.as_evm().expect("a signing session signs EVM attempts");
    assert_eq!(slot.wallet_id, wallet_id, "the attempt signs with the session's wallet");
    assert_eq!(slot.nonce, next_nonce, "the attempt uses the session's next nonce");
    assert_eq!(
        attempt.status,
        payoutd_domain::AttemptStatus::Signed,
        "a recorded attempt is signed"
    );
    assert_eq!(attempt.txs.len(), 1, "a signed attempt has exactly its original transaction");
    assert_eq!(
        attempt.txs[0].kind,
        payoutd_domain::TxKind::Original,
        "the first transaction is the original"
    );
}

/// Checks attempt n+1 before it is stored: as a signed attempt, and numbered after the first.
pub(crate) fn assert_next_attempt(
    payout: &Payout,
    attempt: &payoutd_domain::Attempt,
    wallet_id: &str,
    next_nonce: u64,
) {
    assert_new_attempt(payout, attempt, wallet_id, next_nonce);
    assert!(attempt.attempt_no >= 2, "a next attempt follows a first one");
    assert_eq!(
        payout.status,
        payoutd_domain::PayoutStatus::Processing,
        "a payout awaiting its next attempt is processing"
    );
}

/// The advisory lock key of the cap towards one destination in one asset.
/// The lock a rail without nonces takes on its asset's account before its caps are read.
pub(crate) fn cap_account_lock_key(asset: &payoutd_domain::AssetCode) -> String {
    format!("payoutd:cap-account:{}", asset.as_str())
}

pub(crate) fn cap_lock_key(
    asset: &payoutd_domain::AssetCode,
    to: &payoutd_domain::Destination,
) -> String {
    format!("payoutd:cap:{}:{to}", asset.as_str())
}

/// The attempt number in its column type.
pub(crate) fn attempt_no(attempt: &payoutd_domain::Attempt) -> Result<i32, StoreError> {
    i32::try_from(attempt.attempt_no).map_err(|e| StoreError::Invariant(format!("attempt_no: {e}")))
}

/// `payouts.next_attempt_no` as read back.
pub(crate) fn next_attempt_no(value: i32) -> Result<u32, StoreError> {
    u32::try_from(value).map_err(|e| corrupt("next_attempt_no", e))
}

/// What every settlement must carry whatever the database: a transition in the table, a proof for
/// `dead` (I6), and a next attempt only after a death.
pub(crate) fn assert_settlement(s: &payoutd_engine::AttemptSettlement) -> Result<(), StoreError> {
    use payoutd_domain::AttemptStatus;
    assert!(
        s.attempt_from.can_become(s.attempt_to),
        "attempt transition {} -> {} is not in the table",
        s.attempt_from,
        s.attempt_to
    );
    if s.attempt_to == AttemptStatus::Dead && s.evidence.trim().is_empty() {
        // I6: without a proof of death the hold must stand.
        return Err(StoreError::Invariant(format!(
            "attempt {} cannot be dead without a proof",
            s.attempt_id
        )));
    }
    if let payoutd_engine::pipeline_store::PayoutEffect::AwaitNextAttempt(_) = &s.payout {
        assert_eq!(
            s.attempt_to,
            AttemptStatus::Dead,
            "only a proven death starts a next attempt (I3)"
        );
    }
    Ok(())
}

/// The `mined_block`, `mined_hash` a settlement writes: exactly the final transaction, or none.
pub(crate) fn mined_columns(
    s: &payoutd_engine::AttemptSettlement,
) -> Result<(Option<i64>, Option<String>), StoreError> {
    match &s.mined {
        Some((block, hash)) => {
            Ok((Some(to_db_int(*block, "block")?), Some(hash.as_str().to_owned())))
        }
        None => Ok((None, None)),
    }
}

/// Orders an attempt's transactions as they were signed: by time, then original < replacement <
/// cancel, then fees (each later send at the nonce outbids the earlier ones, and both encodings
/// order like the numbers), then hash so the order is total. The schema has no sequence column.
macro_rules! tx_order {
    () => {
        "created_at_ms, CASE kind WHEN 'original' THEN 0 WHEN 'replacement' THEN 1 ELSE 2 END, \
         max_fee_per_gas, max_priority_fee_per_gas, tx_hash"
    };
}
pub(crate) use tx_order;
