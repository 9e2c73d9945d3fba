//! The Solana rail's reconciliation cursor against a real local node: a run stored mid-way goes on from where it stopped, and plain cursors stored before runs existed still read.

use std::time::{Duration, Instant};

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Asset, ChainReference, SecretUrl, TxRef};
use payoutd_engine::standalone::StandaloneRail;
use payoutd_rail_solana::{
    PaidAt, SignaturePage, SolanaClusterConfig, SolanaKey, SolanaRail, SolanaRpc, SolanaToken,
    Transfer, sign_transfer,
};
use payoutd_testkit::{SOLANA_TEST_SLOT_TIME_MS, SolanaNode, airdrop, wait_confirmed};
use solana_commitment_config::CommitmentConfig;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;

const CLUSTER: &str = "localnet";
const SOL: &str = "solana:localnet/SOL";
const HOT_WALLET_LAMPORTS: u64 = 1_000_000_000;
const TRANSFER_LAMPORTS: u64 = 1_000_000;
/// Transfers the hot wallet sends after its airdrop: a history to stop a run in the middle of.
const TRANSFERS_COUNT: usize = 4;
/// A transaction is finalized within this long on the local node (50 ms slots).
const FINALIZED_WITHIN_MS: u64 = 60_000;
/// More than the history holds: one page lists all of it.
const SIGNATURES_LISTED_MAX: usize = 100;

struct World {
    _node: SolanaNode,
    direct: SolanaRpc,
    key: SolanaKey,
    rail: SolanaRail,
}

async fn world() -> World {
    let node = SolanaNode::start(SOLANA_TEST_SLOT_TIME_MS);
    let direct = SolanaRpc::new(&SecretUrl::new(node.url().to_owned()));
    let key = SolanaKey::generate();
    airdrop(&direct, &key.pubkey(), HOT_WALLET_LAMPORTS).await;
    let config = SolanaClusterConfig {
        cluster: CLUSTER.into(),
        rpc_urls: vec![SecretUrl::new(node.url().to_owned())],
        paid_at: PaidAt::Finalized,
        compute_unit_price_cap_micro_lamports: 1_000,
        durable_nonce: None,
    };
    let assets = [Asset::new(SOL, 9, TokenKind::Native).unwrap()];
    let rail =
        SolanaRail::new(config, key.clone(), "wallet-reconcile-cursor".into(), &assets).unwrap();
    World { _node: node, direct, key, rail }
}

impl World {
    /// A transfer out of the hot wallet made outside payoutd, once finalized.
    async fn send_by_hand(&self) -> Signature {
        let (blockhash, _) = self.direct.latest_blockhash().await.unwrap();
        let transfer = Transfer {
            token: SolanaToken::Sol,
            destination: Pubkey::new_unique(),
            amount_base_units: TRANSFER_LAMPORTS,
            compute_unit_price_micro_lamports: 0,
            // A memo naming no payout of this deployment.
            reference: ChainReference::parse_hex(&"0".repeat(32)).unwrap(),
        };
        let signed = sign_transfer(&self.key, &transfer, blockhash).unwrap();
        self.direct.send_raw(&signed.raw).await.unwrap();
        wait_confirmed(&self.direct, &signed.signature).await;
        self.wait_finalized(&signed.signature).await;
        signed.signature
    }

    /// Every finalized signature naming the hot wallet, oldest first.
    async fn history(&self) -> Vec<Signature> {
        let page = SignaturePage {
            until: None,
            before: None,
            limit: SIGNATURES_LISTED_MAX,
            commitment: CommitmentConfig::finalized(),
        };
        let newest_first = self.direct.signatures_page(&self.key.pubkey(), page).await.unwrap();
        newest_first.into_iter().rev().map(|(s, _)| s).collect()
    }

    async fn wait_finalized(&self, signature: &Signature) {
        let deadline = Instant::now() + Duration::from_millis(FINALIZED_WITHIN_MS);
        while !self.history().await.contains(signature) {
            assert!(Instant::now() < deadline, "{signature} was not finalized");
            tokio::time::sleep(Duration::from_millis(SOLANA_TEST_SLOT_TIME_MS)).await;
        }
    }
}

fn refs(signatures: &[Signature]) -> Vec<TxRef> {
    signatures.iter().map(|s| TxRef::parse(&s.to_string()).unwrap()).collect()
}

/// A pass stopped in the middle of a run (the history since the cursor longer than a pass reads)
/// stored `run:<target>:<until>:<before>`; the next pass reads on below `before` down to `until`
/// on the real node, and the cursor becomes the run's target. A plain cursor (a signature, or `-`
/// for a wallet that had none) written before runs existed reads as it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stored_mid_way_goes_on_below_where_it_stopped_and_ends_at_its_target() {
    let w = world().await;
    for _ in 0..TRANSFERS_COUNT {
        w.send_by_hand().await;
    }
    let history = w.history().await;
    assert_eq!(history.len(), TRANSFERS_COUNT + 1, "the airdrop and the transfers: {history:?}");
    let (until, target, before) = (history[0], history[TRANSFERS_COUNT], history[3]);
    let run = format!("run:{target}:{until}:{before}");
    let since = w.rail.outgoing_since(Some(&run)).await.expect("a stored run reads on");
    assert_eq!(
        since.refs,
        refs(&history[1..3]),
        "what lies between `until` and `before`, oldest first"
    );
    assert_eq!(since.cursor, Some(target.to_string()), "the run ended: the cursor is its target");

    let newer = w.send_by_hand().await;
    let since = w
        .rail
        .outgoing_since(Some(&target.to_string()))
        .await
        .expect("a plain signature cursor reads");
    assert_eq!(since.refs, refs(&[newer]));
    assert_eq!(since.cursor, Some(newer.to_string()));
    let since = w
        .rail
        .outgoing_since(Some("-"))
        .await
        .expect("the cursor of a wallet that had no history reads");
    assert_eq!(since.refs, refs(&w.history().await), "everything, oldest first");
    assert_eq!(since.cursor, Some(newer.to_string()));
    let since = w.rail.outgoing_since(Some(&newer.to_string())).await.unwrap();
    assert_eq!((since.refs, since.cursor), (vec![], None), "nothing new: the cursor stays");
}
