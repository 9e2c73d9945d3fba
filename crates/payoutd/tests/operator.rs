//! Operator actions over real HTTP with the pipeline wired in (approve, cancel after signing, attempts, incidents), and the Redis send guard.

use std::sync::Arc;

use crate::support::{ETH, RECIPIENTS, USDC, World};
use payoutd::redis_guard::RedisGuard;
use payoutd_api::AppState;
use payoutd_domain::{ApiKey, PayoutStatus};
use payoutd_engine::{PipelineConfig, Verdict};
use payoutd_testkit::AnvilOptions;
use payoutd_testkit::EvmAttemptExt;
use payoutd_testkit::TestDb;
use payoutd_testkit::{Fault, FaultProxy, FaultRule};
use serde_json::Value;

const OPERATOR_KEY: &str = "operator-key-for-tests-0123456789";
const REDIS_URL: &str = "redis://127.0.0.1:6379";

async fn serve(
    w: &World,
    pipeline: payoutd_engine::Pipeline,
) -> (String, Arc<payoutd_engine::Pipeline>) {
    let pipeline = Arc::new(pipeline);
    let mut state = AppState::new(w.engine.clone(), Some(&ApiKey::presented(OPERATOR_KEY)));
    state.pipeline = Some(pipeline.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        payoutd_api::serve(listener, state, std::future::pending()).await.unwrap()
    });
    (base, pipeline)
}

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn operator_approves_cancels_after_signing_and_reads_attempts_over_http(db: TestDb) {
    let w = World::new(
        db,
        AnvilOptions::no_mining(),
        PipelineConfig {
            rebroadcast_after_ms: 0,
            balance_check_interval_ms: 0,
            ..PipelineConfig::default()
        },
    )
    .await;
    let (base, p) = serve(&w, w.pipeline().await).await;
    let http = reqwest::Client::new();
    let a = w.request("op-payout-0001", ETH, 111, RECIPIENTS[0]).await;
    let b = w.request("op-payout-0002", ETH, 111, RECIPIENTS[0]).await; // near-duplicate of a: both held
    p.policy_pass().await.unwrap();
    assert_eq!(w.payout(&a).await.status, PayoutStatus::HeldForReview);
    // A merchant key cannot approve.
    let (merchant_key, _) = (w.engine.create_merchant("other", [4u8; 32]).await.unwrap().1, ());
    let denied = http
        .post(format!("{base}/v1/payouts/{}/approve", a.id))
        .bearer_auth(merchant_key.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), 401);
    let ok = http
        .post(format!("{base}/v1/payouts/{}/approve", a.id))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.json::<Value>().await.unwrap()["status"], "approved");
    let again = http
        .post(format!("{base}/v1/payouts/{}/approve", a.id))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409, "approving twice is a state conflict, not a second approval");
    let rejected = http
        .post(format!("{base}/v1/payouts/{}/reject", b.id))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(rejected.json::<Value>().await.unwrap()["status"], "rejected");
    p.sign_pass().await.unwrap();
    assert_eq!(w.payout(&a).await.status, PayoutStatus::Processing);
    // Signed: the operator's cancel sends a zero-value self-send at the same nonce (202), stored first.
    let cancel = http
        .post(format!("{base}/v1/payouts/{}/cancel", a.id))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 202);
    let attempts: Value = http
        .get(format!("{base}/v1/payouts/{}/attempts", a.id))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let txs = attempts["data"][0]["transactions"].as_array().unwrap();
    assert_eq!(
        txs.iter().map(|t| t["kind"].as_str().unwrap()).collect::<Vec<_>>(),
        vec!["original", "cancel"]
    );
    w.anvil.mine(1).await.unwrap();
    w.tick_until(&p, async || w.payout(&a).await.status == PayoutStatus::Failed).await;
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[0]).await, 0);
    let incidents: Value = http
        .get(format!("{base}/v1/incidents"))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(incidents["data"].as_array().unwrap().len(), 0);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
}

