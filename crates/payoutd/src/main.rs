//! The payoutd binary: parses the command line, wires store, engine and API, and runs them.

use payoutd::config;
use payoutd::rails::{build_pipeline, operator_pipeline};

use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use payoutd_domain::{Amount, ApiKeyId, DepositKey, HotWallet, MerchantId, PayoutId};
use payoutd_engine::{Engine, Pipeline, SystemClock, Verdict, Webhooks};
use payoutd_webhooks::{AddressPolicy, HttpTransport};

#[derive(Parser)]
#[command(
    name = "payoutd",
    version,
    about = "Self-hosted payout engine: no business event is ever paid twice.",
    after_help = "Environment: PAYOUTD_CONFIG, PAYOUTD_DATABASE_URL (as the options above), PAYOUTD_LOG (e.g. info, payoutd=debug), \
                  PAYOUTD_LOG_FORMAT=json, NO_COLOR. `payoutd serve --help` names what serve reads besides."
)]
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
    /// Run the HTTP API, the dashboard (when PAYOUTD_OPERATOR_KEY is set) and the workers in one process.
    #[command(after_help = SERVE_ENVIRONMENT)]
    Serve {
        /// IP:PORT to serve the API, the dashboard and /metrics on (default 127.0.0.1:8080).
        #[arg(long, env = "PAYOUTD_LISTEN")]
        listen: Option<String>,
        /// Serve the API and the dashboard only, and accept payouts in every configured asset:
        /// `payoutd worker` processes, configured with the rails, pay them. This process reads no
        /// rail section and holds no hot wallet key.
        #[arg(long)]
        api_only: bool,
    },
    /// Run the workers only: the pipeline for the configured rails and the webhook dispatcher
    /// (many may run against one PostgreSQL).
    #[command(after_help = WORKER_ENVIRONMENT)]
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
    /// Hot wallets: their addresses, and top-ups recorded so the balance check explains them.
    Wallet {
        #[command(subcommand)]
        command: WalletCommand,
    },
    /// Credit a merchant's available balance (idempotent on the key).
    Deposit {
        /// The merchant's id (mer_...).
        #[arg(long)]
        merchant: String,
        /// A configured asset code, e.g. evm:1/USDC.
        #[arg(long)]
        asset: String,
        /// Base units, decimal digits.
        #[arg(long)]
        amount: String,
        /// What identifies this credit: the same key again changes nothing.
        #[arg(long)]
        idempotency_key: String,
    },
}

#[derive(Subcommand)]
enum PayoutCommand {
    /// held_for_review -> approved (needs only the database).
    Approve {
        /// The payout's id (po_...).
        id: String,
    },
    /// held_for_review -> rejected, releasing the hold (needs only the database).
    Reject {
        /// The payout's id (po_...).
        id: String,
    },
    /// After signing: send a cancel transaction (EVM: at the same nonce; Solana durable nonce: the
    /// nonce's advance); the payout fails once the chain proves its transfer can never land.
    Cancel {
        /// The payout's id (po_...).
        id: String,
    },
    /// needs_attention -> paid, with evidence.
    ResolvePaid {
        /// The payout's id (po_...).
        id: String,
        /// Why (a ticket, the transaction seen on the explorer): kept with the decision.
        #[arg(long)]
        evidence: String,
    },
    /// needs_attention -> failed, with evidence; refused unless the chain proves nothing can land.
    ResolveFailed {
        /// The payout's id (po_...).
        id: String,
        /// Why: kept with the decision.
        #[arg(long)]
        evidence: String,
    },
    /// needs_attention -> processing with the next attempt, same hold; refused unless the chain proves
    /// the last attempt moved nothing.
    ResolveRetry {
        /// The payout's id (po_...).
        id: String,
        /// Why: kept with the decision.
        #[arg(long)]
        evidence: String,
    },
}

