//! Proves the EVM rail against a real anvil node: signing, broadcast, re-broadcast, replacement, cancel, ERC-20 proof and transport faults.

use alloy::consensus::{SignableTransaction, Transaction, TxEnvelope};
use alloy::eips::eip2718::Decodable2718;
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{Amount, Asset, EvmAddress};
use payoutd_engine::evm::{EvmRail, ExpectedTransfer, Receipt, SendOutcome, TransferLog};
use payoutd_rail_evm::EvmNode;
use payoutd_rail_evm::{
    ERC20_TRANSFER_GAS_LIMIT_DEFAULT, EvmRpc, FEE_BUMP_DEFAULT_BPS, NATIVE_TRANSFER_GAS_LIMIT,
    RpcError, SignedTx, SigningKey, TxHash, TxParams, decode_raw, sign_cancel, sign_erc20_transfer,
    sign_native_transfer,
};
use payoutd_testkit::{
    ANVIL_CHAIN_ID, ANVIL_KEY_0, ANVIL_KEY_1, Anvil, AnvilOptions, Fault, FaultProxy, FaultRule,
    RECEIPT_WAIT_TIMEOUT_MS, deploy_test_token, wait_for_receipt,
};
use sha3::{Digest, Keccak256};

const SEND: &str = "eth_sendRawTransaction";

/// A fresh address per test, so balance assertions start from zero.
fn recipient(tag: u8) -> EvmAddress {
    let mut bytes = [0xee; 20];
    bytes[19] = tag;
    EvmAddress::from_bytes(bytes)
}

fn key0() -> SigningKey {
    SigningKey::from_hex(ANVIL_KEY_0).unwrap()
}

async fn params(rpc: &EvmRpc, key: &SigningKey, gas_limit: u64) -> TxParams {
    TxParams {
        chain_id: rpc.chain_id().await.unwrap(),
        nonce: rpc.mined_nonce(key.address()).await.unwrap(),
        fees: rpc.suggest_fees().await.unwrap(),
        gas_limit,
    }
}

async fn native(rpc: &EvmRpc, key: &SigningKey, to: EvmAddress, wei: u128) -> SignedTx {
    let params = params(rpc, key, NATIVE_TRANSFER_GAS_LIMIT).await;
    sign_native_transfer(key, &params, to, Amount::from_u128(wei)).unwrap()
}

/// Transfers from `from` to `to` that the node itself reports, across the whole chain.
async fn transfers_on_chain(rpc: &EvmRpc, from: EvmAddress, to: EvmAddress) -> Vec<TxHash> {
    let head = rpc.block_number().await.unwrap();
    let scan = rpc.outgoing_transactions(from, 0, head).await.unwrap();
    assert_eq!(scan.next_block, head + 1);
    scan.transactions
        .iter()
        .filter(|tx| tx.to == Some(to) && tx.status_ok)
        .map(|tx| tx.hash)
        .collect()
}

#[tokio::test]
async fn signed_bytes_decode_to_the_signer_and_hash_to_keccak_of_raw() {
    let key = key0();
    let params = TxParams {
        chain_id: ANVIL_CHAIN_ID,
        nonce: 42,
        fees: fees(3_000_000_000, 1_000_000_000),
        gas_limit: 21_000,
    };
    let signed = sign_native_transfer(&key, &params, recipient(1), Amount::from_u128(777)).unwrap();

    let keccak: [u8; 32] = Keccak256::digest(&signed.raw).into();
    assert_eq!(signed.hash.as_bytes(), &keccak);
    // Decoded with alloy directly, independent of this crate's decode_raw.
    let envelope = TxEnvelope::decode_2718(&mut signed.raw.as_slice()).unwrap();
    let TxEnvelope::Eip1559(inner) = &envelope else { panic!("not EIP-1559: {envelope:?}") };
    let signer =
        inner.signature().recover_address_from_prehash(&inner.tx().signature_hash()).unwrap();
    assert_eq!(signer.as_slice(), key.address().as_bytes());
    assert_eq!(envelope.nonce(), 42);
    assert_eq!(envelope.chain_id(), Some(ANVIL_CHAIN_ID));
    assert_eq!(envelope.value(), Amount::from_u128(777).as_u256());
    assert_eq!(envelope.to().unwrap().as_slice(), recipient(1).as_bytes());
    assert_eq!(envelope.max_fee_per_gas(), 3_000_000_000);
    assert_eq!(envelope.max_priority_fee_per_gas(), Some(1_000_000_000));
    assert_eq!(decode_raw(&signed.raw).unwrap().signer, key.address());

    // A different key signs different bytes that recover to a different address.
    let other = SigningKey::from_hex(ANVIL_KEY_1).unwrap();
    let by_other =
        sign_native_transfer(&other, &params, recipient(1), Amount::from_u128(777)).unwrap();
    assert_ne!(by_other.hash, signed.hash);
    assert_eq!(decode_raw(&by_other.raw).unwrap().signer, other.address());
}

