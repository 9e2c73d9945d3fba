//! A simulated Solana transaction as its stored bytes carry it, and what one that landed did for its payout, judged by the adapter's own rule.

use payoutd_domain::{Amount, Payout};
use payoutd_engine::standalone::landed::LandedEffect;

use super::FEE_LAMPORTS;

/// A transaction as its stored bytes carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SolTx {
    pub(super) signature: String,
    pub(super) destination: String,
    pub(super) amount: Amount,
    pub(super) last_valid: u64,
    pub(super) seen_blockhash: bool,
    /// The durable nonce value it was signed against (then `last_valid` is `u64::MAX`).
    pub(super) nonce: Option<u64>,
    /// Its memo: the business event's reference, as a real transfer carries it.
    pub(super) memo: String,
}

impl SolTx {
    pub(super) fn encode(&self) -> Vec<u8> {
        let nonce = self.nonce.map_or_else(|| "-".to_owned(), |n| n.to_string());
        format!(
            "{}|{}|{}|{}|{}|{nonce}|{}",
            self.signature,
            self.destination,
            self.amount,
            self.last_valid,
            self.seen_blockhash,
            self.memo
        )
        .into_bytes()
    }

    pub(super) fn decode(raw: &[u8]) -> SolTx {
        let text = String::from_utf8(raw.to_vec()).expect("simulated bytes are text");
        let parts: Vec<&str> = text.split('|').collect();
        assert_eq!(parts.len(), 7, "simulated Solana bytes: {text}");
        SolTx {
            signature: parts[0].to_owned(),
            destination: parts[1].to_owned(),
            amount: Amount::parse(parts[2]).expect("amount"),
            last_valid: parts[3].parse().expect("last valid"),
            seen_blockhash: parts[4] == "true",
            nonce: (parts[5] != "-").then(|| parts[5].parse().expect("nonce value")),
            memo: parts[6].to_owned(),
        }
    }
}

/// What a landed transaction did for `payout`, from the balances it changed (what left the fee
/// payer, what reached the payout's destination), judged by the adapter's own rule.
pub(super) fn landed_effect(landed: &SolTx, payout: &Payout) -> LandedEffect {
    let lamports =
        |a: Amount| -> i128 { a.to_string().parse().expect("simulated amounts are small") };
    let spent = lamports(landed.amount) + lamports(Amount::from_u128(FEE_LAMPORTS));
    let received = if landed.destination == payout.destination.to_string() {
        lamports(landed.amount)
    } else {
        0
    };
    LandedEffect::of_native(spent, received, Some(lamports(payout.amount)))
        .expect("a simulated transfer spends what it sends and its fee")
}
