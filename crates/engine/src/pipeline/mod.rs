//! The payout pipeline: its configuration, the worker loop, and the stages every rail family shares; each family (EVM, standalone rails) brings its own reasoning.
//!
//! `Pipeline` only wires: the neutral `Core` (store, clock, configuration, send guard), one stage
//! type per stage (`policy`, `settle`, `resolve`, `reconcile`, `balance`, `operator`) and the rail
//! families behind `RailFamily`. No stage here names a rail.

mod balance;
mod core;
mod family;
mod guard;
mod lanes;
pub(crate) use guard::Guard;
mod operator;
mod policy;
mod reconcile;
mod resolve;
mod settle;

pub(crate) use self::balance::{BalanceCheck, CheckOutcome, Seen, sorted};
pub(crate) use self::core::{Core, LastAttempt};
pub(crate) use self::family::{Detection, Landing, NothingMoved, PaidFrom, RailFamily, Resolved};
pub(crate) use self::guard::GUARD_RECORD_SEPARATOR;
pub use self::guard::guard_key_of;
pub use self::lanes::Lane;
pub use self::reconcile::CarriedReference;
pub(crate) use self::settle::{AttemptEnd, FeePaid, MinedTx, PayoutEnd};

use std::collections::HashMap;
use std::sync::Arc;

use payoutd_domain::{
    Amount, AssetCode, AttemptTx, EventType, Journal, Payout, PayoutId, PayoutStatus,
};

use crate::clock::Clock;
use crate::pipeline_store::PipelineStore;
use crate::rail::SendGuard;
use crate::store::{NewEvent, PayoutTransition, StoreError};

/// Bounds of one pass of each worker, and the timers of recovery.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    pub policy_batch_max: u32,
    pub sign_batch_max: u32,
    pub resolve_batch_max: u32,
    /// Same merchant, destination, asset and amount within this window: held for review.
    pub near_duplicate_window_ms: i64,
    /// Re-send the stored bytes of an attempt with no receipt after this long (lost from mempools).
    pub rebroadcast_after_ms: i64,
    /// Replace (same slot, higher fees) an attempt with no receipt after this long, where the rail bids fees.
    pub replace_after_ms: i64,
    pub fee_bump_bps: u32,
    /// Pause of a worker lane after a round that found no work.
    pub idle_sleep_ms: u64,
    /// Per-asset blast-radius caps (I8); assets without an entry are uncapped.
    pub caps: HashMap<AssetCode, Caps>,
    /// How often each hot wallet's balance on its chain is compared with the ledger.
    pub balance_check_interval_ms: i64,
    /// An attempt still live this long after its creation opens an `attempt_unresolved` incident.
    pub attempt_unresolved_after_ms: i64,
    #[cfg(feature = "defects")]
    pub defects: Defects,
}

/// Deliberately broken behaviours, compiled only with the `defects` feature: the simulator must
/// find a violation for each, or it proves nothing when it finds none.
#[cfg(feature = "defects")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Defects {
    /// On a send whose outcome is unknown, sign the payout again in a new place and send it.
    pub resign_on_timeout: bool,
    /// On a re-send, sign the payout again in a new place instead of re-sending the stored bytes.
    pub resign_on_retry: bool,
    /// On a send whose outcome is unknown, fail the payout and release the hold.
    pub recredit_on_unknown: bool,
    /// A person's verdict is taken without the rail's proof that nothing moved or can still land.
    pub verdict_without_proof: bool,
    /// Attempts live past `attempt_unresolved_after_ms` open no incident.
    pub unresolved_not_escalated: bool,
    /// A dead attempt's transfer seen on the account opens no incident and books nothing.
    pub duplicates_unreported: bool,
    /// A transfer named by the rail's own id behind a stored attempt's reference (a second one, or
    /// one behind a dead attempt) opens no incident and books nothing.
    pub second_transfers_unreported: bool,
    /// Caps are checked when a payout is approved, never again when its first attempt is made.
    pub caps_unchecked_at_signing: bool,
    /// The configured send guard is never asked: an attempt the database lost is made again.
    pub send_guard_ignored: bool,
    /// A person's verdict books the payout's end for the merchant only: nothing out of the hot
    /// wallet the money left, no fee.
    pub verdict_books_wallet_nothing: bool,
    /// A second payment that moved another amount than the payout's is taken as having moved
    /// nothing: nothing booked, and its incident closes by itself.
    pub second_payment_exact_amount_only: bool,
}

