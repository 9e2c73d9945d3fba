//! The end of a seed: faults off, the chain mining and time passing until nothing is left in flight.

use std::sync::atomic::Ordering;

use payoutd_domain::PayoutStatus;

use super::{BLOCK_TXS_MAX, FINALITY, SETTLE_ROUNDS_MAX, World};
use crate::crash::engine_assertion;

impl World {
    /// Faults off; the chain keeps mining and time keeps passing until nothing is left in flight.
    pub(super) async fn settle(&mut self) -> anyhow::Result<()> {
        self.chain.set_faults(false);
        self.solana.set_faults(false);
        for p in self.providers() {
            p.set_faults(false);
        }
        self.clocks.heal().await;
        for round in 0..SETTLE_ROUNDS_MAX {
            self.clock.0.fetch_add(3_000, Ordering::SeqCst);
            for w in self.workers.clone() {
                match tokio::spawn(async move { w.tick().await }).await {
                    Ok(_) => {}
                    Err(e) if e.is_panic() => {
                        let panic = e.into_panic();
                        let assertion = engine_assertion(&*panic)
                            .unwrap_or_else(|| "a simulated crash with faults off".to_owned());
                        self.report
                            .violations
                            .push(format!("the engine stopped on its own assertion: {assertion}"));
                        return Ok(());
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            self.chain.mine(BLOCK_TXS_MAX * 4);
            // Several Solana blocks a round: expiries pass within the rounds allowed.
            for _ in 0..4 {
                self.solana.produce_block();
            }
            let open: u64 = self
                .store
                .count_payouts_by_status()
                .await?
                .into_iter()
                .filter(|(status, _)| {
                    matches!(
                        status,
                        PayoutStatus::Requested | PayoutStatus::Approved | PayoutStatus::Processing
                    )
                })
                .map(|(_, n)| n)
                .sum();
            let providers_in_flight: usize = self.providers().iter().map(|p| p.in_flight()).sum();
            if open == 0
                && self.chain.pool_len() == 0
                && self.solana.pool_len() == 0
                && providers_in_flight == 0
            {
                self.trace(format!("settled after {round} rounds"));
                // A few more blocks so every receipt is past finality for the final check.
                for _ in 0..FINALITY {
                    self.chain.mine(BLOCK_TXS_MAX);
                }
                for _ in 0..crate::solana::FINAL_DEPTH {
                    self.solana.produce_block();
                }
                return Ok(());
            }
        }
        Ok(())
    }
}
