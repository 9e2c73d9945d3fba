//! The Solana rail against a real local Solana node (surfpool, offline) behind a fault proxy, through the engine's lifecycle, on both stores: the world the tests share, and the tests by theme below.

use std::sync::Arc;
use std::time::{Duration, Instant};

use payoutd_domain::AttemptSlot;
use payoutd_domain::IncidentKind;
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, AssetRegistry, AttemptStatus, ChainReference, DepositKey, Destination, Metadata,
    PayoutId, PayoutKey, PayoutRequest, PayoutStatus, SecretUrl, SolanaAddress, SolanaExpiry,
};
use payoutd_engine::pipeline_store::{WalletBooks, WalletLedger};
use payoutd_engine::standalone::{StandaloneRail, StandaloneStatus};
use payoutd_engine::{
    Engine, Pipeline, PipelineConfig, PipelineStore, StandaloneLine, SystemClock, Verdict,
};
use payoutd_rail_solana::{
    DurableNonceConfig, MEMO_COMPUTE_UNITS, PaidAt, SOL_TRANSFER_COMPUTE_UNITS,
    SolanaClusterConfig, SolanaKey, SolanaRail, SolanaRpc, SolanaToken, Transfer,
    carried_reference, sign_transfer, transfer_instructions,
};
use payoutd_testkit::{
    Fault, FaultProxy, FaultRule, SOLANA_TEST_SLOT_TIME_MS, SolanaNode, TestDb, airdrop,
    create_nonce_account, mint_test_token, token_balance, wait_confirmed,
};
use solana_commitment_config::CommitmentConfig;
use solana_sdk::program_pack::Pack;
use solana_sdk::pubkey::Pubkey;

mod blockhash;
mod durable;
mod signing_checks;

const CLUSTER: &str = "localnet";

const SOL: &str = "solana:localnet/SOL";

const USD: &str = "solana:localnet/USD";

const USD_DECIMALS: u8 = 6;

/// The hot wallet's airdrop: fees, rent for new token accounts and the SOL payouts.
const HOT_WALLET_LAMPORTS: u64 = 20_000_000_000;

const HOT_WALLET_USD_BASE_UNITS: u64 = 1_000_000_000;

/// A payout reaches `paid` (finalized) in about 2 s with 50 ms slots; an expiry takes 7.5 s more.
const PAID_WITHIN_MS: u64 = 60_000;

const TICK_INTERVAL_MS: u64 = 100;

/// Lamports below what opens a new account (`RENT_EXEMPT_EMPTY_ACCOUNT_LAMPORTS`).
const SMALL_LAMPORTS: u64 = 1_000;

/// An extra USD deposit: the merchant's ledger balance then covers more than the hot wallet holds.
const MORE_THAN_THE_WALLET_HOLDS: u128 = 1_000;

/// What one signature costs without a priority fee.
const SIGNATURE_FEE_LAMPORTS: u64 = 5_000;

struct World {
    node: SolanaNode,
    proxy: FaultProxy,
    /// The database, for what happens to it outside payoutd (a failover losing commits).
    db: TestDb,
    store: Arc<dyn PipelineStore>,
    engine: Engine,
    pipeline: Pipeline,
    rail: Arc<SolanaRail>,
    merchant: payoutd_domain::MerchantId,
    usd_mint: Pubkey,
    /// The hot wallet's key, as someone holding it outside payoutd would use it.
    key: SolanaKey,
    direct: SolanaRpc,
    nonce_account: Option<Pubkey>,
}

async fn world(db: TestDb) -> World {
    world_with(db, Mode::Blockhash).await
}

/// How the world's SOL payouts are signed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Blockhash,
    DurableNonce,
}

