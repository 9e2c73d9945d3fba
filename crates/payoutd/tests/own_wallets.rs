//! A payout to one of the deployment's own hot wallets, accepted by a process that knew no wallet, is never signed (real anvil, both stores): it fails unsent at signing, its hold released.

use crate::support::{ETH, World};
use payoutd_domain::{Amount, PayoutStatus};
use payoutd_engine::PipelineConfig;
use payoutd_testkit::{AnvilOptions, TestDb};

/// The engine of the test world knows no hot wallet (as an API-only process started before the
/// wallet was registered), so intake accepts a payout to the hot wallet itself. The pipeline, which
/// pays from that wallet, fails it without signing. (Before, it was signed and sent: units moved
/// from the platform's pocket to the same pocket, charged to the merchant.)
async fn a_payout_to_an_own_hot_wallet_is_never_signed(db: TestDb) {
    let config =
        PipelineConfig { balance_check_interval_ms: 3_600_000, ..PipelineConfig::default() };
    let w = World::new(db, AnvilOptions::default(), config).await;
    let own = w.key.address().to_string();
    let payout = w.request("to-our-own-wallet", ETH, 5_000, &own).await;
    let p = w.pipeline().await;
    w.tick_until(&p, async || w.payout(&payout).await.status == PayoutStatus::Failed).await;
    assert!(w.store.attempts_of(&payout.id).await.unwrap().is_empty(), "nothing signed");
    let eth = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.asset.as_str() == ETH)
        .unwrap();
    assert_eq!(eth.held, Amount::ZERO, "the hold is released");
    let self_sends = w
        .mined_from_wallet()
        .await
        .into_iter()
        .filter(|tx| tx.to == Some(w.key.address()) && !tx.value.is_zero())
        .count();
    assert_eq!(self_sends, 0, "no transfer from the wallet to itself");
}

payoutd_testkit::both_stores!(a_payout_to_an_own_hot_wallet_is_never_signed);