fn fees(max: u128, priority: u128) -> payoutd_rail_evm::Fees {
    payoutd_rail_evm::Fees { max_fee_per_gas: max, max_priority_fee_per_gas: priority }
}

#[tokio::test]
async fn native_transfer_lands_once_with_exactly_the_amount() {
    let anvil = Anvil::start(AnvilOptions::default());
    let rpc = anvil.rpc();
    let key = key0();
    let to = recipient(2);
    let wei = 1_234_567_890_123u128;
    assert_eq!(rpc.balance(to).await.unwrap(), Amount::ZERO);

    let signed = native(rpc, &key, to, wei).await;
    assert_eq!(
        rpc.send_raw(&signed.raw).await.unwrap(),
        signed.hash,
        "node hash must equal keccak(raw)"
    );
    let receipt = wait_for_receipt(rpc, signed.hash, RECEIPT_WAIT_TIMEOUT_MS).await.unwrap();

    assert!(receipt.status_ok);
    assert_eq!(receipt.tx_hash, signed.hash);
    assert_eq!((receipt.from, receipt.to), (key.address(), Some(to)));
    assert_eq!(receipt.gas_used, NATIVE_TRANSFER_GAS_LIMIT);
    assert_eq!(rpc.balance(to).await.unwrap(), Amount::from_u128(wei));
    assert_eq!(rpc.mined_nonce(key.address()).await.unwrap(), signed.nonce + 1);
    assert_eq!(transfers_on_chain(rpc, key.address(), to).await, vec![signed.hash]);
}

#[tokio::test]
async fn resending_the_same_bytes_is_classified_as_maybe_ours_and_moves_nothing_twice() {
    let anvil = Anvil::start(AnvilOptions::no_mining());
    let rpc = anvil.rpc();
    let key = key0();
    let to = recipient(3);
    let signed = native(rpc, &key, to, 1_000).await;
    rpc.send_raw(&signed.raw).await.unwrap();

    // Still pending: the pool already holds it.
    let pending = rpc.send_raw(&signed.raw).await.unwrap_err();
    eprintln!("anvil, re-send while pending: {pending:?}");
    assert!(matches!(pending, RpcError::AlreadyKnown { .. }), "{pending:?}");
    assert!(pending.maybe_already_sent() && !pending.outcome_unknown());

    anvil.mine(1).await.unwrap();
    // Mined: the account's nonce moved past it.
    let mined = rpc.send_raw(&signed.raw).await.unwrap_err();
    eprintln!("anvil, re-send after mining: {mined:?}");
    assert!(matches!(mined, RpcError::NonceTooLow { .. }), "{mined:?}");
    assert!(mined.maybe_already_sent());

    anvil.mine(2).await.unwrap();
    assert_eq!(transfers_on_chain(rpc, key.address(), to).await, vec![signed.hash]);
    assert_eq!(rpc.balance(to).await.unwrap(), Amount::from_u128(1_000));
}

