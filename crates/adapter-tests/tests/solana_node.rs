//! The Solana rail against a real local Solana node (surfpool, offline) behind a fault proxy, through the engine's lifecycle, on both stores.

use std::sync::Arc;
use std::time::{Duration, Instant};

use payoutd_domain::AttemptSlot;
use payoutd_domain::IncidentKind;
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, AssetRegistry, AttemptStatus, DepositKey, Destination, Metadata, PayoutId,
    PayoutKey, PayoutRequest, PayoutStatus, SecretUrl, SolanaAddress, SolanaExpiry,
};
use payoutd_engine::pipeline_store::{WalletBooks, WalletLedger};
use payoutd_engine::standalone::{StandaloneRail, StandaloneStatus};
use payoutd_engine::{
    Engine, Pipeline, PipelineConfig, PipelineStore, StandaloneLine, SystemClock, Verdict,
};
use payoutd_rail_solana::{
    DurableNonceConfig, PaidAt, SolanaClusterConfig, SolanaKey, SolanaRail, SolanaRpc, SolanaToken,
    Transfer, sign_transfer,
};
use payoutd_testkit::{
    Fault, FaultProxy, FaultRule, SOLANA_TEST_SLOT_TIME_MS, SolanaNode, TestDb, airdrop,
    create_nonce_account, mint_test_token, token_balance, wait_confirmed,
};
use solana_commitment_config::CommitmentConfig;
use solana_sdk::program_pack::Pack;
use solana_sdk::pubkey::Pubkey;

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

/// The common path: a SOL payout is signed, sent, and paid at `finalized`, moving its amount once.
async fn a_sol_payout_is_paid_once_at_finalized(db: TestDb) {
    let w = world(db).await;
    let to = Pubkey::new_unique();
    let id = w.request("sol-0001", SOL, 150_000_000, &to).await;
    w.run_until_paid(&[&id]).await;
    assert_eq!(w.lamports(&to).await, 150_000_000);
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| a.status).collect::<Vec<_>>(),
        vec![AttemptStatus::Confirmed]
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    assert!(
        w.store.open_incidents(10).await.unwrap().is_empty(),
        "payoutd's own transfer is reconciled and its fee booked"
    );
}

/// SPEC 8.7: the send times out (the node never saw it) and the chain stands still: however often
/// the pipeline runs, the payout keeps its one signature (re-sent, never re-signed) while the block
/// height is at or below its last valid block height.
async fn a_send_that_timed_out_is_not_signed_again_before_its_last_valid_block_height_passes(
    db: TestDb,
) {
    let w = world(db).await;
    let to = Pubkey::new_unique();
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    let id = w.request("sol-0002", SOL, 700_000_000, &to).await;
    w.pipeline.tick().await.unwrap();
    let first = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(first.len(), 1);
    w.node.stall_blocks().await;
    let stalled_at = w.rail.rpc().block_height(CommitmentConfig::finalized()).await.unwrap();
    assert!(stalled_at <= w.last_valid_of(&id).await);
    for _ in 0..20 {
        w.pipeline.tick().await.unwrap();
        tokio::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
    }
    let still = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(still.len(), 1, "no second attempt while the first can land");
    assert_eq!(still[0].txs.len(), 1, "no second signature for the first attempt");
    assert_eq!(still[0].txs[0].hash, first[0].txs[0].hash);
    assert!(
        w.proxy.count("sendTransaction") >= 3,
        "the same bytes were re-sent: {}",
        w.proxy.count("sendTransaction")
    );
    assert_eq!(w.status(&id).await, PayoutStatus::Processing);
    w.node.resume_blocks().await;
    w.proxy.clear();
    w.run_until_paid(&[&id]).await;
    assert_eq!(w.lamports(&to).await, 700_000_000, "paid once");
}

