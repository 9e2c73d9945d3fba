//! Provider accounts kept in the ledger, against each provider's simulator (real HTTP), on both stores: payouts and the fees each provider reports leave the account's books, and the balance check compares them with the balance the provider shows.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, AssetCode, AssetRegistry, DepositKey, IncidentKind, Metadata, PayoutId,
    PayoutKey, PayoutRequest, PayoutStatus,
};
use payoutd_engine::pipeline_store::{WalletBooks, WalletLedger};
use payoutd_engine::standalone::RailWallet;
use payoutd_engine::{Engine, Pipeline, PipelineConfig, PipelineStore, StandaloneLine};
use payoutd_provider_sim::{CIRCLE_SIM_NETWORK_FEE, E18, ProviderKind, ProviderSim};
use payoutd_rail_provider::{CircleApi, CircleGas, ProviderApi, ProviderRail, ProviderRailConfig};
use payoutd_testkit::TestDb;

use crate::support::{
    FakeClock, Setup, api_of, asset_of, circle_config, destination_of, kind_name,
};

const CLIENT_TIMEOUT_MS: u64 = 2_000;
const ROUNDS_MAX: u32 = 40;
const ROUND_MS: i64 = 1_500;
const FUNDED_BASE_UNITS: u128 = 1_000_000_000;
/// What Coinbase's simulator charges each transfer on top of its amount: 0.01 USDC.
const COINBASE_FEE: &str = "0.01";
const COINBASE_FEE_BASE_UNITS: u128 = 10_000;

/// One provider's rail with its account kept in the ledger as a hot wallet.
struct Books {
    sim: ProviderSim,
    store: Arc<dyn PipelineStore>,
    engine: Engine,
    pipeline: Pipeline,
    clock: Arc<FakeClock>,
    merchant: payoutd_domain::MerchantId,
    wallet: RailWallet,
    kind: ProviderKind,
}

/// Circle's wallet paying its own gas in the chain's native token (an EOA wallet without Gas Station).
fn circle_gas() -> Asset {
    Asset::new("provider:circle/ETH", 18, TokenKind::Native).unwrap()
}

async fn books(db: &TestDb, kind: ProviderKind) -> Books {
    let sim = ProviderSim::start(kind).await;
    let store = db.pipeline();
    let clock = Arc::new(FakeClock(AtomicI64::new(i64::try_from(sim.now_ms()).unwrap())));
    let asset = asset_of(kind);
    let (api, native): (Arc<dyn ProviderApi>, Asset) = match kind {
        ProviderKind::Circle => {
            let gas = Some(CircleGas { symbol: "ETH".into(), decimals: 18 });
            (
                Arc::new(
                    CircleApi::new(payoutd_rail_provider::CircleConfig {
                        gas,
                        ..circle_config(&sim, Setup::Working, CLIENT_TIMEOUT_MS)
                    })
                    .unwrap(),
                ),
                circle_gas(),
            )
        }
        other => (api_of(other, &sim, Setup::Working, CLIENT_TIMEOUT_MS), asset.clone()),
    };
    let id = store
        .ensure_signing_wallet(&format!("provider:{}", kind_name(kind)), api.account())
        .await
        .unwrap();
    let wallet = RailWallet { id, address: api.account().to_owned(), native };
    let engine =
        Engine::new(store.clone(), clock.clone(), AssetRegistry::new(vec![asset.clone()]).unwrap());
    let (merchant, _) = engine
        .create_merchant(&format!("books-{}", kind_name(kind)), [kind as u8 + 1; 32])
        .await
        .unwrap();
    engine
        .deposit(
            &merchant,
            &asset.code,
            Amount::from_u128(FUNDED_BASE_UNITS),
            DepositKey::parse(&format!("fund-{}", kind_name(kind))).unwrap(),
        )
        .await
        .unwrap();
    let rail = ProviderRail::new(api, clock.clone(), ProviderRailConfig::default())
        .with_wallet(wallet.clone());
    let config = PipelineConfig {
        rebroadcast_after_ms: 1_000,
        balance_check_interval_ms: 0,
        ..PipelineConfig::default()
    };
    let pipeline = Pipeline::new(store.clone(), clock.clone(), config)
        .with_standalone_rail(StandaloneLine { rail: Arc::new(rail), assets: vec![asset] });
    Books { sim, store, engine, pipeline, clock, merchant, wallet, kind }
}

