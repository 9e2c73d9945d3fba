//! The OpenAPI document against the running server: schemathesis (an OpenAPI fuzzer, installed by
//! `scripts/install-tools`) sends generated requests, valid and not, to every documented operation of
//! `payoutd serve`, with a merchant key and with the operator key, and fails on any answer whose
//! status, content type or body the document does not describe, on any schema-valid request the
//! server refuses as malformed, and on any request the document forbids that it accepts
//! (`tests/schemathesis.toml`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Where `scripts/install-tools` puts the fuzzer, relative to the workspace root.
const SCHEMATHESIS_RELATIVE: &str = ".tools/venv/bin/st";
const OPERATOR_KEY: &str = "fuzz-operator-key-0123456789abcdef";
/// Generated cases per operation and phase; a fixed seed makes a failure reproducible.
const EXAMPLES_PER_OPERATION: &str = "15";
const SEED: &str = "20261201";

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The deployment's configuration. A JSON batch of at most 64 lines: its document says so, and the
/// fuzzer's boundary cases (the longest batch and one line more) stay requests of 64 and 65 lines,
/// not of thousands (the default limit's boundary is the batch tests' own).
const CONFIG: &str = "batch_lines_max = 64\n";

fn payoutd(dir: &Path) -> Command {
    let db_url = format!("sqlite://{}", dir.join("payoutd.db").display());
    let mut command = Command::new(env!("CARGO_BIN_EXE_payoutd"));
    command
        .env("PAYOUTD_CONFIG", dir.join("payoutd.toml"))
        .env("PAYOUTD_DATABASE_URL", db_url)
        .env("PAYOUTD_OPERATOR_KEY", OPERATOR_KEY)
        .env("PAYOUTD_LOG", "warn");
    command
}

#[test]
fn every_answer_of_the_server_is_in_its_openapi_document() {
    let st = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(SCHEMATHESIS_RELATIVE);
    assert!(st.is_file(), "schemathesis is missing at {}: run scripts/install-tools", st.display());
    let dir = std::env::temp_dir().join(format!("payoutd-fuzz-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("payoutd.toml"), CONFIG).unwrap();
    let created = payoutd(&dir).args(["merchant", "create", "fuzz"]).output().unwrap();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let merchant: serde_json::Value = serde_json::from_slice(&created.stdout).unwrap();
    let merchant_key = merchant["api_key"].as_str().unwrap().to_owned();
    // API only: payouts in every configured asset are accepted, so their 201 answers are fuzzed too.
    let mut child = payoutd(&dir)
        .args(["serve", "--listen", "127.0.0.1:0", "--api-only"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first_line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first_line).unwrap();
    let server = Server(child);
    let listening: serde_json::Value = serde_json::from_str(&first_line).expect("the serve line");
    let schema = format!("http://{}/openapi.json", listening["listening"].as_str().unwrap());
    // The merchant's and the operator's runs side by side: each is one Python process, so together
    // they use both cores; every answer either may meet is still one the document lists.
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis.toml");
    let runs: Vec<_> = [merchant_key.as_str(), OPERATOR_KEY]
        .into_iter()
        .map(|key| {
            Command::new(&st)
                .arg("--config-file")
                .arg(&config)
                .args(["run", &schema])
                .args(["--max-examples", EXAMPLES_PER_OPERATION, "--seed", SEED, "--no-color"])
                .args(["-H", &format!("Authorization: Bearer {key}")])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in runs {
        let run = child.wait_with_output().unwrap();
        let report = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success(),
            "schemathesis found answers the document does not describe:\n{report}"
        );
        assert!(report.contains(" passed"), "schemathesis generated no cases:\n{report}");
    }
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}
