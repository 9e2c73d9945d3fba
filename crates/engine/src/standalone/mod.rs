//! The standalone rail family: rails whose attempts stand alone, each ended by the rail's own proof (a Solana transaction's expiry, a provider's answer for an idempotency key); one `StandaloneRail` port, one lifecycle.

mod behind;
pub mod finality;
pub mod landed;
mod lifecycle;
mod port;
mod reconcile;
mod relink;
mod remembered;

pub use port::{
    CarriedReference, Foreign, OutgoingSince, PrepareError, Prepared, RailWallet, StandaloneRail,
    StandaloneStatus, SubmitOutcome,
};

use std::sync::Arc;

use async_trait::async_trait;
use payoutd_domain::ledger::WalletSend;
use payoutd_domain::{
    Asset, AssetCode, Attempt, AttemptSlot, AttemptTx, Destination, Journal, Payout, TxRef,
};

use crate::pipeline::{
    BalanceCheck, Core, Detection, FeePaid, Landing, LastAttempt, NothingMoved, PaidFrom, Pipeline,
    PipelineError, RailFamily, Resolved, TickReport,
};

/// One standalone rail and the assets paid on it.
#[derive(Clone)]
pub struct StandaloneLine {
    pub rail: Arc<dyn StandaloneRail>,
    pub assets: Vec<Asset>,
}

impl StandaloneLine {
    fn codes(&self) -> Vec<AssetCode> {
        self.assets.iter().map(|a| a.code.clone()).collect()
    }
}

/// The standalone family on one rail.
pub struct StandaloneFamily {
    line: StandaloneLine,
    /// Whether a `records_behind_chain` incident of this rail may be open: until this process
    /// has looked once, and after a pass found the account behind (never asked on every pass).
    behind_seen: std::sync::atomic::AtomicBool,
}

impl Pipeline {
    /// Adds a standalone rail (Solana, a provider); its payouts run through the same lifecycle.
    pub fn with_standalone_rail(self, line: StandaloneLine) -> Pipeline {
        self.with_family(Box::new(StandaloneFamily::new(line)))
    }
}

impl StandaloneFamily {
    pub fn new(line: StandaloneLine) -> StandaloneFamily {
        StandaloneFamily { line, behind_seen: std::sync::atomic::AtomicBool::new(true) }
    }

    /// Where an attempt of this rail pays from: the rail's hot wallet when the ledger holds it (its
    /// fee payer), else an account held elsewhere.
    /// A provider attempt made while its account was not kept in the ledger names no wallet and
    /// settles to the world account.
    fn paid_from_rail(&self, attempt: &Attempt, payout: &Payout) -> PaidFrom {
        let (Some(wallet), Some(paying)) =
            (self.line.rail.hot_wallet(), attempt.slot.paying_wallet())
        else {
            return PaidFrom::Elsewhere;
        };
        // Booking one wallet's payout against another's account would be wrong money.
        assert_eq!(
            paying, wallet.id,
            "attempt {} was paid by a hot wallet its rail does not hold",
            attempt.id
        );
        PaidFrom::HotWallet {
            wallet_id: wallet.id.clone(),
            native: wallet.native.code.clone(),
            sent_as: self.sent_as(payout),
        }
    }

    /// What this line's attempts send for `payout`: the payout's own asset where the line pays it,
    /// else (a routed attempt) the one asset the line pays, whatever the route says today.
    fn sent_as(&self, payout: &Payout) -> AssetCode {
        if self.line.assets.iter().any(|a| a.code == payout.asset) {
            return payout.asset.clone();
        }
        let [only] = self.line.assets.as_slice() else {
            panic!(
                "payout {} in {} has an attempt on {}, which pays several other assets",
                payout.id,
                payout.asset,
                self.line.rail.name()
            )
        };
        only.code.clone()
    }

