//! Double-entry ledger: journals of entries that sum to zero, built only by the constructors here.

use std::fmt;

use crate::asset::AssetCode;
use crate::ids::MerchantId;
use crate::money::Amount;

/// Which part of a merchant's balance an account holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bucket {
    Available,
    Held,
}

/// A ledger account. Merchant accounts carry the balances; the two world accounts stand for
/// money that entered (deposits) and left (settled payouts) the system.
///
/// Beside the merchants' side, the ledger keeps what each hot wallet holds on its chain: a
/// wallet's account rises with funding and falls with every payout it sends and every fee it
/// pays, so its balance is what the chain must show (the balance check compares the two).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Account {
    Merchant {
        merchant: MerchantId,
        bucket: Bucket,
    },
    WorldDeposits,
    WorldPayouts,
    /// What one hot wallet holds on its chain (by hot wallet id).
    Wallet(String),
    /// Units entering a hot wallet from outside (funding) or leaving it to a recipient.
    WorldExternal,
    /// Network fees (gas) and provider fees the platform paid.
    PlatformFees,
    /// Network fees the platform charged merchants with their payouts (per asset).
    PlatformFeesCharged,
    /// What a provider kept out of payouts it delivered (Bridge's gas, taken from the amount): it
    /// left with the payout, paid for by it, and reached no recipient.
    ProviderWithheld,
    /// What the platform paid out that no merchant owed: a payout paid a second time (a transfer
    /// of an attempt declared dead that landed after all). Its balance runs negative.
    PlatformLosses,
}

impl Account {
    pub fn available(merchant: &MerchantId) -> Account {
        Account::Merchant { merchant: merchant.clone(), bucket: Bucket::Available }
    }

    pub fn held(merchant: &MerchantId) -> Account {
        Account::Merchant { merchant: merchant.clone(), bucket: Bucket::Held }
    }

    /// Stable text form stored in `ledger_entries.account`.
    pub fn code(&self) -> String {
        match self {
            Account::Merchant { merchant, bucket: Bucket::Available } => {
                format!("{merchant}:available")
            }
            Account::Merchant { merchant, bucket: Bucket::Held } => format!("{merchant}:held"),
            Account::WorldDeposits => "world:deposits".to_owned(),
            Account::WorldPayouts => "world:payouts".to_owned(),
            Account::Wallet(id) => format!("wallet:{id}"),
            Account::WorldExternal => "world:external".to_owned(),
            Account::PlatformFees => "platform:fees".to_owned(),
            Account::PlatformFeesCharged => "platform:fees-charged".to_owned(),
            Account::PlatformLosses => "platform:losses".to_owned(),
            Account::ProviderWithheld => "world:withheld".to_owned(),
        }
    }
}

impl fmt::Display for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.code())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JournalKind {
    Deposit,
    Hold,
    Release,
    Settle,
    Transfer,
    Fee,
}

impl JournalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JournalKind::Deposit => "deposit",
            JournalKind::Hold => "hold",
            JournalKind::Release => "release",
            JournalKind::Settle => "settle",
            JournalKind::Transfer => "transfer",
            JournalKind::Fee => "fee",
        }
    }
}

/// Which hot wallet a payment left, and in which asset's units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalletSend {
    pub wallet_id: String,
    pub sent_as: AssetCode,
}

/// One line: money leaves `debit` and arrives in `credit`. Two entries are stored per line,
/// one negative, one positive, so "every journal sums to zero" is checkable with SQL alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posting {
    pub from: Account,
    pub to: Account,
    pub amount: Amount,
}

/// A balanced set of postings in one asset, referencing the entity that caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    pub kind: JournalKind,
    pub asset: AssetCode,
    /// The payout, deposit or transfer id this journal belongs to.
    pub reference: String,
    pub postings: Vec<Posting>,
}

impl Journal {
    fn single(
        kind: JournalKind,
        asset: &AssetCode,
        reference: &str,
        from: Account,
        to: Account,
        amount: Amount,
    ) -> Journal {
        assert!(!amount.is_zero(), "a journal never moves zero");
        assert_ne!(from, to, "a posting moves money between two different accounts");
        Journal {
            kind,
            asset: asset.clone(),
            reference: reference.to_owned(),
            postings: vec![Posting { from, to, amount }],
        }
    }

    /// Operator credit: money enters the merchant's available balance.
    pub fn deposit(
        merchant: &MerchantId,
        asset: &AssetCode,
        reference: &str,
        amount: Amount,
    ) -> Journal {
        Journal::single(
            JournalKind::Deposit,
            asset,
            reference,
            Account::WorldDeposits,
            Account::available(merchant),
            amount,
        )
    }

    /// Reserve for a payout (I2): available -> held.
    pub fn hold(
        merchant: &MerchantId,
        asset: &AssetCode,
        reference: &str,
        amount: Amount,
    ) -> Journal {
        Journal::single(
            JournalKind::Hold,
            asset,
            reference,
            Account::available(merchant),
            Account::held(merchant),
            amount,
        )
    }

