//! Plain rows shared by both backends, and their one conversion into domain values.

use payoutd_domain::{
    Amount, AssetCode, DepositId, DepositKey, Destination, Fingerprint, MerchantId, Metadata, Payout, PayoutId, PayoutKey,
    PayoutStatus,
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
    pub destination: String,
    pub metadata: String,
    pub status: String,
    pub version: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl PayoutRow {
    pub(crate) fn into_domain(self) -> Result<Payout, StoreError> {
        let (asset, rail, _) = AssetCode::parse(&self.asset).map_err(|e| corrupt("payout asset", e))?;
        Ok(Payout {
            id: PayoutId::parse(&self.id).map_err(|e| corrupt("payout id", e))?,
            merchant_id: MerchantId::parse(&self.merchant_id).map_err(|e| corrupt("merchant id", e))?,
            key: PayoutKey::parse(&self.idempotency_key).map_err(|e| corrupt("payout key", e))?,
            fingerprint: Fingerprint::from_stored(self.fingerprint),
            asset,
            amount: amount(&self.amount)?,
            destination: Destination::parse_stored(rail, &self.destination).map_err(|e| corrupt("destination", e))?,
            metadata: Metadata::from_canonical_json(self.metadata).map_err(|e| corrupt("metadata", e))?,
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
            merchant_id: MerchantId::parse(&self.merchant_id).map_err(|e| corrupt("merchant id", e))?,
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
            if let Account::Merchant { merchant, .. } = account {
                if !merchants.contains(merchant) {
                    merchants.push(merchant.clone());
                }
            }
        }
    }
    merchants.sort();
    merchants
        .into_iter()
        .map(|m| {
            let (available_out, available_in) = journal.effect_on(&Account::Merchant { merchant: m.clone(), bucket: Bucket::Available });
            let (held_out, held_in) = journal.effect_on(&Account::Merchant { merchant: m.clone(), bucket: Bucket::Held });
            (m, BalanceDelta { available_out, available_in, held_out, held_in })
        })
        .collect()
}

/// Why a journal could not be applied.
pub(crate) enum JournalRefusal {
    /// The account it draws from does not hold enough.
    Insufficient,
}
