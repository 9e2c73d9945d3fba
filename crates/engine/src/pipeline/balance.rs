//! Balance check: each hot wallet's balance on its chain at a final block against what the ledger says it holds.

use payoutd_domain::{Amount, AssetCode, HotWallet, IncidentKind};

use super::{EvmChain, Pipeline, PipelineError, TickReport};
use crate::pipeline_store::{FundingKind, IncidentSubject, NewIncident, WalletBooks, WalletFunding, WalletLedger};

/// After a comparison that could not be made (a settlement pending), the next try comes this many
/// times sooner than the configured interval.
const NOT_COMPARABLE_RETRY_DIVISOR: i64 = 8;

/// What one wallet's check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CheckOutcome {
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

impl Pipeline {
    /// Compares, for each hot wallet that is due, every configured asset's balance at the chain's
    /// final block with the ledger: what arrived (fundings) minus what left (payouts, fees). The
    /// first comparison in an asset books what the chain holds beyond the ledger as the wallet's
    /// opening balance; after it, any difference is a `balance_mismatch` incident.
    pub async fn balance_check_pass(&self) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let now = self.clock.now_ms();
        for chain in &self.chains {
            let due: Vec<&HotWallet> = chain.wallets.iter().filter(|w| self.balance_check_due(&w.id, now)).collect();
            if due.is_empty() {
                continue;
            }
            let block = match chain.rail.final_block().await {
                Ok(Some(block)) => block,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(chain = chain.rail.chain_id(), error = %e, "no final block; balances not checked this pass");
                    continue;
                }
            };
            for wallet in due {
                let outcome = self.check_wallet_balance(chain, wallet, block, now).await?;
                let wait_ms = match outcome {
                    CheckOutcome::NotComparable => self.config.balance_check_interval_ms / NOT_COMPARABLE_RETRY_DIVISOR,
                    _ => self.config.balance_check_interval_ms,
                };
                self.balance_checked_at_ms.lock().expect("balance check times lock").insert(wallet.id.clone(), now + wait_ms);
                metrics::counter!("payoutd_balance_checks_total", "outcome" => outcome.label()).increment(1);
                if let CheckOutcome::Mismatched(n) = outcome {
                    report.balance_mismatches += n;
                }
            }
        }
        Ok(report)
    }

    fn balance_check_due(&self, wallet_id: &str, now: i64) -> bool {
        self.balance_checked_at_ms.lock().expect("balance check times lock").get(wallet_id).is_none_or(|next| now >= *next)
    }

    async fn check_wallet_balance(&self, chain: &EvmChain, wallet: &HotWallet, block: u64, now: i64) -> Result<CheckOutcome, PipelineError> {
        let at = match chain.rail.wallet_at(&wallet.address, block, &chain.assets).await {
            Ok(at) => at,
            Err(e) => {
                tracing::warn!(wallet = %wallet.id, block, error = %e, "cannot read the wallet's balances; checked again later");
                return Ok(CheckOutcome::Unread);
            }
        };
        assert_eq!(at.balances.len(), chain.assets.len(), "the rail answers one balance per asset asked");
        let (ledger, opened) = match self.store.wallet_books(&wallet.id, at.nonce).await? {
            WalletBooks::NotComparable => return Ok(CheckOutcome::NotComparable),
            WalletBooks::Comparable { ledger, opened } => (ledger, opened),
        };
        let mut mismatched = 0;
        for (asset, on_chain) in chain.assets.iter().zip(at.balances) {
            let mut books = ledger.iter().find(|l| l.asset == asset.code).cloned().unwrap_or(WalletLedger {
                asset: asset.code.clone(),
                arrived: Amount::ZERO,
                left: Amount::ZERO,
            });
            let explained = on_chain.checked_add(books.left).expect("a wallet's balance plus its outflows fits in 256 bits");
            if !opened.contains(&asset.code) {
                // Whatever the chain holds beyond the ledger at the first comparison was there before
                // payoutd looked: the wallet's opening balance.
                let opening = explained.checked_sub(books.arrived).unwrap_or(Amount::ZERO);
                let funding = WalletFunding {
                    reference: format!("opening:{}:{}", wallet.id, asset.code),
                    kind: FundingKind::Opening,
                    wallet_id: wallet.id.clone(),
                    asset: asset.code.clone(),
                    amount: opening,
                    at_ms: now,
                };
                if !self.store.book_wallet_funding(&funding).await? {
                    // Another worker opened it from its own reading; compared on a later pass.
                    continue;
                }
                tracing::info!(wallet = %wallet.address, asset = %asset.code, block, %opening, "opening balance booked for the balance check");
                books.arrived = books.arrived.checked_add(opening).expect("an opening fits in 256 bits");
            }
            if explained != books.arrived && self.open_balance_incident(wallet, &asset.code, block, on_chain, &books, now).await? {
                mismatched += 1;
            }
        }
        Ok(if mismatched > 0 { CheckOutcome::Mismatched(mismatched) } else { CheckOutcome::Matched })
    }

    /// Opens the `balance_mismatch` incident for this difference, once: true if it is new.
    async fn open_balance_incident(
        &self,
        wallet: &HotWallet,
        asset: &AssetCode,
        block: u64,
        on_chain: Amount,
        books: &WalletLedger,
        now: i64,
    ) -> Result<bool, PipelineError> {
        let explained = on_chain.checked_add(books.left).expect("checked by the caller");
        let (direction, difference) = match explained.checked_sub(books.arrived) {
            Some(more) => ("more", more),
            None => ("less", books.arrived.checked_sub(explained).expect("the other side is larger")),
        };
        tracing::error!(wallet = %wallet.address, %asset, block, %on_chain, direction, %difference, "hot wallet balance differs from the ledger");
        let detail = format!(
            "hot wallet {} holds {on_chain} {asset} at final block {block}, {difference} {direction} than the ledger explains \
             ({} arrived, {} left in payouts and fees); record a funding with `payoutd wallet fund` if the wallet was topped up, \
             otherwise units moved that payoutd did not send",
            wallet.address, books.arrived, books.left
        );
        let incident = NewIncident::new(IncidentKind::BalanceMismatch, IncidentSubject::default(), detail, now);
        // The same difference seen again is the same incident; a new difference is a new one.
        let subject = format!("balance:{}:{asset}:{direction}:{difference}", wallet.id);
        Ok(self.store.open_incident_once(&incident, &subject).await?)
    }
}
