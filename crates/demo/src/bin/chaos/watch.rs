//! The chaos run's watch loop: submissions paced in, `payoutd serve` killed and restarted, progress and stalls reported, until every payout ends or the deadline passes.

use super::*;

/// What the watch loop saw.
pub(super) struct Watch {
    pub(super) outcomes: Vec<Outcome>,
    pub(super) serve_kills: u64,
    pub(super) timed_out: bool,
    pub(super) submissions_secs: Option<f64>,
}

#[allow(clippy::too_many_lines)]
// the run's phases in the order it prints them.
pub(super) async fn watch(
    ctx: &Ctx<'_>,
    api: &Arc<Api>,
    serve: &mut Payoutd,
    plan: &Arc<Vec<Planned>>,
    proxy: &ChaosProxy,
    worker_kills: &std::sync::atomic::AtomicU64,
    deadline_secs: u64,
) -> anyhow::Result<Watch> {
    let submit_started = Instant::now();
    let mut submission =
        Some(tokio::spawn(intake::submit_all(Arc::clone(api), Arc::clone(plan), PACING)));
    let deadline = submit_started + Duration::from_secs(deadline_secs);
    let mut out =
        Watch { outcomes: Vec::new(), serve_kills: 0, timed_out: false, submissions_secs: None };
    let mut have_outcomes = false;
    let mut last_progress = Instant::now();
    let n = plan.len();
    // (paid count, since when): a long plateau gets the node's pool printed.
    let mut plateau = (usize::MAX, Instant::now());
    let mut plateau_reported = false;
    loop {
        if submission.as_ref().is_some_and(|t| t.is_finished()) {
            out.outcomes = submission.take().expect("checked").await?;
            have_outcomes = true;
            out.submissions_secs = Some(submit_started.elapsed().as_secs_f64());
            say(format!(
                "submissions done in {:.1}s ({} client retries)",
                submit_started.elapsed().as_secs_f64(),
                api.retries()
            ));
        }
        let statuses = api.statuses().await?;
        let counts = count_by_status(statuses.values().map(String::as_str));
        if out.serve_kills == 0
            && submission.is_some()
            && statuses.len() >= n * SERVE_KILL_AT_PERCENT / 100
        {
            let pid = serve.pid().unwrap_or(0);
            serve.kill().await?;
            let restart = Instant::now();
            serve.start().await?;
            api.wait_ready(READY_TIMEOUT_SECS).await?;
            out.serve_kills += 1;
            say(format!(
                "SIGKILL payoutd serve (pid {pid}) with {} of {n} payouts created, merchants still submitting; restarted (pid {}) in {} ms",
                statuses.len(),
                serve.pid().unwrap_or(0),
                restart.elapsed().as_millis()
            ));
            continue;
        }
        if last_progress.elapsed() >= Duration::from_secs(PROGRESS_EVERY_SECS) {
            last_progress = Instant::now();
            say(format!(
                "t={:.0}s {} | node requests={} faults={} worker_kills={} client_retries={}",
                ctx.started.elapsed().as_secs_f64(),
                format_counts(&counts),
                proxy.requests(),
                proxy.faults(),
                worker_kills.load(Ordering::Relaxed),
                api.retries()
            ));
        }
        let paid = counts.get("paid").copied().unwrap_or(0);
        if paid != plateau.0 {
            plateau = (paid, Instant::now());
            plateau_reported = false;
        } else if !plateau_reported
            && paid < n
            && plateau.1.elapsed() >= Duration::from_secs(STALL_REPORT_AFTER_SECS)
        {
            plateau_reported = true;
            say(format!("no payout paid for {STALL_REPORT_AFTER_SECS}s; the node's pool:"));
            for wallet in &ctx.wallets {
                say(format!("  {}", chain::pool_line(&ctx.rpc, *wallet).await));
                stuck_nonce_history(ctx, proxy, *wallet).await;
            }
        }
        if have_outcomes {
            let mut ids = out.outcomes.iter().map(Outcome::id);
            if ids.all(|id| {
                id.and_then(|id| statuses.get(id)).is_some_and(|s| {
                    FINAL_OK.contains(&s.as_str()) || FINAL_GIVEN_UP.contains(&s.as_str())
                })
            }) {
                break;
            }
        }
        if Instant::now() > deadline {
            out.timed_out = true;
            say(format!("deadline of {deadline_secs}s reached; reporting what is not final"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    if let Some(task) = submission.take() {
        task.abort();
    }
    Ok(out)
}

/// Every send the proxy saw of the wallet's next nonce (the one everything else waits for).
pub(super) async fn stuck_nonce_history(
    ctx: &Ctx<'_>,
    proxy: &ChaosProxy,
    wallet: payoutd_domain::EvmAddress,
) {
    let Ok(nonce) = ctx.rpc.mined_nonce(wallet).await else { return };
    let history = proxy.send_history(wallet, nonce);
    if history.is_empty() {
        return;
    }
    say(format!("  sends of {wallet} nonce {nonce} through the proxy: {}", history.join(" | ")));
}
