//! The worker loop: the pipeline's three lanes, intake, settlement and detection, run side by side until shutdown.

use std::time::Duration;

use super::{Pipeline, PipelineError, TickReport, count_error};

/// The parts of the pipeline a worker runs side by side. Intake moves payouts forward (policy,
/// then signing and sending); settlement follows what was sent (the sweep); detection reads what
/// left the wallets and what they hold (reconciliation, balance checks). A long signing pass over
/// a backlog then never holds back the settlement of what is already on the chain, nor a slow
/// sweep the signing of what waits, nor a scan of full blocks (hundreds of milliseconds a call on
/// a busy node) the sweep. Every pass is safe beside any other, within one process as between
/// processes: each write is conditional on the state it read, and a wallet's line is signed under
/// its own lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Intake,
    Settlement,
    Detection,
}

impl Lane {
    fn name(self) -> &'static str {
        match self {
            Lane::Intake => "intake",
            Lane::Settlement => "settlement",
            Lane::Detection => "detection",
        }
    }
}

impl Pipeline {
    /// One pass of each stage of `lane`, in order. Every pass runs whatever the one before it met;
    /// the first error is returned after all ran (each is logged and counted where it happened).
    pub async fn lane_pass(&self, lane: Lane) -> Result<TickReport, PipelineError> {
        let passes = match lane {
            Lane::Intake => {
                vec![("policy", self.policy_pass().await), ("sign", self.sign_pass().await)]
            }
            Lane::Settlement => vec![("resolve", self.resolve_pass().await)],
            Lane::Detection => vec![
                ("reconcile", self.reconcile_pass().await),
                ("balance", self.balance_check_pass().await),
            ],
        };
        let mut report = TickReport::default();
        let mut first_error = None;
        for (stage, outcome) in passes {
            match outcome {
                Ok(r) => report.add(r),
                Err(e) => {
                    count_error(stage, &e);
                    tracing::warn!(stage, error = %e, "pipeline pass failed; the other passes ran");
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// Runs every lane until `shutdown` resolves, then lets each finish the pass it is in. Errors
    /// are logged and retried: recovery is a sweep over the database, so nothing is lost when a
    /// pass fails half way.
    pub async fn run(&self, shutdown: impl std::future::Future<Output = ()>) {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let lanes = async {
            tokio::join!(
                self.run_lane(Lane::Intake, stop_rx.clone()),
                self.run_lane(Lane::Settlement, stop_rx.clone()),
                self.run_lane(Lane::Detection, stop_rx)
            );
        };
        tokio::pin!(lanes);
        tokio::select! {
            () = &mut lanes => {}
            () = shutdown => {
                let _ = stop_tx.send(true);
                lanes.await;
            }
        }
    }

    async fn run_lane(&self, lane: Lane, mut stop: tokio::sync::watch::Receiver<bool>) {
        if lane == Lane::Settlement {
            return self.run_settlement(stop).await;
        }
        loop {
            let idle = match self.lane_pass(lane).await {
                Ok(report) => {
                    if report.did_work() {
                        tracing::debug!(lane = lane.name(), ?report, "pipeline pass");
                        report.export();
                    }
                    !report.did_work()
                }
                // Logged and counted per pass already.
                Err(_) => true,
            };
            let pause = if idle { self.core.config.idle_sleep_ms } else { 0 };
            tokio::select! {
                biased;
                _ = stop.wait_for(|stopped| *stopped) => return,
                () = tokio::time::sleep(Duration::from_millis(pause)) => {}
            }
        }
    }
}

impl Pipeline {
    /// The settlement lane, pipelined: the next sweep reads the rails (leases, receipts, statuses)
    /// while the one before it writes its settlements, so a sweep costs the slower of the two, not
    /// their sum. Safe as two workers' sweeps are: the next sweep's lease skips attempts still
    /// leased to the one being written, and every write is conditional on the state it read.
    async fn run_settlement(&self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let sweep = super::resolve::Sweep { core: &self.core, families: &self.families };
        let mut waiting: Option<super::resolve::Decided> = None;
        loop {
            let stopping = *stop.borrow();
            let (written, next) = match (waiting.take(), stopping) {
                (Some(decided), true) => (Some(sweep.write(decided).await), None),
                (Some(decided), false) => {
                    let (written, next) = tokio::join!(sweep.write(decided), sweep.decide());
                    (Some(written), Some(next))
                }
                (None, true) => return,
                (None, false) => (None, Some(sweep.decide().await)),
            };
            let mut worked = false;
            if let Some(written) = written {
                worked |= Self::settled(written);
            }
            match next {
                Some(Ok(decided)) if !decided.is_empty() => {
                    worked = true;
                    waiting = Some(decided);
                }
                Some(Ok(_)) | None => {}
                Some(Err(e)) => {
                    count_error("resolve", &e);
                    tracing::warn!(error = %e, "a sweep failed to lease or resolve; the next one retries");
                }
            }
            let pause =
                if worked || waiting.is_some() { 0 } else { self.core.config.idle_sleep_ms };
            tokio::select! {
                biased;
                _ = stop.wait_for(|stopped| *stopped), if waiting.is_none() => return,
                () = tokio::time::sleep(Duration::from_millis(pause)) => {}
            }
        }
    }

    /// A sweep's writes, reported; whether it did anything.
    fn settled(written: Result<TickReport, PipelineError>) -> bool {
        match written {
            Ok(report) if report.did_work() => {
                tracing::debug!(lane = Lane::Settlement.name(), ?report, "pipeline pass");
                report.export();
                true
            }
            Ok(_) => false,
            Err(e) => {
                count_error("resolve", &e);
                tracing::warn!(stage = "resolve", error = %e, "writing a sweep's settlements failed; its attempts are looked at again once their leases end");
                false
            }
        }
    }
}