#[derive(Subcommand)]
enum WalletCommand {
    /// Print each configured hot wallet's address as a JSON line (from its key; no node is asked):
    /// fund it with the native coin for fees and with the tokens it pays.
    List,
    /// Record units sent into a hot wallet (a top-up), once per reference: the balance check then
    /// expects them on chain. Prints the booking as JSON.
    Fund {
        /// The wallet's network: an EVM chain id (`1`) or a Solana cluster (`solana:mainnet`).
        #[arg(long)]
        chain: String,
        /// The hot wallet's address: 0x... on an EVM chain, base58 on Solana.
        #[arg(long)]
        address: String,
        /// Asset code on that network, e.g. evm:1/USDC or solana:mainnet/SOL.
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
    Create {
        /// A name for people (1 to 128 characters).
        name: String,
    },
    /// A merchant's API keys: create another, list them, revoke one.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Create another API key for MERCHANT_ID; prints its id and the key (shown this once) as JSON.
    Create {
        /// The merchant's id (mer_...).
        merchant_id: String,
    },
    /// List MERCHANT_ID's keys (ids and dates, never the keys), one JSON line each.
    List {
        /// The merchant's id (mer_...).
        merchant_id: String,
    },
    /// Revoke KEY_ID: every request with it is refused from now on, in every process.
    Revoke {
        /// The key's id (key_...).
        key_id: String,
    },
}

const SERVE_ENVIRONMENT: &str = "Environment: PAYOUTD_LISTEN, PAYOUTD_DATABASE_URL, PAYOUTD_CONFIG (as the options); \
PAYOUTD_OPERATOR_KEY (at least 24 characters: the operator endpoints and the dashboard; without it they are off); \
PAYOUTD_METRICS_TOKEN (at least 24 characters: the bearer token /metrics asks for; without it /metrics answers 401); \
PAYOUTD_REDIS_URL (the optional send guard); the hot wallet and provider keys named in the configuration file; \
PAYOUTD_LOG (e.g. info, payoutd=debug), PAYOUTD_LOG_FORMAT=json, NO_COLOR.";

const WORKER_ENVIRONMENT: &str = "Environment: PAYOUTD_DATABASE_URL, PAYOUTD_CONFIG (as the options); PAYOUTD_METRICS_LISTEN \
(IP:PORT for /metrics); PAYOUTD_METRICS_TOKEN (when set, /metrics asks for it as bearer token; without it, anyone who \
reaches the metrics address may read it); PAYOUTD_REDIS_URL (the optional send guard); the hot wallet and provider keys named in the \
configuration file; PAYOUTD_LOG, PAYOUTD_LOG_FORMAT=json, NO_COLOR.";

const LOG_FILTER_DEFAULT: &str = "info";
/// PostgreSQL's notices while migrating ("relation ... already exists, skipping") say nothing to an
/// operator: quiet unless PAYOUTD_LOG names sqlx itself.
const QUIET_MIGRATION_NOTICES: &str = "sqlx::postgres::notice=warn";

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let given = std::env::var("PAYOUTD_LOG").ok().filter(|text| !text.trim().is_empty());
    let names_sqlx = given.as_deref().is_some_and(|text| text.contains("sqlx"));
    let mut filter = EnvFilter::try_new(given.as_deref().unwrap_or(LOG_FILTER_DEFAULT)).unwrap_or_else(|_| EnvFilter::new(LOG_FILTER_DEFAULT));
    if !names_sqlx {
        filter = filter.add_directive(QUIET_MIGRATION_NOTICES.parse().expect("a valid directive"));
    }
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
        Command::Serve { listen, .. } => listen.clone(),
        _ => None,
    };
    let overrides = config::Overrides { config_file: cli.config, listen, database_url: cli.database_url };
    let cfg = if needs_rails(&cli.command) { config::load(overrides)? } else { config::load_without_rails(overrides)? };
    tracing::debug!(config = ?cfg, "configuration loaded");
    if let Command::Wallet { command: WalletCommand::List } = &cli.command {
        // From the keys alone: no database is opened, no node asked.
        return wallet_list(&cfg);
    }
    let stores = payoutd_store::open_stores(&cfg.database_url)
        .await
        .with_context(|| format!("cannot open database {}", config::redact_url(&cfg.database_url)))?;
    let store = stores.pipeline.clone();
    let engine = Engine::new(store.clone(), Arc::new(SystemClock), cfg.assets.clone()).with_intake_rate(cfg.payouts_per_merchant_per_minute);
    match cli.command {
        Command::Worker => {
            let pipeline = build_pipeline(&stores, &cfg).await?;
            payoutd::rails::log_configuration(&cfg, &payoutd::rails::payable(&cfg, pipeline.as_ref()));
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
                    let access = payoutd_api::metrics_api::MetricsAccess::on_metrics_address(cfg.metrics_token.as_ref());
                    Some(tokio::spawn(payoutd_api::serve_metrics(listener, engine.clone(), access, stopped)))
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
        Command::Payout { command } => payout_command(&stores, &cfg, command).await,
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
        Command::Wallet { command } => wallet_command(&stores, &cfg, command).await,
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
        Command::Serve { api_only: true, .. } => {
            tracing::info!("API only: this process runs no rail; payouts in every configured asset are accepted and payoutd worker processes pay them");
            let webhooks = build_webhooks(&stores, &cfg)?;
            let dashboard = cfg.operator_key.as_ref().map(|_| Arc::new(dashboard(&stores, &cfg)));
            let engine = payoutd::rails::engine_with_guard(engine, &cfg).await?;
            serve(engine, None, webhooks, dashboard, cfg).await
        }
        Command::Serve { api_only: false, .. } => {
            let pipeline = build_pipeline(&stores, &cfg).await?;
            let payable = payoutd::rails::payable(&cfg, pipeline.as_ref());
            payoutd::rails::log_configuration(&cfg, &payable);
            let own_wallets = pipeline.as_ref().map(Pipeline::own_wallets).unwrap_or_default();
            let engine = payoutd::rails::engine_with_guard(engine.with_payable(payable.clone()).with_own_wallets(own_wallets), &cfg).await?;
            let webhooks = build_webhooks(&stores, &cfg)?;
            // The dashboard is the operator's: it is on exactly when the operator key is set.
            let dashboard = cfg.operator_key.as_ref().map(|_| Arc::new(dashboard(&stores, &cfg).with_payable(payable)));
            serve(engine, pipeline, webhooks, dashboard, cfg).await
        }
    }
}

