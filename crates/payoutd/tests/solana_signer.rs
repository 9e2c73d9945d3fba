//! A Solana hot wallet whose key only `payoutd signer` holds (the reference signer service, over real HTTP, in front of a real local node), on both stores: payouts are paid once through it, wait unchanged while it is down or refuses the token, and a signature that is not the wallet's is never stored or sent.

use std::sync::Arc;
use std::time::Duration;

use payoutd::signer_service::{SignerService, router};
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, ApiKey, Asset, AssetRegistry, DepositKey, Destination, MerchantId, Metadata, Payout,
    PayoutKey, PayoutRequest, PayoutStatus, Secret, SecretUrl, SolanaAddress,
};
use payoutd_engine::{
    Engine, Pipeline, PipelineConfig, PipelineStore, StandaloneLine, SystemClock,
};
use payoutd_rail_solana::{
    PaidAt, RemoteSolanaSigner, SolanaClusterConfig, SolanaKey, SolanaRail, SolanaRpc, SolanaSigner,
};
use payoutd_testkit::{SOLANA_TEST_SLOT_TIME_MS, SolanaNode, TestDb, airdrop};
use solana_commitment_config::CommitmentConfig;
use solana_sdk::pubkey::Pubkey;

const SOL: &str = "solana:localnet/SOL";
const HOT_WALLET_LAMPORTS: u64 = 5_000_000_000;
const PAYOUT_LAMPORTS: u64 = 200_000_000;
const TOKEN: &str = "signer-token-0123456789abcdef";
/// Passes of the pipeline before a test gives up (50 ms slots; finalization takes about 2 s).
const TICKS_MAX: usize = 600;

