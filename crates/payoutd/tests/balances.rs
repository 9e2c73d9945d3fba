//! Fee journals and the hot wallet balance check against a real anvil, on PostgreSQL and SQLite:
//! the ledger explains every unit that left the wallet, and anything else is an incident.

use crate::support::{ETH, RECIPIENTS, USDC, World};
use payoutd_domain::{Amount, AssetCode, IncidentKind, PayoutStatus};
use payoutd_engine::pipeline_store::{FundingKind, WalletBooks, WalletFunding, WalletLedger};
use payoutd_engine::{Pipeline, PipelineConfig};
use payoutd_rail_evm::{SigningKey, TxHash, TxParams, sign_native_transfer};
use payoutd_testkit::{
    ANVIL_KEY_1, AnvilOptions, RECEIPT_WAIT_TIMEOUT_MS, TestDb, both_stores, wait_for_receipt,
};

/// Every pass compares: the tests decide when by calling the pass.
fn every_pass() -> PipelineConfig {
    PipelineConfig {
        rebroadcast_after_ms: 0,
        replace_after_ms: 3_600_000,
        balance_check_interval_ms: 0,
        ..PipelineConfig::default()
    }
}

/// The ledger's side of the hot wallet now that everything it sent is settled.
async fn books(w: &World, asset: &AssetCode) -> WalletLedger {
    let nonce = w.anvil.rpc().mined_nonce(w.key.address()).await.unwrap();
    match w.lines.wallet_books(&w.wallet.id, nonce).await.unwrap() {
        WalletBooks::Comparable { ledger, .. } => ledger
            .into_iter()
            .find(|l| &l.asset == asset)
            .expect("the wallet's account moved in the asset"),
        WalletBooks::NotComparable => {
            panic!("every attempt is settled: the books must be comparable")
        }
    }
}

async fn balance_incidents(w: &World) -> Vec<String> {
    let incidents = w.store.open_incidents(20).await.unwrap();
    incidents
        .into_iter()
        .filter(|i| i.kind == IncidentKind::BalanceMismatch)
        .map(|i| i.detail)
        .collect()
}

/// Sends `amount` wei from `key` to `to` outside payoutd and waits until it is mined.
async fn send_outside(
    w: &World,
    key: &SigningKey,
    to: payoutd_domain::EvmAddress,
    amount: u128,
) -> TxHash {
    let rpc = w.anvil.rpc();
    let params = TxParams {
        chain_id: 31337,
        nonce: rpc.mined_nonce(key.address()).await.unwrap(),
        fees: rpc.suggest_fees().await.unwrap(),
        gas_limit: 21_000,
    };
    let tx = sign_native_transfer(key, &params, to, Amount::from_u128(amount)).unwrap();
    rpc.send_raw(&tx.raw).await.unwrap();
    wait_for_receipt(rpc, tx.hash, RECEIPT_WAIT_TIMEOUT_MS).await.unwrap();
    tx.hash
}

async fn pay_all(w: &World, p: &Pipeline, payouts: &[payoutd_domain::Payout]) {
    w.tick_until(p, async || {
        let mut all = true;
        for payout in payouts {
            all &= w.payout(payout).await.status == PayoutStatus::Paid;
        }
        all
    })
    .await;
}

