//! The payoutd binary: parses the command line, wires store, engine and API, and runs them.

use payoutd::{config, redis_guard};

use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use payoutd_domain::{Amount, ApiKeyId, AssetRegistry, DepositKey, HotWallet, MerchantId, PayoutId, RailFamily};
use payoutd_engine::{Engine, EvmChain, Pipeline, PipelineStore, StandaloneLine, SystemClock, Verdict, Webhooks};
use payoutd_webhooks::{AddressPolicy, HttpTransport};

#[derive(Parser)]
#[command(name = "payoutd", version, about = "Self-hosted payout engine: no business event is ever paid twice.")]
struct Cli {
    /// TOML configuration file.
    #[arg(long, global = true, env = "PAYOUTD_CONFIG")]
    config: Option<String>,
    /// postgres://... for production; default: an SQLite file `payoutd.db` in the working directory.
    #[arg(long, global = true, env = "PAYOUTD_DATABASE_URL")]
    database_url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API (and, from the pipeline issue on, the workers).
    Serve {
        #[arg(long, env = "PAYOUTD_LISTEN")]
        listen: Option<String>,
    },
    /// Run the pipeline workers only (many may run against one PostgreSQL).
    Worker,
    /// Create or upgrade the database schema, then exit.
    Migrate,
    /// Operator actions on one payout.
    Payout {
        #[command(subcommand)]
        command: PayoutCommand,
    },
    /// List open incidents as JSON lines.
    Incidents,
    /// Merchant administration.
    Merchant {
        #[command(subcommand)]
        command: MerchantCommand,
    },
    /// Hot wallet books: record a funding so the balance check explains it.
    Wallet {
        #[command(subcommand)]
        command: WalletCommand,
    },
    /// Credit a merchant's available balance (idempotent on the key).
    Deposit {
        #[arg(long)]
        merchant: String,
        #[arg(long)]
        asset: String,
        /// Base units, decimal digits.
        #[arg(long)]
        amount: String,
        #[arg(long)]
        idempotency_key: String,
    },
}

#[derive(Subcommand)]
enum PayoutCommand {
    /// held_for_review -> approved.
    Approve { id: String },
    /// held_for_review -> rejected (releases the hold).
    Reject { id: String },
    /// After signing: send a cancel transaction (EVM: at the same nonce; Solana durable nonce: the
    /// nonce's advance); the payout fails once the chain proves its transfer can never land.
    Cancel { id: String },
    /// needs_attention -> paid, with evidence.
    ResolvePaid {
        id: String,
        #[arg(long)]
        evidence: String,
    },
    /// needs_attention -> failed, with evidence; refused unless the chain proves nothing can land.
    ResolveFailed {
        id: String,
        #[arg(long)]
        evidence: String,
    },
    /// needs_attention -> processing with the next attempt, same hold; refused unless the chain proves
    /// the last attempt moved nothing.
    ResolveRetry {
        id: String,
        #[arg(long)]
        evidence: String,
    },
}

#[derive(Subcommand)]
enum WalletCommand {
    /// Record units sent into a hot wallet (a top-up), once per reference: the balance check then
    /// expects them on chain. Prints the booking as JSON.
    Fund {
        /// The wallet's chain id.
        #[arg(long)]
        chain: u64,
        /// The hot wallet's 0x address.
        #[arg(long)]
        address: String,
        /// Asset code on that chain, e.g. evm:1/USDC.
        #[arg(long)]
        asset: String,
        /// Base units, decimal digits.
        #[arg(long)]
        amount: String,
        /// What identifies the top-up (its transaction hash, say): a second booking with it changes nothing.
        #[arg(long)]
        reference: String,
    },
}

