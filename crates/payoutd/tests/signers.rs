//! Hot wallets whose keys payoutd never holds: one a signer service signs for (a second anvil answering `eth_signTransaction`, behind a fault proxy), one an AWS KMS key (a local KMS): payouts pay through them exactly once, wait unchanged while the signer cannot or will not sign, and an answer other than the transaction asked for is never stored or sent.

use std::sync::Arc;

use crate::support::{ETH, RECIPIENTS, World};
use payoutd_domain::{EvmAddress, HotWallet, PayoutStatus};
use payoutd_engine::{EvmChain, Pipeline, PipelineConfig, SystemClock};
use payoutd_rail_evm::{
    EvmNode, EvmRpc, Fees, Finality, KmsSigner, RemoteSigner, SigningKey, TxParams,
};
use payoutd_testkit::{
    ANVIL_CHAIN_ID, ANVIL_KEY_2, Anvil, AnvilOptions, Fault, FaultProxy, FaultRule, LocalKms,
    TestDb,
};

fn quick() -> PipelineConfig {
    PipelineConfig {
        rebroadcast_after_ms: 0,
        replace_after_ms: 3_600_000,
        balance_check_interval_ms: 0,
        ..PipelineConfig::default()
    }
}

/// A pipeline whose node holds no key: the world's hot wallet is signed for by the service at `signer_url`.
async fn pipeline_signed_by(w: &World, signer_url: &str) -> Pipeline {
    let service =
        RemoteSigner::new(EvmRpc::with_timeout(signer_url, 2_000).unwrap(), w.key.address());
    let node = EvmNode::new(
        EvmRpc::with_timeout(w.anvil.url(), 2_000).unwrap(),
        ANVIL_CHAIN_ID,
        Finality::Depth(1),
        1_000_000_000_000,
        vec![],
    )
    .with_remote_signer(service);
    let chain = EvmChain {
        rail: Arc::new(node),
        wallets: vec![w.wallet.clone()],
        assets: w.assets.iter().cloned().collect(),
    };
    let mut pipeline = Pipeline::new(w.store.clone(), Arc::new(SystemClock), w.config.clone())
        .with_evm_chain(w.lines.clone(), chain);
    pipeline.sync_wallets().await.unwrap();
    pipeline
}

/// Paid through the service; then, the service unreachable, a payout stays `approved` with its
/// hold and nothing is sent, pass after pass; reachable again, it is paid once. Each payout's
/// bytes are the service's, signed by the hot wallet.
async fn a_wallet_signed_by_a_service_pays_once_and_waits_while_it_is_down(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let service = Anvil::start(AnvilOptions::default());
    let proxy = FaultProxy::start(service.url()).await;
    let p = pipeline_signed_by(&w, proxy.url()).await;
    let first = w.request("remote-signed-1", ETH, 1_000, RECIPIENTS[0]).await;
    w.tick_until(&p, async || w.payout(&first).await.status == PayoutStatus::Paid).await;
    assert_eq!(proxy.count("eth_signTransaction"), 1, "signed by the service");

    proxy.set_rule(FaultRule::method("eth_signTransaction", Fault::Refuse));
    let second = w.request("remote-signed-2", ETH, 2_000, RECIPIENTS[1]).await;
    for _ in 0..3 {
        p.tick().await.unwrap();
    }
    assert_eq!(
        w.payout(&second).await.status,
        PayoutStatus::Approved,
        "waits, neither failed nor signed"
    );
    assert!(w.store.attempts_of(&second.id).await.unwrap().is_empty());
    proxy.clear();
    w.tick_until(&p, async || w.payout(&second).await.status == PayoutStatus::Paid).await;
    assert_eq!(
        (w.transfers_to(ETH, RECIPIENTS[0]).await, w.transfers_to(ETH, RECIPIENTS[1]).await),
        (1, 1)
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A service that answers with a transaction signed by another key is not believed: nothing is
/// stored or sent, the payout fails unsent and its hold is released.
async fn a_service_answer_signed_by_another_key_is_never_sent(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let service = Anvil::start(AnvilOptions::default());
    let proxy = FaultProxy::start(service.url()).await;
    let stranger = SigningKey::from_hex(ANVIL_KEY_2).unwrap();
    let params = TxParams {
        chain_id: ANVIL_CHAIN_ID,
        nonce: 0,
        fees: Fees { max_fee_per_gas: 2_000_000_000, max_priority_fee_per_gas: 1 },
        gas_limit: 21_000,
    };
    let forged = payoutd_rail_evm::sign_native_transfer(
        &stranger,
        &params,
        EvmAddress::parse(RECIPIENTS[2]).unwrap(),
        payoutd_domain::Amount::from_u128(3_000),
    )
    .unwrap();
    let answer: &'static str =
        Box::leak(format!("\"0x{}\"", hex::encode(&forged.raw)).into_boxed_str());
    proxy.set_rule(FaultRule::method("eth_signTransaction", Fault::Answer { result: answer }));
    let p = pipeline_signed_by(&w, proxy.url()).await;
    let payout = w.request("remote-forged-1", ETH, 3_000, RECIPIENTS[2]).await;
    w.tick_until(&p, async || w.payout(&payout).await.status == PayoutStatus::Failed).await;
    assert!(w.store.attempts_of(&payout.id).await.unwrap().is_empty(), "nothing stored");
    assert!(
        w.anvil.rpc().transaction_known(forged.hash).await.is_ok_and(|known| !known),
        "the forged bytes never reached the node"
    );
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[2]).await, 0);
    let eth = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.asset.as_str() == ETH)
        .unwrap();
    assert_eq!(eth.held, payoutd_domain::Amount::ZERO, "the hold is released");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// An EVM payout signed by an AWS KMS key (a local KMS, key spec ECC_SECG_P256K1) is paid on anvil
