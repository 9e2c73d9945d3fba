//! Database failovers under load: the highly available cluster's leader (its PostgreSQL and its Patroni) SIGKILLed at random through `scripts/ha`, timed until a write through HAProxy commits again, then started again as a standby.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::process::Command;

use crate::pg::Database;
use crate::rng::Rng;

/// The first kill, drawn uniformly from this range after the workers start: while the first
/// payouts are being signed, sent and settled.
pub const FIRST_FAILOVER_AFTER_SECS_MIN: u64 = 2;
pub const FIRST_FAILOVER_AFTER_SECS_MAX: u64 = 6;
/// Time between a cluster back to three members and the next kill, drawn uniformly.
pub const FAILOVER_EVERY_SECS_MIN: u64 = 10;
pub const FAILOVER_EVERY_SECS_MAX: u64 = 20;
/// What a run with failovers must have gone through: several, the later ones while payouts of
/// every rail are still being settled.
pub const FAILOVERS_MIN: u64 = 2;
/// A failover that takes longer than this is a failure of the run, not a slow one.
pub const FAILOVER_TIMEOUT_SECS: u64 = 90;
/// How long a revived member may take to stream again before the next kill is held back.
const REJOIN_TIMEOUT_SECS: u64 = 90;
const PROBE_EVERY_MS: u64 = 200;
const SCRIPT_TIMEOUT_SECS: u64 = 60;
/// The write each probe commits: only the leader takes it, and strict synchronous replication
/// answers it only once a standby holds it.
const PROBE_SQL: &str = "CREATE TABLE IF NOT EXISTS chaos_failover_probe (at_ms BIGINT NOT NULL); \
     INSERT INTO chaos_failover_probe VALUES ((extract(epoch FROM clock_timestamp()) * 1000)::BIGINT)";

/// What the failovers went through.
#[derive(Debug, Default)]
pub struct FailoverReport {
    pub failovers: u64,
    /// From the kill to the first write committed through HAProxy, the longest of the run.
    pub failover_ms_max: u64,
    /// Failovers that did not end within the timeout, or a script that failed.
    pub trouble: Vec<String>,
}

/// Kills the cluster's leader at random until stopped.
pub struct Failovers {
    script: PathBuf,
    probe_url: String,
    rng: Rng,
}

impl Failovers {
    /// `script` is `scripts/ha`; the probes write into `db`, the run's database.
    pub fn new(script: PathBuf, db: &Database, rng: Rng) -> Failovers {
        Failovers { script, probe_url: db.url.clone(), rng }
    }

    /// Fails over until `stop` is set; never leaves the cluster short of a member.
    pub async fn run(mut self, stop: Arc<AtomicBool>) -> FailoverReport {
        let mut report = FailoverReport::default();
        let mut wait_secs =
            self.rng.between(FIRST_FAILOVER_AFTER_SECS_MIN, FIRST_FAILOVER_AFTER_SECS_MAX);
        loop {
            let wait = Duration::from_secs(wait_secs);
            wait_secs = self.rng.between(FAILOVER_EVERY_SECS_MIN, FAILOVER_EVERY_SECS_MAX);
            if sleep_unless_stopped(wait, &stop).await {
                return report;
            }
            match self.fail_over_once().await {
                Ok(ms) => {
                    report.failovers += 1;
                    report.failover_ms_max = report.failover_ms_max.max(ms);
                    crate::report::say(format!("database failover {}: {ms} ms", report.failovers));
                }
                Err(e) => {
                    report.trouble.push(format!("{e:#}"));
                    return report;
                }
            }
        }
    }

    /// One kill of the leader; the milliseconds until a write commits again.
    async fn fail_over_once(&self) -> anyhow::Result<u64> {
        self.until_whole().await?;
        let killed_at = Instant::now();
        let node = self.ha(&["kill-leader"]).await?;
        let deadline = killed_at + Duration::from_secs(FAILOVER_TIMEOUT_SECS);
        while crate::pg::execute(&self.probe_url, PROBE_SQL).await.is_err() {
            if Instant::now() > deadline {
                bail!("no write committed within {FAILOVER_TIMEOUT_SECS} s of killing {node}");
            }
            tokio::time::sleep(Duration::from_millis(PROBE_EVERY_MS)).await;
        }
        let ms = u64::try_from(killed_at.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.ha(&["revive", &node]).await?;
        Ok(ms)
    }

    /// Waits until the cluster has its three members again (a leader, a synchronous standby and a
    /// replica): strict synchronous mode with one member left would stop every write.
    async fn until_whole(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(REJOIN_TIMEOUT_SECS);
        while self.ha(&["whole"]).await.is_err() {
            if Instant::now() > deadline {
                bail!("the cluster was not whole again within {REJOIN_TIMEOUT_SECS} s");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Ok(())
    }

    /// Runs `scripts/ha` with `args`; its output, trimmed.
    async fn ha(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut command = Command::new(&self.script);
        command.args(args).kill_on_drop(true);
        let output =
            tokio::time::timeout(Duration::from_secs(SCRIPT_TIMEOUT_SECS), command.output())
                .await
                .with_context(|| format!("scripts/ha {args:?} did not finish"))?
                .with_context(|| format!("run {}", self.script.display()))?;
        if !output.status.success() {
            bail!("scripts/ha {args:?}: {}", String::from_utf8_lossy(&output.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }
}

/// Sleeps `wait`, waking early when `stop` is set: true when it was.
async fn sleep_unless_stopped(wait: Duration, stop: &AtomicBool) -> bool {
    let until = Instant::now() + wait;
    while Instant::now() < until {
        if stop.load(Ordering::Relaxed) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(PROBE_EVERY_MS)).await;
    }
    stop.load(Ordering::Relaxed)
}
