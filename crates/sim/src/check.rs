//! The checker run after every step of a seed: the simulated chains against the store, the invariants of SPEC section 1, and at the end liveness, reconciliation and the balance check.

use std::collections::{BTreeMap, HashMap, HashSet};

use payoutd_domain::{Amount, IncidentKind, Payout, PayoutId, PayoutStatus, TxRef};
use payoutd_engine::store::PayoutQuery;

use super::{AUDIT_EVERY_CHECKS, ENDED_UNPAID, INCIDENTS_READ_MAX, PAYOUTS_READ_MAX, World};
use crate::chain::SimTx;
use crate::provider::Suspect;
use crate::solana::SIM_SOLANA_PAYER;
use payoutd_engine::standalone::StandaloneRail;

/// Reconciliation passes at the end of a seed at most (each reads a page of every listing).
const RECONCILE_PASSES_AT_END_MAX: usize = 1_000;
use payoutd_engine::pipeline_store::WalletBooks;

impl World {
    /// Reads the payouts that ended unpaid again if their counts moved since the last read.
    async fn refresh_ended_unpaid(&mut self) -> anyhow::Result<()> {
        let counts = self.store.count_payouts_by_status().await?;
        let ended_unpaid: Vec<(PayoutStatus, u64)> =
            counts.into_iter().filter(|(status, _)| ENDED_UNPAID.contains(status)).collect();
        if ended_unpaid != self.ended_unpaid_counts {
            self.ended_unpaid.clear();
            for status in ENDED_UNPAID {
                self.ended_unpaid.extend(
                    self.store
                        .payouts_in_status(status, PAYOUTS_READ_MAX)
                        .await?
                        .into_iter()
                        .map(|p| (p.id, status)),
                );
            }
            self.ended_unpaid_counts = ended_unpaid;
        }
        self.ended_unpaid_fresh = true;
        Ok(())
    }

    /// Every payout of the simulated merchant, a page at a time.
    async fn all_payouts(&self) -> anyhow::Result<BTreeMap<PayoutId, Payout>> {
        let mut payouts = BTreeMap::new();
        let mut query =
            PayoutQuery { key: None, status: None, before: None, limit: PAYOUTS_READ_MAX };
        loop {
            let page = self.store.list_payouts(&self.merchant, &query).await?;
            let full = page.len() == PAYOUTS_READ_MAX as usize;
            query.before = page.last().map(|p| p.id.clone());
            payouts.extend(page.into_iter().map(|p| (p.id.clone(), p)));
            if !full {
                return Ok(payouts);
            }
        }
    }

    /// The merchant's books beside the ledger audit: what it holds in each asset is its funding
    /// less the payouts that paid and the network fees of those that did not end unpaid. A fee kept
    /// after a failure, a cancel or a rejection (or refunded twice) shows here.
    async fn merchant_books(&self) -> anyhow::Result<Vec<String>> {
        let (payouts, balances) =
            (self.all_payouts().await?, self.store.balances(&self.merchant).await?);
        let mut violations = Vec::new();
        for (asset, funded) in [&self.eth, &self.sol, &self.usd].into_iter().zip(super::FUNDED) {
            let mut expected = Amount::from_u128(funded);
            for p in payouts.values().filter(|p| &p.asset == asset) {
                let paid = if p.status == PayoutStatus::Paid { p.amount } else { Amount::ZERO };
                let fee =
                    if ENDED_UNPAID.contains(&p.status) { Amount::ZERO } else { p.network_fee };
                expected = expected
                    .checked_sub(paid)
                    .and_then(|e| e.checked_sub(fee))
                    .expect("the simulated merchant never pays more than it has");
            }
            let held = balances
                .iter()
                .find(|b| &b.asset == asset)
                .map(|b| b.available.checked_add(b.held).expect("balances fit"));
            if held != Some(expected) {
                violations.push(format!(
                    "I2: merchant holds {held:?} of {asset}, its books say {expected}"
                ));
            }
        }
        Ok(violations)
    }

