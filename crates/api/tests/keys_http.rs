//! Merchants' API keys over HTTP on both stores: several per merchant, revocation refused at once.

use std::sync::Arc;

use payoutd_api::AppState;
use payoutd_domain::{ApiKey, AssetRegistry};
use payoutd_engine::{Engine, SystemClock};
use payoutd_testkit::{TestDb, both_stores};
use reqwest::StatusCode;
use serde_json::Value;

const OPERATOR_KEY: &str = "op_test_key_0123456789abcdef";

async fn serve(engine: &Engine) -> String {
    let state = AppState::new(engine.clone(), Some(&ApiKey::presented(OPERATOR_KEY)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        payoutd_api::serve(listener, state, std::future::pending()).await.unwrap()
    });
    base
}

#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn a_merchant_holds_several_keys_and_a_revoked_one_is_refused_at_once_everywhere(db: TestDb) {
    let engine = Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
    // Two processes' worth of API servers over one database.
    let (one, two) = (
        serve(&engine).await,
        serve(&Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development()))
            .await,
    );
    let http = reqwest::Client::new();
    let (merchant, first) = engine.create_merchant("keys", [1; 32]).await.unwrap();
    let balances = |base: &str, key: &str| {
        http.get(format!("{base}/v1/balances")).bearer_auth(key.to_owned()).send()
    };

    let created: Value = {
        let r = http
            .post(format!("{one}/v1/merchants/{merchant}/api_keys"))
            .bearer_auth(OPERATOR_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
        r.json().await.unwrap()
    };
    let second = created["api_key"].as_str().unwrap().to_owned();
    let second_id = created["id"].as_str().unwrap().to_owned();
    assert!(second.starts_with("pk_") && second_id.starts_with("key_"));
    for base in [&one, &two] {
        assert_eq!(balances(base, first.expose()).await.unwrap().status(), StatusCode::OK);
        assert_eq!(
            balances(base, &second).await.unwrap().status(),
            StatusCode::OK,
            "both keys work"
        );
    }
    // Warm both servers with the key, then revoke it through one of them.
    let r = http
        .delete(format!("{one}/v1/api_keys/{second_id}"))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    for base in [&one, &two] {
        assert_eq!(
            balances(base, &second).await.unwrap().status(),
            StatusCode::UNAUTHORIZED,
            "revoked: refused at once by {base}"
        );
        assert_eq!(
            balances(base, first.expose()).await.unwrap().status(),
            StatusCode::OK,
            "the other key still works"
        );
    }
    let r = http
        .delete(format!("{two}/v1/api_keys/{second_id}"))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "revoking twice finds nothing to revoke");

    let listed: Value = http
        .get(format!("{one}/v1/merchants/{merchant}/api_keys"))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let keys = listed["data"].as_array().unwrap();
    assert_eq!(keys.len(), 2);
    assert!(keys.iter().all(|k| k.get("api_key").is_none()), "listing never shows a key");
    assert_eq!(keys.iter().filter(|k| k["revoked_at_ms"].is_i64()).count(), 1);
    assert_eq!(
        keys[0]["id"].as_str().unwrap(),
        first.hash().id().as_str(),
        "the first key's id is derived from its hash"
    );
    let at_rest = db
        .scalar_raw(&format!("SELECT count(*) FROM api_keys WHERE key_hash = '{}'", first.expose()))
        .await;
    assert_eq!(at_rest, 0, "keys are stored hashed");
}

async fn only_the_operator_manages_keys_and_bad_ids_change_nothing(db: TestDb) {
    let engine = Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
    let base = serve(&engine).await;
    let http = reqwest::Client::new();
    let (merchant, key) = engine.create_merchant("keys", [1; 32]).await.unwrap();
    let r = http
        .post(format!("{base}/v1/merchants/{merchant}/api_keys"))
        .bearer_auth(key.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "a merchant key cannot mint keys");
    for path in [
        "/v1/merchants/mer_00000000000000000000000000000000/api_keys",
        "/v1/merchants/nonsense/api_keys",
    ] {
        let r = http.post(format!("{base}{path}")).bearer_auth(OPERATOR_KEY).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
    let r = http
        .delete(format!("{base}/v1/api_keys/key_nope"))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(db.scalar_raw("SELECT count(*) FROM api_keys").await, 1, "nothing was created");
    assert_eq!(
        db.scalar_raw("SELECT count(*) FROM api_keys WHERE revoked_at_ms IS NOT NULL").await,
        0,
        "nothing was revoked"
    );
}

both_stores!(
    a_merchant_holds_several_keys_and_a_revoked_one_is_refused_at_once_everywhere,
    only_the_operator_manages_keys_and_bad_ids_change_nothing,
);