impl Books {
    async fn pay(&self, key: &str, amount: u128) -> PayoutId {
        let request = PayoutRequest::new(
            PayoutKey::parse(key).unwrap(),
            asset_of(self.kind).code,
            Amount::from_u128(amount),
            destination_of(self.kind),
            Metadata::empty(),
        );
        let id = self.engine.create_payout(&self.merchant, request).await.unwrap().0.id;
        for _ in 0..ROUNDS_MAX {
            self.pipeline.tick().await.unwrap();
            if self.store.payout_by_id(&id).await.unwrap().unwrap().status == PayoutStatus::Paid {
                return id;
            }
            self.clock.0.fetch_add(ROUND_MS, Ordering::SeqCst);
            self.sim.advance(ROUND_MS as u64);
        }
        panic!("payout {id} not paid: {:?}", self.store.attempts_of(&id).await.unwrap());
    }

    /// What left the account in `asset`, by the ledger, once every attempt is settled.
    async fn left(&self, asset: &AssetCode) -> Amount {
        match self.store.settled_wallet_books(&self.wallet.id).await.unwrap() {
            WalletBooks::Comparable { ledger, .. } => ledger
                .into_iter()
                .find(|l: &WalletLedger| &l.asset == asset)
                .map_or(Amount::ZERO, |l| l.left),
            WalletBooks::NotComparable => {
                panic!("every attempt is settled: the books must be comparable")
            }
        }
    }

    async fn mismatches(&self) -> (u32, Vec<String>) {
        let found = self.pipeline.balance_check_pass().await.unwrap().balance_mismatches;
        let open = self.store.open_incidents(100).await.unwrap().into_iter();
        let ours =
            |detail: &String| detail.contains(&format!("hot wallet {} holds", self.wallet.address));
        let open = open
            .filter(|i| i.kind == IncidentKind::BalanceMismatch)
            .map(|i| i.detail)
            .filter(ours)
            .collect();
        (found, open)
    }
}

/// Every provider's account: the first check books the balance found as the opening, a payout
/// (and its fee, where the provider charges one) leaves the account's books, and the check then
/// finds the provider's balance explained; money arriving that nobody booked is a mismatch.
async fn each_providers_account_is_kept_in_the_ledger_and_its_balance_explained(db: TestDb) {
    for kind in
        [ProviderKind::Stripe, ProviderKind::Coinbase, ProviderKind::Bridge, ProviderKind::Circle]
    {
        let w = books(&db, kind).await;
        let name = kind_name(kind);
        assert_eq!(
            w.mismatches().await,
            (0, Vec::new()),
            "{name}: the first check books the opening balance"
        );
        w.pay(&format!("books-{name}-1"), 2_000_000).await;
        assert_eq!(
            w.left(&asset_of(kind).code).await,
            Amount::from_u128(2_000_000),
            "{name}: the payout left the account"
        );
        assert_eq!(
            w.mismatches().await,
            (0, Vec::new()),
            "{name}: the provider's balance is what the ledger says"
        );
        let (currency, units) = match kind {
            ProviderKind::Stripe => ("usd".to_owned(), 500),
            ProviderKind::Circle => {
                (payoutd_provider_sim::CIRCLE_SIM_USDC_TOKEN_ID.to_owned(), 5 * E18)
            }
            _ => ("usdc".to_owned(), 5 * E18),
        };
        w.sim.top_up(&currency, units);
        let (found, open) = w.mismatches().await;
        assert_eq!((found, open.len()), (1, 1), "{name}: an unbooked top-up is found: {open:?}");
        assert!(w.store.audit_ledger().await.unwrap().is_clean(), "{name}");
    }
}

