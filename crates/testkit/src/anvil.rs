//! Runs anvil as a child process on a free port, with helpers for its mining and pool controls.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use payoutd_domain::{Amount, EvmAddress};
use serde::Deserialize;
use serde_json::json;

use payoutd_rail_evm::{EvmRpc, RpcError, TxHash};

/// Overrides the anvil binary's location.
pub const ANVIL_BIN_ENV: &str = "PAYOUTD_ANVIL_BIN";
/// Where `scripts/install-tools` puts anvil, relative to the workspace root.
pub const ANVIL_BIN_RELATIVE: &str = ".tools/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil";
/// Anvil starts in about 0.1 s; the margin covers a loaded CI machine.
pub const ANVIL_START_TIMEOUT_MS: u64 = 10_000;
const ANVIL_PORT_POLL_INTERVAL_MS: u64 = 5;
/// Kept for the panic message when anvil dies at start.
const ANVIL_STDERR_TAIL_MAX_BYTES: usize = 8_192;
pub const ANVIL_CHAIN_ID: u64 = 31_337;

/// Anvil's default accounts 0-3 (mnemonic "test test ... junk"), each funded with 10,000 ETH.
pub const ANVIL_KEY_0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
pub const ANVIL_KEY_1: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
pub const ANVIL_KEY_2: &str = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";
pub const ANVIL_KEY_3: &str = "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6";

/// Command-line options; the default is automine (one block per transaction).
#[derive(Debug, Clone, Default)]
pub struct AnvilOptions {
    /// `--no-mining`: transactions stay pending until `mine`.
    pub no_mining: bool,
    /// `--block-time N`: interval mining, which (unlike automine) does not stall under load.
    pub block_time_secs: Option<u64>,
    /// `--gas-limit N` per block.
    pub gas_limit: Option<u64>,
    pub extra_args: Vec<String>,
}

impl AnvilOptions {
    pub fn no_mining() -> AnvilOptions {
        AnvilOptions { no_mining: true, ..AnvilOptions::default() }
    }

    pub fn block_time_secs(secs: u64) -> AnvilOptions {
        AnvilOptions { block_time_secs: Some(secs), ..AnvilOptions::default() }
    }
}

/// Transactions in anvil's pool: `pending` are executable now, `queued` wait for a nonce gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxpoolStatus {
    pub pending: u64,
    pub queued: u64,
}

/// A running anvil; killed when dropped.
pub struct Anvil {
    child: Child,
    url: String,
    rpc: EvmRpc,
}

/// The anvil binary: `$PAYOUTD_ANVIL_BIN`, else [`ANVIL_BIN_RELATIVE`] under the workspace root.
pub fn anvil_bin() -> PathBuf {
    match std::env::var_os(ANVIL_BIN_ENV) {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(ANVIL_BIN_RELATIVE),
    }
}

