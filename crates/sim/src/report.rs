//! What a seed run takes (options, the deliberate defect) and what it gives back (the seed report).

use payoutd_engine::Defects;

use crate::solana::SolanaDefects;

/// A test-only switch per deliberate bug (SPEC: the simulator must be able to fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defect {
    ResignOnTimeout,
    FreshNonceOnRetry,
    RecreditOnUnknown,
    /// Process-wide (SQLite store): payout transitions without their expected-state guard.
    UnconditionalUpdate,
    /// Provider rail: a refusal of a retry is taken as proof that nothing was created.
    ProviderRetryRefusalIsProof,
    /// Provider rail: creates until the key window's end, dead at the first lookup past it.
    ProviderDeadAtWindow,
    /// Provider rail: the recorded transfer's failure proves death, another transfer carrying
    /// the attempt's reference unlooked for.
    ProviderRecordedFailureIsProof,
    /// Solana durable nonce: attempts do not name their nonce value, so the store does not hold
    /// one per value and two payouts can be signed on one.
    DurableNonceUnclaimed,
    /// Operator verdicts are taken without the rail's proof (failed and retry on a payout that may still land).
    VerdictWithoutProof,
    /// Attempts live past their age limit open no `attempt_unresolved` incident.
    UnresolvedNotEscalated,
    /// A dead attempt's transfer seen on the account opens no `duplicate_transfer` incident.
    DuplicatesUnreported,
    /// A transfer the provider names behind a stored attempt's reference (a second one, or one
    /// behind a dead attempt) opens no `duplicate_transfer` incident.
    SecondTransfersUnreported,
    /// Caps are checked at approval only, never again when the first attempt is made.
    CapsUncheckedAtSigning,
    /// The send guard is never asked: an attempt the database lost in a failover is made again.
    SendGuardIgnored,
    /// A person's verdict books nothing out of the hot wallet the payout left, and no fee.
    VerdictBooksWalletNothing,
    /// Solana durable nonce: dead at the first finalized read of another value, even one behind
    /// the signed value.
    NonceMovedAtFirstSight,
    /// Solana: a status search that found nothing proves death in a history that starts after
    /// the signing (a node restored from a snapshot).
    AbsenceWithoutHistory,
    /// Solana: the reconciliation listing's cursor stops advancing once more than a page waits.
    ReconcileCursorStalls,
    /// EVM: a proof of death reads the final nonce from one node and the receipts from another,
    /// with no check that the second has the block the proof is judged at.
    EvmProofMixesNodes,
    /// Every worker measures windows (the provider key window among them) on its own clock, not
    /// the database's, and makes provider creates whatever its clock's distance from it.
    WorkerClockJudgesWindows,
    /// A second payment that moved another amount than the payout's is taken as having moved
    /// nothing (nothing booked, its incident closed by itself).
    SecondPaymentExactAmountOnly,
    /// Solana: a status search's "not found" from a node behind the finalized slot proves death.
    SolanaStatusFromNodeBehind,
    /// Provider: Circle's unknown error (HTTP 400, code -1) read as a refusal that proves nothing
    /// was made, not through the adapter's classification.
    ProviderUnknownErrorIsRefusal,
    /// Provider: a replayed saved error taken as proof that the key's first call made nothing.
    ProviderReplayedErrorIsProof,
    /// Provider: a lookup by reference reads only until the last create could go out, without the
    /// margin in which the provider may still process it.
    ProviderLookupWindowWithoutMargin,
}

