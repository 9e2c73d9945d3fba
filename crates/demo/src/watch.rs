//! The demo's middle phases: every payout asked for (twice, or in bursts), then watched while faults
//! fire on the way to the node, payoutd is killed once mid-way, and the operator approves what
//! policy held.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use payoutd_demo::faults::{self, FaultLog};
use payoutd_demo::intake::{self, Copies, Outcome, Planned};
use payoutd_demo::providers::ProviderPayouts;
use payoutd_demo::report::{Checks, count_by_status, format_counts, say};
use payoutd_demo::server::{ETH, Payoutd, USDC};
use payoutd_demo::solana::{SolPlanned, SolanaSide};
use tokio::task::JoinHandle;

use crate::scenarios::{ReviewPair, review_pair};
use crate::start::{Nodes, Service};
use crate::{
    DEADLINE_SECS, KILL_AT_PAID_PERCENT, POLL_MS, PROGRESS_EVERY_SECS, READY_TIMEOUT_SECS, SETTLED,
    SOLANA_PAYOUTS_MAX,
};

/// Everything asked for: the Solana and provider payouts, the review pair, and the EVM bulk still
/// being submitted.
pub(crate) struct Asked {
    pub solana_plans: Vec<SolPlanned>,
    /// Key -> payout id.
    pub solana_ids: HashMap<String, String>,
    pub provider_payouts: ProviderPayouts,
    pub review: ReviewPair,
    pub bulk: Arc<Vec<Planned>>,
    submit_started: Instant,
    submission: Option<JoinHandle<Vec<Outcome>>>,
}

impl Asked {
    /// 3b-4b. Solana and provider payouts, each asked for twice; the near-duplicate pair; then the
    /// bulk, submitted in the background while the watch runs.
    pub(crate) async fn ask(
        service: &Service,
        nodes: &Nodes,
        to_pay: usize,
        run_tag: u32,
        checks: &mut Checks,
    ) -> anyhow::Result<Asked> {
        let (api, merchant_id) = (&service.api, service.merchant_id.as_str());
        let (solana_plans, solana_ids) =
            SolanaSide::submit_share(api, merchant_id, run_tag, to_pay, SOLANA_PAYOUTS_MAX).await?;
        let provider_payouts = nodes.providers.submit(api, merchant_id, run_tag).await?;
        // A near-duplicate pair: held by policy, one canceled by the merchant, one approved.
        let review = review_pair(api, run_tag, checks).await?;
        // The bulk: every request twice, some as bursts of identical concurrent requests.
        let bulk = intake::plan(to_pay - 1, run_tag, ETH, USDC, 1, intake::BURSTS);
        let bursts = bulk.iter().filter(|p| p.copies == Copies::Burst).count();
        let of = |coin| bulk.iter().filter(|p| p.coin == coin).count();
        say(format!(
            "submitting {} payouts ({} ETH, {} USDC, each to its own address): each request twice, {bursts} of them as {} identical concurrent requests",
            bulk.len() + 1,
            of(payoutd_demo::chain::Coin::Eth) + 1,
            of(payoutd_demo::chain::Coin::Usdc),
            intake::BURST_SIZE
        ));
        let bulk = Arc::new(bulk);
        let submit_started = Instant::now();
        let submission = tokio::spawn(intake::submit_all(
            Arc::clone(api),
            Arc::clone(&bulk),
            intake::DEMO_PACING,
        ));
        Ok(Asked {
            solana_plans,
            solana_ids,
            provider_payouts,
            review,
            bulk,
            submit_started,
            submission: Some(submission),
        })
    }
}

/// payoutd's one SIGKILL.
pub(crate) struct KillRecord {
    pub pid: u32,
    pub at_secs: f64,
    pub paid: usize,
    pub processing: usize,
    pub restart_ms: u128,
}

/// What the watch saw.
pub(crate) struct Watched {
    /// Each bulk payout's answers, in the bulk's order (empty when submissions did not finish).
    pub outcomes: Vec<Outcome>,
    pub kill: Option<KillRecord>,
    /// Held payouts the operator approved.
    pub approved: BTreeSet<String>,
    pub timed_out: bool,
    pub fault_log: Arc<FaultLog>,
}

/// The watch's state between polls.
struct Watch<'a> {
    service: &'a mut Service,
    asked: &'a mut Asked,
    to_pay: usize,
    started: Instant,
    outcomes: Option<Vec<Outcome>>,
    kill: Option<KillRecord>,
    approved: BTreeSet<String>,
    last_progress: Instant,
}