pub const POLICY_BATCH_MAX_DEFAULT: u32 = 256;
pub const SIGN_BATCH_MAX_DEFAULT: u32 = 256;
/// Attempts one sweep leases, reads and settles; a larger sweep spreads the sweep query and the
/// settlement transaction over more attempts (the node's receipt reads grow with it either way).
pub const RESOLVE_BATCH_MAX_DEFAULT: u32 = 1_024;
pub const NEAR_DUPLICATE_WINDOW_MS_DEFAULT: i64 = 10 * 60 * 1000;
pub const REBROADCAST_AFTER_MS_DEFAULT: i64 = 6_000;
pub const REPLACE_AFTER_MS_DEFAULT: i64 = 60_000;
/// Geth needs +10% on both fee fields; 12.5% leaves room for rounding on every client.
pub const FEE_BUMP_BPS_DEFAULT: u32 = 1_250;
pub const IDLE_SLEEP_MS_DEFAULT: u64 = 200;
pub const HOUR_MS: i64 = 3_600_000;
pub const BALANCE_CHECK_INTERVAL_MS_DEFAULT: i64 = 15_000;
/// A day's key window at a provider plus an hour: past it no rail's own reasoning is still waiting
/// for a proof that is due.
pub const ATTEMPT_UNRESOLVED_AFTER_MS_DEFAULT: i64 = 25 * HOUR_MS;
/// Live attempts resolved at once by one sweep (receipt reads and settlements in flight).
pub const RESOLVE_CONCURRENCY_MAX: usize = 16;
/// How long a sweep holds the attempts it took; a killed worker's are free again after it.
pub const RESOLVE_LEASE_MS: i64 = 10_000;
/// How long one worker holds a family's reconciliation (released when its pass ends); a killed
/// worker's is free again after it, and a pass running longer only lets a second reader repeat it.
pub const DETECTION_LEASE_MS: i64 = 30_000;

impl Default for PipelineConfig {
    fn default() -> PipelineConfig {
        PipelineConfig {
            policy_batch_max: POLICY_BATCH_MAX_DEFAULT,
            sign_batch_max: SIGN_BATCH_MAX_DEFAULT,
            resolve_batch_max: RESOLVE_BATCH_MAX_DEFAULT,
            near_duplicate_window_ms: NEAR_DUPLICATE_WINDOW_MS_DEFAULT,
            rebroadcast_after_ms: REBROADCAST_AFTER_MS_DEFAULT,
            replace_after_ms: REPLACE_AFTER_MS_DEFAULT,
            fee_bump_bps: FEE_BUMP_BPS_DEFAULT,
            idle_sleep_ms: IDLE_SLEEP_MS_DEFAULT,
            caps: HashMap::new(),
            balance_check_interval_ms: BALANCE_CHECK_INTERVAL_MS_DEFAULT,
            attempt_unresolved_after_ms: ATTEMPT_UNRESOLVED_AFTER_MS_DEFAULT,
            #[cfg(feature = "defects")]
            defects: Defects::default(),
        }
    }
}

/// Hourly ceilings on what may be signed, per destination and per hot wallet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub per_destination_per_hour: Amount,
    pub per_wallet_per_hour: Amount,
}

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no such payout")]
    NotFound,
    #[error("payout is {0}; this action needs another state")]
    WrongState(PayoutStatus),
    #[error("refused: {0}")]
    Refused(String),
    #[error("the rail could not be read: {0}")]
    RailUnavailable(String),
}

