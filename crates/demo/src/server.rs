//! The real `payoutd` binary as child processes: its config file, `serve` (start, SIGKILL, restart, stop), `worker` processes and one-shot CLI commands.

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
/// The two assets every harness run configures on anvil's chain.
pub const ETH: &str = "evm:31337/ETH";
pub const USDC: &str = "evm:31337/USDC";
/// The test ERC-20 minted at deployment: 1e9 USDC, far more than any run pays.
pub const TOKEN_SUPPLY: u128 = 1_000_000_000_000_000;
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
/// How often each hot wallet and provider account is compared with the ledger in the demo.
pub const BALANCE_CHECK_INTERVAL_MS: u64 = 2_000;
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

/// The demo's TOML (schema: crates/payoutd/src/config.rs): no `database_url`, so the embedded
/// default, `payoutd.db` in the working directory, is what the demo shows; one hot wallet, signed
/// for as `wallets` says (`key_envs_toml`, or a KMS key's `kms_signers` line).
pub fn config_toml(chain: &ChainSetup<'_>, wallets: &str) -> String {
    config_toml_with(chain, None, Some(wallets))
}

/// The `[[chains]]` line naming hot wallets by the environment variables holding their keys.
pub fn key_envs_toml(key_envs: &[&str]) -> String {
    let key_envs = key_envs.iter().map(|k| format!("\"{k}\"")).collect::<Vec<_>>().join(", ");
    format!("hot_wallet_key_envs = [{key_envs}]")
}

/// The TOML payoutd reads: the two assets always; `database_url` when given; the chain (node,
/// hot wallets as `wallets` names them, pipeline settings) only when `wallets` is given, so that
/// a `serve` without it runs the API alone.
/// Webhooks go to a receiver on this machine, retried quickly so a run's end sees them all.
const WEBHOOKS_TOML: &str = r#"
[webhooks]
# The receiver is a local process: local development only.
allow_private_urls = true
retry_delays_ms = [200, 500, 1000, 2000]
round_interval_ms = 5000
"#;

pub fn config_toml_with(
    chain: &ChainSetup<'_>,
    database_url: Option<&str>,
    wallets: Option<&str>,
) -> String {
    let mut text = String::from("# Written by the payoutd demo harness.\n");
    match database_url {
        Some(url) => text.push_str(&format!("database_url = \"{url}\"\n")),
        None => {
            text.push_str("# The database is the embedded default: payoutd.db in this directory.\n")
        }
    }
    text.push_str(&format!(
        r#"
[[assets]]
code = "{eth}"
decimals = 18
kind = "native"

[[assets]]
code = "{usdc}"
decimals = {usdc_decimals}
kind = "erc20"
token_address = "{token}"
"#,
        eth = chain.eth_code,
        usdc = chain.usdc_code,
        usdc_decimals = chain.usdc_decimals,
        token = chain.token,
    ));
    text.push_str(WEBHOOKS_TOML);
    let Some(wallets) = wallets else {
        text.push_str("\n# No [[chains]]: this process serves the API only; workers pay.\n");
        return text;
    };
    text.push_str(&format!(
        r#"
[[chains]]
chain_id = {chain_id}
# A fault-injecting proxy in front of the node.
rpc_url = "{rpc_url}"
finality_confirmations = {FINALITY_CONFIRMATIONS}
{wallets}

[pipeline]
rebroadcast_after_ms = {REBROADCAST_AFTER_MS}
replace_after_ms = {REPLACE_AFTER_MS}
sign_batch_max = {SIGN_BATCH_MAX}
idle_sleep_ms = {IDLE_SLEEP_MS}
# Compared often, so the run's own check finds any balance the ledger does not explain.
balance_check_interval_ms = {BALANCE_CHECK_INTERVAL_MS}
"#,
        chain_id = chain.chain_id,
        rpc_url = chain.rpc_url,
    ));
    text
}

/// `payoutd` sits next to the harness binaries in target/<profile>.
pub fn payoutd_bin() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("locate this binary")?;
    let bin = me.parent().context("binary without a directory")?.join("payoutd");
    anyhow::ensure!(
        bin.is_file(),
        "{} not found: build it with `cargo build --workspace --exclude payoutd-sim --bins` (scripts/demo does)",
        bin.display()
    );
    Ok(bin)
}

