//! Every request each adapter sends and every answer each simulator gives, checked against the provider's own published description (tools/provider-specs/validate.py).

use std::path::{Path, PathBuf};
use std::process::Command;

use payoutd_domain::{
    Amount, MerchantId, Metadata, Payout, PayoutId, PayoutKey, PayoutRequest, PayoutStatus,
};
use payoutd_provider_sim::{ProviderKind, ProviderSim, RecordedRequest};
use payoutd_rail_provider::{CallError, our_reference};
use serde_json::json;

use crate::support::{Setup, api_of, asset_of, destination_of, kind_name};

/// Generous: the simulator answers at once, and nothing here tests a timeout.
const CLIENT_TIMEOUT_MS: u64 = 5_000;
/// The simulators' control endpoints: ours, not the provider's, so no spec describes them.
const SIM_CONTROL_PREFIX: &str = "/_sim";

/// A payout as the engine hands it to the rail (no store needed: the adapter reads only these fields).
fn payout(kind: ProviderKind, key: &str, amount: u128, now_ms: i64) -> Payout {
    let (asset, destination) = (asset_of(kind), destination_of(kind));
    let request = PayoutRequest::new(
        PayoutKey::parse(key).unwrap(),
        asset.code.clone(),
        Amount::from_u128(amount),
        destination,
        Metadata::empty(),
    );
    Payout {
        id: PayoutId::new(),
        merchant_id: MerchantId::new(),
        key: request.key.clone(),
        fingerprint: request.fingerprint(),
        asset: asset.code,
        amount: Amount::from_u128(amount),
        network_fee: Amount::ZERO,
        destination,
        metadata: Metadata::empty(),
        status: PayoutStatus::Processing,
        version: 1,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
    }
}

/// An id of the provider's own shape that the simulator never issued.
fn unknown_id(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Stripe => "tr_1NoSuchTransferXXXXXXXXX",
        ProviderKind::Coinbase => "transfer_00000000-0000-4000-8000-000000000000",
        ProviderKind::Bridge => "00000000-0000-4000-8000-000000000000",
        ProviderKind::Circle => "00000000-0000-4000-8000-000000000000",
    }
}

