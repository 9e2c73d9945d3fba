//! Every EVM transfer payoutd signs names its business event on chain, proven against a real anvil node: a token's `transfer` accepts the reference after its arguments, a native transfer to an address without code carries it as data, one to a contract carries nothing, and what each costs in gas.

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, ChainReference, EvmAddress, FeeBid, HotWallet, MerchantId, PayoutKey,
    ReferenceKey,
};
use payoutd_engine::evm::{EvmRail, ExpectedTransfer, Receipt};
use payoutd_rail_evm::{
    ERC20_TRANSFER_GAS_LIMIT_DEFAULT, EvmNode, EvmRpc, Finality, NATIVE_TRANSFER_GAS_LIMIT,
    SigningKey, TxHash, TxParams, calldata_tokens, decode_raw, sign_erc20_transfer,
};
use payoutd_testkit::{
    ANVIL_CHAIN_ID, ANVIL_KEY_0, Anvil, AnvilOptions, RECEIPT_WAIT_TIMEOUT_MS, deploy_test_token,
    wait_for_receipt,
};

fn reference(event: &str) -> ChainReference {
    let key = ReferenceKey::from_bytes([7; 32]);
    let merchant = MerchantId::parse("mer_0192f00000000000000000000000000a").unwrap();
    ChainReference::of(&key, &merchant, &PayoutKey::parse(event).unwrap())
}

/// The node's own record of a mined transaction: its input and the gas it used.
async fn mined(rpc: &EvmRpc, from: EvmAddress, hash: TxHash) -> (Vec<u8>, u64) {
    let receipt = wait_for_receipt(rpc, hash, RECEIPT_WAIT_TIMEOUT_MS).await.unwrap();
    assert!(receipt.status_ok, "{hash} landed");
    let head = rpc.block_number().await.unwrap();
    let scan = rpc.outgoing_transactions(from, 0, head).await.unwrap();
    let tx = scan.transactions.into_iter().find(|t| t.hash == hash).expect("scanned");
    (tx.input, receipt.gas_used)
}

struct Rig {
    _anvil: Anvil,
    rpc: EvmRpc,
    node: EvmNode,
    wallet: HotWallet,
    key: SigningKey,
    token: EvmAddress,
}

impl Rig {
    async fn start() -> Rig {
        let anvil = Anvil::start(AnvilOptions::default());
        let rpc = anvil.rpc().clone();
        let key = SigningKey::from_hex(ANVIL_KEY_0).unwrap();
        let token =
            deploy_test_token(&rpc, &key, Amount::from_u128(1_000_000_000_000)).await.unwrap();
        let node = EvmNode::new(
            rpc.clone(),
            ANVIL_CHAIN_ID,
            Finality::Depth(1),
            u128::MAX,
            vec![key.clone()],
        );
        let address = key.address();
        let id = HotWallet::id_for(ANVIL_CHAIN_ID, &address);
        let wallet = HotWallet { id, chain_id: ANVIL_CHAIN_ID, address, next_nonce: 0 };
        Rig { _anvil: anvil, rpc, node, wallet, key, token }
    }

    async fn nonce_and_bid(&self) -> (u64, FeeBid) {
        let nonce = self.rpc.mined_nonce(self.key.address()).await.unwrap();
        (nonce, self.node.fee_quote().await.unwrap())
    }

    /// Signs `transfer` with `reference` as the pipeline does, sends it, and reads it back mined.
    async fn pay(&self, transfer: &ExpectedTransfer, reference: &ChainReference) -> (Vec<u8>, u64) {
        let (nonce, bid) = self.nonce_and_bid().await;
        let signed =
            self.node.sign_transfer(&self.wallet, transfer, reference, nonce, bid).await.unwrap();
        self.rpc.send_raw(&signed.raw).await.unwrap();
        let hash = TxHash::parse(signed.hash.as_str()).unwrap();
        mined(&self.rpc, self.key.address(), hash).await
    }

    fn transfer(&self, asset: &Asset, to: EvmAddress, amount: u128) -> ExpectedTransfer {
        ExpectedTransfer {
            asset: asset.clone(),
            from: self.key.address(),
            to,
            amount: Amount::from_u128(amount),
        }
    }
}

