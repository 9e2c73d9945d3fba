//! The Redis send guard on the Solana rail (a real local node), on both stores: what it stops, and the verdicts a person gives on what it remembers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use payoutd::redis_guard::RedisGuard;
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, AssetRegistry, DepositKey, Destination, IncidentKind, MerchantId, Metadata,
    Payout, PayoutKey, PayoutRequest, PayoutStatus, SecretUrl, SolanaAddress,
};
use payoutd_engine::{
    Engine, Pipeline, PipelineConfig, PipelineError, PipelineStore, StandaloneLine, SystemClock,
    Verdict,
};
use payoutd_rail_solana::{PaidAt, SolanaClusterConfig, SolanaKey, SolanaRail, SolanaRpc};
use payoutd_testkit::{
    Fault, FaultProxy, FaultRule, SOLANA_TEST_SLOT_TIME_MS, SolanaNode, TestDb, airdrop,
};
use solana_commitment_config::CommitmentConfig;
use solana_sdk::pubkey::Pubkey;

const REDIS_URL: &str = "redis://127.0.0.1:6379";
const SOL: &str = "solana:localnet/SOL";
const HOT_WALLET_LAMPORTS: u64 = 5_000_000_000;
const PAYOUT_LAMPORTS: u64 = 200_000_000;
/// How long a transfer may take to land, or a blockhash to expire at `finalized`, with 50 ms slots.
const WITHIN_MS: u64 = 60_000;

/// A hot wallet on a real node (the rail talks through a fault proxy), a funded merchant and a
/// pipeline with the Redis guard.
struct World {
    _node: SolanaNode,
    proxy: FaultProxy,
    db: TestDb,
    rpc: SolanaRpc,
    store: Arc<dyn PipelineStore>,
    engine: Engine,
    merchant: MerchantId,
    asset: Asset,
    pipeline: Pipeline,
    rail: Arc<SolanaRail>,
    guard: Arc<RedisGuard>,
}

/// The engine and a pipeline with the Redis guard over `db`, paying on `rail`.
fn services(
    db: &TestDb,
    rail: &Arc<SolanaRail>,
    asset: &Asset,
    guard: &Arc<RedisGuard>,
) -> (Engine, Pipeline) {
    let store = db.pipeline();
    let clock = Arc::new(SystemClock);
    let engine =
        Engine::new(store.clone(), clock.clone(), AssetRegistry::new(vec![asset.clone()]).unwrap());
    let config = PipelineConfig {
        rebroadcast_after_ms: 300,
        balance_check_interval_ms: 0,
        ..PipelineConfig::default()
    };
    let line = StandaloneLine { rail: rail.clone(), assets: vec![asset.clone()] };
    let pipeline =
        Pipeline::new(store, clock, config).with_standalone_rail(line).with_guard(guard.clone());
    (engine, pipeline)
}

impl World {
    async fn new(db: TestDb) -> World {
        let node = SolanaNode::start(SOLANA_TEST_SLOT_TIME_MS);
        let proxy = FaultProxy::start(node.url()).await;
        let rpc = SolanaRpc::new(&SecretUrl::new(node.url().to_owned()));
        let key = SolanaKey::generate();
        airdrop(&rpc, &key.pubkey(), HOT_WALLET_LAMPORTS).await;
        let store = db.pipeline();
        let wallet_id = store
            .ensure_signing_wallet("solana:localnet", &key.pubkey().to_string())
            .await
            .unwrap();
        let asset = Asset::new(SOL, 9, TokenKind::Native).unwrap();
        let config = SolanaClusterConfig {
            cluster: "localnet".into(),
            rpc_urls: vec![SecretUrl::new(proxy.url().to_owned())],
            paid_at: PaidAt::Finalized,
            compute_unit_price_cap_micro_lamports: 1_000,
            durable_nonce: None,
        };
        // The airdrop is final before payoutd looks: the opening balance it books is all of it.
        let funded_at = rpc.block_height(CommitmentConfig::processed()).await.unwrap();
        while rpc.block_height(CommitmentConfig::finalized()).await.unwrap() <= funded_at {
            tokio::time::sleep(Duration::from_millis(SOLANA_TEST_SLOT_TIME_MS)).await;
        }
        let rail = Arc::new(
            SolanaRail::new(config, key.clone(), wallet_id, std::slice::from_ref(&asset)).unwrap(),
        );
        let guard = Arc::new(
            RedisGuard::connect(REDIS_URL)
                .await
                .expect("Redis is required for this test (scripts/test starts it)"),
        );
        let (engine, pipeline) = services(&db, &rail, &asset, &guard);
        let (merchant, _) = engine.create_merchant("guarded-solana", [7u8; 32]).await.unwrap();
        engine
            .deposit(
                &merchant,
                &asset.code,
                Amount::from_u128(1_000_000_000),
                DepositKey::parse("fund-guarded-solana").unwrap(),
            )
            .await
            .unwrap();
        // The opening balance is booked before any payout, as a running worker's first pass does.
        assert_eq!(pipeline.balance_check_pass().await.unwrap().balance_mismatches, 0);
        World { _node: node, proxy, db, rpc, store, engine, merchant, asset, pipeline, rail, guard }
    }

