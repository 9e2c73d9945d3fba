//! `payoutd-provider-sim <circle|coinbase|bridge|stripe> --port N`: one simulator as a process.
fn main() {}
