//! Nothing stalls the rest: a chain whose node is down holds back no other chain's payouts.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, AssetRegistry, DepositKey, Destination, EvmAddress, HotWallet, Metadata,
    PayoutKey, PayoutRequest, PayoutStatus,
};
use payoutd_engine::{Clock, Engine, EvmChain, Pipeline, PipelineConfig};
use payoutd_sim::chain::{FaultRates, SimChain};
use payoutd_sim::run::{FINALITY, REORG_DEPTH_MAX, scratch_dir};

const HEALTHY_CHAIN: u64 = 31337;
const DOWN_CHAIN: u64 = 31338;
/// Payouts per batch; more than the sweep's limit below, so a line that never moves could fill it.
const PAYOUTS_PER_BATCH: usize = 12;
const SWEEP_LIMIT: u32 = 8;
const ROUNDS_MAX: usize = 100;
const NO_FAULTS: FaultRates =
    FaultRates { send_refused_before_node: 0, send_response_lost: 0, read_error: 0 };

struct TestClock(AtomicI64);

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

fn recipient(i: usize) -> Destination {
    let mut b = [0u8; 20];
    b[0] = 0xCA;
    b[18] = (i / 256) as u8;
    b[19] = (i % 256) as u8;
    Destination::Evm(EvmAddress::from_bytes(b))
}

#[tokio::test(flavor = "current_thread")]
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn two_chains_one_node_down_the_other_chains_payouts_are_paid() {
    let path = scratch_dir().join(format!("liveness-{}.sqlite3", uuid::Uuid::new_v4().simple()));
    let stores = payoutd_store::open_stores(&format!("sqlite://{}", path.display())).await.unwrap();
    let store = stores.pipeline.clone();
    let clock = Arc::new(TestClock(AtomicI64::new(1_800_000_000_000)));
    let assets = AssetRegistry::new(vec![
        Asset::new(&format!("evm:{HEALTHY_CHAIN}/ETH"), 18, TokenKind::Native).unwrap(),
        Asset::new(&format!("evm:{DOWN_CHAIN}/ETH"), 18, TokenKind::Native).unwrap(),
    ])
    .unwrap();
    let engine = Engine::new(store.clone(), clock.clone(), assets.clone());
    let (merchant, _) = engine.create_merchant("liveness", [9u8; 32]).await.unwrap();
    let mut chains = Vec::new();
    let mut nodes = Vec::new();
    for (chain_id, seed, wallet_byte) in [(HEALTHY_CHAIN, 1, 0x11), (DOWN_CHAIN, 2, 0x22)] {
        let node =
            Arc::new(SimChain::new(seed, NO_FAULTS, FINALITY, REORG_DEPTH_MAX).on_chain(chain_id));
        node.set_faults(false);
        let address = EvmAddress::from_bytes([wallet_byte; 20]);
        let wallet = HotWallet {
            id: HotWallet::id_for(chain_id, &address),
            chain_id,
            address,
            next_nonce: 0,
        };
        let asset = assets.get(&format!("evm:{chain_id}/ETH")).unwrap().clone();
        let key = DepositKey::parse(&format!("fund-{chain_id}")).unwrap();
        engine
            .deposit(&merchant, &asset.code, Amount::from_u128(10u128.pow(30)), key)
            .await
            .unwrap();
        chains.push(EvmChain { rail: node.clone(), wallets: vec![wallet], assets: vec![asset] });
        nodes.push(node);
    }
    let (healthy, down) = (nodes[0].clone(), nodes[1].clone());
    let config = PipelineConfig {
        resolve_batch_max: SWEEP_LIMIT,
        rebroadcast_after_ms: 2_000,
        replace_after_ms: 600_000,
        ..PipelineConfig::default()
    };
    let mut pipeline =
        chains.into_iter().fold(Pipeline::new(store.clone(), clock.clone(), config), |p, chain| {
            p.with_evm_chain(stores.evm_lines.clone(), chain)
        });
    pipeline.sync_wallets().await.unwrap();

    let mut next_key = 0;
    let mut submit = async |chain_id: u64| {
        let mut ids = Vec::new();
        for _ in 0..PAYOUTS_PER_BATCH {
            next_key += 1;
            let code = assets.get(&format!("evm:{chain_id}/ETH")).unwrap().code.clone();
            let request = PayoutRequest::new(
                PayoutKey::parse(&format!("liveness-{next_key:04}")).unwrap(),
                code,
                Amount::from_u128(1_000 + next_key as u128),
                recipient(next_key),
                Metadata::empty(),
            );
            ids.push(engine.create_payout(&merchant, request).await.unwrap().0.id);
        }
        ids
    };
    let run_until =
        async |pipeline: &Pipeline, ids: &[payoutd_domain::PayoutId], status: PayoutStatus| {
            for _ in 0..ROUNDS_MAX {
                let _ = pipeline.tick().await; // the down chain's errors are logged and counted; the rest goes on
                healthy.mine(64);
                clock.0.fetch_add(3_000, Ordering::SeqCst);
                let mut done = true;
                for id in ids {
                    done &= store.payout_by_id(id).await.unwrap().unwrap().status == status;
                }
                if done {
                    return true;
                }
            }
            false
        };

    // The healthy chain's wallet gets ahead: its next attempts sit at higher nonces than anything of the other.
    let early = submit(HEALTHY_CHAIN).await;
    assert!(
        run_until(&pipeline, &early, PayoutStatus::Paid).await,
        "both nodes up: the first batch is paid"
    );
    // The other chain's payouts are signed and sent, then its node goes down for good.
    let stranded = submit(DOWN_CHAIN).await;
    assert!(run_until(&pipeline, &stranded, PayoutStatus::Processing).await);
    down.set_down(true);
    let late = submit(HEALTHY_CHAIN).await;
    assert!(
        run_until(&pipeline, &late, PayoutStatus::Paid).await,
        "a node that is down (and its {PAYOUTS_PER_BATCH} stuck attempts at low nonces) must not hold back another chain's payouts"
    );
    for id in &stranded {
        assert_eq!(
            store.payout_by_id(id).await.unwrap().unwrap().status,
            PayoutStatus::Processing,
            "unknown stays held, never failed"
        );
    }
    assert!(store.audit_ledger().await.unwrap().is_clean());
    drop(store);
    let _ = std::fs::remove_file(&path);
}