/// The signer service on a port of its own, serving until dropped.
struct Service {
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Service {
    async fn start(keys: Vec<SolanaKey>) -> Service {
        Service::serve(router(Arc::new(SignerService::new(keys, &ApiKey::presented(TOKEN))))).await
    }

    /// A service that answers every request with `key`'s signature of another message (a
    /// misconfigured or compromised signer).
    async fn start_forging(key: SolanaKey) -> Service {
        use base64::Engine as _;
        let forged = base64::engine::general_purpose::STANDARD
            .encode(key.sign_message(b"another message").as_ref());
        let answer = move || async move { axum::Json(serde_json::json!({ "signature": forged })) };
        Service::serve(axum::Router::new().route("/v1/sign", axum::routing::post(answer))).await
    }

    async fn serve(router: axum::Router) -> Service {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        tokio::spawn(payoutd_api::serve_router_with_limits(
            listener,
            router,
            payoutd_api::ServeLimits::default(),
            shutdown,
        ));
        Service { url, stop: Some(stop) }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

struct World {
    _node: SolanaNode,
    rpc: SolanaRpc,
    store: Arc<dyn PipelineStore>,
    engine: Engine,
    merchant: MerchantId,
    asset: Asset,
    wallet: Pubkey,
    wallet_id: String,
    node_url: String,
}

impl World {
    /// A funded hot wallet whose key the test hands to a signer service only.
    async fn new(db: TestDb, key: &SolanaKey) -> World {
        let node = SolanaNode::start(SOLANA_TEST_SLOT_TIME_MS);
        let rpc = SolanaRpc::new(&SecretUrl::new(node.url().to_owned()));
        airdrop(&rpc, &key.pubkey(), HOT_WALLET_LAMPORTS).await;
        let store = db.pipeline();
        let wallet_id = store
            .ensure_signing_wallet("solana:localnet", &key.pubkey().to_string())
            .await
            .unwrap();
        let asset = Asset::new(SOL, 9, TokenKind::Native).unwrap();
        let engine = Engine::new(
            store.clone(),
            Arc::new(SystemClock),
            AssetRegistry::new(vec![asset.clone()]).unwrap(),
        );
        let (merchant, _) = engine.create_merchant("signed-elsewhere", [8u8; 32]).await.unwrap();
        engine
            .deposit(
                &merchant,
                &asset.code,
                Amount::from_u128(2_000_000_000),
                DepositKey::parse("fund-signed-elsewhere").unwrap(),
            )
            .await
            .unwrap();
        let node_url = node.url().to_owned();
        World {
            _node: node,
            rpc,
            store,
            engine,
            merchant,
            asset,
            wallet: key.pubkey(),
            wallet_id,
            node_url,
        }
    }

    /// A pipeline that holds no key: the wallet is signed for by the service at `url` with `token`.
    fn pipeline(&self, url: &str, token: &str) -> Pipeline {
        let config = SolanaClusterConfig {
            cluster: "localnet".into(),
            rpc_urls: vec![SecretUrl::new(self.node_url.clone())],
            paid_at: PaidAt::Finalized,
            compute_unit_price_cap_micro_lamports: 1_000,
            durable_nonce: None,
        };
        let remote = RemoteSolanaSigner::new(
            SecretUrl::new(url.to_owned()),
            Secret::new(token.to_owned()),
            self.wallet,
        )
        .unwrap();
        let rail = SolanaRail::with_signer(
            config,
            SolanaSigner::Remote(remote),
            self.wallet_id.clone(),
            std::slice::from_ref(&self.asset),
        )
        .unwrap();
        let config = PipelineConfig {
            rebroadcast_after_ms: 300,
            balance_check_interval_ms: 3_600_000,
            ..PipelineConfig::default()
        };
        Pipeline::new(self.store.clone(), Arc::new(SystemClock), config).with_standalone_rail(
            StandaloneLine { rail: Arc::new(rail), assets: vec![self.asset.clone()] },
        )
    }

    async fn request(&self, key: &str, to: &Pubkey) -> Payout {
        let request = PayoutRequest::new(
            PayoutKey::parse(key).unwrap(),
            self.asset.code.clone(),
            Amount::from_u128(u128::from(PAYOUT_LAMPORTS)),
            Destination::Solana(SolanaAddress::parse(&to.to_string()).unwrap()),
            Metadata::empty(),
        );
        self.engine.create_payout(&self.merchant, request).await.unwrap().0
    }

    async fn status(&self, payout: &Payout) -> PayoutStatus {
        self.store.payout_by_id(&payout.id).await.unwrap().unwrap().status
    }

    async fn tick_until(&self, pipeline: &Pipeline, payout: &Payout, status: PayoutStatus) {
        for _ in 0..TICKS_MAX {
            let _ = pipeline.tick().await;
            if self.status(payout).await == status {
                return;
            }
            tokio::time::sleep(Duration::from_millis(SOLANA_TEST_SLOT_TIME_MS)).await;
        }
        panic!("payout {} did not reach {status:?}", payout.id);
    }

    async fn finalized_balance(&self, of: &Pubkey) -> u64 {
        self.rpc.balance(of, CommitmentConfig::finalized()).await.unwrap()
    }
}

/// Paid once through the service; with the service down, and then with a wrong token, a payout
/// stays `approved` (nothing signed, nothing stored); with the right token again, it is paid once.
async fn a_solana_wallet_signed_by_the_signer_service_pays_once_and_waits_while_it_cannot(
    db: TestDb,
) {
    let key = SolanaKey::generate();
    let w = World::new(db, &key).await;
    let service = Service::start(vec![key.clone()]).await;
    let pipeline = w.pipeline(&service.url, TOKEN);
    let (first_to, second_to) = (Pubkey::new_unique(), Pubkey::new_unique());
    let first = w.request("signed-elsewhere-1", &first_to).await;
    w.tick_until(&pipeline, &first, PayoutStatus::Paid).await;
    assert_eq!(w.finalized_balance(&first_to).await, PAYOUT_LAMPORTS);

    drop(service);
    let second = w.request("signed-elsewhere-2", &second_to).await;
    for _ in 0..3 {
        let _ = pipeline.tick().await;
    }
    assert_eq!(w.status(&second).await, PayoutStatus::Approved, "waits while the signer is down");
    assert!(w.store.attempts_of(&second.id).await.unwrap().is_empty(), "nothing stored");
    let back = Service::start(vec![key]).await;
    let wrong_token = w.pipeline(&back.url, "another-token-0123456789abcdef");
    for _ in 0..3 {
        let _ = wrong_token.tick().await;
    }
    assert_eq!(
        w.status(&second).await,
        PayoutStatus::Approved,
        "waits while the signer refuses the token"
    );
    w.tick_until(&w.pipeline(&back.url, TOKEN), &second, PayoutStatus::Paid).await;
    assert_eq!(w.finalized_balance(&second_to).await, PAYOUT_LAMPORTS, "paid once");
}

/// A service that answers with a signature that is not the wallet's (here: another key's) is not
/// believed: nothing is stored or sent, the payout fails unsent and its hold is released.
async fn a_signature_that_is_not_the_wallets_is_never_sent(db: TestDb) {
    let key = SolanaKey::generate();
    let w = World::new(db, &key).await;
    let service = Service::start_forging(SolanaKey::generate()).await;
    let pipeline = w.pipeline(&service.url, TOKEN);
    let to = Pubkey::new_unique();
    let payout = w.request("forged-elsewhere-1", &to).await;
    w.tick_until(&pipeline, &payout, PayoutStatus::Failed).await;
    assert!(w.store.attempts_of(&payout.id).await.unwrap().is_empty(), "nothing stored");
    assert_eq!(w.finalized_balance(&to).await, 0);
    let sol = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.asset.as_str() == SOL)
        .unwrap();
    assert_eq!(sol.held, Amount::ZERO, "the hold is released");
}

payoutd_testkit::both_stores!(
    a_solana_wallet_signed_by_the_signer_service_pays_once_and_waits_while_it_cannot,
    a_signature_that_is_not_the_wallets_is_never_sent,
);
