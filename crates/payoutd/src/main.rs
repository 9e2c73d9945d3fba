//! The payoutd binary: parses the command line, wires store, engine and API, and runs them.

use payoutd::config;
use payoutd::rails::build_pipeline;

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use payoutd_engine::{Clock, Engine, Pipeline, PipelineError, StoreError, Webhooks};
use payoutd_webhooks::{AddressPolicy, HttpTransport};

mod cli;
mod commands;
mod statement;

use commands::{
    deposit_command, incidents_command, key_command, merchant_create_command, payout_command,
    reseal_command, wallet_command, wallet_list,
};

use cli::{Cli, Command, MerchantCommand, PayoutCommand, WalletCommand, WebhooksCommand};

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
    match run_starting_again_while_the_database_is_unavailable().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("payoutd: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// How long `serve` and `worker` start again while the database does not answer: several
/// failovers of a Patroni cluster (each about its ttl of 10-30 s).
const DATABASE_START_WAIT_MS: u64 = 120_000;
const DATABASE_START_RETRY_MS_MAX: u64 = 5_000;

/// Runs the command; `serve` and `worker` whose start fails because the database is unavailable (a
/// failover, a restart) start again, for up to [`DATABASE_START_WAIT_MS`], as the running ones
/// carry on through it. A command, or any other error, ends the process at once.
async fn run_starting_again_while_the_database_is_unavailable() -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let mut retry_ms = 250;
    loop {
        let cli = Cli::parse();
        let long_running = matches!(cli.command, Command::Serve { .. } | Command::Worker);
        match run(cli).await {
            Err(e)
                if long_running
                    && database_unavailable(&e)
                    && started.elapsed().as_millis() < u128::from(DATABASE_START_WAIT_MS) =>
            {
                tracing::warn!(error = %format!("{e:#}"), retry_ms, "the database is unavailable; starting again");
                tokio::time::sleep(std::time::Duration::from_millis(retry_ms)).await;
                retry_ms = (retry_ms * 2).min(DATABASE_START_RETRY_MS_MAX);
            }
            other => return other,
        }
    }
}

/// The error, or one it came from, is the store being unreachable (on its own, or as the
/// pipeline's, which shows the store's error as its own).
fn database_unavailable(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        matches!(cause.downcast_ref(), Some(StoreError::Unavailable(_)))
            || matches!(
                cause.downcast_ref(),
                Some(PipelineError::Store(StoreError::Unavailable(_)))
            )
    })
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
    warn_at_start(&cli.command, &stores, &cfg);
    let clock = payoutd::clock::database_clock(&stores).await?;
    let store = stores.pipeline.clone();
    let engine = engine(&stores, &cfg, &clock);
    match cli.command {
        Command::Worker => worker(&stores, &cfg, engine, &clock).await,
        Command::Signer { .. } => {
            unreachable!("the signer is served before any configuration is read")
        }
        Command::Payout { command } => payout_command(&stores, &cfg, command, &clock).await,
        Command::Webhooks { command: WebhooksCommand::Reseal } => {
            reseal_command(&stores, &cfg).await
        }
        Command::Incidents => incidents_command(store.as_ref()).await,
        Command::Migrate => {
            // The deployment's reference key is made with the schema: every backup holds it, so
            // a restore never makes references anew.
            store.reference_key().await?;
            println!("{}", serde_json::json!({"migrated": true}));
            Ok(())
        }
        Command::Merchant { command: MerchantCommand::Create { name } } => {
            merchant_create_command(&engine, stores.operator_views.as_ref(), &name).await
        }
        Command::Merchant { command: MerchantCommand::Key { command } } => {
            key_command(&engine, stores.operator_views.as_ref(), command).await
        }
        Command::Wallet { command } => wallet_command(&stores, &cfg, command).await,
        Command::Deposit { merchant, asset, amount, idempotency_key } => {
            deposit_command(&stores, &cfg, &engine, &merchant, &asset, &amount, &idempotency_key)
                .await
        }
        Command::Statement { merchant, asset, from, to } => {
            statement::statement_command(&stores, &cfg, &engine, &merchant, &asset, (&from, &to))
                .await
        }
        Command::Serve { api_only: true, .. } => serve_api_only(&stores, cfg, engine, &clock).await,
        Command::Serve { api_only: false, .. } => {
            serve_with_rails(&stores, cfg, engine, &clock).await
        }
    }
}