    /// The same node, rail and send guard on the database `db` (a copy, or a restored backup),
    /// and the database it was on.
    fn on(self, db: TestDb) -> (World, TestDb) {
        let (engine, pipeline) = services(&db, &self.rail, &self.asset, &self.guard);
        let store = db.pipeline();
        let World { _node, proxy, db: before, rpc, merchant, asset, rail, guard, .. } = self;
        let w =
            World { _node, proxy, db, rpc, store, engine, merchant, asset, pipeline, rail, guard };
        (w, before)
    }

    async fn request(&self, to: &Pubkey) -> Payout {
        self.request_keyed(&format!("guarded-sol-{}", uuid::Uuid::new_v4().simple()), to).await
    }

    async fn request_keyed(&self, key_text: &str, to: &Pubkey) -> Payout {
        let request = PayoutRequest::new(
            PayoutKey::parse(key_text).unwrap(),
            self.asset.code.clone(),
            Amount::from_u128(u128::from(PAYOUT_LAMPORTS)),
            Destination::Solana(SolanaAddress::parse(&to.to_string()).unwrap()),
            Metadata::empty(),
        );
        self.engine.create_payout(&self.merchant, request).await.unwrap().0
    }

    /// The database loses attempt 1 (a failover that lost the last commits): the payout reads
    /// `approved` again, and the next pass finds the guard's record instead of signing again.
    async fn forget_attempt_1(&self, payout: &Payout) {
        let attempt = self.store.attempts_of(&payout.id).await.unwrap()[0].clone();
        self.db
            .exec_raw(&format!(
                "DELETE FROM attempt_transactions WHERE attempt_id = '{}'",
                attempt.id
            ))
            .await
            .unwrap();
        self.db
            .exec_raw(&format!("DELETE FROM attempts WHERE id = '{}'", attempt.id))
            .await
            .unwrap();
        self.db
            .exec_raw(&format!("UPDATE payouts SET status = 'approved' WHERE id = '{}'", payout.id))
            .await
            .unwrap();
        // The signing pass alone: the balance check runs when a test asks (a wallet short by an
        // attempt the books lost is a mismatch until a person's verdict books it).
        self.pipeline.sign_pass().await.unwrap();
        let after = self.store.payout_by_id(&payout.id).await.unwrap().unwrap();
        assert_eq!(after.status, PayoutStatus::NeedsAttention, "a person must look");
        assert!(
            self.store.attempts_of(&payout.id).await.unwrap().is_empty(),
            "nothing signed again"
        );
        let incidents = self.store.open_incidents(10).await.unwrap();
        assert_eq!(
            incidents.iter().map(|i| i.kind).collect::<Vec<_>>(),
            vec![IncidentKind::LostAttempt]
        );
    }

    async fn wait_balance(&self, to: &Pubkey, commitment: CommitmentConfig, lamports: u64) {
        let deadline = Instant::now() + Duration::from_millis(WITHIN_MS);
        while self.rpc.balance(to, commitment).await.unwrap() < lamports {
            assert!(Instant::now() < deadline, "the transfer did not land at {commitment:?}");
            tokio::time::sleep(Duration::from_millis(SOLANA_TEST_SLOT_TIME_MS)).await;
        }
    }

    async fn wait_finalized_past(&self, height: u64) {
        let deadline = Instant::now() + Duration::from_millis(WITHIN_MS);
        while self.rpc.block_height(CommitmentConfig::finalized()).await.unwrap() <= height {
            assert!(Instant::now() < deadline, "finalization did not pass block height {height}");
            tokio::time::sleep(Duration::from_millis(SOLANA_TEST_SLOT_TIME_MS)).await;
        }
    }