#[tokio::test]
async fn replacement_needs_a_fee_bump_and_only_one_of_the_two_hashes_lands() {
    let anvil = Anvil::start(AnvilOptions::no_mining());
    let rpc = anvil.rpc();
    let key = key0();
    let to = recipient(4);
    let original = native(rpc, &key, to, 5_000).await;
    rpc.send_raw(&original.raw).await.unwrap();

    // Same nonce and fees, different content (a re-signed payout must never slip in).
    let params = TxParams {
        chain_id: ANVIL_CHAIN_ID,
        nonce: original.nonce,
        fees: original.fees,
        gas_limit: original.gas_limit,
    };
    let same_fees = sign_native_transfer(&key, &params, to, Amount::from_u128(5_001)).unwrap();
    let underpriced = rpc.send_raw(&same_fees.raw).await.unwrap_err();
    eprintln!("anvil, replacement at the same fees: {underpriced:?}");
    assert!(matches!(underpriced, RpcError::ReplacementUnderpriced { .. }), "{underpriced:?}");
    assert!(!underpriced.maybe_already_sent(), "underpriced must not read as 'already ours'");

    let bumped_params = TxParams { fees: original.fees.bump(FEE_BUMP_DEFAULT_BPS), ..params };
    let replacement =
        sign_native_transfer(&key, &bumped_params, to, Amount::from_u128(5_000)).unwrap();
    assert_ne!(replacement.hash, original.hash);
    assert_eq!(rpc.send_raw(&replacement.raw).await.unwrap(), replacement.hash);
    assert_eq!(anvil.txpool_status().await.unwrap().pending, 1);
    anvil.mine(1).await.unwrap();

    assert_eq!(rpc.receipt(original.hash).await.unwrap(), None);
    assert_eq!(rpc.receipt(same_fees.hash).await.unwrap(), None);
    assert!(rpc.receipt(replacement.hash).await.unwrap().unwrap().status_ok);
    assert_eq!(transfers_on_chain(rpc, key.address(), to).await, vec![replacement.hash]);
    assert_eq!(rpc.balance(to).await.unwrap(), Amount::from_u128(5_000));
}

#[tokio::test]
async fn erc20_transfer_is_proven_by_its_transfer_log_and_not_by_a_wrong_one() {
    let anvil = Anvil::start(AnvilOptions::default());
    let rpc = anvil.rpc();
    let key = key0();
    let to = recipient(5);
    let supply = Amount::from_u128(1_000_000_000_000); // 1,000,000 TUSD at 6 decimals
    let token = deploy_test_token(rpc, &key, supply).await.unwrap();
    assert_eq!(rpc.erc20_balance(token, key.address()).await.unwrap(), supply);

    let amount = Amount::from_u128(2_500_000);
    let gas = rpc
        .estimate_gas(
            key.address(),
            token,
            Amount::ZERO,
            &payoutd_rail_evm::transfer_calldata(to, amount),
        )
        .await
        .unwrap();
    assert!(gas < ERC20_TRANSFER_GAS_LIMIT_DEFAULT, "estimate {gas} above the default limit");
    let params = params(rpc, &key, ERC20_TRANSFER_GAS_LIMIT_DEFAULT).await;
    let signed = sign_erc20_transfer(&key, &params, token, to, amount).unwrap();
    rpc.send_raw(&signed.raw).await.unwrap();
    let receipt = wait_for_receipt(rpc, signed.hash, RECEIPT_WAIT_TIMEOUT_MS).await.unwrap();

    assert!(receipt.status_ok);
    // The receipt as the node sent it, judged by the engine's rule: a real token's Transfer log.
    let logs = receipt.facts().transfer_logs;
    assert_eq!(
        logs,
        vec![TransferLog { token, from: key.address(), to, amount }],
        "one well-formed Transfer log of this token, this direction and this amount"
    );
    let usdc = Asset::new("evm:31337/USDC", 6, TokenKind::Erc20(token)).unwrap();
    let expected = |to, amount, asset: &Asset| ExpectedTransfer {
        from: key.address(),
        to,
        amount,
        asset: asset.clone(),
    };
    assert!(Receipt::judge(&receipt.facts(), &expected(to, amount, &usdc)).transfer_matches);
    let wrong_amount = expected(to, Amount::from_u128(2_500_001), &usdc);
    assert!(!Receipt::judge(&receipt.facts(), &wrong_amount).transfer_matches, "wrong amount");
    let other = Asset::new("evm:31337/OTHER", 6, TokenKind::Erc20(recipient(99))).unwrap();
    let judged = Receipt::judge(&receipt.facts(), &expected(to, amount, &other));
    assert!(!judged.transfer_matches, "wrong token contract");
    assert_eq!(judged.moved, Amount::ZERO, "another token's transfer moved none of this one");
    assert_eq!(rpc.erc20_balance(token, to).await.unwrap(), amount);
    assert_eq!(rpc.balance(to).await.unwrap(), Amount::ZERO, "an ERC-20 payout moves no ether");

    let head = rpc.block_number().await.unwrap();
    let scan = rpc.outgoing_transactions(key.address(), 0, head).await.unwrap();
    let to_token: Vec<_> = scan.transactions.iter().filter(|tx| tx.to == Some(token)).collect();
    assert_eq!(to_token.len(), 1);
    assert_eq!(to_token[0].erc20_transfer_call(), Some((to, amount)));
}