#[derive(Subcommand)]
enum MerchantCommand {
    /// Create a merchant; prints its id and API key (shown this once) as JSON.
    Create { name: String },
    /// A merchant's API keys: create another, list them, revoke one.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Create another API key for MERCHANT_ID; prints its id and the key (shown this once) as JSON.
    Create { merchant_id: String },
    /// List MERCHANT_ID's keys (ids and dates, never the keys), one JSON line each.
    List { merchant_id: String },
    /// Revoke KEY_ID: every request with it is refused from now on, in every process.
    Revoke { key_id: String },
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("PAYOUTD_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    // Colour codes only for a person at a terminal, never into log files.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if std::env::var("PAYOUTD_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn random_key_bytes() -> anyhow::Result<[u8; 32]> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("OS random number generator failed: {e}"))?;
    Ok(bytes)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    init_tracing();
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("payoutd: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let listen = match &cli.command {
        Command::Serve { listen } => listen.clone(),
        _ => None,
    };
    let cfg = config::load(config::Overrides { config_file: cli.config, listen, database_url: cli.database_url })?;
    tracing::debug!(config = ?cfg, "configuration loaded");
    let stores = payoutd_store::open_stores(&cfg.database_url)
        .await
        .with_context(|| format!("cannot open database {}", config::redact_url(&cfg.database_url)))?;
    let store = stores.pipeline.clone();
    let engine = Engine::new(store.clone(), Arc::new(SystemClock), cfg.assets.clone());
    match cli.command {
        Command::Worker => {
            let pipeline = build_pipeline(store, &cfg).await?;
            let webhooks = build_webhooks(&stores, &cfg)?;
            tracing::info!(database = %config::redact_url(&cfg.database_url), chains = cfg.chains.len(), "payoutd worker running");
            let (stop_metrics, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
            let metrics = match cfg.metrics_listen {
                Some(addr) => {
                    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr} for metrics"))?;
                    tracing::info!(listen = %listener.local_addr()?, "worker metrics at /metrics");
                    let stopped = async move {
                        let _ = metrics_stopped.await;
                    };
                    Some(tokio::spawn(payoutd_api::serve_metrics(listener, engine.clone(), stopped)))
                }
                None => None,
            };
            run_workers(pipeline.map(Arc::new), webhooks, shutdown_signal()).await;
            let _ = stop_metrics.send(());
            if let Some(task) = metrics {
                let _ = task.await;
            }
            Ok(())
        }
        Command::Payout { command } => {
            let pipeline = build_pipeline(store, &cfg).await?.context("no chains configured")?;
            let payout = match command {
                PayoutCommand::Approve { id } => pipeline.approve(&payout_id(&id)?).await?,
                PayoutCommand::Reject { id } => pipeline.reject(&payout_id(&id)?).await?,
                PayoutCommand::Cancel { id } => {
                    let tx = pipeline.cancel_signed(&payout_id(&id)?).await?;
                    println!("{}", serde_json::json!({"cancel_tx": tx.hash.as_str()}));
                    return Ok(());
                }
                PayoutCommand::ResolvePaid { id, evidence } => pipeline.resolve_needs_attention(&payout_id(&id)?, Verdict::Paid, &evidence).await?,
                PayoutCommand::ResolveFailed { id, evidence } => {
                    pipeline.resolve_needs_attention(&payout_id(&id)?, Verdict::Failed, &evidence).await?
                }
                PayoutCommand::ResolveRetry { id, evidence } => {
                    pipeline.resolve_needs_attention(&payout_id(&id)?, Verdict::Retry, &evidence).await?
                }
            };
            println!("{}", serde_json::json!({"id": payout.id.as_str(), "status": payout.status.as_str()}));
            Ok(())
        }
        Command::Incidents => {
            for i in store.open_incidents(payoutd_engine::store::LIST_LIMIT_MAX).await? {
                println!(
                    "{}",
                    serde_json::json!({"id": i.id.as_str(), "kind": i.kind.as_str(), "payout_id": i.payout_id.map(|p| p.to_string()),
                        "attempt_id": i.attempt_id.map(|a| a.to_string()), "detail": i.detail, "created_at_ms": i.created_at_ms})
                );
            }
            Ok(())
        }
        Command::Migrate => {
            println!("{}", serde_json::json!({"migrated": true}));
            Ok(())
        }
        Command::Merchant { command: MerchantCommand::Create { name } } => {
            let (id, key) = engine.create_merchant(&name, random_key_bytes()?).await?;
            println!("{}", serde_json::json!({"id": id.as_str(), "name": name.trim(), "api_key": key.expose()}));
            Ok(())
        }
        Command::Merchant { command: MerchantCommand::Key { command } } => key_command(&engine, command).await,
        Command::Wallet { command } => wallet_command(store.as_ref(), &cfg, command).await,
        Command::Deposit { merchant, asset, amount, idempotency_key } => {
            let merchant = MerchantId::parse(&merchant).context("--merchant is not a merchant id (mer_...)")?;
            let asset = cfg.assets.get(&asset)?.code.clone();
            let amount = Amount::parse_positive(&amount).context("--amount")?;
            let key = DepositKey::parse(&idempotency_key).context("--idempotency-key")?;
            let (d, replay) = engine.deposit(&merchant, &asset, amount, key).await?;
            println!(
                "{}",
                serde_json::json!({"id": d.id.as_str(), "merchant_id": d.merchant_id.as_str(), "asset": d.asset.as_str(),
                    "amount": d.amount.to_string(), "replayed": replay == payoutd_engine::Replay::Replayed})
            );
            Ok(())
        }
        Command::Serve { .. } => {
            let pipeline = build_pipeline(store, &cfg).await?;
            let webhooks = build_webhooks(&stores, &cfg)?;
            // The dashboard is the operator's: it is on exactly when the operator key is set.
            let dashboard = cfg.operator_key.as_ref().map(|_| Arc::new(payoutd_api::dashboard::Dashboard::new(stores.operator_views.clone(), stores.pipeline.clone())));
            serve(engine, pipeline, webhooks, dashboard, cfg).await
        }
    }
}