    /// The invariants of SPEC section 1 over the simulated chain and the store.
    #[allow(clippy::too_many_lines)]
    // the simulation's steps in the order a seed runs them, so a seed's schedule reads top to bottom.
    pub(super) async fn check(&mut self, at_end: bool) -> anyhow::Result<()> {
        let mut violations = Vec::new();
        if at_end {
            // payoutd's own reconciliation first (SPEC 8.10): the settle rounds may have made blocks
            // final, and listed late provider transfers, after their last tick.
            violations.extend(self.reconcile_to_the_end().await?);
        }
        let incidents =
            if at_end { self.store.open_incidents(INCIDENTS_READ_MAX).await? } else { Vec::new() };
        let of_kind = |kind: IncidentKind| -> Vec<String> {
            incidents.iter().filter(|i| i.kind == kind).map(|i| i.detail.clone()).collect()
        };
        let (duplicates, unmatched) =
            (of_kind(IncidentKind::DuplicateTransfer), of_kind(IncidentKind::UnmatchedTransfer));
        // A create the provider made past its contract can pay a payout a second time, which no rail
        // can prevent: it does not count while the seed runs, and at the end a transfer of its
        // reference counts out only once payoutd reported it by id as a duplicate_transfer (then
        // it is the platform's loss, booked as such), or, behind the reference of an attempt a
        // failover lost, once payoutd reported the reference as unmatched (no stored attempt
        // explains it, so that is all it can say).
        let suspects: Vec<_> = self.providers().iter().flat_map(|p| p.suspects()).collect();
        if at_end {
            self.trace(format!("late provider creates that moved money and their siblings: {suspects:?}; duplicate_transfer incidents: {duplicates:?}"));
        }
        let excused: HashSet<&String> = suspects
            .iter()
            .filter(|s| {
                if !at_end {
                    return s.late;
                }
                // Only the late one: its sibling behind the same reference is the payment a
                // person's verdict on the lost attempt may have booked.
                let unmatched_lost = s.late
                    && self.lost.contains(&s.reference)
                    && unmatched.iter().any(|u| u.contains(s.reference.as_str()));
                duplicates.iter().any(|d| names(d, &s.id)) || unmatched_lost
            })
            .map(|s| &s.id)
            .collect();
        // Foreign transfers are someone else's; what payoutd must do about them is checked at the end.
        let mined: Vec<SimTx> = self
            .chain
            .mined()
            .into_iter()
            .filter(|t| t.from == self.wallet && !t.cancel && !self.chain.is_foreign(&t.hash))
            .collect();
        // Which payout the store says each mined hash was made for: one read for the hashes not seen
        // before (a stored hash never changes its payout, so earlier answers stay true).
        let mut hashes: Vec<TxRef> =
            mined.iter().map(|t| TxRef::parse(&t.hash)).collect::<Result<_, _>>()?;
        // The Solana cluster's landed transfers count the same way (never a foreign one there).
        let solana_landed = self.solana.landed();
        hashes.extend(
            solana_landed.iter().map(|(s, _, _)| TxRef::parse(s)).collect::<Result<Vec<_>, _>>()?,
        );
        // The provider's transfers that moved or will move money count too, by our reference.
        let provider_paying: Vec<_> = self
            .providers()
            .iter()
            .flat_map(|p| p.paying())
            .filter(|(id, _, _, _)| !excused.contains(id))
            .collect();
        hashes.extend(
            provider_paying
                .iter()
                .map(|(_, r, _, _)| TxRef::parse(r))
                .collect::<Result<Vec<_>, _>>()?,
        );
        let unseen: Vec<TxRef> =
            hashes.iter().filter(|h| !self.tx_owners.contains_key(*h)).cloned().collect();
        if !unseen.is_empty() {
            self.tx_owners.extend(self.store.tx_owners(&unseen).await?);
        }
        let hash_to_payout = &self.tx_owners;
        let mut landed: HashMap<PayoutId, usize> = HashMap::new();
        for (tx, hash) in mined.iter().zip(&hashes) {
            match hash_to_payout.get(hash) {
                Some(id) => *landed.entry(id.clone()).or_default() += 1,
                None => violations.push(format!(
                    "I7: transfer {} (nonce {}, {} to {}) matches no attempt",
                    tx.hash, tx.nonce, tx.value, tx.to
                )),
            }
        }
        for ((signature, to, amount), hash) in solana_landed.iter().zip(&hashes[mined.len()..]) {
            match hash_to_payout.get(hash) {
                Some(id) => *landed.entry(id.clone()).or_default() += 1,
                None => violations.push(format!(
                    "I7: Solana transfer {signature} ({amount} to {to}) matches no attempt"
                )),
            }
        }
        for ((_, reference, to, amount), hash) in
            provider_paying.iter().zip(&hashes[mined.len() + solana_landed.len()..])
        {
            match hash_to_payout.get(hash) {
                Some(id) => *landed.entry(id.clone()).or_default() += 1,
                None => violations.push(format!(
                    "I7: provider transfer {reference} ({amount} to {to}) matches no attempt"
                )),
            }
        }
        for signature in self.solana.nonce_collisions() {
            violations.push(format!("durable nonce: {signature} can never land, another transaction used its nonce value (two live on one value)"));
        }
        for (id, n) in &landed {
            if *n > 1 {
                let attempts: Vec<String> = self
                    .store
                    .attempts_of(id)
                    .await?
                    .iter()
                    .map(|a| {
                        format!(
                            "{} {} created {} {:?}",
                            a.attempt_no, a.status, a.created_at_ms, a.slot
                        )
                    })
                    .collect();
                violations.push(format!(
                    "I1/I3: payout {id} has {n} landed transfers (attempts: {attempts:?})"
                ));
            }
        }
        // A payout that ended without paying must not have a landed transfer. Those end states are
        // final, so the set is read again only when their counts move, and the counts only after a
        // step that may have ended payouts (and at the end).
        if at_end || !self.ended_unpaid_fresh {
            self.refresh_ended_unpaid().await?;
        }
        for id in landed.keys() {
            if let Some(status) = self.ended_unpaid.get(id) {
                violations.push(format!("I6: payout {id} is {status} but a transfer of it landed"));
            }
        }
        // The audit reads every ledger entry; a breach stays in the books, so every few steps finds it.
        self.checks_run += 1;
        if at_end || self.checks_run.is_multiple_of(AUDIT_EVERY_CHECKS) {
            let audit = self.store.audit_ledger().await?;
            if !audit.is_clean() {
                violations.push(format!("I2: ledger audit {audit:?}"));
            }
        }
        if at_end {
            violations.extend(self.merchant_books().await?);
        }
        if at_end {
            // payoutd's own reconciliation (SPEC 8.10) must agree with this checker: every final foreign
            // transfer not from payoutd opened one unmatched_transfer incident, and nothing else did.
            let alarms: Vec<String> = self
                .store
                .open_incidents(INCIDENTS_READ_MAX)
                .await?
                .into_iter()
                .filter(|i| i.kind == IncidentKind::UnmatchedTransfer)
                .map(|i| i.detail)
                .collect();
            for alarm in &alarms {
                // With a violation already found (a deliberate defect's unstored transfer), alarms are
                // expected; so is one for a transfer whose attempt a failover lost (no stored attempt
                // explains it: a person reads it beside the payout's lost_attempt incident).
                let lost = self.lost.iter().any(|reference| alarm.contains(reference.as_str()));
                if violations.is_empty()
                    && !lost
                    && !self.chain.final_foreign().iter().any(|hash| alarm.contains(hash.as_str()))
                {
                    violations.push(format!("reconciliation false alarm: {alarm}"));
                }
            }
            for hash in self.chain.final_foreign() {
                if !alarms.iter().any(|alarm| alarm.contains(hash.as_str())) {
                    violations.push(format!(
                        "reconciliation missed the foreign transfer {hash} in a final block"
                    ));
                }
            }
            // The balance check must agree too: the ledger (payouts, fees, opening) explains every unit
            // that left the wallet, unless someone else spent from it.
            self.workers[0].balance_check_pass().await?;
            let mismatches: Vec<String> = self
                .store
                .open_incidents(INCIDENTS_READ_MAX)
                .await?
                .into_iter()
                .filter(|i| i.kind == IncidentKind::BalanceMismatch)
                .map(|i| i.detail)
                .collect();
            let foreign_spent = !self.chain.final_foreign().is_empty();
            // A lost attempt's landed transaction left the fee payer with no stored attempt to
            // explain it: the check is right to cry until a person's verdict books it.
            let lost_landed_on_solana =
                solana_landed.iter().any(|(signature, _, _)| self.lost.contains(signature));
            // So did a lost EVM attempt's transaction that carries no reference to relink it by
            // (a cancel the attempt had added): its fee is spent, and no attempt stores it.
            let lost_landed_on_chain = self.lost_landed_unlinked_on_chain().await?;
            if violations.is_empty() && !foreign_spent {
                let excused = |d: &String| {
                    (lost_landed_on_solana && d.contains(SIM_SOLANA_PAYER))
                        || (lost_landed_on_chain && d.contains(&self.wallet.to_string()))
                };
                for detail in mismatches.iter().filter(|d| !excused(d)) {
                    violations.push(format!("balance check false alarm: {detail}"));
                }
            }
            violations.extend(self.solana_books_unexplained().await?);
            // A second landing must be reported (an unreported one is a violation above), and only a
            // late provider create (or its sibling behind one reference) may be one unless something
            // else went wrong.
            if violations.is_empty() {
                for detail in
                    duplicates.iter().filter(|d| !suspects.iter().any(|s| names(d, &s.id)))
                {
                    violations.push(format!("duplicate_transfer false alarm: {detail}"));
                }
            }
            violations.extend(second_payments_unbooked(&suspects, &duplicates));
            // Every line whose records fell behind its chain (lost commits, a foreign send) caught
            // up once the chain was final and read back: none is left unable to sign.
            for behind in self.store.open_incidents(INCIDENTS_READ_MAX).await?.into_iter() {
                if behind.kind == IncidentKind::RecordsBehindChain {
                    violations.push(format!("a line never caught up: {}", behind.detail));
                }
            }
            violations.extend(self.check_rules().await?);
            if foreign_spent && mismatches.is_empty() {
                violations.push(
                    "the balance check missed what foreign transfers took from the hot wallet"
                        .to_owned(),
                );
            }
            let payouts = self.all_payouts().await?;
            for sub in &self.submitted {
                if !payouts.contains_key(&sub.id) {
                    violations
                        .push(format!("payout {} was accepted and is not in the store", sub.id));
                }
            }
            for (id, p) in &payouts {
                match p.status {
                    PayoutStatus::Requested | PayoutStatus::Approved | PayoutStatus::Processing => {
                        let attempts = self.store.attempts_of(id).await?;
                        let attempts: Vec<String> = attempts
                            .iter()
                            .map(|a| format!("{} {} {:?}", a.attempt_no, a.status, a.slot))
                            .collect();
                        violations.push(format!(
                            "liveness: payout {id} still {} (attempts: {attempts:?})",
                            p.status
                        ));
                    }
                    // A transfer excused above (behind the reference of a late create) may be the
                    // one that paid it: a payout paid with none counted is then no violation.
                    PayoutStatus::Paid
                        if landed.get(id).copied().unwrap_or(0) == 0
                            && paid_by_an_excused(&suspects, &excused, id) => {}
                    PayoutStatus::Paid if landed.get(id).copied().unwrap_or(0) != 1 => {
                        violations.push(format!(
                            "payout {id} is paid but {} transfers of it landed",
                            landed.get(id).copied().unwrap_or(0)
                        ));
                    }
                    _ => {}
                }
            }
        }
        self.landed = landed;
        self.report.violations.extend(violations);
        Ok(())
    }
}

