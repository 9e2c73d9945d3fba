//! A seed's world built (the simulated rails with the seed's faults, the database, the merchant's funds, the workers, the watches started) and its report tallied at the end.

use super::*;

/// The simulated rails of one seed, each with faults drawn from the seed.
struct Rails {
    chain: Arc<SimChain>,
    solana: Arc<SimSolana>,
    provider: Arc<SimProvider>,
    /// The route's next rail: a payout whose attempt `provider` proved dead is paid next by it.
    next_provider: Arc<SimProvider>,
    /// The route's next rail after the Solana cluster: a provider paying Solana addresses.
    sol_provider: Arc<SimProvider>,
}

/// The assets a seed pays and the route between its two provider rails.
struct SeedAssets {
    registry: AssetRegistry,
    sol_asset: Asset,
    usd_asset: Asset,
    next_asset: Asset,
    /// What the provider after the Solana cluster pays: SOL, to Solana addresses.
    sol_provider_asset: Asset,
    routes: Routes,
    eth: AssetCode,
    sol: AssetCode,
    usd: AssetCode,
}

/// Builds the seed's world. The seed's generator draws the chain's fault rates first, then the
/// schedule, as it always has: a seed's run stays what it was.
#[allow(clippy::too_many_lines)]
// the simulation's steps in the order a seed runs them, so a seed's schedule reads top to bottom.
pub(super) async fn build(seed: u64, options: &Options) -> anyhow::Result<World> {
    let mut rng = StdRng::seed_from_u64(seed);
    let clock = Arc::new(SimClock(AtomicI64::new(1_800_000_000_000)));
    let assets = seed_assets()?;
    let rails = rails(seed, options, &mut rng, &clock, &assets.sol_asset);
    // Failovers of the database, per mille of worker steps (hashed: the schedule stays).
    let failover_per_mille =
        u32::from(Sha256::digest(format!("{seed}:failover-rate").as_bytes())[0])
            * FAILOVER_PER_MILLE_MAX
            / 256;
    let db = database(seed, options.store).await?;
    let (store, lines) = (db.pipeline(), db.evm_lines());
    let guard = Arc::new(SimGuard::default());
    let engine = Engine::new(store.clone(), clock.clone(), assets.registry.clone())
        .with_guard(guard.clone());
    let merchant = fund(&engine, &assets).await?;
    store.ensure_signing_wallet(SIM_SOLANA_CHAIN, SIM_SOLANA_PAYER).await?;
    let wallet_address = EvmAddress::from_bytes([0x11; 20]);
    let wallet = HotWallet {
        id: HotWallet::id_for(SIM_CHAIN_ID, &wallet_address),
        chain_id: SIM_CHAIN_ID,
        address: wallet_address,
        next_nonce: 0,
    };
    let config = pipeline_config(&assets, options.defect);
    payoutd_store::defects::set_unconditional_transitions(
        options.defect == Some(Defect::UnconditionalUpdate),
    );
    let clocks = Arc::new(if options.defect == Some(Defect::WorkerClockJudgesWindows) {
        WorkerClocks::own(seed, &clock, WORKERS)
    } else {
        WorkerClocks::measured(seed, &clock, WORKERS)
    });
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        clocks.measure(worker).await;
        let pipeline = Pipeline::new(store.clone(), clocks.of(worker), config.clone())
            .with_evm_chain(lines.clone(), evm_chain(&rails, &assets, &wallet));
        let mut p =
            with_standalone_rails(pipeline, &rails, &assets, clocks.of(worker), options.defect)?
                .with_guard(guard.clone());
        p.sync_wallets().await?;
        workers.push(Arc::new(p));
    }
    start_watches(&rails, &workers[0]).await?;
    let Rails { chain, solana, provider, next_provider, sol_provider } = rails;
    Ok(World {
        rng,
        chain,
        solana,
        provider,
        next_provider,
        sol_provider,
        clock,
        clocks,
        store,
        db,
        engine,
        workers,
        merchant,
        eth: assets.eth,
        sol: assets.sol,
        usd: assets.usd,
        wallet: wallet_address,
        submitted: Vec::new(),
        caps: config.caps.clone(),
        landed: HashMap::new(),
        reviewed: HashSet::new(),
        ended_by_verdict: HashSet::new(),
        tx_owners: HashMap::new(),
        lost: HashSet::new(),
        lost_on_chain: Vec::new(),
        guard,
        guard_losses: options.guard_losses,
        failover_per_mille,
        ended_unpaid: HashMap::new(),
        ended_unpaid_counts: Vec::new(),
        ended_unpaid_fresh: false,
        checks_run: 0,
        next_key: 0,
        next_provider_key: 0,
        report: SeedReport { seed, ..SeedReport::default() },
    })
}

