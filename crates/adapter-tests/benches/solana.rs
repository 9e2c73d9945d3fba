//! Solana benchmark: the local node's own rate for pre-signed transfers, then payoutd's approved->sent and approved->finalized, for SOL and for an SPL token, in the same run on the same kind of node.

// Run: `cargo bench -p payoutd-adapter-tests --bench solana`. Environment overrides (optional):
// `BENCH_PAYOUTS` (default 500), `BENCH_SLOT_TIME_MS` (default 400, mainnet's), `BENCH_STORE`
// (`sqlite`, the default, or `postgres` on `PAYOUTD_TEST_PG_URL`), `BENCH_TOKENS` (`sol,spl`, the
// default, or either alone).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{
    Amount, Asset, AssetRegistry, ChainReference, DepositKey, Destination, Metadata, PayoutKey,
    PayoutRequest, PayoutStatus, SecretUrl, SolanaAddress,
};
use payoutd_engine::{Engine, Pipeline, PipelineConfig, StandaloneLine, SystemClock};
use payoutd_rail_solana::{
    PaidAt, SolanaClusterConfig, SolanaKey, SolanaRail, SolanaRpc, SolanaToken, Transfer,
    sign_transfer,
};
use payoutd_testkit::db::{TestDb, fresh_postgres, fresh_sqlite};
use payoutd_testkit::{SolanaNode, airdrop, mint_test_token};
use solana_commitment_config::CommitmentConfig;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;

const PAYOUTS_DEFAULT: usize = 500;
const SLOT_TIME_MS_DEFAULT: u64 = 400;
const SOL: &str = "solana:localnet/SOL";
const USD: &str = "solana:localnet/USD";
const USD_DECIMALS: u8 = 6;
/// The hot wallet's token supply: far more than the payouts sum to.
const USD_SUPPLY_BASE_UNITS: u64 = 1_000_000_000_000_000;
/// Each transfer sends this plus its index in base units (lamports: above the rent-exempt minimum
/// of a new account).
const AMOUNT_BASE_UNITS: u64 = 1_000_000;
/// Sends in flight in the raw phase.
const RAW_IN_FLIGHT: usize = 32;
/// Status reads per call while waiting in the raw phase.
const STATUSES_PER_CALL: usize = 256;
const POLL_MS: u64 = 200;
/// How often the monitor counts sent and paid payouts.
const MONITOR_POLL_MS: u64 = 20;
/// Attempts the node took (past `signed`): the payout is sent.
const COUNT_SENT: &str = "SELECT COUNT(*) FROM attempts WHERE status <> 'signed'";
/// A phase that takes longer than this has found a bug, not a slow machine.
const PHASE_TIMEOUT_SECS: u64 = 600;

/// What a round pays: SOL, or an SPL token minted by the hot wallet (each new recipient's token
/// account created by the transfer itself, as payoutd sends it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Sol,
    Spl,
}

impl Token {
    /// The round's transfer token, minting the SPL token to `key` first.
    async fn funded(self, rpc: &SolanaRpc, key: &SolanaKey) -> SolanaToken {
        airdrop(rpc, &key.pubkey(), 1_000_000_000_000).await;
        match self {
            Token::Sol => SolanaToken::Sol,
            Token::Spl => SolanaToken::Spl {
                mint: mint_test_token(rpc, key, USD_SUPPLY_BASE_UNITS, USD_DECIMALS).await,
                decimals: USD_DECIMALS,
            },
        }
    }

