//! A test world: a real anvil, a fresh database, a funded merchant, the engine and the pipeline wired as in production.

#![allow(dead_code)]

use std::sync::Arc;

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, AssetCode, AssetRegistry, DepositKey, Destination, EvmAddress, HotWallet,
    MerchantId, Metadata, Payout, PayoutKey, PayoutRequest,
};
use payoutd_engine::evm::EvmRail;
use payoutd_engine::{
    Engine, EvmChain, EvmLineStore, Pipeline, PipelineConfig, PipelineStore, SystemClock,
};
use payoutd_rail_evm::{EvmNode, EvmRpc, Finality, SigningKey};
use payoutd_testkit::TestDb;
use payoutd_testkit::{ANVIL_CHAIN_ID, ANVIL_KEY_0, Anvil, AnvilOptions, deploy_test_token};

pub const ETH: &str = "evm:31337/ETH";
pub const USDC: &str = "evm:31337/USDC";
/// Recipients with no history on anvil (not among its default accounts).
pub const RECIPIENTS: [&str; 3] = [
    "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
    "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
    "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
];
/// Pipeline loops in tests are bounded: a test that needs more ticks than this has found a bug.
pub const TICKS_MAX: usize = 200;

pub struct World {
    pub anvil: Anvil,
    pub db: TestDb,
    pub store: Arc<dyn PipelineStore>,
    /// The same store through the EVM family's port.
    pub lines: Arc<dyn EvmLineStore>,
    pub engine: Engine,
    pub merchant: MerchantId,
    pub key: SigningKey,
    pub wallet: HotWallet,
    pub token: EvmAddress,
    pub assets: AssetRegistry,
    pub config: PipelineConfig,
}

impl World {
    /// Anvil with `options`, the test token deployed (on an automining anvil), a merchant funded in both assets.
    pub async fn new(db: TestDb, options: AnvilOptions, config: PipelineConfig) -> World {
        let no_mining = options.no_mining;
        let anvil = Anvil::start(AnvilOptions { no_mining: false, ..options });
        let key = SigningKey::from_hex(ANVIL_KEY_0).unwrap();
        let token = deploy_test_token(anvil.rpc(), &key, Amount::from_u128(1_000_000_000_000_000))
            .await
            .unwrap();
        if no_mining {
            anvil.set_automine(false).await.unwrap();
        }
        let assets = AssetRegistry::new(vec![
            Asset::new(ETH, 18, TokenKind::Native).unwrap(),
            Asset::new(USDC, 6, TokenKind::Erc20(token)).unwrap(),
        ])
        .unwrap();
        let store = db.pipeline();
        let engine = Engine::new(store.clone(), Arc::new(SystemClock), assets.clone());
        let (merchant, _) = engine.create_merchant("world", [9u8; 32]).await.unwrap();
        for (asset, amount) in [(ETH, 10u128.pow(24)), (USDC, 10u128.pow(16))] {
            let code = assets.get(asset).unwrap().code.clone();
            engine
                .deposit(
                    &merchant,
                    &code,
                    Amount::from_u128(amount),
                    DepositKey::parse(&format!("fund-{asset}")).unwrap(),
                )
                .await
                .unwrap();
        }
        let wallet = HotWallet {
            id: HotWallet::id_for(ANVIL_CHAIN_ID, &key.address()),
            chain_id: ANVIL_CHAIN_ID,
            address: key.address(),
            next_nonce: 0,
        };
        World {
            anvil,
            lines: db.evm_lines(),
            db,
            store,
            engine,
            merchant,
            key,
            wallet,
            token,
            assets,
            config,
        }
    }

    /// A pipeline talking to `rpc_url` (the node itself, or a fault proxy in front of it).
    pub async fn pipeline_via(&self, rpc_url: &str) -> Pipeline {
        self.pipeline_with(rpc_url, 1).await
    }

    pub async fn pipeline_with(&self, rpc_url: &str, finality_confirmations: u64) -> Pipeline {
        self.pipeline_final_by(rpc_url, Finality::Depth(finality_confirmations)).await
    }

    pub async fn pipeline_final_by(&self, rpc_url: &str, finality: Finality) -> Pipeline {
        self.pipeline_on(Arc::new(self.node(rpc_url, finality))).await
    }

    /// The world's node client at `rpc_url`, holding the hot wallet's key.
    pub fn node(&self, rpc_url: &str, finality: Finality) -> EvmNode {
        EvmNode::new(
            EvmRpc::with_timeout(rpc_url, 2_000).unwrap(),
            ANVIL_CHAIN_ID,
            finality,
            1_000_000_000_000,
            vec![self.key.clone()],
        )
    }