async fn world_with(db: TestDb, mode: Mode) -> World {
    let node = SolanaNode::start(SOLANA_TEST_SLOT_TIME_MS);
    let proxy = FaultProxy::start(node.url()).await;
    let secret = SolanaKey::generate();
    // Set-up talks to the node directly; the rail goes through the proxy.
    let direct = SolanaRpc::new(&SecretUrl::new(node.url().to_owned()));
    airdrop(&direct, &secret.pubkey(), HOT_WALLET_LAMPORTS).await;
    let mint = mint_test_token(&direct, &secret, HOT_WALLET_USD_BASE_UNITS, USD_DECIMALS).await;

    let assets = vec![
        Asset::new(SOL, 9, TokenKind::Native).unwrap(),
        Asset::new(
            USD,
            USD_DECIMALS,
            TokenKind::Spl(SolanaAddress::parse(&mint.to_string()).unwrap()),
        )
        .unwrap(),
    ];
    let store = db.pipeline();
    let wallet_id = store.ensure_solana_wallet_for_test(&secret).await;
    let mut config = cluster(proxy.url());
    let mut nonce_account = None;
    if mode == Mode::DurableNonce {
        let account = create_nonce_account(&direct, &secret).await;
        config.durable_nonce =
            Some(DurableNonceConfig { account, assets: vec![assets[0].code.clone()] });
        nonce_account = Some(account);
    }
    // The set-up is final before payoutd starts: the opening balance it books is all of it.
    let set_up_at = direct.block_height(CommitmentConfig::processed()).await.unwrap();
    while direct.block_height(CommitmentConfig::finalized()).await.unwrap() <= set_up_at {
        tokio::time::sleep(Duration::from_millis(SOLANA_TEST_SLOT_TIME_MS)).await;
    }
    let rail = Arc::new(SolanaRail::new(config, secret.clone(), wallet_id, &assets).unwrap());
    let clock = Arc::new(SystemClock);
    let engine =
        Engine::new(store.clone(), clock.clone(), AssetRegistry::new(assets.clone()).unwrap());
    let (merchant, _) = engine.create_merchant("solana", [5u8; 32]).await.unwrap();
    for asset in &assets {
        engine
            .deposit(
                &merchant,
                &asset.code,
                Amount::from_u128(1_000_000_000),
                DepositKey::parse(&format!("fund-{}", asset.code)).unwrap(),
            )
            .await
            .unwrap();
    }
    // The balance check runs every pass: each test also proves the ledger explains the hot wallet.
    let config = PipelineConfig {
        rebroadcast_after_ms: 300,
        balance_check_interval_ms: 0,
        ..PipelineConfig::default()
    };
    let pipeline = Pipeline::new(store.clone(), clock, config)
        .with_standalone_rail(StandaloneLine { rail: rail.clone(), assets });
    World {
        node,
        proxy,
        db,
        store,
        engine,
        pipeline,
        rail,
        merchant,
        usd_mint: mint,
        key: secret,
        direct,
        nonce_account,
    }
}

fn cluster(url: &str) -> SolanaClusterConfig {
    SolanaClusterConfig {
        cluster: CLUSTER.into(),
        rpc_urls: vec![SecretUrl::new(url.to_owned())],
        paid_at: PaidAt::Finalized,
        compute_unit_price_cap_micro_lamports: 1_000,
        durable_nonce: None,
    }
}

/// Registers the hot wallet's row, as `payoutd serve` does at start.
trait EnsureWallet {
    async fn ensure_solana_wallet_for_test(&self, key: &SolanaKey) -> String;
}

impl EnsureWallet for Arc<dyn PipelineStore> {
    async fn ensure_solana_wallet_for_test(&self, key: &SolanaKey) -> String {
        self.ensure_signing_wallet(&format!("solana:{CLUSTER}"), &key.pubkey().to_string())
            .await
            .unwrap()
    }
}

impl World {
    /// The ledger's side of the hot wallet in `asset`, now that everything it sent is settled.
    async fn books(&self, asset: &str) -> WalletLedger {
        let code = payoutd_domain::AssetCode::parse(asset).unwrap().0;
        match self.store.settled_wallet_books(&self.rail.hot_wallet().unwrap().id).await.unwrap() {
            WalletBooks::Comparable { ledger, .. } => ledger
                .into_iter()
                .find(|l| l.asset == code)
                .expect("the wallet's account moved in the asset"),
            WalletBooks::NotComparable => {
                panic!("every attempt is settled: the books must be comparable")
            }
        }
    }

    /// The balance check, run now that nothing is in flight, compares and finds every SOL and token
    /// unit of the hot wallet explained by the ledger.
    async fn assert_wallet_explained(&self, why: &str) {
        self.books(SOL).await; // comparable: a check now compares rather than waits
        assert_eq!(
            self.pipeline.balance_check_pass().await.unwrap().balance_mismatches,
            0,
            "{why}"
        );
        assert!(
            self.balance_incidents().await.is_empty(),
            "{why}: {:?}",
            self.balance_incidents().await
        );
    }