/// A token's `transfer` with the reference after its two arguments lands and moves exactly the
/// amount (the engine's receipt rule judges it the payout's transfer); the reference is read back
/// from the mined input; it costs exactly its calldata (EIP-2028: 4 gas a token, at most 256 for
/// 16 bytes) more than the same transfer without it to another fresh recipient.
#[tokio::test]
async fn a_token_transfer_carries_its_reference_after_the_arguments() {
    let rig = Rig::start().await;
    let usdc = Asset::new("evm:31337/USDC", 6, TokenKind::Erc20(rig.token)).unwrap();
    let to = EvmAddress::from_bytes([0xee; 20]);
    let ours = reference("withdrawal-1");
    let transfer = rig.transfer(&usdc, to, 2_500_000);
    let (input, gas_with) = rig.pay(&transfer, &ours).await;
    assert_eq!(ChainReference::at_end_of(&input), Some(ours), "the reference, read back");
    assert_eq!(input.len(), 4 + 2 * 32 + 16, "selector, two arguments, the reference");
    assert_eq!(rig.rpc.erc20_balance(rig.token, to).await.unwrap(), Amount::from_u128(2_500_000));
    let head = rig.rpc.block_number().await.unwrap();
    let scan = rig.rpc.outgoing_transactions(rig.key.address(), head, head).await.unwrap();
    assert_eq!(
        scan.transactions[0].erc20_transfer_call(),
        Some((to, Amount::from_u128(2_500_000)))
    );
    let receipt = rig.rpc.receipt(scan.transactions[0].hash).await.unwrap().unwrap();
    assert!(Receipt::judge(&receipt.facts(), &transfer).transfer_matches);

    // The same transfer without a reference to another fresh recipient (the token's storage costs
    // the same): the yardstick.
    let (nonce, bid) = rig.nonce_and_bid().await;
    let params = TxParams {
        chain_id: ANVIL_CHAIN_ID,
        nonce,
        fees: payoutd_rail_evm::Fees {
            max_fee_per_gas: bid.max_fee_per_gas,
            max_priority_fee_per_gas: bid.max_priority_fee_per_gas,
        },
        gas_limit: ERC20_TRANSFER_GAS_LIMIT_DEFAULT,
    };
    let fresh = EvmAddress::from_bytes([0xec; 20]);
    let plain =
        sign_erc20_transfer(&rig.key, &params, rig.token, fresh, Amount::from_u128(2_500_000))
            .unwrap();
    rig.rpc.send_raw(&plain.raw).await.unwrap();
    let (plain_input, gas_without) = mined(&rig.rpc, rig.key.address(), plain.hash).await;
    assert_eq!(plain_input.len(), 4 + 2 * 32);
    let extra = gas_with - gas_without;
    eprintln!("reference gas: ERC-20 transfer {gas_without} without, {gas_with} with: +{extra}");
    assert_eq!(extra, 4 * calldata_tokens(ours.as_bytes()), "the reference's calldata, no more");
    assert!(extra <= 4 * 4 * 16);
}

/// A native transfer to an address without code carries the reference as its data, within a gas
/// limit raised by exactly what the data costs; one to a contract (the token) carries nothing.
#[tokio::test]
async fn a_native_transfer_carries_its_reference_only_to_an_address_without_code() {
    let rig = Rig::start().await;
    let eth = Asset::new("evm:31337/ETH", 18, TokenKind::Native).unwrap();
    let ours = reference("withdrawal-2");
    let eoa = EvmAddress::from_bytes([0xed; 20]);
    let (input, gas) = rig.pay(&rig.transfer(&eth, eoa, 1_000), &ours).await;
    assert_eq!(input, ours.as_bytes().to_vec());
    // anvil runs Prague: a transaction that executes nothing pays EIP-7623's data floor.
    let data_gas = 10 * calldata_tokens(ours.as_bytes());
    assert_eq!(gas, NATIVE_TRANSFER_GAS_LIMIT + data_gas, "21,000 and the data's gas, no more");
    eprintln!("reference gas: native transfer {NATIVE_TRANSFER_GAS_LIMIT} without, {gas} with");
    assert_eq!(rig.rpc.balance(eoa).await.unwrap(), Amount::from_u128(1_000));

    // To a contract: signed with no data and the plain limit (the test token has no fallback, so
    // it is not sent: it would revert whatever it carried).
    let (nonce, bid) = rig.nonce_and_bid().await;
    let to_contract = rig.transfer(&eth, rig.token, 1_000);
    let signed =
        rig.node.sign_transfer(&rig.wallet, &to_contract, &ours, nonce, bid).await.unwrap();
    let decoded = decode_raw(&signed.raw).unwrap();
    assert!(decoded.input.is_empty(), "nothing for a contract's fallback to refuse");
    assert_eq!(decoded.gas_limit, NATIVE_TRANSFER_GAS_LIMIT);
}