    /// The world's node client over several endpoints (in this order), holding the hot wallet's key.
    pub fn node_over(&self, rpc_urls: &[&str], finality: Finality) -> EvmNode {
        let rpcs = rpc_urls.iter().map(|url| EvmRpc::with_timeout(url, 2_000).unwrap()).collect();
        EvmNode::over_endpoints(
            rpcs,
            ANVIL_CHAIN_ID,
            finality,
            1_000_000_000_000,
            vec![self.key.clone()],
        )
        .unwrap()
    }

    /// A pipeline on `rail` (the node client, or a wrapper around it).
    pub async fn pipeline_on(&self, rail: Arc<dyn EvmRail>) -> Pipeline {
        self.pipeline_of(rail, vec![self.wallet.clone()]).await
    }

    /// A pipeline on `rail` paying from `wallets`.
    pub async fn pipeline_of(&self, rail: Arc<dyn EvmRail>, wallets: Vec<HotWallet>) -> Pipeline {
        let chain = EvmChain { rail, wallets, assets: self.assets.iter().cloned().collect() };
        let mut pipeline =
            Pipeline::new(self.store.clone(), Arc::new(SystemClock), self.config.clone())
                .with_evm_chain(self.lines.clone(), chain);
        pipeline.sync_wallets().await.unwrap();
        pipeline
    }

    pub async fn pipeline(&self) -> Pipeline {
        self.pipeline_via(self.anvil.url()).await
    }

    pub fn asset(&self, code: &str) -> AssetCode {
        self.assets.get(code).unwrap().code.clone()
    }

    pub async fn request(&self, key: &str, asset: &str, amount: u128, to: &str) -> Payout {
        let req = PayoutRequest::new(
            PayoutKey::parse(key).unwrap(),
            self.asset(asset),
            Amount::from_u128(amount),
            Destination::Evm(EvmAddress::parse(to).unwrap()),
            Metadata::empty(),
        );
        self.engine.create_payout(&self.merchant, req).await.unwrap().0
    }

    pub async fn payout(&self, payout: &Payout) -> Payout {
        self.store.payout_by_id(&payout.id).await.unwrap().unwrap()
    }

    /// Ticks until `done` holds for the payouts (bounded by TICKS_MAX).
    pub async fn tick_until(&self, pipeline: &Pipeline, mut done: impl AsyncFnMut() -> bool) {
        for _ in 0..TICKS_MAX {
            pipeline.tick().await.unwrap();
            if done().await {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("the pipeline did not get there in {TICKS_MAX} ticks");
    }

    /// Every mined transaction from the hot wallet, read from the node itself.
    pub async fn mined_from_wallet(&self) -> Vec<payoutd_rail_evm::ObservedTx> {
        let head = self.anvil.rpc().block_number().await.unwrap();
        let mut all = Vec::new();
        let mut from = 0;
        while from <= head {
            let scan = self
                .anvil
                .rpc()
                .outgoing_transactions(self.key.address(), from, head)
                .await
                .unwrap();
            all.extend(scan.transactions);
            from = scan.next_block;
        }
        all
    }

    /// Transfers of `asset` to `to` that landed (status 1), counted from the node.
    pub async fn transfers_to(&self, asset: &str, to: &str) -> usize {
        let to = EvmAddress::parse(to).unwrap();
        self.mined_from_wallet()
            .await
            .iter()
            .filter(|tx| tx.status_ok)
            .filter(|tx| match asset {
                ETH => tx.to == Some(to) && !tx.value.is_zero(),
                _ => {
                    tx.to == Some(self.token)
                        && tx.erc20_transfer_call().is_some_and(|(r, _)| r == to)
                }
            })
            .count()
    }
}

/// A pipeline that re-sends at once, never replaces, and checks balances on every pass, so what a
/// test finds does not depend on how long it takes.
pub fn every_pass() -> PipelineConfig {
    PipelineConfig {
        rebroadcast_after_ms: 0,
        replace_after_ms: 3_600_000,
        balance_check_interval_ms: 0,
        ..PipelineConfig::default()
    }
}

/// The `payoutd` binary run once on `db` with `args`, its log at warn: what a person at the
/// terminal would see.
pub fn payoutd(db: &TestDb, args: &[&str]) -> std::process::Output {
    payoutd_at(db.url(), args)
}

/// The `payoutd` binary run once on the database at `url`.
pub fn payoutd_at(url: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_payoutd"))
        .args(args)
        .env("PAYOUTD_DATABASE_URL", url)
        .env("PAYOUTD_LOG", "warn")
        .output()
        .expect("run payoutd")
}
