//! The payoutd binary's library half: configuration and the adapters that only the binary wires (Redis guard).

pub mod audit;
pub mod clock;
pub mod config;
pub mod config_assets;
pub mod config_evm;
pub mod config_routes;
pub mod config_secrets;
pub mod config_solana;
pub mod config_workers;
pub mod exposure;
pub mod providers;
pub mod rails;
pub mod redis_guard;
pub mod signer_service;
