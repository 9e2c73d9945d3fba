//! The payoutd binary: parses the command line, wires store, engine and API, and runs them.

mod config;

use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use payoutd_domain::{Amount, DepositKey, MerchantId};
use payoutd_engine::{Engine, SystemClock};

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
    /// Create or upgrade the database schema, then exit.
    Migrate,
    /// Merchant administration.
    Merchant {
        #[command(subcommand)]
        command: MerchantCommand,
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
enum MerchantCommand {
    /// Create a merchant; prints its id and API key (shown this once) as JSON.
    Create { name: String },
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("PAYOUTD_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
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
    let store = payoutd_store::open(&cfg.database_url)
        .await
        .with_context(|| format!("cannot open database {}", config::redact_url(&cfg.database_url)))?;
    let engine = Engine::new(store, Arc::new(SystemClock), cfg.assets.clone());
    match cli.command {
        Command::Migrate => {
            println!("{}", serde_json::json!({"migrated": true}));
            Ok(())
        }
        Command::Merchant { command: MerchantCommand::Create { name } } => {
            let (id, key) = engine.create_merchant(&name, random_key_bytes()?).await?;
            println!("{}", serde_json::json!({"id": id.as_str(), "name": name.trim(), "api_key": key.expose()}));
            Ok(())
        }
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
        Command::Serve { .. } => serve(engine, cfg).await,
    }
}

async fn serve(engine: Engine, cfg: config::Config) -> anyhow::Result<()> {
    let mut state = payoutd_api::AppState::new(engine, cfg.operator_key.as_ref());
    state.require_payout_key = cfg.require_payout_key;
    if cfg.operator_key.is_none() {
        tracing::warn!("PAYOUTD_OPERATOR_KEY is not set: operator endpoints answer 401");
    }
    let listener = tokio::net::TcpListener::bind(cfg.listen).await.with_context(|| format!("cannot listen on {}", cfg.listen))?;
    let local = listener.local_addr()?;
    tracing::info!(listen = %local, database = %config::redact_url(&cfg.database_url), "payoutd serving");
    // One line on stdout that scripts can wait for.
    println!("{}", serde_json::json!({"listening": local.to_string()}));
    payoutd_api::serve(listener, state, shutdown_signal()).await?;
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
