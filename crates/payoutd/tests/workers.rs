//! Four `payoutd worker` processes on one PostgreSQL paying 500 payouts from two hot wallets, one of them SIGKILLed mid-way.

use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, AssetRegistry, DepositKey, Destination, EvmAddress, Metadata, PayoutKey,
    PayoutRequest, PayoutStatus,
};
use payoutd_engine::{Engine, SystemClock};
use payoutd_rail_evm::SigningKey;
use payoutd_testkit::db::fresh_postgres;
use payoutd_testkit::{ANVIL_KEY_1, ANVIL_KEY_2, Anvil, AnvilOptions};

const PAYOUTS: u32 = 500;
const WORKERS: usize = 4;
/// The whole run must finish within this; a stall is a failure, not a wait.
const DEADLINE_SECS: u64 = 240;

fn worker(config: &std::path::Path, database_url: &str) -> Child {
    worker_command(config, database_url).spawn().expect("start payoutd worker")
}

/// A worker serving its metrics at `metrics_listen`.
fn worker_with_metrics(
    config: &std::path::Path,
    database_url: &str,
    metrics_listen: &str,
) -> Child {
    let mut command = worker_command(config, database_url);
    command.env("PAYOUTD_METRICS_LISTEN", metrics_listen);
    command.spawn().expect("start payoutd worker")
}

fn worker_command(config: &std::path::Path, database_url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_payoutd"));
    command
        .arg("worker")
        .env("PAYOUTD_CONFIG", config)
        .env("PAYOUTD_DATABASE_URL", database_url)
        .env("PAYOUTD_KEY_A", ANVIL_KEY_1)
        .env("PAYOUTD_KEY_B", ANVIL_KEY_2)
        .env("PAYOUTD_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    command
}

fn recipient(i: u32) -> EvmAddress {
    let mut bytes = [0u8; 20];
    bytes[0] = 0xAB;
    bytes[16..].copy_from_slice(&(i + 1).to_be_bytes());
    EvmAddress::from_bytes(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn four_workers_two_wallets_500_payouts_one_killed_no_duplicates_contiguous_nonces() {
    let db = fresh_postgres().await;
    // Interval mining: anvil's automine stalls under load (its blocks stop coming while requests queue).
    let anvil = Anvil::start(AnvilOptions::block_time_secs(1));
    let dir =
        std::env::temp_dir().join(format!("payoutd-workers-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("payoutd.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[[chains]]
chain_id = 31337
rpc_url = "{}"
finality_confirmations = 1
hot_wallet_key_envs = ["PAYOUTD_KEY_A", "PAYOUTD_KEY_B"]

[pipeline]
rebroadcast_after_ms = 4000
sign_batch_max = 64
idle_sleep_ms = 100
"#,
            anvil.url()
        ),
    )
    .unwrap();

    let assets =
        AssetRegistry::new(vec![Asset::new("evm:31337/ETH", 18, TokenKind::Native).unwrap()])
            .unwrap();
    let eth = assets.get("evm:31337/ETH").unwrap().code.clone();
    let engine = Engine::new(db.store(), Arc::new(SystemClock), assets);
    let (merchant, _) = engine.create_merchant("load", [3u8; 32]).await.unwrap();
    engine
        .deposit(
            &merchant,
            &eth,
            Amount::from_u128(10u128.pow(21)),
            DepositKey::parse("fund").unwrap(),
        )
        .await
        .unwrap();
    let mut expected: HashMap<EvmAddress, Amount> = HashMap::new();
    for i in 0..PAYOUTS {
        let amount = Amount::from_u128(1_000_000 + u128::from(i));
        let req = PayoutRequest::new(
            PayoutKey::parse(&format!("load-payout-{i:05}")).unwrap(),
            eth.clone(),
            amount,
            Destination::Evm(recipient(i)),
            Metadata::empty(),
        );
        engine.create_payout(&merchant, req).await.unwrap();
        expected.insert(recipient(i), amount);
    }

    let metrics_at =
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    // The first worker serves its metrics; the second is the one killed.
    let mut workers: Vec<Child> = vec![worker_with_metrics(&config, db.url(), &metrics_at)];
    workers.extend((1..WORKERS).map(|_| worker(&config, db.url())));
    let started = Instant::now();
    let mut killed = false;
    let count = |status: &'static str| {
        let sql = format!("SELECT count(*) FROM payouts WHERE status = '{status}'");
        let db = &db;
        async move { db.scalar_raw(&sql).await }
    };
    loop {
        let paid = count("paid").await;
        let processing = count("processing").await;
        if !killed && paid + processing >= i64::from(PAYOUTS) / 5 {
            // SIGKILL in the middle of the work, then a replacement process, as a supervisor would.
            workers[1].kill().unwrap();
            workers[1].wait().unwrap();
            workers[1] = worker(&config, db.url());
            killed = true;
        }
        if paid == i64::from(PAYOUTS) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(DEADLINE_SECS),
            "stalled: {paid} paid, {processing} processing"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(killed, "the kill happened mid-way");
    // Each RPC endpoint's lag behind the chain's highest head, per endpoint, in the metrics.
    let metrics =
        reqwest::get(format!("http://{metrics_at}/metrics")).await.unwrap().text().await.unwrap();
    let lag = metrics.lines().find(|l| l.starts_with("payoutd_rpc_endpoint_lag_blocks{"));
    let lag = lag.unwrap_or_else(|| panic!("no endpoint lag in the metrics: {metrics}"));
    assert!(lag.contains(r#"network="evm:31337""#) && lag.contains(r#"endpoint="0""#), "{lag}");
    for w in &mut workers {
        w.kill().unwrap();
        w.wait().unwrap();
    }
    assert_eq!(count("needs_attention").await, 0);

    // Count from the node alone: every transaction out of either hot wallet.
    let head = anvil.rpc().block_number().await.unwrap();
    let mut per_wallet_nonces: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut landed: HashMap<EvmAddress, Vec<Amount>> = HashMap::new();
    for key in [ANVIL_KEY_1, ANVIL_KEY_2] {
        let address = SigningKey::from_hex(key).unwrap().address();
        let mut from = 0;
        while from <= head {
            let scan = anvil.rpc().outgoing_transactions(address, from, head).await.unwrap();
            for tx in scan.transactions {
                assert!(tx.status_ok, "no reverted payouts");
                per_wallet_nonces.entry(address.to_string()).or_default().push(tx.nonce);
                landed.entry(tx.to.expect("a transfer")).or_default().push(tx.value);
            }
            from = scan.next_block;
        }
    }
    let transfers: usize = landed.values().map(Vec::len).sum();
    assert_eq!(transfers, PAYOUTS as usize, "exactly one transfer per payout");
    for (to, amounts) in &landed {
        assert_eq!(amounts.len(), 1, "duplicate transfer to {to}");
        assert_eq!(Some(&amounts[0]), expected.get(to), "amount to {to}");
    }
    assert_eq!(per_wallet_nonces.len(), 2, "both hot wallets paid");
    for (wallet, mut nonces) in per_wallet_nonces {
        nonces.sort();
        let contiguous: Vec<u64> = (nonces[0]..nonces[0] + nonces.len() as u64).collect();
        assert_eq!(nonces, contiguous, "nonces of {wallet} are contiguous");
    }
    let audit = engine.store().audit_ledger().await.unwrap();
    assert!(audit.is_clean(), "{audit:?}");
    assert_eq!(
        db.scalar_raw("SELECT count(*) FROM attempts").await,
        i64::from(PAYOUTS),
        "one attempt per payout"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = PayoutStatus::Paid;
}