impl Defect {
    /// Every defect with its command-line name.
    pub const ALL: [(Defect, &'static str); 25] = [
        (Defect::ResignOnTimeout, "resign-on-timeout"),
        (Defect::FreshNonceOnRetry, "fresh-nonce-on-retry"),
        (Defect::RecreditOnUnknown, "recredit-on-unknown"),
        (Defect::UnconditionalUpdate, "unconditional-update"),
        (Defect::ProviderRetryRefusalIsProof, "provider-retry-refusal-is-proof"),
        (Defect::ProviderDeadAtWindow, "provider-dead-at-window"),
        (Defect::ProviderRecordedFailureIsProof, "provider-recorded-failure-is-proof"),
        (Defect::DurableNonceUnclaimed, "durable-nonce-unclaimed"),
        (Defect::VerdictWithoutProof, "verdict-without-proof"),
        (Defect::UnresolvedNotEscalated, "unresolved-not-escalated"),
        (Defect::DuplicatesUnreported, "duplicates-unreported"),
        (Defect::SecondTransfersUnreported, "second-transfers-unreported"),
        (Defect::CapsUncheckedAtSigning, "caps-unchecked-at-signing"),
        (Defect::SendGuardIgnored, "send-guard-ignored"),
        (Defect::VerdictBooksWalletNothing, "verdict-books-wallet-nothing"),
        (Defect::NonceMovedAtFirstSight, "nonce-moved-at-first-sight"),
        (Defect::AbsenceWithoutHistory, "absence-without-history"),
        (Defect::ReconcileCursorStalls, "reconcile-cursor-stalls"),
        (Defect::EvmProofMixesNodes, "evm-proof-mixes-nodes"),
        (Defect::WorkerClockJudgesWindows, "worker-clock-judges-windows"),
        (Defect::SecondPaymentExactAmountOnly, "second-payment-exact-amount-only"),
        (Defect::SolanaStatusFromNodeBehind, "solana-status-from-node-behind"),
        (Defect::ProviderUnknownErrorIsRefusal, "provider-unknown-error-is-refusal"),
        (Defect::ProviderReplayedErrorIsProof, "provider-replayed-error-is-proof"),
        (Defect::ProviderLookupWindowWithoutMargin, "provider-lookup-window-without-margin"),
    ];

    /// The defect named `name` on the command line.
    pub fn parse(name: &str) -> Option<Defect> {
        Defect::ALL.iter().find(|(_, n)| *n == name).map(|(d, _)| *d)
    }
}

/// Which store the engine runs on: the embedded one (in memory, per seed) or PostgreSQL (a fresh
/// database per seed, on the server of `PAYOUTD_TEST_PG_URL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimStore {
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub steps: usize,
    pub defect: Option<Defect>,
    pub store: SimStore,
    /// Failovers that lose an EVM attempt lose the send guard's record of it half the time too.
    pub guard_losses: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options { steps: 250, defect: None, store: SimStore::Sqlite, guard_losses: false }
    }
}

#[derive(Debug, Default)]
pub struct SeedReport {
    pub seed: u64,
    pub payouts: usize,
    pub faults: u64,
    pub crashes: u64,
    /// Transfers sent from the hot wallet by someone else (each must end in an incident).
    pub foreign_sends: u64,
    /// Transfers that landed on the simulated Solana cluster.
    pub solana_transfers: usize,
    /// Solana attempts started after the one before was proven dead (expired, nothing landed).
    pub solana_attempts_after_death: u64,
    /// Solana payouts paid by a transaction signed against the durable nonce.
    pub durable_payouts: usize,
    /// Attempts started after a proven death of the one before (attempt 2 and later).
    pub attempts_after_death: u64,
    /// Payouts submitted through the simulated provider, and how many of them ended paid.
    pub provider_payouts: usize,
    pub provider_paid: usize,
    /// Provider attempts started after the one before was proven dead.
    pub provider_attempts_after_death: u64,
    /// Provider payouts paid by the route's next provider (their attempt at the first proven dead).
    pub provider_routed: usize,
    /// Second transfers the provider made behind one reference of one attempt (a late create
    /// made although a retry of its key had made the transfer).
    pub provider_seconds: usize,
    /// Creates a provider made twice, one transfer failing and the other completing behind one
    /// reference (`ProviderFaults::twin`).
    pub double_transfers: usize,
    /// First attempts (EVM, Solana or provider) a failover of the database lost after they were
    /// made (`db_losses=`).
    pub lost_attempts: usize,
    /// Of them, EVM attempts found on chain by their reference and recorded again.
    pub lost_attempts_relinked: usize,
    /// EVM reads a replica behind the chain's head answered, and Solana status searches a node
    /// behind the tip answered.
    pub lagging_reads: u64,
    /// The largest distance of a worker's own clock from the database's, in milliseconds.
    pub clock_skew_ms_max: i64,
    /// Payouts whose route's first rail is a chain, paid by the route's next rail (a provider)
    /// after their attempt on the chain was proven dead.
    pub routed_from_chain: usize,
    /// Provider transfers that moved less than their payout asked.
    pub short_transfers: usize,
    pub transfers: usize,
    pub violations: Vec<String>,
    pub trace: Vec<String>,
}