    fn asset(token: SolanaToken) -> Asset {
        match token {
            SolanaToken::Sol => Asset::new(SOL, 9, TokenKind::Native).unwrap(),
            SolanaToken::Spl { mint, decimals } => Asset::new(
                USD,
                decimals,
                TokenKind::Spl(SolanaAddress::parse(&mint.to_string()).unwrap()),
            )
            .unwrap(),
        }
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rate(n: usize, secs: f64) -> f64 {
    n as f64 / secs.max(1e-9)
}

/// Seconds until every signature reaches `commitment`, polling in batches.
async fn wait_all(
    rpc: &SolanaRpc,
    signatures: &[Signature],
    commitment: CommitmentConfig,
    started: Instant,
) -> f64 {
    let deadline = started + Duration::from_secs(PHASE_TIMEOUT_SECS);
    let mut pending: Vec<Signature> = signatures.to_vec();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for chunk in pending.chunks(STATUSES_PER_CALL) {
            let statuses = rpc.statuses(chunk).await.expect("statuses");
            for (sig, status) in chunk.iter().zip(statuses) {
                if !status.is_some_and(|s| s.satisfies_commitment(commitment)) {
                    still.push(*sig);
                }
            }
        }
        pending = still;
        assert!(
            Instant::now() < deadline,
            "{} transfers not at {commitment:?} in time",
            pending.len()
        );
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
    }
    started.elapsed().as_secs_f64()
}

/// The node's ceiling: `n` transfers signed up front, sent `RAW_IN_FLIGHT` at a time.
async fn raw_phase(node: &SolanaNode, token: Token, n: usize) -> (f64, f64, f64) {
    let rpc = SolanaRpc::new(&SecretUrl::new(node.url().to_owned()));
    let key = SolanaKey::generate();
    let token = token.funded(&rpc, &key).await;
    let (blockhash, _) = rpc.latest_blockhash().await.unwrap();
    let signed: Vec<_> = (0..n)
        .map(|i| {
            let t = Transfer {
                token,
                destination: Pubkey::new_unique(),
                amount_base_units: AMOUNT_BASE_UNITS + i as u64,
                compute_unit_price_micro_lamports: 0,
                reference: ChainReference::parse_hex(&format!("{i:032x}")).unwrap(),
            };
            sign_transfer(&key, &t, blockhash).unwrap()
        })
        .collect();
    let started = Instant::now();
    let sent: Vec<_> = futures::stream::iter(signed.iter().map(|s| rpc.send_raw(&s.raw)))
        .buffer_unordered(RAW_IN_FLIGHT)
        .collect()
        .await;
    let send_secs = started.elapsed().as_secs_f64();
    assert!(sent.iter().all(Result::is_ok), "the node refused a pre-signed transfer");
    let signatures: Vec<Signature> = signed.iter().map(|s| s.signature).collect();
    let confirmed_secs = wait_all(&rpc, &signatures, CommitmentConfig::confirmed(), started).await;
    let finalized_secs = wait_all(&rpc, &signatures, CommitmentConfig::finalized(), started).await;
    (send_secs, confirmed_secs, finalized_secs)
}

/// payoutd's phase: `n` approved payouts through one pipeline; seconds until every one is sent
/// (broadcast) and until every one is paid (finalized).
#[allow(clippy::too_many_lines)]
// the benchmark's phases in the order it prints them.
async fn payoutd_phase(node: &SolanaNode, db: &TestDb, token: Token, n: usize) -> (f64, f64) {
    let store = db.pipeline();
    let rpc = SolanaRpc::new(&SecretUrl::new(node.url().to_owned()));
    let key = SolanaKey::generate();
    let asset = Token::asset(token.funded(&rpc, &key).await);
    let wallet_id =
        store.ensure_signing_wallet("solana:localnet", &key.pubkey().to_string()).await.unwrap();
    let cluster = SolanaClusterConfig {
        cluster: "localnet".into(),
        rpc_urls: vec![SecretUrl::new(node.url().to_owned())],
        paid_at: PaidAt::Finalized,
        compute_unit_price_cap_micro_lamports: 0,
        durable_nonce: None,
    };
    let rail =
        Arc::new(SolanaRail::new(cluster, key, wallet_id, std::slice::from_ref(&asset)).unwrap());
    let clock = Arc::new(SystemClock);
    let engine =
        Engine::new(store.clone(), clock.clone(), AssetRegistry::new(vec![asset.clone()]).unwrap());
    let (merchant, _) = engine.create_merchant("bench", [9u8; 32]).await.unwrap();
    engine
        .deposit(
            &merchant,
            &asset.code,
            Amount::from_u128(u128::from(u64::MAX)),
            DepositKey::parse("bench").unwrap(),
        )
        .await
        .unwrap();
    for i in 0..n {
        let destination =
            Destination::Solana(SolanaAddress::parse(&Pubkey::new_unique().to_string()).unwrap());
        let request = PayoutRequest::new(
            PayoutKey::parse(&format!("bench-{i:06}")).unwrap(),
            asset.code.clone(),
            Amount::from_u128(u128::from(AMOUNT_BASE_UNITS) + i as u128),
            destination,
            Metadata::empty(),
        );
        engine.create_payout(&merchant, request).await.unwrap();
    }
    let pipeline = Pipeline::new(store.clone(), clock, PipelineConfig::default())
        .with_standalone_rail(StandaloneLine { rail, assets: vec![asset] });
    // Policy approves every payout before the clock starts: approved -> sent is what is timed.
    let count = |status: PayoutStatus| {
        let store = store.clone();
        async move {
            store
                .count_payouts_by_status()
                .await
                .unwrap()
                .into_iter()
                .find(|(s, _)| *s == status)
                .map_or(0, |(_, c)| c as usize)
        }
    };
    while count(PayoutStatus::Requested).await > 0 {
        pipeline.policy_pass().await.unwrap();
    }
    assert_eq!(count(PayoutStatus::Approved).await, n, "every payout approved before timing");
    // The product's own worker loop (`Pipeline::run`, intake and settlement side by side).
    let pipeline = Arc::new(pipeline);
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let worker = tokio::spawn({
        let pipeline = pipeline.clone();
        async move {
            pipeline
                .run(async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await
        }
    });
    let started = Instant::now();
    let deadline = started + Duration::from_secs(PHASE_TIMEOUT_SECS);
    let mut sent_secs = None;
    loop {
        tokio::time::sleep(Duration::from_millis(MONITOR_POLL_MS)).await;
        if sent_secs.is_none() && db.scalar_raw(COUNT_SENT).await as usize == n {
            sent_secs = Some(started.elapsed().as_secs_f64());
        }
        if count(PayoutStatus::Paid).await == n {
            break;
        }
        assert!(Instant::now() < deadline, "payouts not paid in time");
    }
    let paid_secs = started.elapsed().as_secs_f64();
    stop.send(true).expect("the worker listens");
    worker.await.unwrap();
    (sent_secs.expect("sent before paid"), paid_secs)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = env_usize("BENCH_PAYOUTS", PAYOUTS_DEFAULT).max(1);
    let slot_time_ms = env_usize("BENCH_SLOT_TIME_MS", SLOT_TIME_MS_DEFAULT as usize) as u64;
    let postgres = std::env::var("BENCH_STORE").is_ok_and(|s| s == "postgres");
    let tokens: Vec<Token> = std::env::var("BENCH_TOKENS")
        .unwrap_or_else(|_| "sol,spl".to_owned())
        .split(',')
        .map(|t| match t.trim() {
            "sol" => Token::Sol,
            "spl" => Token::Spl,
            other => panic!("BENCH_TOKENS: `{other}` is neither sol nor spl"),
        })
        .collect();
    println!(
        "bench: {n} transfers per phase, {slot_time_ms} ms slots, store {}",
        if postgres { "PostgreSQL" } else { "SQLite" }
    );
    for token in tokens {
        token_round(token, n, slot_time_ms, postgres).await;
    }
}

/// The node's own rate, then payoutd's, each on a fresh node, for one token.
async fn token_round(token: Token, n: usize, slot_time_ms: u64, postgres: bool) {
    let label = match token {
        Token::Sol => "SOL",
        Token::Spl => "SPL",
    };
    let node = tokio::task::spawn_blocking(move || SolanaNode::start(slot_time_ms)).await.unwrap();
    let (send, confirmed, finalized) = raw_phase(&node, token, n).await;
    println!(
        "{label} node, pre-signed:  sent {:>8.1}/s  confirmed {:>8.1}/s  finalized {:>8.1}/s  (all {n} finalized after {finalized:.1} s)",
        rate(n, send),
        rate(n, confirmed),
        rate(n, finalized)
    );
    drop(node);

    let node = tokio::task::spawn_blocking(move || SolanaNode::start(slot_time_ms)).await.unwrap();
    let db = if postgres { fresh_postgres().await } else { fresh_sqlite().await };
    let (sent, paid) = payoutd_phase(&node, &db, token, n).await;
    println!(
        "{label} payoutd, approved: sent {:>8.1}/s  paid (finalized) {:>8.1}/s  (all {n} paid after {paid:.1} s)",
        rate(n, sent),
        rate(n, paid)
    );
    println!(
        "bench[{label}]: raw_sent_per_s={:.0} raw_finalized_per_s={:.0} approved_to_sent_per_s={:.0} approved_to_finalized_per_s={:.0} \
         sent_vs_raw={:.0}% finalized_vs_raw={:.0}%",
        rate(n, send),
        rate(n, finalized),
        rate(n, sent),
        rate(n, paid),
        100.0 * rate(n, sent) / rate(n, send),
        100.0 * rate(n, paid) / rate(n, finalized)
    );
}