impl Anvil {
    /// Starts anvil on 127.0.0.1 with a kernel-chosen port. Panics (tests must fail, not
    /// skip) when the binary is missing or anvil does not come up.
    pub fn start(options: AnvilOptions) -> Anvil {
        let bin = anvil_bin();
        assert!(
            bin.is_file(),
            "anvil binary not found at {}: run scripts/install-tools from the workspace root (or set {ANVIL_BIN_ENV})",
            bin.display()
        );
        let mut command = Command::new(&bin);
        command.args(["--host", "127.0.0.1", "--port", "0", "-q"]);
        if options.no_mining {
            command.arg("--no-mining");
        }
        if let Some(secs) = options.block_time_secs {
            command.args(["--block-time", &secs.to_string()]);
        }
        if let Some(gas) = options.gas_limit {
            command.args(["--gas-limit", &gas.to_string()]);
        }
        command.args(&options.extra_args);
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child =
            command.spawn().unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        // `-q` also silences the "Listening on" line, so the port is read from the
        // process's own listening socket instead of guessing one that another test may take.
        let port = wait_for_listener(
            &mut child,
            "anvil",
            ANVIL_START_TIMEOUT_MS,
            ANVIL_PORT_POLL_INTERVAL_MS,
        );
        let url = format!("http://127.0.0.1:{port}");
        let rpc = EvmRpc::new(&url).expect("a loopback URL is valid");
        Anvil { child, url, rpc }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// A client for this node (shares one connection pool across clones).
    pub fn rpc(&self) -> &EvmRpc {
        &self.rpc
    }

    /// Mines `blocks` blocks now, including pending transactions that fit.
    pub async fn mine(&self, blocks: u64) -> Result<(), RpcError> {
        self.rpc
            .call::<serde_json::Value>("anvil_mine", json!([format!("{blocks:#x}")]))
            .await
            .map(drop)
    }

    /// `evm_setAutomine`: on, every accepted transaction is mined at once.
    pub async fn set_automine(&self, enabled: bool) -> Result<(), RpcError> {
        self.rpc.call::<serde_json::Value>("evm_setAutomine", json!([enabled])).await.map(drop)
    }

    /// `evm_setIntervalMining`: a block every `secs` seconds (0 turns it off).
    pub async fn set_interval_mining(&self, secs: u64) -> Result<(), RpcError> {
        self.rpc.call::<serde_json::Value>("evm_setIntervalMining", json!([secs])).await.map(drop)
    }

    /// Removes a pending transaction from the pool for good; `true` when it was there.
    pub async fn drop_transaction(&self, hash: TxHash) -> Result<bool, RpcError> {
        let dropped: Option<serde_json::Value> =
            self.rpc.call("anvil_dropTransaction", json!([hash.to_string()])).await?;
        Ok(dropped.is_some())
    }

    /// Overwrites an account's nonce, as if transactions unknown to us had been mined.
    pub async fn set_nonce(&self, address: EvmAddress, nonce: u64) -> Result<(), RpcError> {
        let params = json!([address.to_string(), format!("{nonce:#x}")]);
        self.rpc.call::<serde_json::Value>("anvil_setNonce", params).await.map(drop)
    }

    pub async fn set_balance(&self, address: EvmAddress, wei: Amount) -> Result<(), RpcError> {
        let params = json!([address.to_string(), format!("{:#x}", wei.as_u256())]);
        self.rpc.call::<serde_json::Value>("anvil_setBalance", params).await.map(drop)
    }

    pub async fn txpool_status(&self) -> Result<TxpoolStatus, RpcError> {
        #[derive(Deserialize)]
        struct Raw {
            pending: alloy::primitives::U64,
            queued: alloy::primitives::U64,
        }
        let raw: Raw = self.rpc.call("txpool_status", json!([])).await?;
        Ok(TxpoolStatus { pending: raw.pending.to(), queued: raw.queued.to() })
    }
}

impl Drop for Anvil {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Keeps reading stderr so anvil never blocks on a full pipe; retains the tail for panics.
pub(crate) fn drain_stderr(child: &mut Child) -> Arc<Mutex<String>> {
    let tail = Arc::new(Mutex::new(String::new()));
    if let Some(mut stderr) = child.stderr.take() {
        let tail = Arc::clone(&tail);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut text = tail.lock().unwrap();
                text.push_str(&String::from_utf8_lossy(&buf[..n]));
                if text.len() > ANVIL_STDERR_TAIL_MAX_BYTES {
                    let mut cut = text.len() - ANVIL_STDERR_TAIL_MAX_BYTES;
                    while !text.is_char_boundary(cut) {
                        cut += 1;
                    }
                    text.drain(..cut);
                }
            }
        });
    }
    tail
}

/// The port a just-started child listens on, read from its own socket (never guessed, so no other
/// test can take it first). Panics, with the tail of its stderr, when it exits or does not listen
/// within `timeout_ms`: a test must fail, not skip.
pub(crate) fn wait_for_listener(
    child: &mut Child,
    what: &str,
    timeout_ms: u64,
    poll_ms: u64,
) -> u16 {
    let stderr_tail = drain_stderr(child);
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    loop {
        if let Some(port) = listening_port(child.id()) {
            return port;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited at start with {status}: {}", stderr_tail.lock().unwrap());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not listen within {timeout_ms} ms: {}", stderr_tail.lock().unwrap());
        }
        std::thread::sleep(Duration::from_millis(poll_ms));
    }
}

/// The TCP port `pid` listens on, from /proc: the socket inodes among its file descriptors
/// matched against the LISTEN rows of its network namespace's tcp tables.
fn listening_port(pid: u32) -> Option<u16> {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?;
            Some(target.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    const TCP_STATE_LISTEN: &str = "0A";
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
            if fields.len() > 9 && fields[3] == TCP_STATE_LISTEN && inodes.contains(fields[9]) {
                let port_hex = fields[1].rsplit(':').next()?;
                return u16::from_str_radix(port_hex, 16).ok();
            }
        }
    }
    None
}