    /// Only after a proven failure, a cancel before signing or a rejection: held -> available.
    pub fn release(
        merchant: &MerchantId,
        asset: &AssetCode,
        reference: &str,
        amount: Amount,
    ) -> Journal {
        Journal::single(
            JournalKind::Release,
            asset,
            reference,
            Account::held(merchant),
            Account::available(merchant),
            amount,
        )
    }

    /// A confirmed payout on a rail whose source account the ledger does not hold: the hold
    /// becomes a final debit.
    pub fn settle(
        merchant: &MerchantId,
        asset: &AssetCode,
        reference: &str,
        amount: Amount,
    ) -> Journal {
        Journal::single(
            JournalKind::Settle,
            asset,
            reference,
            Account::held(merchant),
            Account::WorldPayouts,
            amount,
        )
    }

    /// A confirmed payout sent from a hot wallet: the hold becomes a final debit, and the units
    /// leave the wallet for the recipient. The wallet sent the payout's own asset, or, for an
    /// attempt a route gave another rail, that rail's asset (same decimals, checked at start): then
    /// the wallet's side is a journal of its own, in the units the wallet holds.
    pub fn settle_from_wallet(
        merchant: &MerchantId,
        asset: &AssetCode,
        reference: &str,
        amount: Amount,
        from: &WalletSend,
    ) -> Vec<Journal> {
        Journal::with_wallet_send(Journal::settle(merchant, asset, reference, amount), from)
    }

    /// A second payment of a payout (transfer `reference`) that left a hot wallet: the platform
    /// pays it, not the merchant, whose hold was settled once; the units left the wallet.
    pub fn duplicate_from_wallet(
        asset: &AssetCode,
        reference: &str,
        amount: Amount,
        from: &WalletSend,
    ) -> Vec<Journal> {
        Journal::with_wallet_send(Journal::duplicate_at_provider(asset, reference, amount), from)
    }

    /// `journal` and the wallet's side of the same payment: a posting of the journal when the
    /// wallet sent the journal's asset, else a second journal in the wallet's asset.
    fn with_wallet_send(mut journal: Journal, from: &WalletSend) -> Vec<Journal> {
        let amount = journal.postings[0].amount;
        let posting = Posting {
            from: Account::Wallet(from.wallet_id.clone()),
            to: Account::WorldExternal,
            amount,
        };
        if from.sent_as == journal.asset {
            journal.postings.push(posting);
            return vec![journal];
        }
        let wallet_side = Journal {
            kind: journal.kind,
            asset: from.sent_as.clone(),
            reference: journal.reference.clone(),
            postings: vec![posting],
        };
        vec![journal, wallet_side]
    }

    /// A second payment of a payout (transfer `reference`) out of a provider account the ledger
    /// does not hold: the platform pays it, not the merchant.
    pub fn duplicate_at_provider(asset: &AssetCode, reference: &str, amount: Amount) -> Journal {
        Journal::single(
            JournalKind::Settle,
            asset,
            reference,
            Account::PlatformLosses,
            Account::WorldPayouts,
            amount,
        )
    }

    /// What a provider withheld on the way from payout `reference`'s amount (its gas): of what
    /// left as the payout, that much reached the provider, not the recipient.
    pub fn withheld(asset: &AssetCode, reference: &str, amount: Amount) -> Journal {
        Journal::single(
            JournalKind::Fee,
            asset,
            reference,
            Account::WorldPayouts,
            Account::ProviderWithheld,
            amount,
        )
    }

    /// The network fee a mined transaction of hot wallet `wallet_id` paid, in the chain's native
    /// asset: borne by the platform, never by a merchant.
    pub fn fee(
        wallet_id: &str,
        native_asset: &AssetCode,
        reference: &str,
        amount: Amount,
    ) -> Journal {
        Journal::single(
            JournalKind::Fee,
            native_asset,
            reference,
            Account::Wallet(wallet_id.to_owned()),
            Account::PlatformFees,
            amount,
        )
    }

    /// The network fee charged to a merchant with payout `reference`, at intake: available ->
    /// the platform's fees charged.
    pub fn network_fee(
        merchant: &MerchantId,
        asset: &AssetCode,
        reference: &str,
        amount: Amount,
    ) -> Journal {
        Journal::single(
            JournalKind::Fee,
            asset,
            reference,
            Account::available(merchant),
            Account::PlatformFeesCharged,
            amount,
        )
    }

    /// The network fee of payout `reference` given back with its hold: the payout ended without paying.
    pub fn network_fee_refund(
        merchant: &MerchantId,
        asset: &AssetCode,
        reference: &str,
        amount: Amount,
    ) -> Journal {
        Journal::single(
            JournalKind::Fee,
            asset,
            reference,
            Account::PlatformFeesCharged,
            Account::available(merchant),
            amount,
        )
    }

