//! One seeded run: clients, workers, operators and the chain take turns chosen by the seed; invariants are checked after every step.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, AssetCode, AssetRegistry, DepositKey, Destination, EvmAddress, HotWallet, MerchantId, Metadata, Payout,
    IncidentKind, PayoutId, PayoutKey, PayoutRequest, PayoutStatus,
};
use payoutd_engine::rail::EvmRail;
use payoutd_engine::{Clock, Defects, Engine, EvmChain, Pipeline, PipelineConfig, PipelineStore};
use rand::rngs::StdRng;
use sha2::{Digest, Sha256};
use rand::{Rng, SeedableRng};

use crate::chain::{Crash, FaultRates, SimChain, SimTx, CRASH_MESSAGE, SIM_CHAIN_ID};

/// Confirmations before a payout is final in the simulation; reorgs stay shallower than this.
pub const FINALITY: u64 = 3;
pub const REORG_DEPTH_MAX: usize = (FINALITY - 1) as usize;
pub const WORKERS: usize = 2;
pub const BLOCK_TXS_MAX: usize = 8;
pub const RECIPIENTS: usize = 6;
/// Incidents read by the end-of-run check (a seed opens a handful at most).
const INCIDENTS_READ_MAX: u32 = 10_000;
/// After the faulty phase: ticks allowed to reach a final state before "stuck" is a violation.
pub const SETTLE_ROUNDS_MAX: usize = 60;

/// A test-only switch per deliberate bug (SPEC: the simulator must be able to fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defect {
    ResignOnTimeout,
    FreshNonceOnRetry,
    RecreditOnUnknown,
    /// Process-wide (SQLite store): payout transitions without their expected-state guard.
    UnconditionalUpdate,
}

/// Which store the engine runs on: the embedded one (a file per seed) or PostgreSQL (a fresh
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
    /// Attempts started after a proven death of the one before (attempt 2 and later).
    pub attempts_after_death: u64,
    pub transfers: usize,
    pub violations: Vec<String>,
    pub trace: Vec<String>,
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
    clock: Arc<SimClock>,
    store: Arc<dyn PipelineStore>,
    engine: Engine,
    workers: Vec<Arc<Pipeline>>,
    merchant: MerchantId,
    eth: AssetCode,
    wallet: EvmAddress,
    submitted: Vec<Submitted>,
    next_key: u64,
    report: SeedReport,
}

fn recipient(i: usize) -> EvmAddress {
    let mut b = [0u8; 20];
    b[0] = 0xCA;
    b[19] = i as u8 + 1;
    EvmAddress::from_bytes(b)
}