/// SPEC 8.15: the first attempt's bytes never reach the node; the payout is paid only after the
/// height passed its last valid block height and a status check after that found nothing; then
/// the next attempt, with a fresh blockhash, pays it once.
async fn a_payout_is_paid_by_the_next_attempt_only_after_the_first_is_proven_dead(db: TestDb) {
    let w = world(db).await;
    let to = Pubkey::new_unique();
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    let id = w.request("sol-0003", SOL, 900_000_000, &to).await;
    let last_valid = loop {
        w.pipeline.tick().await.unwrap();
        if !w.store.attempts_of(&id).await.unwrap().is_empty() {
            break w.last_valid_of(&id).await;
        }
    };
    let deadline = Instant::now() + Duration::from_millis(PAID_WITHIN_MS);
    while w.rail.rpc().block_height(CommitmentConfig::finalized()).await.unwrap() <= last_valid {
        w.pipeline.tick().await.unwrap();
        assert_eq!(
            w.store.attempts_of(&id).await.unwrap().len(),
            1,
            "no next attempt before the height passes"
        );
        assert!(Instant::now() < deadline, "the chain did not pass the last valid block height");
        tokio::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
    }
    // The first attempt's bytes arrive after all (a copy some node kept), between the expiry
    // check and the next attempt's signing, and again after: they cannot land past their height.
    let late_copy = w.store.attempts_of(&id).await.unwrap()[0].txs[0].raw.clone();
    let _refused = w.direct.send_raw(&late_copy).await;
    w.proxy.clear();
    w.run_until_paid(&[&id]).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| (a.attempt_no, a.status)).collect::<Vec<_>>(),
        vec![(1, AttemptStatus::Dead), (2, AttemptStatus::Confirmed)]
    );
    assert_ne!(attempts[0].txs[0].hash, attempts[1].txs[0].hash);
    let _refused = w.direct.send_raw(&late_copy).await;
    w.wait_finalized_past(w.direct.block_height(CommitmentConfig::processed()).await.unwrap())
        .await;
    assert_eq!(
        w.lamports(&to).await,
        900_000_000,
        "paid once, by the second attempt, at finalized after every late copy"
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// The node takes the bytes but the answer is lost: the payout is believed unsent, the status check
/// finds the signature, and it is paid once by its one attempt.
async fn the_same_bytes_landing_after_a_lost_answer_pay_once(db: TestDb) {
    let w = world(db).await;
    let to = Pubkey::new_unique();
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::DropResponse).times(1));
    let id = w.request("sol-0004", SOL, 300_000_000, &to).await;
    w.run_until_paid(&[&id]).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(w.lamports(&to).await, 300_000_000);
}

/// The first sends never reach the node (a dropped transaction): the resolver re-sends the stored
/// bytes unchanged, they land, and the payout is paid once by its one attempt.
async fn a_dropped_transaction_is_resent_from_stored_bytes_and_lands_once(db: TestDb) {
    let w = world(db).await;
    let to = Pubkey::new_unique();
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse).times(3));
    let id = w.request("sol-0005", SOL, 400_000_000, &to).await;
    w.run_until_paid(&[&id]).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!((attempts.len(), attempts[0].txs.len()), (1, 1), "one attempt, one signature");
    assert!(w.proxy.count("sendTransaction") >= 4);
    assert_eq!(w.lamports(&to).await, 400_000_000);
}