    async fn balance_incidents(&self) -> Vec<String> {
        self.store
            .open_incidents(100)
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.kind == IncidentKind::BalanceMismatch)
            .map(|i| i.detail)
            .collect()
    }

    async fn request(&self, key: &str, asset: &str, amount: u64, to: &Pubkey) -> PayoutId {
        let request = PayoutRequest::new(
            PayoutKey::parse(key).unwrap(),
            payoutd_domain::AssetCode::parse(asset).unwrap().0,
            Amount::from_u128(u128::from(amount)),
            Destination::Solana(SolanaAddress::parse(&to.to_string()).unwrap()),
            Metadata::empty(),
        );
        self.engine.create_payout(&self.merchant, request).await.unwrap().0.id
    }

    async fn status(&self, id: &PayoutId) -> PayoutStatus {
        self.store.payout_by_id(id).await.unwrap().unwrap().status
    }

    /// Ticks until every payout is paid; panics past the deadline.
    async fn run_until_paid(&self, ids: &[&PayoutId]) {
        self.run_until(ids, PayoutStatus::Paid).await;
    }

    /// Ticks until every payout is in `status`; panics past the deadline, with their attempts.
    async fn run_until(&self, ids: &[&PayoutId], status: PayoutStatus) {
        let deadline = Instant::now() + Duration::from_millis(PAID_WITHIN_MS);
        loop {
            self.pipeline.tick().await.unwrap();
            let mut now = Vec::with_capacity(ids.len());
            for id in ids {
                now.push(self.status(id).await);
            }
            if now.iter().all(|s| *s == status) {
                return;
            }
            if Instant::now() >= deadline {
                let mut attempts = Vec::new();
                for id in ids {
                    attempts.push(
                        self.store
                            .attempts_of(id)
                            .await
                            .unwrap()
                            .iter()
                            .map(|a| (a.attempt_no, a.status))
                            .collect::<Vec<_>>(),
                    );
                }
                panic!("not {status} in time: {now:?}, attempts {attempts:?}");
            }
            tokio::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
        }
    }

    async fn lamports(&self, who: &Pubkey) -> u64 {
        self.rail.rpc().balance(who, CommitmentConfig::finalized()).await.unwrap()
    }

    async fn token_balance(&self, owner: &Pubkey, mint: &Pubkey) -> u64 {
        token_balance(self.rail.rpc(), owner, mint).await
    }

    /// Another process's rail and pipeline on the same store, node, hot wallet and nonce account
    /// (SOL payouts only).
    fn second_worker(&self) -> (Arc<SolanaRail>, Pipeline) {
        self.worker(PipelineConfig {
            rebroadcast_after_ms: 300,
            balance_check_interval_ms: 0,
            ..PipelineConfig::default()
        })
    }

    /// A worker of its own (rail and pipeline, SOL payouts only) with `config`.
    fn worker(&self, pipeline_config: PipelineConfig) -> (Arc<SolanaRail>, Pipeline) {
        let mut config = cluster(self.proxy.url());
        let sol = vec![Asset::new(SOL, 9, TokenKind::Native).unwrap()];
        config.durable_nonce = self
            .nonce_account
            .map(|account| DurableNonceConfig { account, assets: vec![sol[0].code.clone()] });
        let rail = Arc::new(
            SolanaRail::new(
                config,
                self.key.clone(),
                self.rail.hot_wallet().unwrap().id.clone(),
                &sol,
            )
            .unwrap(),
        );
        let pipeline = Pipeline::new(self.store.clone(), Arc::new(SystemClock), pipeline_config)
            .with_standalone_rail(StandaloneLine { rail: rail.clone(), assets: sol });
        (rail, pipeline)
    }

    async fn payout_of(&self, id: &PayoutId) -> payoutd_domain::Payout {
        self.store.payout_by_id(id).await.unwrap().unwrap()
    }

    /// Moves the nonce as someone holding the hot wallet's key would, outside payoutd; returns
    /// the new value once the node shows it at `confirmed`.
    async fn advance_nonce_outside(&self) -> solana_sdk::hash::Hash {
        let account = self.nonce_account.unwrap();
        let value = self.direct.nonce_value(&account, CommitmentConfig::confirmed()).await.unwrap();
        let advance = payoutd_rail_solana::sign_nonce_advance(
            &self.key,
            &payoutd_rail_solana::DurableNonce { account, value },
        )
        .unwrap();
        self.direct.send_raw(&advance.raw).await.unwrap();
        self.wait_nonce(CommitmentConfig::confirmed(), |now| now != value).await
    }

    /// Waits until the nonce value read at `commitment` satisfies `done`; returns it.
    async fn wait_nonce(
        &self,
        commitment: CommitmentConfig,
        done: impl Fn(solana_sdk::hash::Hash) -> bool,
    ) -> solana_sdk::hash::Hash {
        let deadline = Instant::now() + Duration::from_millis(PAID_WITHIN_MS);
        loop {
            let now =
                self.direct.nonce_value(&self.nonce_account.unwrap(), commitment).await.unwrap();
            if done(now) {
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "the nonce did not reach the awaited value at {commitment:?}"
            );
            tokio::time::sleep(Duration::from_millis(SOLANA_TEST_SLOT_TIME_MS)).await;
        }
    }

    /// Waits until the finalized block height is past `height`.
    async fn wait_finalized_past(&self, height: u64) {
        let deadline = Instant::now() + Duration::from_millis(PAID_WITHIN_MS);
        while self.direct.block_height(CommitmentConfig::finalized()).await.unwrap() <= height {
            assert!(Instant::now() < deadline, "finalization did not pass block height {height}");
            tokio::time::sleep(Duration::from_millis(SOLANA_TEST_SLOT_TIME_MS)).await;
        }
    }

    async fn last_valid_of(&self, id: &PayoutId) -> u64 {
        let attempts = self.store.attempts_of(id).await.unwrap();
        match &attempts[0].slot {
            AttemptSlot::Solana { expiry: SolanaExpiry::LastValidBlockHeight(h), .. } => *h,
            other => panic!("not a Solana blockhash attempt: {other:?}"),
        }
    }
}
