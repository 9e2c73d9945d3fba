//! Deploys the test ERC-20 (contracts/TestToken.sol, 6 decimals) and waits for receipts.

use std::time::{Duration, Instant};

use alloy::sol_types::SolValue;
use payoutd_domain::{Amount, EvmAddress};
use serde_json::json;

use payoutd_rail_evm::{
    EvmRpc, ReceiptInfo, RpcError, SignError, SigningKey, TxHash, TxParams, sign_create,
};

/// Creation bytecode from `scripts/compile-contracts`; rebuild it after editing the .sol.
pub const TEST_TOKEN_BYTECODE_HEX: &str = include_str!("../contracts/TestToken.bin");
pub const TEST_TOKEN_DECIMALS: u8 = 6;
/// Deployment uses about 0.5M gas; the rest is margin.
pub const TEST_TOKEN_DEPLOY_GAS_LIMIT: u64 = 1_500_000;
/// Covers `--block-time` up to a few seconds.
pub const RECEIPT_WAIT_TIMEOUT_MS: u64 = 10_000;
pub const RECEIPT_POLL_INTERVAL_MS: u64 = 20;

#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error(transparent)]
    Rpc(#[from] RpcError),
    #[error(transparent)]
    Sign(#[from] SignError),
    #[error("no receipt for {hash} within {timeout_ms} ms (is the node mining?)")]
    ReceiptTimeout { hash: TxHash, timeout_ms: u64 },
    #[error("deployment {hash} reverted")]
    Reverted { hash: TxHash },
    #[error("deployment {hash} mined without a contract address")]
    NoContractAddress { hash: TxHash },
}

/// Deploys the test token with `initial_supply` minted to `key`'s address and returns its
/// address. Needs a node that mines on its own (automine or `--block-time`).
pub async fn deploy_test_token(
    rpc: &EvmRpc,
    key: &SigningKey,
    initial_supply: Amount,
) -> Result<EvmAddress, HarnessError> {
    let mut init_code = hex::decode(TEST_TOKEN_BYTECODE_HEX.trim())
        .expect("TestToken.bin is hex from scripts/compile-contracts");
    init_code.extend(initial_supply.as_u256().abi_encode());
    // The pending count is fine for a test deployment; payouts take nonces from the database.
    let nonce: alloy::primitives::U64 =
        rpc.call("eth_getTransactionCount", json!([key.address().to_string(), "pending"])).await?;
    let params = TxParams {
        chain_id: rpc.chain_id().await?,
        nonce: nonce.to(),
        fees: rpc.suggest_fees().await?,
        gas_limit: TEST_TOKEN_DEPLOY_GAS_LIMIT,
    };
    let signed = sign_create(key, &params, init_code)?;
    rpc.send_raw(&signed.raw).await?;
    let receipt = wait_for_receipt(rpc, signed.hash, RECEIPT_WAIT_TIMEOUT_MS).await?;
    if !receipt.status_ok {
        return Err(HarnessError::Reverted { hash: signed.hash });
    }
    receipt.contract_address.ok_or(HarnessError::NoContractAddress { hash: signed.hash })
}

/// Polls for the receipt of `hash` until it appears or `timeout_ms` passes.
pub async fn wait_for_receipt(
    rpc: &EvmRpc,
    hash: TxHash,
    timeout_ms: u64,
) -> Result<ReceiptInfo, HarnessError> {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    loop {
        if let Some(receipt) = rpc.receipt(hash).await? {
            return Ok(receipt);
        }
        if Instant::now() > deadline {
            return Err(HarnessError::ReceiptTimeout { hash, timeout_ms });
        }
        tokio::time::sleep(Duration::from_millis(RECEIPT_POLL_INTERVAL_MS)).await;
    }
}
