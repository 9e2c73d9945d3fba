//! This process's clock: the database's time, measured at start and every second after, so every worker stamps and judges windows on one clock.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use payoutd_engine::clock::CLOCK_MEASURE_INTERVAL_MS;
use payoutd_engine::{Clock, DatabaseClock, SystemClock};

/// The database's clock as this process reads it; start-up fails when the database's time cannot
/// be read. A measurement that fails later leaves the clock out of step (no provider create) until
/// one succeeds.
pub async fn database_clock(stores: &payoutd_store::Stores) -> anyhow::Result<Arc<dyn Clock>> {
    let clock = Arc::new(DatabaseClock::new(Arc::new(SystemClock)));
    let offset_ms = clock
        .measure(stores.time.as_ref())
        .await
        .context("cannot read the database's clock, which every window is measured on")?;
    tracing::debug!(offset_ms, "this process's clock measured against the database's");
    let (measured, time) = (clock.clone(), stores.time.clone());
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(CLOCK_MEASURE_INTERVAL_MS));
        loop {
            every.tick().await;
            if let Err(error) = measured.measure(time.as_ref()).await {
                tracing::warn!(%error, "cannot measure this process's clock against the database's");
                measured.measurement_failed();
            }
        }
    });
    Ok(clock)
}
