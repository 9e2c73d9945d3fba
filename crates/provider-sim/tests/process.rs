//! The simulator as a process (`payoutd-provider-sim stripe --port 0`): one JSON line when ready, then real HTTP and the control endpoints.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::Value;

#[tokio::test]
async fn the_binary_prints_its_base_url_and_counts_what_it_created() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_payoutd-provider-sim"))
        .args(["stripe", "--port", "0", "--api-key", "sk_test_process"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the simulator");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let ready: Value = serde_json::from_str(&line).expect("one JSON line");
    let base = ready["base_url"].as_str().expect("base_url").to_owned();
    let http = reqwest::Client::new();
    let form = [
        ("amount", "1234"),
        ("currency", "usd"),
        ("destination", "acct_1Nv0FGQ9RKHgCVdK"),
        ("transfer_group", "po_process-1"),
    ];
    for _ in 0..2 {
        let created = http
            .post(format!("{base}/v1/transfers"))
            .bearer_auth("sk_test_process")
            .header("Idempotency-Key", "k-process-1")
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 200);
    }
    let refused = http
        .post(format!("{base}/v1/transfers"))
        .bearer_auth("sk_wrong")
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let stats: Value =
        http.get(format!("{base}/_sim/stats")).send().await.unwrap().json().await.unwrap();
    assert_eq!(stats["created"], 1, "{stats}");
    assert_eq!(stats["by_reference"]["po_process-1"], 1, "{stats}");
    child.kill().unwrap();
    child.wait().unwrap();
}
