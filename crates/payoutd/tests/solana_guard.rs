//! The Redis send guard on the Solana rail (a real local node), on both stores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use payoutd::redis_guard::RedisGuard;
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Amount, Asset, AssetRegistry, DepositKey, Destination, IncidentKind, Metadata, PayoutKey, PayoutRequest, PayoutStatus, SecretUrl, SolanaAddress};
use payoutd_engine::{Engine, Pipeline, PipelineConfig, StandaloneLine, SystemClock};
use payoutd_rail_solana::{PaidAt, SolanaClusterConfig, SolanaKey, SolanaRail, SolanaRpc};
use payoutd_testkit::{SOLANA_TEST_SLOT_TIME_MS, SolanaNode, TestDb, airdrop};
use solana_commitment_config::CommitmentConfig;


const REDIS_URL: &str = "redis://127.0.0.1:6379";
const SOL: &str = "solana:localnet/SOL";
const HOT_WALLET_LAMPORTS: u64 = 5_000_000_000;
const PAYOUT_LAMPORTS: u64 = 200_000_000;
/// How long the first transfer may take to land at `confirmed` with 50 ms slots.
const LANDED_WITHIN_MS: u64 = 30_000;

/// The database loses attempt 1 after its transaction went out (a failover that lost the last
/// commits): the payout reads `approved` again. With the guard on, nothing is signed again: the
/// payout waits for a person with a `lost_attempt` incident, and the recipient is paid once.
async fn the_send_guard_stops_a_second_signature_on_solana_after_the_database_forgot_the_first(db: TestDb) {
    let node = SolanaNode::start(SOLANA_TEST_SLOT_TIME_MS);
    let rpc = SolanaRpc::new(&SecretUrl::new(node.url().to_owned()));
    let key = SolanaKey::generate();
    airdrop(&rpc, &key.pubkey(), HOT_WALLET_LAMPORTS).await;
    let store = db.pipeline();
    let wallet_id = store.ensure_signing_wallet("solana:localnet", &key.pubkey().to_string()).await.unwrap();
    let asset = Asset::new(SOL, 9, TokenKind::Native).unwrap();
    let config = SolanaClusterConfig {
        cluster: "localnet".into(),
        rpc_url: SecretUrl::new(node.url().to_owned()),
        paid_at: PaidAt::Finalized,
        compute_unit_price_cap_micro_lamports: 1_000,
        durable_nonce: None,
    };
    let rail = Arc::new(SolanaRail::new(config, key.clone(), wallet_id, std::slice::from_ref(&asset)).unwrap());
    let clock = Arc::new(SystemClock);
    let engine = Engine::new(store.clone(), clock.clone(), AssetRegistry::new(vec![asset.clone()]).unwrap());
    let (merchant, _) = engine.create_merchant("guarded-solana", [7u8; 32]).await.unwrap();
    engine.deposit(&merchant, &asset.code, Amount::from_u128(1_000_000_000), DepositKey::parse("fund-guarded-solana").unwrap()).await.unwrap();
    let guard = RedisGuard::connect(REDIS_URL).await.expect("Redis is required for this test (scripts/test starts it)");
    let pipeline = Pipeline::new(store.clone(), clock, PipelineConfig::default())
        .with_standalone_rail(StandaloneLine { rail, assets: vec![asset.clone()] })
        .with_guard(Arc::new(guard));
    let to = SolanaKey::generate().pubkey();
    let key_text = format!("guarded-sol-{}", uuid::Uuid::new_v4().simple());
    let request = PayoutRequest::new(
        PayoutKey::parse(&key_text).unwrap(),
        asset.code.clone(),
        Amount::from_u128(u128::from(PAYOUT_LAMPORTS)),
        Destination::Solana(SolanaAddress::parse(&to.to_string()).unwrap()),
        Metadata::empty(),
    );
    let payout = engine.create_payout(&merchant, request).await.unwrap().0;
    pipeline.tick().await.unwrap();
    let attempt = store.attempts_of(&payout.id).await.unwrap()[0].clone();
    let deadline = Instant::now() + Duration::from_millis(LANDED_WITHIN_MS);
    while rpc.balance(&to, CommitmentConfig::confirmed()).await.unwrap() < PAYOUT_LAMPORTS {
        assert!(Instant::now() < deadline, "attempt 1 did not land");
        tokio::time::sleep(Duration::from_millis(SOLANA_TEST_SLOT_TIME_MS)).await;
    }
    db.exec_raw(&format!("DELETE FROM attempt_transactions WHERE attempt_id = '{}'", attempt.id)).await.unwrap();
    db.exec_raw(&format!("DELETE FROM attempts WHERE id = '{}'", attempt.id)).await.unwrap();
    db.exec_raw(&format!("UPDATE payouts SET status = 'approved' WHERE id = '{}'", payout.id)).await.unwrap();
    pipeline.tick().await.unwrap();
    let after = store.payout_by_id(&payout.id).await.unwrap().unwrap();
    assert_eq!(after.status, PayoutStatus::NeedsAttention, "a person must look");
    assert!(store.attempts_of(&payout.id).await.unwrap().is_empty(), "nothing signed again");
    let incidents = store.open_incidents(10).await.unwrap();
    assert_eq!(incidents.iter().map(|i| i.kind).collect::<Vec<_>>(), vec![IncidentKind::LostAttempt]);
    // Finalized, later: the recipient holds the payout once.
    let seen = rpc.block_height(CommitmentConfig::processed()).await.unwrap();
    while rpc.block_height(CommitmentConfig::finalized()).await.unwrap() <= seen {
        tokio::time::sleep(Duration::from_millis(SOLANA_TEST_SLOT_TIME_MS)).await;
    }
    assert_eq!(rpc.balance(&to, CommitmentConfig::finalized()).await.unwrap(), PAYOUT_LAMPORTS, "paid once");
}

payoutd_testkit::both_stores!(the_send_guard_stops_a_second_signature_on_solana_after_the_database_forgot_the_first);