async fn fees_and_payouts_explain_every_unit_that_left_the_hot_wallet(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), every_pass()).await;
    let p = w.pipeline().await;
    let (eth, usdc) = (w.asset(ETH), w.asset(USDC));
    let rpc = w.anvil.rpc();
    assert_eq!(
        p.balance_check_pass().await.unwrap().balance_mismatches,
        0,
        "the first check books the opening balances"
    );
    let opening_eth = books(&w, &eth).await;
    assert_eq!(opening_eth.left, Amount::ZERO);
    assert_eq!(
        opening_eth.arrived,
        rpc.balance(w.key.address()).await.unwrap(),
        "the opening is what the chain held"
    );

    let payouts = vec![
        w.request("fee-eth-1", ETH, 1_000, RECIPIENTS[0]).await,
        w.request("fee-eth-2", ETH, 2_000, RECIPIENTS[1]).await,
        w.request("fee-usdc-1", USDC, 30, RECIPIENTS[0]).await,
        w.request("fee-usdc-2", USDC, 40, RECIPIENTS[2]).await,
    ];
    pay_all(&w, &p, &payouts).await;

    // The fees the node charged, read from the receipts of the transactions that landed.
    let mut fees = Amount::ZERO;
    for payout in &payouts {
        for attempt in w.store.attempts_of(&payout.id).await.unwrap() {
            if let Some((_, hash)) = &attempt.mined {
                let receipt = rpc
                    .receipt(TxHash::parse(hash.as_str()).unwrap())
                    .await
                    .unwrap()
                    .expect("mined");
                assert!(!receipt.fee_paid().is_zero(), "gas is never free on anvil");
                fees = fees.checked_add(receipt.fee_paid()).unwrap();
            }
        }
    }
    let eth_books = books(&w, &eth).await;
    assert_eq!(
        eth_books.left,
        Amount::from_u128(3_000).checked_add(fees).unwrap(),
        "ETH payouts plus every fee, in the native asset"
    );
    assert_eq!(
        books(&w, &usdc).await.left,
        Amount::from_u128(70),
        "token payouts only: their gas is paid in ETH"
    );
    let on_chain = rpc.balance(w.key.address()).await.unwrap();
    assert_eq!(
        on_chain.checked_add(eth_books.left).unwrap(),
        eth_books.arrived,
        "the chain holds what the ledger says"
    );
    assert_eq!(p.balance_check_pass().await.unwrap().balance_mismatches, 0);
    assert!(balance_incidents(&w).await.is_empty());
    assert!(
        w.store.audit_ledger().await.unwrap().is_clean(),
        "every journal, fees included, sums to zero"
    );
}

async fn units_payoutd_did_not_send_or_book_open_a_balance_mismatch(db: TestDb) {
    let w = World::new(db, AnvilOptions::default(), every_pass()).await;
    let p = w.pipeline().await;
    p.balance_check_pass().await.unwrap();
    let payout = w.request("mismatch-1", ETH, 500, RECIPIENTS[0]).await;
    pay_all(&w, &p, std::slice::from_ref(&payout)).await;
    assert_eq!(
        p.balance_check_pass().await.unwrap().balance_mismatches,
        0,
        "payoutd's own payout and fee are explained"
    );

    // A top-up nobody recorded: the chain holds more than the ledger explains.
    let other = SigningKey::from_hex(ANVIL_KEY_1).unwrap();
    send_outside(&w, &other, w.key.address(), 1_000_000).await;
    assert_eq!(p.balance_check_pass().await.unwrap().balance_mismatches, 1);
    let incidents = balance_incidents(&w).await;
    assert_eq!(incidents.len(), 1);
    assert!(incidents[0].contains("1000000 more than the ledger explains"), "{}", incidents[0]);
    assert_eq!(
        p.balance_check_pass().await.unwrap().balance_mismatches,
        0,
        "the same difference is the same incident"
    );
    assert_eq!(
        w.pipeline().await.balance_check_pass().await.unwrap().balance_mismatches,
        0,
        "also for another worker"
    );

    // Recorded, the top-up is explained: no new incident (the open one waits for an operator).
    let funding = WalletFunding {
        reference: "funding:top-up-1".into(),
        kind: FundingKind::Funding,
        wallet_id: w.wallet.id.clone(),
        asset: w.asset(ETH),
        amount: Amount::from_u128(1_000_000),
        at_ms: 1,
    };
    assert!(w.store.book_wallet_funding(&funding).await.unwrap());
    assert!(!w.store.book_wallet_funding(&funding).await.unwrap(), "a reference is booked once");
    assert_eq!(p.balance_check_pass().await.unwrap().balance_mismatches, 0);
    assert_eq!(balance_incidents(&w).await.len(), 1);

    // Someone with the hot wallet's key spends from it: less than the ledger explains.
    send_outside(&w, &w.key, payoutd_domain::EvmAddress::parse(RECIPIENTS[2]).unwrap(), 7).await;
    assert_eq!(p.balance_check_pass().await.unwrap().balance_mismatches, 1);
    let incidents = balance_incidents(&w).await;
    assert_eq!(incidents.len(), 2);
    assert!(incidents.iter().any(|d| d.contains("less than the ledger explains")), "{incidents:?}");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

both_stores!(
    fees_and_payouts_explain_every_unit_that_left_the_hot_wallet,
    units_payoutd_did_not_send_or_book_open_a_balance_mismatch,
);
