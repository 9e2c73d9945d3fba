//! `payoutd webhooks reseal` on both stores: the secrets written in clear are sealed under the configured key, a second run rewrites nothing, and without a key the command fails with a message and changes nothing.

use std::process::{Command, Output};

use payoutd_domain::webhook::WEBHOOK_SECRET_RANDOM_BYTES;
use payoutd_domain::{EndpointOwner, EventFilter, WebhookEndpointId, WebhookSecret, WebhookUrl};
use payoutd_engine::webhook_store::WebhookEndpoint;
use payoutd_testkit::{TestDb, both_stores};

const KEY_HEX: &str = "0101010101010101010101010101010101010101010101010101010101010101";

fn payoutd(db: &TestDb, key: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_payoutd"));
    command
        .args(args)
        .env("PAYOUTD_DATABASE_URL", db.url())
        .env("PAYOUTD_LOG", "warn")
        .env_remove("PAYOUTD_WEBHOOK_SECRETS_KEY");
    if let Some(key) = key {
        command.env("PAYOUTD_WEBHOOK_SECRETS_KEY", key);
    }
    command.output().expect("run payoutd")
}

async fn secrets_written_in_clear_are_resealed_from_the_command_line(db: TestDb) {
    let endpoint = WebhookEndpoint {
        id: WebhookEndpointId::new(),
        owner: EndpointOwner::Operator,
        url: WebhookUrl::parse("https://hooks.example.com/ops").unwrap(),
        filter: EventFilter::parse(std::iter::empty::<&str>()).unwrap(),
        created_at_ms: 1,
    };
    let secret = WebhookSecret::from_random([4; WEBHOOK_SECRET_RANDOM_BYTES]);
    assert!(db.webhooks().create_endpoint(&endpoint, &secret).await.unwrap());
    let in_clear =
        format!("SELECT count(*) FROM webhook_secrets WHERE secret = '{}'", secret.expose());

    let refused = payoutd(&db, None, &["webhooks", "reseal"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("PAYOUTD_WEBHOOK_SECRETS_KEY must be set"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(db.scalar_raw(&in_clear).await, 1, "nothing changed");

    let done = payoutd(&db, Some(KEY_HEX), &["webhooks", "reseal"]);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    assert_eq!(String::from_utf8_lossy(&done.stdout).trim(), r#"{"resealed":1}"#);
    assert_eq!(db.scalar_raw(&in_clear).await, 0, "sealed");
    let again = payoutd(&db, Some(KEY_HEX), &["webhooks", "reseal"]);
    assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), r#"{"resealed":0}"#);
    assert_eq!(db.scalar_raw("SELECT count(*) FROM operator_actions WHERE action = 'webhooks_reseal' AND actor LIKE 'cli (%'").await, 2, "each run is in the audit log");
}

both_stores!(secrets_written_in_clear_are_resealed_from_the_command_line);
