//! The chaos run's end: what the checks conclude from the API, the chain and the webhooks, and the summary it prints.

use super::*;
use payoutd_demo::chaos_proxy::LAGGING_LABEL;
use payoutd_demo::webhooks::WebhookReport;

/// The merchant's webhook receiver: every paid payout announced, under one id, signed.
pub(super) fn webhook_checks(report: &WebhookReport, checks: &mut Checks) {
    checks.add(
        report.announced == report.paid_payouts,
        format!(
            "payout.paid arrived for {} of {} paid payouts",
            report.announced, report.paid_payouts
        ),
    );
    checks.add(
        report.with_several_ids == 0,
        format!(
            "{} paid payouts announced under more than one webhook-id",
            report.with_several_ids
        ),
    );
    checks.add(
        report.strays == 0,
        format!("{} payout.paid events for payouts that are not paid", report.strays),
    );
    checks.add(
        report.verified.is_ok(),
        format!(
            "every webhook request verifies with the reference Standard Webhooks library: {:?}",
            report.verified
        ),
    );
}

/// The counts of the last line and what failed.
pub(super) struct Verdict {
    to_pay: usize,
    by_status: BTreeMap<String, usize>,
    paid: usize,
    transfers_on_chain: usize,
    duplicates: usize,
    extra_for_a_payout: usize,
    matching_no_payout: usize,
    paid_without_transfer: usize,
    released_but_landed: usize,
    not_final: Vec<String>,
    given_up: Vec<String>,
}

impl Verdict {
    fn lost(&self) -> usize {
        self.paid_without_transfer + self.released_but_landed
    }

    pub(super) fn ok(&self, checks: &Checks) -> bool {
        self.duplicates == 0
            && self.lost() == 0
            && self.not_final.is_empty()
            && self.given_up.is_empty()
            && checks.failed() == 0
    }
}

pub(super) async fn judge(
    api: &Api,
    plan: &[Planned],
    watch: &Watch,
    statuses: &HashMap<String, String>,
    scan: &Scan,
    drained: bool,
    checks: &mut Checks,
) -> anyhow::Result<Verdict> {
    // Intake: one payout per business event whatever the clients did.
    let outcomes = &watch.outcomes;
    let requests: usize = outcomes.iter().map(|o| o.requests).sum();
    let unclean: Vec<String> =
        plan.iter().zip(outcomes).filter_map(|(p, o)| o.anomaly(&p.key)).collect();
    let ids: BTreeSet<&str> = outcomes.iter().filter_map(Outcome::id).collect();
    checks.add(
        unclean.is_empty() && outcomes.len() == plan.len() && ids.len() == plan.len() && statuses.len() == plan.len(),
        format!(
            "intake: {requests} POSTs for {} business events -> {} distinct payout ids; the API lists {} payouts",
            plan.len(),
            ids.len(),
            statuses.len()
        ),
    );
    for line in unclean.iter().take(10) {
        say(format!("  intake anomaly: {line}"));
    }
    checks.add(drained, "every transaction of the hot wallets was mined before counting");

    let status_of = |i: usize| {
        outcomes
            .get(i)
            .and_then(Outcome::id)
            .and_then(|id| statuses.get(id))
            .map_or("missing", String::as_str)
    };
    let by_status = count_by_status((0..plan.len()).map(status_of));
    let mut not_final = Vec::new();
    let mut given_up = Vec::new();
    let mut released = Vec::new();
    let mut paid_signatures = Vec::new();
    for (i, p) in plan.iter().enumerate() {
        let s = status_of(i);
        if s == "paid" {
            paid_signatures.push(p.signature());
        } else if FINAL_GIVEN_UP.contains(&s) {
            given_up.push(format!("{} ({s})", p.key));
            released.push(p.signature());
        } else if !FINAL_OK.contains(&s) {
            not_final.push(format!("{} ({s})", p.key));
        }
    }
    // Every business event may move its money once, whatever payoutd says of it.
    let may_pay: Vec<Signature> = plan.iter().map(Planned::signature).collect();
    let rec = chain::reconcile(scan, &may_pay, &paid_signatures);
    let final_states: Vec<(&Planned, &str)> =
        plan.iter().enumerate().map(|(i, p)| (p, status_of(i))).collect();
    ledger_checks(api, &final_states, DEPOSITS, checks).await?;
    Ok(Verdict {
        to_pay: plan.len(),
        paid: paid_signatures.len(),
        by_status,
        transfers_on_chain: rec.transfers_on_chain,
        duplicates: rec.duplicates(),
        extra_for_a_payout: rec.extra_for_a_payout,
        matching_no_payout: rec.matching_no_payout,
        paid_without_transfer: rec.paid_without_transfer,
        released_but_landed: chain::landed_though_released(scan, &released),
        not_final,
        given_up,
    })
}