#[tokio::test]
async fn cancel_at_the_same_nonce_replaces_a_pending_transfer_and_nothing_arrives() {
    let anvil = Anvil::start(AnvilOptions::no_mining());
    let rpc = anvil.rpc();
    let key = key0();
    let to = recipient(6);
    let transfer = native(rpc, &key, to, 9_999).await;
    rpc.send_raw(&transfer.raw).await.unwrap();

    let cancel =
        sign_cancel(&key, ANVIL_CHAIN_ID, transfer.nonce, transfer.fees.bump(FEE_BUMP_DEFAULT_BPS))
            .unwrap();
    rpc.send_raw(&cancel.raw).await.unwrap();
    anvil.mine(1).await.unwrap();

    assert_eq!(rpc.receipt(transfer.hash).await.unwrap(), None);
    let receipt = rpc.receipt(cancel.hash).await.unwrap().expect("cancel mined");
    assert!(receipt.status_ok);
    assert_eq!(receipt.to, Some(key.address()));
    assert_eq!(rpc.balance(to).await.unwrap(), Amount::ZERO);
    assert_eq!(rpc.mined_nonce(key.address()).await.unwrap(), transfer.nonce + 1);
    // The transfer can never land now.
    assert!(matches!(rpc.send_raw(&transfer.raw).await.unwrap_err(), RpcError::NonceTooLow { .. }));
}

#[tokio::test]
async fn lost_answer_to_a_send_is_an_unknown_outcome_while_the_node_has_the_transaction() {
    let anvil = Anvil::start(AnvilOptions::no_mining());
    let proxy = FaultProxy::start(anvil.url()).await;
    let via_proxy = EvmRpc::new(proxy.url()).unwrap();
    let key = key0();
    let to = recipient(7);
    let signed = native(anvil.rpc(), &key, to, 4_242).await;

    proxy.set_rule(FaultRule::method(SEND, Fault::DropResponse).times(1));
    // Other methods pass untouched.
    assert_eq!(via_proxy.chain_id().await.unwrap(), ANVIL_CHAIN_ID);
    let error = via_proxy.send_raw(&signed.raw).await.unwrap_err();
    eprintln!("client, answer dropped: {error:?}");
    assert!(matches!(error, RpcError::Transport { .. }), "{error:?}");
    assert!(error.outcome_unknown());
    assert_eq!(proxy.count(SEND), 1, "the client must not retry on its own");
    assert!(anvil.rpc().transaction_known(signed.hash).await.unwrap(), "node accepted it anyway");

    // The stored bytes go out again (the rule expired after one use): the node says it has them.
    let again = via_proxy.send_raw(&signed.raw).await.unwrap_err();
    assert!(again.maybe_already_sent(), "{again:?}");
    anvil.mine(1).await.unwrap();
    assert!(anvil.rpc().receipt(signed.hash).await.unwrap().unwrap().status_ok);
    assert_eq!(transfers_on_chain(anvil.rpc(), key.address(), to).await, vec![signed.hash]);
    assert_eq!(proxy.count(SEND), 2);
}

