//! `payoutd merchant key ...` on both stores: create, list and revoke keys from the command line;
//! bad input gets a message and a failing exit code and changes nothing.

use std::process::Output;

use crate::support::payoutd;

use payoutd_testkit::{TestDb, both_stores};
use serde_json::Value;

fn json_lines(out: &Output) -> Vec<Value> {
    assert!(out.status.success(), "payoutd failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

async fn keys_are_created_listed_and_revoked_from_the_command_line(db: TestDb) {
    let merchant = json_lines(&payoutd(&db, &["merchant", "create", "cli keys"])).remove(0);
    let merchant_id = merchant["id"].as_str().unwrap();
    let created = json_lines(&payoutd(&db, &["merchant", "key", "create", merchant_id])).remove(0);
    let key_id = created["id"].as_str().unwrap();
    assert!(created["api_key"].as_str().unwrap().starts_with("pk_"));
    let listed = json_lines(&payoutd(&db, &["merchant", "key", "list", merchant_id]));
    assert_eq!(listed.len(), 2, "the first key and the new one");
    assert!(listed.iter().all(|k| k.get("api_key").is_none()));

    let revoked = json_lines(&payoutd(&db, &["merchant", "key", "revoke", key_id])).remove(0);
    assert_eq!(revoked["revoked"], true);
    let again = payoutd(&db, &["merchant", "key", "revoke", key_id]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("not already revoked"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    for (args, says) in [
        (vec!["merchant", "key", "revoke", "nonsense"], "is not an API key id"),
        (vec!["merchant", "key", "create", "mer_00000000000000000000000000000000"], "no merchant"),
        (vec!["merchant", "key", "create", "acme"], "is not a merchant id"),
    ] {
        let out = payoutd(&db, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        db.scalar_raw("SELECT count(*) FROM api_keys").await,
        2,
        "bad input created nothing"
    );
    assert_eq!(
        db.scalar_raw("SELECT count(*) FROM api_keys WHERE revoked_at_ms IS NOT NULL").await,
        1
    );
    // The audit log holds what the command line did, once each, and nothing for what it refused.
    // (Before, only the dashboard's actions reached it.)
    let audited = |action: &str, subject: &str| {
        format!(
            "SELECT count(*) FROM operator_actions WHERE action = '{action}' AND subject = '{subject}' AND actor LIKE 'cli (%'"
        )
    };
    // The merchant's creation with its first key is one too (before, it left no record).
    assert_eq!(db.scalar_raw(&audited("create_merchant", merchant_id)).await, 1);
    assert_eq!(db.scalar_raw(&audited("create_api_key", merchant_id)).await, 1);
    assert_eq!(db.scalar_raw(&audited("revoke_api_key", key_id)).await, 1);
    assert_eq!(db.scalar_raw("SELECT count(*) FROM operator_actions").await, 3);
}

both_stores!(keys_are_created_listed_and_revoked_from_the_command_line);
