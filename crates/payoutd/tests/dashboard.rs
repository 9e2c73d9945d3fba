//! The operator dashboard in a real browser, on both stores: `payoutd serve` (the real binary, its
//! pipeline paying on anvil) with a fixture made through the HTTP API and the CLI (two
//! near-duplicate payouts held for review, one whose metadata carries script, one whose token
//! transfer reverted into `needs_attention` with its incident), then
//! `tests/browser/dashboard.mjs` (playwright-core driving Debian's chromium, axe-core) signs in,
//! checks and screenshots every page, approves, rejects and resolves through the UI and forges
//! requests. Needs node, chromium, playwright-core and axe-core (`scripts/install-tools`): a missing
//! one fails the test, it never skips.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use payoutd_domain::Amount;
use payoutd_rail_evm::SigningKey;
use payoutd_testkit::{ANVIL_KEY_0, Anvil, AnvilOptions, TestDb, deploy_test_token};
use serde_json::{Value, json};

const OPERATOR_KEY: &str = "dashboard-operator-key-0123456789";
const HOT_KEY_ENV: &str = "PAYOUTD_DASHBOARD_HOT_KEY";
const ETH: &str = "evm:31337/ETH";
const USDC: &str = "evm:31337/USDC";
/// Minted to the hot wallet; a USDC payout above it reverts in the token contract.
const HOT_WALLET_USDC: u128 = 1_000_000_000_000_000;
/// Recipients with no history on anvil (not among its default accounts).
const REVIEW_RECIPIENT: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";
const XSS_RECIPIENT: &str = "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359";
const ATTENTION_RECIPIENT: &str = "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB";
const XSS_SCRIPT: &str = "<script>window.__xss=1</script>";
const XSS_ATTRIBUTE: &str = "\"><img src=x onerror=\"window.__xss=2\">";
/// Payouts beyond one page of the list (50 a page), so the browser follows `rel=next`.
const FILLER_PAYOUTS: u128 = 50;
/// Where the filler payouts go: an address no anvil account holds.
const FILLER_RECIPIENT: &str = "0xab00000000000000000000000000000000000001";
/// Near-duplicates created at most to get two of them held (the pipeline may approve the first
/// before the second exists).
const NEAR_DUPLICATES_MAX: usize = 5;
const SERVE_START_TIMEOUT: Duration = Duration::from_secs(30);
const STATUS_TIMEOUT: Duration = Duration::from_secs(60);
/// The browser run as a whole (the script has its own, shorter, watchdog).
const BROWSER_RUN_TIMEOUT: Duration = Duration::from_secs(300);
const POLL: Duration = Duration::from_millis(200);

/// One browser run at a time: two chromiums, two nodes and two pipelines on two cores make every
/// timeout a coin toss.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

/// What the browser run needs, each found or the test fails naming scripts/install-tools.
struct BrowserTools {
    node: String,
    chromium: PathBuf,
    axe: PathBuf,
    script: PathBuf,
}

fn browser_tools() -> BrowserTools {
    let root = workspace();
    let fix = "run scripts/install-tools from the workspace root (a missing browser dependency fails this test, it never skips)";
    let node = std::env::var("PAYOUTD_NODE_BIN").unwrap_or_else(|_| "node".to_owned());
    let version = Command::new(&node)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("node ({node}) cannot run: {e}; install Node 20+, then {fix}"));
    assert!(version.status.success(), "node --version failed; {fix}");
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    let major: u32 =
        version.trim_start_matches('v').split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
    assert!(major >= 20, "node {version} is too old for playwright-core (20+ needed); {fix}");
    let chromium = PathBuf::from(
        std::env::var("CHROMIUM_PATH").unwrap_or_else(|_| "/usr/bin/chromium".to_owned()),
    );
    assert!(chromium.is_file(), "chromium not found at {}: {fix}", chromium.display());
    let tools = root.join(".tools/node_modules");
    let playwright = tools.join("playwright-core/package.json");
    assert!(
        playwright.is_file(),
        "playwright-core not installed at {}: {fix}",
        playwright.display()
    );
    let axe = tools.join("axe-core/axe.min.js");
    assert!(axe.is_file(), "axe-core not installed at {}: {fix}", axe.display());
    let script = root.join("crates/payoutd/tests/browser/dashboard.mjs");
    assert!(script.is_file(), "{} is missing", script.display());
    BrowserTools { node, chromium, axe, script }
}

/// A child process killed when dropped, so a failing test leaves none behind.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Payoutd {
    config: PathBuf,
    database_url: String,
}

