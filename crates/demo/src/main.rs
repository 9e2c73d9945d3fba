//! payoutd's main job end to end: a real node, the real binary on SQLite, every payout asked for twice or in bursts, lost and slow node answers, a SIGKILL, then the chain itself counted.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clap::Parser;
use payoutd_domain::Amount;
use payoutd_rail_evm::SigningKey;
use payoutd_testkit::{ANVIL_KEY_0, FaultProxy, TEST_TOKEN_DECIMALS, deploy_test_token};
use reqwest::StatusCode;
use serde_json::json;

use payoutd_demo::api::{Api, As};
use payoutd_demo::chain::{self, Coin, Signature};
use payoutd_demo::faults;
use payoutd_demo::intake::{self, Copies, Outcome, Planned};
use payoutd_demo::providers::ProviderSide;
use payoutd_demo::report::{
    Checks, Deposit, RailCount, count_by_status, format_counts, ledger_checks, say,
};
use payoutd_demo::rng::random_bytes;
use payoutd_demo::server::{
    self, ChainSetup, ETH, HOT_WALLET_KEY_ENV, Payoutd, TOKEN_SUPPLY, USDC,
};
use payoutd_demo::solana::SolanaSide;
use payoutd_demo::webhooks::PaidWebhooks;

mod cli;
mod node;
mod scenarios;
use cli::{Args, Signer};
use node::evm_node;
use scenarios::{edge_checks, review_pair};

/// Interval mining: anvil's automine stalls under load (shared/ENVIRONMENT.md).
const BLOCK_TIME_SECS: u64 = 1;
/// Credited to the merchant's ledger: 10 ETH and 1M USDC cover 5,000 payouts of either.
const ETH_DEPOSIT_WEI: u128 = 10_000_000_000_000_000_000;
const USDC_DEPOSIT: u128 = 1_000_000_000_000;
/// Gas for a few thousand transfers at anvil's fees, on top of what the payouts send.
const HOT_WALLET_GAS_MARGIN_WEI: u128 = 1_000_000_000_000_000_000;
const MERCHANT_NAME: &str = "Demo Platform";
/// Every payout must be final within this many seconds of the first submission. A run takes
/// about 90 s, most of it the harness proxy's per-call latency (see the report).
const DEADLINE_SECS: u64 = 180;
/// payoutd is killed once this share of the payouts is paid while others are signed and in
/// flight: mid-way for the pipeline, and (with paced submissions) for intake too.
const KILL_AT_PAID_PERCENT: usize = 12;
const READY_TIMEOUT_SECS: u64 = 30;
/// The near-duplicate twin must leave `requested` within this long (one policy pass).
const REVIEW_WAIT_SECS: u64 = 20;
const POLL_MS: u64 = 300;
const PROGRESS_EVERY_SECS: u64 = 3;
/// Statuses after which the demo stops waiting for a payout (needs_attention waits for a person).
const SETTLED: &[&str] = &["paid", "failed", "needs_attention", "rejected", "canceled"];
const DEPOSITS: &[Deposit<'static>] = &[
    Deposit { asset: ETH, coin: Coin::Eth, amount: ETH_DEPOSIT_WEI },
    Deposit { asset: USDC, coin: Coin::Usdc, amount: USDC_DEPOSIT },
];

/// Solana payouts beside the EVM ones: a tenth of them, at most this many.
const SOLANA_PAYOUTS_MAX: usize = 200;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    payoutd_demo::report::set_prefix("demo");
    let args = Args::parse();
    // SIGINT is the demo's own way to end (Ctrl-C after the summary stops payoutd gracefully, and in a
    // terminal it reaches the children anyway); SIGTERM drops the run, which kills the children.
    payoutd_demo::signals::run_until_stopped(
        "payoutd-demo",
        run(args),
        payoutd_demo::signals::terminated(),
    )
    .await
}

struct KillRecord {
    pid: u32,
    at_secs: f64,
    paid: usize,
    processing: usize,
    restart_ms: u128,
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let started = Instant::now();
    let bin = server::payoutd_bin()?;
    // A fresh SQLite file each run: the database is the state the kill must not corrupt.
    let work = server::fresh_work_dir(".demo")?;
    let run_tag = u32::from_be_bytes(random_bytes()?);
    let mut checks = Checks::default();

