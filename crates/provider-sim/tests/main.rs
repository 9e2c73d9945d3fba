//! The provider simulators' tests, one binary: each simulator over real HTTP, and as a process.

mod bridge;
mod circle;
mod coinbase;
mod process;
mod stripe;