/// Coinbase charges a fee on top of the amount (`sourceAmount` less `targetAmount`, listed in
/// `fees[]`): a `fee` journal from the account to the platform's fees, so the balance agrees.
async fn a_coinbase_fee_is_booked_from_the_account_to_the_platforms_fees(db: TestDb) {
    let w = books(&db, ProviderKind::Coinbase).await;
    w.sim.set_coinbase_fee(COINBASE_FEE);
    assert_eq!(w.mismatches().await.0, 0);
    w.pay("books-cb-fee-1", 3_000_000).await;
    w.pay("books-cb-fee-2", 4_000_000).await;
    let asset = asset_of(ProviderKind::Coinbase).code;
    assert_eq!(
        w.left(&asset).await,
        Amount::from_u128(7_000_000 + 2 * COINBASE_FEE_BASE_UNITS),
        "both payouts and both fees left the account"
    );
    assert_eq!(
        w.mismatches().await,
        (0, Vec::new()),
        "Coinbase's balance is explained, fees included"
    );
    let balances = w.engine.balances(&w.merchant).await.unwrap();
    assert_eq!(
        balances[0].available,
        Amount::from_u128(FUNDED_BASE_UNITS - 7_000_000),
        "the platform bears the provider's fee, never the merchant"
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A Circle wallet that pays its own gas: each transaction's `networkFee` leaves the wallet's
/// native token, booked as a fee in that asset, and the native balance is compared too.
async fn a_circle_network_fee_is_booked_in_the_native_token_it_was_paid_in(db: TestDb) {
    let w = books(&db, ProviderKind::Circle).await;
    assert_eq!(w.mismatches().await.0, 0);
    w.pay("books-circle-gas-1", 2_500_000).await;
    let fee = payoutd_rail_provider::units::base_units_of(CIRCLE_SIM_NETWORK_FEE, 18).unwrap();
    assert_eq!(w.left(&circle_gas().code).await, fee, "the network fee, in ETH");
    assert_eq!(
        w.left(&asset_of(ProviderKind::Circle).code).await,
        Amount::from_u128(2_500_000),
        "the payout, in USDC"
    );
    assert_eq!(w.mismatches().await, (0, Vec::new()), "both of Circle's balances are explained");
}

/// A Circle transaction that reached the chain and failed there (`FAILED` with a `networkFee`)
/// spent its gas: the fee is booked from the wallet's native token, the payout waits for a person
/// with a `reverted` incident (as a revert on any chain), and both balances stay explained.
/// (Before, a failed transaction was dead with nothing booked: the wallet's native balance was
/// short of the ledger by the gas, and the next attempt followed at once.)
async fn a_circle_transfer_that_failed_on_chain_books_its_gas_and_needs_a_person(db: TestDb) {
    let w = books(&db, ProviderKind::Circle).await;
    let request = PayoutRequest::new(
        PayoutKey::parse("books-circle-failed-1").unwrap(),
        asset_of(ProviderKind::Circle).code,
        Amount::from_u128(2_500_000),
        destination_of(ProviderKind::Circle),
        Metadata::empty(),
    );
    let id = w.engine.create_payout(&w.merchant, request).await.unwrap().0.id;
    w.pipeline.tick().await.unwrap();
    let made = w.sim.ids_with_reference(&payoutd_rail_provider::our_reference(&id, 1));
    assert_eq!(made.len(), 1);
    w.sim.advance(2_000); // SENT: on chain
    assert!(w.sim.fail(&made[0], "TRANSACTION_REVERTED"));
    for _ in 0..ROUNDS_MAX {
        w.pipeline.tick().await.unwrap();
        if w.store.payout_by_id(&id).await.unwrap().unwrap().status != PayoutStatus::Processing {
            break;
        }
        w.clock.0.fetch_add(ROUND_MS, Ordering::SeqCst);
        w.sim.advance(ROUND_MS as u64);
    }
    let payout = w.store.payout_by_id(&id).await.unwrap().unwrap();
    assert_eq!(payout.status, PayoutStatus::NeedsAttention);
    let kinds: Vec<IncidentKind> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.kind).collect();
    assert_eq!(kinds, vec![IncidentKind::Reverted]);
    assert_eq!(w.sim.created(), 1, "no next attempt before the person decides");
    let fee = payoutd_rail_provider::units::base_units_of(CIRCLE_SIM_NETWORK_FEE, 18).unwrap();
    assert_eq!(w.left(&circle_gas().code).await, fee, "the gas it spent, in ETH");
    assert_eq!(w.left(&asset_of(ProviderKind::Circle).code).await, Amount::ZERO);
    assert_eq!(w.mismatches().await, (0, Vec::new()), "both of Circle's balances are explained");
}

payoutd_testkit::both_stores!(
    each_providers_account_is_kept_in_the_ledger_and_its_balance_explained,
    a_coinbase_fee_is_booked_from_the_account_to_the_platforms_fees,
    a_circle_network_fee_is_booked_in_the_native_token_it_was_paid_in,
    a_circle_transfer_that_failed_on_chain_books_its_gas_and_needs_a_person,
);