/// The use cases over the store, on the database's clock, with the configured intake limits.
fn engine(stores: &payoutd_store::Stores, cfg: &config::Config, clock: &Arc<dyn Clock>) -> Engine {
    Engine::new(stores.pipeline.clone(), clock.clone(), cfg.assets.clone())
        .with_intake_rate(cfg.payouts_per_merchant_per_minute)
        .with_payouts_per_hour(cfg.payouts_per_merchant_per_hour)
}

/// `payoutd worker`: the rails' passes and webhook deliveries until a shutdown signal, with the
/// worker's own `/metrics` when an address is configured.
async fn worker(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
    engine: Engine,
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<()> {
    let pipeline = build_pipeline(stores, cfg, clock).await?;
    payoutd::rails::log_configuration(cfg, &payoutd::rails::payable(cfg, pipeline.as_ref()));
    let webhooks = build_webhooks(stores, cfg, clock)?;
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

/// `payoutd serve --api-only`: the API and webhooks, no rail; payouts to the hot wallets the
/// workers registered are refused.
async fn serve_api_only(
    stores: &payoutd_store::Stores,
    cfg: config::Config,
    engine: Engine,
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<()> {
    tracing::info!(
        "API only: this process runs no rail; payouts in every configured asset are accepted and payoutd worker processes pay them"
    );
    let webhooks = build_webhooks(stores, &cfg, clock)?;
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
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<()> {
    let pipeline = build_pipeline(stores, &cfg, clock).await?;
    let payable = payoutd::rails::payable(&cfg, pipeline.as_ref());
    payoutd::rails::log_configuration(&cfg, &payable);
    let own_wallets = pipeline.as_ref().map(Pipeline::own_wallets).unwrap_or_default();
    let engine = payoutd::rails::engine_with_guard(
        engine.with_payable(payable.clone()).with_own_wallets(own_wallets),
        &cfg,
    )
    .await?;
    let webhooks = build_webhooks(stores, &cfg, clock)?;
    // The dashboard is the operator's: it is on exactly when the operator key is set.
    let dashboard =
        cfg.operator_key.as_ref().map(|_| Arc::new(dashboard(stores, &cfg).with_payable(payable)));
    serve(engine, pipeline, webhooks, dashboard, stores.operator_views.clone(), cfg).await
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

/// The database server's risky settings and the spending limits left open, in the long-running
/// processes' start-up log only: a one-shot command's output stays what its reader expects.
fn warn_at_start(command: &Command, stores: &payoutd_store::Stores, cfg: &config::Config) {
    if matches!(command, Command::Serve { .. } | Command::Worker) {
        for warning in &stores.warnings {
            tracing::warn!("{warning}");
        }
    }
    // Where merchant keys are taken: each limit that would bound a stolen one and is not set.
    if matches!(command, Command::Serve { .. }) {
        for open in payoutd::exposure::limits_left_open(cfg) {
            tracing::warn!("a limit on what one merchant key can spend is not configured: {open}");
        }
    }
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
        | Command::Statement { .. }
        | Command::Wallet { .. }
        | Command::Webhooks { .. } => false,
    }
}

/// The webhook use cases over the store and the HTTP transport the configuration allows.
fn build_webhooks(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
    clock: &Arc<dyn Clock>,
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
        clock.clone(),
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
    state.csv_batch_lines_max = cfg.csv_batch_lines_max;
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
    state.operator_views = Some(audit);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unreachable_store_starts_a_process_again() {
        let unavailable = || StoreError::Unavailable("connection reset".into());
        let opened = anyhow::Error::new(unavailable()).context("cannot open database");
        assert!(database_unavailable(&opened));
        let pipeline = anyhow::Error::new(PipelineError::Store(unavailable()));
        assert!(database_unavailable(&pipeline));
        let corrupt = anyhow::Error::new(StoreError::Corrupt("a row".into()));
        assert!(!database_unavailable(&corrupt), "a corrupt row never heals by waiting");
        assert!(!database_unavailable(&anyhow::anyhow!("store unavailable: in words only")));
    }
}
