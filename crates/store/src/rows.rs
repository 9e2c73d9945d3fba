//! Plain rows shared by both backends, and their one conversion into domain values.

use payoutd_domain::{
    Amount, AssetCode, DepositId, DepositKey, Destination, Fingerprint, MerchantId, Metadata,
    Payout, PayoutId, PayoutKey, PayoutStatus,
};
use payoutd_engine::StoreError;
use payoutd_engine::store::Deposit;

fn corrupt(what: &str, err: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {err}"))
}

/// Reads a money column in either encoding (PG numeric as text, SQLite padded text).
pub(crate) fn amount(text: &str) -> Result<Amount, StoreError> {
    Amount::from_padded(text).map_err(|e| corrupt("amount", e))
}

pub(crate) struct PayoutRow {
    pub id: String,
    pub merchant_id: String,
    pub idempotency_key: String,
    pub fingerprint: String,
    pub asset: String,
    pub amount: String,
    pub network_fee: String,
    pub destination: String,
    pub metadata: String,
    pub status: String,
    pub version: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// A payout from a row of `shared_reads::payout_columns!`, on either database.
pub(crate) fn payout_row<R: sqlx::Row>(row: &R) -> Result<Payout, StoreError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let get = |name: &str| row.try_get::<String, _>(name).map_err(crate::classify);
    PayoutRow {
        id: get("id")?,
        merchant_id: get("merchant_id")?,
        idempotency_key: get("idempotency_key")?,
        fingerprint: get("fingerprint")?,
        asset: get("asset")?,
        amount: get("amount")?,
        network_fee: get("network_fee")?,
        destination: get("destination")?,
        metadata: get("metadata")?,
        status: get("status")?,
        version: row.try_get("version").map_err(crate::classify)?,
        created_at_ms: row.try_get("created_at_ms").map_err(crate::classify)?,
        updated_at_ms: row.try_get("updated_at_ms").map_err(crate::classify)?,
    }
    .into_domain()
}

impl PayoutRow {
    pub(crate) fn into_domain(self) -> Result<Payout, StoreError> {
        let (asset, rail, _) =
            AssetCode::parse(&self.asset).map_err(|e| corrupt("payout asset", e))?;
        Ok(Payout {
            id: PayoutId::parse(&self.id).map_err(|e| corrupt("payout id", e))?,
            merchant_id: MerchantId::parse(&self.merchant_id)
                .map_err(|e| corrupt("merchant id", e))?,
            key: PayoutKey::parse(&self.idempotency_key).map_err(|e| corrupt("payout key", e))?,
            fingerprint: Fingerprint::from_stored(self.fingerprint),
            asset,
            amount: amount(&self.amount)?,
            network_fee: amount(&self.network_fee)?,
            destination: Destination::parse_stored(rail, &self.destination)
                .map_err(|e| corrupt("destination", e))?,
            metadata: Metadata::from_canonical_json(self.metadata)
                .map_err(|e| corrupt("metadata", e))?,
            status: PayoutStatus::parse(&self.status).map_err(|e| corrupt("payout status", e))?,
            version: self.version,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
        })
    }
}

pub(crate) struct DepositRow {
    pub id: String,
    pub merchant_id: String,
    pub idempotency_key: String,
    pub asset: String,
    pub amount: String,
    pub created_at_ms: i64,
}

impl DepositRow {
    pub(crate) fn into_domain(self) -> Result<Deposit, StoreError> {
        Ok(Deposit {
            id: DepositId::parse(&self.id).map_err(|e| corrupt("deposit id", e))?,
            merchant_id: MerchantId::parse(&self.merchant_id)
                .map_err(|e| corrupt("merchant id", e))?,
            key: DepositKey::parse(&self.idempotency_key).map_err(|e| corrupt("deposit key", e))?,
            asset: AssetCode::parse(&self.asset).map_err(|e| corrupt("deposit asset", e))?.0,
            amount: amount(&self.amount)?,
            created_at_ms: self.created_at_ms,
        })
    }
}

/// The balance change one journal makes to one merchant's (available, held) pair for its asset.
#[derive(Default)]
pub(crate) struct BalanceDelta {
    pub available_out: Amount,
    pub available_in: Amount,
    pub held_out: Amount,
    pub held_in: Amount,
}

impl BalanceDelta {
    pub(crate) fn decreases(&self) -> bool {
        !self.available_out.is_zero() || !self.held_out.is_zero()
    }
}

