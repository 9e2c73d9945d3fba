//! The database roles on PostgreSQL: the schema's owner migrates; every other command runs as the role ops/postgres/runtime-role.sql makes, which moves money and can neither change the schema, disable the ledger's append-only triggers nor truncate.

use std::process::Output;

use crate::support::payoutd_at as payoutd;

use payoutd_domain::{
    Amount, AssetCode, Destination, EvmAddress, MerchantId, Metadata, PayoutKey, PayoutRequest,
};
use payoutd_engine::{Engine, SystemClock};
use payoutd_testkit::db;

const USDC: &str = "evm:31337/USDC";

fn json_of(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "payoutd failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// The statements of ops/postgres/runtime-role.sql, for `role`, comments left out.
fn runtime_role_grants(role: &str) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../ops/postgres/runtime-role.sql");
    let text = std::fs::read_to_string(path).unwrap();
    let code: String =
        text.lines().filter(|l| !l.trim_start().starts_with("--")).collect::<Vec<_>>().join("\n");
    code.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.replace("payoutd_runtime", role))
        .collect()
}

/// `url` with `role` as its user (the test cluster trusts local connections).
fn as_role(url: &str, role: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (_, host_and_db) = rest.split_once('@').unwrap();
    format!("{scheme}://{role}@{host_and_db}")
}

/// The CLI and the engine run as the runtime role: a merchant, a deposit, a payout. The role is
/// refused each change an attacker holding a runtime host would want: a column added, the ledger's
/// trigger disabled, a table truncated, dropped or created, a journal deleted or rewritten, the
/// migrations' record rewritten. The owner still can, so the control is the role. (Before, every
/// process migrated at start and so needed the owner: the runtime role could not start at all.)
#[tokio::test]
async fn a_runtime_role_moves_money_and_cannot_change_the_schema_its_triggers_or_truncate() {
    let owner = db::fresh_postgres().await;
    let role = format!("payoutd_rt_{}", uuid::Uuid::new_v4().simple());
    owner.exec_raw(&format!("CREATE ROLE {role} LOGIN")).await.unwrap();
    for grant in runtime_role_grants(&role) {
        owner.exec_raw(&grant).await.unwrap_or_else(|e| panic!("{grant}: {e}"));
    }
    let url = as_role(owner.url(), &role);

    let merchant = json_of(&payoutd(&url, &["merchant", "create", "runtime role"]));
    let id = merchant["id"].as_str().unwrap();
    let deposit = ["deposit", "--merchant", id, "--asset", USDC, "--amount", "1000"];
    json_of(&payoutd(&url, &[&deposit[..], &["--idempotency-key", "rt-1"]].concat()));
    let runtime = db::postgres_at(&url).await;
    let engine = Engine::new(
        runtime.store(),
        std::sync::Arc::new(SystemClock),
        payoutd_domain::AssetRegistry::local_development(),
    );
    let request = PayoutRequest::new(
        PayoutKey::parse("rt-payout-1").unwrap(),
        AssetCode::parse(USDC).unwrap().0,
        Amount::from_u128(400),
        Destination::Evm(EvmAddress::parse("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed").unwrap()),
        Metadata::empty(),
    );
    engine.create_payout(&MerchantId::parse(id).unwrap(), request).await.unwrap();
    assert_eq!(runtime.scalar_raw("SELECT count(*) FROM payouts").await, 1);

    for forbidden in [
        "ALTER TABLE payouts ADD COLUMN forged TEXT",
        "ALTER TABLE journals DISABLE TRIGGER journals_append_only",
        "ALTER TABLE ledger_entries DISABLE TRIGGER ALL",
        "TRUNCATE journals CASCADE",
        "TRUNCATE payouts CASCADE",
        "DROP TABLE ledger_entries",
        "CREATE TABLE forged (id TEXT)",
        "DELETE FROM journals",
        "UPDATE ledger_entries SET amount = 1",
        "DELETE FROM _sqlx_migrations",
    ] {
        let refused = runtime.exec_raw(forbidden).await.err().unwrap_or_default();
        assert!(
            ["permission denied", "must be owner", "append-only"]
                .iter()
                .any(|w| refused.contains(w)),
            "the runtime role was allowed: {forbidden} ({refused:?})"
        );
    }
    assert_eq!(runtime.scalar_raw("SELECT count(*) FROM journals").await, 2, "deposit and hold");
    owner.exec_raw("ALTER TABLE journals DISABLE TRIGGER journals_append_only").await.unwrap();
    owner.exec_raw("ALTER TABLE journals ENABLE TRIGGER journals_append_only").await.unwrap();
    drop(runtime);
    let sessions = format!(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = '{role}'"
    );
    owner.scalar_raw(&sessions).await;
    owner.exec_raw(&format!("DROP OWNED BY {role}")).await.unwrap();
    owner.exec_raw(&format!("DROP ROLE {role}")).await.unwrap();
}