/// What one tick did, for logs, metrics and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TickReport {
    pub approved: u32,
    pub held: u32,
    pub signed: u32,
    pub sent: u32,
    pub confirmed: u32,
    pub failed: u32,
    pub needs_attention: u32,
    pub rebroadcasts: u32,
    pub replacements: u32,
    /// Transfers out of a hot wallet that no stored transaction explains (incidents opened).
    pub unmatched_transfers: u32,
    /// Attempts proven dead whose payout now waits for its next attempt.
    pub next_attempts: u32,
    /// Hot wallet balances found different from the ledger (incidents opened).
    pub balance_mismatches: u32,
    /// Transfers of attempts declared dead found on the rail (incidents opened).
    pub duplicate_transfers: u32,
    /// Attempts left unresolved past the configured age (incidents opened).
    pub unresolved_attempts: u32,
    /// Transactions whose attempt the database lost, found on chain by the reference they carry
    /// and recorded as their payout's attempt again.
    pub relinked: u32,
}

impl TickReport {
    pub fn did_work(&self) -> bool {
        *self != TickReport::default()
    }

    /// Adds this tick's work to the process's Prometheus counters.
    fn export(&self) {
        for (name, n) in [
            ("payoutd_attempts_signed_total", self.signed),
            ("payoutd_sends_total", self.sent),
            ("payoutd_rebroadcasts_total", self.rebroadcasts),
            ("payoutd_replacements_total", self.replacements),
            ("payoutd_next_attempts_total", self.next_attempts),
            ("payoutd_unmatched_transfers_total", self.unmatched_transfers),
            ("payoutd_balance_mismatches_total", self.balance_mismatches),
            ("payoutd_duplicate_transfers_total", self.duplicate_transfers),
            ("payoutd_lost_attempts_relinked_total", self.relinked),
            ("payoutd_unresolved_attempts_total", self.unresolved_attempts),
        ] {
            metrics::counter!(name).increment(u64::from(n));
        }
        for (outcome, n) in [
            ("paid", self.confirmed),
            ("failed", self.failed),
            ("needs_attention", self.needs_attention),
        ] {
            metrics::counter!("payoutd_payouts_settled_total", "outcome" => outcome)
                .increment(u64::from(n));
        }
    }

    pub(crate) fn add(&mut self, other: TickReport) {
        self.approved += other.approved;
        self.held += other.held;
        self.signed += other.signed;
        self.sent += other.sent;
        self.confirmed += other.confirmed;
        self.failed += other.failed;
        self.needs_attention += other.needs_attention;
        self.rebroadcasts += other.rebroadcasts;
        self.replacements += other.replacements;
        self.unmatched_transfers += other.unmatched_transfers;
        self.next_attempts += other.next_attempts;
        self.balance_mismatches += other.balance_mismatches;
        self.duplicate_transfers += other.duplicate_transfers;
        self.unresolved_attempts += other.unresolved_attempts;
        self.relinked += other.relinked;
    }
}

/// How an operator settles a payout that needs attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Paid,
    Failed,
    /// The last attempt is proven to have moved nothing: start the next one under the same hold.
    Retry,
}

impl Verdict {
    /// The verdict an operator names (`paid`, `failed`, `retry`), as the API and the dashboard
    /// take it; `None` for any other word.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "paid" => Some(Self::Paid),
            "failed" => Some(Self::Failed),
            "retry" => Some(Self::Retry),
            _ => None,
        }
    }
}

/// The workers of every stage over every configured rail family.
pub struct Pipeline {
    core: Core,
    /// Each configured rail family: an EVM chain, a standalone rail. An asset is paid by one only.
    families: Vec<Box<dyn RailFamily>>,
    balance: BalanceCheck,
}

impl Pipeline {
    /// A pipeline with no rail yet: add each with `with_evm_chain` and `with_standalone_rail`.
    pub fn new(
        store: Arc<dyn PipelineStore>,
        clock: Arc<dyn Clock>,
        config: PipelineConfig,
    ) -> Pipeline {
        let books_cursor = std::sync::Mutex::new(crate::pipeline_store::BooksCursor::start());
        let core = Core {
            store,
            clock,
            config,
            guard: guard::Guard::none(),
            books_cursor,
            own_wallets: Vec::new(),
            routes: payoutd_domain::Routes::default(),
            reference_key: tokio::sync::OnceCell::new(),
        };
        Pipeline { core, families: Vec::new(), balance: BalanceCheck::default() }
    }