/// A fresh, git-ignored directory `name` (e.g. `.demo`) under the workspace root (two levels above this crate).
pub fn fresh_work_dir(name: &str) -> anyhow::Result<PathBuf> {
    let work = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(name);
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clear {}", work.display()))?;
    }
    std::fs::create_dir_all(&work)?;
    Ok(work.canonicalize()?)
}

/// How to start payoutd: binary, working directory, config file and environment. Cheap to
/// clone, so that a supervisor task can restart processes on its own.
#[derive(Clone)]
pub struct Launcher {
    bin: PathBuf,
    work: PathBuf,
    config: PathBuf,
    env: Vec<(String, String)>,
}

impl Launcher {
    pub fn new(bin: PathBuf, work: &Path, config: PathBuf, env: Vec<(String, String)>) -> Launcher {
        Launcher { bin, work: work.to_owned(), config, env }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .current_dir(&self.work)
            .env("PAYOUTD_CONFIG", &self.config)
            // Whatever the calling shell has set, the config file decides the database, there is
            // no Redis, and logs are plain text.
            .env_remove("PAYOUTD_DATABASE_URL")
            .env_remove("PAYOUTD_REDIS_URL")
            .env_remove("PAYOUTD_LISTEN")
            .env_remove("PAYOUTD_LOG_FORMAT")
            // Logs are files: no colour codes in them.
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    pub fn log_path(&self, name: &str) -> PathBuf {
        self.work.join(name)
    }

    fn log_file(&self, name: &str) -> anyhow::Result<std::fs::File> {
        let path = self.log_path(name);
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("open {}", path.display()))
    }

    /// Runs a one-shot command and returns the JSON on the last line of its stdout.
    pub async fn cli(&self, args: &[&str]) -> anyhow::Result<Value> {
        let stdout = self.cli_output(args).await?;
        let line = stdout.lines().last().unwrap_or("");
        serde_json::from_str(line)
            .with_context(|| format!("payoutd {}: not JSON: {line:?}", args.join(" ")))
    }

    /// The details of every open `balance_mismatch` incident (`payoutd incidents`, read from the
    /// database, so an API-only process answers too): a hot wallet or provider account whose
    /// balance the ledger does not explain.
    pub async fn balance_mismatches(&self) -> anyhow::Result<Vec<String>> {
        let mut found = Vec::new();
        for line in self.cli_output(&["incidents"]).await?.lines().filter(|l| !l.trim().is_empty())
        {
            let incident: Value = serde_json::from_str(line)
                .with_context(|| format!("payoutd incidents: not JSON: {line:?}"))?;
            if incident["kind"] == "balance_mismatch" {
                found.push(incident["detail"].as_str().unwrap_or_default().to_owned());
            }
        }
        Ok(found)
    }