#[tokio::test]
async fn delayed_answer_times_out_as_unknown_and_a_refused_send_never_reaches_the_node() {
    let anvil = Anvil::start(AnvilOptions::no_mining());
    let proxy = FaultProxy::start(anvil.url()).await;
    let client_timeout_ms = 300;
    let via_proxy = EvmRpc::with_timeout(proxy.url(), client_timeout_ms).unwrap();
    let key = key0();

    let delayed = native(anvil.rpc(), &key, recipient(8), 1).await;
    proxy.set_rule(FaultRule::method(
        SEND,
        Fault::DelayResponse { delay_ms: client_timeout_ms * 4 },
    ));
    let error = via_proxy.send_raw(&delayed.raw).await.unwrap_err();
    assert_eq!(error, RpcError::Timeout { method: SEND, timeout_ms: client_timeout_ms });
    assert!(error.outcome_unknown());
    assert!(anvil.rpc().transaction_known(delayed.hash).await.unwrap());

    proxy.set_rule(FaultRule::all(Fault::Refuse));
    let refused_tx = sign_native_transfer(
        &key,
        &TxParams {
            nonce: delayed.nonce + 1,
            chain_id: ANVIL_CHAIN_ID,
            fees: delayed.fees,
            gas_limit: NATIVE_TRANSFER_GAS_LIMIT,
        },
        recipient(8),
        Amount::from_u128(2),
    )
    .unwrap();
    let error = via_proxy.send_raw(&refused_tx.raw).await.unwrap_err();
    assert!(matches!(error, RpcError::Transport { .. }), "{error:?}");
    assert!(error.outcome_unknown());
    assert!(!anvil.rpc().transaction_known(refused_tx.hash).await.unwrap());
    assert_eq!(proxy.count(SEND), 2);

    proxy.clear();
    assert_eq!(via_proxy.send_raw(&refused_tx.raw).await.unwrap(), refused_tx.hash);
    assert_eq!(anvil.txpool_status().await.unwrap().pending, 2);
}

/// A JSON-RPC batch answers each transaction on its own (accepted, already known, refused), in input
/// order; a batch whose answer is lost is unknown for every transaction in it, though the node has them.
#[tokio::test]
async fn batched_sends_are_classified_one_by_one_and_a_lost_batch_answer_is_unknown_for_all() {
    let anvil = Anvil::start(AnvilOptions::no_mining());
    let rpc = anvil.rpc();
    let key = key0();
    let to = recipient(11);
    let base = params(rpc, &key, NATIVE_TRANSFER_GAS_LIMIT).await;
    let at = |nonce: u64, wei: u128| {
        sign_native_transfer(&key, &TxParams { nonce, ..base }, to, Amount::from_u128(wei)).unwrap()
    };
    let (first, second) = (at(base.nonce, 1), at(base.nonce + 1, 2));
    let broke = SigningKey::from_hex(&format!("0x{}", "22".repeat(32))).unwrap();
    let unfunded =
        sign_native_transfer(&broke, &TxParams { nonce: 0, ..base }, to, Amount::from_u128(3))
            .unwrap();
    rpc.send_raw(&first.raw).await.unwrap();

    let answers = rpc.send_raw_batch(&[&second.raw, &first.raw, &unfunded.raw]).await.unwrap();
    eprintln!("anvil, batch answers: {answers:?}");
    assert_eq!(answers.len(), 3);
    assert_eq!(answers[0], Ok(second.hash));
    assert!(answers[1].as_ref().is_err_and(RpcError::maybe_already_sent), "{:?}", answers[1]);
    assert!(matches!(answers[2], Err(RpcError::InsufficientFunds { .. })), "{:?}", answers[2]);

    let proxy = FaultProxy::start(anvil.url()).await;
    let via_proxy = EvmRpc::new(proxy.url()).unwrap();
    let (third, fourth) = (at(base.nonce + 2, 3), at(base.nonce + 3, 4));
    proxy.set_rule(FaultRule::method(SEND, Fault::DropResponse).times(1));
    let lost = via_proxy.send_raw_batch(&[&third.raw, &fourth.raw]).await.unwrap_err();
    assert!(lost.outcome_unknown(), "{lost:?}");
    assert_eq!(
        proxy.count(SEND),
        2,
        "both entries of the one request are counted, and nothing was retried"
    );
    assert!(
        rpc.transaction_known(third.hash).await.unwrap()
            && rpc.transaction_known(fourth.hash).await.unwrap(),
        "the node has them"
    );

    anvil.mine(1).await.unwrap();
    let mut landed = transfers_on_chain(rpc, key.address(), to).await;
    landed.sort();
    let mut expected = vec![first.hash, second.hash, third.hash, fourth.hash];
    expected.sort();
    assert_eq!(landed, expected, "each transfer exactly once");
}