/// The chain with fault rates from `rng`; Solana and the providers with generators of their own,
/// so the schedule of a seed stays what it was without them (the deliberate defects are caught at
/// the same seeds).
fn rails(
    seed: u64,
    options: &Options,
    rng: &mut StdRng,
    clock: &Arc<SimClock>,
    sol_asset: &Asset,
) -> Rails {
    let rates = FaultRates {
        send_refused_before_node: rng.random_range(0..120),
        send_response_lost: rng.random_range(0..200),
        read_error: rng.random_range(0..80),
    };
    // Replicas behind the endpoint: a share of reads per seed, hashed so the schedule stays.
    let lag_per_mille = u32::from(Sha256::digest(format!("{seed}:lagging-reads").as_bytes())[0])
        * LAGGING_READ_PER_MILLE_MAX
        / 256;
    let chain =
        SimChain::new(seed, rates, FINALITY, REORG_DEPTH_MAX).with_lagging_replicas(lag_per_mille);
    let chain = Arc::new(if options.defect == Some(Defect::EvmProofMixesNodes) {
        chain.with_mixed_views()
    } else {
        chain
    });
    let mut solana_rng = StdRng::seed_from_u64(seed ^ SOLANA_SEED_SALT);
    let solana_faults = SolanaFaults {
        answer_lost: solana_rng.random_range(0..200),
        dropped: solana_rng.random_range(0..150),
        unseen_blockhash: solana_rng.random_range(0..80),
        read_error: solana_rng.random_range(0..80),
        late: solana_rng.random_range(0..400),
        snapshot_restart: solana_rng.random_range(0..50),
    };
    let solana = SimSolana::new(seed, solana_faults, sol_asset.clone())
        .with_lagging_nodes(lag_per_mille)
        .with_defects(solana_defects(options.defect));
    let solana = Arc::new(if options.defect == Some(Defect::DurableNonceUnclaimed) {
        solana.without_nonce_value_claims()
    } else {
        solana
    });
    // Each provider with faults of its own seed, and the deliberate defect of reading Circle's
    // unknown error as a refusal.
    let provider_of = |name: &'static str, provider_seed: u64, faults_seed: u64| {
        let faults = ProviderFaults::seeded(faults_seed);
        let provider = SimProvider::named(name, provider_seed, faults, clock.clone());
        Arc::new(if options.defect == Some(Defect::ProviderUnknownErrorIsRefusal) {
            provider.with_unknown_error_as_refusal()
        } else {
            provider
        })
    };
    let provider = provider_of(SIM_PROVIDER, seed, seed ^ PROVIDER_SEED_SALT);
    let (next_seed, sol_seed) = (seed ^ NEXT_PROVIDER_SEED_SALT, seed ^ SOL_PROVIDER_SEED_SALT);
    let next_provider = provider_of(SIM_NEXT_PROVIDER, next_seed, next_seed);
    let sol_provider = provider_of(SIM_SOL_PROVIDER, sol_seed, sol_seed);
    Rails { chain, solana, provider, next_provider, sol_provider }
}

/// The seed's database; a PostgreSQL one is left for the test scripts' cleanup (`payoutd_t_*`).
async fn database(seed: u64, store: SimStore) -> anyhow::Result<TestDb> {
    Ok(match store {
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
    })
}