impl Payoutd {
    fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_payoutd"));
        command
            .env("PAYOUTD_CONFIG", &self.config)
            .env("PAYOUTD_DATABASE_URL", &self.database_url)
            .env(HOT_KEY_ENV, ANVIL_KEY_0)
            .env("PAYOUTD_LOG", "warn");
        command
    }

    /// One CLI command, its JSON answer.
    fn cli(&self, args: &[&str]) -> Value {
        let out = self.command().args(args).output().expect("run payoutd");
        assert!(
            out.status.success(),
            "payoutd {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("payoutd {args:?}: not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout))
        })
    }

    /// `payoutd serve` on a free port, with the operator key; returns the process and its base URL.
    fn serve(&self) -> (Killed, String) {
        let mut child = self
            .command()
            .arg("serve")
            .env("PAYOUTD_LISTEN", "127.0.0.1:0")
            .env("PAYOUTD_OPERATOR_KEY", OPERATOR_KEY)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start payoutd serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let child = Killed(child);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // The first line says where it listens; the rest is drained so the pipe never fills.
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = rx.recv_timeout(SERVE_START_TIMEOUT).unwrap_or_else(|_| {
            panic!("payoutd serve printed no listening line within {SERVE_START_TIMEOUT:?}")
        });
        let listening: Value = serde_json::from_str(&line)
            .unwrap_or_else(|_| panic!("payoutd serve's first line is not JSON: {line}"));
        let address = listening["listening"]
            .as_str()
            .unwrap_or_else(|| panic!("no listening address in {line}"));
        (child, format!("http://{address}"))
    }
}

/// The HTTP API as a merchant and as the operator.
struct Api {
    http: reqwest::Client,
    base: String,
    merchant_key: String,
}