impl SeedReport {
    /// The seed's line of the simulator's output.
    pub fn line(&self) -> String {
        format!(
            "seed={} payouts={} faults={} crashes={} foreign_sends={} attempts_after_death={} transfers={} solana_transfers={} solana_attempts_after_death={} durable_payouts={} provider_payouts={} provider_paid={} provider_attempts_after_death={} provider_routed={} provider_seconds={} double_transfers={} short_transfers={} lagging_reads={} clock_skew_ms_max={} routed_from_chain={} db_losses={} lost_attempts_relinked={} violations={}",
            self.seed,
            self.payouts,
            self.faults,
            self.crashes,
            self.foreign_sends,
            self.attempts_after_death,
            self.transfers,
            self.solana_transfers,
            self.solana_attempts_after_death,
            self.durable_payouts,
            self.provider_payouts,
            self.provider_paid,
            self.provider_attempts_after_death,
            self.provider_routed,
            self.provider_seconds,
            self.double_transfers,
            self.short_transfers,
            self.lagging_reads,
            self.clock_skew_ms_max,
            self.routed_from_chain,
            self.lost_attempts,
            self.lost_attempts_relinked,
            self.violations.len()
        )
    }
}

/// The counts of a run of seeds, summed (the clock skew: its largest).
#[derive(Debug, Default)]
pub struct Totals {
    pub seeds: u64,
    pub payouts: usize,
    pub faults: u64,
    pub crashes: u64,
    pub foreign_sends: u64,
    pub attempts_after_death: u64,
    pub transfers: usize,
    pub solana_transfers: usize,
    pub solana_attempts_after_death: u64,
    pub durable_payouts: usize,
    pub provider_payouts: usize,
    pub provider_paid: usize,
    pub provider_attempts_after_death: u64,
    pub provider_routed: usize,
    pub provider_seconds: usize,
    pub double_transfers: usize,
    pub short_transfers: usize,
    pub lagging_reads: u64,
    pub clock_skew_ms_max: i64,
    pub routed_from_chain: usize,
    pub lost_attempts: usize,
    pub lost_attempts_relinked: usize,
    pub violations: usize,
}

impl Totals {
    pub fn add(&mut self, r: &SeedReport) {
        self.seeds += 1;
        self.payouts += r.payouts;
        self.faults += r.faults;
        self.crashes += r.crashes;
        self.foreign_sends += r.foreign_sends;
        self.attempts_after_death += r.attempts_after_death;
        self.transfers += r.transfers;
        self.solana_transfers += r.solana_transfers;
        self.solana_attempts_after_death += r.solana_attempts_after_death;
        self.durable_payouts += r.durable_payouts;
        self.provider_payouts += r.provider_payouts;
        self.provider_paid += r.provider_paid;
        self.provider_attempts_after_death += r.provider_attempts_after_death;
        self.provider_routed += r.provider_routed;
        self.provider_seconds += r.provider_seconds;
        self.double_transfers += r.double_transfers;
        self.short_transfers += r.short_transfers;
        self.lagging_reads += r.lagging_reads;
        self.clock_skew_ms_max = self.clock_skew_ms_max.max(r.clock_skew_ms_max);
        self.routed_from_chain += r.routed_from_chain;
        self.lost_attempts += r.lost_attempts;
        self.lost_attempts_relinked += r.lost_attempts_relinked;
        self.violations += r.violations.len();
    }

