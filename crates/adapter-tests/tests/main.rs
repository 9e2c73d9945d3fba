//! The adapters' integration tests, one binary: both stores, the EVM rail against anvil, the Solana rail against the local node.

mod evm_anvil;
mod evm_references;
mod solana_node;
mod solana_reconcile_cursor;
mod store_awaiting_books;
mod store_contract;
mod store_deployment_keys;
mod store_fan_out;
mod store_incidents_about;
mod store_pipeline;
mod store_webhook_secrets;
