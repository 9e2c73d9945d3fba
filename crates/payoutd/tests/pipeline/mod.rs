//! The payout pipeline against a real anvil node (SPEC section 8), on PostgreSQL and SQLite, transfers counted from the node: what the tests share, and the tests by theme below.

use crate::support;

use std::sync::Arc;

use crate::support::{ETH, RECIPIENTS, USDC, World};
use payoutd_domain::{AttemptStatus, PayoutStatus, TxKind};
use payoutd_engine::{Caps, PipelineConfig, Verdict};
use payoutd_rail_evm::{Fees, TxHash, TxParams, sign_native_transfer};
use payoutd_testkit::EvmAttemptExt;
use payoutd_testkit::TestDb;
use payoutd_testkit::{
    AnvilOptions, Fault, FaultProxy, FaultRule, RECEIPT_WAIT_TIMEOUT_MS, wait_for_receipt,
};

mod proofs;
mod settling;
mod spec_cases;

pub(crate) fn quick() -> PipelineConfig {
    // The balance check runs on every pass, so what it finds does not depend on how long a test takes.
    PipelineConfig {
        rebroadcast_after_ms: 0,
        replace_after_ms: 3_600_000,
        balance_check_interval_ms: 0,
        ..PipelineConfig::default()
    }
}

/// Someone else with the hot wallet's key (an operator, a stale deployment) pools 1 wei to RECIPIENTS[2]
/// at `nonce`, bidding far above anything payoutd may pay (its cap in these tests is 1,000 gwei, and
/// after such a block the fee quote itself reaches the cap).
pub(crate) async fn pool_foreign_transfer(w: &World, nonce: u64) {
    let fees =
        Fees { max_fee_per_gas: 5_000_000_000_000, max_priority_fee_per_gas: 5_000_000_000_000 };
    let to = payoutd_domain::EvmAddress::parse(RECIPIENTS[2]).unwrap();
    let foreign = sign_native_transfer(
        &w.key,
        &TxParams { chain_id: 31337, nonce, fees, gas_limit: 21_000 },
        to,
        payoutd_domain::Amount::from_u128(1),
    )
    .unwrap();
    w.anvil.rpc().send_raw(&foreign.raw).await.unwrap();
}

fn paid(status: PayoutStatus) -> bool {
    status == PayoutStatus::Paid
}

/// Ticks and mines one block after each tick until `done` (for a node that does not mine by itself).
pub(crate) async fn mine_until(
    w: &World,
    p: &payoutd_engine::Pipeline,
    mut done: impl AsyncFnMut() -> bool,
) {
    for _ in 0..support::TICKS_MAX {
        p.tick().await.unwrap();
        if done().await {
            return;
        }
        w.anvil.mine(1).await.unwrap();
    }
    panic!("the pipeline did not get there in {} ticks", support::TICKS_MAX);
}
