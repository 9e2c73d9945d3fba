//! A simulated transaction as the node holds it (its own encoding, so stored bytes round-trip) and what blocks of them say: a sender's nonce and an account's balance.

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Amount, ChainReference, EvmAddress, FeeBid};
use payoutd_engine::rail::ReadError;
use sha2::{Digest, Sha256};

use super::{SIM_GAS_PER_TX, SIM_GENESIS_BALANCE};

/// A transaction as the simulated node sees it; `raw` is its own encoding so stored bytes round-trip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimTx {
    pub hash: String,
    pub from: EvmAddress,
    pub nonce: u64,
    pub to: EvmAddress,
    pub value: Amount,
    pub token: Option<EvmAddress>,
    pub fees: FeeBid,
    pub cancel: bool,
    /// What a payout transfer carries in its data, as payoutd's transfers do on a real chain.
    pub reference: Option<ChainReference>,
}

impl SimTx {
    /// The network fee this transaction costs its sender once mined, in the native asset.
    pub fn fee_paid(&self) -> Amount {
        Amount::from_u128(SIM_GAS_PER_TX * self.fees.max_fee_per_gas)
    }

    fn encode(&self) -> Vec<u8> {
        format!(
            "{}|{}|{}|{}|{}|{}|{}|{}|{}",
            self.from,
            self.nonce,
            self.to,
            self.value,
            self.token.map(|t| t.to_string()).unwrap_or_default(),
            self.fees.max_fee_per_gas,
            self.fees.max_priority_fee_per_gas,
            self.cancel,
            self.reference.map(|r| r.to_string()).unwrap_or_default()
        )
        .into_bytes()
    }

    pub(super) fn decode(raw: &[u8]) -> Option<SimTx> {
        let text = std::str::from_utf8(raw).ok()?;
        let f: Vec<&str> = text.split('|').collect();
        if f.len() != 9 {
            return None;
        }
        let mut tx = SimTx {
            hash: String::new(),
            from: EvmAddress::parse(f[0]).ok()?,
            nonce: f[1].parse().ok()?,
            to: EvmAddress::parse(f[2]).ok()?,
            value: Amount::parse(f[3]).ok()?,
            token: if f[4].is_empty() { None } else { Some(EvmAddress::parse(f[4]).ok()?) },
            fees: FeeBid {
                max_fee_per_gas: f[5].parse().ok()?,
                max_priority_fee_per_gas: f[6].parse().ok()?,
            },
            cancel: f[7].parse().ok()?,
            reference: if f[8].is_empty() {
                None
            } else {
                Some(ChainReference::at_end_of(&hex::decode(f[8]).ok()?)?)
            },
        };
        tx.hash = format!("0x{}", hex::encode(Sha256::digest(raw)));
        Some(tx)
    }

    pub(super) fn signed(mut self) -> (SimTx, Vec<u8>) {
        let raw = self.encode();
        self.hash = format!("0x{}", hex::encode(Sha256::digest(&raw)));
        (self, raw)
    }
}

/// How many transactions `address` sent in `blocks`: its nonce after them (a sender's nonces are
/// mined in order from 0).
pub(super) fn sent_by(blocks: &[Vec<SimTx>], address: &EvmAddress) -> u64 {
    blocks.iter().flatten().filter(|t| t.from == *address).count() as u64
}

/// An account's balance of one asset after `txs`: genesis, plus what arrived, minus what left and
/// (native asset) the fees it paid.
pub(super) fn sim_balance(
    txs: &[&SimTx],
    address: &EvmAddress,
    token: &TokenKind,
) -> Result<Amount, ReadError> {
    let overflow = || ReadError("simulated balance out of range".into());
    let token = match token {
        TokenKind::Native => None,
        TokenKind::Erc20(a) => Some(*a),
        TokenKind::Spl(_) | TokenKind::Provider(_) | TokenKind::Other => {
            return Err(ReadError("not an EVM asset".into()));
        }
    };
    let mut balance = Amount::from_u128(SIM_GENESIS_BALANCE);
    for tx in txs {
        if tx.to == *address && tx.token == token {
            balance = balance.checked_add(tx.value).ok_or_else(overflow)?;
        }
        if tx.from == *address {
            if tx.token == token {
                balance = balance.checked_sub(tx.value).ok_or_else(overflow)?;
            }
            if token.is_none() {
                balance = balance.checked_sub(tx.fee_paid()).ok_or_else(overflow)?;
            }
        }
    }
    Ok(balance)
}