/// Groups a journal's effect by merchant, in a stable order (so lock order is stable too).
pub(crate) fn deltas(journal: &payoutd_domain::Journal) -> Vec<(MerchantId, BalanceDelta)> {
    use payoutd_domain::{Account, Bucket};
    let mut merchants: Vec<MerchantId> = Vec::new();
    for p in &journal.postings {
        for account in [&p.from, &p.to] {
            if let Account::Merchant { merchant, .. } = account
                && !merchants.contains(merchant)
            {
                merchants.push(merchant.clone());
            }
        }
    }
    merchants.sort();
    merchants
        .into_iter()
        .map(|m| {
            let (available_out, available_in) = journal
                .effect_on(&Account::Merchant { merchant: m.clone(), bucket: Bucket::Available });
            let (held_out, held_in) =
                journal.effect_on(&Account::Merchant { merchant: m.clone(), bucket: Bucket::Held });
            (m, BalanceDelta { available_out, available_in, held_out, held_in })
        })
        .collect()
}

/// Why a journal could not be applied.
pub(crate) enum JournalRefusal {
    /// The account it draws from does not hold enough.
    Insufficient,
}

/// How `hot_wallets.chain` names an EVM chain: the rail part of its asset codes (`evm:31337`).
pub(crate) fn chain_text(chain_id: u64) -> String {
    format!("evm:{chain_id}")
}

/// Counters, nonces and block numbers are u64 in the domain and BIGINT in both databases.
pub(crate) fn to_db_int(value: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(value)
        .map_err(|_| StoreError::Invariant(format!("{what} {value} does not fit in a BIGINT")))
}

fn from_db_int(value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|e| corrupt(what, e))
}

/// Fee columns hold wei per gas, which the domain keeps as u128 (PG numeric as text, SQLite padded text).
pub(crate) fn fee(text: Option<String>) -> Result<u128, StoreError> {
    let text = text.ok_or_else(|| corrupt("fee", "missing"))?;
    let digits = text.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    digits.parse::<u128>().map_err(|e| corrupt("fee", e))
}

pub(crate) struct HotWalletRow {
    pub id: String,
    pub chain: String,
    pub address: String,
    pub next_nonce: i64,
}