fn seed_assets() -> anyhow::Result<SeedAssets> {
    let sol_asset =
        Asset::new(SOL, 9, TokenKind::Native)?.with_network_fee(Amount::from_u128(NETWORK_FEES[1]));
    let usd_asset = Asset::new(PROVIDER_ASSET, 2, TokenKind::Provider(DestinationKind::Account))?
        .with_network_fee(Amount::from_u128(NETWORK_FEES[2]));
    let next_asset =
        Asset::new(NEXT_PROVIDER_ASSET, 2, TokenKind::Provider(DestinationKind::Account))?;
    let sol_provider_asset = Asset::new(
        &format!("provider:{SIM_SOL_PROVIDER}/SOL"),
        9,
        TokenKind::Provider(DestinationKind::Solana),
    )?;
    // Payouts in SOL whose attempt on the cluster is proven dead are paid next through a provider.
    let routes = Routes::new(vec![
        Route::new(usd_asset.code.clone(), vec![next_asset.code.clone()])?,
        Route::new(sol_asset.code.clone(), vec![sol_provider_asset.code.clone()])?,
    ])?;
    let eth_asset = Asset::new("evm:31337/ETH", 18, TokenKind::Native)?
        .with_network_fee(Amount::from_u128(NETWORK_FEES[0]));
    let registry = AssetRegistry::new(vec![eth_asset, sol_asset.clone(), usd_asset.clone()])?;
    let eth = registry.get("evm:31337/ETH")?.code.clone();
    let (sol, usd) = (sol_asset.code.clone(), usd_asset.code.clone());
    Ok(SeedAssets {
        registry,
        sol_asset,
        usd_asset,
        next_asset,
        sol_provider_asset,
        routes,
        eth,
        sol,
        usd,
    })
}

/// The seed's one merchant, funded in each asset.
async fn fund(engine: &Engine, assets: &SeedAssets) -> anyhow::Result<MerchantId> {
    let (merchant, _) = engine.create_merchant("sim", [7u8; 32]).await?;
    let funds =
        [(&assets.eth, "sim-fund"), (&assets.sol, "sim-fund-sol"), (&assets.usd, "sim-fund-usd")];
    for ((asset, key), amount) in funds.into_iter().zip(FUNDED) {
        engine
            .deposit(&merchant, asset, Amount::from_u128(amount), DepositKey::parse(key)?)
            .await?;
    }
    Ok(merchant)
}

/// The workers' settings: quick timers, caps on every asset, the deliberate defect if any.
fn pipeline_config(assets: &SeedAssets, defect: Option<Defect>) -> PipelineConfig {
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
    config.caps.insert(assets.eth.clone(), caps(CAP_PER_DESTINATION, CAP_PER_WALLET));
    config.caps.insert(assets.sol.clone(), caps(CAP_PER_DESTINATION, CAP_PER_WALLET));
    config
        .caps
        .insert(assets.usd.clone(), caps(PROVIDER_CAP_PER_DESTINATION, PROVIDER_CAP_PER_ACCOUNT));
    config.sign_batch_max = 8;
    config.defects = engine_defects(defect);
    config
}

fn evm_chain(rails: &Rails, assets: &SeedAssets, wallet: &HotWallet) -> EvmChain {
    EvmChain {
        rail: rails.chain.clone(),
        wallets: vec![wallet.clone()],
        assets: assets
            .registry
            .iter()
            .filter(|a| a.code != assets.sol && a.code != assets.usd)
            .cloned()
            .collect(),
    }
}

/// Each worker is its own process: its own rails, with their own memory of lookups and refusals.
fn with_standalone_rails(
    pipeline: Pipeline,
    rails: &Rails,
    assets: &SeedAssets,
    clock: Arc<dyn Clock>,
    defect: Option<Defect>,
) -> anyhow::Result<Pipeline> {
    let solana_line =
        StandaloneLine { rail: rails.solana.clone(), assets: vec![assets.sol_asset.clone()] };
    // Creates stop well before the key window's last margin (as in production, where they stop
    // fifteen minutes into a day): lookups then read only the window creates can have made.
    let mut rail_config = ProviderRailConfig::new(KEY_WINDOW_MS, REQUEST_TIMEOUT_MS)?
        .with_resend_horizon_ms(RESEND_HORIZON_MS);
    rail_config.defects = ProviderDefects {
        retry_refusal_is_proof: defect == Some(Defect::ProviderRetryRefusalIsProof),
        dead_at_window: defect == Some(Defect::ProviderDeadAtWindow),
        recorded_failure_is_proof: defect == Some(Defect::ProviderRecordedFailureIsProof),
        replayed_error_is_proof: defect == Some(Defect::ProviderReplayedErrorIsProof),
        lookup_window_without_margin: defect == Some(Defect::ProviderLookupWindowWithoutMargin),
    };
    let provider_line = StandaloneLine {
        rail: Arc::new(ProviderRail::new(
            rails.provider.clone(),
            clock.clone(),
            rail_config.clone(),
        )),
        assets: vec![assets.usd_asset.clone()],
    };
    let next_line = StandaloneLine {
        rail: Arc::new(ProviderRail::new(
            rails.next_provider.clone(),
            clock.clone(),
            rail_config.clone(),
        )),
        assets: vec![assets.next_asset.clone()],
    };
    let sol_provider_line = StandaloneLine {
        rail: Arc::new(ProviderRail::new(rails.sol_provider.clone(), clock, rail_config)),
        assets: vec![assets.sol_provider_asset.clone()],
    };
    Ok(pipeline
        .with_standalone_rail(solana_line)
        .with_standalone_rail(provider_line)
        .with_standalone_rail(next_line)
        .with_standalone_rail(sol_provider_line)
        .with_routes(assets.routes.clone()))
}