/// SPEC 4 step 3: the database "forgets" a committed, sent attempt (failover that lost the last
/// commits); with the Redis guard on, the payout is not signed again but held for a person.
/// Simulates a failover that lost the last commits: the attempt, its bytes and the nonce advance
/// vanish from the database, and the payout reads `approved` again.
async fn forget_the_attempt(w: &World, payout: &payoutd_domain::Payout) -> payoutd_domain::Attempt {
    let attempt = w.store.attempts_of(&payout.id).await.unwrap()[0].clone();
    w.db.exec_raw(&format!("DELETE FROM attempt_transactions WHERE attempt_id = '{}'", attempt.id))
        .await
        .unwrap();
    w.db.exec_raw(&format!("DELETE FROM attempts WHERE id = '{}'", attempt.id)).await.unwrap();
    w.db.exec_raw(&format!("UPDATE payouts SET status = 'approved' WHERE id = '{}'", payout.id))
        .await
        .unwrap();
    w.db.exec_raw(&format!(
        "UPDATE hot_wallets SET next_nonce = {} WHERE id = '{}'",
        attempt.nonce(),
        w.wallet.id
    ))
    .await
    .unwrap();
    attempt
}

async fn guarded_pipeline(w: &World) -> payoutd_engine::Pipeline {
    guarded_pipeline_via(w, w.anvil.url()).await
}

async fn guarded_pipeline_via(w: &World, rpc_url: &str) -> payoutd_engine::Pipeline {
    let guard = RedisGuard::connect(REDIS_URL)
        .await
        .expect("Redis is required for this test (scripts/test starts it)");
    w.pipeline_via(rpc_url).await.with_guard(Arc::new(guard))
}

/// A signing pass whose wallet reads come from an endpoint whose pool lacks the lost transaction
/// (a load-balanced node behind the others, answering the counter the database went back to):
/// the records look whole on the chain's side, and only the send guard knows the attempt.
async fn sign_pass_unaware_of_the_pool(
    proxy: &FaultProxy,
    p: &payoutd_engine::Pipeline,
) -> payoutd_engine::TickReport {
    proxy.set_rule(FaultRule::method(
        "eth_getTransactionCount",
        Fault::Answer { result: "\"0x1\"" },
    ));
    let report = p.sign_pass().await.unwrap();
    proxy.clear();
    report
}

