//! The payoutd binary: parses the command line, wires store, engine and API, and runs them.

use payoutd::config;
use payoutd::rails::{build_pipeline, operator_pipeline};

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use payoutd_domain::{Amount, ApiKeyId, AssetCode, DepositKey, HotWallet, MerchantId, PayoutId};
use payoutd_engine::{Engine, Pipeline, SystemClock, Verdict, Webhooks};
use payoutd_webhooks::{AddressPolicy, HttpTransport};

mod cli;

use cli::{
    Cli, Command, KeyCommand, MerchantCommand, PayoutCommand, WalletCommand, WebhooksCommand,
};

const LOG_FILTER_DEFAULT: &str = "info";
/// PostgreSQL's notices while migrating ("relation ... already exists, skipping") say nothing to an
/// operator: quiet unless PAYOUTD_LOG names sqlx itself.
const QUIET_MIGRATION_NOTICES: &str = "sqlx::postgres::notice=warn";

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let given = std::env::var("PAYOUTD_LOG").ok().filter(|text| !text.trim().is_empty());
    let names_sqlx = given.as_deref().is_some_and(|text| text.contains("sqlx"));
    let mut filter = EnvFilter::try_new(given.as_deref().unwrap_or(LOG_FILTER_DEFAULT))
        .unwrap_or_else(|_| EnvFilter::new(LOG_FILTER_DEFAULT));
    if !names_sqlx {
        filter = filter.add_directive(QUIET_MIGRATION_NOTICES.parse().expect("a valid directive"));
    }
    use std::io::IsTerminal;
    // Colour codes only for a person at a terminal, never into log files.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    if std::env::var("PAYOUTD_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn random_key_bytes() -> anyhow::Result<[u8; 32]> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("OS random number generator failed: {e}"))?;
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
    if let Command::Signer { listen, solana_key_files } = &cli.command {
        let token = std::env::var("PAYOUTD_SIGNER_TOKEN")
            .context("PAYOUTD_SIGNER_TOKEN (the token callers must present) is not set")?;
        return payoutd::signer_service::serve(listen, solana_key_files, &token, shutdown_signal())
            .await;
    }
    let listen = match &cli.command {
        Command::Serve { listen, .. } => listen.clone(),
        _ => None,
    };
    let overrides =
        config::Overrides { config_file: cli.config, listen, database_url: cli.database_url };
    let cfg = if needs_rails(&cli.command) {
        config::load(overrides)?
    } else {
        config::load_without_rails(overrides)?
    };
    tracing::debug!(config = ?cfg, "configuration loaded");
    if let Command::Wallet { command: WalletCommand::List } = &cli.command {
        // From the keys alone: no database is opened, no node asked.
        return wallet_list(&cfg);
    }
    let stores =
        payoutd_store::open_stores_with(&cfg.database_url, cfg.webhook_secrets_key.clone())
            .await
            .with_context(|| {
            format!("cannot open database {}", config::redact_url(&cfg.database_url))
        })?;
    let store = stores.pipeline.clone();
    let engine = Engine::new(store.clone(), Arc::new(SystemClock), cfg.assets.clone())
        .with_intake_rate(cfg.payouts_per_merchant_per_minute)
        .with_payouts_per_hour(cfg.payouts_per_merchant_per_hour);
    match cli.command {
        Command::Worker => worker(&stores, &cfg, engine).await,
        Command::Signer { .. } => {
            unreachable!("the signer is served before any configuration is read")
        }
        Command::Payout { command } => payout_command(&stores, &cfg, command).await,
        Command::Webhooks { command: WebhooksCommand::Reseal } => {
            let current = cfg.webhook_secrets_key.as_ref().context(
                "PAYOUTD_WEBHOOK_SECRETS_KEY must be set: the key to seal the secrets under",
            )?;
            let previous = config::previous_webhook_secrets_key()?;
            let resealed = payoutd_store::reseal_webhook_secrets(
                &cfg.database_url,
                current,
                previous.as_deref(),
            )
            .await?;
            let detail = format!("{resealed} webhook secrets sealed under the current key");
            payoutd::audit::record(
                stores.operator_views.as_ref(),
                "webhooks_reseal",
                "webhook_secrets",
                detail,
            )
            .await?;
            println!("{}", serde_json::json!({"resealed": resealed}));
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
            println!(
                "{}",
                serde_json::json!({"id": id.as_str(), "name": name.trim(), "api_key": key.expose()})
            );
            Ok(())
        }
        Command::Merchant { command: MerchantCommand::Key { command } } => {
            key_command(&engine, stores.operator_views.as_ref(), command).await
        }
        Command::Wallet { command } => wallet_command(&stores, &cfg, command).await,
        Command::Deposit { merchant, asset, amount, idempotency_key } => {
            deposit_command(&stores, &cfg, &engine, &merchant, &asset, &amount, &idempotency_key)
                .await
        }
        Command::Serve { api_only: true, .. } => serve_api_only(&stores, cfg, engine).await,
        Command::Serve { api_only: false, .. } => serve_with_rails(&stores, cfg, engine).await,
    }
}

