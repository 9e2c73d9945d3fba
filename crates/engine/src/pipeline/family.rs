//! The one port between the neutral stages and a rail family (an EVM chain, a standalone rail): what each stage asks of the family paying a payout's asset.

use async_trait::async_trait;
use payoutd_domain::{
    Amount, Asset, AssetCode, Attempt, AttemptSlot, AttemptTx, Destination, Journal, Payout,
    Routes, TxRef,
};

use super::balance::BalanceCheck;
use super::{Core, PipelineError, TickReport};
use crate::pipeline_store::AttemptSettlement;

/// The detection rules one family's reconciliation hands what it read to (`reconcile.rs`).
pub(crate) struct Detection<'a> {
    pub core: &'a Core,
    pub family: &'a dyn RailFamily,
}

/// Where an attempt's payout and fees leave from, for the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PaidFrom {
    /// A hot wallet the ledger holds: payouts settle from its account in the units of `sent_as`
    /// (the asset of the rail the attempt's slot names, whatever the route says today), fees in
    /// `native` leave it.
    HotWallet { wallet_id: String, native: AssetCode, sent_as: AssetCode },
    /// An account held elsewhere (a provider's): payouts settle to the world account.
    Elsewhere,
}

/// What resolving one attempt produced: work done now (marks, re-sends, a settlement written on
/// its own), or a settlement the sweep writes together with the others.
pub(crate) enum Resolved {
    Done(TickReport),
    Settle(Box<AttemptSettlement>, TickReport),
}

/// What a second payment's transfer did, as far as its rail can tell.
pub(crate) struct Landing {
    pub state: String,
    /// What it moved, in the payout's asset's base units: read from the transfer or the chain once
    /// final; zero only where the rail proves it moved nothing.
    pub moved: Amount,
    /// What it cost the hot wallet beyond the amount; zero where the rail cannot say.
    pub fee_paid: Amount,
    /// The rail will say no more: what it moved and cost can be booked. A transfer not final (or
    /// not readable yet) may still fail, so its books wait and it is judged again each pass.
    pub is_final: bool,
}

impl Landing {
    pub(crate) fn final_(state: String, moved: Amount, fee_paid: Amount) -> Landing {
        Landing { state, moved, fee_paid, is_final: true }
    }

    /// Presumed to have moved `amount` (the payout's), for good: the rail can never say more.
    pub(crate) fn presumed(state: &str, amount: Amount) -> Landing {
        Landing::final_(state.to_owned(), amount, Amount::ZERO)
    }

    /// Not final yet (or not readable yet): an alarm now, books (and what it moved) once the rail
    /// says more; nothing reads `moved` before.
    pub(crate) fn not_final(state: &str) -> Landing {
        Landing {
            state: state.to_owned(),
            moved: Amount::ZERO,
            fee_paid: Amount::ZERO,
            is_final: false,
        }
    }

    /// It moved nothing, as its rail proves (a failed or reverted transfer, no token moved).
    pub(crate) fn moved_nothing(&self) -> bool {
        self.is_final && self.moved.is_zero()
    }
}

/// A rail's proof that a payout's last attempt moved nothing.
pub(crate) struct NothingMoved {
    /// That attempt's number: a retry's next attempt follows it.
    pub attempt_no: u32,
    /// What the proven attempt cost that the ledger does not hold yet (the network fee of a lost
    /// attempt that failed on chain), booked with the verdict.
    pub journals: Vec<Journal>,
}

/// A rail family as the neutral stages see it. Each family keeps its own reasoning (how an attempt
/// is made, what proves it landed or dead) and answers in the lifecycle's terms: `AttemptEnd`s
/// settled by the core, proofs for a person's verdicts, references for reconciliation.
#[async_trait]
pub(crate) trait RailFamily: Send + Sync {
    /// The assets this family pays; no other family pays them.
    fn assets(&self) -> Vec<&Asset>;
    fn pays(&self, asset: &AssetCode) -> bool {
        self.assets().iter().any(|a| &a.code == asset)
    }
    /// Attempts one payout may have on this family's rail.
    fn attempts_max(&self) -> u32;
    /// Whether an attempt in `slot` is this family's (its rail's kind, its wallet or provider).
    /// Within one route, no two rails answer yes for the same slot (the configuration sees to it).
    fn owns_slot(&self, slot: &AttemptSlot) -> bool;
    /// Whether this family can make the later attempts of payouts in another family's asset (a
    /// route's rails after the first): its rail pays them as it pays its own asset.
    fn pays_routed_payouts(&self) -> bool;
    /// The family's own hot wallets, as destinations: never paid to.
    fn own_wallets(&self) -> Vec<Destination>;
    /// Where an attempt of this family pays from, for the ledger.
    fn paid_from(&self, attempt: &Attempt, payout: &Payout) -> PaidFrom;