/// The guard remembers an attempt the database lost and its transaction landed: the payout is not
/// signed again, cannot be released by anyone (merchant cancel, reject, "failed", "retry"), and is
/// settled as paid by a person.
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn send_guard_stops_a_second_signing_after_the_database_forgot_the_first(db: TestDb) {
    let w = World::new(
        db,
        AnvilOptions::no_mining(),
        PipelineConfig {
            rebroadcast_after_ms: 0,
            balance_check_interval_ms: 0,
            ..PipelineConfig::default()
        },
    )
    .await;
    let proxy = FaultProxy::start(w.anvil.url()).await;
    let p = guarded_pipeline_via(&w, proxy.url()).await;
    // The wallet's opening balance is booked before anything is paid, so later checks compare.
    w.anvil.mine(2).await.unwrap();
    p.balance_check_pass().await.unwrap();
    let payout = w
        .request(&format!("guarded-{}", uuid::Uuid::new_v4().simple()), ETH, 4_242, RECIPIENTS[1])
        .await;
    p.policy_pass().await.unwrap();
    let report = p.sign_pass().await.unwrap();
    assert_eq!((report.signed, report.sent), (1, 1));
    assert_eq!(forget_the_attempt(&w, &payout).await.nonce(), 1, "after the token's deployment");
    let report = sign_pass_unaware_of_the_pool(&proxy, &p).await;
    assert_eq!(
        (report.signed, report.needs_attention),
        (0, 1),
        "not signed again: a person must look"
    );
    assert_eq!(w.payout(&payout).await.status, PayoutStatus::NeedsAttention);
    let incidents = w.store.open_incidents(10).await.unwrap();
    assert_eq!(incidents.iter().map(|i| i.kind.as_str()).collect::<Vec<_>>(), vec!["lost_attempt"]);
    w.anvil.mine(1).await.unwrap();
    assert_eq!(
        w.transfers_to(ETH, RECIPIENTS[1]).await,
        1,
        "the first transfer landed, and only it"
    );

    // Nobody can release the hold while that transaction has landed.
    let cancel = w.engine.cancel_payout(&w.merchant, &payout.id).await;
    assert!(
        matches!(
            cancel,
            Err(payoutd_engine::IntakeError::NotCancelable(PayoutStatus::NeedsAttention))
        ),
        "{cancel:?}"
    );
    assert!(matches!(
        p.reject(&payout.id).await,
        Err(payoutd_engine::PipelineError::WrongState(_))
    ));
    for verdict in [Verdict::Failed, Verdict::Retry] {
        match p.resolve_needs_attention(&payout.id, verdict, "looked at the chain").await {
            Err(payoutd_engine::PipelineError::Refused(why)) => {
                assert!(why.contains("succeeded"), "{why}")
            }
            other => panic!(
                "{verdict:?} must be refused when the remembered transaction landed: {other:?}"
            ),
        }
    }
    let paid = p
        .resolve_needs_attention(&payout.id, Verdict::Paid, "the remembered transaction landed")
        .await
        .unwrap();
    assert_eq!(paid.status, PayoutStatus::Paid);
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[1]).await, 1);
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    // The verdict booked the payout and its fee out of the hot wallet: the wallet is explained.
    // (Before, a plain settle left the wallet short by both, a balance_mismatch for ever.)
    w.anvil.mine(2).await.unwrap();
    p.balance_check_pass().await.unwrap();
    let incidents = w.store.open_incidents(10).await.unwrap();
    let kinds: Vec<&str> = incidents.iter().map(|i| i.kind.as_str()).collect();
    assert_eq!(kinds, vec!["lost_attempt"], "no balance_mismatch");
}

/// The guard remembers an attempt the database lost, and the chain proves it can never land (a
/// final block used its nonce without it): a person's "retry" signs attempt 2 under the same hold,
/// which the guard lets out, and the payout is paid once.
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn a_lost_attempt_proven_dead_is_retried_and_paid_once(db: TestDb) {
    let metrics = payoutd_api::metrics_handle();
    let w = World::new(
        db,
        AnvilOptions::no_mining(),
        PipelineConfig {
            rebroadcast_after_ms: 0,
            balance_check_interval_ms: 0,
            ..PipelineConfig::default()
        },
    )
    .await;
    let p = guarded_pipeline(&w).await;
    let payout = w
        .request(&format!("guarded-{}", uuid::Uuid::new_v4().simple()), ETH, 4_343, RECIPIENTS[2])
        .await;
    p.policy_pass().await.unwrap();
    p.sign_pass().await.unwrap();
    let lost = forget_the_attempt(&w, &payout).await;
    assert!(
        w.anvil.drop_transaction(lost.txs[0].hash.as_str().parse().unwrap()).await.unwrap(),
        "the node forgets it too"
    );
    p.sign_pass().await.unwrap();
    assert_eq!(w.payout(&payout).await.status, PayoutStatus::NeedsAttention);
    match p.resolve_needs_attention(&payout.id, Verdict::Retry, "the transaction is gone").await {
        Err(payoutd_engine::PipelineError::Refused(why)) => assert!(why.contains("final"), "{why}"),
        other => {
            panic!("its nonce is still free, so the bytes may still land somewhere: {other:?}")
        }
    }
    // Someone uses that nonce (here: a self-send by the key holder); once final, the lost bytes can never land.
    let rpc = w.anvil.rpc();
    let params = payoutd_rail_evm::TxParams {
        chain_id: 31337,
        nonce: lost.nonce(),
        fees: rpc.suggest_fees().await.unwrap(),
        gas_limit: 21_000,
    };
    let filler = payoutd_rail_evm::sign_native_transfer(
        &w.key,
        &params,
        w.key.address(),
        payoutd_domain::Amount::ZERO,
    )
    .unwrap();
    rpc.send_raw(&filler.raw).await.unwrap();
    w.anvil.mine(1).await.unwrap();
    let retried = p
        .resolve_needs_attention(&payout.id, Verdict::Retry, "nonce used by a self-send")
        .await
        .unwrap();
    assert_eq!(retried.status, PayoutStatus::Processing);
    for _ in 0..20 {
        p.tick().await.unwrap();
        w.anvil.mine(1).await.unwrap();
        if w.payout(&payout).await.status == PayoutStatus::Paid {
            break;
        }
    }
    assert_eq!(w.payout(&payout).await.status, PayoutStatus::Paid);
    let attempts = w.store.attempts_of(&payout.id).await.unwrap();
    assert_eq!(
        attempts.iter().map(|a| a.attempt_no).collect::<Vec<_>>(),
        vec![2],
        "attempt 2: attempt 1 is the one the database lost"
    );
    assert_eq!(w.transfers_to(ETH, RECIPIENTS[2]).await, 1, "paid once");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    let metrics = metrics.render();
    assert!(
        metrics.contains("payoutd_attempt_seconds_count"),
        "a confirmed attempt's time is measured: {metrics}"
    );
}

