//! One seeded run: clients, workers, operators and the chain take turns chosen by the seed; invariants are checked after every step.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use payoutd_domain::AttemptSlot;
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, AssetCode, AssetRegistry, DepositKey, Destination, DestinationKind, EvmAddress,
    HotWallet, MerchantId, Metadata, PayoutId, PayoutKey, PayoutRequest, PayoutStatus,
    ProviderAccount, Route, Routes, SolanaAddress, TxRef,
};
use payoutd_engine::evm::EvmRail;
use payoutd_engine::{
    Caps, Clock, Engine, EvmChain, Pipeline, PipelineConfig, PipelineStore, StandaloneLine,
};
use payoutd_rail_provider::{ProviderDefects, ProviderRail, ProviderRailConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};

use crate::chain::{Crash, FaultRates, SIM_CHAIN_ID, SimChain};
use crate::clocks::{SimClock, WorkerClocks};
use crate::crash::engine_assertion;
use crate::provider::{
    KEY_WINDOW_MS, ProviderFaults, REQUEST_TIMEOUT_MS, RESEND_HORIZON_MS, SIM_NEXT_PROVIDER,
    SIM_PROVIDER, SIM_SOL_PROVIDER, SimProvider,
};
use crate::report::{engine_defects, solana_defects};
use crate::solana::{SIM_SOLANA_CHAIN, SIM_SOLANA_PAYER, SimSolana, SolanaFaults};
use failover::SimGuard;
use payoutd_testkit::TestDb;

pub use crate::report::{Defect, Options, SeedReport, SimStore};

#[path = "check.rs"]
mod check;
#[path = "failover.rs"]
mod failover;
#[path = "operator.rs"]
mod operator;
#[path = "rules.rs"]
mod rules;
#[path = "settle.rs"]
mod settle;
#[path = "world.rs"]
mod world;

/// Confirmations before a payout is final in the simulation; reorgs stay shallower than this.
pub const FINALITY: u64 = 3;
pub const REORG_DEPTH_MAX: usize = (FINALITY - 1) as usize;
pub const WORKERS: usize = 2;
pub const BLOCK_TXS_MAX: usize = 8;
pub const RECIPIENTS: usize = 6;
/// Per cent of new payouts paid on the simulated Solana cluster (the rest on the EVM chain).
pub const SOLANA_SHARE_PERCENT: u32 = 30;
const SOL: &str = "solana:sim/SOL";
const SOLANA_SEED_SALT: u64 = 0x5017_a4a0_5017_a4a0;
const PROVIDER_ASSET: &str = "provider:sim/USD";
const PROVIDER_SEED_SALT: u64 = 0x9a0f_1de2_9a0f_1de2;
const NEXT_PROVIDER_ASSET: &str = "provider:simnext/USD";
const NEXT_PROVIDER_SEED_SALT: u64 = 0x4e37_0f1d_4e37_0f1d;
const SOL_PROVIDER_SEED_SALT: u64 = 0x501a_9a0f_501a_9a0f;
/// What the simulated merchant is funded with, per asset (base units): ETH, SOL, USD.
pub(crate) const FUNDED: [u128; 3] = [10u128.pow(30), 10u128.pow(18), 10u128.pow(18)];
/// The network fee charged with every payout, per asset as `FUNDED`: the end check finds a refund
/// missed or doubled on any path a payout can end unpaid by.
const NETWORK_FEES: [u128; 3] = [7, 5, 3];
/// Per cent of new-payout steps that also submit a payout through the simulated provider (drawn
/// from the seed's hash, not its schedule, so the EVM and Solana schedule of a seed is unchanged).
pub const PROVIDER_SHARE_PERCENT: u32 = 40;
/// Incidents read by the end-of-run check (a seed opens a handful at most).
const INCIDENTS_READ_MAX: u32 = 10_000;
/// The end states in which no transfer of the payout may have landed (I6).
const ENDED_UNPAID: [PayoutStatus; 3] =
    [PayoutStatus::Failed, PayoutStatus::Canceled, PayoutStatus::Rejected];