/// Two SPL payouts to a recipient without a token account: the first creates it (paid by the hot
/// wallet), the second finds it; the recipient holds exactly both amounts.
async fn an_spl_payout_to_a_new_recipient_creates_its_token_account_once(db: TestDb) {
    let w = world(db).await;
    let to = Pubkey::new_unique();
    let first = w.request("usd-0001", USD, 2_500_000, &to).await;
    w.run_until_paid(&[&first]).await;
    let second = w.request("usd-0002", USD, 1_250_000, &to).await;
    w.run_until_paid(&[&second]).await;
    assert_eq!(w.token_balance(&to, &w.usd_mint).await, 3_750_000);
    let hot = w.rail.hot_wallet_address();
    assert_eq!(w.token_balance(&hot, &w.usd_mint).await, HOT_WALLET_USD_BASE_UNITS - 3_750_000);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// Someone with the hot wallet's key sends from it outside payoutd: reconciliation opens one
/// `unmatched_transfer` incident naming the signature. payoutd's own payouts, the set-up before
/// reconciliation started and money coming in (an airdrop) open none.
async fn a_foreign_transfer_from_the_hot_wallet_opens_an_incident(db: TestDb) {
    let w = world(db).await;
    let id = w.request("sol-0006", SOL, 100_000_000, &Pubkey::new_unique()).await;
    w.run_until_paid(&[&id]).await;
    airdrop(&w.direct, &w.rail.hot_wallet_address(), 1_000_000_000).await;
    let (blockhash, _) = w.direct.latest_blockhash().await.unwrap();
    let transfer = Transfer {
        token: SolanaToken::Sol,
        destination: Pubkey::new_unique(),
        amount_base_units: 5_000_000,
        compute_unit_price_micro_lamports: 0,
    };
    let foreign = sign_transfer(&w.key, &transfer, blockhash).unwrap();
    w.direct.send_raw(&foreign.raw).await.unwrap();
    wait_confirmed(&w.direct, &foreign.signature).await;
    let deadline = Instant::now() + Duration::from_millis(PAID_WITHIN_MS);
    let unmatched = async || {
        w.store
            .open_incidents(100)
            .await
            .unwrap()
            .into_iter()
            .filter(|i| i.kind == IncidentKind::UnmatchedTransfer)
            .collect::<Vec<_>>()
    };
    let incidents = loop {
        w.pipeline.tick().await.unwrap();
        let incidents = unmatched().await;
        if !incidents.is_empty() {
            break incidents;
        }
        assert!(Instant::now() < deadline, "no incident for the foreign transfer");
        tokio::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
    };
    for _ in 0..10 {
        w.pipeline.tick().await.unwrap();
        tokio::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
    }
    let incidents_after = unmatched().await;
    assert_eq!(incidents_after.len(), 1, "one incident, opened once: {incidents_after:?}");
    assert!(
        incidents[0].detail.contains(&foreign.signature.to_string()),
        "{}",
        incidents[0].detail
    );
    // The balance check sees the airdrop arrive and the foreign transfer and its fee leave, all
    // unexplained by the ledger: one difference, one incident.
    let balance = w.balance_incidents().await;
    let unexplained = 1_000_000_000 - 5_000_000 - SIGNATURE_FEE_LAMPORTS;
    assert_eq!(balance.len(), 1, "{balance:?}");
    assert!(
        balance[0].contains(&format!("{unexplained} more than the ledger explains")),
        "{balance:?}"
    );
}

/// Fees and the rent of a recipient's new token account leave the hot wallet's SOL: each landed
/// transaction's cost is booked as a `fee` journal (from getTransaction's balances), so the balance
/// check finds the ledger explaining every lamport and token unit the wallet holds.
async fn fees_and_rent_are_booked_and_the_balance_check_finds_the_wallet_explained(db: TestDb) {
    let w = world(db).await;
    let hot = w.rail.hot_wallet_address();
    assert_eq!(
        w.pipeline.balance_check_pass().await.unwrap().balance_mismatches,
        0,
        "the first check books the opening balances"
    );
    let opening = w.lamports(&hot).await;
    let (a, b) = (Pubkey::new_unique(), Pubkey::new_unique());
    let ids = [
        w.request("fee-sol-1", SOL, 120_000_000, &a).await,
        w.request("fee-usd-1", USD, 3_000_000, &a).await,
        w.request("fee-usd-2", USD, 4_000_000, &b).await,
    ];
    w.run_until_paid(&ids.iter().collect::<Vec<_>>()).await;
    let spent = opening - w.lamports(&hot).await;
    let fees = spent - 120_000_000;
    let rent = w
        .direct
        .client()
        .get_minimum_balance_for_rent_exemption(spl_token_interface::state::Account::LEN)
        .await
        .unwrap();
    assert!(
        fees > 2 * rent,
        "two token accounts were created at the hot wallet's cost: {fees} lamports"
    );
    let books = w.books(SOL).await;
    assert_eq!(
        books.left,
        Amount::from_u128(u128::from(spent)),
        "the SOL payout plus every fee and rent, from the ledger"
    );
    assert_eq!(
        w.books(USD).await.left,
        Amount::from_u128(7_000_000),
        "token payouts only: their fees are paid in SOL"
    );
    w.assert_wallet_explained("fees and rent are booked").await;
    assert!(
        w.store.audit_ledger().await.unwrap().is_clean(),
        "every journal, fees included, sums to zero"
    );
}

/// Durable nonce mode: two SOL payouts are signed against the nonce one after the other (never two
/// live transactions on one nonce value), each paid once by its one attempt, and each moves the nonce.
async fn durable_nonce_payouts_are_paid_once_each_one_at_a_time(db: TestDb) {
    let w = world_with(db, Mode::DurableNonce).await;
    let account = w.nonce_account.unwrap();
    let before = w.direct.nonce_value(&account, CommitmentConfig::finalized()).await.unwrap();
    let (a, b) = (Pubkey::new_unique(), Pubkey::new_unique());
    let first = w.request("durable-0001", SOL, 210_000_000, &a).await;
    let second = w.request("durable-0002", SOL, 220_000_000, &b).await;
    w.run_until_paid(&[&first, &second]).await;
    assert_eq!((w.lamports(&a).await, w.lamports(&b).await), (210_000_000, 220_000_000));
    for id in [&first, &second] {
        let attempts = w.store.attempts_of(id).await.unwrap();
        assert_eq!(attempts.len(), 1, "no attempt died beside another on the same nonce value");
        assert!(matches!(
            &attempts[0].slot,
            AttemptSlot::Solana { expiry: SolanaExpiry::DurableNonce { .. }, .. }
        ));
    }
    assert_ne!(
        w.direct.nonce_value(&account, CommitmentConfig::finalized()).await.unwrap(),
        before
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    w.assert_wallet_explained("durable payouts' fees are booked").await;
}

/// SPEC 4 (durable nonce): the signed payout never reached the node; an operator cancels: the
/// nonce's advance is stored, sent, and lands; the payout fails with its hold released, and the
/// stored payout bytes can never land afterwards.
async fn an_operator_cancel_advances_the_nonce_and_kills_the_signed_transaction(db: TestDb) {
    let w = world_with(db, Mode::DurableNonce).await;
    w.rail.check_durable_nonce().await.expect("the hot wallet is the nonce's authority");
    // A nonce account of another authority is refused at start.
    let other = SolanaKey::generate();
    airdrop(&w.direct, &other.pubkey(), 1_000_000_000).await;
    let foreign_nonce = create_nonce_account(&w.direct, &other).await;
    let mut config = cluster(w.node.url());
    config.durable_nonce = Some(DurableNonceConfig {
        account: foreign_nonce,
        assets: vec![payoutd_domain::AssetCode::parse(SOL).unwrap().0],
    });
    let sol_only = [Asset::new(SOL, 9, TokenKind::Native).unwrap()];
    let misconfigured = SolanaRail::new(config, w.key.clone(), "hw".into(), &sol_only).unwrap();
    let refused = misconfigured.check_durable_nonce().await.unwrap_err().to_string();
    assert!(refused.contains("authority"), "{refused}");
    cancel_kills_the_signed_transaction(w).await;
}

async fn cancel_kills_the_signed_transaction(w: World) {
    let to = Pubkey::new_unique();
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    let id = w.request("durable-0003", SOL, 230_000_000, &to).await;
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.status(&id).await, PayoutStatus::Processing);
    let payout_bytes = w.store.attempts_of(&id).await.unwrap()[0].txs[0].raw.clone();
    let cancel = w.pipeline.cancel_signed(&id).await.unwrap();
    assert_eq!(cancel.kind, payoutd_domain::TxKind::Cancel);
    assert_eq!(
        w.pipeline.cancel_signed(&id).await.unwrap().hash,
        cancel.hash,
        "a second cancel sends the stored one again"
    );
    w.proxy.clear();
    w.run_until(&[&id], PayoutStatus::Failed).await;
    let attempts = w.store.attempts_of(&id).await.unwrap();
    assert_eq!((attempts.len(), attempts[0].status), (1, AttemptStatus::Dead));
    let held = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.held)
        .fold(Amount::ZERO, |a, b| a.checked_add(b).unwrap());
    assert_eq!(held, Amount::ZERO, "the hold is released");
    // The payout's own bytes, sent now, cannot land: the nonce they were signed against is gone.
    let late = w.direct.send_raw(&payout_bytes).await;
    // Judged at finalized once finalization passed the send: a landing would show by then.
    w.wait_finalized_past(w.direct.block_height(CommitmentConfig::processed()).await.unwrap())
        .await;
    assert_eq!(w.lamports(&to).await, 0, "the killed transfer never landed ({late:?})");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    w.assert_wallet_explained("the landed cancel's fee is booked").await;
}