    /// Brings the family's own records in line with its rail before the first pass.
    async fn sync(&mut self, core: &Core) -> Result<(), PipelineError>;
    /// Makes attempts for approved payouts and awaited next attempts, stores them, sends them.
    /// Errors are logged and counted inside: one family's failure holds no other back.
    async fn sign_pass(&self, core: &Core) -> TickReport;
    /// Resolves these live attempts (all of this family's assets) from the rail.
    async fn resolve<'a>(
        &self,
        core: &Core,
        live: &[&'a (Attempt, Payout)],
    ) -> Vec<(&'a Attempt, Result<Resolved, PipelineError>)>;
    /// What the family's reconciliation reads (a chain's blocks, an account's transfers), named the
    /// same by every worker: one worker at a time reads it.
    fn detection_scope(&self) -> String;
    /// Reads what left the family's accounts since its cursor and hands it to `detection`.
    async fn reconcile_pass(
        &self,
        core: &Core,
        detection: &Detection<'_>,
    ) -> Result<TickReport, PipelineError>;
    /// Compares each due hot wallet of the family with the ledger through `balance`.
    async fn balance_pass(
        &self,
        core: &Core,
        balance: &BalanceCheck,
    ) -> Result<TickReport, PipelineError>;
    /// Whether a listed transfer paying `attempt`'s payout a second time (the dead attempt's own,
    /// or another behind its reference) moved money: `None` when the rail proves it did not.
    async fn duplicate_landing(
        &self,
        reference: &TxRef,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<Option<Landing>, PipelineError>;

    /// An operator's cancel of the live attempt, by the rail's own means, stored then sent.
    async fn cancel(
        &self,
        core: &Core,
        payout: &Payout,
        attempt: &Attempt,
    ) -> Result<AttemptTx, PipelineError>;
    /// The rail's proof that a live attempt can never land (or the refusal saying why not).
    async fn prove_cannot_land(
        &self,
        core: &Core,
        attempt: &Attempt,
        payout: &Payout,
    ) -> Result<(), PipelineError>;
    /// The rail's proof that the payout's last attempt (stored, or only remembered by the send
    /// guard) moved nothing. Whatever the family's own records must learn from the proof is
    /// written before it returns.
    async fn prove_nothing_moved(
        &self,
        core: &Core,
        payout: &Payout,
        attempts: &[Attempt],
    ) -> Result<NothingMoved, PipelineError>;
    /// What a person's paid verdict books when no attempt is live.
    async fn paid_journals(
        &self,
        core: &Core,
        payout: &Payout,
        attempts: &[Attempt],
    ) -> Result<Vec<Journal>, PipelineError>;
}

/// The family paying `asset` as its own, if this process has one.
pub(crate) fn family_of<'a>(
    families: &'a [Box<dyn RailFamily>],
    asset: &AssetCode,
) -> Option<&'a dyn RailFamily> {
    families.iter().find(|f| f.pays(asset)).map(|f| f.as_ref())
}

/// The family that makes attempt `attempt_no` of `payout`: the rail its route names for that
/// number (its own asset's when unrouted).
pub(crate) fn family_for_attempt<'a>(
    families: &'a [Box<dyn RailFamily>],
    routes: &Routes,
    payout: &Payout,
    attempt_no: u32,
) -> Option<&'a dyn RailFamily> {
    family_of(families, routes.rail_for(&payout.asset, attempt_no))
}

/// The family whose rail made `attempt`: among the rails that may pay `payout` (its route), the
/// one owning the attempt's slot. The slot, not the attempt number, decides: an attempt stays with
/// the rail that made it whatever the configuration says today.
pub(crate) fn owner_of<'a>(
    families: &'a [Box<dyn RailFamily>],
    routes: &Routes,
    attempt: &Attempt,
    payout: &Payout,
) -> Option<&'a dyn RailFamily> {
    let mut owners = routes
        .rails_of(&payout.asset)
        .iter()
        .filter_map(|asset| family_of(families, asset))
        .filter(|f| f.owns_slot(&attempt.slot));
    let owner = owners.next();
    // Two rails claiming one attempt could each settle or retry it: wrong money.
    assert!(
        owners.next().is_none(),
        "two rails of {}'s route own attempt {}",
        payout.asset,
        attempt.id
    );
    owner
}
