//! What the simulated chain's receipts say: a mined transaction judged against the transfer its payout needs.

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Amount, TxRef};
use payoutd_engine::evm::{ExpectedTransfer, Receipt};

use super::State;

/// The receipt of `hash` on the one simulated chain, judged against the transfer the payout needs.
pub(super) fn receipt_in(s: &State, hash: &TxRef, expected: &ExpectedTransfer) -> Option<Receipt> {
    let token = match expected.asset.token {
        TokenKind::Erc20(a) => Some(a),
        _ => None,
    };
    s.blocks.iter().enumerate().find_map(|(i, block)| {
        let tx = block.iter().find(|t| t.hash == hash.as_str())?;
        let matches = !tx.cancel
            && tx.to == expected.to
            && tx.value == expected.amount
            && tx.token == token
            && tx.from == expected.from;
        let moved = if tx.cancel || tx.to != expected.to { Amount::ZERO } else { tx.value };
        Some(Receipt {
            block: i as u64 + 1,
            succeeded: true,
            transfer_matches: matches,
            moved,
            fee_paid: tx.fee_paid(),
        })
    })
}