/// The nonce value in use lives in the store, one attempt per value: a worker whose signed
/// attempt was discarded unstored is not stopped by it, and a second worker cannot sign another
/// payout on the value of a live attempt (which would only die beside it).
async fn workers_share_the_nonce_value_through_the_store_not_their_memory(db: TestDb) {
    let w = world_with(db, Mode::DurableNonce).await;
    let (rail_2, worker_2) = w.second_worker();
    let tick_until_paid = async |worker: &Pipeline, ids: &[&PayoutId]| {
        let deadline = Instant::now() + Duration::from_millis(PAID_WITHIN_MS);
        loop {
            let mut statuses = Vec::new();
            for id in ids {
                statuses.push(w.status(id).await);
            }
            if statuses.iter().all(|s| *s == PayoutStatus::Paid) {
                return;
            }
            assert!(Instant::now() < deadline, "the worker did not pay: {statuses:?}");
            worker.tick().await.unwrap();
            tokio::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
        }
    };
    // Worker 2 signs a payout whose attempt is then discarded (as when another worker stores one
    // first); nothing is live on the nonce value, and worker 2 alone pays the payout after it.
    let (a, b, c) = (Pubkey::new_unique(), Pubkey::new_unique(), Pubkey::new_unique());
    let first = w.request("durable-0010", SOL, 110_000_000, &a).await;
    rail_2.prepare(&w.payout_of(&first).await, 1).await.unwrap();
    tick_until_paid(&worker_2, &[&first]).await;
    // Worker 1 holds the nonce's next value with a live attempt (its sends are lost) ...
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    let second = w.request("durable-0011", SOL, 120_000_000, &b).await;
    w.pipeline.tick().await.unwrap();
    assert_eq!(w.store.attempts_of(&second).await.unwrap().len(), 1);
    // ... and worker 2, taking another payout meanwhile, cannot store an attempt on that value.
    let third = w.request("durable-0012", SOL, 130_000_000, &c).await;
    for _ in 0..3 {
        worker_2.tick().await.unwrap();
    }
    assert!(
        w.store.attempts_of(&third).await.unwrap().is_empty(),
        "no second attempt on a live nonce value"
    );
    w.proxy.clear();
    tick_until_paid(&worker_2, &[&second, &third]).await;
    for (id, to, amount) in
        [(&first, &a, 110_000_000), (&second, &b, 120_000_000), (&third, &c, 130_000_000)]
    {
        let attempts = w.store.attempts_of(id).await.unwrap();
        assert_eq!(
            attempts.iter().map(|t| t.status).collect::<Vec<_>>(),
            vec![AttemptStatus::Confirmed],
            "paid by its first attempt"
        );
        assert_eq!(w.lamports(to).await, amount);
    }
}