    /// Gives `verdict` until the rail's proof allows it (each refusal must be for want of it).
    async fn verdict_once_proven(&self, payout: &Payout, verdict: Verdict) -> Payout {
        let deadline = Instant::now() + Duration::from_millis(WITHIN_MS);
        loop {
            match self
                .pipeline
                .resolve_needs_attention(&payout.id, verdict, "looked at the chain")
                .await
            {
                Ok(after) => return after,
                Err(PipelineError::Refused(why)) => {
                    assert!(Instant::now() < deadline, "{verdict:?} never proven: {why}")
                }
                Err(other) => panic!("{other}"),
            }
            tokio::time::sleep(Duration::from_millis(SOLANA_TEST_SLOT_TIME_MS * 4)).await;
        }
    }

    async fn held(&self) -> Amount {
        self.engine
            .balances(&self.merchant)
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.held)
            .fold(Amount::ZERO, |a, b| a.checked_add(b).unwrap())
    }

    /// The balance check, now that nothing is in flight, finds the hot wallet explained by the ledger.
    async fn assert_wallet_explained(&self, why: &str) {
        assert_eq!(
            self.pipeline.balance_check_pass().await.unwrap().balance_mismatches,
            0,
            "{why}"
        );
        let mismatches: Vec<String> = self
            .store
            .open_incidents(10)
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.kind == IncidentKind::BalanceMismatch)
            .map(|i| i.detail)
            .collect();
        assert!(mismatches.is_empty(), "{why}: {mismatches:?}");
    }
}

/// The database loses attempt 1 after its transaction went out: with the guard on, nothing is
/// signed again: the payout waits for a person with a `lost_attempt` incident, and the recipient
/// is paid once.
async fn the_send_guard_stops_a_second_signature_on_solana_after_the_database_forgot_the_first(
    db: TestDb,
) {
    let w = World::new(db).await;
    let to = SolanaKey::generate().pubkey();
    let payout = w.request(&to).await;
    w.pipeline.policy_pass().await.unwrap();
    w.pipeline.sign_pass().await.unwrap();
    w.wait_balance(&to, CommitmentConfig::confirmed(), PAYOUT_LAMPORTS).await;
    w.forget_attempt_1(&payout).await;
    let seen = w.rpc.block_height(CommitmentConfig::processed()).await.unwrap();
    w.wait_finalized_past(seen).await;
    assert_eq!(
        w.rpc.balance(&to, CommitmentConfig::finalized()).await.unwrap(),
        PAYOUT_LAMPORTS,
        "paid once"
    );
}

/// The attempt the database lost landed: the rail, asked with what the guard remembers, shows it
/// final, so `failed` and `retry` are refused (money moved) and `paid` books the payout out of the
/// hot wallet with its fee, so the balance check finds the wallet explained. (Before, the guard
/// kept no more than the signature: every verdict but `paid` was refused, and `paid` booked the
/// payout to no wallet, leaving the wallet short in the books by the payout and its fee.)
async fn a_lost_solana_attempt_that_landed_is_paid_out_of_its_wallet_by_the_rails_proof(
    db: TestDb,
) {
    let w = World::new(db).await;
    let to = SolanaKey::generate().pubkey();
    let payout = w.request(&to).await;
    w.pipeline.policy_pass().await.unwrap();
    w.pipeline.sign_pass().await.unwrap();
    w.wait_balance(&to, CommitmentConfig::finalized(), PAYOUT_LAMPORTS).await;
    w.forget_attempt_1(&payout).await;
    for verdict in [Verdict::Failed, Verdict::Retry] {
        let refused = w
            .pipeline
            .resolve_needs_attention(&payout.id, verdict, "looked at the explorer")
            .await
            .unwrap_err();
        assert!(matches!(refused, PipelineError::Refused(_)), "{verdict:?}: {refused}");
    }
    // The rail's own status of the signature, not the balance read above, says when it is final.
    let paid = w.verdict_once_proven(&payout, Verdict::Paid).await;
    assert_eq!(paid.status, PayoutStatus::Paid);
    assert_eq!(w.held().await, Amount::ZERO, "the hold became the final debit");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    w.assert_wallet_explained("the lost attempt's payout and fee leave the hot wallet's account")
        .await;
}