/// `payoutd worker`: the rails' passes and webhook deliveries until a shutdown signal, with the
/// worker's own `/metrics` when an address is configured.
async fn worker(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
    engine: Engine,
) -> anyhow::Result<()> {
    let pipeline = build_pipeline(stores, cfg).await?;
    payoutd::rails::log_configuration(cfg, &payoutd::rails::payable(cfg, pipeline.as_ref()));
    let webhooks = build_webhooks(stores, cfg)?;
    tracing::info!(database = %config::redact_url(&cfg.database_url), chains = cfg.chains.len(), "payoutd worker running");
    let (stop_metrics, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
    let metrics = match cfg.metrics_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} for metrics"))?;
            tracing::info!(listen = %listener.local_addr()?, "worker metrics at /metrics");
            let stopped = async move {
                let _ = metrics_stopped.await;
            };
            let access = payoutd_api::metrics_api::MetricsAccess::on_metrics_address(
                cfg.metrics_token.as_ref(),
            );
            Some(tokio::spawn(payoutd_api::serve_metrics(
                listener,
                engine.clone(),
                access,
                stopped,
            )))
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

/// `payoutd deposit`: credits a merchant, idempotently on its key; a new credit reaches the audit log.
async fn deposit_command(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
    engine: &Engine,
    merchant: &str,
    asset: &str,
    amount: &str,
    idempotency_key: &str,
) -> anyhow::Result<()> {
    let merchant =
        MerchantId::parse(merchant).context("--merchant is not a merchant id (mer_...)")?;
    let asset = cfg.assets.get(asset)?.code.clone();
    let amount = Amount::parse_positive(amount).context("--amount")?;
    let key = DepositKey::parse(idempotency_key).context("--idempotency-key")?;
    let (d, replay) = engine.deposit(&merchant, &asset, amount, key).await?;
    if replay == payoutd_engine::Replay::Created {
        let detail = format!("{} {} credited ({})", d.amount, d.asset, d.id);
        payoutd::audit::record(
            stores.operator_views.as_ref(),
            "deposit",
            merchant.as_str(),
            detail,
        )
        .await?;
    }
    println!(
        "{}",
        serde_json::json!({"id": d.id.as_str(), "merchant_id": d.merchant_id.as_str(), "asset": d.asset.as_str(),
            "amount": d.amount.to_string(), "replayed": replay == payoutd_engine::Replay::Replayed})
    );
    Ok(())
}

/// `payoutd serve --api-only`: the API and webhooks, no rail; payouts to the hot wallets the
/// workers registered are refused.
async fn serve_api_only(
    stores: &payoutd_store::Stores,
    cfg: config::Config,
    engine: Engine,
) -> anyhow::Result<()> {
    tracing::info!(
        "API only: this process runs no rail; payouts in every configured asset are accepted and payoutd worker processes pay them"
    );
    let webhooks = build_webhooks(stores, &cfg)?;
    let dashboard = cfg.operator_key.as_ref().map(|_| Arc::new(dashboard(stores, &cfg)));
    let own_wallets = payoutd::rails::recorded_own_wallets(stores.operator_views.as_ref()).await?;
    tracing::info!(
        hot_wallets = own_wallets.len(),
        "payouts to the hot wallets the workers registered are refused"
    );
    let engine =
        payoutd::rails::engine_with_guard(engine.with_own_wallets(own_wallets), &cfg).await?;
    serve(engine, None, webhooks, dashboard, stores.operator_views.clone(), cfg).await
}

/// `payoutd serve`: the API, the rails' passes and webhooks in one process.
async fn serve_with_rails(
    stores: &payoutd_store::Stores,
    cfg: config::Config,
    engine: Engine,
) -> anyhow::Result<()> {
    let pipeline = build_pipeline(stores, &cfg).await?;
    let payable = payoutd::rails::payable(&cfg, pipeline.as_ref());
    payoutd::rails::log_configuration(&cfg, &payable);
    let own_wallets = pipeline.as_ref().map(Pipeline::own_wallets).unwrap_or_default();
    let engine = payoutd::rails::engine_with_guard(
        engine.with_payable(payable.clone()).with_own_wallets(own_wallets),
        &cfg,
    )
    .await?;
    let webhooks = build_webhooks(stores, &cfg)?;
    // The dashboard is the operator's: it is on exactly when the operator key is set.
    let dashboard =
        cfg.operator_key.as_ref().map(|_| Arc::new(dashboard(stores, &cfg).with_payable(payable)));
    serve(engine, pipeline, webhooks, dashboard, stores.operator_views.clone(), cfg).await
}

/// The longest funding reference accepted (a transaction hash or a ticket id fits).
const FUNDING_REFERENCE_LEN_MAX: usize = 128;

fn wallet_list(cfg: &config::Config) -> anyhow::Result<()> {
    let rows = payoutd::rails::hot_wallet_rows(cfg);
    if rows.is_empty() {
        anyhow::bail!(
            "no hot wallet is configured ([[chains]] hot_wallet_key_envs/files, [[solana]] hot_wallet_key_env/file)"
        );
    }
    for row in rows {
        println!("{row}");
    }
    Ok(())
}

/// The operator's dashboard over the stores, each network's transactions linked to its explorer.
fn dashboard(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
) -> payoutd_api::dashboard::Dashboard {
    let mut dashboard = payoutd_api::dashboard::Dashboard::new(
        stores.operator_views.clone(),
        stores.pipeline.clone(),
    );
    for c in &cfg.chains {
        if let Some(url) = &c.explorer_tx_url {
            dashboard = dashboard.with_explorer(&format!("evm:{}", c.chain_id), url.clone());
        }
    }
    for s in &cfg.solana {
        if let Some(url) = &s.explorer_tx_url {
            dashboard =
                dashboard.with_explorer(&format!("solana:{}", s.cluster.cluster), url.clone());
        }
    }
    dashboard
}

/// An operator's action on one payout; deciding a held payout needs only the database, the others
/// read or sign on the payout's rail.
async fn payout_command(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
    command: PayoutCommand,
) -> anyhow::Result<()> {
    async fn with_rails(
        stores: &payoutd_store::Stores,
        cfg: &config::Config,
    ) -> anyhow::Result<Pipeline> {
        build_pipeline(stores, cfg)
            .await?
            .context("no rail is configured ([[chains]], [[solana]] or [[providers]]): this action reads or signs on the payout's rail")
    }
    let action = command.action();
    let payout = match command {
        PayoutCommand::Approve { id } => {
            operator_pipeline(stores.pipeline.clone(), cfg).approve(&payout_id(&id)?).await?
        }
        PayoutCommand::Reject { id } => {
            operator_pipeline(stores.pipeline.clone(), cfg).reject(&payout_id(&id)?).await?
        }
        PayoutCommand::Cancel { id } => {
            let tx = with_rails(stores, cfg).await?.cancel_signed(&payout_id(&id)?).await?;
            payoutd::audit::record(
                stores.operator_views.as_ref(),
                "cancel",
                &id,
                format!("cancel transaction {} sent", tx.hash),
            )
            .await?;
            println!("{}", serde_json::json!({"cancel_tx": tx.hash.as_str()}));
            return Ok(());
        }
        PayoutCommand::ResolvePaid { id, evidence } => {
            with_rails(stores, cfg)
                .await?
                .resolve_needs_attention(&payout_id(&id)?, Verdict::Paid, &evidence)
                .await?
        }
        PayoutCommand::ResolveFailed { id, evidence } => {
            with_rails(stores, cfg)
                .await?
                .resolve_needs_attention(&payout_id(&id)?, Verdict::Failed, &evidence)
                .await?
        }
        PayoutCommand::ResolveRetry { id, evidence } => {
            with_rails(stores, cfg)
                .await?
                .resolve_needs_attention(&payout_id(&id)?, Verdict::Retry, &evidence)
                .await?
        }
    };
    payoutd::audit::record(
        stores.operator_views.as_ref(),
        action,
        payout.id.as_str(),
        format!("now {}", payout.status.as_str()),
    )
    .await?;
    println!("{}", serde_json::json!({"id": payout.id.as_str(), "status": payout.status.as_str()}));
    Ok(())
}

/// Whether a command reads the rails' sections, and so needs their keys.
fn needs_rails(command: &Command) -> bool {
    match command {
        Command::Serve { api_only, .. } => !api_only,
        Command::Worker | Command::Wallet { command: WalletCommand::List } => true,
        Command::Signer { .. } => false,
        Command::Payout { command } => {
            !matches!(command, PayoutCommand::Approve { .. } | PayoutCommand::Reject { .. })
        }
        Command::Migrate
        | Command::Incidents
        | Command::Merchant { .. }
        | Command::Deposit { .. }
        | Command::Wallet { .. }
        | Command::Webhooks { .. } => false,
    }
}

/// The hot wallet a top-up goes to (its row id, which a worker registered) and the asset it arrived
/// in, checked to be an asset of that wallet's network: an EVM chain, a Solana cluster, or a
/// provider's account (`provider:<name>`, whose fee asset need not be a payable one).
async fn funded_wallet(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
    chain: &str,
    address: &str,
    asset: &str,
) -> anyhow::Result<(String, AssetCode)> {
    let store = stores.pipeline.as_ref();
    let unknown = || {
        format!(
            "no hot wallet {address} on {chain}: a wallet is registered when a worker first runs with its key or provider account"
        )
    };
    if let Some(name) = chain.strip_prefix("provider:") {
        let (code, rail, network) =
            AssetCode::parse(asset).with_context(|| format!("--asset {asset:?}"))?;
        if rail != payoutd_domain::RailFamily::Provider || network != name {
            anyhow::bail!("asset {code} is not an asset of {chain}");
        }
        return Ok((store.signing_wallet(chain, address).await?.with_context(unknown)?, code));
    }
    let asset = cfg.assets.get(asset)?;
    let wallet_id = match chain.strip_prefix("solana:") {
        Some(cluster) => {
            let address = payoutd_domain::SolanaAddress::parse(address)
                .context("--address is not a base58 Solana address")?;
            if asset.rail != payoutd_domain::RailFamily::Solana || asset.network != cluster {
                anyhow::bail!("asset {} is not an asset of {chain}", asset.code);
            }
            store.signing_wallet(chain, &address.to_string()).await?.with_context(unknown)?
        }
        None => {
            let chain_id: u64 = chain.strip_prefix("evm:").unwrap_or(chain).parse().context(
                "--chain is neither an EVM chain id nor solana:<cluster> nor provider:<name>",
            )?;
            let address = payoutd_domain::EvmAddress::parse(address)
                .context("--address is not a 0x EVM address")?;
            if asset.evm_chain_id() != Some(chain_id) {
                anyhow::bail!("asset {} is not an asset of chain {chain_id}", asset.code);
            }
            let wallet_id = HotWallet::id_for(chain_id, &address);
            stores.evm_lines.hot_wallet(&wallet_id).await?.with_context(unknown)?;
            wallet_id
        }
    };
    Ok((wallet_id, asset.code.clone()))
}

async fn wallet_command(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
    command: WalletCommand,
) -> anyhow::Result<()> {
    let store = stores.pipeline.as_ref();
    let (chain, address, asset, amount, reference) = match command {
        WalletCommand::List => return wallet_list(cfg),
        WalletCommand::Fund { chain, address, asset, amount, reference } => {
            (chain, address, asset, amount, reference)
        }
    };
    let amount = Amount::parse_positive(&amount).context("--amount")?;
    let reference = reference.trim();
    if reference.is_empty()
        || reference.len() > FUNDING_REFERENCE_LEN_MAX
        || !reference.bytes().all(|b| b.is_ascii_graphic())
    {
        anyhow::bail!(
            "--reference must be 1 to {FUNDING_REFERENCE_LEN_MAX} printable ASCII characters without spaces"
        );
    }
    let (wallet_id, asset) = funded_wallet(stores, cfg, &chain, &address, &asset).await?;
    let funding = payoutd_engine::pipeline_store::WalletFunding {
        reference: format!("funding:{reference}"),
        kind: payoutd_engine::pipeline_store::FundingKind::Funding,
        wallet_id,
        asset,
        amount,
        at_ms: payoutd_engine::Clock::now_ms(&SystemClock),
    };
    let booked = store.book_wallet_funding(&funding).await?;
    if booked {
        payoutd::audit::record(
            stores.operator_views.as_ref(),
            "wallet_fund",
            &funding.wallet_id,
            format!("{amount} {} booked ({reference})", funding.asset),
        )
        .await?;
    }
    println!(
        "{}",
        serde_json::json!({"wallet_id": funding.wallet_id, "asset": funding.asset.as_str(), "amount": amount.to_string(),
            "reference": reference, "booked": booked})
    );
    Ok(())
}

async fn key_command(
    engine: &Engine,
    audit: &dyn payoutd_engine::OperatorViewStore,
    command: KeyCommand,
) -> anyhow::Result<()> {
    let merchant = |text: &str| {
        MerchantId::parse(text).with_context(|| format!("{text:?} is not a merchant id (mer_...)"))
    };
    match command {
        KeyCommand::Create { merchant_id } => {
            let merchant = merchant(&merchant_id)?;
            let (id, key) = engine.create_api_key(&merchant, random_key_bytes()?).await.map_err(
                |e| match e {
                    payoutd_engine::IntakeError::UnknownMerchant => {
                        anyhow::anyhow!("no merchant {merchant}")
                    }
                    other => other.into(),
                },
            )?;
            payoutd::audit::record(
                audit,
                "create_api_key",
                merchant.as_str(),
                format!("key {id} created"),
            )
            .await?;
            println!(
                "{}",
                serde_json::json!({"id": id.as_str(), "merchant_id": merchant.as_str(), "api_key": key.expose()})
            );
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
            let id = ApiKeyId::parse(&key_id)
                .with_context(|| format!("{key_id:?} is not an API key id (key_...)"))?;
            engine.revoke_api_key(&id).await.map_err(|e| match e {
                payoutd_engine::IntakeError::NotFound => {
                    anyhow::anyhow!("no API key {id} that is not already revoked")
                }
                other => other.into(),
            })?;
            payoutd::audit::record(audit, "revoke_api_key", id.as_str(), "revoked".to_owned())
                .await?;
            println!("{}", serde_json::json!({"id": id.as_str(), "revoked": true}));
        }
    }
    Ok(())
}

fn payout_id(text: &str) -> anyhow::Result<PayoutId> {
    PayoutId::parse(text).with_context(|| format!("{text:?} is not a payout id (po_...)"))
}

/// The webhook use cases over the store and the HTTP transport the configuration allows.
fn build_webhooks(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
) -> anyhow::Result<Webhooks> {
    let policy = if cfg.webhooks.allow_private_urls {
        tracing::warn!(
            "webhooks may go to http and private addresses (webhooks.allow_private_urls): local development only"
        );
        AddressPolicy::AllowPrivate
    } else {
        AddressPolicy::PublicHttpsOnly
    };
    let transport =
        HttpTransport::new(cfg.webhooks.timeout_ms, policy).context("webhook HTTP client")?;
    Ok(Webhooks::new(
        stores.webhooks.clone(),
        Arc::new(transport),
        Arc::new(SystemClock),
        cfg.webhooks.clone(),
    ))
}

/// The pipeline (when chains are configured) and the webhook dispatcher, until `shutdown`.
async fn run_workers(
    pipeline: Option<Arc<Pipeline>>,
    webhooks: Webhooks,
    shutdown: impl std::future::Future<Output = ()>,
) {
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
    audit: Arc<dyn payoutd_engine::OperatorViewStore>,
    cfg: config::Config,
) -> anyhow::Result<()> {
    let pipeline = pipeline.map(Arc::new);
    let mut state = payoutd_api::AppState::new(engine, cfg.operator_key.as_ref());
    state.require_payout_key = cfg.require_payout_key;
    state.pipeline = pipeline.clone();
    state.webhooks = Some(webhooks.clone());
    state.batch_lines_max = cfg.batch_lines_max;
    state.dashboard = dashboard;
    state.metrics_access =
        payoutd_api::metrics_api::MetricsAccess::on_api(cfg.metrics_token.as_ref());
    state.trusted_proxies = Arc::new(cfg.trusted_proxies.clone());
    state.request_rate = cfg.request_rate;
    state.deposit_key_hash = cfg.deposit_key.as_ref().map(payoutd_domain::ApiKey::hash);
    if cfg.webhook_secrets_key.is_none() {
        tracing::warn!(
            "PAYOUTD_WEBHOOK_SECRETS_KEY is not set: webhook signing secrets are stored in clear in the database"
        );
    }
    if cfg.operator_key.is_some() && cfg.deposit_key.is_none() {
        tracing::warn!(
            "PAYOUTD_DEPOSIT_KEY is not set: the operator key can also credit merchants' balances; give that power its own key"
        );
    }
    state.audit = Some(audit);
    if cfg.operator_key.is_none() {
        tracing::warn!("PAYOUTD_OPERATOR_KEY is not set: operator endpoints answer 401");
    }
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
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