/// A finalized nonce value that is merely behind the signed one is not a move: once it catches
/// up, that sighting is forgotten, and a real move later is death only when seen again after
/// finalization passed its own first sighting (a lagging signature index gets its full wait).
async fn a_nonce_value_behind_is_forgotten_and_a_later_move_waits_its_own_finalization(db: TestDb) {
    let w = world_with(db, Mode::DurableNonce).await;
    let account = w.nonce_account.unwrap();
    // The nonce account as a node whose finalized state is behind will show it: before the move.
    let params =
        serde_json::json!([account.to_string(), {"encoding": "base64", "commitment": "finalized"}]);
    let behind: &'static str =
        Box::leak(w.node.raw_result("getAccountInfo", params).await.into_boxed_str());
    let moved_to = w.advance_nonce_outside().await;
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    let id = w.request("durable-0013", SOL, 130_000_000, &Pubkey::new_unique()).await;
    w.pipeline.tick().await.unwrap();
    let attempt = w.store.attempts_of(&id).await.unwrap().remove(0);
    let payout = w.payout_of(&id).await;
    let AttemptSlot::Solana { expiry: SolanaExpiry::DurableNonce { value, .. }, .. } =
        &attempt.slot
    else {
        panic!("a durable attempt")
    };
    assert_eq!(value, &moved_to.to_string(), "signed on the confirmed value");
    w.proxy.set_rule(FaultRule::method("getAccountInfo", Fault::Answer { result: behind }));
    assert!(
        matches!(w.rail.status(&attempt, &payout).await.unwrap(), StandaloneStatus::Pending),
        "finalized is behind: a sighting, not a move"
    );
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    assert!(
        matches!(w.rail.status(&attempt, &payout).await.unwrap(), StandaloneStatus::Pending),
        "caught up: live"
    );
    // A real move (nothing of the attempt landed), finalized past the old sighting.
    let killed_to = w.advance_nonce_outside().await;
    w.wait_finalized_past(w.direct.block_height(CommitmentConfig::processed()).await.unwrap())
        .await;
    assert_eq!(
        w.direct.nonce_value(&account, CommitmentConfig::finalized()).await.unwrap(),
        killed_to
    );
    let first_look = w.rail.status(&attempt, &payout).await.unwrap();
    assert!(
        matches!(first_look, StandaloneStatus::Pending),
        "the first sight of a move is not death: {first_look:?}"
    );
    w.wait_finalized_past(w.direct.block_height(CommitmentConfig::processed()).await.unwrap())
        .await;
    let second_look = w.rail.status(&attempt, &payout).await.unwrap();
    assert!(
        matches!(second_look, StandaloneStatus::Dead { .. }),
        "seen again past finalization, with no signature: {second_look:?}"
    );
}

/// An endpoint that balances its requests over replicas sends the status search to one far behind,
/// after the attempt's blockhash expired at finalized: its "no such signature" for a transaction
/// that landed and was paid proves nothing, since that node has not reached the finalized slot the
/// expiry is judged at. The status is unknown (an error), never dead; from a node that has the slot
/// it is landed and final. (Before, the finalized height and the statuses were read from whichever
/// node answered, `context.slot` never compared: the paid attempt was declared dead, and its
/// payout would have been paid again by the next attempt.)
async fn a_status_search_by_a_node_behind_the_finalized_slot_proves_nothing(db: TestDb) {
    const REPLICA_BEHIND_SLOTS: u64 = 1_000_000;
    let w = world(db).await;
    let id = w.request("sol-0021", SOL, 150_000_000, &Pubkey::new_unique()).await;
    w.run_until_paid(&[&id]).await;
    let attempt = w.store.attempts_of(&id).await.unwrap().remove(0);
    let payout = w.payout_of(&id).await;
    w.wait_finalized_past(w.last_valid_of(&id).await).await;
    let behind = Fault::Behind { blocks: REPLICA_BEHIND_SLOTS };
    w.proxy.set_rule(FaultRule::method("getSignatureStatuses", behind));
    let lagging = w.rail.status(&attempt, &payout).await;
    assert!(
        matches!(&lagging, Err(e) if e.0.contains("behind slot")),
        "a node behind the finalized slot proves nothing: {lagging:?}"
    );
    w.proxy.clear();
    let current = w.rail.status(&attempt, &payout).await.unwrap();
    assert!(
        matches!(current, StandaloneStatus::Landed { final_: true, .. }),
        "from a node that has the slot, landed and final: {current:?}"
    );
}