/// The ledger audit runs at every this many checks (and at the end).
const AUDIT_EVERY_CHECKS: usize = 10;
/// The most failovers of the database a seed draws, per mille of its worker steps.
const FAILOVER_PER_MILLE_MAX: u32 = 100;
/// EVM reads answered by a replica behind the head, per mille at most (a seed draws its share).
const LAGGING_READ_PER_MILLE_MAX: u32 = 400;
/// Payouts read per query by the checks (a seed submits a few dozen).
const PAYOUTS_READ_MAX: u32 = 1_000;
/// After the faulty phase: ticks allowed to reach a final state before "stuck" is a violation.
pub const SETTLE_ROUNDS_MAX: usize = 60;
/// An attempt live this long opens an `attempt_unresolved` incident: past the provider's key window
/// and margins, so seeds cross it.
pub const ATTEMPT_UNRESOLVED_AFTER_MS: i64 = 45_000;
/// The caps (I8) on the simulated chain's and cluster's assets, in base units an hour: about four
/// payouts to one recipient, and a wallet's share of a long seed.
pub const CAP_PER_DESTINATION: u128 = 4_000;
pub const CAP_PER_WALLET: u128 = 25_000;
/// The provider account's caps: its payouts are smaller.
pub const PROVIDER_CAP_PER_DESTINATION: u128 = 1_500;
pub const PROVIDER_CAP_PER_ACCOUNT: u128 = 6_000;

/// What a step may have changed, so the check after it runs only when it can find something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Touched {
    /// Mined transactions, the pool, payout states: anything.
    ChainAndPayouts,
    /// The chain only (blocks, reorgs, a foreign send): no payout changed state.
    ChainOnly,
    /// A payout request (new, retried or near-duplicate): holds in the ledger, no transfer, no end state.
    IntakeOnly,
    /// Only the clock or the mempool.
    Nothing,
}

struct Submitted {
    request: PayoutRequest,
    id: PayoutId,
}

struct World {
    rng: StdRng,
    chain: Arc<SimChain>,
    solana: Arc<SimSolana>,
    provider: Arc<SimProvider>,
    /// The route's next rail after `provider`.
    next_provider: Arc<SimProvider>,
    /// The route's next rail after the Solana cluster: a provider paying Solana addresses.
    sol_provider: Arc<SimProvider>,
    clock: Arc<SimClock>,
    /// Each worker's own clock and the database clock it reads time from.
    clocks: Arc<WorkerClocks>,
    store: Arc<dyn PipelineStore>,
    /// The same database, for what a failover does to it outside the store.
    db: TestDb,
    engine: Engine,
    workers: Vec<Arc<Pipeline>>,
    merchant: MerchantId,
    eth: AssetCode,
    sol: AssetCode,
    usd: AssetCode,
    wallet: EvmAddress,
    submitted: Vec<Submitted>,
    /// The caps the workers run with, per asset.
    caps: HashMap<AssetCode, Caps>,
    /// Transfers landed per payout, as the last check counted them.
    landed: HashMap<PayoutId, usize>,
    /// Payouts a person approved after a review (the caps no longer apply to them).
    reviewed: HashSet<PayoutId>,
    /// Payouts whose live attempt a person's verdict ended (no sweep looked at it last).
    ended_by_verdict: HashSet<PayoutId>,
    /// Which payout each stored hash belongs to, as the store answered (the check's cache).
    tx_owners: HashMap<TxRef, PayoutId>,
    /// References of the attempts failovers lost (their payouts are in `tx_owners` all the same).
    lost: HashSet<String>,
    /// The transactions of each EVM or Solana attempt failovers lost: one found stored again was
    /// relinked.
    lost_on_chain: Vec<Vec<TxRef>>,
    /// The send guard the workers share, which a failover's loss may reach too.
    guard: Arc<SimGuard>,
    /// `Options::guard_losses`.
    guard_losses: bool,
    failover_per_mille: u32,
    /// The payouts that ended without paying, and their counts when last read (the check's cache).
    ended_unpaid: HashMap<PayoutId, PayoutStatus>,
    ended_unpaid_counts: Vec<(PayoutStatus, u64)>,
    /// False after a step that may have ended payouts: the cache must be checked against the store.
    ended_unpaid_fresh: bool,
    checks_run: usize,
    next_key: u64,
    next_provider_key: u64,
    report: SeedReport,
}