/// The longest funding reference accepted (a transaction hash or a ticket id fits).
const FUNDING_REFERENCE_LEN_MAX: usize = 128;

fn wallet_list(cfg: &config::Config) -> anyhow::Result<()> {
    let rows = payoutd::rails::hot_wallet_rows(cfg);
    if rows.is_empty() {
        anyhow::bail!("no hot wallet is configured ([[chains]] hot_wallet_key_envs/files, [[solana]] hot_wallet_key_env/file)");
    }
    for row in rows {
        println!("{row}");
    }
    Ok(())
}

/// The operator's dashboard over the stores, each network's transactions linked to its explorer.
fn dashboard(stores: &payoutd_store::Stores, cfg: &config::Config) -> payoutd_api::dashboard::Dashboard {
    let mut dashboard = payoutd_api::dashboard::Dashboard::new(stores.operator_views.clone(), stores.pipeline.clone());
    for c in &cfg.chains {
        if let Some(url) = &c.explorer_tx_url {
            dashboard = dashboard.with_explorer(&format!("evm:{}", c.chain_id), url.clone());
        }
    }
    for s in &cfg.solana {
        if let Some(url) = &s.explorer_tx_url {
            dashboard = dashboard.with_explorer(&format!("solana:{}", s.cluster.cluster), url.clone());
        }
    }
    dashboard
}