/// The attempt the database lost never reached the node: `failed` is refused while its blockhash
/// can still land, and accepted once the finalized height is past its last valid block height and
/// no status of it is found: the hold is released and nothing ever reaches the recipient. (Before,
/// the guard's record named no expiry: the verdict was refused for good and the hold stayed.)
async fn a_lost_solana_attempt_that_expired_unsent_is_failed_by_the_rails_proof(db: TestDb) {
    let w = World::new(db).await;
    let to = SolanaKey::generate().pubkey();
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    let payout = w.request(&to).await;
    w.pipeline.policy_pass().await.unwrap();
    w.pipeline.sign_pass().await.unwrap();
    let raw = w.store.attempts_of(&payout.id).await.unwrap()[0].txs[0].raw.clone();
    w.forget_attempt_1(&payout).await;
    let early = w
        .pipeline
        .resolve_needs_attention(&payout.id, Verdict::Failed, "the node never saw it")
        .await
        .unwrap_err();
    assert!(matches!(early, PipelineError::Refused(_)), "its blockhash is still valid: {early}");
    let failed = w.verdict_once_proven(&payout, Verdict::Failed).await;
    assert_eq!(failed.status, PayoutStatus::Failed);
    assert_eq!(w.held().await, Amount::ZERO, "the hold is released");
    // The lost bytes, sent now, cannot land: their blockhash expired.
    w.proxy.clear();
    let _refused = w.rpc.send_raw(&raw).await;
    let sent_at = w.rpc.block_height(CommitmentConfig::processed()).await.unwrap();
    w.wait_finalized_past(sent_at).await;
    assert_eq!(
        w.rpc.balance(&to, CommitmentConfig::finalized()).await.unwrap(),
        0,
        "nothing reached the recipient"
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    w.assert_wallet_explained("nothing left the hot wallet").await;
}

/// The database is restored from a backup taken before a payout was created, after its transfer
/// went out and landed: the payout's creation is lost with everything after it. The client retries
/// with its key, and a new payout (a new id) is made for the same business event. The send guard,
/// keyed by the business event, remembers its first attempt: nothing is signed again, the payout
/// waits for a person with a `lost_attempt` incident, and the rail's proof pays it out of its
/// wallet. The recipient is paid once. (Before, the guard was keyed by the payout's id: the new
/// payout was signed and sent again, and the recipient was paid twice.)
async fn a_payout_re_created_after_its_creation_was_lost_is_not_paid_again(db: TestDb) {
    let w = World::new(db).await;
    let to = SolanaKey::generate().pubkey();
    let key = format!("withdrawal-{}", uuid::Uuid::new_v4().simple());
    // The backup is taken before the payout exists; payoutd goes on with the live database.
    let live = w.db.copy().await;
    let (w, backup) = w.on(live);
    let first = w.request_keyed(&key, &to).await;
    w.pipeline.policy_pass().await.unwrap();
    w.pipeline.sign_pass().await.unwrap();
    w.wait_balance(&to, CommitmentConfig::finalized(), PAYOUT_LAMPORTS).await;

    // The live database is lost; payoutd starts again on the backup.
    let (w, _lost) = w.on(backup.reopen().await);
    assert!(w.store.payout_by_id(&first.id).await.unwrap().is_none(), "its creation is lost");
    let retried = w.request_keyed(&key, &to).await;
    assert_ne!(retried.id, first.id, "a new payout for the same business event");
    w.pipeline.policy_pass().await.unwrap();
    w.pipeline.sign_pass().await.unwrap();
    let after = w.store.payout_by_id(&retried.id).await.unwrap().unwrap();
    assert_eq!(after.status, PayoutStatus::NeedsAttention, "a person must look");
    assert!(w.store.attempts_of(&retried.id).await.unwrap().is_empty(), "nothing signed again");
    let incidents = w.store.open_incidents(10).await.unwrap();
    assert_eq!(
        incidents.iter().map(|i| i.kind).collect::<Vec<_>>(),
        vec![IncidentKind::LostAttempt]
    );
    let refused =
        w.pipeline.resolve_needs_attention(&retried.id, Verdict::Failed, "no record").await;
    assert!(matches!(refused, Err(PipelineError::Refused(_))), "money moved: {refused:?}");
    let paid = w.verdict_once_proven(&retried, Verdict::Paid).await;
    assert_eq!(paid.status, PayoutStatus::Paid);

    let seen = w.rpc.block_height(CommitmentConfig::processed()).await.unwrap();
    w.wait_finalized_past(seen).await;
    assert_eq!(
        w.rpc.balance(&to, CommitmentConfig::finalized()).await.unwrap(),
        PAYOUT_LAMPORTS,
        "paid once"
    );
    assert_eq!(w.held().await, Amount::ZERO, "the hold became the final debit");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    w.assert_wallet_explained("the first payout's transfer and fee leave the hot wallet's account")
        .await;
}

payoutd_testkit::both_stores!(
    a_payout_re_created_after_its_creation_was_lost_is_not_paid_again,
    the_send_guard_stops_a_second_signature_on_solana_after_the_database_forgot_the_first,
    a_lost_solana_attempt_that_landed_is_paid_out_of_its_wallet_by_the_rails_proof,
    a_lost_solana_attempt_that_expired_unsent_is_failed_by_the_rails_proof,
);
