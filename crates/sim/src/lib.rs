//! Deterministic simulation of payoutd: the engine's real code against a seeded simulated chain, clock and faults.

pub mod chain;
pub mod parallel;
pub mod provider;
pub mod report;
pub mod run;
pub mod solana;

pub use run::{quiet_simulated_crashes, run_seed, Defect, Options, SeedReport, SimStore};
