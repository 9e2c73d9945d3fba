//! Reconciliation's block scan against a real anvil node, on PostgreSQL and SQLite: each final block is read once for every hot wallet behind it, and each wallet is checked from its own cursor.

use std::sync::Arc;

use crate::support::{RECIPIENTS, World};
use payoutd_domain::{Amount, EvmAddress, HotWallet};
use payoutd_engine::PipelineConfig;
use payoutd_rail_evm::{Finality, SigningKey, TxParams, sign_native_transfer};
use payoutd_testkit::{
    ANVIL_CHAIN_ID, ANVIL_KEY_1, AnvilOptions, FaultProxy, RECEIPT_WAIT_TIMEOUT_MS, TestDb,
    wait_for_receipt,
};

/// Someone with `key` sends 1 wei from its hot wallet outside payoutd; returns once it is mined.
async fn send_foreign(w: &World, key: &SigningKey) -> String {
    let rpc = w.anvil.rpc();
    let params = TxParams {
        chain_id: ANVIL_CHAIN_ID,
        nonce: rpc.mined_nonce(key.address()).await.unwrap(),
        fees: rpc.suggest_fees().await.unwrap(),
        gas_limit: 21_000,
    };
    let to = EvmAddress::parse(RECIPIENTS[2]).unwrap();
    let foreign = sign_native_transfer(key, &params, to, Amount::from_u128(1)).unwrap();
    rpc.send_raw(&foreign.raw).await.unwrap();
    wait_for_receipt(rpc, foreign.hash, RECEIPT_WAIT_TIMEOUT_MS).await.unwrap();
    foreign.hash.to_string()
}

/// The first block not final yet, with one confirmation as final (the world's node setting).
async fn first_unfinal(w: &World) -> u64 {
    w.anvil.rpc().block_number().await.unwrap() + 1
}

/// Two hot wallets on one chain: a pass reads each final block from the node once, not once per
/// wallet, and still opens an incident for each wallet's foreign transfer. A wallet added later is
/// checked from its own cursor: what it sent before it was watched is not its incident.
async fn hot_wallets_behind_the_same_blocks_share_one_read_of_each(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), PipelineConfig::default()).await;
    let second_key = SigningKey::from_hex(ANVIL_KEY_1).unwrap();
    let second = HotWallet {
        id: HotWallet::id_for(ANVIL_CHAIN_ID, &second_key.address()),
        chain_id: ANVIL_CHAIN_ID,
        address: second_key.address(),
        next_nonce: 0,
    };
    let proxy = FaultProxy::start(w.anvil.url()).await;
    let node = || Arc::new(w.node(proxy.url(), Finality::Depth(1)));
    let first_only = w.pipeline_of(node(), vec![w.wallet.clone()]).await;
    first_only.reconcile_pass().await.unwrap(); // starts the first wallet's watch
    let watched_from = w.lines.reconcile_cursor(&w.wallet.id).await.unwrap().unwrap();

    let first_foreign = send_foreign(&w, &w.key).await;
    let before_watch = send_foreign(&w, &second_key).await;
    let both = w.pipeline_of(node(), vec![w.wallet.clone(), second.clone()]).await;
    let reads = proxy.count("eth_getBlockByNumber");
    let report = both.reconcile_pass().await.unwrap();
    assert_eq!(report.unmatched_transfers, 1, "the first wallet's foreign transfer");
    assert_eq!(
        proxy.count("eth_getBlockByNumber") - reads,
        first_unfinal(&w).await - watched_from,
        "each block from the first wallet's cursor read once"
    );

    let second_foreign = send_foreign(&w, &second_key).await;
    let third_foreign = send_foreign(&w, &w.key).await;
    let cursors_at = w.lines.reconcile_cursor(&w.wallet.id).await.unwrap().unwrap();
    assert_eq!(w.lines.reconcile_cursor(&second.id).await.unwrap(), Some(cursors_at));
    let reads = proxy.count("eth_getBlockByNumber");
    let report = both.reconcile_pass().await.unwrap();
    assert_eq!(report.unmatched_transfers, 2, "one foreign transfer from each wallet");
    let blocks = first_unfinal(&w).await - cursors_at;
    assert_eq!(blocks, 2, "one block for each foreign transfer");
    assert_eq!(
        proxy.count("eth_getBlockByNumber") - reads,
        blocks,
        "both wallets' blocks read once, not once per wallet"
    );

    let details: Vec<String> =
        w.store.open_incidents(10).await.unwrap().into_iter().map(|i| i.detail).collect();
    for hash in [&first_foreign, &second_foreign, &third_foreign] {
        assert_eq!(details.iter().filter(|d| d.contains(hash.as_str())).count(), 1, "{hash}");
    }
    assert!(
        !details.iter().any(|d| d.contains(before_watch.as_str())),
        "sent before the second wallet was watched: {details:?}"
    );
    assert_eq!(both.reconcile_pass().await.unwrap().unmatched_transfers, 0);
}

/// Two workers reconciling the same chain at once: one reads the blocks, the other skips the pass
/// (the lease on the chain), so each block is read from the node once; the foreign transfers are
/// each found once, and the next pass of either worker finds nothing new.
async fn two_workers_reconciling_at_once_read_each_block_once(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), PipelineConfig::default()).await;
    let proxy = FaultProxy::start(w.anvil.url()).await;
    let node = || Arc::new(w.node(proxy.url(), Finality::Depth(1)));
    let (one, two) = (w.pipeline_on(node()).await, w.pipeline_on(node()).await);
    one.reconcile_pass().await.unwrap(); // starts the watch
    let watched_from = w.lines.reconcile_cursor(&w.wallet.id).await.unwrap().unwrap();
    const FOREIGN: usize = 8;
    for _ in 0..FOREIGN {
        send_foreign(&w, &w.key).await;
    }
    let reads = proxy.count("eth_getBlockByNumber");
    let (a, b) = tokio::join!(one.reconcile_pass(), two.reconcile_pass());
    let found = a.unwrap().unmatched_transfers + b.unwrap().unmatched_transfers;
    assert_eq!(found as usize, FOREIGN, "each foreign transfer found once");
    assert_eq!(
        proxy.count("eth_getBlockByNumber") - reads,
        first_unfinal(&w).await - watched_from,
        "each block read once by the two workers"
    );
    assert_eq!(two.reconcile_pass().await.unwrap().unmatched_transfers, 0);
    assert_eq!(w.store.open_incidents(20).await.unwrap().len(), FOREIGN);
}

payoutd_testkit::both_stores!(
    hot_wallets_behind_the_same_blocks_share_one_read_of_each,
    two_workers_reconciling_at_once_read_each_block_once,
);