/// once, from the key's own address: the key never enters payoutd. While KMS refuses to sign (the
/// key disabled), payouts wait `approved`; enabled again, they are paid.
async fn a_wallet_whose_key_is_in_kms_pays_once_and_waits_while_kms_refuses(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let kms = LocalKms::start();
    let key_id = kms.create_signing_key().await;
    let address = KmsSigner::key_address(&kms.client(), &key_id).await.unwrap();
    let _: serde_json::Value = w
        .anvil
        .rpc()
        .call("anvil_setBalance", serde_json::json!([address.to_string(), "0x8ac7230489e80000"]))
        .await
        .unwrap();
    let wallet = HotWallet {
        id: HotWallet::id_for(ANVIL_CHAIN_ID, &address),
        chain_id: ANVIL_CHAIN_ID,
        address,
        next_nonce: 0,
    };
    let node = EvmNode::new(
        EvmRpc::with_timeout(w.anvil.url(), 2_000).unwrap(),
        ANVIL_CHAIN_ID,
        Finality::Depth(1),
        1_000_000_000_000,
        vec![],
    )
    .with_kms_signer(KmsSigner::new(kms.client(), key_id.clone(), address));
    let chain = EvmChain {
        rail: Arc::new(node),
        wallets: vec![wallet],
        assets: w.assets.iter().cloned().collect(),
    };
    let mut p = Pipeline::new(w.store.clone(), Arc::new(SystemClock), w.config.clone())
        .with_evm_chain(w.lines.clone(), chain);
    p.sync_wallets().await.unwrap();

    let first = w.request("kms-signed-1", ETH, 1_000, RECIPIENTS[0]).await;
    w.tick_until(&p, async || w.payout(&first).await.status == PayoutStatus::Paid).await;
    let attempts = w.store.attempts_of(&first.id).await.unwrap();
    let hash = payoutd_rail_evm::TxHash::parse(attempts[0].txs[0].hash.as_str()).unwrap();
    let receipt = w.anvil.rpc().receipt(hash).await.unwrap().expect("mined");
    assert_eq!(receipt.from, address, "sent from the KMS key's address");
    assert_eq!(
        w.anvil.rpc().balance(EvmAddress::parse(RECIPIENTS[0]).unwrap()).await.unwrap(),
        payoutd_domain::Amount::from_u128(1_000)
    );

    kms.disable_key(&key_id).await;
    let second = w.request("kms-signed-2", ETH, 2_000, RECIPIENTS[1]).await;
    for _ in 0..3 {
        p.tick().await.unwrap();
    }
    assert_eq!(w.payout(&second).await.status, PayoutStatus::Approved, "waits while KMS refuses");
    kms.enable_key(&key_id).await;
    w.tick_until(&p, async || w.payout(&second).await.status == PayoutStatus::Paid).await;
    assert_eq!(
        w.anvil.rpc().balance(EvmAddress::parse(RECIPIENTS[1]).unwrap()).await.unwrap(),
        payoutd_domain::Amount::from_u128(2_000)
    );
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// A service that answers with a transaction signed by the wallet itself, but not the one asked
/// (here: another amount to another recipient), is not believed, and since those bytes exist the
/// payout keeps its hold and stays `approved`: nothing is stored, sent or released. (Before, such an
/// answer failed the payout and released its hold while the wallet's bytes were out there.)
async fn a_service_answer_altered_but_signed_by_the_wallet_releases_nothing(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), quick()).await;
    let service = Anvil::start(AnvilOptions::default());
    let proxy = FaultProxy::start(service.url()).await;
    let params = TxParams {
        chain_id: ANVIL_CHAIN_ID,
        nonce: 0,
        fees: Fees { max_fee_per_gas: 2_000_000_000, max_priority_fee_per_gas: 1 },
        gas_limit: 21_000,
    };
    let altered = payoutd_rail_evm::sign_native_transfer(
        &w.key,
        &params,
        EvmAddress::parse(RECIPIENTS[1]).unwrap(),
        payoutd_domain::Amount::from_u128(9_999),
    )
    .unwrap();
    let answer: &'static str =
        Box::leak(format!("\"0x{}\"", hex::encode(&altered.raw)).into_boxed_str());
    proxy.set_rule(FaultRule::method("eth_signTransaction", Fault::Answer { result: answer }));
    let p = pipeline_signed_by(&w, proxy.url()).await;
    let payout = w.request("remote-altered-1", ETH, 3_000, RECIPIENTS[2]).await;
    for _ in 0..3 {
        p.tick().await.unwrap();
    }
    assert_eq!(w.payout(&payout).await.status, PayoutStatus::Approved, "waits with its hold");
    assert!(w.store.attempts_of(&payout.id).await.unwrap().is_empty(), "nothing stored");
    assert!(
        w.anvil.rpc().transaction_known(altered.hash).await.is_ok_and(|known| !known),
        "the altered bytes never reached the node"
    );
    let eth = w
        .engine
        .balances(&w.merchant)
        .await
        .unwrap()
        .into_iter()
        .find(|b| b.asset.as_str() == ETH)
        .unwrap();
    assert_eq!(eth.held, payoutd_domain::Amount::from_u128(3_000), "the hold stays");
}

payoutd_testkit::both_stores!(
    a_service_answer_altered_but_signed_by_the_wallet_releases_nothing,
    a_wallet_signed_by_a_service_pays_once_and_waits_while_it_is_down,
    a_service_answer_signed_by_another_key_is_never_sent,
    a_wallet_whose_key_is_in_kms_pays_once_and_waits_while_kms_refuses,
);
