//! payoutd's integration tests, one binary: the binary, its CLI and its workers against real PostgreSQL, SQLite, anvil, the local Solana node and a real browser.

mod support;

mod alert_rules;
mod balances;
mod cli_keys;
mod cli_newcomer;
mod cli_statement;
mod cli_wallet;
mod cli_webhooks;
mod dashboard;
mod db_roles;
mod duplicate_transfer;
mod endpoints;
mod fairness;
mod grafana_dashboard;
mod lanes;
mod lost_commits;
mod openapi_fuzz;
mod operator;
mod own_wallets;
mod pipeline;
mod provider_guard;
mod reconcile;
mod signers;
mod solana_guard;
mod solana_signer;
mod webhooks;
mod workers;
