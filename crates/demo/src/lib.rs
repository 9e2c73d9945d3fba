//! The pieces the demo (`payoutd-demo`) and the chaos run (`payoutd-chaos`) share: the API client, the node's count, intake plans, fault injection, payoutd processes and the report.

pub mod api;
pub mod chain;
pub mod chaos_proxy;
pub mod failover;
pub mod faults;
pub mod fleet;
pub mod intake;
pub mod kms;
pub mod pg;
pub mod providers;
pub mod report;
pub mod rng;
pub mod server;
pub mod signals;
pub mod solana;
pub mod webhooks;