/// The longest funding reference accepted (a transaction hash or a ticket id fits).
const FUNDING_REFERENCE_LEN_MAX: usize = 128;

async fn wallet_command(store: &dyn PipelineStore, cfg: &config::Config, command: WalletCommand) -> anyhow::Result<()> {
    let WalletCommand::Fund { chain, address, asset, amount, reference } = command;
    let address = payoutd_domain::EvmAddress::parse(&address).context("--address is not a 0x EVM address")?;
    let asset = cfg.assets.get(&asset)?;
    if asset.evm_chain_id() != Some(chain) {
        anyhow::bail!("asset {} is not an asset of chain {chain}", asset.code);
    }
    let amount = Amount::parse_positive(&amount).context("--amount")?;
    let reference = reference.trim();
    if reference.is_empty() || reference.len() > FUNDING_REFERENCE_LEN_MAX || !reference.bytes().all(|b| b.is_ascii_graphic()) {
        anyhow::bail!("--reference must be 1 to {FUNDING_REFERENCE_LEN_MAX} printable ASCII characters without spaces");
    }
    let wallet_id = HotWallet::id_for(chain, &address);
    if store.hot_wallet(&wallet_id).await?.is_none() {
        anyhow::bail!("no hot wallet {address} on chain {chain}: a wallet is registered when a worker first runs with its key");
    }
    let funding = payoutd_engine::pipeline_store::WalletFunding {
        reference: format!("funding:{reference}"),
        kind: payoutd_engine::pipeline_store::FundingKind::Funding,
        wallet_id,
        asset: asset.code.clone(),
        amount,
        at_ms: payoutd_engine::Clock::now_ms(&SystemClock),
    };
    let booked = store.book_wallet_funding(&funding).await?;
    println!(
        "{}",
        serde_json::json!({"wallet_id": funding.wallet_id, "asset": funding.asset.as_str(), "amount": amount.to_string(),
            "reference": reference, "booked": booked})
    );
    Ok(())
}