/// Runs one seed to the end (or to its first violation) and reports.
pub async fn run_seed(seed: u64, options: &Options, db_dir: &std::path::Path) -> anyhow::Result<SeedReport> {
    let mut rng = StdRng::seed_from_u64(seed);
    let rates = FaultRates {
        send_refused_before_node: rng.random_range(0..120),
        send_response_lost: rng.random_range(0..200),
        read_error: rng.random_range(0..80),
    };
    let chain = Arc::new(SimChain::new(seed, rates, FINALITY, REORG_DEPTH_MAX));
    let clock = Arc::new(SimClock(AtomicI64::new(1_800_000_000_000)));
    let path = db_dir.join(format!("sim-{seed}-{}.sqlite3", uuid::Uuid::new_v4().simple()));
    // The PostgreSQL database of a seed is left for the test scripts' cleanup (`payoutd_t_*`).
    let store = match options.store {
        SimStore::Sqlite => payoutd_store::open_pipeline(&format!("sqlite://{}", path.display())).await?,
        SimStore::Postgres => payoutd_testkit::db::fresh_postgres().await.pipeline(),
    };
    let assets = AssetRegistry::new(vec![Asset::new("evm:31337/ETH", 18, TokenKind::Native)?])?;
    let eth = assets.get("evm:31337/ETH")?.code.clone();
    let engine = Engine::new(store.clone(), clock.clone(), assets.clone());
    let (merchant, _) = engine.create_merchant("sim", [7u8; 32]).await?;
    engine.deposit(&merchant, &eth, Amount::from_u128(10u128.pow(30)), DepositKey::parse("sim-fund")?).await?;
    let wallet_address = EvmAddress::from_bytes([0x11; 20]);
    let wallet = HotWallet { id: HotWallet::id_for(SIM_CHAIN_ID, &wallet_address), chain_id: SIM_CHAIN_ID, address: wallet_address, next_nonce: 0 };
    let mut config = PipelineConfig {
        rebroadcast_after_ms: 2_000,
        replace_after_ms: 20_000,
        near_duplicate_window_ms: 60_000,
        // Every pass compares the wallet's balance with the ledger: the check must never cry wolf.
        balance_check_interval_ms: 0,
        ..PipelineConfig::default()
    };
    config.sign_batch_max = 8;
    config.defects = match options.defect {
        None => Defects::default(),
        Some(Defect::ResignOnTimeout) => Defects { resign_on_timeout: true, ..Defects::default() },
        Some(Defect::FreshNonceOnRetry) => Defects { fresh_nonce_on_retry: true, ..Defects::default() },
        Some(Defect::RecreditOnUnknown) => Defects { recredit_on_unknown: true, ..Defects::default() },
        Some(Defect::UnconditionalUpdate) => Defects::default(),
    };
    payoutd_store::defects::set_unconditional_transitions(options.defect == Some(Defect::UnconditionalUpdate));
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let evm = EvmChain { rail: chain.clone(), wallets: vec![wallet.clone()], assets: assets.iter().cloned().collect() };
        let mut p = Pipeline::new(store.clone(), clock.clone(), vec![evm], config.clone());
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
    let mut world = World {
        rng,
        chain,
        clock,
        store,
        engine,
        workers,
        merchant,
        eth,
        wallet: wallet_address,
        submitted: Vec::new(),
        next_key: 0,
        report: SeedReport { seed, ..SeedReport::default() },
    };
    for step in 0..options.steps {
        world.step(step).await?;
        world.check(false).await?;
        if !world.report.violations.is_empty() {
            break;
        }
    }
    if world.report.violations.is_empty() {
        world.settle().await?;
        world.check(true).await?;
    }
    world.report.payouts = world.submitted.len();
    world.report.faults = world.chain.faults_injected();
    world.report.transfers = world.chain.mined().iter().filter(|t| !t.cancel && t.from == world.wallet && !world.chain.is_foreign(&t.hash)).count();
    for s in &world.submitted {
        world.report.attempts_after_death += world.store.attempts_of(&s.id).await?.iter().filter(|a| a.attempt_no >= 2).count() as u64;
    }
    let _ = std::fs::remove_file(&path);
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
                        let v = format!("I1: key {} answered with {} and {}", request.key, first.id, payout.id);
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

    fn new_request(&mut self, destination: EvmAddress, amount: Amount) -> PayoutRequest {
        self.next_key += 1;
        PayoutRequest::new(
            PayoutKey::parse(&format!("sim-key-{:06}", self.next_key)).unwrap(),
            self.eth.clone(),
            amount,
            Destination::Evm(destination),
            Metadata::empty(),
        )
    }

    async fn worker_pass(&mut self, worker: usize, pass: u8, crash: Option<Crash>) -> anyhow::Result<()> {
        if let Some(c) = crash {
            self.chain.arm_crash(c);
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
                self.report.crashes += 1;
                self.trace(format!("worker {worker} pass {pass} crashed at {crash:?}"));
            }
            Err(e) => return Err(e.into()),
        }
        if self.chain.disarm_crash() {
            self.trace("crash point not reached".into());
        }
        Ok(())
    }

    async fn step(&mut self, step: usize) -> anyhow::Result<()> {
        let roll = self.rng.random_range(0..100u32);
        self.trace(format!("step {step} roll {roll}"));
        match roll {
            0..=14 => {
                let dest = recipient(self.rng.random_range(0..RECIPIENTS));
                let amount = Amount::from_u128(1_000 + u128::from(self.next_key) * 7);
                let req = self.new_request(dest, amount);
                self.submit(req, "new").await?;
            }
            15..=22 if !self.submitted.is_empty() => {
                let i = self.rng.random_range(0..self.submitted.len());
                let req = self.submitted[i].request.clone();
                self.submit(req, "retry").await?;
            }
            23..=25 if !self.submitted.is_empty() => {
                let i = self.rng.random_range(0..self.submitted.len());
                let (dest, amount) = match self.submitted[i].request.destination {
                    Destination::Evm(d) => (d, self.submitted[i].request.amount),
                    Destination::Solana(_) => unreachable!(),
                };
                let req = self.new_request(dest, amount);
                self.submit(req, "near-duplicate").await?;
            }
            26..=28 if !self.submitted.is_empty() => {
                // The merchant cancels while a worker may be signing the same payout.
                let id = self.submitted[self.rng.random_range(0..self.submitted.len())].id.clone();
                let worker = self.workers[0].clone();
                let (r, _) = tokio::join!(self.engine.cancel_payout(&self.merchant, &id), worker.sign_pass());
                self.trace(format!("merchant cancel {id} racing a sign pass: {:?}", r.map(|(p, _)| p.status)));
            }
            29..=30 if !self.submitted.is_empty() => {
                let id = self.submitted[self.rng.random_range(0..self.submitted.len())].id.clone();
                let r = self.workers[0].cancel_signed(&id).await;
                self.trace(format!("operator cancel-after-signing {id}: {:?}", r.map(|t| t.hash)));
            }
            31..=33 if !self.submitted.is_empty() => {
                let id = self.submitted[self.rng.random_range(0..self.submitted.len())].id.clone();
                let r = self.workers[0].approve(&id).await;
                self.trace(format!("operator approve {id}: {:?}", r.map(|p| p.status)));
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
            }
            64..=68 => {
                // Two workers on the same step at once.
                let pass = self.rng.random_range(0..3u8);
                let (a, b) = (self.workers[0].clone(), self.workers[1].clone());
                let run = |p: Arc<Pipeline>| async move {
                    match pass {
                        0 => p.policy_pass().await.map(|_| ()),
                        1 => p.sign_pass().await.map(|_| ()),
                        _ => p.resolve_pass().await.map(|_| ()),
                    }
                };
                let (ra, rb) = tokio::join!(run(a), run(b));
                self.trace(format!("both workers pass {pass}: {:?} {:?}", ra.is_ok(), rb.is_ok()));
            }
            69..=82 => {
                self.chain.mine(BLOCK_TXS_MAX);
                self.trace(format!("mined block {}", self.chain.head()));
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
            }
            85..=87 => {
                let pick = self.rng.random_range(0..64);
                let dropped = self.chain.drop_from_pool(pick);
                self.trace(format!("mempool drop: {dropped}"));
            }
            88 => {
                // Someone else with the hot wallet's key (SPEC 8.10, and 8.13's nonce moved from outside).
                let hash = self.chain.foreign_send(self.wallet, recipient(0), step as u64);
                self.report.foreign_sends += 1;
                self.trace(format!("foreign send {hash}"));
            }
            _ => {
                let ms = self.rng.random_range(100..10_000);
                self.clock.0.fetch_add(ms, Ordering::SeqCst);
                self.trace(format!("clock +{ms} ms"));
            }
        }
        Ok(())
    }

    /// Faults off; the chain keeps mining and time keeps passing until nothing is left in flight.
    async fn settle(&mut self) -> anyhow::Result<()> {
        self.chain.set_faults(false);
        for round in 0..SETTLE_ROUNDS_MAX {
            self.clock.0.fetch_add(3_000, Ordering::SeqCst);
            for w in self.workers.clone() {
                let _ = w.tick().await;
            }
            self.chain.mine(BLOCK_TXS_MAX * 4);
            let mut open = 0;
            for s in &self.submitted {
                let p = self.store.payout_by_id(&s.id).await?.expect("submitted payouts exist");
                if matches!(p.status, PayoutStatus::Requested | PayoutStatus::Approved | PayoutStatus::Processing) {
                    open += 1;
                }
            }
            if open == 0 && self.chain.pool_len() == 0 {
                self.trace(format!("settled after {round} rounds"));
                // A few more blocks so every receipt is past finality for the final check.
                for _ in 0..FINALITY {
                    self.chain.mine(BLOCK_TXS_MAX);
                }
                return Ok(());
            }
        }
        Ok(())
    }

    /// The invariants of SPEC section 1 over the simulated chain and the store.
    async fn check(&mut self, at_end: bool) -> anyhow::Result<()> {
        // Foreign transfers are someone else's; what payoutd must do about them is checked at the end.
        let mined: Vec<SimTx> =
            self.chain.mined().into_iter().filter(|t| t.from == self.wallet && !t.cancel && !self.chain.is_foreign(&t.hash)).collect();
        let mut hash_to_payout: HashMap<String, PayoutId> = HashMap::new();
        let mut payouts: BTreeMap<PayoutId, Payout> = BTreeMap::new();
        for s in &self.submitted {
            for a in self.store.attempts_of(&s.id).await? {
                for tx in a.txs {
                    hash_to_payout.insert(tx.hash.to_string(), s.id.clone());
                }
            }
            payouts.insert(s.id.clone(), self.store.payout_by_id(&s.id).await?.expect("exists"));
        }
        let mut landed: HashMap<PayoutId, usize> = HashMap::new();
        let mut violations = Vec::new();
        for tx in &mined {
            match hash_to_payout.get(&tx.hash) {
                Some(id) => *landed.entry(id.clone()).or_default() += 1,
                None => violations.push(format!("I7: transfer {} (nonce {}, {} to {}) matches no attempt", tx.hash, tx.nonce, tx.value, tx.to)),
            }
        }
        for (id, n) in &landed {
            if *n > 1 {
                violations.push(format!("I1/I3: payout {id} has {n} landed transfers"));
            }
            let status = payouts[id].status;
            if matches!(status, PayoutStatus::Failed | PayoutStatus::Canceled | PayoutStatus::Rejected) {
                violations.push(format!("I6: payout {id} is {status} but a transfer of it landed"));
            }
        }
        let audit = self.store.audit_ledger().await?;
        if !audit.is_clean() {
            violations.push(format!("I2: ledger audit {audit:?}"));
        }
        if at_end {
            // payoutd's own reconciliation (SPEC 8.10) must agree with this checker: every final foreign
            // transfer not from payoutd opened one unmatched_transfer incident, and nothing else did.
            // One more pass first: the settle rounds may have made blocks final after their last tick.
            self.workers[0].reconcile_pass().await?;
            let alarms: Vec<String> = self
                .store
                .open_incidents(INCIDENTS_READ_MAX)
                .await?
                .into_iter()
                .filter(|i| i.kind == IncidentKind::UnmatchedTransfer)
                .map(|i| i.detail)
                .collect();
            for alarm in &alarms {
                // With a violation already found (a deliberate defect's unstored transfer), alarms are expected.
                if violations.is_empty() && !self.chain.final_foreign().iter().any(|hash| alarm.contains(hash.as_str())) {
                    violations.push(format!("reconciliation false alarm: {alarm}"));
                }
            }
            for hash in self.chain.final_foreign() {
                if !alarms.iter().any(|alarm| alarm.contains(hash.as_str())) {
                    violations.push(format!("reconciliation missed the foreign transfer {hash} in a final block"));
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
            if violations.is_empty() && !foreign_spent {
                for detail in &mismatches {
                    violations.push(format!("balance check false alarm: {detail}"));
                }
            }
            if foreign_spent && mismatches.is_empty() {
                violations.push("the balance check missed what foreign transfers took from the hot wallet".to_owned());
            }
            for (id, p) in &payouts {
                match p.status {
                    PayoutStatus::Requested | PayoutStatus::Approved | PayoutStatus::Processing => {
                        violations.push(format!("liveness: payout {id} still {}", p.status));
                    }
                    PayoutStatus::Paid if landed.get(id).copied().unwrap_or(0) != 1 => {
                        violations.push(format!("payout {id} is paid but {} transfers of it landed", landed.get(id).copied().unwrap_or(0)));
                    }
                    _ => {}
                }
            }
        }
        self.report.violations.extend(violations);
        Ok(())
    }
}

/// Silences the panics that stand for simulated crashes; other panics still print.
pub fn quiet_simulated_crashes() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info.payload().downcast_ref::<String>().map(String::as_str).unwrap_or("");
        if !message.starts_with(CRASH_MESSAGE) {
            default(info);
        }
    }));
}

/// Where the per-seed SQLite files go: memory-backed when the machine has /dev/shm (no fsync cost).
pub fn scratch_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() }
}
