//! The demo's last phase: what intake answered, what payoutd reports, and what the nodes and
//! providers themselves hold, checked against each other and summed up in the lines scripts read.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use payoutd_demo::chain::{self, Coin, Reconciliation, Scan, Signature};
use payoutd_demo::faults;
use payoutd_demo::intake::{Outcome, Planned};
use payoutd_demo::report::{Checks, RailCount, count_by_status, format_counts, ledger_checks, say};

use crate::DEPOSITS;
use crate::cli::Args;
use crate::scenarios::edge_checks;
use crate::start::{Nodes, Service};
use crate::watch::{Asked, Watched};

/// The run as it ended, read once and judged.
pub(crate) struct Verdict<'a> {
    pub nodes: &'a Nodes,
    pub service: &'a Service,
    pub asked: &'a Asked,
    pub watched: &'a Watched,
    pub to_pay: usize,
    /// Where payoutd's files are: its config, its database, its log.
    pub work: &'a std::path::Path,
}

/// What payoutd reports at the end: each payout's status.
struct Reported<'a> {
    /// Every EVM business event: the review twin, then the bulk, each with its answers.
    planned: Vec<(&'a Planned, &'a Outcome)>,
    statuses: HashMap<String, String>,
}

impl Reported<'_> {
    fn status_of(&self, outcome: &Outcome) -> &str {
        outcome.id().and_then(|id| self.statuses.get(id)).map_or("missing", String::as_str)
    }

    fn signatures_where(&self, keep: impl Fn(&str) -> bool) -> Vec<Signature> {
        let kept = self.planned.iter().filter(|(_, o)| keep(self.status_of(o)));
        kept.map(|(p, _)| p.signature()).collect()
    }
}