/// A cluster served by several endpoints: the expiry proof is read whole from one endpoint. The
/// first endpoint is a replica far behind (its "no such signature" is not judged at the finalized
/// slot), then one that refuses every connection; each time the proof is read again, whole, from
/// the second endpoint, and the paid attempt is landed and final, never dead. The first endpoint
/// alone proves nothing (an error, never dead).
async fn an_expiry_proof_is_read_whole_from_an_endpoint_that_has_the_slot(db: TestDb) {
    let w = world(db).await;
    let id = w.request("sol-0022", SOL, 160_000_000, &Pubkey::new_unique()).await;
    w.run_until_paid(&[&id]).await;
    let attempt = w.store.attempts_of(&id).await.unwrap().remove(0);
    let payout = w.payout_of(&id).await;
    w.wait_finalized_past(w.last_valid_of(&id).await).await;
    let AttemptSlot::Solana { fee_payer, .. } = &attempt.slot else { panic!("a Solana attempt") };
    let sol = [Asset::new(SOL, 9, TokenKind::Native).unwrap()];
    let first = FaultProxy::start(w.node.url()).await;
    let rail_over = |urls: Vec<&str>| {
        let mut config = cluster(urls[0]);
        config.rpc_urls = urls.iter().map(|u| SecretUrl::new((*u).to_owned())).collect();
        SolanaRail::new(config, w.key.clone(), fee_payer.clone(), &sol).unwrap()
    };
    for fault in [Fault::Behind { blocks: 1_000_000 }, Fault::Refuse] {
        first.set_rule(FaultRule::all(fault));
        let alone = rail_over(vec![first.url()]).status(&attempt, &payout).await;
        assert!(alone.is_err(), "{fault:?} alone proves nothing: {alone:?}");
        let two = rail_over(vec![first.url(), w.proxy.url()]);
        let status = two.status(&attempt, &payout).await.unwrap();
        assert!(
            matches!(status, StandaloneStatus::Landed { final_: true, .. }),
            "{fault:?} first, then a current endpoint: landed and final, {status:?}"
        );
    }
}

/// "No such signature" from a node whose history starts after the attempt was signed proves
/// nothing: the attempt is not declared dead until a node with the history answers.
async fn a_status_search_in_a_history_that_starts_after_the_signing_proves_nothing(db: TestDb) {
    let w = world(db).await;
    w.proxy.set_rule(FaultRule::method("sendTransaction", Fault::Refuse));
    let id = w.request("sol-0020", SOL, 140_000_000, &Pubkey::new_unique()).await;
    w.pipeline.tick().await.unwrap();
    let attempt = w.store.attempts_of(&id).await.unwrap().remove(0);
    let payout = w.payout_of(&id).await;
    w.wait_finalized_past(w.last_valid_of(&id).await).await;
    // The node now answers as one restored from a snapshot taken after the signing.
    let pruned_to = w.direct.slot(CommitmentConfig::finalized()).await.unwrap();
    w.proxy.set_rule(FaultRule::method(
        "getFirstAvailableBlock",
        Fault::Answer { result: Box::leak(pruned_to.to_string().into_boxed_str()) },
    ));
    let pruned = w.rail.status(&attempt, &payout).await;
    assert!(
        matches!(&pruned, Err(e) if e.0.contains("history starts")),
        "absence in a pruned history is no proof: {pruned:?}"
    );
    w.proxy.clear();
    let full = w.rail.status(&attempt, &payout).await.unwrap();
    assert!(
        matches!(full, StandaloneStatus::Dead { .. }),
        "with the whole history, the expired attempt is dead: {full:?}"
    );
}