fn sol_recipient(i: usize) -> SolanaAddress {
    let mut b = [0u8; 32];
    b[0] = 0xCB;
    b[31] = i as u8 + 1;
    SolanaAddress::from_bytes(b)
}

fn recipient(i: usize) -> EvmAddress {
    let mut b = [0u8; 20];
    b[0] = 0xCA;
    b[19] = i as u8 + 1;
    EvmAddress::from_bytes(b)
}

/// Runs one seed to the end (or to its first violation) and reports.
pub async fn run_seed(seed: u64, options: &Options) -> anyhow::Result<SeedReport> {
    // The run's ids are the seed's own sequence: a seed replays exactly, faults hashed from ids too.
    payoutd_domain::ids::seeded::seed_this_thread(seed);
    let mut world = world::build(seed, options).await?;
    for step in 0..options.steps {
        // A step that cannot change what the check reads (the chain's mined transactions, how payouts
        // ended) is not followed by one; the ledger it may touch is audited every few checks and at the end.
        if matches!(world.step(step).await?, Touched::ChainAndPayouts | Touched::ChainOnly) {
            world.check(false).await?;
        }
        if !world.report.violations.is_empty() {
            break;
        }
    }
    if world.report.violations.is_empty() {
        world.settle().await?;
        // What is left for a person: each payout in needs_attention gets a verdict, then settles.
        world.review_needs_attention().await?;
        world.settle().await?;
        world.check(true).await?;
    }
    world.tally().await?;
    Ok(world.report)
}

impl World {
    /// Every simulated provider of the seed.
    fn providers(&self) -> [Arc<SimProvider>; 3] {
        [self.provider.clone(), self.next_provider.clone(), self.sol_provider.clone()]
    }

    fn trace(&mut self, line: String) {
        self.report.trace.push(line);
    }

    async fn submit(&mut self, request: PayoutRequest, label: &str) -> anyhow::Result<()> {
        match self.engine.create_payout(&self.merchant, request.clone()).await {
            Ok((payout, replay)) => {
                self.trace(format!("{label} {} -> {} {:?}", request.key, payout.id, replay));
                if let Some(first) = self.submitted.iter().find(|s| s.request.key == request.key) {
                    if first.id != payout.id {
                        let v = format!(
                            "I1: key {} answered with {} and {}",
                            request.key, first.id, payout.id
                        );
                        self.report.violations.push(v);
                    }
                } else {
                    self.submitted.push(Submitted { request, id: payout.id });
                }
            }
            Err(e) => self.trace(format!("{label} {} refused: {e}", request.key)),
        }
        Ok(())
    }

    fn new_request(&mut self, destination: Destination, amount: Amount) -> PayoutRequest {
        self.next_key += 1;
        let asset = match destination {
            Destination::Evm(_) => self.eth.clone(),
            Destination::Solana(_) => self.sol.clone(),
            Destination::Account(_) => self.usd.clone(),
        };
        PayoutRequest::new(
            PayoutKey::parse(&format!("sim-key-{:06}", self.next_key)).unwrap(),
            asset,
            amount,
            destination,
            Metadata::empty(),
        )
    }

    /// A payout through the simulated provider, on its own key counter (the EVM and Solana keys,
    /// and the picks hashed from them, stay what they were).
    fn new_provider_request(&mut self, recipient: usize) -> PayoutRequest {
        self.next_provider_key += 1;
        let destination = Destination::Account(
            ProviderAccount::parse(&format!("acct_sim_{recipient}")).expect("a simulated account"),
        );
        let amount = Amount::from_u128(500 + u128::from(self.next_provider_key) * 3);
        let key =
            PayoutKey::parse(&format!("sim-provider-key-{:06}", self.next_provider_key)).unwrap();
        PayoutRequest::new(key, self.usd.clone(), amount, destination, Metadata::empty())
    }