impl Verdict<'_> {
    /// Every check, the summary, and the lines scripts read; true when the run is clean.
    pub(crate) async fn judge(
        &self,
        args: &Args,
        run_tag: u32,
        started: Instant,
        checks: &mut Checks,
    ) -> anyhow::Result<bool> {
        let mut planned = vec![(&self.asked.review.twin, &self.asked.review.twin_outcome)];
        planned.extend(self.asked.bulk.iter().zip(self.watched.outcomes.iter()));
        self.check_intake(&planned, run_tag, checks).await?;
        let statuses = self.service.api.statuses().await?;
        let reported = Reported { planned, statuses };
        self.check_webhooks(&reported, checks).await;
        // 7. The node's own account of what left the hot wallet.
        let (nodes, wallet) = (self.nodes, self.nodes.wallet);
        let drained = chain::wait_pool_drained(&nodes.rpc, wallet).await?;
        let scan = chain::scan(&nodes.rpc, wallet, nodes.token, nodes.first_block).await?;
        let rec = self.check_chain(&reported, &scan, checks).await?;
        // 8. The summary.
        let evm = self.summarize(&reported, &scan, &rec, drained, checks);
        say(format!(
            "run time {:.1}s; files in {}: payoutd.toml, payoutd.db, serve.log",
            started.elapsed().as_secs_f64(),
            self.work.display()
        ));
        let (sol, prov) = self.other_rails(&reported, checks).await?;
        let ok = rec.duplicates() == 0
            && evm.paid == self.to_pay
            && sol.duplicates == 0
            && sol.paid == sol.payouts
            && prov.duplicates == 0
            && prov.paid == prov.payouts
            && checks.failed() == 0;
        if checks.failed() > 0 {
            say(format!("{} check(s) failed (see \"check FAILED\" above)", checks.failed()));
        }
        if !args.exit {
            self.say_where_to_look();
        }
        // One line per rail, then the last line, exactly this shape: scripts read it.
        say(evm.line("evm"));
        say(sol.line("solana"));
        say(prov.line("provider"));
        say(format!(
            "payouts={} paid={} transfers_on_chain={} duplicates={}",
            evm.payouts + sol.payouts + prov.payouts,
            evm.paid + sol.paid + prov.paid,
            evm.transfers_on_chain + sol.transfers_on_chain + prov.transfers_on_chain,
            evm.duplicates + sol.duplicates + prov.duplicates
        ));
        Ok(ok)
    }

    /// Intake: one payout per business event whatever the client did.
    async fn check_intake(
        &self,
        planned: &[(&Planned, &Outcome)],
        run_tag: u32,
        checks: &mut Checks,
    ) -> anyhow::Result<()> {
        let api = &self.service.api;
        let requests: usize = planned.iter().map(|(_, o)| o.requests).sum::<usize>() + 1;
        let created: usize = planned.iter().map(|(_, o)| o.created).sum::<usize>() + 1;
        let replayed: usize = planned.iter().map(|(_, o)| o.replayed).sum();
        let unclean: Vec<String> = planned.iter().filter_map(|(p, o)| o.anomaly(&p.key)).collect();
        let payouts = planned.iter().filter_map(|(_, o)| o.id()).collect::<BTreeSet<_>>().len() + 1;
        checks.add(
            unclean.is_empty() && self.watched.outcomes.len() == self.asked.bulk.len(),
            format!(
                "intake: {requests} POSTs for {} business events -> {payouts} payouts (created={created} replayed={replayed}; client retries through the kill={})",
                planned.len() + 1,
                api.retries()
            ),
        );
        for line in unclean.iter().take(10) {
            say(format!("  intake anomaly: {line}"));
        }
        let probe = self.asked.bulk.len() / 2;
        let probe_id = self.watched.outcomes.get(probe).and_then(Outcome::id);
        edge_checks(api, &self.asked.bulk[probe], probe_id, run_tag, checks).await
    }

    async fn check_webhooks(&self, reported: &Reported<'_>, checks: &mut Checks) {
        let paid_ids: BTreeSet<String> = reported
            .statuses
            .iter()
            .filter(|(_, s)| s.as_str() == "paid")
            .map(|(id, _)| id.clone())
            .collect();
        let webhooks = &self.service.webhooks;
        webhooks.wait_for(&paid_ids).await;
        let report = webhooks.report(&paid_ids);
        checks.add(
            report.ok(),
            format!(
                "every paid payout announced once by a signed payout.paid webhook ({})",
                report.line()
            ),
        );
    }

    /// Transfers on chain matched to payouts; the ledger: nothing held once everything settled,
    /// available = deposit - paid.
    async fn check_chain(
        &self,
        reported: &Reported<'_>,
        scan: &Scan,
        checks: &mut Checks,
    ) -> anyhow::Result<Reconciliation> {
        let review = &self.asked.review;
        let sibling_status =
            reported.statuses.get(&review.sibling_id).map_or("missing", String::as_str);
        let unpaid = |s: &str| matches!(s, "canceled" | "rejected");
        let mut may_pay = reported.signatures_where(|s| !unpaid(s));
        if !unpaid(sibling_status) {
            may_pay.push(review.sibling.signature());
        }
        let paid = reported.signatures_where(|s| s == "paid");
        let rec = chain::reconcile(scan, &may_pay, &paid);
        let mut final_states: Vec<(&Planned, &str)> =
            reported.planned.iter().map(|(p, o)| (*p, reported.status_of(o))).collect();
        final_states.push((&review.sibling, sibling_status));
        ledger_checks(&self.service.api, &final_states, DEPOSITS, checks).await?;
        checks.add(
            rec.paid_without_transfer == 0,
            "every payout payoutd calls paid has its transfer on chain",
        );
        Ok(rec)
    }

    /// The EVM rail's summary lines; its count for the last lines.
    fn summarize(
        &self,
        reported: &Reported<'_>,
        scan: &Scan,
        rec: &Reconciliation,
        drained: bool,
        checks: &mut Checks,
    ) -> RailCount {
        let watched = self.watched;
        let counts = count_by_status(reported.planned.iter().map(|(_, o)| reported.status_of(o)));
        let sibling_status =
            reported.statuses.get(&self.asked.review.sibling_id).map_or("missing", String::as_str);
        say("---- summary ----");
        say(format!("payouts to pay: {}; by status: {}", self.to_pay, format_counts(&counts)));
        say(format!(
            "near-duplicate sibling: {sibling_status}; held payouts approved by the operator CLI: {}",
            watched.approved.len()
        ));
        let not_paid: Vec<String> = reported
            .planned
            .iter()
            .filter(|(_, o)| reported.status_of(o) != "paid")
            .map(|(p, o)| format!("{} ({})", p.key, reported.status_of(o)))
            .take(20)
            .collect();
        if !not_paid.is_empty() {
            let when = if watched.timed_out { " at the deadline" } else { "" };
            say(format!("not paid{when}: {}", not_paid.join(", ")));
        }
        self.say_faults_and_kill(checks);
        let eth_transfers = scan.transfers.iter().filter(|t| t.0 == Coin::Eth).count();
        say(format!(
            "node: blocks {}..={}: {} transfers from the hot wallet ({eth_transfers} ETH, {} USDC), {} reverted, {} other (token deployment, cancels){}",
            scan.first_block,
            scan.last_block,
            rec.transfers_on_chain,
            rec.transfers_on_chain - eth_transfers,
            scan.reverted,
            scan.other,
            if drained { "" } else { "; the wallet still had unmined transactions in the pool" }
        ));
        say(format!(
            "duplicates from the node: {} (second transfers for a payout: {}, transfers matching no payout: {}); paid without a transfer: {}",
            rec.duplicates(),
            rec.extra_for_a_payout,
            rec.matching_no_payout,
            rec.paid_without_transfer
        ));
        RailCount {
            payouts: self.to_pay,
            paid: counts.get("paid").copied().unwrap_or(0),
            transfers_on_chain: rec.transfers_on_chain,
            duplicates: rec.duplicates(),
        }
    }

    fn say_faults_and_kill(&self, checks: &mut Checks) {
        let (log, proxy) = (&self.watched.fault_log, &self.service.proxy);
        let by_label = log.by_label();
        say(format!(
            "faults injected on {} ({} of them): {} | sends seen by the proxy: {} (one per payout, the rest re-sends of stored bytes or fee replacements)",
            faults::SEND_METHOD,
            log.total(),
            by_label.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
            proxy.count(faults::SEND_METHOD)
        ));
        match &self.watched.kill {
            Some(k) => say(format!(
                "kill: SIGKILL of payoutd serve (pid {}) at t={:.1}s with paid={} processing={}; restarted in {} ms on the same SQLite file",
                k.pid, k.at_secs, k.paid, k.processing, k.restart_ms
            )),
            None => say("kill: did not happen (the payouts settled before the trigger)"),
        }
        checks.add(self.watched.kill.is_some(), "payoutd was SIGKILLed and restarted mid-way");
    }

    /// Solana and the providers, each counted from its own side.
    async fn other_rails(
        &self,
        reported: &Reported<'_>,
        checks: &mut Checks,
    ) -> anyhow::Result<(RailCount, RailCount)> {
        let (nodes, asked) = (self.nodes, self.asked);
        let is_paid = |id: &String| reported.statuses.get(id).is_some_and(|s| s == "paid");
        let solana_paid = asked.solana_ids.values().filter(|id| is_paid(id)).count();
        let sol = nodes.solana.rail_count(&asked.solana_plans, solana_paid).await?;
        checks.add(
            sol.transfers_on_chain >= sol.paid,
            "every Solana payout payoutd calls paid has its transfer at finalized",
        );
        say(format!(
            "Solana: {} payouts, {} paid; sendTransaction calls seen by the proxy: {} ({} answers lost after the node took the bytes)",
            sol.payouts,
            sol.paid,
            nodes.solana_proxy.count("sendTransaction"),
            payoutd_demo::solana::LOST_ANSWERS
        ));
        let providers = &nodes.providers;
        let prov = providers.rail_count(&asked.provider_payouts, &reported.statuses);
        checks.add(
            prov.transfers_on_chain >= prov.paid,
            "every provider payout payoutd calls paid has its transfer at its provider",
        );
        checks.add(
            providers.created_in_all() == prov.transfers_on_chain,
            format!("the providers created {} transfers that were not declined, all of them for the run's payouts", providers.created_in_all()),
        );
        let routed = providers.routed(&asked.provider_payouts);
        checks.add(
            routed == payoutd_demo::providers::CIRCLE_DECLINED,
            format!("{routed} Circle payouts whose transfer Circle declined were paid by Coinbase, the route's next rail"),
        );
        let mismatches = self.service.payoutd.launcher().balance_mismatches().await?;
        checks.add(
            mismatches.is_empty(),
            format!("every hot wallet's and provider account's balance is what the ledger says ({} balance_mismatch incidents: {mismatches:?})", mismatches.len()),
        );
        Ok((sol, prov))
    }

    fn say_where_to_look(&self) {
        let (api, service) = (&self.service.api, self.service);
        say(format!(
            "API up on {} (merchant {}, api key {}); try GET /v1/payouts. Ctrl-C to stop.",
            api.base(),
            service.merchant_id,
            service.merchant_key
        ));
        say(format!(
            "dashboard: {}/dashboard (sign in with the operator key {})",
            api.base(),
            service.operator_key
        ));
    }
}