/// A transaction that lands and fails on chain (an SPL payout larger than the hot wallet holds:
/// the merchant's ledger balance covers it, the wallet does not) moved nothing but its fee: the
/// payout waits for a person with a `reverted` incident, and that failure, final, is the proof a
/// `retry` and a `failed` verdict rest on: retry signs attempt 2 (which fails the same way), failed
/// releases the hold, and the books hold both fees. (Before, neither verdict was accepted on
/// Solana: the hold could only stay, or be settled as paid.)
async fn a_transaction_that_failed_on_chain_is_the_proof_for_retry_and_failed_verdicts(db: TestDb) {
    let w = world(db).await;
    let to = Pubkey::new_unique();
    let usd = payoutd_domain::AssetCode::parse(USD).unwrap().0;
    w.engine
        .deposit(
            &w.merchant,
            &usd,
            Amount::from_u128(MORE_THAN_THE_WALLET_HOLDS),
            DepositKey::parse("fund-usd-more").unwrap(),
        )
        .await
        .unwrap();
    let id = w.request("usd-0030", USD, HOT_WALLET_USD_BASE_UNITS + 1, &to).await;
    w.run_until(&[&id], PayoutStatus::NeedsAttention).await;
    let attempts = async || {
        w.store
            .attempts_of(&id)
            .await
            .unwrap()
            .iter()
            .map(|a| (a.attempt_no, a.status))
            .collect::<Vec<_>>()
    };
    assert_eq!(attempts().await, vec![(1, AttemptStatus::Reverted)]);
    let kinds: Vec<IncidentKind> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.kind).collect();
    assert_eq!(kinds, vec![IncidentKind::Reverted]);
    let retried = w
        .pipeline
        .resolve_needs_attention(&id, Verdict::Retry, "the wallet was topped up")
        .await
        .unwrap();
    assert_eq!(retried.status, PayoutStatus::Processing);
    w.run_until(&[&id], PayoutStatus::NeedsAttention).await;
    assert_eq!(attempts().await, vec![(1, AttemptStatus::Reverted), (2, AttemptStatus::Reverted)]);
    let failed = w
        .pipeline
        .resolve_needs_attention(&id, Verdict::Failed, "the wallet cannot pay this much")
        .await
        .unwrap();
    assert_eq!(failed.status, PayoutStatus::Failed);
    let held = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.held)
        .fold(Amount::ZERO, |a, b| a.checked_add(b).unwrap());
    assert_eq!(held, Amount::ZERO, "the hold is released");
    assert_eq!(w.token_balance(&to, &w.usd_mint).await, 0, "nothing reached the recipient");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    w.assert_wallet_explained("both failed transactions' fees are booked").await;
}

/// Destinations that would swallow a payout or make it fail on chain are refused before anything
/// is signed: the payout fails with no attempt and its hold is released. An SPL payout to a token
/// account (the hot wallet's own, pasted instead of a wallet: a token account created for it as
/// "owner" could never be spent) and a SOL payout too small to open a new account are refused; the
/// same small amount to an account that exists is paid. (Before, the first paid into an account
/// nobody can sign for, and the second landed as an on-chain failure waiting for a person.)
async fn destinations_that_would_swallow_or_fail_a_payout_are_refused_before_signing(db: TestDb) {
    let w = world(db).await;
    let token_account =
        payoutd_rail_solana::associated_token_account(&w.rail.hot_wallet_address(), &w.usd_mint);
    let to_token_account = w.request("usd-0040", USD, 1_000_000, &token_account).await;
    let fresh = Pubkey::new_unique();
    let below_rent = w.request("sol-0040", SOL, SMALL_LAMPORTS, &fresh).await;
    let existing = Pubkey::new_unique();
    airdrop(&w.direct, &existing, 1_000_000_000).await;
    let to_existing = w.request("sol-0041", SOL, SMALL_LAMPORTS, &existing).await;
    w.run_until(&[&to_token_account, &below_rent], PayoutStatus::Failed).await;
    for id in [&to_token_account, &below_rent] {
        assert!(w.store.attempts_of(id).await.unwrap().is_empty(), "nothing was signed for {id}");
    }
    w.run_until_paid(&[&to_existing]).await;
    assert_eq!(w.lamports(&existing).await, 1_000_000_000 + SMALL_LAMPORTS);
    assert_eq!(w.lamports(&fresh).await, 0);
    let held = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.held)
        .fold(Amount::ZERO, |a, b| a.checked_add(b).unwrap());
    assert_eq!(held, Amount::ZERO, "the refused payouts' holds are released");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// The caps (I8) hold at signing on Solana, under two workers signing at once: of four approved
/// payouts of 0.03 to 0.06 SOL, with an hourly cap of 0.1 SOL (per destination, or per hot
/// wallet), exactly two get an attempt and two wait for a person; a person's approval lets one
/// through past the cap.
async fn destination_caps_hold_at_signing_on_solana_under_two_workers(db: TestDb) {
    caps_hold_at_signing_under_two_workers(
        db,
        payoutd_engine::Caps {
            per_destination_per_hour: Amount::from_u128(CAP_LAMPORTS),
            per_wallet_per_hour: Amount::from_u128(1_000 * CAP_LAMPORTS),
        },
    )
    .await;
}

