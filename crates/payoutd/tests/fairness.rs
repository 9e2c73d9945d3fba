//! Merchants take turns in the pipeline (real anvil, both stores): one merchant's backlog, far larger than a pass, does not hold another merchant's single payout past the first policy pass or the first signing pass.

use crate::support::{ETH, World};
use payoutd_domain::{
    Amount, DepositKey, Destination, EvmAddress, Metadata, PayoutKey, PayoutRequest, PayoutStatus,
};
use payoutd_engine::PipelineConfig;
use payoutd_engine::evm::SIGN_BATCHES_PER_PASS_MAX;
use payoutd_testkit::{AnvilOptions, TestDb};

/// The backlog: more payouts than one policy pass or one signing pass takes with the sizes below.
const BACKLOG: usize = 48;
/// Per policy pass, and per signing batch (a signing pass takes at most 8 batches: 16 payouts).
const PASS_SIZE: u32 = 2;

fn small_passes() -> PipelineConfig {
    PipelineConfig {
        policy_batch_max: PASS_SIZE,
        sign_batch_max: PASS_SIZE,
        rebroadcast_after_ms: 0,
        replace_after_ms: 3_600_000,
        balance_check_interval_ms: 3_600_000,
        ..PipelineConfig::default()
    }
}

/// A destination of its own for each payout (no near-duplicates to hold).
fn destination(n: usize) -> Destination {
    let mut bytes = [0x11u8; 20];
    bytes[..8].copy_from_slice(&(n as u64 + 1).to_be_bytes());
    Destination::Evm(EvmAddress::from_bytes(bytes))
}

/// Merchant A submits a backlog of 48 payouts, then merchant B one. With passes of 2 (policy) and
/// 16 (signing), B's payout is approved by the first policy pass and signed by the first signing
/// pass. (Before, both read the oldest payouts first: B waited behind all of A's, 24 policy
/// passes and 3 signing passes.)
async fn one_merchants_backlog_does_not_hold_back_anothers_payout(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), small_passes()).await;
    let asset = w.asset(ETH);
    let (other, _) = w.engine.create_merchant("the-other-merchant", [3u8; 32]).await.unwrap();
    w.engine
        .deposit(
            &other,
            &asset,
            Amount::from_u128(10u128.pow(20)),
            DepositKey::parse("fund-the-other").unwrap(),
        )
        .await
        .unwrap();
    let request = |key: String, n: usize| {
        PayoutRequest::new(
            PayoutKey::parse(&key).unwrap(),
            asset.clone(),
            Amount::from_u128(1_000 + n as u128),
            destination(n),
            Metadata::empty(),
        )
    };
    for n in 0..BACKLOG {
        w.engine.create_payout(&w.merchant, request(format!("backlog-{n:04}"), n)).await.unwrap();
    }
    let (single, _) =
        w.engine.create_payout(&other, request("the-other-single".into(), BACKLOG)).await.unwrap();
    let p = w.pipeline().await;

    p.policy_pass().await.unwrap();
    assert_eq!(
        w.payout(&single).await.status,
        PayoutStatus::Approved,
        "approved in the first policy pass"
    );
    while p.policy_pass().await.unwrap().approved > 0 {}
    let signed = p.sign_pass().await.unwrap();
    assert!(
        signed.signed <= SIGN_BATCHES_PER_PASS_MAX * PASS_SIZE,
        "one signing pass takes at most its batches ({} signed)",
        signed.signed
    );
    assert_eq!(
        w.payout(&single).await.status,
        PayoutStatus::Processing,
        "signed in the first signing pass"
    );
    w.tick_until(&p, async || w.payout(&single).await.status == PayoutStatus::Paid).await;
}

payoutd_testkit::both_stores!(one_merchants_backlog_does_not_hold_back_anothers_payout);