async fn key_command(engine: &Engine, command: KeyCommand) -> anyhow::Result<()> {
    let merchant = |text: &str| MerchantId::parse(text).with_context(|| format!("{text:?} is not a merchant id (mer_...)"));
    match command {
        KeyCommand::Create { merchant_id } => {
            let merchant = merchant(&merchant_id)?;
            let (id, key) = engine.create_api_key(&merchant, random_key_bytes()?).await.map_err(|e| match e {
                payoutd_engine::IntakeError::UnknownMerchant => anyhow::anyhow!("no merchant {merchant}"),
                other => other.into(),
            })?;
            println!("{}", serde_json::json!({"id": id.as_str(), "merchant_id": merchant.as_str(), "api_key": key.expose()}));
        }
        KeyCommand::List { merchant_id } => {
            for k in engine.api_keys(&merchant(&merchant_id)?).await? {
                println!(
                    "{}",
                    serde_json::json!({"id": k.id.as_str(), "merchant_id": k.merchant_id.as_str(), "created_at_ms": k.created_at_ms,
                        "revoked_at_ms": k.revoked_at_ms})
                );
            }
        }
        KeyCommand::Revoke { key_id } => {
            let id = ApiKeyId::parse(&key_id).with_context(|| format!("{key_id:?} is not an API key id (key_...)"))?;
            engine.revoke_api_key(&id).await.map_err(|e| match e {
                payoutd_engine::IntakeError::NotFound => anyhow::anyhow!("no API key {id} that is not already revoked"),
                other => other.into(),
            })?;
            println!("{}", serde_json::json!({"id": id.as_str(), "revoked": true}));
        }
    }
    Ok(())
}

fn payout_id(text: &str) -> anyhow::Result<PayoutId> {
    PayoutId::parse(text).with_context(|| format!("{text:?} is not a payout id (po_...)"))
}

/// The workers for the configured chains, with wallets registered and nonce counters synced.
async fn build_pipeline(store: Arc<dyn PipelineStore>, cfg: &config::Config) -> anyhow::Result<Option<Pipeline>> {
    if cfg.chains.is_empty() && cfg.solana.is_empty() && cfg.providers.is_empty() {
        return Ok(None);
    }
    let mut chains = Vec::new();
    for c in &cfg.chains {
        let rpc = payoutd_rail_evm::EvmRpc::new(c.rpc_url.expose()).with_context(|| format!("chain {}: RPC URL", c.chain_id))?;
        match rpc.chain_id().await {
            Ok(id) if id != c.chain_id => anyhow::bail!("chain {}: the node at the RPC URL is chain {id}", c.chain_id),
            Ok(_) => {}
            Err(e) => tracing::warn!(chain = c.chain_id, error = %e, "cannot check the node's chain id now; will retry as we go"),
        }
        let wallets = c
            .keys
            .iter()
            .map(|k| HotWallet { id: HotWallet::id_for(c.chain_id, &k.address()), chain_id: c.chain_id, address: k.address(), next_nonce: 0 })
            .collect();
        let assets: Vec<_> = cfg.assets.iter().filter(|a| a.evm_chain_id() == Some(c.chain_id)).cloned().collect();
        if !assets.iter().any(|a| a.token == payoutd_domain::asset::TokenKind::Native) {
            anyhow::bail!(
                "chain {}: no native asset configured (an [[assets]] entry `evm:{}/<SYMBOL>` with kind = \"native\"); network fees are booked in it",
                c.chain_id,
                c.chain_id
            );
        }
        let node = payoutd_rail_evm::EvmNode::new(rpc, c.chain_id, c.finality, c.max_fee_per_gas_cap_wei, c.keys.clone())
            .with_send_batch_max(c.send_batch_max);
        chains.push(EvmChain { rail: Arc::new(node), wallets, assets });
    }
    let mut pipeline = Pipeline::new(store.clone(), Arc::new(SystemClock), chains, cfg.pipeline.clone());
    for s in &cfg.solana {
        pipeline = pipeline.with_standalone_rail(solana_line(&store, s, &cfg.assets).await?);
    }
    for p in &cfg.providers {
        pipeline = pipeline.with_standalone_rail(payoutd::providers::provider_line(p, &cfg.assets)?);
    }
    if let Some(url) = &cfg.redis_url {
        let guard = redis_guard::RedisGuard::connect(url).await.with_context(|| format!("Redis at {}", config::redact_url(url)))?;
        pipeline = pipeline.with_guard(Arc::new(guard));
        tracing::info!("Redis send guard enabled");
    }
    pipeline.sync_wallets().await?;
    Ok(Some(pipeline))
}