    /// Runs a one-shot command and returns its whole stdout.
    pub async fn cli_output(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut command = self.command();
        command.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        let output = tokio::time::timeout(Duration::from_secs(CLI_TIMEOUT_SECS), command.output())
            .await
            .with_context(|| {
                format!("payoutd {} did not finish within {CLI_TIMEOUT_SECS} s", args.join(" "))
            })??;
        if !output.status.success() {
            bail!(
                "payoutd {} failed ({}): {}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Starts `payoutd worker`, its log appended to `log_name` in the working directory.
    pub fn spawn_worker(&self, log_name: &str) -> anyhow::Result<Child> {
        let mut command = self.command();
        command.arg("worker").stdout(Stdio::null()).stderr(Stdio::from(self.log_file(log_name)?));
        command.spawn().with_context(|| format!("start {} worker", self.bin.display()))
    }

    /// `spawn_worker` with the process's wall clock `clock_skew_secs` off (libfaketime preloaded;
    /// its monotonic clock, which its timers run on, left alone).
    pub fn spawn_worker_skewed(
        &self,
        log_name: &str,
        clock_skew_secs: i64,
    ) -> anyhow::Result<Child> {
        anyhow::ensure!(
            std::path::Path::new(LIBFAKETIME).is_file(),
            "{LIBFAKETIME} is missing: run scripts/install-tools (Debian's faketime)"
        );
        let mut command = self.command();
        command
            .env("LD_PRELOAD", LIBFAKETIME)
            .env("FAKETIME", format!("{clock_skew_secs:+}"))
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .arg("worker")
            .stdout(Stdio::null())
            .stderr(Stdio::from(self.log_file(log_name)?));
        command.spawn().with_context(|| format!("start {} worker", self.bin.display()))
    }
}

/// Debian's libfaketime for multithreaded processes, as `scripts/install-tools` installs it.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// SIGTERM (payoutd drains and stops), then SIGKILL after [`STOP_GRACE_SECS`]. `true` when it
/// stopped on the SIGTERM alone.
pub async fn terminate(mut child: Child) -> bool {
    if let Some(pid) = child.id() {
        // No signal crate in this workspace; kill(1) is always there.
        let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status().await;
    }
    if tokio::time::timeout(Duration::from_secs(STOP_GRACE_SECS), child.wait()).await.is_ok() {
        return true;
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    false
}

/// SIGKILL: no shutdown path runs, whatever was in flight stays as the database and node left it.
pub async fn sigkill(mut child: Child) -> anyhow::Result<()> {
    child.start_kill().context("SIGKILL payoutd")?;
    child.wait().await?;
    Ok(())
}

/// How to run payoutd, and the `serve` process when one is running.
pub struct Payoutd {
    launcher: Launcher,
    child: Option<Child>,
    listen: Option<SocketAddr>,
    /// `serve` flags beyond the address (`--api-only` when workers pay).
    serve_flags: Vec<&'static str>,
}

/// The log file of `serve`, in the working directory.
pub const SERVE_LOG: &str = "serve.log";

impl Payoutd {
    pub fn new(bin: PathBuf, work: &Path, config: PathBuf, env: Vec<(String, String)>) -> Payoutd {
        Payoutd {
            launcher: Launcher::new(bin, work, config, env),
            child: None,
            listen: None,
            serve_flags: Vec::new(),
        }
    }

    /// `serve` runs the API only; separate `payoutd worker` processes pay.
    pub fn api_only(mut self) -> Payoutd {
        self.serve_flags.push("--api-only");
        self
    }

    pub fn launcher(&self) -> &Launcher {
        &self.launcher
    }

    /// Runs a one-shot command and returns the JSON on the last line of its stdout.
    pub async fn cli(&self, args: &[&str]) -> anyhow::Result<Value> {
        self.launcher.cli(args).await
    }

    /// Starts `payoutd serve` (on the same address as before when restarting) and waits for
    /// the line `{"listening": "HOST:PORT"}` it prints once the socket is bound.
    pub async fn start(&mut self) -> anyhow::Result<SocketAddr> {
        anyhow::ensure!(self.child.is_none(), "payoutd serve is already running");
        // Port 0 the first time (the kernel picks one); the same port afterwards, so clients keep their URL.
        let listen = self.listen.map_or_else(|| "127.0.0.1:0".to_owned(), |a| a.to_string());
        let log = self.launcher.log_path(SERVE_LOG);
        let mut command = self.launcher.command();
        command
            .args(["serve", "--listen", &listen])
            .args(&self.serve_flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(self.launcher.log_file(SERVE_LOG)?));
        let mut child =
            command.spawn().with_context(|| format!("start {}", self.launcher.bin.display()))?;
        let stdout = child.stdout.take().context("serve stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(SERVE_START_TIMEOUT_SECS);
        let addr = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match tokio::time::timeout(left, lines.next_line()).await {
                Err(_) => {
                    bail!(
                        "payoutd serve printed no address within {SERVE_START_TIMEOUT_SECS} s (see {})",
                        log.display()
                    )
                }
                Ok(Ok(Some(line))) => line,
                Ok(_) => {
                    let status = child.wait().await?;
                    bail!("payoutd serve exited at start with {status} (see {})", log.display());
                }
            };
            let parsed: Option<Value> = serde_json::from_str(&line).ok();
            if let Some(addr) =
                parsed.as_ref().and_then(|v| v.get("listening")).and_then(Value::as_str)
            {
                break addr
                    .parse::<SocketAddr>()
                    .with_context(|| format!("listening address {addr:?}"))?;
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
        sigkill(self.child.take().context("payoutd serve is not running")?).await
    }

    /// SIGTERM (payoutd drains and stops), then SIGKILL after [`STOP_GRACE_SECS`].
    pub async fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            terminate(child).await;
        }
    }
}