impl World {
    /// Reconciliation passes until the Solana listing's cursor stops moving (a pass reads a page):
    /// it must then stand past every final transfer, whatever backlog the seed left.
    async fn reconcile_to_the_end(&self) -> anyhow::Result<Option<String>> {
        let name =
            self.solana.reconcile_cursor_name().expect("the simulated cluster lists its history");
        let mut cursor = self.store.rail_cursor(&name).await?;
        for _ in 0..RECONCILE_PASSES_AT_END_MAX {
            self.workers[0].reconcile_pass().await?;
            let moved = self.store.rail_cursor(&name).await?;
            if moved == cursor {
                break;
            }
            cursor = moved;
        }
        let read: usize = cursor.as_deref().unwrap_or("0").parse()?;
        let final_transfers = self.solana.final_transfers();
        Ok((read < final_transfers).then(|| format!("reconciliation: the Solana listing's cursor stopped at {read} of {final_transfers} final transfers")))
    }

    /// At the end, every lamport that left the Solana fee payer is in the ledger: payouts, fees,
    /// second payments and what a person's verdicts booked (an attempt the database lost among them).
    async fn solana_books_unexplained(&self) -> anyhow::Result<Option<String>> {
        let WalletBooks::Comparable { ledger, .. } =
            self.store.settled_wallet_books(self.solana.wallet_id()).await?
        else {
            return Ok(Some("the Solana fee payer's books are not settled at the end".to_owned()));
        };
        let Some(sol) = ledger.iter().find(|l| l.asset == self.sol) else {
            return Ok(Some("the ledger holds no SOL account for the fee payer".to_owned()));
        };
        let explained = sol.arrived.checked_sub(sol.left);
        let on_chain = self.solana.finalized_balance();
        Ok((explained != Some(on_chain)).then(|| {
            format!("the ledger explains {explained:?} lamports in the Solana fee payer ({} arrived, {} left), which holds {on_chain}", sol.arrived, sol.left)
        }))
    }
}

