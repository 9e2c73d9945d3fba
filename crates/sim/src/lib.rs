//! Deterministic simulation of payoutd: the engine's real code against a seeded simulated chain, clock and faults.

pub mod chain;
pub mod clocks;
mod crash;
pub mod parallel;
pub mod provider;
pub mod report;
pub mod run;
pub mod solana;

pub use crash::quiet_simulated_crashes;
pub use report::Totals;
pub use run::{Defect, Options, SeedReport, SimStore, run_seed};