    /// Adds the optional Redis send guard (SPEC 4 step 3).
    pub fn with_guard(mut self, guard: Arc<dyn SendGuard>) -> Pipeline {
        #[cfg(feature = "defects")]
        if self.core.config.defects.send_guard_ignored {
            return self;
        }
        self.core.guard = guard::Guard::of(guard);
        self
    }

    /// Adds a rail family (`with_evm_chain`, `with_standalone_rail` wrap this); an asset is paid
    /// by one family only.
    pub(crate) fn with_family(mut self, family: Box<dyn RailFamily>) -> Pipeline {
        for asset in family.assets() {
            assert!(
                self.family_of(&asset.code).is_none(),
                "asset {} is configured on two rails",
                asset.code
            );
        }
        self.families.push(family);
        self.core.own_wallets = self.own_wallets();
        self
    }

    /// Adds the routes across rails, once every family is added: each rail a route names must be
    /// one of this pipeline's, and each after the first one that pays routed payouts.
    pub fn with_routes(mut self, routes: payoutd_domain::Routes) -> Pipeline {
        for route in routes.iter() {
            for (position, asset) in route.rails().iter().enumerate() {
                let family = self.family_of(asset).unwrap_or_else(|| {
                    panic!("the route of {} names {asset}, which no rail here pays", route.asset())
                });
                assert!(
                    position == 0 || family.pays_routed_payouts(),
                    "the rail paying {asset} cannot make attempts for {}",
                    route.asset()
                );
            }
        }
        self.core.routes = routes;
        self
    }

    pub fn store(&self) -> &Arc<dyn PipelineStore> {
        &self.core.store
    }

    /// Every asset a configured rail pays as its own: intake refuses the others (`Engine::with_payable`).
    pub fn payable_assets(&self) -> std::collections::BTreeSet<AssetCode> {
        self.families.iter().flat_map(|f| f.assets()).map(|a| a.code.clone()).collect()
    }

    /// Every hot wallet this pipeline pays from, as a destination (what intake refuses).
    pub fn own_wallets(&self) -> Vec<payoutd_domain::Destination> {
        self.families.iter().flat_map(|f| f.own_wallets()).collect()
    }

    /// Brings each family's own records in line with its rail before the first pass (hot wallets
    /// registered, counters raised to what the chain already used). A failed read leaves them alone.
    pub async fn sync_wallets(&mut self) -> Result<(), PipelineError> {
        for family in &mut self.families {
            family.sync(&self.core).await?;
        }
        Ok(())
    }

    fn family_of(&self, asset: &AssetCode) -> Option<&dyn RailFamily> {
        family::family_of(&self.families, asset)
    }

    /// One round of every lane, one after the other in pipeline order: intake, settlement,
    /// detection. Every pass runs whatever the one before it met: a persistent failure in signing
    /// must not stop settlement or detection. The first error is returned after all passes ran
    /// (each is logged and counted where it happened).
    pub async fn tick(&self) -> Result<TickReport, PipelineError> {
        let intake = self.lane_pass(Lane::Intake).await;
        let settlement = self.lane_pass(Lane::Settlement).await;
        let detection = self.lane_pass(Lane::Detection).await;
        let mut report = intake?;
        report.add(settlement?);
        report.add(detection?);
        Ok(report)
    }

    /// requested -> approved, or held_for_review for near-duplicates and cap breaches (SPEC 5).
    pub async fn policy_pass(&self) -> Result<TickReport, PipelineError> {
        policy::Policy { core: &self.core }.pass().await
    }

