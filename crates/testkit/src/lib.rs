//! Test support for payoutd, never shipped: a real anvil node, a local Solana node, a test ERC-20, proxies that inject transport faults, and fresh databases.

mod anvil;
pub mod db;
pub mod http1;
mod kms;
pub mod lagging;
mod pg_server;
mod proxy;
mod solana_node;
mod token;
pub mod webhooks;

pub use anvil::{
    ANVIL_BIN_ENV, ANVIL_BIN_RELATIVE, ANVIL_CHAIN_ID, ANVIL_KEY_0, ANVIL_KEY_1, ANVIL_KEY_2,
    ANVIL_KEY_3, ANVIL_START_TIMEOUT_MS, Anvil, AnvilOptions, TxpoolStatus, anvil_bin,
};
pub use db::TestDb;
pub use kms::{
    LOCAL_KMS_PYTHON_RELATIVE, LOCAL_KMS_REGION, LOCAL_KMS_SERVER_RELATIVE,
    LOCAL_KMS_START_TIMEOUT_MS, LocalKms,
};
pub use pg_server::PgServer;
pub use proxy::{Fault, FaultProxy, FaultRule, PROXY_REQUEST_MAX_BYTES};
pub use solana_node::{
    SOLANA_NODE_BIN_ENV, SOLANA_NODE_BIN_RELATIVE, SOLANA_NODE_START_TIMEOUT_MS,
    SOLANA_SETUP_TIMEOUT_MS, SOLANA_TEST_SLOT_TIME_MS, SolanaNode, airdrop, create_nonce_account,
    mint_test_token, solana_node_bin, token_balance, wait_confirmed,
};
pub use token::{
    HarnessError, RECEIPT_POLL_INTERVAL_MS, RECEIPT_WAIT_TIMEOUT_MS, TEST_TOKEN_BYTECODE_HEX,
    TEST_TOKEN_DECIMALS, TEST_TOKEN_DEPLOY_GAS_LIMIT, deploy_test_token, wait_for_receipt,
};

/// Reads an EVM attempt's slot in tests, where every attempt is an EVM one.
pub trait EvmAttemptExt {
    fn nonce(&self) -> u64;
    fn wallet_id(&self) -> &str;
}

impl EvmAttemptExt for payoutd_domain::Attempt {
    fn nonce(&self) -> u64 {
        self.slot.as_evm().expect("an EVM attempt").nonce
    }

    fn wallet_id(&self) -> &str {
        &self.slot.as_evm().expect("an EVM attempt").wallet_id
    }
}