    /// The run's last line, without its rate.
    pub fn line(&self) -> String {
        format!(
            "seeds={} payouts={} faults={} foreign_sends={} attempts_after_death={} durable_payouts={} provider_payouts={} provider_attempts_after_death={} provider_seconds={} double_transfers={} short_transfers={} lagging_reads={} clock_skew_ms_max={} routed_from_chain={} db_losses={} lost_attempts_relinked={} violations={}",
            self.seeds,
            self.payouts,
            self.faults,
            self.foreign_sends,
            self.attempts_after_death,
            self.durable_payouts,
            self.provider_payouts,
            self.provider_attempts_after_death,
            self.provider_seconds,
            self.double_transfers,
            self.short_transfers,
            self.lagging_reads,
            self.clock_skew_ms_max,
            self.routed_from_chain,
            self.lost_attempts,
            self.lost_attempts_relinked,
            self.violations
        )
    }
}

/// The engine's deliberate defect of `defect`, if it is one of the engine's.
pub(crate) fn engine_defects(defect: Option<Defect>) -> Defects {
    let on = Defects::default();
    match defect {
        Some(Defect::ResignOnTimeout) => Defects { resign_on_timeout: true, ..on },
        Some(Defect::FreshNonceOnRetry) => Defects { resign_on_retry: true, ..on },
        Some(Defect::RecreditOnUnknown) => Defects { recredit_on_unknown: true, ..on },
        Some(Defect::VerdictWithoutProof) => Defects { verdict_without_proof: true, ..on },
        Some(Defect::UnresolvedNotEscalated) => Defects { unresolved_not_escalated: true, ..on },
        Some(Defect::DuplicatesUnreported) => Defects { duplicates_unreported: true, ..on },
        Some(Defect::SecondTransfersUnreported) => {
            Defects { second_transfers_unreported: true, ..on }
        }
        Some(Defect::CapsUncheckedAtSigning) => Defects { caps_unchecked_at_signing: true, ..on },
        Some(Defect::SendGuardIgnored) => Defects { send_guard_ignored: true, ..on },
        Some(Defect::VerdictBooksWalletNothing) => {
            Defects { verdict_books_wallet_nothing: true, ..on }
        }
        Some(Defect::SecondPaymentExactAmountOnly) => {
            Defects { second_payment_exact_amount_only: true, ..on }
        }
        None
        | Some(
            Defect::UnconditionalUpdate
            | Defect::ProviderRetryRefusalIsProof
            | Defect::ProviderDeadAtWindow
            | Defect::ProviderRecordedFailureIsProof
            | Defect::DurableNonceUnclaimed
            | Defect::NonceMovedAtFirstSight
            | Defect::AbsenceWithoutHistory
            | Defect::ReconcileCursorStalls
            | Defect::EvmProofMixesNodes
            | Defect::WorkerClockJudgesWindows
            | Defect::SolanaStatusFromNodeBehind
            | Defect::ProviderUnknownErrorIsRefusal
            | Defect::ProviderReplayedErrorIsProof
            | Defect::ProviderLookupWindowWithoutMargin,
        ) => on,
    }
}

/// The Solana rail's own defects, which the simulated rail carries.
pub(crate) fn solana_defects(defect: Option<Defect>) -> SolanaDefects {
    SolanaDefects {
        nonce_moved_at_first_sight: defect == Some(Defect::NonceMovedAtFirstSight),
        absence_without_history: defect == Some(Defect::AbsenceWithoutHistory),
        cursor_stalls: defect == Some(Defect::ReconcileCursorStalls),
        status_from_node_behind: defect == Some(Defect::SolanaStatusFromNodeBehind),
    }
}