    /// The attempt the send guard remembers and the database lost, rebuilt from the guard's record
    /// for its rail to be asked about.
    fn lost_attempt(&self, record: &str, payout: &Payout) -> Result<Attempt, PipelineError> {
        remembered::attempt_of(record, payout).ok_or_else(|| {
            PipelineError::Refused(format!("the send guard's record {record:?} does not say enough for {} to be asked about it", self.line.rail.name()))
        })
    }

    /// The rail's own proof that the attempt is dead (an expired blockhash or an advanced durable
    /// account with no signature known; the provider's terminal failed state for our reference),
    /// or that it failed at finality: the same proof the resolver needs before a next attempt.
    /// With it, what a failure at finality cost the hot wallet (its fee).
    async fn prove_dead_by_rail(
        &self,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<(String, Option<FeePaid>), PipelineError> {
        let rail = &self.line.rail;
        match rail.status(attempt, payout).await.map_err(|e| PipelineError::RailUnavailable(e.0))? {
            StandaloneStatus::Dead { proof, .. } => Ok((proof, None)),
            StandaloneStatus::Reverted { reference, detail, fee_paid } => Ok((
                format!("{reference} failed at finality ({detail}): nothing but its fee moved"),
                Some(FeePaid { reference, amount: fee_paid }),
            )),
            other => Err(PipelineError::Refused(format!(
                "{} reports attempt {} as {other:?}: only its proof that the attempt moved nothing allows this verdict",
                rail.name(),
                attempt.attempt_no
            ))),
        }
    }
}

#[async_trait]
impl RailFamily for StandaloneFamily {
    fn assets(&self) -> Vec<&Asset> {
        self.line.assets.iter().collect()
    }

    fn attempts_max(&self) -> u32 {
        self.line.rail.attempts_max()
    }

    fn owns_slot(&self, slot: &AttemptSlot) -> bool {
        self.line.rail.owns(slot)
    }

    /// A standalone attempt stands alone: the rail prepares it from the payout's amount and
    /// destination, whichever asset the payout is in.
    fn pays_routed_payouts(&self) -> bool {
        true
    }

    /// The rail's hot wallet (Solana's fee payer), read by its shape as a stored destination is;
    /// a provider's account is no address of ours.
    fn own_wallets(&self) -> Vec<Destination> {
        let wallet = self.line.rail.hot_wallet();
        wallet
            .and_then(|w| {
                Destination::parse_stored(payoutd_domain::RailFamily::Provider, &w.address).ok()
            })
            .into_iter()
            .collect()
    }

    fn paid_from(&self, attempt: &Attempt, payout: &Payout) -> PaidFrom {
        self.paid_from_rail(attempt, payout)
    }

    async fn sync(&mut self, _core: &Core) -> Result<(), PipelineError> {
        Ok(()) // the rail registered its signing wallet when it was built
    }

    async fn sign_pass(&self, core: &Core) -> TickReport {
        self.sign_line(core).await
    }

    async fn resolve<'a>(
        &self,
        core: &Core,
        live: &[&'a (Attempt, Payout)],
    ) -> Vec<(&'a Attempt, Result<Resolved, PipelineError>)> {
        self.resolve_live(core, live)
            .await
            .into_iter()
            .map(|(attempt, outcome)| (attempt, outcome.map(Resolved::Done)))
            .collect()
    }

    fn detection_scope(&self) -> String {
        let rail = self.line.rail.as_ref();
        rail.reconcile_cursor_name().unwrap_or_else(|| rail.name().to_owned())
    }

    async fn reconcile_pass(
        &self,
        core: &Core,
        detection: &Detection<'_>,
    ) -> Result<TickReport, PipelineError> {
        self.reconcile_account(core, detection).await
    }

    async fn balance_pass(
        &self,
        core: &Core,
        balance: &BalanceCheck,
    ) -> Result<TickReport, PipelineError> {
        self.check_wallet(core, balance).await
    }