/// A gateway that takes no batches answers one error for the whole request and acts on none of it:
/// the rail sends the same bytes again one per request, and each lands once.
#[tokio::test]
async fn a_node_without_batches_gets_the_same_bytes_one_per_request() {
    let anvil = Anvil::start(AnvilOptions::no_mining());
    let proxy = FaultProxy::start(anvil.url()).await;
    proxy.set_rule(FaultRule::all(Fault::NoBatches));
    let key = key0();
    let to = recipient(12);
    let base = params(anvil.rpc(), &key, NATIVE_TRANSFER_GAS_LIMIT).await;
    let txs: Vec<SignedTx> = (0..3)
        .map(|i| {
            sign_native_transfer(
                &key,
                &TxParams { nonce: base.nonce + i, ..base },
                to,
                Amount::from_u128(1 + i as u128),
            )
            .unwrap()
        })
        .collect();
    let via_proxy = EvmRpc::new(proxy.url()).unwrap();
    let refused = via_proxy
        .send_raw_batch(&txs.iter().map(|t| t.raw.as_slice()).collect::<Vec<_>>())
        .await
        .unwrap_err();
    assert!(matches!(refused, RpcError::BatchRefused { code: -32600, .. }), "{refused:?}");
    assert!(!refused.outcome_unknown(), "refused as a whole means none was taken");
    assert_eq!(anvil.txpool_status().await.unwrap().pending, 0);

    let node = EvmNode::new(
        via_proxy,
        ANVIL_CHAIN_ID,
        payoutd_rail_evm::Finality::Depth(1),
        1_000_000_000_000,
        vec![key.clone()],
    );
    let outcomes = node.send_batch(&txs.iter().map(|t| t.raw.as_slice()).collect::<Vec<_>>()).await;
    assert_eq!(outcomes, vec![SendOutcome::Accepted; 3]);
    assert_eq!(
        proxy.count(SEND),
        3 + 3 + 3,
        "two refused batches of three, then three single calls"
    );
    anvil.mine(1).await.unwrap();
    let mut landed = transfers_on_chain(anvil.rpc(), key.address(), to).await;
    landed.sort();
    let mut expected: Vec<TxHash> = txs.iter().map(|t| t.hash).collect();
    expected.sort();
    assert_eq!(landed, expected);
}

