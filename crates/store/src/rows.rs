//! Plain rows shared by both backends, and their one conversion into domain values.

use payoutd_domain::{
    Amount, AssetCode, DepositId, DepositKey, Destination, Fingerprint, MerchantId, Metadata,
    Payout, PayoutId, PayoutKey, PayoutStatus,
};
use payoutd_engine::StoreError;
use payoutd_engine::store::Deposit;

#[path = "attempt_rows.rs"]
mod attempt;
pub(crate) use attempt::*;

fn corrupt(what: &str, err: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {err}"))
}

/// Reads a money column in either encoding (PG numeric as text, SQLite padded text).
pub(crate) fn amount(text: &str) -> Result<Amount, StoreError> {
    Amount::from_padded(text).map_err(|e| corrupt("amount", e))
}

/// A merchant's balance in one asset from a row of `asset`, `available` and `held` (money as text),
/// on either database.
pub(crate) fn balance_row<R: sqlx::Row>(
    row: &R,
) -> Result<payoutd_engine::store::Balance, StoreError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let get = |name: &str| row.try_get::<String, _>(name).map_err(crate::classify);
    let asset = get("asset")?;
    Ok(payoutd_engine::store::Balance {
        asset: AssetCode::parse(&asset).map_err(|e| corrupt("balance asset", e))?.0,
        available: amount(&get("available")?)?,
        held: amount(&get("held")?)?,
    })
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

/// A payout waiting for its next attempt and that attempt's number, from a row of
/// `shared_reads::payout_columns!` and `next_attempt_no`, on either database.
pub(crate) fn payout_awaiting_row<R: sqlx::Row>(row: &R) -> Result<(Payout, u32), StoreError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i32: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let next: i32 = row.try_get("next_attempt_no").map_err(crate::classify)?;
    Ok((payout_row(row)?, next_attempt_no(next)?))
}

/// A live key's merchant and, when the join found one, its payout under the key asked for
/// (`shared_reads::SELECT_KEY_MERCHANT_AND_PAYOUT`), on either database.
pub(crate) fn key_merchant_and_payout_row<R: sqlx::Row>(
    row: &R,
) -> Result<(MerchantId, Option<Payout>), StoreError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let merchant: String = row.try_get("key_merchant_id").map_err(crate::classify)?;
    let merchant = MerchantId::parse(&merchant).map_err(|e| corrupt("api key's merchant", e))?;
    let payout_id: Option<String> = row.try_get("id").map_err(crate::classify)?;
    let payout = match payout_id {
        Some(_) => Some(payout_row(row)?),
        None => None,
    };
    Ok((merchant, payout))
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

/// A deposit from a row of `id, merchant_id, idempotency_key, asset, amount (as text),
/// created_at_ms`, on either database.
pub(crate) fn deposit_row<R: sqlx::Row>(row: &R) -> Result<DepositRow, StoreError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let get = |name: &str| row.try_get::<String, _>(name).map_err(crate::classify);
    Ok(DepositRow {
        id: get("id")?,
        merchant_id: get("merchant_id")?,
        idempotency_key: get("idempotency_key")?,
        asset: get("asset")?,
        amount: get("amount")?,
        created_at_ms: row.try_get("created_at_ms").map_err(crate::classify)?,
    })
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

pub(crate) fn incident_id(text: &str) -> Result<payoutd_domain::IncidentId, StoreError> {
    payoutd_domain::IncidentId::parse(text).map_err(|e| corrupt("incident id", e))
}

impl IncidentRow {
    pub(crate) fn into_domain(self) -> Result<payoutd_domain::Incident, StoreError> {
        Ok(payoutd_domain::Incident {
            id: incident_id(&self.id)?,
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
