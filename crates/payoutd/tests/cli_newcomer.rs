//! What a newcomer meets first, on the real binary: a server without a rail says so and refuses the
//! payouts nothing could pay (with the reason), start-up names each chain, hot wallet, balance and
//! cap, the operator commands that need only the database run without any rail or key, the hot
//! wallets' addresses are one command away, and the help names what serve reads.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};

use payoutd_testkit::db::fresh_sqlite;
use payoutd_testkit::{ANVIL_KEY_0, Anvil, AnvilOptions, TestDb, both_stores};
use serde_json::{Value, json};

const OPERATOR_KEY: &str = "newcomer-operator-key-0123456789";
/// anvil's first account, whose key is ANVIL_KEY_0.
const ANVIL_ADDRESS_0: &str = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266";
const RECIPIENT: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";

fn payoutd(db_url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_payoutd"));
    command
        .args(args)
        .env("PAYOUTD_DATABASE_URL", db_url)
        .env("PAYOUTD_LOG", "info")
        .env("NO_COLOR", "1")
        .env_remove("PAYOUTD_CONFIG");
    command
}

fn run(db_url: &str, args: &[&str]) -> Output {
    payoutd(db_url, args).output().expect("run payoutd")
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "payoutd failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn config_file(text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir()
        .join(format!("payoutd-newcomer-{}.toml", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, text).unwrap();
    path
}

fn key_file() -> std::path::PathBuf {
    let path = std::env::temp_dir()
        .join(format!("payoutd-newcomer-key-{}", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, ANVIL_KEY_0).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap(); // payoutd refuses a key others can read
    path
}

/// A merchant with 1,000,000 base units of ETH available; its API key.
fn funded_merchant(db_url: &str) -> String {
    let merchant = json_of(&run(db_url, &["merchant", "create", "newcomer"]));
    let id = merchant["id"].as_str().unwrap();
    json_of(&run(
        db_url,
        &[
            "deposit",
            "--merchant",
            id,
            "--asset",
            "evm:31337/ETH",
            "--amount",
            "1000000",
            "--idempotency-key",
            "dep-1",
        ],
    ));
    merchant["api_key"].as_str().unwrap().to_owned()
}

/// A running `payoutd serve`; its log is read once it is stopped.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(db_url: &str, config: Option<&std::path::Path>) -> Server {
        Server::start_with(db_url, config, &[])
    }

    fn start_with(db_url: &str, config: Option<&std::path::Path>, flags: &[&str]) -> Server {
        let mut command = payoutd(db_url, &["serve", "--listen", "127.0.0.1:0"]);
        command.args(flags);
        command
            .env("PAYOUTD_OPERATOR_KEY", OPERATOR_KEY)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(path) = config {
            command.env("PAYOUTD_CONFIG", path);
        }
        let mut child = command.spawn().expect("spawn payoutd serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let listening: Value = serde_json::from_str(&line).unwrap_or_else(|_| {
            let mut log = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut log);
            panic!("payoutd serve did not start: {log}")
        });
        Server { child, base: format!("http://{}", listening["listening"].as_str().unwrap()) }
    }

    async fn create_payout(&self, api_key: &str, asset: &str, key: &str) -> (u16, Value) {
        let answer = reqwest::Client::new()
            .post(format!("{}/v1/payouts", self.base))
            .bearer_auth(api_key)
            .json(&json!({"asset": asset, "amount": "1000", "destination": RECIPIENT, "idempotency_key": key}))
            .send()
            .await
            .unwrap();
        (answer.status().as_u16(), answer.json().await.unwrap())
    }

    /// Stops the server and returns everything it logged.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut log = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
        log
    }
}

async fn a_server_without_a_rail_says_so_and_refuses_every_payout_with_the_reason(db: TestDb) {
    let api_key = funded_merchant(db.url());
    let server = Server::start(db.url(), None);
    let (status, problem) =
        server.create_payout(&api_key, "evm:31337/ETH", "newcomer-payout-1").await;
    let log = server.stop();
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["type"], "https://payoutd.dev/problems/asset-not-payable");
    assert!(problem["detail"].as_str().unwrap().contains("no rail is configured"), "{problem}");
    assert_eq!(db.scalar_raw("SELECT count(*) FROM payouts").await, 0, "nothing written");
    assert!(log.contains("no rail is configured"), "start-up says it: {log}");
    assert!(
        log.contains("the built-in development assets"),
        "start-up names the assets' source: {log}"
    );
    assert!(log.contains("no [[caps]]"), "start-up says no cap is in force: {log}");
    assert!(!log.contains("sqlx::postgres::notice"), "no migration notices: {log}");
    // PostgreSQL without autovacuum is named at start (this machine's test server runs without it).
    let autovacuum_off = db.is_postgres()
        && db
            .scalar_raw(
                "SELECT count(*) FROM pg_settings WHERE name = 'autovacuum' AND setting = 'off'",
            )
            .await
            == 1;
    assert_eq!(log.contains("autovacuum = off"), autovacuum_off, "{log}");
    // An API-only process (workers pay elsewhere) accepts them, and says so.
    let api_only = Server::start_with(db.url(), None, &["--api-only"]);
    let (status, payout) =
        api_only.create_payout(&api_key, "evm:31337/ETH", "newcomer-payout-1").await;
    let log = api_only.stop();
    assert_eq!(status, 201, "{payout}");
    assert!(log.contains("API only"), "{log}");
    // Once a worker registered that address as a hot wallet, an API-only process refuses payouts to
    // it, though it reads no rail. (Before, only `serve` with its rails refused them.)
    let recipient = payoutd_domain::EvmAddress::parse(RECIPIENT).unwrap();
    db.evm_lines().ensure_hot_wallet(31_337, &recipient, 0).await.unwrap();
    let api_only = Server::start_with(db.url(), None, &["--api-only"]);
    let (status, problem) =
        api_only.create_payout(&api_key, "evm:31337/ETH", "newcomer-payout-2").await;
    api_only.stop();
    assert_eq!(
        (status, problem["type"].as_str()),
        (422, Some("https://payoutd.dev/problems/destination-is-hot-wallet")),
        "{problem}"
    );
}