/// One Solana cluster's rail and the assets it pays, its hot wallet registered.
async fn solana_line(store: &Arc<dyn PipelineStore>, s: &config::SolanaClusterConfig, assets: &AssetRegistry) -> anyhow::Result<StandaloneLine> {
    let name = &s.cluster.cluster;
    let assets: Vec<_> = assets.iter().filter(|a| a.rail == RailFamily::Solana && &a.network == name).cloned().collect();
    if assets.is_empty() {
        anyhow::bail!("solana {name}: no asset configured on it (an [[assets]] entry `solana:{name}/<SYMBOL>`)");
    }
    let address = s.key.pubkey().to_string();
    let wallet_id = store.ensure_signing_wallet(&format!("solana:{name}"), &address).await?;
    let rail = payoutd_rail_solana::SolanaRail::new(s.cluster.clone(), s.key.clone(), wallet_id, &assets).with_context(|| format!("solana {name}"))?;
    rail.check_durable_nonce().await.with_context(|| format!("solana {name}"))?;
    tracing::info!(cluster = %name, hot_wallet = %address, rpc = %s.cluster.rpc_url, paid_at = ?s.cluster.paid_at,
        assets = ?assets.iter().map(|a| a.code.as_str()).collect::<Vec<_>>(), "Solana cluster");
    Ok(StandaloneLine { rail: Arc::new(rail), assets })
}

/// The webhook use cases over the store and the HTTP transport the configuration allows.
fn build_webhooks(stores: &payoutd_store::Stores, cfg: &config::Config) -> anyhow::Result<Webhooks> {
    let policy = if cfg.webhooks.allow_private_urls {
        tracing::warn!("webhooks may go to http and private addresses (webhooks.allow_private_urls): local development only");
        AddressPolicy::AllowPrivate
    } else {
        AddressPolicy::PublicHttpsOnly
    };
    let transport = HttpTransport::new(cfg.webhooks.timeout_ms, policy).context("webhook HTTP client")?;
    Ok(Webhooks::new(stores.webhooks.clone(), Arc::new(transport), Arc::new(SystemClock), cfg.webhooks.clone()))
}

/// The pipeline (when chains are configured) and the webhook dispatcher, until `shutdown`.
async fn run_workers(pipeline: Option<Arc<Pipeline>>, webhooks: Webhooks, shutdown: impl std::future::Future<Output = ()>) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let pipeline_task = pipeline.map(|p| {
        let stop = stopped(stop_rx.clone());
        tokio::spawn(async move { p.run(stop).await })
    });
    let dispatcher = webhooks.dispatcher();
    let stop = stopped(stop_rx.clone());
    let dispatcher_task = tokio::spawn(async move { dispatcher.run(stop).await });
    shutdown.await;
    let _ = stop_tx.send(true);
    if let Some(task) = pipeline_task {
        let _ = task.await;
    }
    let _ = dispatcher_task.await;
}

async fn serve(
    engine: Engine,
    pipeline: Option<Pipeline>,
    webhooks: Webhooks,
    dashboard: Option<Arc<payoutd_api::dashboard::Dashboard>>,
    cfg: config::Config,
) -> anyhow::Result<()> {
    let pipeline = pipeline.map(Arc::new);
    let mut state = payoutd_api::AppState::new(engine, cfg.operator_key.as_ref());
    state.require_payout_key = cfg.require_payout_key;
    state.pipeline = pipeline.clone();
    state.webhooks = Some(webhooks.clone());
    state.batch_lines_max = cfg.batch_lines_max;
    state.dashboard = dashboard;
    if cfg.operator_key.is_none() {
        tracing::warn!("PAYOUTD_OPERATOR_KEY is not set: operator endpoints answer 401");
    }
    let listener = tokio::net::TcpListener::bind(cfg.listen).await.with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let local = listener.local_addr()?;
    tracing::info!(listen = %local, database = %config::redact_url(&cfg.database_url), "payoutd serving");
    // One line on stdout that scripts can wait for.
    println!("{}", serde_json::json!({"listening": local.to_string()}));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let workers = tokio::spawn(run_workers(pipeline, webhooks, async move {
        let _ = stop_rx.await;
    }));
    payoutd_api::serve(listener, state, shutdown_signal()).await?;
    let _ = stop_tx.send(());
    let _ = workers.await;
    tracing::info!("payoutd stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutdown signal received; finishing in-flight requests");
}