async fn wallet_caps_hold_at_signing_on_solana_under_two_workers(db: TestDb) {
    caps_hold_at_signing_under_two_workers(
        db,
        payoutd_engine::Caps {
            per_destination_per_hour: Amount::from_u128(1_000 * CAP_LAMPORTS),
            per_wallet_per_hour: Amount::from_u128(CAP_LAMPORTS),
        },
    )
    .await;
}

/// An hourly cap of 0.1 SOL in the caps tests.
const CAP_LAMPORTS: u128 = 100_000_000;

async fn caps_hold_at_signing_under_two_workers(db: TestDb, caps: payoutd_engine::Caps) {
    let w = world(db).await;
    let config = PipelineConfig {
        rebroadcast_after_ms: 300,
        balance_check_interval_ms: 0,
        caps: [(payoutd_domain::AssetCode::parse(SOL).unwrap().0, caps)].into(),
        ..PipelineConfig::default()
    };
    let ((_, first), (_, second)) = (w.worker(config.clone()), w.worker(config));
    let to = Pubkey::new_unique();
    let mut ids = Vec::new();
    // Any three of them break the cap: whatever order the two workers take them in, two fit.
    for tenths in 3..=6u64 {
        ids.push(w.request(&format!("sol-capped-{tenths}"), SOL, tenths * 10_000_000, &to).await);
    }
    let (a, b) = tokio::join!(first.tick(), second.tick());
    a.unwrap();
    b.unwrap();
    let mut statuses = Vec::new();
    for id in &ids {
        statuses.push(w.status(id).await);
    }
    let held: Vec<&PayoutId> = ids
        .iter()
        .zip(&statuses)
        .filter(|(_, s)| **s == PayoutStatus::HeldForReview)
        .map(|(id, _)| id)
        .collect();
    assert_eq!(held.len(), 2, "{statuses:?}");
    let mut signed = 0;
    for id in &ids {
        signed += w.store.attempts_of(id).await.unwrap().len();
    }
    assert_eq!(signed, 2, "two transfers fit under the cap");
    first.approve(held[0]).await.unwrap();
    let paid: Vec<&PayoutId> = ids.iter().filter(|id| *id != held[1]).collect();
    let deadline = Instant::now() + Duration::from_millis(PAID_WITHIN_MS);
    loop {
        first.tick().await.unwrap();
        let mut done = true;
        for id in &paid {
            done &= w.status(id).await == PayoutStatus::Paid;
        }
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the payouts under the cap and the approved one were not paid"
        );
        tokio::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
    }
    assert_eq!(w.status(held[1]).await, PayoutStatus::HeldForReview, "still waiting for a person");
    let expected: u64 = ids
        .iter()
        .zip(3..=6u64)
        .filter(|(id, _)| *id != held[1])
        .map(|(_, tenths)| tenths * 10_000_000)
        .sum();
    assert_eq!(
        w.lamports(&to).await,
        expected,
        "the two under the cap and the one a person approved, once each"
    );
}

payoutd_testkit::both_stores!(
    a_status_search_by_a_node_behind_the_finalized_slot_proves_nothing,
    an_expiry_proof_is_read_whole_from_an_endpoint_that_has_the_slot,
    fees_and_rent_are_booked_and_the_balance_check_finds_the_wallet_explained,
    durable_nonce_payouts_are_paid_once_each_one_at_a_time,
    an_operator_cancel_advances_the_nonce_and_kills_the_signed_transaction,
    a_foreign_transfer_from_the_hot_wallet_opens_an_incident,
    a_sol_payout_is_paid_once_at_finalized,
    a_send_that_timed_out_is_not_signed_again_before_its_last_valid_block_height_passes,
    a_payout_is_paid_by_the_next_attempt_only_after_the_first_is_proven_dead,
    the_same_bytes_landing_after_a_lost_answer_pay_once,
    a_dropped_transaction_is_resent_from_stored_bytes_and_lands_once,
    an_spl_payout_to_a_new_recipient_creates_its_token_account_once,
    workers_share_the_nonce_value_through_the_store_not_their_memory,
    a_nonce_value_behind_is_forgotten_and_a_later_move_waits_its_own_finalization,
    a_status_search_in_a_history_that_starts_after_the_signing_proves_nothing,
    a_transaction_that_failed_on_chain_is_the_proof_for_retry_and_failed_verdicts,
    destinations_that_would_swallow_or_fail_a_payout_are_refused_before_signing,
    destination_caps_hold_at_signing_on_solana_under_two_workers,
    wallet_caps_hold_at_signing_on_solana_under_two_workers,
);
