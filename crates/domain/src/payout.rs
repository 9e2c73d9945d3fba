//! The payout (the obligation): a validated request, its fingerprint, and the stored record.

use sha2::{Digest, Sha256};

use crate::address::Destination;
use crate::asset::AssetCode;
use crate::ids::{MerchantId, PayoutId};
use crate::keys::PayoutKey;
use crate::ledger::Journal;
use crate::money::Amount;
use crate::status::PayoutStatus;

/// Upper bound on a payout's metadata, as canonical JSON text.
pub const METADATA_MAX_BYTES: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metadata must be a JSON object of at most {METADATA_MAX_BYTES} bytes")]
pub struct MetadataError;

/// Merchant-supplied metadata: a JSON object in canonical form (sorted keys, no whitespace),
/// produced by the API edge, so equal objects give equal fingerprints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata(String);

impl Metadata {
    pub fn empty() -> Metadata {
        Metadata("{}".to_owned())
    }

    pub fn from_canonical_json(text: String) -> Result<Metadata, MetadataError> {
        if text.len() > METADATA_MAX_BYTES || !text.starts_with('{') || !text.ends_with('}') {
            return Err(MetadataError);
        }
        Ok(Metadata(text))
    }

    pub fn as_json(&self) -> &str {
        &self.0
    }
}

/// SHA-256 over the parameters that define a payout; a reused key with another fingerprint is refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fingerprint(String);

impl Fingerprint {
    pub fn from_stored(hex_digest: String) -> Fingerprint {
        Fingerprint(hex_digest)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `Payout::business_event` of `merchant`'s payout with `key`. The merchant's id has a fixed
/// charset without a NUL, so the separator keeps two (merchant, key) pairs from one digest.
pub fn business_event_of(merchant: &MerchantId, key: &PayoutKey) -> String {
    let mut h = Sha256::new();
    h.update(b"payoutd business event v1\0");
    h.update(merchant.as_str().as_bytes());
    h.update(b"\0");
    h.update(key.as_str().as_bytes());
    hex::encode(h.finalize())
}

/// A payout request that passed every check at the edge; it can only be built from valid parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayoutRequest {
    pub key: PayoutKey,
    pub asset: AssetCode,
    pub amount: Amount,
    pub destination: Destination,
    pub metadata: Metadata,
}

impl PayoutRequest {
    pub fn new(
        key: PayoutKey,
        asset: AssetCode,
        amount: Amount,
        destination: Destination,
        metadata: Metadata,
    ) -> PayoutRequest {
        assert!(!amount.is_zero(), "payout amounts are positive by construction");
        PayoutRequest { key, asset, amount, destination, metadata }
    }

    /// Covers every parameter but the key itself. Addresses enter in canonical form, so the
    /// same destination spelled in lower case or EIP-55 case is the same request.
    pub fn fingerprint(&self) -> Fingerprint {
        let mut h = Sha256::new();
        for part in [
            "payout.v1",
            self.asset.as_str(),
            &self.amount.to_string(),
            &self.destination.to_string(),
            self.metadata.as_json(),
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        Fingerprint(hex::encode(h.finalize()))
    }
}

/// The key of a batch submitted without an Idempotency-Key: a digest of its lines' external ids in
/// order, so the same batch submitted again is the same batch.
pub fn batch_key_of<'a>(external_ids: impl IntoIterator<Item = &'a PayoutKey>) -> String {
    let mut digest = BatchKeyDigest::default();
    for key in external_ids {
        digest.push(key);
    }
    digest.finish()
}

/// `batch_key_of`, taken one line at a time: a streamed batch never holds all its keys at once.
#[derive(Clone, Default)]
pub struct BatchKeyDigest(Sha256);

impl BatchKeyDigest {
    pub fn push(&mut self, key: &PayoutKey) {
        self.0.update((key.as_str().len() as u64).to_be_bytes());
        self.0.update(key.as_str().as_bytes());
    }

    pub fn finish(self) -> String {
        format!("lines:{}", hex::encode(self.0.finalize()))
    }
}

/// A stored payout, as every reader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payout {
    pub id: PayoutId,
    pub merchant_id: MerchantId,
    pub key: PayoutKey,
    pub fingerprint: Fingerprint,
    pub asset: AssetCode,
    pub amount: Amount,
    /// Charged to the merchant at intake beside `amount` (zero: none); refunded with the hold.
    pub network_fee: Amount,
    pub destination: Destination,
    pub metadata: Metadata,
    pub status: PayoutStatus,
    /// Bumped by every transition; the optimistic guard next to the expected status.
    pub version: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl Payout {
    /// The business event this payout pays, named by a digest (SHA-256 over its merchant and its
    /// idempotency key, hex): every payout made for one event has the same name, one re-created by
    /// the client's retry after its creation was lost included, and the name carries neither.
    pub fn business_event(&self) -> String {
        business_event_of(&self.merchant_id, &self.key)
    }

    /// What intake books: the hold of `amount`, and the network fee's charge when there is one.
    pub fn intake_journals(&self) -> Vec<Journal> {
        self.with_fee(Journal::hold, Journal::network_fee)
    }

    /// What ending without paying books, on every path (failed, canceled, rejected): the hold
    /// released and the network fee refunded, so a merchant pays fees only for payouts that paid.
    pub fn release_journals(&self) -> Vec<Journal> {
        self.with_fee(Journal::release, Journal::network_fee_refund)
    }

    /// `amount`'s journal, then the network fee's when there is one: the same merchant, asset and
    /// reference.
    fn with_fee(&self, amount: JournalOf, fee: JournalOf) -> Vec<Journal> {
        let journal =
            |of: JournalOf, units| of(&self.merchant_id, &self.asset, self.id.as_str(), units);
        let mut journals = vec![journal(amount, self.amount)];
        if !self.network_fee.is_zero() {
            journals.push(journal(fee, self.network_fee));
        }
        journals
    }
}

/// A merchant's journal of some units of an asset, for a reference (`Journal::hold`, ...).
type JournalOf = fn(&MerchantId, &AssetCode, &str, Amount) -> Journal;

/// JSON string literal for ASCII-or-UTF-8 text; escapes quotes, backslashes and control characters.
pub fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::EvmAddress;

    fn request(amount: u128, dest: &str) -> PayoutRequest {
        let (asset, _, _) = AssetCode::parse("evm:31337/USDC").unwrap();
        PayoutRequest::new(
            PayoutKey::parse("order-0001").unwrap(),
            asset,
            Amount::from_u128(amount),
            Destination::Evm(EvmAddress::parse(dest).unwrap()),
            Metadata::empty(),
        )
    }

    #[test]
    fn fingerprint_ignores_address_case_but_not_parameters() {
        let a = request(10, "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed");
        let b = request(10, "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed");
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(
            a.fingerprint(),
            request(11, "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed").fingerprint()
        );
        assert_ne!(
            a.fingerprint(),
            request(10, "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359").fingerprint()
        );
    }

    #[test]
    fn a_business_event_is_its_merchant_and_key_and_nothing_else() {
        let merchant = MerchantId::new();
        let key = PayoutKey::parse("withdrawal-0001").unwrap();
        let event = business_event_of(&merchant, &key);
        assert_eq!(event, business_event_of(&merchant.clone(), &key.clone()), "stable");
        assert_eq!(event.len(), 64);
        assert!(!event.contains("withdrawal") && !event.contains(merchant.as_str()));
        let other_key = PayoutKey::parse("withdrawal-0002").unwrap();
        assert_ne!(event, business_event_of(&merchant, &other_key));
        assert_ne!(event, business_event_of(&MerchantId::new(), &key));
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