/// Drives the adapter through every call it makes, against the simulator, and returns what the
/// simulator recorded (requests with their answers), control calls left out.
async fn exchanges(kind: ProviderKind) -> Vec<RecordedRequest> {
    let sim = ProviderSim::start(kind).await;
    let api = api_of(kind, &sim, Setup::Working, CLIENT_TIMEOUT_MS);
    let now = i64::try_from(sim.now_ms()).unwrap();

    // Create, then the same create replayed with the same key: the same transfer.
    let first = payout(kind, "conformance-0001", 12_340_000, now);
    let reference = our_reference(&first.id, 1);
    let body = api.request_for(&first, &reference).unwrap();
    let key = uuid::Uuid::new_v4().to_string();
    let created = api.create(&key, &body).await.expect("create").transfer;
    let replayed = api.create(&key, &body).await.expect("the same create replayed").transfer;
    assert_eq!(replayed.id, created.id, "a replay with the same key answers the same transfer");

    api.get(&created.id).await.expect("get by id");
    let found = api
        .find_by_reference(&reference, &body, crate::support::created_from(now))
        .await
        .expect("find by our reference");
    assert!(found.iter().any(|t| t.id == created.id), "found by reference: {found:?}");

    // The reconciliation start (no cursor yet), then a transfer after it, read with the cursor.
    let cursor = api
        .starting_cursor(i64::try_from(sim.now_ms()).unwrap())
        .await
        .expect("the starting cursor");
    let second = payout(kind, "conformance-0002", 5_000_000, now);
    let second_body = api.request_for(&second, &our_reference(&second.id, 1)).unwrap();
    let second_created = api
        .create(&uuid::Uuid::new_v4().to_string(), &second_body)
        .await
        .expect("second create")
        .transfer;
    let page = api.transfers_after(&cursor).await.expect("transfers_after with cursor");
    assert!(
        page.transfers.iter().any(|t| t.id == second_created.id),
        "the page after the cursor: {page:?}"
    );

    // A create the provider refuses (4xx), and a lookup of an id it never issued (404).
    let refused_api = api_of(kind, &sim, Setup::Refused, CLIENT_TIMEOUT_MS);
    let refused = payout(kind, "conformance-0003", 3_000_000, now);
    let refused_body = refused_api.request_for(&refused, &our_reference(&refused.id, 1)).unwrap();
    let refusal = refused_api.create(&uuid::Uuid::new_v4().to_string(), &refused_body).await;
    assert!(matches!(refusal, Err(CallError::Refused(_))), "{refusal:?}");
    let missing = api.get(unknown_id(kind)).await;
    assert!(matches!(missing, Err(CallError::NotFound(_))), "{missing:?}");

    // The balance check's read of the account, after the two transfers left it.
    let balances = api.balances(&[asset_of(kind)]).await.expect("the account's balance");
    assert_eq!(balances.len(), 1, "one balance per asset asked");

    sim.requests().into_iter().filter(|r| !r.path.starts_with(SIM_CONTROL_PREFIX)).collect()
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Writes the exchanges as JSON lines (validate.py's input) and returns the file.
fn write_exchanges(kind: ProviderKind, recorded: &[RecordedRequest]) -> PathBuf {
    let file = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("conformance-{}.jsonl", kind_name(kind)));
    let lines: Vec<String> = recorded
        .iter()
        .map(|r| {
            json!({
                "provider": kind_name(kind),
                "method": r.method,
                "path": r.path,
                "headers": r.headers,
                "body": r.body,
                "status": r.status,
                "response_body": r.response_body,
            })
            .to_string()
        })
        .collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    file
}

/// Runs validate.py with the venv scripts/install-tools makes; a missing venv fails the test
/// (in CI and locally alike), telling how to make it.
fn validate(file: &Path) -> (bool, String) {
    let root = workspace_root();
    let python = root.join(".tools/venv/bin/python");
    let install = "run scripts/install-tools (it installs openapi-core and Circle's SDK models into .tools/venv)";
    let in_ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let probe = Command::new(&python)
        .args(["-c", "import openapi_core, circle.web3.developer_controlled_wallets"])
        .output();
    match probe {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "{}the validator's packages are missing from {}: {}; {install}",
            if in_ci { "CI: " } else { "" },
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!(
            "{}no Python venv at {} ({e}); {install}",
            if in_ci { "CI: " } else { "" },
            python.display()
        ),
    }
    let out = Command::new(&python)
        .arg(root.join("tools/provider-specs/validate.py"))
        .arg(file)
        .output()
        .unwrap();
    let report =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{report}");
    (out.status.success(), report)
}

async fn conforms(kind: ProviderKind) {
    let recorded = exchanges(kind).await;
    let file = write_exchanges(kind, &recorded);
    let (ok, report) = validate(&file);
    assert!(
        ok,
        "{} exchanges in {} do not match the published description:\n{report}",
        kind_name(kind),
        file.display()
    );
    let summary = report.lines().rfind(|l| l.starts_with("checked=")).unwrap_or_default();
    assert_eq!(
        summary,
        format!("checked={} failed=0 skipped=0", recorded.len()),
        "every exchange is checked:\n{report}"
    );
}

#[tokio::test]
async fn stripe_requests_and_responses_match_stripes_openapi() {
    conforms(ProviderKind::Stripe).await;
}

#[tokio::test]
async fn coinbase_requests_and_responses_match_coinbases_openapi() {
    conforms(ProviderKind::Coinbase).await;
}

#[tokio::test]
async fn circle_requests_and_responses_match_circles_sdk_models() {
    conforms(ProviderKind::Circle).await;
}

/// Bridge publishes no OpenAPI document and no generated SDK: nothing can be checked, and the
/// validator must say so rather than pass the exchanges.
#[tokio::test]
async fn bridge_has_no_published_spec_so_its_exchanges_are_reported_unchecked() {
    let recorded = exchanges(ProviderKind::Bridge).await;
    let file = write_exchanges(ProviderKind::Bridge, &recorded);
    let (ok, report) = validate(&file);
    assert!(ok, "{report}");
    assert!(report.contains("no published spec"), "{report}");
    let summary = report.lines().rfind(|l| l.starts_with("checked=")).unwrap_or_default();
    assert_eq!(summary, format!("checked=0 failed=0 skipped={}", recorded.len()), "{report}");
}