    /// Units that arrived in hot wallet `wallet_id` from outside (an operator's funding, or the
    /// balance found at the wallet's first balance check).
    pub fn wallet_funding(
        wallet_id: &str,
        asset: &AssetCode,
        reference: &str,
        amount: Amount,
    ) -> Journal {
        Journal::single(
            JournalKind::Deposit,
            asset,
            reference,
            Account::WorldExternal,
            Account::Wallet(wallet_id.to_owned()),
            amount,
        )
    }

    /// Internal move between two merchants' available balances.
    pub fn transfer(
        from: &MerchantId,
        to: &MerchantId,
        asset: &AssetCode,
        reference: &str,
        amount: Amount,
    ) -> Journal {
        Journal::single(
            JournalKind::Transfer,
            asset,
            reference,
            Account::available(from),
            Account::available(to),
            amount,
        )
    }

    /// The change this journal makes to one merchant bucket: (decrease, increase).
    pub fn effect_on(&self, account: &Account) -> (Amount, Amount) {
        let mut out = Amount::ZERO;
        let mut inn = Amount::ZERO;
        for p in &self.postings {
            if &p.from == account {
                out = out.checked_add(p.amount).expect("journal amounts fit in 256 bits");
            }
            if &p.to == account {
                inn = inn.checked_add(p.amount).expect("journal amounts fit in 256 bits");
            }
        }
        (out, inn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_moves_available_to_held() {
        let m = MerchantId::new();
        let (code, _, _) = AssetCode::parse("evm:1/USDC").unwrap();
        let j = Journal::hold(&m, &code, "po_x", Amount::from_u128(5));
        assert_eq!(j.effect_on(&Account::available(&m)), (Amount::from_u128(5), Amount::ZERO));
        assert_eq!(j.effect_on(&Account::held(&m)), (Amount::ZERO, Amount::from_u128(5)));
        assert_eq!(j.effect_on(&Account::WorldDeposits), (Amount::ZERO, Amount::ZERO));
    }

    #[test]
    fn a_payout_from_a_wallet_leaves_the_wallet_and_the_hold_together() {
        let m = MerchantId::new();
        let (code, _, _) = AssetCode::parse("evm:1/USDC").unwrap();
        let from = WalletSend { wallet_id: "hw_1".into(), sent_as: code.clone() };
        let [j] = <[Journal; 1]>::try_from(Journal::settle_from_wallet(
            &m,
            &code,
            "po_x",
            Amount::from_u128(7),
            &from,
        ))
        .unwrap();
        assert_eq!(j.effect_on(&Account::held(&m)), (Amount::from_u128(7), Amount::ZERO));
        assert_eq!(
            j.effect_on(&Account::Wallet("hw_1".into())),
            (Amount::from_u128(7), Amount::ZERO)
        );
        assert_eq!(j.effect_on(&Account::WorldExternal), (Amount::ZERO, Amount::from_u128(7)));
        let fee = Journal::fee("hw_1", &code, "at_x", Amount::from_u128(3));
        assert_eq!(fee.kind, JournalKind::Fee);
        assert_eq!(fee.effect_on(&Account::PlatformFees), (Amount::ZERO, Amount::from_u128(3)));
        assert_eq!(Account::Wallet("hw_1".into()).code(), "wallet:hw_1");
    }

    #[test]
    fn a_routed_payout_leaves_the_wallet_in_the_wallets_own_asset() {
        let m = MerchantId::new();
        let (payout_asset, _, _) = AssetCode::parse("evm:1/USDC").unwrap();
        let (provider_asset, _, _) = AssetCode::parse("provider:coinbase/USDC").unwrap();
        let from = WalletSend { wallet_id: "hw_cb".into(), sent_as: provider_asset.clone() };
        let journals =
            Journal::settle_from_wallet(&m, &payout_asset, "po_x", Amount::from_u128(7), &from);
        assert_eq!(journals.len(), 2, "one journal per asset, each balanced on its own");
        assert_eq!(
            (&journals[0].asset, journals[0].effect_on(&Account::held(&m))),
            (&payout_asset, (Amount::from_u128(7), Amount::ZERO))
        );
        assert_eq!(
            (&journals[1].asset, journals[1].effect_on(&Account::Wallet("hw_cb".into()))),
            (&provider_asset, (Amount::from_u128(7), Amount::ZERO))
        );
        assert_eq!(journals[1].effect_on(&Account::held(&m)), (Amount::ZERO, Amount::ZERO));
    }

    #[test]
    #[should_panic(expected = "never moves zero")]
    fn zero_journals_cannot_exist() {
        let (code, _, _) = AssetCode::parse("evm:1/USDC").unwrap();
        Journal::deposit(&MerchantId::new(), &code, "dep", Amount::ZERO);
    }
}
