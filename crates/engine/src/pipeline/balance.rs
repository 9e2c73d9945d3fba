//! Balance check, rail-neutral: a family reads each due hot wallet's balances on its rail; this stage compares them with what the ledger says the wallet holds.

use std::collections::HashMap;
use std::sync::Mutex;

use payoutd_domain::{Amount, Asset, AssetCode, IncidentKind};

use super::{Core, PipelineError, TickReport};
use crate::pipeline_store::{
    FundingKind, IncidentSubject, NewIncident, WalletBooks, WalletFunding, WalletLedger,
};

/// After a comparison that could not be made (a settlement pending), the next try comes this many
/// times sooner than the configured interval.
const NOT_COMPARABLE_RETRY_DIVISOR: i64 = 8;

/// What one wallet's check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckOutcome {
    /// Every asset's balance is what the ledger says.
    Matched,
    /// This many assets differ (each an incident, opened once per difference).
    Mismatched(u32),
    /// The ledger and the chain at the final block describe different moments; try again soon.
    NotComparable,
    /// The node could not be read.
    Unread,
}

impl CheckOutcome {
    fn label(self) -> &'static str {
        match self {
            CheckOutcome::Matched => "matched",
            CheckOutcome::Mismatched(_) => "mismatched",
            CheckOutcome::NotComparable => "not_comparable",
            CheckOutcome::Unread => "unread",
        }
    }
}

/// Whose balances were read, and when, for the comparison and its incident.
pub(crate) struct Seen<'a> {
    pub wallet_id: &'a str,
    pub address: String,
    /// Where the balances were read ("final block 120").
    pub at: String,
}

/// The books with their assets in one order, so two readings compare equal when they agree.
pub(crate) fn sorted(books: WalletBooks) -> WalletBooks {
    match books {
        WalletBooks::NotComparable => WalletBooks::NotComparable,
        WalletBooks::Comparable { mut ledger, mut opened } => {
            ledger.sort_by(|a, b| a.asset.as_str().cmp(b.asset.as_str()));
            opened.sort_by(|a, b| a.as_str().cmp(b.as_str()));
            WalletBooks::Comparable { ledger, opened }
        }
    }
}

/// When each hot wallet is due for its next check, per process.
#[derive(Default)]
pub(crate) struct BalanceCheck {
    checked_at_ms: Mutex<HashMap<String, i64>>,
}

impl BalanceCheck {
    pub(crate) fn due(&self, wallet_id: &str, now: i64) -> bool {
        self.checked_at_ms
            .lock()
            .expect("balance check times lock")
            .get(wallet_id)
            .is_none_or(|next| now >= *next)
    }

    pub(crate) fn record(
        &self,
        core: &Core,
        wallet_id: &str,
        outcome: CheckOutcome,
        now: i64,
        report: &mut TickReport,
    ) {
        let wait_ms = match outcome {
            CheckOutcome::NotComparable => {
                core.config.balance_check_interval_ms / NOT_COMPARABLE_RETRY_DIVISOR
            }
            _ => core.config.balance_check_interval_ms,
        };
        self.checked_at_ms
            .lock()
            .expect("balance check times lock")
            .insert(wallet_id.to_owned(), now + wait_ms);
        metrics::counter!("payoutd_balance_checks_total", "outcome" => outcome.label())
            .increment(1);
        if let CheckOutcome::Mismatched(n) = outcome {
            report.balance_mismatches += n;
        }
    }

    /// Compares each asset's balance as `seen` (`assets` and `balances` in the same order) with
    /// the ledger's side of the wallet; the first comparison in an asset books the opening balance.
    pub(crate) async fn compare_books(
        &self,
        core: &Core,
        seen: &Seen<'_>,
        (assets, balances): (&[Asset], Vec<Amount>),
        (ledger, opened): (&[WalletLedger], &[AssetCode]),
        now: i64,
    ) -> Result<CheckOutcome, PipelineError> {
        assert_eq!(assets.len(), balances.len(), "one balance per asset");
        let mut mismatched = 0;
        for (asset, on_chain) in assets.iter().zip(balances) {
            let mut books =
                ledger.iter().find(|l| l.asset == asset.code).cloned().unwrap_or(WalletLedger {
                    asset: asset.code.clone(),
                    arrived: Amount::ZERO,
                    left: Amount::ZERO,
                });
            let explained = on_chain
                .checked_add(books.left)
                .expect("a wallet's balance plus its outflows fits in 256 bits");
            if !opened.contains(&asset.code) {
                // Whatever the chain holds beyond the ledger at the first comparison was there before
                // payoutd looked: the wallet's opening balance.
                let opening = explained.checked_sub(books.arrived).unwrap_or(Amount::ZERO);
                let funding = WalletFunding {
                    reference: format!("opening:{}:{}", seen.wallet_id, asset.code),
                    kind: FundingKind::Opening,
                    wallet_id: seen.wallet_id.to_owned(),
                    asset: asset.code.clone(),
                    amount: opening,
                    at_ms: now,
                };
                if !core.store.book_wallet_funding(&funding).await? {
                    // Another worker opened it from its own reading; compared on a later pass.
                    continue;
                }
                tracing::info!(wallet = %seen.address, asset = %asset.code, at = %seen.at, %opening, "opening balance booked for the balance check");
                books.arrived =
                    books.arrived.checked_add(opening).expect("an opening fits in 256 bits");
            }
            if explained != books.arrived
                && self
                    .open_balance_incident(core, seen, &asset.code, on_chain, &books, now)
                    .await?
            {
                mismatched += 1;
            }
        }
        Ok(if mismatched > 0 {
            CheckOutcome::Mismatched(mismatched)
        } else {
            CheckOutcome::Matched
        })
    }

    /// Opens the `balance_mismatch` incident for this difference, once: true if it is new.
    async fn open_balance_incident(
        &self,
        core: &Core,
        seen: &Seen<'_>,
        asset: &AssetCode,
        on_chain: Amount,
        books: &WalletLedger,
        now: i64,
    ) -> Result<bool, PipelineError> {
        let explained = on_chain.checked_add(books.left).expect("checked by the caller");
        let (direction, difference) = match explained.checked_sub(books.arrived) {
            Some(more) => ("more", more),
            None => {
                ("less", books.arrived.checked_sub(explained).expect("the other side is larger"))
            }
        };
        tracing::error!(wallet = %seen.address, %asset, at = %seen.at, %on_chain, direction, %difference, "hot wallet balance differs from the ledger");
        let detail = format!(
            "hot wallet {} holds {on_chain} {asset} at {}, {difference} {direction} than the ledger explains \
             ({} arrived, {} left in payouts and fees); record a funding with `payoutd wallet fund` if the wallet was topped up, \
             otherwise units moved that payoutd did not send",
            seen.address, seen.at, books.arrived, books.left
        );
        let incident = NewIncident::new(
            IncidentKind::BalanceMismatch,
            IncidentSubject::default(),
            detail,
            now,
        );
        // The same difference seen again is the same incident; a new difference is a new one.
        let subject = format!("balance:{}:{asset}:{direction}:{difference}", seen.wallet_id);
        Ok(core.store.open_incident_once(&incident, &subject).await?)
    }
}
