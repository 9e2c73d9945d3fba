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
use crate::crash::engine_assertion;
use crate::provider::{
    KEY_WINDOW_MS, ProviderFaults, REQUEST_TIMEOUT_MS, SIM_NEXT_PROVIDER, SimProvider,
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

struct SimClock(AtomicI64);

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
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
    clock: Arc<SimClock>,
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
    let mut rng = StdRng::seed_from_u64(seed);
    let rates = FaultRates {
        send_refused_before_node: rng.random_range(0..120),
        send_response_lost: rng.random_range(0..200),
        read_error: rng.random_range(0..80),
    };
    let chain = Arc::new(SimChain::new(seed, rates, FINALITY, REORG_DEPTH_MAX));
    // The Solana side draws from a generator of its own: the schedule of a seed stays what it was
    // without it (the deliberate defects are caught at the same seeds).
    let mut solana_rng = StdRng::seed_from_u64(seed ^ SOLANA_SEED_SALT);
    let solana_faults = SolanaFaults {
        answer_lost: solana_rng.random_range(0..200),
        dropped: solana_rng.random_range(0..150),
        unseen_blockhash: solana_rng.random_range(0..80),
        read_error: solana_rng.random_range(0..80),
        late: solana_rng.random_range(0..400),
        snapshot_restart: solana_rng.random_range(0..50),
    };
    let sol_asset =
        Asset::new(SOL, 9, TokenKind::Native)?.with_network_fee(Amount::from_u128(NETWORK_FEES[1]));
    let solana = SimSolana::new(seed, solana_faults, sol_asset.clone())
        .with_defects(solana_defects(options.defect));
    let solana = Arc::new(if options.defect == Some(Defect::DurableNonceUnclaimed) {
        solana.without_nonce_value_claims()
    } else {
        solana
    });
    let clock = Arc::new(SimClock(AtomicI64::new(1_800_000_000_000)));
    let provider = Arc::new(SimProvider::new(
        seed,
        ProviderFaults::seeded(seed ^ PROVIDER_SEED_SALT),
        clock.clone(),
    ));
    // The route's next rail: a payout whose attempt `provider` proved dead is paid next by it.
    let next_seed = seed ^ NEXT_PROVIDER_SEED_SALT;
    let next_provider = Arc::new(SimProvider::named(
        SIM_NEXT_PROVIDER,
        next_seed,
        ProviderFaults::seeded(next_seed),
        clock.clone(),
    ));
    // Failovers of the database, per mille of worker steps (hashed: the schedule stays).
    let failover_per_mille =
        u32::from(Sha256::digest(format!("{seed}:failover-rate").as_bytes())[0])
            * FAILOVER_PER_MILLE_MAX
            / 256;
    // The PostgreSQL database of a seed is left for the test scripts' cleanup (`payoutd_t_*`).
    let db = match options.store {
        // One connection to a private in-memory database: nothing on disk, and the order in which
        // the engine's statements reach it is the schedule's alone.
        SimStore::Sqlite => {
            let url =
                format!("sqlite:file:sim-{seed}-{}?mode=memory", uuid::Uuid::new_v4().simple());
            let store = payoutd_store::SqliteStore::connect(&url).await?;
            store.migrate().await?;
            TestDb::Sqlite { store: Arc::new(store), url }
        }
        SimStore::Postgres => payoutd_testkit::db::fresh_postgres().await,
    };
    let (store, lines) = (db.pipeline(), db.evm_lines());
    let guard = Arc::new(SimGuard::default());
    let usd_asset = Asset::new(PROVIDER_ASSET, 2, TokenKind::Provider(DestinationKind::Account))?
        .with_network_fee(Amount::from_u128(NETWORK_FEES[2]));
    let next_asset =
        Asset::new(NEXT_PROVIDER_ASSET, 2, TokenKind::Provider(DestinationKind::Account))?;
    let routes =
        Routes::new(vec![Route::new(usd_asset.code.clone(), vec![next_asset.code.clone()])?])?;
    let eth_asset = Asset::new("evm:31337/ETH", 18, TokenKind::Native)?
        .with_network_fee(Amount::from_u128(NETWORK_FEES[0]));
    let assets = AssetRegistry::new(vec![eth_asset, sol_asset.clone(), usd_asset.clone()])?;
    let eth = assets.get("evm:31337/ETH")?.code.clone();
    let sol = sol_asset.code.clone();
    let usd = usd_asset.code.clone();
    let engine =
        Engine::new(store.clone(), clock.clone(), assets.clone()).with_guard(guard.clone());
    let (merchant, _) = engine.create_merchant("sim", [7u8; 32]).await?;
    engine
        .deposit(&merchant, &eth, Amount::from_u128(FUNDED[0]), DepositKey::parse("sim-fund")?)
        .await?;
    engine
        .deposit(&merchant, &sol, Amount::from_u128(FUNDED[1]), DepositKey::parse("sim-fund-sol")?)
        .await?;
    engine
        .deposit(&merchant, &usd, Amount::from_u128(FUNDED[2]), DepositKey::parse("sim-fund-usd")?)
        .await?;
    store.ensure_signing_wallet(SIM_SOLANA_CHAIN, SIM_SOLANA_PAYER).await?;
    let wallet_address = EvmAddress::from_bytes([0x11; 20]);
    let wallet = HotWallet {
        id: HotWallet::id_for(SIM_CHAIN_ID, &wallet_address),
        chain_id: SIM_CHAIN_ID,
        address: wallet_address,
        next_nonce: 0,
    };
    let mut config = PipelineConfig {
        rebroadcast_after_ms: 2_000,
        replace_after_ms: 20_000,
        near_duplicate_window_ms: 60_000,
        // Every pass compares the wallet's balance with the ledger: the check must never cry wolf.
        balance_check_interval_ms: 0,
        attempt_unresolved_after_ms: ATTEMPT_UNRESOLVED_AFTER_MS,
        ..PipelineConfig::default()
    };
    let caps = |destination: u128, wallet: u128| Caps {
        per_destination_per_hour: Amount::from_u128(destination),
        per_wallet_per_hour: Amount::from_u128(wallet),
    };
    config.caps.insert(eth.clone(), caps(CAP_PER_DESTINATION, CAP_PER_WALLET));
    config.caps.insert(sol.clone(), caps(CAP_PER_DESTINATION, CAP_PER_WALLET));
    config.caps.insert(usd.clone(), caps(PROVIDER_CAP_PER_DESTINATION, PROVIDER_CAP_PER_ACCOUNT));
    config.sign_batch_max = 8;
    config.defects = engine_defects(options.defect);
    payoutd_store::defects::set_unconditional_transitions(
        options.defect == Some(Defect::UnconditionalUpdate),
    );
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let evm = EvmChain {
            rail: chain.clone(),
            wallets: vec![wallet.clone()],
            assets: assets.iter().filter(|a| a.code != sol && a.code != usd).cloned().collect(),
        };
        let solana_line = StandaloneLine { rail: solana.clone(), assets: vec![sol_asset.clone()] };
        // Each worker is its own process: its own rail, with its own memory of lookups and refusals.
        let mut rail_config = ProviderRailConfig::new(KEY_WINDOW_MS, REQUEST_TIMEOUT_MS)?;
        rail_config.defects = ProviderDefects {
            retry_refusal_is_proof: options.defect == Some(Defect::ProviderRetryRefusalIsProof),
            dead_at_window: options.defect == Some(Defect::ProviderDeadAtWindow),
        };
        let provider_line = StandaloneLine {
            rail: Arc::new(ProviderRail::new(provider.clone(), clock.clone(), rail_config.clone())),
            assets: vec![usd_asset.clone()],
        };
        let next_line = StandaloneLine {
            rail: Arc::new(ProviderRail::new(next_provider.clone(), clock.clone(), rail_config)),
            assets: vec![next_asset.clone()],
        };
        let mut p = Pipeline::new(store.clone(), clock.clone(), config.clone())
            .with_evm_chain(lines.clone(), evm)
            .with_standalone_rail(solana_line)
            .with_standalone_rail(provider_line)
            .with_standalone_rail(next_line)
            .with_routes(routes.clone())
            .with_guard(guard.clone());
        p.sync_wallets().await?;
        workers.push(Arc::new(p));
    }
    // Starts the reconciliation's watch at block 0 (faults off: a failed read would start it later,
    // as it would in production): the check at the end holds it to every block.
    chain.set_faults(false);
    workers[0].reconcile_pass().await?;
    // Likewise the balance check's opening balance: from here on the ledger must explain every unit.
    while chain.final_block().await?.is_none() {
        chain.mine(0);
    }
    workers[0].balance_check_pass().await?;
    chain.set_faults(true);
    solana.set_faults(true);
    provider.set_faults(true);
    next_provider.set_faults(true);
    let mut world = World {
        rng,
        chain,
        solana,
        provider,
        next_provider,
        clock,
        store,
        db,
        engine,
        workers,
        merchant,
        eth,
        sol,
        usd,
        wallet: wallet_address,
        submitted: Vec::new(),
        caps: config.caps.clone(),
        landed: HashMap::new(),
        reviewed: HashSet::new(),
        ended_by_verdict: HashSet::new(),
        tx_owners: HashMap::new(),
        lost: HashSet::new(),
        failover_per_mille,
        ended_unpaid: HashMap::new(),
        ended_unpaid_counts: Vec::new(),
        ended_unpaid_fresh: false,
        checks_run: 0,
        next_key: 0,
        next_provider_key: 0,
        report: SeedReport { seed, ..SeedReport::default() },
    };
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
    world.report.payouts = world.submitted.len();
    world.report.faults = world.chain.faults_injected()
        + world.solana.faults_injected()
        + world.provider.faults_injected()
        + world.next_provider.faults_injected();
    world.report.solana_transfers = world.solana.landed().len();
    world.report.durable_payouts = world.solana.durable_landed();
    let suspects: Vec<_> =
        world.provider.suspects().into_iter().chain(world.next_provider.suspects()).collect();
    world.report.provider_seconds = suspects
        .iter()
        .filter(|s| s.late && suspects.iter().filter(|o| o.reference == s.reference).count() > 1)
        .count();
    world.report.transfers = world
        .chain
        .mined()
        .iter()
        .filter(|t| !t.cancel && t.from == world.wallet && !world.chain.is_foreign(&t.hash))
        .count();
    for s in &world.submitted {
        let attempts = world.store.attempts_of(&s.id).await?;
        let later = attempts.iter().filter(|a| a.attempt_no >= 2).count() as u64;
        let on_next = |a: &&payoutd_domain::Attempt| matches!(&a.slot, AttemptSlot::Provider { provider, .. } if provider == SIM_NEXT_PROVIDER);
        world.report.provider_routed += usize::from(
            attempts
                .iter()
                .filter(on_next)
                .any(|a| a.status == payoutd_domain::AttemptStatus::Confirmed),
        );
        world.report.attempts_after_death += later;
        match s.request.destination {
            Destination::Solana(_) => world.report.solana_attempts_after_death += later,
            Destination::Account(_) => {
                world.report.provider_payouts += 1;
                world.report.provider_attempts_after_death += later;
                let paid = world
                    .store
                    .payout_by_id(&s.id)
                    .await?
                    .is_some_and(|p| p.status == PayoutStatus::Paid);
                world.report.provider_paid += usize::from(paid);
            }
            Destination::Evm(_) => {}
        }
    }
    Ok(world.report)
}

impl World {
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
                self.provider.arm_crash();
                self.next_provider.arm_crash();
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
        self.provider.disarm_crash();
        self.next_provider.disarm_crash();
        Ok(())
    }

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
