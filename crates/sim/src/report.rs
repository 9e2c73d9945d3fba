//! What a seed run takes (options, the deliberate defect) and what it gives back (the seed report).

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
    /// Solana durable nonce: attempts do not name their nonce value, so the store does not hold
    /// one per value and two payouts can be signed on one.
    DurableNonceUnclaimed,
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
}

impl Default for Options {
    fn default() -> Options {
        Options { steps: 250, defect: None, store: SimStore::Sqlite }
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
    pub transfers: usize,
    pub violations: Vec<String>,
    pub trace: Vec<String>,
}