    // 1. The node: ours (interval mining) or the one given.
    let (anvil, node_url, rpc, chain_id) = evm_node(args.rpc_url.as_deref()).await?;
    let key = SigningKey::from_hex(ANVIL_KEY_0)?;
    let mut wallet = key.address();
    // Over-counts (only half the payouts are ETH): the check is only against a bare wallet.
    let needed = args.payouts as u128 * (intake::ETH_AMOUNT_BASE_WEI + args.payouts as u128)
        + HOT_WALLET_GAS_MARGIN_WEI;
    let balance = rpc.balance(wallet).await?;
    ensure!(
        balance >= Amount::from_u128(needed),
        "hot wallet {wallet} holds {balance} wei on the node; the demo needs {needed}"
    );
    match &anvil {
        Some(_) => {
            say(format!("anvil on {node_url} (--block-time {BLOCK_TIME_SECS}), chain {chain_id}"))
        }
        None => say(format!("using the node at {node_url}, chain {chain_id}")),
    }

    // 1b. The Solana node (ours or the one given), a hot wallet funded by airdrop, a token minted to it.
    let solana = SolanaSide::start(args.solana_rpc_url.clone()).await?;
    say(format!("solana_hot_wallet={}", solana.hot_wallet()));
    say(format!(
        "Solana node on {} ({}); SPL token {} minted to the hot wallet",
        solana.rpc_url,
        if args.solana_rpc_url.is_some() { "given" } else { "started by the demo" },
        solana.mint
    ));
    let solana_proxy = solana.faulty_proxy().await;
    // 1c. The payment providers: Stripe, Coinbase, Bridge and Circle, simulated over real HTTP.
    let providers = ProviderSide::start().await;

    // 2. The token, deployed by the hot wallet (anvil's first account), which then pays.
    // Transactions of the wallet before this block are not ours to count.
    let first_block = rpc.block_number().await? + 1;
    let token = deploy_test_token(&rpc, &key, Amount::from_u128(TOKEN_SUPPLY))
        .await
        .context("deploy the test token")?;
    say(format!("test ERC-20 deployed at {token} by hot wallet {wallet}"));
    // 2b. With --signer kms, the hot wallet is a KMS key, funded from the deployer, which then only watches.
    let kms = match args.signer {
        Signer::Local => None,
        Signer::Kms => {
            let kms = payoutd_demo::kms::KmsWallet::start().await?;
            kms.fund(
                &rpc,
                &key,
                token,
                Amount::from_u128(needed),
                Amount::from_u128(TOKEN_SUPPLY / 2),
            )
            .await
            .context("fund the KMS wallet")?;
            wallet = kms.address;
            say(format!(
                "hot wallet {wallet} is a key in a local AWS KMS: payoutd signs through KMS and never holds it"
            ));
            Some(kms)
        }
    };
    let wallets_toml = kms.as_ref().map_or_else(
        || server::key_envs_toml(&[HOT_WALLET_KEY_ENV]),
        payoutd_demo::kms::KmsWallet::chain_toml,
    );