#[allow(clippy::too_many_arguments)]
#[allow(clippy::too_many_lines)]
// the run's phases in the order it prints them.
pub(super) fn summary(
    ctx: &Ctx<'_>,
    watch: &Watch,
    fleet: &FleetReport,
    // The EVM node's proxy, and the lagging replica in front of the Solana node.
    (proxy, solana_lagging): (&ChaosProxy, &ChaosProxy),
    scan: &Scan,
    v: &Verdict,
    incidents: anyhow::Result<Vec<String>>,
    history: &[String],
    pool_lines: &[String],
    deadline_secs: u64,
    checks: &Checks,
    other_rails: &[(&str, RailCount)],
    failovers: &FailoverReport,
) {
    say("---- summary ----");
    say(format!("payouts: {}; by status: {}", v.to_pay, format_counts(&v.by_status)));
    let count = |s: &str| v.by_status.get(s).copied().unwrap_or(0);
    say(format!(
        "waiting for a person: held_for_review={} needs_attention={} (open incidents: {})",
        count("held_for_review"),
        count("needs_attention"),
        match &incidents {
            Ok(lines) => lines.len().to_string(),
            Err(e) => format!("unreadable: {e:#}"),
        }
    ));
    for line in incidents.iter().flatten().take(INCIDENTS_SHOWN) {
        say(format!("  incident: {line}"));
    }
    for line in history {
        say(format!("payoutd's records: {line}"));
    }
    if !v.not_final.is_empty() {
        say(format!(
            "not final{} ({}): {}",
            if watch.timed_out { " at the deadline" } else { "" },
            v.not_final.len(),
            v.not_final.iter().take(20).cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    for line in pool_lines {
        say(format!("node pool at the end: {line}"));
    }
    if !v.given_up.is_empty() {
        say(format!(
            "given up by payoutd ({}): {}",
            v.given_up.len(),
            v.given_up.iter().take(20).cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    say(format!(
        "node faults: {} of {} requests through the proxy; by kind: {}; by method: {}",
        proxy.faults(),
        proxy.requests(),
        format_counts(&proxy.by_kind()),
        format_counts(&proxy.by_method())
    ));
    say(format!(
        "Solana status searches answered as a replica {} slots behind: {}",
        payoutd_demo::chaos_proxy::LAGGING_BLOCKS,
        solana_lagging.by_kind().get(LAGGING_LABEL).copied().unwrap_or(0)
    ));
    say(format!(
        "kills: {} SIGKILLs of workers ({} of them all workers at once), {} restarts; payoutd serve SIGKILLed {} time(s); at the end {} workers stopped on SIGTERM, {} had to be killed",
        fleet.kills,
        fleet.kill_all_events,
        fleet.restarts,
        watch.serve_kills,
        fleet.stopped_gracefully,
        fleet.stopped_hard
    ));
    for line in fleet.exited_on_their_own.iter().chain(&fleet.start_failures).take(10) {
        say(format!("  worker trouble: {line}"));
    }
    let eth = scan.transfers.iter().filter(|t| t.0 == Coin::Eth).count();
    say(format!(
        "node: blocks {}..={}: {} transfers out of the hot wallets ({eth} ETH, {} USDC), {} reverted, {} other",
        scan.first_block,
        scan.last_block,
        v.transfers_on_chain,
        v.transfers_on_chain - eth,
        scan.reverted,
        scan.other
    ));
    say(format!(
        "duplicates: {} (second transfers for a payout: {}, transfers matching no payout: {}); lost: {} (paid without a transfer: {}, failed/canceled with money gone: {})",
        v.duplicates,
        v.extra_for_a_payout,
        v.matching_no_payout,
        v.lost(),
        v.paid_without_transfer,
        v.released_but_landed
    ));
    say(format!(
        "run time {:.1}s (submissions {}; deadline {deadline_secs}s); logs in {}",
        ctx.started.elapsed().as_secs_f64(),
        watch.submissions_secs.map_or("unfinished".to_owned(), |s| format!("{s:.1}s")),
        ctx.work.display()
    ));
    if checks.failed() > 0 {
        say(format!("{} check(s) failed (see \"check FAILED\" above)", checks.failed()));
    }
    // One line per rail, then the last line, exactly this shape: scripts read it.
    say(RailCount {
        payouts: v.to_pay,
        paid: v.paid,
        transfers_on_chain: v.transfers_on_chain,
        duplicates: v.duplicates,
    }
    .line("evm"));
    let mut all = RailCount {
        payouts: v.to_pay,
        paid: v.paid,
        transfers_on_chain: v.transfers_on_chain,
        duplicates: v.duplicates,
    };
    for (rail, count) in other_rails {
        say(count.line(rail));
        all = RailCount {
            payouts: all.payouts + count.payouts,
            paid: all.paid + count.paid,
            transfers_on_chain: all.transfers_on_chain + count.transfers_on_chain,
            duplicates: all.duplicates + count.duplicates,
        };
    }
    say(format!(
        "payouts={} paid={} transfers_on_chain={} duplicates={} lost={} faults={} kills={} lagging_reads={} clock_skew_ms_max={} db_failovers={} failover_ms_max={}",
        all.payouts,
        all.paid,
        all.transfers_on_chain,
        all.duplicates,
        v.lost(),
        proxy.faults(),
        fleet.kills + watch.serve_kills,
        [proxy, solana_lagging]
            .iter()
            .map(|p| p.by_kind().get(LAGGING_LABEL).copied().unwrap_or(0))
            .sum::<u64>(),
        fleet.clock_skew_ms_max,
        failovers.failovers,
        failovers.failover_ms_max
    ));
}