/// Starts the reconciliation's watch at block 0 and the balance check's opening balance, faults
/// off (a failed read would start them later, as it would in production): from here on the check
/// holds reconciliation to every block and the ledger must explain every unit. Then faults on.
async fn start_watches(rails: &Rails, worker: &Pipeline) -> anyhow::Result<()> {
    rails.chain.set_faults(false);
    worker.reconcile_pass().await?;
    while rails.chain.final_block().await?.is_none() {
        rails.chain.mine(0);
    }
    worker.balance_check_pass().await?;
    rails.chain.set_faults(true);
    rails.solana.set_faults(true);
    rails.provider.set_faults(true);
    rails.next_provider.set_faults(true);
    rails.sol_provider.set_faults(true);
    Ok(())
}

impl World {
    /// The seed's counts for its report, read from the rails and the store at the end.
    pub(super) async fn tally(&mut self) -> anyhow::Result<()> {
        self.report.payouts = self.submitted.len();
        self.report.faults = self.chain.faults_injected()
            + self.solana.faults_injected()
            + self.provider.faults_injected()
            + self.next_provider.faults_injected()
            + self.sol_provider.faults_injected();
        self.report.solana_transfers = self.solana.landed().len();
        self.report.durable_payouts = self.solana.durable_landed();
        let suspects: Vec<_> = self.providers().iter().flat_map(|p| p.suspects()).collect();
        self.report.provider_seconds = suspects
            .iter()
            .filter(|s| {
                s.late && suspects.iter().filter(|o| o.reference == s.reference).count() > 1
            })
            .count();
        self.report.double_transfers = self.providers().iter().map(|p| p.twins()).sum();
        self.report.short_transfers = self.providers().iter().map(|p| p.short_transfers()).sum();
        self.report.lagging_reads = self.chain.lagging_reads() + self.solana.lagging_reads();
        self.report.clock_skew_ms_max = self.clocks.skew_ms_max();
        self.report.transfers = self
            .chain
            .mined()
            .iter()
            .filter(|t| !t.cancel && t.from == self.wallet && !self.chain.is_foreign(&t.hash))
            .count();
        for s in &self.submitted {
            let attempts = self.store.attempts_of(&s.id).await?;
            let later = attempts.iter().filter(|a| a.attempt_no >= 2).count() as u64;
            let paid_at = |name: &str| {
                attempts.iter().any(|a| {
                    matches!(&a.slot, AttemptSlot::Provider { provider, .. } if provider == name)
                        && a.status == payoutd_domain::AttemptStatus::Confirmed
                })
            };
            self.report.provider_routed += usize::from(paid_at(SIM_NEXT_PROVIDER));
            self.report.routed_from_chain += usize::from(paid_at(SIM_SOL_PROVIDER));
            self.report.attempts_after_death += later;
            match s.request.destination {
                Destination::Solana(_) => self.report.solana_attempts_after_death += later,
                Destination::Account(_) => {
                    self.report.provider_payouts += 1;
                    self.report.provider_attempts_after_death += later;
                    let paid = self
                        .store
                        .payout_by_id(&s.id)
                        .await?
                        .is_some_and(|p| p.status == PayoutStatus::Paid);
                    self.report.provider_paid += usize::from(paid);
                }
                Destination::Evm(_) => {}
            }
        }
        for lost in &self.lost_on_chain {
            let relinked = !self.store.tx_owners(lost).await?.is_empty();
            self.report.lost_attempts_relinked += usize::from(relinked);
        }
        Ok(())
    }
}
