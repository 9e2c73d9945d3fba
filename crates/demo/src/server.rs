//! The real `payoutd` binary as a child process: its config file, `serve` (start, SIGKILL, restart, stop) and one-shot CLI commands.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use payoutd_domain::EvmAddress;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The environment variable that carries the hot wallet key to payoutd (the config names it, never holds it).
pub const HOT_WALLET_KEY_ENV: &str = "PAYOUTD_DEMO_HOT_WALLET_KEY";
/// `serve` connects to the node and prints its address within a second; the margin covers a loaded machine.
pub const SERVE_START_TIMEOUT_SECS: u64 = 30;
/// After SIGTERM payoutd finishes in-flight requests and the current tick; then it is killed.
pub const STOP_GRACE_SECS: u64 = 10;
/// One-shot commands (merchant create, payout approve) touch the database and the node once.
pub const CLI_TIMEOUT_SECS: u64 = 30;
/// Two blocks: a payout counts as paid one block after the block that holds it, so a
/// restarted process must see the receipt again before settling (anvil never reorgs).
pub const FINALITY_CONFIRMATIONS: u64 = 2;
/// Lost sends are re-sent after this long (the default 6 s would only make the demo slower).
pub const REBROADCAST_AFTER_MS: u64 = 3_000;
/// Replacement with bumped fees only when an attempt is this old; anvil never prices us out.
pub const REPLACE_AFTER_MS: u64 = 60_000;
pub const SIGN_BATCH_MAX: u32 = 128;
pub const IDLE_SLEEP_MS: u64 = 100;

pub struct ChainSetup<'a> {
    pub chain_id: u64,
    pub rpc_url: &'a str,
    pub token: EvmAddress,
    pub eth_code: &'a str,
    pub usdc_code: &'a str,
    pub usdc_decimals: u8,
}

/// The TOML payoutd reads (schema: crates/payoutd/src/config.rs). No `database_url`: the
/// embedded default, `payoutd.db` in the working directory, is what the demo shows.
pub fn config_toml(chain: &ChainSetup<'_>) -> String {
    format!(
        r#"# Written by payoutd-demo. The database is the embedded default: payoutd.db in this directory.

[[assets]]
code = "{eth}"
decimals = 18
kind = "native"

[[assets]]
code = "{usdc}"
decimals = {usdc_decimals}
kind = "erc20"
token_address = "{token}"

[[chains]]
chain_id = {chain_id}
# A fault-injecting proxy in front of the node.
rpc_url = "{rpc_url}"
finality_confirmations = {FINALITY_CONFIRMATIONS}
hot_wallet_key_envs = ["{HOT_WALLET_KEY_ENV}"]

[pipeline]
rebroadcast_after_ms = {REBROADCAST_AFTER_MS}
replace_after_ms = {REPLACE_AFTER_MS}
sign_batch_max = {SIGN_BATCH_MAX}
idle_sleep_ms = {IDLE_SLEEP_MS}
"#,
        eth = chain.eth_code,
        usdc = chain.usdc_code,
        usdc_decimals = chain.usdc_decimals,
        token = chain.token,
        chain_id = chain.chain_id,
        rpc_url = chain.rpc_url,
    )
}

/// How to run payoutd, and the `serve` process when one is running.
pub struct Payoutd {
    bin: PathBuf,
    work: PathBuf,
    config: PathBuf,
    env: Vec<(String, String)>,
    child: Option<Child>,
    listen: Option<SocketAddr>,
}

impl Payoutd {
    pub fn new(bin: PathBuf, work: &Path, config: PathBuf, env: Vec<(String, String)>) -> Payoutd {
        Payoutd { bin, work: work.to_owned(), config, env, child: None, listen: None }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .current_dir(&self.work)
            .env("PAYOUTD_CONFIG", &self.config)
            // Whatever the calling shell has set, the demo runs on the embedded SQLite file
            // without Redis, and reads plain-text logs.
            .env_remove("PAYOUTD_DATABASE_URL")
            .env_remove("PAYOUTD_REDIS_URL")
            .env_remove("PAYOUTD_LISTEN")
            .env_remove("PAYOUTD_LOG_FORMAT")
            // serve.log is a file: no colour codes in it.
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    fn log_file(&self) -> anyhow::Result<std::fs::File> {
        let path = self.work.join("serve.log");
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("open {}", path.display()))
    }

    /// Runs a one-shot command and returns the JSON on the last line of its stdout.
    pub async fn cli(&self, args: &[&str]) -> anyhow::Result<Value> {
        let mut command = self.command();
        command.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        let output = tokio::time::timeout(Duration::from_secs(CLI_TIMEOUT_SECS), command.output())
            .await
            .with_context(|| format!("payoutd {} did not finish within {CLI_TIMEOUT_SECS} s", args.join(" ")))??;
        if !output.status.success() {
            bail!(
                "payoutd {} failed ({}): {}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let line = stdout.lines().last().unwrap_or("");
        serde_json::from_str(line).with_context(|| format!("payoutd {}: not JSON: {line:?}", args.join(" ")))
    }

    /// Starts `payoutd serve` (on the same address as before when restarting) and waits for
    /// the line `{"listening": "HOST:PORT"}` it prints once the socket is bound.
    pub async fn start(&mut self) -> anyhow::Result<SocketAddr> {
        anyhow::ensure!(self.child.is_none(), "payoutd serve is already running");
        // Port 0 the first time (the kernel picks one); the same port afterwards, so clients keep their URL.
        let listen = self.listen.map_or_else(|| "127.0.0.1:0".to_owned(), |a| a.to_string());
        let mut command = self.command();
        command.args(["serve", "--listen", &listen]).stdout(Stdio::piped()).stderr(Stdio::from(self.log_file()?));
        let mut child = command.spawn().with_context(|| format!("start {}", self.bin.display()))?;
        let stdout = child.stdout.take().context("serve stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(SERVE_START_TIMEOUT_SECS);
        let addr = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match tokio::time::timeout(left, lines.next_line()).await {
                Err(_) => {
                    bail!("payoutd serve printed no address within {SERVE_START_TIMEOUT_SECS} s (see .demo/serve.log)")
                }
                Ok(Ok(Some(line))) => line,
                Ok(_) => {
                    let status = child.wait().await?;
                    bail!("payoutd serve exited at start with {status} (see .demo/serve.log)");
                }
            };
            let parsed: Option<Value> = serde_json::from_str(&line).ok();
            if let Some(addr) = parsed.as_ref().and_then(|v| v.get("listening")).and_then(Value::as_str) {
                break addr.parse::<SocketAddr>().with_context(|| format!("listening address {addr:?}"))?;
            }
        };
        // Keep reading so that payoutd never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        self.listen = Some(addr);
        self.child = Some(child);
        Ok(addr)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// SIGKILL: no shutdown path runs, whatever was in flight stays as the database and node left it.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        let mut child = self.child.take().context("payoutd serve is not running")?;
        child.start_kill().context("SIGKILL payoutd")?;
        child.wait().await?;
        Ok(())
    }

    /// SIGTERM (payoutd drains and stops), then SIGKILL after [`STOP_GRACE_SECS`].
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if let Some(pid) = child.id() {
            // No signal crate in this workspace; kill(1) is always there.
            let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status().await;
        }
        if tokio::time::timeout(Duration::from_secs(STOP_GRACE_SECS), child.wait()).await.is_err() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
}