/// Receipts read in one batch request say what reads one by one say, in order: mined, pending and
/// unknown to the node; a node without batches gets the same reads one per request.
#[tokio::test]
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn receipts_read_in_batches_match_single_reads() {
    let anvil = Anvil::start(AnvilOptions::no_mining());
    let key = key0();
    let to = recipient(13);
    let base = params(anvil.rpc(), &key, NATIVE_TRANSFER_GAS_LIMIT).await;
    let txs: Vec<SignedTx> = (0..2)
        .map(|i| {
            sign_native_transfer(
                &key,
                &TxParams { nonce: base.nonce + i, ..base },
                to,
                Amount::from_u128(5 + i as u128),
            )
            .unwrap()
        })
        .collect();
    anvil.rpc().send_raw(&txs[0].raw).await.unwrap();
    anvil.mine(1).await.unwrap();
    anvil.rpc().send_raw(&txs[1].raw).await.unwrap(); // pending
    let never_sent = sign_native_transfer(
        &key,
        &TxParams { nonce: base.nonce + 9, ..base },
        to,
        Amount::from_u128(1),
    )
    .unwrap();
    let asset =
        payoutd_domain::Asset::new("evm:31337/ETH", 18, payoutd_domain::asset::TokenKind::Native)
            .unwrap();
    let expected_to = |to: EvmAddress, amount: u128| payoutd_engine::evm::ExpectedTransfer {
        asset: asset.clone(),
        from: key.address(),
        to,
        amount: Amount::from_u128(amount),
    };
    let expected = |amount: u128| expected_to(to, amount);
    let queries: Vec<(payoutd_domain::TxRef, payoutd_engine::evm::ExpectedTransfer)> = vec![
        (payoutd_domain::TxRef::parse(&txs[0].hash.to_string()).unwrap(), expected(5)),
        (payoutd_domain::TxRef::parse(&txs[1].hash.to_string()).unwrap(), expected(6)),
        (payoutd_domain::TxRef::parse(&never_sent.hash.to_string()).unwrap(), expected(1)),
        (
            payoutd_domain::TxRef::parse(&txs[0].hash.to_string()).unwrap(),
            expected_to(recipient(99), 5),
        ),
    ];
    let proxy = FaultProxy::start(anvil.url()).await;
    let node = EvmNode::new(
        EvmRpc::new(proxy.url()).unwrap(),
        ANVIL_CHAIN_ID,
        payoutd_rail_evm::Finality::Depth(1),
        1_000_000_000_000,
        vec![key.clone()],
    );
    let batched = node.receipts(&queries).await;
    assert_eq!(
        proxy.count("eth_getTransactionReceipt"),
        4,
        "one batch request carrying four reads"
    );
    let mut single = Vec::new();
    for (hash, expected) in &queries {
        single.push(node.receipt(hash, expected).await);
    }
    let as_seen = |answers: &[Result<
        Option<payoutd_engine::evm::Receipt>,
        payoutd_engine::rail::ReadError,
    >]| { answers.iter().map(|a| a.as_ref().ok().cloned()).collect::<Vec<_>>() };
    assert_eq!(as_seen(&batched), as_seen(&single));
    let mined = batched[0].as_ref().unwrap().as_ref().expect("mined");
    assert!(mined.succeeded && mined.transfer_matches);
    assert_eq!(batched[1].as_ref().unwrap(), &None, "pending: no receipt");
    assert_eq!(batched[2].as_ref().unwrap(), &None, "never seen: no receipt");
    assert!(
        !batched[3].as_ref().unwrap().as_ref().unwrap().transfer_matches,
        "checked against each query's own transfer"
    );

    proxy.set_rule(FaultRule::all(Fault::NoBatches));
    let fallback = node.receipts(&queries).await;
    assert_eq!(
        as_seen(&fallback),
        as_seen(&single),
        "a node without batches: the same answers, one read per request"
    );
}

#[tokio::test]
async fn dropped_from_the_pool_then_resent_from_stored_bytes_lands() {
    let anvil = Anvil::start(AnvilOptions::no_mining());
    let rpc = anvil.rpc();
    let key = key0();
    let to = recipient(9);
    let signed = native(rpc, &key, to, 31_337).await;
    rpc.send_raw(&signed.raw).await.unwrap();

    assert!(anvil.drop_transaction(signed.hash).await.unwrap());
    assert_eq!(anvil.txpool_status().await.unwrap().pending, 0);
    assert!(!rpc.transaction_known(signed.hash).await.unwrap());
    anvil.mine(1).await.unwrap();
    assert_eq!(rpc.receipt(signed.hash).await.unwrap(), None, "dropped transactions are not mined");

    assert_eq!(rpc.send_raw(&signed.raw).await.unwrap(), signed.hash);
    anvil.mine(1).await.unwrap();
    assert!(rpc.receipt(signed.hash).await.unwrap().unwrap().status_ok);
    assert_eq!(transfers_on_chain(rpc, key.address(), to).await, vec![signed.hash]);
}

