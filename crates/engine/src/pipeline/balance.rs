//! Balance check: each hot wallet's balance on its chain at a final block against what the ledger says it holds.

use payoutd_domain::{Amount, Asset, AssetCode, HotWallet, IncidentKind};

use super::standalone::StandaloneLine;
use super::{EvmChain, Pipeline, PipelineError, TickReport};
use crate::pipeline_store::{FundingKind, IncidentSubject, NewIncident, WalletBooks, WalletFunding, WalletLedger};
use crate::rail::RailWallet;

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

/// Whose balances were read, and when, for the comparison and its incident.
struct Seen<'a> {
    wallet_id: &'a str,
    address: String,
    /// Where the balances were read ("final block 120").
    at: String,
}

/// The books with their assets in one order, so two readings compare equal when they agree.
fn sorted(books: WalletBooks) -> WalletBooks {
    match books {
        WalletBooks::NotComparable => WalletBooks::NotComparable,
        WalletBooks::Comparable { mut ledger, mut opened } => {
            ledger.sort_by(|a, b| a.asset.as_str().cmp(b.asset.as_str()));
            opened.sort_by(|a, b| a.as_str().cmp(b.as_str()));
            WalletBooks::Comparable { ledger, opened }
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
                self.record_balance_check(&wallet.id, outcome, now, &mut report);
            }
        }
        report.add(self.check_rail_wallets(now).await?);
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
        let seen = Seen { wallet_id: &wallet.id, address: wallet.address.to_string(), at: format!("final block {block}") };
        self.compare_books(&seen, &chain.assets, at.balances, &ledger, &opened, now).await
    }

    /// The same for each rail without nonces whose hot wallet the ledger holds (Solana): compared
    /// only when the ledger, read before and after the rail's balances, held every transaction the
    /// wallet sent and did not move in between.
    async fn check_rail_wallets(&self, now: i64) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        for line in &self.standalone {
            let Some(wallet) = line.rail.hot_wallet() else { continue };
            if !self.balance_check_due(&wallet.id, now) {
                continue;
            }
            let outcome = self.check_rail_wallet(line, wallet, now).await?;
            self.record_balance_check(&wallet.id, outcome, now, &mut report);
        }
        Ok(report)
    }

    async fn check_rail_wallet(&self, line: &StandaloneLine, wallet: &RailWallet, now: i64) -> Result<CheckOutcome, PipelineError> {
        let mut assets = line.assets.clone();
        if !assets.iter().any(|a| a.code == wallet.native.code) {
            assets.push(wallet.native.clone()); // fees are paid in it even when nothing is paid out in it
        }
        let WalletBooks::Comparable { ledger, opened } = sorted(self.store.settled_wallet_books(&wallet.id).await?) else {
            return Ok(CheckOutcome::NotComparable);
        };
        let balances = match line.rail.wallet_balances(&assets).await {
            Ok(balances) => balances,
            Err(e) => {
                tracing::warn!(wallet = %wallet.id, error = %e, "cannot read the wallet's balances; checked again later");
                return Ok(CheckOutcome::Unread);
            }
        };
        assert_eq!(balances.len(), assets.len(), "the rail answers one balance per asset asked");
        if sorted(self.store.settled_wallet_books(&wallet.id).await?) != (WalletBooks::Comparable { ledger: ledger.clone(), opened: opened.clone() }) {
            return Ok(CheckOutcome::NotComparable); // a transaction was sent or settled meanwhile
        }
        let seen = Seen { wallet_id: &wallet.id, address: wallet.address.clone(), at: format!("the {} payout commitment", line.rail.name()) };
        self.compare_books(&seen, &assets, balances, &ledger, &opened, now).await
    }

    fn record_balance_check(&self, wallet_id: &str, outcome: CheckOutcome, now: i64, report: &mut TickReport) {
        let wait_ms = match outcome {
            CheckOutcome::NotComparable => self.config.balance_check_interval_ms / NOT_COMPARABLE_RETRY_DIVISOR,
            _ => self.config.balance_check_interval_ms,
        };
        self.balance_checked_at_ms.lock().expect("balance check times lock").insert(wallet_id.to_owned(), now + wait_ms);
        metrics::counter!("payoutd_balance_checks_total", "outcome" => outcome.label()).increment(1);
        if let CheckOutcome::Mismatched(n) = outcome {
            report.balance_mismatches += n;
        }
    }

    /// Compares each asset's balance as `seen` with the ledger's side of the wallet; the first
    /// comparison in an asset books the opening balance.
    async fn compare_books(
        &self,
        seen: &Seen<'_>,
        assets: &[Asset],
        balances: Vec<Amount>,
        ledger: &[WalletLedger],
        opened: &[AssetCode],
        now: i64,
    ) -> Result<CheckOutcome, PipelineError> {
        let mut mismatched = 0;
        for (asset, on_chain) in assets.iter().zip(balances) {
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
                    reference: format!("opening:{}:{}", seen.wallet_id, asset.code),
                    kind: FundingKind::Opening,
                    wallet_id: seen.wallet_id.to_owned(),
                    asset: asset.code.clone(),
                    amount: opening,
                    at_ms: now,
                };
                if !self.store.book_wallet_funding(&funding).await? {
                    // Another worker opened it from its own reading; compared on a later pass.
                    continue;
                }
                tracing::info!(wallet = %seen.address, asset = %asset.code, at = %seen.at, %opening, "opening balance booked for the balance check");
                books.arrived = books.arrived.checked_add(opening).expect("an opening fits in 256 bits");
            }
            if explained != books.arrived && self.open_balance_incident(seen, &asset.code, on_chain, &books, now).await? {
                mismatched += 1;
            }
        }
        Ok(if mismatched > 0 { CheckOutcome::Mismatched(mismatched) } else { CheckOutcome::Matched })
    }

    /// Opens the `balance_mismatch` incident for this difference, once: true if it is new.
    async fn open_balance_incident(&self, seen: &Seen<'_>, asset: &AssetCode, on_chain: Amount, books: &WalletLedger, now: i64) -> Result<bool, PipelineError> {
        let explained = on_chain.checked_add(books.left).expect("checked by the caller");
        let (direction, difference) = match explained.checked_sub(books.arrived) {
            Some(more) => ("more", more),
            None => ("less", books.arrived.checked_sub(explained).expect("the other side is larger")),
        };
        tracing::error!(wallet = %seen.address, %asset, at = %seen.at, %on_chain, direction, %difference, "hot wallet balance differs from the ledger");
        let detail = format!(
            "hot wallet {} holds {on_chain} {asset} at {}, {difference} {direction} than the ledger explains \
             ({} arrived, {} left in payouts and fees); record a funding with `payoutd wallet fund` if the wallet was topped up, \
             otherwise units moved that payoutd did not send",
            seen.address, seen.at, books.arrived, books.left
        );
        let incident = NewIncident::new(IncidentKind::BalanceMismatch, IncidentSubject::default(), detail, now);
        // The same difference seen again is the same incident; a new difference is a new one.
        let subject = format!("balance:{}:{asset}:{direction}:{difference}", seen.wallet_id);
        Ok(self.store.open_incident_once(&incident, &subject).await?)
    }
}