    async fn worker_pass(
        &mut self,
        worker: usize,
        pass: u8,
        crash: Option<Crash>,
    ) -> anyhow::Result<()> {
        if let Some(c) = crash {
            self.chain.arm_crash(c);
            if c == Crash::AfterSend {
                for p in self.providers() {
                    p.arm_crash();
                }
            }
        }
        let p = self.workers[worker].clone();
        let handle = tokio::spawn(async move {
            match pass {
                0 => p.policy_pass().await.map(|_| ()),
                1 => p.sign_pass().await.map(|_| ()),
                _ => p.resolve_pass().await.map(|_| ()),
            }
        });
        match handle.await {
            Ok(Ok(())) => self.trace(format!("worker {worker} pass {pass} ok")),
            Ok(Err(e)) => self.trace(format!("worker {worker} pass {pass} error: {e}")),
            Err(e) if e.is_panic() => {
                let panic = e.into_panic();
                if let Some(assertion) = engine_assertion(&*panic) {
                    self.report
                        .violations
                        .push(format!("the engine stopped on its own assertion: {assertion}"));
                }
                self.report.crashes += 1;
                self.trace(format!("worker {worker} pass {pass} crashed at {crash:?}"));
            }
            Err(e) => return Err(e.into()),
        }
        if self.chain.disarm_crash() {
            self.trace("crash point not reached".into());
        }
        for p in self.providers() {
            p.disarm_crash();
        }
        Ok(())
    }