/// A `duplicate_transfer` incident's detail opens with the transfer it is about (`<rail>: <id>, ...`);
/// the rest may name others (the attempt's own transfer).
fn names(detail: &str, transfer_id: &str) -> bool {
    detail
        .split_once(", ")
        .is_some_and(|(head, _)| head.rsplit_once(": ").is_some_and(|(_, id)| id == transfer_id))
}

/// A second payment reported by a `duplicate_transfer` incident must be booked at what it moved
/// against the platform, whatever its amount: an incident that names a transfer that moved money
/// and says nothing was booked let money leave without a trace in the ledger.
fn second_payments_unbooked(suspects: &[Suspect], duplicates: &[String]) -> Vec<String> {
    suspects
        .iter()
        .flat_map(|s| duplicates.iter().filter(move |d| names(d, &s.id)))
        .filter(|d| !d.contains("platform:losses"))
        .map(|d| format!("a second payment that moved money is reported without its booking: {d}"))
        .collect()
}

/// Whether a transfer excused from the count (a late create, or its sibling behind one reference)
/// carries a reference of payout `id` (`<payout id>-<attempt no>`).
fn paid_by_an_excused(suspects: &[Suspect], excused: &HashSet<&String>, id: &PayoutId) -> bool {
    let prefix = format!("{id}-");
    suspects.iter().any(|s| excused.contains(&s.id) && s.reference.starts_with(&prefix))
}