impl Api {
    async fn send(&self, request: reqwest::RequestBuilder, what: &str) -> Value {
        let response = request.send().await.unwrap_or_else(|e| panic!("{what}: {e}"));
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        assert!(status.is_success(), "{what}: {status} {body}");
        if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {body}"))
        }
    }

    async fn deposit(&self, merchant: &str, asset: &str, amount: u128) {
        let body = json!({"merchant_id": merchant, "asset": asset, "amount": amount.to_string(), "idempotency_key": format!("dashboard-fund-{asset}")});
        self.send(
            self.http
                .post(format!("{}/v1/deposits", self.base))
                .bearer_auth(OPERATOR_KEY)
                .json(&body),
            "deposit",
        )
        .await;
    }

    async fn create_payout(
        &self,
        key: &str,
        asset: &str,
        amount: u128,
        to: &str,
        metadata: Value,
    ) -> String {
        let body = json!({"asset": asset, "amount": amount.to_string(), "destination": to, "idempotency_key": key, "metadata": metadata});
        let payout = self
            .send(
                self.http
                    .post(format!("{}/v1/payouts", self.base))
                    .bearer_auth(&self.merchant_key)
                    .json(&body),
                "create payout",
            )
            .await;
        payout["id"].as_str().expect("payout id").to_owned()
    }

    async fn payout(&self, id: &str) -> Value {
        self.send(
            self.http.get(format!("{}/v1/payouts/{id}", self.base)).bearer_auth(&self.merchant_key),
            "read payout",
        )
        .await
    }

    async fn status(&self, id: &str) -> String {
        self.payout(id).await["status"].as_str().expect("status").to_owned()
    }

    /// Waits until `id`'s status is not one of `passing`, and returns it.
    async fn status_after(&self, id: &str, passing: &[&str]) -> String {
        let deadline = Instant::now() + STATUS_TIMEOUT;
        loop {
            let status = self.status(id).await;
            if !passing.contains(&status.as_str()) {
                return status;
            }
            assert!(Instant::now() < deadline, "{id} still {status} after {STATUS_TIMEOUT:?}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// The first transaction hash of `id`'s first attempt, once it is signed.
    async fn first_tx_hash(&self, id: &str) -> String {
        let deadline = Instant::now() + STATUS_TIMEOUT;
        loop {
            let attempts = self
                .send(
                    self.http
                        .get(format!("{}/v1/payouts/{id}/attempts", self.base))
                        .bearer_auth(OPERATOR_KEY),
                    "read attempts",
                )
                .await;
            if let Some(hash) = attempts["data"][0]["transactions"][0]["hash"].as_str() {
                return hash.to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "{id} has no signed transaction after {STATUS_TIMEOUT:?}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    async fn open_incidents(&self) -> Vec<Value> {
        let list = self
            .send(
                self.http.get(format!("{}/v1/incidents", self.base)).bearer_auth(OPERATOR_KEY),
                "list incidents",
            )
            .await;
        list["data"].as_array().cloned().unwrap_or_default()
    }
}

/// Runs the browser script, streaming its lines to stderr (prefixed with the store); returns
/// whether it passed and its lines.
fn run_browser(tools: &BrowserTools, store: &str, env: &[(&str, String)]) -> (bool, Vec<String>) {
    let mut command = Command::new(&tools.node);
    command
        .arg(&tools.script)
        .current_dir(workspace())
        .env("CHROMIUM_PATH", &tools.chromium)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = Killed(command.spawn().expect("start node"));
    let (tx, rx) = mpsc::channel::<String>();
    let mut readers = Vec::new();
    for stream in [
        Box::new(child.0.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.0.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        let prefix = format!("[dashboard.mjs {store}] ");
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                // Straight to the process's stderr: streamed live even while the harness captures output.
                let _ = writeln!(std::io::stderr(), "{prefix}{line}");
                let _ = tx.send(line);
            }
        }));
    }
    drop(tx);
    let deadline = Instant::now() + BROWSER_RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("wait for node") {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(child); // kills it if it is still running
    for r in readers {
        let _ = r.join();
    }
    let lines: Vec<String> = rx.try_iter().collect();
    match status {
        Some(status) => (status.success(), lines),
        None => {
            let mut lines = lines;
            lines.push(format!("FAIL the browser run did not end within {BROWSER_RUN_TIMEOUT:?}"));
            (false, lines)
        }
    }
}

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn the_dashboard_works_in_a_real_browser(db: TestDb) {
    let tools = browser_tools();
    let _one = ONE_AT_A_TIME.lock().await;
    let store = if db.is_postgres() { "postgres" } else { "sqlite" };

    // A chain that makes blocks on its own (depth-1 finality needs the next block), the test token
    // minted to the hot wallet.
    let anvil = Anvil::start(AnvilOptions::block_time_secs(1));
    let key = SigningKey::from_hex(ANVIL_KEY_0).unwrap();
    let token = deploy_test_token(anvil.rpc(), &key, Amount::from_u128(HOT_WALLET_USDC))
        .await
        .expect("deploy the test token");
    let dir =
        std::env::temp_dir().join(format!("payoutd-dashboard-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("payoutd.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[[assets]]
code = "{ETH}"
decimals = 18
kind = "native"

[[assets]]
code = "{USDC}"
decimals = 6
kind = "erc20"
token_address = "{token}"

[[chains]]
chain_id = 31337
rpc_url = "{rpc}"
finality_confirmations = 1
hot_wallet_key_envs = ["{HOT_KEY_ENV}"]
explorer_tx_url = "https://explorer.invalid/tx/{{tx}}"

[pipeline]
idle_sleep_ms = 100
rebroadcast_after_ms = 3000

[webhooks]
allow_private_urls = true
retry_delays_ms = [100, 100, 100, 100]
round_interval_ms = 600000
"#,
            rpc = anvil.url()
        ),
    )
    .unwrap();
    let payoutd = Payoutd { config, database_url: db.url().to_owned() };
    let (_serve, base) = payoutd.serve();

    // The fixture: a merchant from the CLI, its balance and payouts through the HTTP API.
    let merchant = payoutd.cli(&["merchant", "create", "Dashboard & <Co>"]);
    let api = Api {
        http: reqwest::Client::new(),
        base: base.clone(),
        merchant_key: merchant["api_key"].as_str().unwrap().to_owned(),
    };
    let merchant_id = merchant["id"].as_str().unwrap().to_owned();
    // A webhook endpoint that never answers (nothing listens on the discard port): each event's
    // delivery records failed tries, for the events page and its redispatch.
    let endpoint = json!({"url": "http://127.0.0.1:9/hook", "event_types": ["payout.created"]});
    api.send(
        api.http
            .post(format!("{base}/v1/webhook_endpoints"))
            .bearer_auth(&api.merchant_key)
            .json(&endpoint),
        "webhook endpoint",
    )
    .await;
    api.deposit(&merchant_id, ETH, 10u128.pow(20)).await;
    api.deposit(&merchant_id, USDC, 10 * HOT_WALLET_USDC).await;
    let mut payout_ids = Vec::new();

    // Near-duplicates (same merchant, destination, asset, amount) until two wait for review.
    let mut near_duplicates = Vec::new();
    let held = loop {
        assert!(
            near_duplicates.len() < NEAR_DUPLICATES_MAX,
            "{NEAR_DUPLICATES_MAX} near-duplicates and not two of them held for review"
        );
        let id = api
            .create_payout(
                &format!("dashboard-review-{:04}", near_duplicates.len() + 1),
                ETH,
                1_111,
                REVIEW_RECIPIENT,
                json!({"purpose": "review"}),
            )
            .await;
        near_duplicates.push(id);
        if near_duplicates.len() < 2 {
            continue;
        }
        let mut held = Vec::new();
        for id in &near_duplicates {
            if api.status_after(id, &["requested"]).await == "held_for_review" {
                held.push(id.clone());
            }
        }
        if held.len() >= 2 {
            break held;
        }
    };
    payout_ids.extend(near_duplicates.iter().cloned());
    let (review_payout_id, reject_payout_id) = (held[0].clone(), held[1].clone());

    let xss_payout_id = api
        .create_payout(
            "dashboard-xss-0001",
            ETH,
            2_222,
            XSS_RECIPIENT,
            json!({"note": XSS_SCRIPT, "label": XSS_ATTRIBUTE}),
        )
        .await;
    payout_ids.push(xss_payout_id.clone());
    let stored = api.payout(&xss_payout_id).await;
    assert_eq!(
        stored["metadata"]["note"], XSS_SCRIPT,
        "the API stores the metadata as given: {stored}"
    );
    let xss_tx_hash = api.first_tx_hash(&xss_payout_id).await;

    // More tokens than the hot wallet holds: the transfer reverts, the payout waits for a person
    // with a `reverted` incident, the hold kept.
    let attention_payout_id = api
        .create_payout(
            "dashboard-attention-0001",
            USDC,
            HOT_WALLET_USDC + 1,
            ATTENTION_RECIPIENT,
            json!({}),
        )
        .await;
    payout_ids.push(attention_payout_id.clone());
    let status =
        api.status_after(&attention_payout_id, &["requested", "approved", "processing"]).await;
    assert_eq!(status, "needs_attention", "a reverted transfer waits for a person");
    let incident = api
        .open_incidents()
        .await
        .into_iter()
        .find(|i| i["payout_id"] == attention_payout_id.as_str() && i["kind"] == "reverted")
        .unwrap_or_else(|| panic!("no reverted incident for {attention_payout_id}"));
    let incident_id = incident["id"].as_str().unwrap().to_owned();
    // The "failed" verdict needs the revert in a final block: two more blocks on top of it.
    let head = anvil.rpc().block_number().await.unwrap();
    while anvil.rpc().block_number().await.unwrap() < head + 2 {
        tokio::time::sleep(POLL).await;
    }

    // More than a page of payouts (amounts differ: no near-duplicates), paid in the background.
    for n in 0..FILLER_PAYOUTS {
        payout_ids.push(
            api.create_payout(
                &format!("dashboard-page-{n:04}"),
                ETH,
                10_000 + n,
                FILLER_RECIPIENT,
                json!({"n": n.to_string()}),
            )
            .await,
        );
    }

    let fixture = json!({
        "review_payout_id": review_payout_id,
        "reject_payout_id": reject_payout_id,
        "xss_payout_id": xss_payout_id,
        "xss_tx_hash": xss_tx_hash,
        "attention_payout_id": attention_payout_id,
        "incident_id": incident_id,
        "payout_ids": payout_ids,
        "merchant_id": merchant_id,
    });
    let screenshots = workspace().join("target/dashboard-screenshots").join(store);
    let env = [
        ("BASE_URL", base.clone()),
        ("OPERATOR_KEY", OPERATOR_KEY.to_owned()),
        ("SCREENSHOT_DIR", screenshots.display().to_string()),
        ("AXE_PATH", tools.axe.display().to_string()),
        ("FIXTURE", fixture.to_string()),
    ];
    let mut shown = fixture.clone();
    shown["payout_ids"] = json!(format!("{} ids", payout_ids.len()));
    let _ = writeln!(
        std::io::stderr(),
        "[dashboard {store}] payoutd serve at {base}; fixture {shown}; screenshots in {}",
        screenshots.display()
    );
    let (passed, lines) = tokio::task::block_in_place(|| run_browser(&tools, store, &env));
    let failures: Vec<&String> = lines.iter().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        passed,
        "the browser run failed on {store} ({} failing check(s)):\n{}",
        failures.len(),
        failures.iter().map(|l| l.as_str()).collect::<Vec<_>>().join("\n")
    );

    // What the browser did, read back through the API.
    assert_eq!(
        api.status(&review_payout_id).await,
        "paid",
        "approved in the browser, paid on chain"
    );
    assert_eq!(api.status(&reject_payout_id).await, "rejected");
    assert!(
        ["failed", "paid", "processing"].contains(&api.status(&attention_payout_id).await.as_str()),
        "resolved in the browser"
    );
    assert!(
        api.open_incidents().await.iter().all(|i| i["id"] != incident_id.as_str()),
        "the incident was resolved in the browser"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

payoutd_testkit::both_stores!(the_dashboard_works_in_a_real_browser);
