//! What an EVM node's receipt proves, judged once for the adapter and the simulator: a receipt against the transfer its payout needs.

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Amount, EvmAddress};

use super::port::{ExpectedTransfer, Receipt};

/// One ERC-20 `Transfer(from, to, value)` log of a receipt, decoded by the rail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferLog {
    /// The contract that emitted it.
    pub token: EvmAddress,
    pub from: EvmAddress,
    pub to: EvmAddress,
    pub amount: Amount,
}

/// A mined receipt as the rail read it, before any judgement: what the judgement may rest on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptFacts {
    pub block: u64,
    /// Execution status 1. A reverted transaction still consumed its nonce.
    pub status_ok: bool,
    pub from: EvmAddress,
    pub to: Option<EvmAddress>,
    /// Every well-formed `Transfer` log the receipt carries, of any contract.
    pub transfer_logs: Vec<TransferLog>,
    /// What the transaction cost its sender in the native asset, every fee the chain reports.
    pub fee_paid: Amount,
}

impl Receipt {
    /// A receipt judged against the transfer its payout needs. An ERC-20 payout matches only on a
    /// `Transfer(from, to, amount)` log of its token (a status of 1 alone does not prove a token
    /// moved); a native payout on a successful transaction to the destination. What moved is read
    /// from the logs (ERC-20) or, for a native transfer that matches, the amount that was signed.
    pub fn judge(facts: &ReceiptFacts, expected: &ExpectedTransfer) -> Receipt {
        let ours = |log: &&TransferLog, token: EvmAddress| {
            log.token == token && log.from == expected.from && log.to == expected.to
        };
        let transfer_matches = facts.status_ok
            && facts.from == expected.from
            && match &expected.asset.token {
                TokenKind::Native => facts.to == Some(expected.to),
                TokenKind::Erc20(token) => facts
                    .transfer_logs
                    .iter()
                    .any(|log| ours(&log, *token) && log.amount == expected.amount),
                TokenKind::Spl(_) | TokenKind::Provider(_) | TokenKind::Other => false,
            };
        let moved = match &expected.asset.token {
            TokenKind::Erc20(token) if facts.status_ok => facts
                .transfer_logs
                .iter()
                .filter(|log| ours(log, *token))
                .try_fold(Amount::ZERO, |sum, log| sum.checked_add(log.amount))
                .unwrap_or(Amount::MAX),
            TokenKind::Native if transfer_matches => expected.amount,
            _ => Amount::ZERO,
        };
        Receipt {
            block: facts.block,
            succeeded: facts.status_ok,
            transfer_matches,
            moved,
            fee_paid: facts.fee_paid,
        }
    }
}

#[cfg(test)]
mod tests {
    use payoutd_domain::Asset;

    use super::*;

    fn address(byte: u8) -> EvmAddress {
        EvmAddress::from_bytes([byte; 20])
    }

    fn usdc_payout(amount: u128) -> ExpectedTransfer {
        let asset = Asset::new("evm:1/USDC", 6, TokenKind::Erc20(address(9))).unwrap();
        ExpectedTransfer {
            from: address(1),
            to: address(2),
            amount: Amount::from_u128(amount),
            asset,
        }
    }

    fn facts(logs: Vec<TransferLog>) -> ReceiptFacts {
        ReceiptFacts {
            block: 7,
            status_ok: true,
            from: address(1),
            to: Some(address(9)),
            transfer_logs: logs,
            fee_paid: Amount::from_u128(21),
        }
    }

    fn log(token: u8, amount: u128) -> TransferLog {
        TransferLog {
            token: address(token),
            from: address(1),
            to: address(2),
            amount: Amount::from_u128(amount),
        }
    }

    #[test]
    fn a_token_payout_matches_only_on_its_tokens_log_of_its_amount_and_moved_is_what_the_logs_say()
    {
        let expected = usdc_payout(100);
        let exact = Receipt::judge(&facts(vec![log(9, 100)]), &expected);
        assert!(exact.transfer_matches);
        assert_eq!(exact.moved, Amount::from_u128(100));
        let short = Receipt::judge(&facts(vec![log(9, 60)]), &expected);
        assert!(!short.transfer_matches, "a log of another amount is not the payout's transfer");
        assert_eq!(short.moved, Amount::from_u128(60), "a second payment is booked at what moved");
        let other_token = Receipt::judge(&facts(vec![log(8, 100)]), &expected);
        assert!(!other_token.transfer_matches);
        assert_eq!(other_token.moved, Amount::ZERO);
        let mut reverted = facts(vec![log(9, 100)]);
        reverted.status_ok = false;
        let reverted = Receipt::judge(&reverted, &expected);
        assert!(!reverted.transfer_matches && !reverted.succeeded);
        assert_eq!(reverted.moved, Amount::ZERO);
        assert_eq!(reverted.fee_paid, Amount::from_u128(21), "a reverted transaction paid its fee");
    }
}