impl HotWalletRow {
    pub(crate) fn into_domain(self) -> Result<payoutd_domain::HotWallet, StoreError> {
        let chain_id = self
            .chain
            .strip_prefix("evm:")
            .and_then(|id| id.parse::<u64>().ok())
            .ok_or_else(|| corrupt("hot wallet chain", &self.chain))?;
        Ok(payoutd_domain::HotWallet {
            id: self.id,
            chain_id,
            address: payoutd_domain::EvmAddress::parse(&self.address)
                .map_err(|e| corrupt("hot wallet address", e))?,
            next_nonce: from_db_int(self.next_nonce, "hot wallet next_nonce")?,
        })
    }
}

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
            AttemptSlot::Provider { provider, idempotency_key, reference, wallet } => SlotColumns {
                rail,
                hot_wallet_id: wallet.clone(),
                provider: Some(provider.clone()),
                provider_key: Some(idempotency_key.clone()),
                provider_ref: reference.as_ref().map(|r| r.as_str().to_owned()),
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

#[derive(sqlx::FromRow)]
pub(crate) struct IncidentRow {
    pub id: String,
    pub kind: String,
    pub payout_id: Option<String>,
    pub attempt_id: Option<String>,
    pub detail: String,
    pub resolution: Option<String>,
    pub created_at_ms: i64,
}

/// An incident whose books wait, with its subject.
#[derive(sqlx::FromRow)]
pub(crate) struct AwaitingRow {
    #[sqlx(flatten)]
    pub incident: IncidentRow,
    pub subject: Option<String>,
}

impl AwaitingRow {
    pub(crate) fn into_engine(
        self,
    ) -> Result<payoutd_engine::pipeline_store::AwaitingBooks, StoreError> {
        let subject =
            self.subject.ok_or_else(|| corrupt("incident awaiting books", "no subject"))?;
        Ok(payoutd_engine::pipeline_store::AwaitingBooks {
            incident: self.incident.into_domain()?,
            subject: tx_ref(&subject)?,
        })
    }
}

impl IncidentRow {
    pub(crate) fn into_domain(self) -> Result<payoutd_domain::Incident, StoreError> {
        Ok(payoutd_domain::Incident {
            id: payoutd_domain::IncidentId::parse(&self.id)
                .map_err(|e| corrupt("incident id", e))?,
            kind: payoutd_domain::IncidentKind::parse(&self.kind)
                .ok_or_else(|| corrupt("incident kind", &self.kind))?,
            payout_id: self
                .payout_id
                .map(|p| PayoutId::parse(&p).map_err(|e| corrupt("payout id", e)))
                .transpose()?,
            attempt_id: self
                .attempt_id
                .map(|a| payoutd_domain::AttemptId::parse(&a).map_err(|e| corrupt("attempt id", e)))
                .transpose()?,
            detail: self.detail,
            resolution: self.resolution,
            created_at_ms: self.created_at_ms,
        })
    }
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

/// An incident's kind and subject as stored.
pub(crate) fn incident_subject(
    kind: String,
    merchant_id: Option<String>,
    payout_id: Option<String>,
    attempt_id: Option<String>,
) -> Result<(payoutd_domain::IncidentKind, payoutd_engine::IncidentSubject), StoreError> {
    let kind = payoutd_domain::IncidentKind::parse(&kind)
        .ok_or_else(|| corrupt("incident kind", &kind))?;
    Ok((
        kind,
        payoutd_engine::IncidentSubject {
            merchant_id: merchant_id
                .map(|m| MerchantId::parse(&m).map_err(|e| corrupt("merchant id", e)))
                .transpose()?,
            payout_id: payout_id
                .map(|p| PayoutId::parse(&p).map_err(|e| corrupt("payout id", e)))
                .transpose()?,
            attempt_id: attempt_id
                .map(|a| payoutd_domain::AttemptId::parse(&a).map_err(|e| corrupt("attempt id", e)))
                .transpose()?,
        },
    ))
}

/// A `transfers` row as read (money in either encoding).
pub(crate) struct TransferRow {
    pub id: String,
    pub merchant_id: String,
    pub idempotency_key: String,
    pub fingerprint: String,
    pub destination_merchant_id: String,
    pub asset: String,
    pub amount: String,
    pub created_at_ms: i64,
}

impl TransferRow {
    pub(crate) fn into_domain(self) -> Result<payoutd_domain::Transfer, StoreError> {
        Ok(payoutd_domain::Transfer {
            id: payoutd_domain::TransferId::parse(&self.id)
                .map_err(|e| corrupt("transfer id", e))?,
            merchant_id: MerchantId::parse(&self.merchant_id)
                .map_err(|e| corrupt("merchant id", e))?,
            key: payoutd_domain::TransferKey::parse(&self.idempotency_key)
                .map_err(|e| corrupt("transfer key", e))?,
            fingerprint: payoutd_domain::Fingerprint::from_stored(self.fingerprint),
            destination: MerchantId::parse(&self.destination_merchant_id)
                .map_err(|e| corrupt("destination merchant id", e))?,
            asset: payoutd_domain::AssetCode::parse(&self.asset)
                .map_err(|e| corrupt("asset", e))?
                .0,
            amount: amount(&self.amount)?,
            created_at_ms: self.created_at_ms,
        })
    }
}

/// Reads a `transfers` row selected with its columns by name.
macro_rules! transfer_row {
    ($row:expr) => {{
        let row = $row;
        $crate::rows::TransferRow {
            id: row.try_get("id").map_err(classify)?,
            merchant_id: row.try_get("merchant_id").map_err(classify)?,
            idempotency_key: row.try_get("idempotency_key").map_err(classify)?,
            fingerprint: row.try_get("fingerprint").map_err(classify)?,
            destination_merchant_id: row.try_get("destination_merchant_id").map_err(classify)?,
            asset: row.try_get("asset").map_err(classify)?,
            amount: row.try_get("amount").map_err(classify)?,
            created_at_ms: row.try_get("created_at_ms").map_err(classify)?,
        }
        .into_domain()
    }};
}
pub(crate) use transfer_row;

/// The checks every store makes before writing a transfer: its journal is the one transfer posting.
pub(crate) fn assert_transfer_shape(new: &payoutd_engine::store::NewTransfer) {
    let t = &new.transfer;
    assert_eq!(
        new.journal.kind,
        payoutd_domain::JournalKind::Transfer,
        "a transfer carries a transfer journal"
    );
    assert_eq!(new.journal.reference, t.id.as_str(), "the journal references its transfer");
    assert_eq!(new.journal.postings.len(), 1, "a transfer is one posting: available -> available");
    assert_eq!(new.journal.postings[0].amount, t.amount, "the posting is the transfer amount");
    assert_ne!(t.merchant_id, t.destination, "a transfer goes to another merchant");
    assert!(
        new.events.iter().all(|e| e.event_type == payoutd_domain::EventType::TransferCompleted)
    );
}

/// An `api_keys` row as listed.
pub(crate) fn api_key_info(
    id: Option<String>,
    merchant_id: String,
    created_at_ms: i64,
    revoked_at_ms: Option<i64>,
) -> Result<payoutd_engine::store::ApiKeyInfo, StoreError> {
    let id = id.ok_or_else(|| corrupt("api key id", "missing"))?;
    Ok(payoutd_engine::store::ApiKeyInfo {
        id: payoutd_domain::ApiKeyId::parse(&id).map_err(|e| corrupt("api key id", e))?,
        merchant_id: MerchantId::parse(&merchant_id).map_err(|e| corrupt("merchant id", e))?,
        created_at_ms,
        revoked_at_ms,
    })
}