#[tokio::test]
async fn unfunded_sender_and_fee_below_base_fee_are_classified() {
    let anvil = Anvil::start(AnvilOptions::default());
    let rpc = anvil.rpc();
    let broke = SigningKey::from_hex(&format!("0x{}", "11".repeat(32))).unwrap();
    let signed = native(rpc, &broke, recipient(10), 1).await;
    let error = rpc.send_raw(&signed.raw).await.unwrap_err();
    eprintln!("anvil, unfunded sender: {error:?}");
    assert!(matches!(error, RpcError::InsufficientFunds { .. }), "{error:?}");

    let key = key0();
    let params =
        TxParams { fees: fees(1, 1), ..params(rpc, &key, NATIVE_TRANSFER_GAS_LIMIT).await };
    let cheap = sign_native_transfer(&key, &params, recipient(10), Amount::from_u128(1)).unwrap();
    let error = rpc.send_raw(&cheap.raw).await.unwrap_err();
    eprintln!("anvil, max fee below base fee: {error:?}");
    assert!(matches!(error, RpcError::FeeTooLow { .. }), "{error:?}");
}

#[tokio::test]
async fn nonce_moved_by_an_unknown_transaction_is_visible_as_the_mined_nonce() {
    let anvil = Anvil::start(AnvilOptions::default());
    let key = key0();
    assert_eq!(anvil.rpc().mined_nonce(key.address()).await.unwrap(), 0);
    anvil.set_nonce(key.address(), 5).await.unwrap();
    assert_eq!(anvil.rpc().mined_nonce(key.address()).await.unwrap(), 5);

    // Our transaction at the consumed nonce can no longer land.
    let params = TxParams {
        chain_id: ANVIL_CHAIN_ID,
        nonce: 3,
        fees: anvil.rpc().suggest_fees().await.unwrap(),
        gas_limit: 21_000,
    };
    let stale = sign_native_transfer(&key, &params, recipient(11), Amount::from_u128(1)).unwrap();
    assert!(matches!(
        anvil.rpc().send_raw(&stale.raw).await.unwrap_err(),
        RpcError::NonceTooLow { .. }
    ));
}

#[tokio::test]
async fn scan_stops_at_the_chain_head_and_reports_where_to_continue() {
    let anvil = Anvil::start(AnvilOptions::default());
    let rpc = anvil.rpc();
    let key = key0();
    let first = native(rpc, &key, recipient(12), 1).await;
    rpc.send_raw(&first.raw).await.unwrap();
    let head =
        wait_for_receipt(rpc, first.hash, RECEIPT_WAIT_TIMEOUT_MS).await.unwrap().block_number;

    let scan = rpc.outgoing_transactions(key.address(), 0, head + 50).await.unwrap();
    assert_eq!(scan.next_block, head + 1);
    assert_eq!(scan.transactions.len(), 1);
    let page = rpc.outgoing_transactions(key.address(), head + 1, head + 10).await.unwrap();
    assert_eq!((page.transactions.len(), page.next_block), (0, head + 1));
    // Someone else's transfers are not ours.
    let other = rpc.outgoing_transactions(recipient(12), 0, head).await.unwrap();
    assert!(other.transactions.is_empty());
}

#[tokio::test]
async fn interval_mining_and_block_gas_limit_options_take_effect() {
    let gas_limit = 50_000_000u64;
    let anvil = Anvil::start(AnvilOptions {
        gas_limit: Some(gas_limit),
        ..AnvilOptions::block_time_secs(1)
    });
    let rpc = anvil.rpc();
    let key = key0();
    let first = native(rpc, &key, recipient(13), 1).await;
    rpc.send_raw(&first.raw).await.unwrap();
    // Mined by the interval timer alone: nothing here calls mine, and automine is off.
    let receipt = wait_for_receipt(rpc, first.hash, 3_000).await.unwrap();
    let block: serde_json::Value = rpc
        .call(
            "eth_getBlockByNumber",
            serde_json::json!([format!("{:#x}", receipt.block_number), false]),
        )
        .await
        .unwrap();
    assert_eq!(block["gasLimit"], format!("{gas_limit:#x}"));

    anvil.set_interval_mining(0).await.unwrap();
    anvil.set_automine(true).await.unwrap();
    let second = native(rpc, &key, recipient(13), 2).await;
    rpc.send_raw(&second.raw).await.unwrap();
    // Automine mines on arrival; under a loaded machine the block may take a moment to be sealed.
    assert!(wait_for_receipt(rpc, second.hash, 3_000).await.is_ok(), "automine mines on arrival");
}