async fn operator_commands_run_without_a_rail_or_its_keys(db: TestDb) {
    let config = config_file(
        "[[chains]]\nchain_id = 31337\nrpc_url = \"http://127.0.0.1:9\"\nhot_wallet_key_envs = [\"PAYOUTD_NEWCOMER_NO_SUCH_KEY\"]\n",
    );
    let config = config.to_str().unwrap();
    let incidents = run(db.url(), &["--config", config, "incidents"]);
    assert!(incidents.status.success(), "{}", String::from_utf8_lossy(&incidents.stderr));
    let absent = format!("po_{}", uuid::Uuid::new_v4().simple());
    for action in ["approve", "reject"] {
        let out = run(db.url(), &["--config", config, "payout", action, &absent]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("no such payout"),
            "{action} reached the database without the rail: {stderr}"
        );
        assert!(
            !stderr.contains("PAYOUTD_NEWCOMER_NO_SUCH_KEY"),
            "{action} needs no key: {stderr}"
        );
    }
    // Signing a cancel does need the rail, and says which key is missing.
    let cancel = run(db.url(), &["--config", config, "payout", "cancel", &absent]);
    assert_eq!(cancel.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&cancel.stderr).contains("PAYOUTD_NEWCOMER_NO_SUCH_KEY"),
        "{}",
        String::from_utf8_lossy(&cancel.stderr)
    );
    // Migrating twice on PostgreSQL prints no notices.
    let again = run(db.url(), &["migrate"]);
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).is_empty(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

both_stores!(
    a_server_without_a_rail_says_so_and_refuses_every_payout_with_the_reason,
    operator_commands_run_without_a_rail_or_its_keys
);

#[tokio::test]
async fn start_up_names_the_chain_its_hot_wallet_balance_and_caps_and_refuses_an_asset_without_a_token()
 {
    let db = fresh_sqlite().await;
    let anvil = Anvil::start(AnvilOptions::default());
    let key = key_file();
    let config = config_file(&format!(
        "[[chains]]\nchain_id = 31337\nrpc_url = {:?}\nfinality_confirmations = 2\nhot_wallet_key_files = [{:?}]\n\n\
         [[caps]]\nasset = \"evm:31337/ETH\"\nper_destination_per_hour = \"5000\"\nper_wallet_per_hour = \"90000\"\n",
        anvil.url(),
        key.to_str().unwrap()
    ));
    let api_key = funded_merchant(db.url());
    let server = Server::start(db.url(), Some(&config));
    let (usdc, problem) = server.create_payout(&api_key, "evm:31337/USDC", "newcomer-usdc-1").await;
    let (eth, payout) = server.create_payout(&api_key, "evm:31337/ETH", "newcomer-eth-1").await;
    let log = server.stop();
    assert_eq!(usdc, 422, "{problem}");
    assert_eq!(problem["type"], "https://payoutd.dev/problems/asset-not-payable");
    assert!(problem["detail"].as_str().unwrap().contains("no token address"), "{problem}");
    assert_eq!(eth, 201, "{payout}");
    for says in [
        "EVM chain",
        "2 blocks on top of a receipt's block",
        ANVIL_ADDRESS_0,
        "balance_base_units=10000000000000000000000",
        "cap in force",
        "per_wallet_per_hour=90000",
        "no token_address",
    ] {
        assert!(
            log.to_lowercase().contains(&says.to_lowercase()),
            "start-up log lacks {says:?}: {log}"
        );
    }
}

#[test]
fn wallet_list_prints_each_hot_wallet_address_without_asking_a_node() {
    let dir =
        std::env::temp_dir().join(format!("payoutd-newcomer-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let db_url = format!("sqlite://{}", dir.join("payoutd.db").display());
    let key = key_file();
    let config = config_file(&format!(
        "[[chains]]\nchain_id = 31337\nrpc_url = \"http://127.0.0.1:9\"\nhot_wallet_key_files = [{:?}]\n",
        key.to_str().unwrap()
    ));
    let out = run(&db_url, &["--config", config.to_str().unwrap(), "wallet", "list"]);
    let row = json_of(&out);
    assert_eq!(
        (row["rail"].as_str(), row["chain"].as_str()),
        (Some("evm"), Some("31337")),
        "{row}"
    );
    assert_eq!(row["address"].as_str().unwrap().to_lowercase(), ANVIL_ADDRESS_0, "{row}");
    let none = run(&db_url, &["wallet", "list"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no hot wallet is configured"));
}

#[test]
fn serve_help_names_every_environment_variable_it_reads() {
    let out =
        Command::new(env!("CARGO_BIN_EXE_payoutd")).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for var in [
        "PAYOUTD_LISTEN",
        "PAYOUTD_DATABASE_URL",
        "PAYOUTD_CONFIG",
        "PAYOUTD_OPERATOR_KEY",
        "PAYOUTD_REDIS_URL",
        "PAYOUTD_LOG",
        "PAYOUTD_LOG_FORMAT",
    ] {
        assert!(help.contains(var), "serve --help lacks {var}: {help}");
    }
    assert!(!help.to_lowercase().contains("issue"), "{help}");
}