    #[allow(clippy::too_many_lines)]
    // the simulation's steps in the order a seed runs them, so a seed's schedule reads top to bottom.
    async fn step(&mut self, step: usize) -> anyhow::Result<Touched> {
        let roll = self.rng.random_range(0..100u32);
        self.trace(format!("step {step} roll {roll}"));
        match roll {
            0..=14 => {
                let i = self.rng.random_range(0..RECIPIENTS);
                let pick = Sha256::digest(
                    format!("{}:rail:{}", self.report.seed, self.next_key).as_bytes(),
                );
                let dest = if u32::from(pick[0]) * 100 / 256 < SOLANA_SHARE_PERCENT {
                    Destination::Solana(sol_recipient(i))
                } else {
                    Destination::Evm(recipient(i))
                };
                let amount = Amount::from_u128(1_000 + u128::from(self.next_key) * 7);
                let req = self.new_request(dest, amount);
                self.submit(req, "new").await?;
                if u32::from(pick[1]) * 100 / 256 < PROVIDER_SHARE_PERCENT {
                    let req = self.new_provider_request(i);
                    self.submit(req, "new provider").await?;
                }
                return Ok(Touched::IntakeOnly);
            }
            15..=22 if !self.submitted.is_empty() => {
                let i = self.rng.random_range(0..self.submitted.len());
                let req = self.submitted[i].request.clone();
                self.submit(req, "retry").await?;
                return Ok(Touched::IntakeOnly);
            }
            23..=25 if !self.submitted.is_empty() => {
                let i = self.rng.random_range(0..self.submitted.len());
                let (dest, amount) =
                    (self.submitted[i].request.destination, self.submitted[i].request.amount);
                let req = self.new_request(dest, amount);
                self.submit(req, "near-duplicate").await?;
                return Ok(Touched::IntakeOnly);
            }
            26..=28 if !self.submitted.is_empty() => {
                // The merchant cancels while a worker may be signing the same payout.
                let id = self.submitted[self.rng.random_range(0..self.submitted.len())].id.clone();
                let worker = self.workers[0].clone();
                let (r, _) = tokio::join!(
                    self.engine.cancel_payout(&self.merchant, &id),
                    worker.sign_pass()
                );
                self.trace(format!(
                    "merchant cancel {id} racing a sign pass: {:?}",
                    r.map(|(p, _)| p.status)
                ));
            }
            29..=30 if !self.submitted.is_empty() => {
                let id = self.submitted[self.rng.random_range(0..self.submitted.len())].id.clone();
                let r = self.workers[0].cancel_signed(&id).await;
                self.trace(format!("operator cancel-after-signing {id}: {:?}", r.map(|t| t.hash)));
            }
            31..=33 if !self.submitted.is_empty() => {
                let id = self.submitted[self.rng.random_range(0..self.submitted.len())].id.clone();
                let r = self.workers[0].approve(&id).await;
                if r.is_ok() {
                    self.reviewed.insert(id.clone());
                }
                self.trace(format!("operator approve {id}: {:?}", r.map(|p| p.status)));
                // The same person looks at the needs-attention queue (picks hashed, not drawn: the schedule stays).
                self.verdict_while_running(step).await?;
            }
            34..=63 => {
                let worker = self.rng.random_range(0..WORKERS);
                let pass = self.rng.random_range(0..3u8);
                let crash = match self.rng.random_range(0..100) {
                    0..=3 => Some(Crash::BeforeCommit),
                    4..=6 => Some(Crash::BeforeSend),
                    7..=9 => Some(Crash::AfterSend),
                    _ => None,
                };
                self.worker_pass(worker, pass, crash).await?;
                self.failover(step).await?;
            }
            64..=68 => {
                // Two workers on the same step at once.
                let pass = self.rng.random_range(0..3u8);
                let (a, b) = (self.workers[0].clone(), self.workers[1].clone());
                let run = move |p: Arc<Pipeline>| async move {
                    match pass {
                        0 => p.policy_pass().await.map(|_| ()),
                        1 => p.sign_pass().await.map(|_| ()),
                        _ => p.resolve_pass().await.map(|_| ()),
                    }
                };
                // Joined inside one task: the interleaving is the runtime's, on one thread.
                let both = tokio::spawn(async move { tokio::join!(run(a), run(b)) });
                match both.await {
                    Ok((ra, rb)) => self.trace(format!(
                        "both workers pass {pass}: {:?} {:?}",
                        ra.is_ok(),
                        rb.is_ok()
                    )),
                    Err(e) if e.is_panic() => {
                        let panic = e.into_panic();
                        let assertion = engine_assertion(&*panic).unwrap_or_else(|| {
                            "a simulated crash outside the crash points".to_owned()
                        });
                        self.report
                            .violations
                            .push(format!("the engine stopped on its own assertion: {assertion}"));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            69..=82 => {
                self.chain.mine(BLOCK_TXS_MAX);
                self.solana.produce_block();
                self.trace(format!("mined block {}", self.chain.head()));
                return Ok(Touched::ChainOnly);
            }
            83..=84 => {
                let depth = self.rng.random_range(1..=REORG_DEPTH_MAX);
                // Which re-orged transactions a node forgets is hashed from (seed, step, tx), not drawn
                // from the schedule's generator: how many transactions the blocks held depends on
                // thread interleavings, and must not shift every later action of the seed.
                let seed = self.report.seed;
                self.chain.reorg(depth, |tx| {
                    let digest = Sha256::digest(format!("{seed}:{step}:{}", tx.hash).as_bytes());
                    digest[0] % 100 < 30
                });
                self.trace(format!("reorg depth {depth}"));
                return Ok(Touched::ChainOnly);
            }
            85..=87 => {
                let pick = self.rng.random_range(0..64);
                let dropped = self.chain.drop_from_pool(pick);
                let sol_dropped = self.solana.drop_from_pool(pick);
                self.trace(format!("mempool drop: {dropped}; solana: {sol_dropped:?}"));
                return Ok(Touched::Nothing);
            }
            88 => {
                // Someone else with the hot wallet's key (SPEC 8.10, and 8.13's nonce moved from outside).
                let hash = self.chain.foreign_send(self.wallet, recipient(0), step as u64);
                self.report.foreign_sends += 1;
                self.trace(format!("foreign send {hash}"));
                return Ok(Touched::ChainOnly);
            }
            _ => {
                let ms = self.rng.random_range(100..10_000);
                self.clock.0.fetch_add(ms, Ordering::SeqCst);
                // The workers' own clocks drift meanwhile; each process measures its clock against
                // the database's every second, so before its next pass.
                self.clocks.drift(step);
                self.clocks.measure_all().await;
                self.trace(format!("clock +{ms} ms"));
                return Ok(Touched::Nothing);
            }
        }
        // Workers, cancels and approvals: payouts may have ended.
        self.ended_unpaid_fresh = false;
        Ok(Touched::ChainAndPayouts)
    }
}

/// Where the per-seed SQLite files go: memory-backed when the machine has /dev/shm (no fsync cost).
pub fn scratch_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() }
}
