//! Runs the local Solana node (surfpool, offline; built by `scripts/install-tools`) as a child process, with controls to stall its block production.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use payoutd_rail_solana::{
    SolanaKey, SolanaRpc, associated_token_account, sign_with_others, token_program_id,
};
use serde_json::json;
use solana_commitment_config::CommitmentConfig;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;

use crate::anvil::drain_stderr;

/// Overrides the node binary's location.
pub const SOLANA_NODE_BIN_ENV: &str = "PAYOUTD_SOLANA_NODE_BIN";
/// Where `scripts/install-tools` puts the node (built once per machine), relative to the workspace root.
pub const SOLANA_NODE_BIN_RELATIVE: &str = ".tools/bin/payoutd-solana-node";
/// The node binds and announces itself in about a second; the margin covers a loaded CI machine.
pub const SOLANA_NODE_START_TIMEOUT_MS: u64 = 60_000;
/// Tests run slots this fast so a blockhash (150 blocks) expires in 7.5 s and a slot finalizes
/// (31 slots later) in about 1.5 s.
pub const SOLANA_TEST_SLOT_TIME_MS: u64 = 50;
const CONTROL_TIMEOUT_MS: u64 = 10_000;
/// Starts tried before a taken port fails the test.
const SOLANA_NODE_START_TRIES: usize = 3;
/// How long a node that stopped is given for its stderr to drain: 20 polls of 50 ms.
const STDERR_DRAIN_POLLS: usize = 20;
const STDERR_DRAIN_POLL_MS: u64 = 50;
/// What the node prints when its port was taken after `free_port` chose it.
const PORT_TAKEN: &str = "already in use";

/// The node binary: `$PAYOUTD_SOLANA_NODE_BIN`, else [`SOLANA_NODE_BIN_RELATIVE`] under the workspace root.
pub fn solana_node_bin() -> PathBuf {
    match std::env::var_os(SOLANA_NODE_BIN_ENV) {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(SOLANA_NODE_BIN_RELATIVE),
    }
}

/// A running local Solana node; killed when dropped.
pub struct SolanaNode {
    child: Child,
    url: String,
    http: reqwest::Client,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

impl SolanaNode {
    /// Starts the node with `slot_time_ms` slots. Panics (tests must fail, not skip) when the
    /// binary is missing or the node does not come up. A port taken between choosing it and the
    /// node binding it (another test's node) is chosen again, a few times at most.
    pub fn start(slot_time_ms: u64) -> SolanaNode {
        let bin = solana_node_bin();
        assert!(
            bin.is_file(),
            "Solana node not found at {}: run scripts/install-tools from the workspace root (or set {SOLANA_NODE_BIN_ENV})",
            bin.display()
        );
        let mut why = String::new();
        for _ in 0..SOLANA_NODE_START_TRIES {
            match Self::try_start(&bin, slot_time_ms) {
                Ok(node) => return node,
                Err(e) if e.contains(PORT_TAKEN) => why = e,
                Err(e) => panic!(
                    "the Solana node did not announce itself within {SOLANA_NODE_START_TIMEOUT_MS} ms: {e}"
                ),
            }
        }
        panic!("the Solana node found its port taken {SOLANA_NODE_START_TRIES} times: {why}");
    }