/// The attempt the database lost was mined and reverted (the hot wallet held too few tokens): a
/// person's `failed` rests on that final revert, the hold is released, and the verdict books the
/// gas the reverted transaction cost, so the balance check finds the wallet explained. (Before,
/// the fee of a lost transaction was booked by no one: a `balance_mismatch` for ever.)
async fn a_lost_attempt_that_reverted_is_failed_with_its_fee_booked(db: TestDb) {
    let w = World::new(
        db,
        AnvilOptions::no_mining(),
        PipelineConfig {
            rebroadcast_after_ms: 0,
            balance_check_interval_ms: 0,
            ..PipelineConfig::default()
        },
    )
    .await;
    let proxy = FaultProxy::start(w.anvil.url()).await;
    let p = guarded_pipeline_via(&w, proxy.url()).await;
    w.anvil.mine(2).await.unwrap();
    p.balance_check_pass().await.unwrap();
    // The hot wallet holds 10^15 token units (the test token's supply): this transfer reverts.
    let payout = w
        .request(
            &format!("guarded-{}", uuid::Uuid::new_v4().simple()),
            USDC,
            2 * 10u128.pow(15),
            RECIPIENTS[0],
        )
        .await;
    p.policy_pass().await.unwrap();
    assert_eq!(p.sign_pass().await.unwrap().sent, 1);
    assert_eq!(forget_the_attempt(&w, &payout).await.nonce(), 1, "after the token's deployment");
    assert_eq!(sign_pass_unaware_of_the_pool(&proxy, &p).await.needs_attention, 1);
    w.anvil.mine(3).await.unwrap();
    let failed = p
        .resolve_needs_attention(&payout.id, Verdict::Failed, "the transfer reverted on chain")
        .await
        .unwrap();
    assert_eq!(failed.status, PayoutStatus::Failed);
    assert_eq!(w.transfers_to(USDC, RECIPIENTS[0]).await, 0, "nothing reached the recipient");
    assert!(w.store.audit_ledger().await.unwrap().is_clean());
    w.anvil.mine(2).await.unwrap();
    p.balance_check_pass().await.unwrap();
    let kinds: Vec<String> = w
        .store
        .open_incidents(10)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.kind.as_str().to_owned())
        .collect();
    assert_eq!(
        kinds,
        vec!["lost_attempt".to_owned()],
        "no balance_mismatch: the reverted transaction's gas is booked"
    );
}

payoutd_testkit::both_stores!(
    a_lost_attempt_that_reverted_is_failed_with_its_fee_booked,
    operator_approves_cancels_after_signing_and_reads_attempts_over_http,
    send_guard_stops_a_second_signing_after_the_database_forgot_the_first,
    a_lost_attempt_proven_dead_is_retried_and_paid_once,
);