    // 3. The proxy, the config, payoutd on SQLite, a merchant with money.
    let proxy = Arc::new(FaultProxy::start(&node_url).await);
    let config = work.join("payoutd.toml");
    let setup = ChainSetup {
        chain_id,
        rpc_url: proxy.url(),
        token,
        eth_code: ETH,
        usdc_code: USDC,
        usdc_decimals: TEST_TOKEN_DECIMALS,
    };
    std::fs::write(
        &config,
        server::config_toml(&setup, &wallets_toml)
            + &solana.config_toml(solana_proxy.url())
            + &providers.config_toml(),
    )?;
    let operator_key = format!("demo-operator-{}", hex::encode(random_bytes::<16>()?));
    let signer_env = match args.signer {
        Signer::Local => vec![(HOT_WALLET_KEY_ENV.to_owned(), ANVIL_KEY_0.to_owned())],
        Signer::Kms => payoutd_demo::kms::KmsWallet::env(),
    };
    let mut env = vec![
        ("PAYOUTD_OPERATOR_KEY".to_owned(), operator_key.clone()),
        solana.key_env(),
        (
            "PAYOUTD_LOG".to_owned(),
            std::env::var("PAYOUTD_LOG").unwrap_or_else(|_| "info".to_owned()),
        ),
    ];
    env.extend(signer_env);
    env.extend(providers.env());
    let mut payoutd = Payoutd::new(bin, &work, config, env);
    let merchant = payoutd.cli(&["merchant", "create", MERCHANT_NAME]).await?;
    let merchant_id = merchant["id"].as_str().context("merchant id")?.to_owned();
    let merchant_key = merchant["api_key"].as_str().context("merchant api_key")?.to_owned();
    let addr = payoutd.start().await?;
    let api =
        Arc::new(Api::new(format!("http://{addr}"), merchant_key.clone(), operator_key.clone())?);
    api.wait_ready(READY_TIMEOUT_SECS).await?;
    let webhooks = PaidWebhooks::register(&api).await?;
    say(format!(
        "payoutd serve (pid {}) on {} with SQLite {}; node calls go through the fault proxy {}; the merchant's webhook receiver {} listens for payout.paid",
        payoutd.pid().unwrap_or(0),
        api.base(),
        work.join("payoutd.db").display(),
        proxy.url(),
        webhooks.url()
    ));
    for (asset, amount, name) in [(ETH, ETH_DEPOSIT_WEI, "eth"), (USDC, USDC_DEPOSIT, "usdc")] {
        let body = json!({"merchant_id": merchant_id, "asset": asset, "amount": amount.to_string(),
            "idempotency_key": format!("demo-funding-{name}-{run_tag:08x}")});
        let first = api.post("/v1/deposits", &body, As::Operator).await?;
        let again = api.post("/v1/deposits", &body, As::Operator).await?;
        checks.add(
            first.status == StatusCode::CREATED && again.status == StatusCode::OK && again.replayed,
            format!(
                "deposit of {amount} {asset} sent twice: {} then {} replayed={}",
                first.status.as_u16(),
                again.status.as_u16(),
                again.replayed
            ),
        );
    }

    // 3b. Solana payouts, each asked for twice, in flight through the kill below.
    let (solana_plans, solana_ids) =
        SolanaSide::submit_share(&api, &merchant_id, run_tag, args.payouts, SOLANA_PAYOUTS_MAX)
            .await?;
    // 3c. Payouts through each provider, each asked for twice, in flight through the kill below.
    let provider_payouts = providers.submit(&api, &merchant_id, run_tag).await?;

    // 4a. A near-duplicate pair: held by policy, one canceled by the merchant, one approved by the operator.
    let review = review_pair(&api, run_tag, &mut checks).await?;
    let (twin, twin_outcome, sibling, sibling_id) =
        (review.twin, review.twin_outcome, review.sibling, review.sibling_id);

    // 4b. The bulk: every request twice, some as bursts of identical concurrent requests.
    let bulk = intake::plan(args.payouts - 1, run_tag, ETH, USDC, 1, intake::BURSTS);
    let bursts = bulk.iter().filter(|p| p.copies == Copies::Burst).count();
    say(format!(
        "submitting {} payouts ({} ETH, {} USDC, each to its own address): each request twice, {bursts} of them as {} identical concurrent requests",
        bulk.len() + 1,
        bulk.iter().filter(|p| p.coin == Coin::Eth).count() + 1,
        bulk.iter().filter(|p| p.coin == Coin::Usdc).count(),
        intake::BURST_SIZE
    ));
    let bulk = Arc::new(bulk);
    let submit_started = Instant::now();
    let mut submission = Some(tokio::spawn(intake::submit_all(
        Arc::clone(&api),
        Arc::clone(&bulk),
        intake::DEMO_PACING,
    )));

    // 5. Faults on the way to the node while everything runs.
    let fault_log = Arc::new(faults::FaultLog::default());
    let stop_faults = Arc::new(AtomicBool::new(false));
    let fault_task = tokio::spawn(faults::run(
        Arc::clone(&proxy),
        Arc::clone(&fault_log),
        Arc::clone(&stop_faults),
    ));

