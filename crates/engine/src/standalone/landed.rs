//! What a landed transfer did, judged from the balances it changed: whether it moved exactly the payout's amount to its destination, what reached it, and what it cost the hot wallet beyond that. The Solana adapter and the simulated cluster judge by it.

use payoutd_domain::Amount;

/// A landed transaction's effect for its payout, in the asset's base units (`moved`) and in the
/// fee payer's native units (`fee_paid`, negative only if the wallet gained).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LandedEffect {
    pub transfer_matches: bool,
    /// What reached the payout's destination (nothing when its balance fell).
    pub moved: Amount,
    pub fee_paid: i128,
}

impl LandedEffect {
    /// A transfer of the native asset: what the destination gained is what moved, and what left
    /// the hot wallet (`spent`) and did not reach it is the fee. `None` when the numbers cannot be
    /// a transfer's (the recipient got more than the wallet spent, past any range).
    pub fn of_native(spent: i128, received: i128, expected: Option<i128>) -> Option<LandedEffect> {
        let fee_paid = spent.checked_sub(received.max(0))?;
        Some(LandedEffect {
            transfer_matches: Some(received) == expected,
            moved: received_amount(received),
            fee_paid,
        })
    }

    /// A token transfer: what the destination's token balance gained is what moved; everything the
    /// hot wallet spent in the native asset is the fee (a created account's rent among it).
    pub fn of_token(spent: i128, received: Option<i128>, expected: Option<i128>) -> LandedEffect {
        LandedEffect {
            transfer_matches: received == expected,
            moved: received_amount(received.unwrap_or(0)),
            fee_paid: spent,
        }
    }

    /// A transaction that failed moved nothing (it is atomic); one of an asset the rail cannot
    /// read is presumed to have moved the payout's amount. Neither is the payout's transfer as
    /// far as the rail can prove.
    pub fn unproven(spent: i128, moved: Amount) -> LandedEffect {
        LandedEffect { transfer_matches: false, moved, fee_paid: spent }
    }
}

fn received_amount(received: i128) -> Amount {
    Amount::from_u128(u128::try_from(received).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_native_transfer_matches_only_at_its_amount_and_what_did_not_arrive_is_the_fee() {
        let exact = LandedEffect::of_native(1_005_000, 1_000_000, Some(1_000_000)).unwrap();
        assert_eq!(
            exact,
            LandedEffect {
                transfer_matches: true,
                moved: Amount::from_u128(1_000_000),
                fee_paid: 5_000
            }
        );
        let short = LandedEffect::of_native(905_000, 900_000, Some(1_000_000)).unwrap();
        assert!(!short.transfer_matches);
        assert_eq!(short.moved, Amount::from_u128(900_000), "booked at what arrived");
        let none = LandedEffect::of_native(5_000, -1, Some(1_000_000)).unwrap();
        assert_eq!((none.moved, none.fee_paid), (Amount::ZERO, 5_000));
    }

    #[test]
    fn a_token_transfer_moved_what_the_destination_gained_and_its_whole_native_spend_is_the_fee() {
        let effect = LandedEffect::of_token(2_044_280, Some(7), Some(7));
        assert!(effect.transfer_matches);
        assert_eq!((effect.moved, effect.fee_paid), (Amount::from_u128(7), 2_044_280));
        assert!(!LandedEffect::of_token(5_000, None, Some(7)).transfer_matches);
    }
}