/// An operator's action on one payout; deciding a held payout needs only the database, the others
/// read or sign on the payout's rail.
async fn payout_command(stores: &payoutd_store::Stores, cfg: &config::Config, command: PayoutCommand) -> anyhow::Result<()> {
    async fn with_rails(stores: &payoutd_store::Stores, cfg: &config::Config) -> anyhow::Result<Pipeline> {
        build_pipeline(stores, cfg)
            .await?
            .context("no rail is configured ([[chains]], [[solana]] or [[providers]]): this action reads or signs on the payout's rail")
    }
    let payout = match command {
        PayoutCommand::Approve { id } => operator_pipeline(stores.pipeline.clone(), cfg).approve(&payout_id(&id)?).await?,
        PayoutCommand::Reject { id } => operator_pipeline(stores.pipeline.clone(), cfg).reject(&payout_id(&id)?).await?,
        PayoutCommand::Cancel { id } => {
            let tx = with_rails(stores, cfg).await?.cancel_signed(&payout_id(&id)?).await?;
            println!("{}", serde_json::json!({"cancel_tx": tx.hash.as_str()}));
            return Ok(());
        }
        PayoutCommand::ResolvePaid { id, evidence } => with_rails(stores, cfg).await?.resolve_needs_attention(&payout_id(&id)?, Verdict::Paid, &evidence).await?,
        PayoutCommand::ResolveFailed { id, evidence } => {
            with_rails(stores, cfg).await?.resolve_needs_attention(&payout_id(&id)?, Verdict::Failed, &evidence).await?
        }
        PayoutCommand::ResolveRetry { id, evidence } => {
            with_rails(stores, cfg).await?.resolve_needs_attention(&payout_id(&id)?, Verdict::Retry, &evidence).await?
        }
    };
    println!("{}", serde_json::json!({"id": payout.id.as_str(), "status": payout.status.as_str()}));
    Ok(())
}

/// Whether a command reads the rails' sections, and so needs their keys.
fn needs_rails(command: &Command) -> bool {
    match command {
        Command::Serve { api_only, .. } => !api_only,
        Command::Worker | Command::Wallet { command: WalletCommand::List } => true,
        Command::Payout { command } => !matches!(command, PayoutCommand::Approve { .. } | PayoutCommand::Reject { .. }),
        Command::Migrate | Command::Incidents | Command::Merchant { .. } | Command::Deposit { .. } | Command::Wallet { .. } => false,
    }
}

async fn wallet_command(stores: &payoutd_store::Stores, cfg: &config::Config, command: WalletCommand) -> anyhow::Result<()> {
    let store = stores.pipeline.as_ref();
    let (chain, address, asset, amount, reference) = match command {
        WalletCommand::List => return wallet_list(cfg),
        WalletCommand::Fund { chain, address, asset, amount, reference } => (chain, address, asset, amount, reference),
    };
    let asset = cfg.assets.get(&asset)?;
    let amount = Amount::parse_positive(&amount).context("--amount")?;
    let reference = reference.trim();
    if reference.is_empty() || reference.len() > FUNDING_REFERENCE_LEN_MAX || !reference.bytes().all(|b| b.is_ascii_graphic()) {
        anyhow::bail!("--reference must be 1 to {FUNDING_REFERENCE_LEN_MAX} printable ASCII characters without spaces");
    }
    let unknown = || format!("no hot wallet {address} on {chain}: a wallet is registered when a worker first runs with its key");
    let wallet_id = match chain.strip_prefix("solana:") {
        Some(cluster) => {
            let address = payoutd_domain::SolanaAddress::parse(&address).context("--address is not a base58 Solana address")?;
            if asset.rail != payoutd_domain::RailFamily::Solana || asset.network != cluster {
                anyhow::bail!("asset {} is not an asset of {chain}", asset.code);
            }
            store.signing_wallet(&chain, &address.to_string()).await?.with_context(unknown)?
        }
        None => {
            let chain_id: u64 = chain.strip_prefix("evm:").unwrap_or(&chain).parse().context("--chain is neither an EVM chain id nor solana:<cluster>")?;
            let address = payoutd_domain::EvmAddress::parse(&address).context("--address is not a 0x EVM address")?;
            if asset.evm_chain_id() != Some(chain_id) {
                anyhow::bail!("asset {} is not an asset of chain {chain_id}", asset.code);
            }
            let wallet_id = HotWallet::id_for(chain_id, &address);
            stores.evm_lines.hot_wallet(&wallet_id).await?.with_context(unknown)?;
            wallet_id
        }
    };
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
    state.metrics_access = payoutd_api::metrics_api::MetricsAccess::on_api(cfg.metrics_token.as_ref());
    state.trusted_proxies = Arc::new(cfg.trusted_proxies.clone());
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
    payoutd_api::serve_with_limits(listener, state, cfg.http_limits, shutdown_signal()).await?;
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
