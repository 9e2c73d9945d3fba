//! A standalone rail's account read back: what left it since a stored cursor (for the neutral detection rules), and its hot wallet's balances (for the balance check).

use std::collections::HashSet;

use payoutd_domain::{Amount, Attempt, AttemptStatus, Payout, TxRef};

use super::{StandaloneFamily, StandaloneStatus};
use crate::pipeline::{
    BalanceCheck, CheckOutcome, Core, Detection, Landing, PipelineError, Seen, TickReport, sorted,
};
use crate::pipeline_store::WalletBooks;
use crate::rail::ReadError;

impl StandaloneFamily {
    /// Everything that left the rail's account since the stored cursor, at finality, must be a
    /// stored attempt's; anything else opens an `unmatched_transfer` incident, once per reference.
    pub(super) async fn reconcile_account(
        &self,
        core: &Core,
        detection: &Detection<'_>,
    ) -> Result<TickReport, PipelineError> {
        let rail = self.line.rail.as_ref();
        let mut report = TickReport::default();
        let Some(name) = rail.reconcile_cursor_name() else { return Ok(report) };
        let cursor = core.store.rail_cursor(&name).await?;
        let since = match rail.outgoing_since(cursor.as_deref()).await {
            Ok(since) => since,
            Err(e) => {
                tracing::warn!(rail = rail.name(), error = %e, "cannot list the account's transfers; not reconciling this pass");
                return Ok(report);
            }
        };
        assert!(
            cursor.is_some() || since.refs.is_empty(),
            "{} judged transfers before its starting point",
            rail.name()
        );
        // A transfer the rail names by its own id is judged by that id (two behind one reference
        // are two payments); the others by their reference.
        let named: HashSet<&TxRef> = since.carried.iter().map(|c| &c.reference).collect();
        let by_reference: Vec<TxRef> =
            since.refs.iter().filter(|r| !named.contains(r)).cloned().collect();
        report.add(detection.open_duplicates(&by_reference, rail.name()).await?);
        report.add(detection.open_second_transfers(&since.carried, rail.name()).await?);
        let unknown = detection.not_stored(&since.refs).await?;
        let foreign = if unknown.is_empty() {
            Vec::new()
        } else {
            match rail.outgoing_of(&unknown).await {
                Ok(foreign) => foreign,
                Err(e) => {
                    tracing::warn!(rail = rail.name(), error = %e, "cannot read unmatched transfers; not reconciling this pass");
                    return Ok(report);
                }
            }
        };
        for transfer in &foreign {
            if self.relinked(core, transfer).await? {
                report.relinked += 1;
                continue;
            }
            let reference = &transfer.reference;
            tracing::error!(rail = rail.name(), %reference, "transfer out of a hot wallet matches no stored attempt");
            let detail = format!(
                "{} sent {reference}, which matches no attempt payoutd stored",
                rail.name()
            );
            report.unmatched_transfers +=
                u32::from(detection.open_unmatched(reference, detail).await?);
        }
        // A cursor that did not move is not written again (one write saved per rail and pass).
        if let Some(next) = since.cursor.filter(|next| Some(next.as_str()) != cursor.as_deref()) {
            core.store.advance_rail_cursor(&name, cursor.as_deref(), &next).await?;
        }
        Ok(report)
    }

