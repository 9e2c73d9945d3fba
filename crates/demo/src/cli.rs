//! The demo's command line: what to pay on, how many business events, who signs.

use clap::{Parser, ValueEnum};
use payoutd_demo::rng::count_in;

/// Business events paid in one run (the review twin included, its canceled sibling not).
const PAYOUTS_DEFAULT: usize = 300;
/// Below this there is no "mid-way" to kill in, and no room for every kind of submission.
const PAYOUTS_MIN: usize = 20;
const PAYOUTS_MAX: usize = 5_000;

/// payoutd's end-to-end demo: a node, the real binary, faults and a SIGKILL mid-way, every payout
/// counted on the chain.
#[derive(Parser)]
#[command(name = "payoutd-demo")]
pub(crate) struct Args {
    /// Exit after the summary instead of leaving payoutd and its dashboard up.
    #[arg(long)]
    pub(crate) exit: bool,
    /// An EVM node to pay on instead of the anvil the demo starts.
    #[arg(long, value_name = "URL")]
    pub(crate) rpc_url: Option<String>,
    /// A Solana node to pay on instead of the local one the demo starts.
    #[arg(long, value_name = "URL")]
    pub(crate) solana_rpc_url: Option<String>,
    /// Business events to pay.
    #[arg(long, value_name = "N", default_value_t = PAYOUTS_DEFAULT, value_parser = count_in(PAYOUTS_MIN, PAYOUTS_MAX))]
    pub(crate) payouts: usize,
    /// Who signs for the EVM hot wallet.
    #[arg(long, value_enum, default_value_t = Signer::Local)]
    pub(crate) signer: Signer,
}

/// Who signs for the EVM hot wallet.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Signer {
    /// Its key, in payoutd's environment.
    Local,
    /// A key in a local AWS KMS, which payoutd never holds.
    Kms,
}