/// 5-6. Faults on the way to the node while everything runs; kill once mid-way, approve what
/// policy held, stop when all settled or at the deadline.
pub(crate) async fn watch(
    service: &mut Service,
    asked: &mut Asked,
    to_pay: usize,
    started: Instant,
) -> anyhow::Result<Watched> {
    let fault_log = Arc::new(FaultLog::default());
    let stop_faults = Arc::new(AtomicBool::new(false));
    let fault_task = tokio::spawn(faults::run(
        Arc::clone(&service.proxy),
        Arc::clone(&fault_log),
        Arc::clone(&stop_faults),
    ));
    let deadline = asked.submit_started + Duration::from_secs(DEADLINE_SECS);
    let mut watch = Watch {
        service,
        asked,
        to_pay,
        started,
        outcomes: None,
        kill: None,
        approved: BTreeSet::new(),
        last_progress: Instant::now(),
    };
    let mut timed_out = false;
    while !watch.poll(&fault_log).await? {
        if Instant::now() > deadline {
            timed_out = true;
            say(format!("deadline of {DEADLINE_SECS}s reached; reporting what is not paid"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    stop_faults.store(true, Ordering::Relaxed);
    let _ = fault_task.await;
    let outcomes = match (watch.outcomes, watch.asked.submission.take()) {
        (Some(o), _) => o,
        (None, Some(task)) => {
            task.abort();
            Vec::new()
        }
        (None, None) => Vec::new(),
    };
    Ok(Watched { outcomes, kill: watch.kill, approved: watch.approved, timed_out, fault_log })
}

impl Watch<'_> {
    /// One look at every payout; true once all are settled.
    async fn poll(&mut self, fault_log: &FaultLog) -> anyhow::Result<bool> {
        if self.asked.submission.as_ref().is_some_and(JoinHandle::is_finished) {
            let done = self.asked.submission.take().expect("checked").await?;
            say(format!(
                "submissions done in {:.1}s ({} client retries so far)",
                self.asked.submit_started.elapsed().as_secs_f64(),
                self.service.api.retries()
            ));
            self.outcomes = Some(done);
        }
        let statuses = self.service.api.statuses().await?;
        let counts = count_by_status(statuses.values().map(String::as_str));
        if self.kill.is_none() && self.kill_due(&counts) {
            self.kill_and_restart(&counts).await?;
            return Ok(false);
        }
        self.approve_held(&statuses).await;
        if self.last_progress.elapsed() >= Duration::from_secs(PROGRESS_EVERY_SECS) {
            self.last_progress = Instant::now();
            say(format!(
                "t={:.0}s {} | sends={} faults={} client_retries={}",
                self.started.elapsed().as_secs_f64(),
                format_counts(&counts),
                self.service.proxy.count(faults::SEND_METHOD),
                fault_log.total(),
                self.service.api.retries()
            ));
        }
        Ok(self.all_settled(&statuses))
    }

    /// Mid-way: enough paid, others signed and in flight, not all paid yet.
    fn kill_due(&self, counts: &std::collections::BTreeMap<String, usize>) -> bool {
        let n = |s: &str| counts.get(s).copied().unwrap_or(0);
        let in_flight = n("processing") > 0 || n("paid") >= self.to_pay / 2;
        n("paid") >= self.to_pay * KILL_AT_PAID_PERCENT / 100
            && in_flight
            && n("paid") < self.to_pay
    }

    async fn kill_and_restart(
        &mut self,
        counts: &std::collections::BTreeMap<String, usize>,
    ) -> anyhow::Result<()> {
        let n = |s: &str| counts.get(s).copied().unwrap_or(0);
        let payoutd: &mut Payoutd = &mut self.service.payoutd;
        let pid = payoutd.pid().unwrap_or(0);
        let at_secs = self.started.elapsed().as_secs_f64();
        payoutd.kill().await?;
        say(format!(
            "SIGKILL payoutd (pid {pid}) with paid={} processing={}",
            n("paid"),
            n("processing")
        ));
        let restart = Instant::now();
        payoutd.start().await?;
        self.service.api.wait_ready(READY_TIMEOUT_SECS).await?;
        let restart_ms = restart.elapsed().as_millis();
        say(format!(
            "payoutd restarted (pid {}) on the same SQLite file in {restart_ms} ms",
            self.service.payoutd.pid().unwrap_or(0)
        ));
        let (paid, processing) = (n("paid"), n("processing"));
        self.kill = Some(KillRecord { pid, at_secs, paid, processing, restart_ms });
        Ok(())
    }

    /// Once per payout: a refusal is reported, not retried (the payout then shows as not paid).
    async fn approve_held(&mut self, statuses: &HashMap<String, String>) {
        for (id, status) in statuses {
            if status != "held_for_review" || self.approved.contains(id) {
                continue;
            }
            match self.service.payoutd.cli(&["payout", "approve", id]).await {
                Ok(result) => say(format!(
                    "operator approved held payout {id} with `payoutd payout approve`: now {}",
                    result["status"].as_str().unwrap_or("?")
                )),
                Err(e) => say(format!("operator approval of {id} failed: {e:#}")),
            }
            self.approved.insert(id.clone());
        }
    }

    fn all_settled(&self, statuses: &HashMap<String, String>) -> bool {
        let Some(outcomes) = &self.outcomes else { return false };
        let settled = |id: &str| statuses.get(id).is_some_and(|s| SETTLED.contains(&s.as_str()));
        let mut ids =
            outcomes.iter().chain([&self.asked.review.twin_outcome]).filter_map(Outcome::id);
        ids.all(settled)
            && self.asked.solana_ids.values().all(|id| settled(id))
            && self.asked.provider_payouts.ids().all(|id| settled(id))
    }
}