    async fn duplicate_landing(
        &self,
        reference: &TxRef,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<Option<Landing>, PipelineError> {
        Ok(self.landing_of(reference, payout, attempt).await)
    }

    async fn cancel(
        &self,
        core: &Core,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<AttemptTx, PipelineError> {
        self.cancel_attempt(core, payout, attempt).await
    }

    async fn prove_cannot_land(
        &self,
        _core: &Core,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<(), PipelineError> {
        self.prove_dead_by_rail(attempt, payout).await.map(|_| ())
    }

    async fn prove_nothing_moved(
        &self,
        core: &Core,
        payout: &Payout,
        attempts: &[Attempt],
    ) -> Result<NothingMoved, PipelineError> {
        match core.last_attempt(payout, attempts).await? {
            LastAttempt::Lost { record, .. } => {
                let lost = self.lost_attempt(&record, payout)?;
                let (proof, fee) = self.prove_dead_by_rail(&lost, payout).await?;
                tracing::info!(payout = %payout.id, attempt_no = lost.attempt_no, %proof, "the rail proves the attempt the database lost moved nothing");
                // A stored attempt's fee was booked when it ended; a lost one's never was.
                let journals = fee
                    .and_then(|fee| fee_journal(&self.paid_from_rail(&lost, payout), &fee))
                    .into_iter()
                    .collect();
                Ok(NothingMoved { attempt_no: lost.attempt_no, journals })
            }
            LastAttempt::Stored(last) => {
                self.prove_dead_by_rail(last, payout).await?;
                Ok(NothingMoved { attempt_no: last.attempt_no, journals: Vec::new() })
            }
            LastAttempt::NoneMade => Err(LastAttempt::no_attempt_to_judge()),
        }
    }

    async fn paid_journals(
        &self,
        core: &Core,
        payout: &Payout,
        attempts: &[Attempt],
    ) -> Result<Vec<Journal>, PipelineError> {
        let settle = |from: &PaidFrom| match from {
            PaidFrom::HotWallet { wallet_id, sent_as, .. } => Journal::settle_from_wallet(
                &payout.merchant_id,
                &payout.asset,
                payout.id.as_str(),
                payout.amount,
                &WalletSend { wallet_id: wallet_id.clone(), sent_as: sent_as.clone() },
            ),
            PaidFrom::Elsewhere => vec![Journal::settle(
                &payout.merchant_id,
                &payout.asset,
                payout.id.as_str(),
                payout.amount,
            )],
        };
        if let LastAttempt::Lost { record, .. } = core.last_attempt(payout, attempts).await? {
            // The attempt the database lost: the money left where the rail shows it landed, with its fee.
            let lost = self.lost_attempt(&record, payout)?;
            return match self
                .line
                .rail
                .status(&lost, payout)
                .await
                .map_err(|e| PipelineError::RailUnavailable(e.0))?
            {
                StandaloneStatus::Landed {
                    final_: true,
                    transfer_matches: true,
                    reference,
                    fee_paid,
                    ..
                } => {
                    let from = self.paid_from_rail(&lost, payout);
                    let fee = FeePaid { reference, amount: fee_paid };
                    Ok(settle(&from).into_iter().chain(fee_journal(&from, &fee)).collect())
                }
                other => Err(PipelineError::Refused(format!(
                    "{} reports the attempt the database lost as {other:?}: paid needs it landed, final, with the payout's transfer",
                    self.line.rail.name()
                ))),
            };
        }
        Ok(match attempts.last() {
            Some(last) => settle(&self.paid_from_rail(last, payout)),
            None => settle(&PaidFrom::Elsewhere),
        })
    }
}

/// The `fee` journal of what a landed transaction cost a hot wallet the ledger holds; none for zero
/// or for an account held elsewhere.
fn fee_journal(from: &PaidFrom, fee: &FeePaid) -> Option<Journal> {
    match from {
        PaidFrom::HotWallet { wallet_id, native, .. } if !fee.amount.is_zero() => {
            Some(Journal::fee(wallet_id, native, fee.reference.as_str(), fee.amount))
        }
        _ => None,
    }
}