    /// What a listed transfer of `attempt` did: by the rail's own status of the attempt when it is
    /// the attempt's stored reference, else by the rail's status of that transfer (a second one
    /// behind the reference). Only a proof of death (a provider's failed transfer) clears it, or
    /// the rail naming it the attempt's one payment (its own transfer failed, this one did not).
    pub(super) async fn landing_of(
        &self,
        transfer: &TxRef,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Option<Landing> {
        let rail = self.line.rail.as_ref();
        let status = if attempt.txs.iter().any(|t| &t.hash == transfer) {
            rail.status(attempt, payout).await
        } else {
            match self.stands_in_for_own(transfer, payout, attempt).await {
                Ok(true) => return None,
                Ok(false) => rail.transfer_status(transfer, attempt, payout).await,
                // Unknown now: judged again on a later pass, nothing booked meanwhile.
                Err(e) => Err(ReadError(format!(
                    "its place beside the attempt's own transfer cannot be read: {}",
                    e.0
                ))),
            }
        };
        match status {
            Ok(StandaloneStatus::Dead { .. }) => None,
            Ok(StandaloneStatus::Reverted { fee_paid, detail, .. }) => Some(Landing::final_(
                format!("failed at finality ({detail})"),
                Amount::ZERO,
                fee_paid,
            )),
            Ok(StandaloneStatus::Landed { final_: true, moved, fee_paid, .. }) => {
                Some(Landing::final_("landed, final".to_owned(), moved, fee_paid))
            }
            Ok(other) => {
                Some(Landing::not_final(&format!("which the rail now reports as {other:?}")))
            }
            Err(e) => Some(Landing::not_final(&format!("whose state cannot be read ({e})"))),
        }
    }

    /// Whether `transfer` is the live or settled `attempt`'s one payment although the attempt
    /// recorded another: the rail proves the recorded one moved nothing (the provider failed it)
    /// and reports the attempt by this one, which carries the same reference
    /// (`StandaloneStatus::Unrecognised` names it for a person).
    async fn stands_in_for_own(
        &self,
        transfer: &TxRef,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<bool, ReadError> {
        let Some(own) = attempt.slot.transfer_id() else { return Ok(false) };
        if attempt.status == AttemptStatus::Dead || own == transfer {
            return Ok(false);
        }
        let rail = self.line.rail.as_ref();
        if !matches!(
            rail.transfer_status(own, attempt, payout).await?,
            StandaloneStatus::Dead { .. }
        ) {
            return Ok(false);
        }
        Ok(match rail.status(attempt, payout).await? {
            StandaloneStatus::Unrecognised { reference, .. }
            | StandaloneStatus::Landed { reference, .. } => &reference == transfer,
            _ => false,
        })
    }

    /// The rail's hot wallet (when the ledger holds one, as for Solana), compared only when the
    /// ledger, read before and after the rail's balances, held every transaction the wallet sent
    /// and did not move in between.
    pub(super) async fn check_wallet(
        &self,
        core: &Core,
        balance: &BalanceCheck,
    ) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        let now = core.clock.now_ms();
        let Some(wallet) = self.line.rail.hot_wallet() else { return Ok(report) };
        if !balance.due(&wallet.id, now) {
            return Ok(report);
        }
        let outcome = self.compare_wallet(core, balance, now).await?;
        balance.record(core, &wallet.id, outcome, now, &mut report);
        Ok(report)
    }

    async fn compare_wallet(
        &self,
        core: &Core,
        balance: &BalanceCheck,
        now: i64,
    ) -> Result<CheckOutcome, PipelineError> {
        let line = &self.line;
        let wallet = line.rail.hot_wallet().expect("checked by the caller");
        let mut assets = line.assets.clone();
        if !assets.iter().any(|a| a.code == wallet.native.code) {
            assets.push(wallet.native.clone()); // fees are paid in it even when nothing is paid out in it
        }
        let WalletBooks::Comparable { ledger, opened } =
            sorted(core.store.settled_wallet_books(&wallet.id).await?)
        else {
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
        if sorted(core.store.settled_wallet_books(&wallet.id).await?)
            != (WalletBooks::Comparable { ledger: ledger.clone(), opened: opened.clone() })
        {
            return Ok(CheckOutcome::NotComparable); // a transaction was sent or settled meanwhile
        }
        let seen = Seen {
            wallet_id: &wallet.id,
            address: wallet.address.clone(),
            at: format!("the {} payout commitment", line.rail.name()),
        };
        balance.compare_books(core, &seen, (&assets, balances), (&ledger, &opened), now).await
    }
}
