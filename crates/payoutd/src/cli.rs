//! The command line: what `payoutd` takes (clap), its commands and their help.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "payoutd",
    version,
    about = "Self-hosted payout engine: no business event is ever paid twice.",
    after_help = "Environment: PAYOUTD_CONFIG, PAYOUTD_DATABASE_URL (as the options above), PAYOUTD_LOG (e.g. info, payoutd=debug), \
                  PAYOUTD_LOG_FORMAT=json, NO_COLOR. `payoutd serve --help` names what serve reads besides."
)]
pub(crate) struct Cli {
    /// TOML configuration file.
    #[arg(long, global = true, env = "PAYOUTD_CONFIG")]
    pub(crate) config: Option<String>,
    /// postgres://... for production; default: an SQLite file `payoutd.db` in the working directory.
    #[arg(long, global = true, env = "PAYOUTD_DATABASE_URL")]
    pub(crate) database_url: Option<String>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
    /// Run the reference signer service: it holds Solana hot wallet keys in this process alone and
    /// signs, over payoutd's signer protocol, for whoever bears PAYOUTD_SIGNER_TOKEN. It opens no
    /// database and reads no configuration file.
    #[command(
        after_help = "Environment: PAYOUTD_SIGNER_TOKEN (required, at least 24 characters): the bearer token callers must present."
    )]
    Signer {
        /// IP:PORT to listen on (keep it private: a loopback or internal address).
        #[arg(long, env = "PAYOUTD_SIGNER_LISTEN", default_value = "127.0.0.1:8560")]
        listen: String,
        /// A Solana keypair file (base58 or a solana-keygen JSON array), readable by its owner alone; repeat for several wallets.
        #[arg(long = "solana-key-file", required = true)]
        solana_key_files: Vec<String>,
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
    /// Webhook administration.
    Webhooks {
        #[command(subcommand)]
        command: WebhooksCommand,
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
    /// A merchant's statement in one asset for a period, as CSV: the opening balances, every
    /// ledger entry of its available and held accounts with the balances after it, the closing.
    Statement {
        /// The merchant's id (mer_...).
        #[arg(long)]
        merchant: String,
        /// A configured asset code, e.g. evm:1/USDC.
        #[arg(long)]
        asset: String,
        /// Where the period starts: a day (2026-12-01, its first instant in UTC) or milliseconds
        /// since the Unix epoch; included.
        #[arg(long)]
        from: String,
        /// Where the period ends, the same way; not included.
        #[arg(long)]
        to: String,
    },
}

#[derive(Subcommand)]
pub(crate) enum PayoutCommand {
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

impl PayoutCommand {
    /// Its name in the audit log.
    pub(crate) fn action(&self) -> &'static str {
        match self {
            PayoutCommand::Approve { .. } => "approve",
            PayoutCommand::Reject { .. } => "reject",
            PayoutCommand::Cancel { .. } => "cancel",
            PayoutCommand::ResolvePaid { .. } => "resolve_paid",
            PayoutCommand::ResolveFailed { .. } => "resolve_failed",
            PayoutCommand::ResolveRetry { .. } => "resolve_retry",
        }
    }
}

#[derive(Subcommand)]
pub(crate) enum WalletCommand {
    /// Print each configured hot wallet's address as a JSON line (from its key; no node is asked):
    /// fund it with the native coin for fees and with the tokens it pays.
    List,
    /// Record units sent into a hot wallet (a top-up), once per reference: the balance check then
    /// expects them on chain. Prints the booking as JSON.
    Fund {
        /// The wallet's network: an EVM chain id (`1`), a Solana cluster (`solana:mainnet`) or a
        /// provider (`provider:circle`, whose account the ledger keeps as a hot wallet).
        #[arg(long)]
        chain: String,
        /// The hot wallet's address: 0x... on an EVM chain, base58 on Solana, the account id at a provider.
        #[arg(long)]
        address: String,
        /// Asset code on that network, e.g. evm:1/USDC, solana:mainnet/SOL or provider:circle/USDC.
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
pub(crate) enum MerchantCommand {
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
pub(crate) enum KeyCommand {
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

pub(crate) const SERVE_ENVIRONMENT: &str = "Environment: PAYOUTD_LISTEN, PAYOUTD_DATABASE_URL, PAYOUTD_CONFIG (as the options); \
PAYOUTD_OPERATOR_KEY (at least 24 characters: the operator endpoints and the dashboard; without it they are off); \
PAYOUTD_METRICS_TOKEN (at least 24 characters: the bearer token /metrics asks for; without it /metrics answers 401); \
PAYOUTD_DEPOSIT_KEY (at least 24 characters: the one key that may credit deposits over the API; without it the operator key may); \
PAYOUTD_WEBHOOK_SECRETS_KEY (64 hex digits: webhook signing secrets are sealed at rest with it); \
PAYOUTD_REDIS_URL (the optional send guard); the hot wallet and provider keys named in the configuration file; \
PAYOUTD_LOG (e.g. info, payoutd=debug), PAYOUTD_LOG_FORMAT=json, NO_COLOR.";

pub(crate) const WORKER_ENVIRONMENT: &str = "Environment: PAYOUTD_DATABASE_URL, PAYOUTD_CONFIG (as the options); PAYOUTD_METRICS_LISTEN \
(IP:PORT for /metrics); PAYOUTD_WEBHOOK_SECRETS_KEY (64 hex digits, as for serve); PAYOUTD_METRICS_TOKEN (when set, /metrics asks for it as bearer token; without it, anyone who \
reaches the metrics address may read it); PAYOUTD_REDIS_URL (the optional send guard); the hot wallet and provider keys named in the \
configuration file; PAYOUTD_LOG, PAYOUTD_LOG_FORMAT=json, NO_COLOR.";

#[derive(Subcommand)]
pub(crate) enum WebhooksCommand {
    /// Seal every webhook signing secret under PAYOUTD_WEBHOOK_SECRETS_KEY: those stored in clear
    /// (written before a key was set) and, when rotating, those sealed under
    /// PAYOUTD_WEBHOOK_SECRETS_KEY_PREVIOUS. Rewrites nothing if any secret opens with neither key.
    /// Prints {"resealed": N}.
    Reseal,
}