    /// Every family signs (or prepares) and sends its approved payouts and awaited next attempts,
    /// one family after the other in the order they were added (EVM chains first in `payoutd`:
    /// their wallets' lines start at once, as merchants' cancels race them); a family's failure is
    /// logged and counted inside it, the others go on. Families run one at a time so that a
    /// worker that dies in one family's pass never leaves another family's writes cut off half way.
    pub async fn sign_pass(&self) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        for family in &self.families {
            report.add(family.sign_pass(&self.core).await);
        }
        Ok(report)
    }

    /// The sweep over every live attempt (SPEC 4.5), each resolved by the family paying its asset.
    pub async fn resolve_pass(&self) -> Result<TickReport, PipelineError> {
        resolve::Sweep { core: &self.core, families: &self.families }.pass().await
    }

    /// I7 in production (SPEC 8.10): everything that left a hot wallet or provider account must be
    /// a stored attempt's; a dead attempt's transfer landing is a second payment. Each family's
    /// history is read by one worker at a time, under a lease on its scope; the others skip it.
    pub async fn reconcile_pass(&self) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        for family in &self.families {
            let scope = family.detection_scope();
            let now_ms = self.core.clock.now_ms();
            let until_ms = now_ms.saturating_add(DETECTION_LEASE_MS);
            if !self.core.store.lease_detection(&scope, now_ms, until_ms).await? {
                continue;
            }
            let detection = Detection { core: &self.core, family: family.as_ref() };
            let outcome = family.reconcile_pass(&self.core, &detection).await;
            self.core.store.release_detection(&scope, until_ms).await?;
            report.add(outcome?);
        }
        reconcile::judge_duplicates_awaiting_books(&self.core, &self.families).await?;
        Ok(report)
    }

    /// Compares each due hot wallet's balances on its rail with what the ledger says it holds.
    pub async fn balance_check_pass(&self) -> Result<TickReport, PipelineError> {
        let mut report = TickReport::default();
        for family in &self.families {
            report.add(family.balance_pass(&self.core, &self.balance).await?);
        }
        Ok(report)
    }

    /// held_for_review -> approved; the signing caps no longer apply to this payout.
    pub async fn approve(&self, id: &PayoutId) -> Result<Payout, PipelineError> {
        self.operator().approve(id).await
    }

    /// held_for_review -> rejected, releasing the hold.
    pub async fn reject(&self, id: &PayoutId) -> Result<Payout, PipelineError> {
        self.operator().reject(id).await
    }

    /// Cancel after signing, by the family's own means (an EVM zero-value self-send in the attempt's
    /// place, a standalone rail's killing transaction); the payout fails only once that is proven final.
    pub async fn cancel_signed(&self, id: &PayoutId) -> Result<AttemptTx, PipelineError> {
        self.operator().cancel_signed(id).await
    }

    /// A person settles a payout in needs_attention, with evidence and the rail's own proof.
    pub async fn resolve_needs_attention(
        &self,
        id: &PayoutId,
        verdict: Verdict,
        evidence: &str,
    ) -> Result<Payout, PipelineError> {
        self.operator().resolve_needs_attention(id, verdict, evidence).await
    }

    fn operator(&self) -> operator::Operator<'_> {
        operator::Operator { core: &self.core, families: &self.families }
    }
}

/// `payout` as the store holds it once moved to `to` at `now`: what its events carry.
pub(crate) fn transition_after(payout: &Payout, to: PayoutStatus, now: i64) -> Payout {
    let mut after = payout.clone();
    after.status = to;
    after.version += 1;
    after.updated_at_ms = now;
    after
}

/// The conditional transition of `payout` to `to`, with its event carrying the state after it.
pub(crate) fn payout_transition(
    payout: &Payout,
    to: PayoutStatus,
    event_type: EventType,
    journals: Vec<Journal>,
    now: i64,
) -> PayoutTransition {
    let after = transition_after(payout, to, now);
    PayoutTransition {
        payout_id: payout.id.clone(),
        merchant_id: payout.merchant_id.clone(),
        from: payout.status,
        from_version: payout.version,
        to: payout.status.transition(to).unwrap_or_else(|e| panic!("pipeline attempted {e}")),
        journals,
        event: NewEvent::for_payout(event_type, &after, now),
        at_ms: now,
    }
}

/// Counts a pipeline error in `/metrics` by stage and kind (never by message: labels stay few).
pub(crate) fn count_error(stage: &'static str, error: &PipelineError) {
    let kind = match error {
        PipelineError::Store(_) => "store",
        PipelineError::NotFound => "not_found",
        PipelineError::WrongState(_) => "wrong_state",
        PipelineError::Refused(_) => "refused",
        PipelineError::RailUnavailable(_) => "rail_unavailable",
    };
    metrics::counter!("payoutd_pipeline_errors_total", "stage" => stage, "kind" => kind)
        .increment(1);
}