    /// One start on a freshly chosen port; what the node printed when it did not come up.
    fn try_start(bin: &Path, slot_time_ms: u64) -> Result<SolanaNode, String> {
        let port = free_port();
        let mut child = Command::new(bin)
            .args(["--port", &port.to_string(), "--slot-time-ms", &slot_time_ms.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        let stderr_tail = drain_stderr(&mut child);
        let stdout = child.stdout.take().expect("piped stdout");
        let (ready_tx, ready_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout);
            let mut first = String::new();
            let _ = lines.read_line(&mut first);
            let _ = ready_tx.send(first);
            // Keep reading so the node never blocks on a full pipe.
            let mut sink = Vec::new();
            let _ = lines.read_to_end(&mut sink);
        });
        let line = match ready_rx.recv_timeout(Duration::from_millis(SOLANA_NODE_START_TIMEOUT_MS))
        {
            Ok(line) if !line.is_empty() => line,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                // The node is gone; its last words reach the tail as the pipe drains.
                for _ in 0..STDERR_DRAIN_POLLS {
                    if !stderr_tail.lock().unwrap().is_empty() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(STDERR_DRAIN_POLL_MS));
                }
                return Err(stderr_tail.lock().unwrap().clone());
            }
        };
        let ready: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the Solana node's first line is not JSON ({e}): {line}"));
        let url =
            ready["rpc_url"].as_str().unwrap_or_else(|| panic!("no rpc_url in {line}")).to_owned();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(CONTROL_TIMEOUT_MS))
            .build()
            .expect("an HTTP client");
        Ok(SolanaNode { child, url, http })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    async fn control(&self, method: &str) {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": [] });
        let answer: serde_json::Value = self
            .http
            .post(&self.url)
            .json(&body)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .unwrap_or_else(|e| panic!("{method}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("{method}: {e}"));
        assert!(answer.get("error").is_none(), "{method}: {answer}");
    }

    /// The `result` of one JSON-RPC call, as JSON text (to replay it later through a proxy's
    /// `Fault::Answer`: the node as it was).
    pub async fn raw_result(&self, method: &str, params: serde_json::Value) -> String {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        let answer: serde_json::Value = self
            .http
            .post(&self.url)
            .json(&body)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .unwrap_or_else(|e| panic!("{method}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("{method}: {e}"));
        answer.get("result").unwrap_or_else(|| panic!("{method}: {answer}")).to_string()
    }

    /// Stops block production: the block height stands still until `resume_blocks`.
    pub async fn stall_blocks(&self) {
        self.control("surfnet_pauseClock").await;
    }

    pub async fn resume_blocks(&self) {
        self.control("surfnet_resumeClock").await;
    }
}

impl Drop for SolanaNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Bytes of an SPL mint account.
const SPL_MINT_BYTES: u64 = 82;
/// Set-up transactions (airdrops, mints) land within this long on a running node.
pub const SOLANA_SETUP_TIMEOUT_MS: u64 = 60_000;
const SETUP_POLL_INTERVAL_MS: u64 = 100;

/// Waits until `signature` is confirmed on the node; panics on failure or past the timeout.
pub async fn wait_confirmed(rpc: &SolanaRpc, signature: &Signature) {
    let deadline = std::time::Instant::now() + Duration::from_millis(SOLANA_SETUP_TIMEOUT_MS);
    loop {
        if let Ok(statuses) = rpc.statuses(&[*signature]).await
            && let Some(status) = &statuses[0]
            && status.satisfies_commitment(CommitmentConfig::confirmed())
        {
            assert!(
                status.err.is_none(),
                "set-up transaction {signature} failed: {:?}",
                status.err
            );
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "set-up transaction {signature} did not land"
        );
        tokio::time::sleep(Duration::from_millis(SETUP_POLL_INTERVAL_MS)).await;
    }
}

/// Gives `to` `lamports` from the node's faucet and waits until they are there.
pub async fn airdrop(rpc: &SolanaRpc, to: &Pubkey, lamports: u64) {
    let signature = rpc
        .client()
        .request_airdrop(to, lamports)
        .await
        .unwrap_or_else(|e| panic!("airdrop to {to}: {e}"));
    wait_confirmed(rpc, &signature).await;
}

/// Creates an SPL mint of `decimals` with `owner` as its authority and mints `amount` to `owner`'s
/// associated token account; returns the mint.
pub async fn mint_test_token(
    rpc: &SolanaRpc,
    owner: &SolanaKey,
    amount: u64,
    decimals: u8,
) -> Pubkey {
    let mint = SolanaKey::generate();
    let program = token_program_id();
    let rent = rpc
        .client()
        .get_minimum_balance_for_rent_exemption(SPL_MINT_BYTES as usize)
        .await
        .expect("rent for a mint");
    let (who, m) = (owner.pubkey(), mint.pubkey());
    let instructions = vec![
        solana_system_interface::instruction::create_account(&who, &m, rent, SPL_MINT_BYTES, &program),
        spl_token_interface::instruction::initialize_mint2(&program, &m, &who, None, decimals).expect("initialize_mint2"),
        spl_associated_token_account_interface::instruction::create_associated_token_account_idempotent(&who, &who, &m, &program),
        spl_token_interface::instruction::mint_to(&program, &m, &associated_token_account(&who, &m), &who, &[], amount).expect("mint_to"),
    ];
    let (blockhash, _) = rpc.latest_blockhash().await.expect("a blockhash");
    let signed = sign_with_others(owner, &[&mint], &instructions, blockhash)
        .expect("the mint transaction signs");
    rpc.send_raw(&signed.raw).await.expect("the node takes the mint transaction");
    wait_confirmed(rpc, &signed.signature).await;
    m
}

/// `owner`'s balance of `mint` (0 without a token account), at `finalized`.
pub async fn token_balance(rpc: &SolanaRpc, owner: &Pubkey, mint: &Pubkey) -> u64 {
    let account = associated_token_account(owner, mint);
    match rpc
        .client()
        .get_token_account_balance_with_commitment(&account, CommitmentConfig::finalized())
        .await
    {
        Ok(answer) => answer.value.amount.parse().expect("a token amount is an integer"),
        Err(_) => 0,
    }
}

/// Bytes of a durable nonce account.
const NONCE_ACCOUNT_BYTES: usize = 80;

/// Creates a durable nonce account with `authority` as its authority (and payer); returns it.
pub async fn create_nonce_account(rpc: &SolanaRpc, authority: &SolanaKey) -> Pubkey {
    let nonce = SolanaKey::generate();
    let rent = rpc
        .client()
        .get_minimum_balance_for_rent_exemption(NONCE_ACCOUNT_BYTES)
        .await
        .expect("rent for a nonce account");
    let instructions = solana_system_interface::instruction::create_nonce_account(
        &authority.pubkey(),
        &nonce.pubkey(),
        &authority.pubkey(),
        rent,
    );
    let (blockhash, _) = rpc.latest_blockhash().await.expect("a blockhash");
    let signed = sign_with_others(authority, &[&nonce], &instructions, blockhash)
        .expect("the nonce account transaction signs");
    rpc.send_raw(&signed.raw).await.expect("the node takes the nonce account transaction");
    wait_confirmed(rpc, &signed.signature).await;
    nonce.pubkey()
}