    // 6. Watch: kill once mid-way, approve what policy held, stop when all settled or at the deadline.
    let deadline = submit_started + Duration::from_secs(DEADLINE_SECS);
    let mut outcomes: Option<Vec<Outcome>> = None;
    let mut kill: Option<KillRecord> = None;
    let mut approved: BTreeSet<String> = BTreeSet::new();
    let mut last_progress = Instant::now();
    let mut timed_out = false;
    let to_pay = args.payouts;
    loop {
        if submission.as_ref().is_some_and(|t| t.is_finished()) {
            let done = submission.take().expect("checked").await?;
            say(format!(
                "submissions done in {:.1}s ({} client retries so far)",
                submit_started.elapsed().as_secs_f64(),
                api.retries()
            ));
            outcomes = Some(done);
        }
        let statuses = api.statuses().await?;
        let counts = count_by_status(statuses.values().map(String::as_str));
        let n = |s: &str| counts.get(s).copied().unwrap_or(0);
        let in_flight = n("processing") > 0 || n("paid") >= to_pay / 2;
        if kill.is_none()
            && n("paid") >= to_pay * KILL_AT_PAID_PERCENT / 100
            && in_flight
            && n("paid") < to_pay
        {
            let pid = payoutd.pid().unwrap_or(0);
            let at_secs = started.elapsed().as_secs_f64();
            payoutd.kill().await?;
            say(format!(
                "SIGKILL payoutd (pid {pid}) with paid={} processing={}",
                n("paid"),
                n("processing")
            ));
            let restart = Instant::now();
            payoutd.start().await?;
            api.wait_ready(READY_TIMEOUT_SECS).await?;
            let restart_ms = restart.elapsed().as_millis();
            say(format!(
                "payoutd restarted (pid {}) on the same SQLite file in {restart_ms} ms",
                payoutd.pid().unwrap_or(0)
            ));
            kill = Some(KillRecord {
                pid,
                at_secs,
                paid: n("paid"),
                processing: n("processing"),
                restart_ms,
            });
            continue;
        }
        for (id, status) in &statuses {
            if status == "held_for_review" && !approved.contains(id) {
                // Once per payout: a refusal is reported, not retried (the payout then shows as not paid).
                match payoutd.cli(&["payout", "approve", id]).await {
                    Ok(result) => say(format!(
                        "operator approved held payout {id} with `payoutd payout approve`: now {}",
                        result["status"].as_str().unwrap_or("?")
                    )),
                    Err(e) => say(format!("operator approval of {id} failed: {e:#}")),
                }
                approved.insert(id.clone());
            }
        }
        if last_progress.elapsed() >= Duration::from_secs(PROGRESS_EVERY_SECS) {
            last_progress = Instant::now();
            say(format!(
                "t={:.0}s {} | sends={} faults={} client_retries={}",
                started.elapsed().as_secs_f64(),
                format_counts(&counts),
                proxy.count(faults::SEND_METHOD),
                fault_log.total(),
                api.retries()
            ));
        }
        if let Some(outcomes) = &outcomes {
            let mut ids = outcomes.iter().chain([&twin_outcome]).filter_map(Outcome::id);
            let settled =
                |id: &str| statuses.get(id).is_some_and(|s| SETTLED.contains(&s.as_str()));
            if ids.all(settled)
                && solana_ids.values().all(|id| settled(id))
                && provider_payouts.ids().all(|id| settled(id))
            {
                break;
            }
        }
        if Instant::now() > deadline {
            timed_out = true;
            say(format!("deadline of {DEADLINE_SECS}s reached; reporting what is not paid"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    stop_faults.store(true, Ordering::Relaxed);
    let _ = fault_task.await;
    let outcomes = match (outcomes, submission.take()) {
        (Some(o), _) => o,
        (None, Some(task)) => {
            task.abort();
            Vec::new()
        }
        (None, None) => Vec::new(),
    };

    // Intake: one payout per business event whatever the client did.
    let mut planned: Vec<(&Planned, &Outcome)> = vec![(&twin, &twin_outcome)];
    planned.extend(bulk.iter().zip(outcomes.iter()));
    let requests: usize = planned.iter().map(|(_, o)| o.requests).sum::<usize>() + 1;
    let created: usize = planned.iter().map(|(_, o)| o.created).sum::<usize>() + 1;
    let replayed: usize = planned.iter().map(|(_, o)| o.replayed).sum();
    let unclean: Vec<String> = planned
        .iter()
        .filter(|(_, o)| !o.is_clean())
        .map(|(p, o)| {
            format!(
                "{}: ids={:?} created={} unexpected={:?}",
                p.key, o.ids, o.created, o.unexpected
            )
        })
        .collect();
    checks.add(
        unclean.is_empty() && outcomes.len() == bulk.len(),
        format!(
            "intake: {requests} POSTs for {} business events -> {} payouts (created={created} replayed={replayed}; client retries through the kill={})",
            planned.len() + 1,
            planned.iter().filter_map(|(_, o)| o.id()).collect::<BTreeSet<_>>().len() + 1,
            api.retries()
        ),
    );
    for line in unclean.iter().take(10) {
        say(format!("  intake anomaly: {line}"));
    }
    let probe = bulk.len() / 2;
    edge_checks(
        &api,
        &bulk[probe],
        outcomes.get(probe).and_then(Outcome::id),
        run_tag,
        &mut checks,
    )
    .await?;

    // Final state as payoutd reports it.
    let statuses = api.statuses().await?;
    let paid_ids: BTreeSet<String> =
        statuses.iter().filter(|(_, s)| s.as_str() == "paid").map(|(id, _)| id.clone()).collect();
    webhooks.wait_for(&paid_ids).await;
    let webhook_report = webhooks.report(&paid_ids);
    checks.add(
        webhook_report.ok(),
        format!(
            "every paid payout announced once by a signed payout.paid webhook ({})",
            webhook_report.line()
        ),
    );
    let status_of =
        |o: &Outcome| o.id().and_then(|id| statuses.get(id)).map_or("missing", String::as_str);
    let to_pay_counts = count_by_status(planned.iter().map(|(_, o)| status_of(o)));
    let paid = to_pay_counts.get("paid").copied().unwrap_or(0);
    let not_paid: Vec<String> = planned
        .iter()
        .filter(|(_, o)| status_of(o) != "paid")
        .map(|(p, o)| format!("{} ({})", p.key, status_of(o)))
        .collect();

    // 7. The node's own account of what left the hot wallet.
    let drained = chain::wait_pool_drained(&rpc, wallet).await?;
    let scan = chain::scan(&rpc, wallet, token, first_block).await?;
    let sibling_status = statuses.get(&sibling_id).map_or("missing", String::as_str);
    let mut may_pay: Vec<Signature> = planned
        .iter()
        .filter(|(_, o)| !matches!(status_of(o), "canceled" | "rejected"))
        .map(|(p, _)| p.signature())
        .collect();
    if !matches!(sibling_status, "canceled" | "rejected") {
        may_pay.push(sibling.signature());
    }
    let paid_signatures: Vec<Signature> = planned
        .iter()
        .filter(|(_, o)| status_of(o) == "paid")
        .map(|(p, _)| p.signature())
        .collect();
    let rec = chain::reconcile(&scan, &may_pay, &paid_signatures);

    // The ledger: nothing held once everything settled, available = deposit - paid.
    let mut final_states: Vec<(&Planned, &str)> =
        planned.iter().map(|(p, o)| (*p, status_of(o))).collect();
    final_states.push((&sibling, sibling_status));
    ledger_checks(&api, &final_states, DEPOSITS, &mut checks).await?;

    // 8. The summary.
    say("---- summary ----");
    say(format!("payouts to pay: {to_pay}; by status: {}", format_counts(&to_pay_counts)));
    say(format!(
        "near-duplicate sibling: {sibling_status}; held payouts approved by the operator CLI: {}",
        approved.len()
    ));
    if !not_paid.is_empty() {
        say(format!(
            "not paid{}: {}",
            if timed_out { " at the deadline" } else { "" },
            not_paid.iter().take(20).cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    let by_label = fault_log.by_label();
    say(format!(
        "faults injected on {} ({} of them): {} | sends seen by the proxy: {} (one per payout, the rest re-sends of stored bytes or fee replacements)",
        faults::SEND_METHOD,
        fault_log.total(),
        by_label.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
        proxy.count(faults::SEND_METHOD)
    ));
    match &kill {
        Some(k) => say(format!(
            "kill: SIGKILL of payoutd serve (pid {}) at t={:.1}s with paid={} processing={}; restarted in {} ms on the same SQLite file",
            k.pid, k.at_secs, k.paid, k.processing, k.restart_ms
        )),
        None => say("kill: did not happen (the payouts settled before the trigger)"),
    }
    checks.add(kill.is_some(), "payoutd was SIGKILLed and restarted mid-way");
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
    checks.add(
        rec.paid_without_transfer == 0,
        "every payout payoutd calls paid has its transfer on chain",
    );
    say(format!(
        "run time {:.1}s; files in {}: payoutd.toml, payoutd.db, serve.log",
        started.elapsed().as_secs_f64(),
        work.display()
    ));
    let solana_paid =
        solana_ids.values().filter(|id| statuses.get(*id).is_some_and(|s| s == "paid")).count();
    let sol = solana.rail_count(&solana_plans, solana_paid).await?;
    checks.add(
        sol.transfers_on_chain >= sol.paid,
        "every Solana payout payoutd calls paid has its transfer at finalized",
    );
    say(format!(
        "Solana: {} payouts, {} paid; sendTransaction calls seen by the proxy: {} ({} answers lost after the node took the bytes)",
        sol.payouts,
        sol.paid,
        solana_proxy.count("sendTransaction"),
        payoutd_demo::solana::LOST_ANSWERS
    ));
    let prov = providers.rail_count(&provider_payouts, &statuses);
    checks.add(
        prov.transfers_on_chain >= prov.paid,
        "every provider payout payoutd calls paid has its transfer at its provider",
    );
    checks.add(
        providers.created_in_all() == prov.transfers_on_chain,
        format!("the providers created {} transfers that were not declined, all of them for the run's payouts", providers.created_in_all()),
    );
    let routed = providers.routed(&provider_payouts);
    checks.add(
        routed == payoutd_demo::providers::CIRCLE_DECLINED,
        format!("{routed} Circle payouts whose transfer Circle declined were paid by Coinbase, the route's next rail"),
    );
    let mismatches = payoutd.launcher().balance_mismatches().await?;
    checks.add(
        mismatches.is_empty(),
        format!("every hot wallet's and provider account's balance is what the ledger says ({} balance_mismatch incidents: {mismatches:?})", mismatches.len()),
    );
    let ok = rec.duplicates() == 0
        && paid == to_pay
        && sol.duplicates == 0
        && sol.paid == sol.payouts
        && prov.duplicates == 0
        && prov.paid == prov.payouts
        && checks.failed() == 0;
    if checks.failed() > 0 {
        say(format!("{} check(s) failed (see \"check FAILED\" above)", checks.failed()));
    }
    if !args.exit {
        say(format!(
            "API up on {} (merchant {merchant_id}, api key {merchant_key}); try GET /v1/payouts. Ctrl-C to stop.",
            api.base()
        ));
        say(format!(
            "dashboard: {}/dashboard (sign in with the operator key {operator_key})",
            api.base()
        ));
    }
    // One line per rail, then the last line, exactly this shape: scripts read it.
    say(RailCount {
        payouts: to_pay,
        paid,
        transfers_on_chain: rec.transfers_on_chain,
        duplicates: rec.duplicates(),
    }
    .line("evm"));
    say(sol.line("solana"));
    say(prov.line("provider"));
    say(format!(
        "payouts={} paid={} transfers_on_chain={} duplicates={}",
        to_pay + sol.payouts + prov.payouts,
        paid + sol.paid + prov.paid,
        rec.transfers_on_chain + sol.transfers_on_chain + prov.transfers_on_chain,
        rec.duplicates() + sol.duplicates + prov.duplicates
    ));

    if !args.exit {
        let _ = tokio::signal::ctrl_c().await;
    }
    // Ctrl-C in a terminal has reached payoutd too; SIGTERM then is harmless, and needed otherwise.
    payoutd.stop().await;
    drop(proxy);
    drop(anvil);
    drop(solana_proxy);
    drop(solana);
    Ok(ok)
}
