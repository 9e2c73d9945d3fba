//! What the simulated chain's receipts say: the facts of a mined transaction, judged by the engine's own rule (`Receipt::judge`), the one the EVM adapter judges a node's receipts by.

use payoutd_domain::TxRef;
use payoutd_engine::evm::{ExpectedTransfer, Receipt, ReceiptFacts, TransferLog};

use super::SimTx;

/// The receipt of `hash` in `blocks` (a node's view of the chain), judged against the transfer
/// the payout needs.
pub(super) fn receipt_in(
    blocks: &[Vec<SimTx>],
    hash: &TxRef,
    expected: &ExpectedTransfer,
) -> Option<Receipt> {
    blocks.iter().enumerate().find_map(|(i, block)| {
        let tx = block.iter().find(|t| t.hash == hash.as_str())?;
        Some(Receipt::judge(&facts(tx, i as u64 + 1), expected))
    })
}

/// A mined transaction as a node's receipt would give it: a token transfer is a call to the token
/// contract with one `Transfer` log; a plain transfer (or a cancel, to the wallet itself) has none.
fn facts(tx: &SimTx, block: u64) -> ReceiptFacts {
    let transfer_logs = match tx.token {
        Some(token) if !tx.cancel => {
            vec![TransferLog { token, from: tx.from, to: tx.to, amount: tx.value }]
        }
        _ => Vec::new(),
    };
    ReceiptFacts {
        block,
        status_ok: true,
        from: tx.from,
        to: Some(tx.token.unwrap_or(tx.to)),
        transfer_logs,
        fee_paid: tx.fee_paid(),
    }
}
