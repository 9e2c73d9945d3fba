//! Payout batches over HTTP on both stores: SPEC 8 item 17 and the batch idempotency cases.

use std::sync::Arc;

use payoutd_api::AppState;
use payoutd_domain::{ApiKey, AssetRegistry, MerchantId};
use payoutd_engine::{Engine, SystemClock};
use payoutd_testkit::{TestDb, both_stores};
use reqwest::StatusCode;
use serde_json::{Value, json};

const OPERATOR_KEY: &str = "op_test_key_0123456789abcdef";
const USDC: &str = "evm:31337/USDC";
const LINES_MAX: usize = 600;
/// CSV lines a batch may hold in these tests: more than two chunks of lines written at once.
const CSV_LINES_MAX: usize = 2_600;

struct Api {
    base: String,
    http: reqwest::Client,
    db: TestDb,
    merchant: MerchantId,
    key: String,
    engine: Engine,
    /// The server's table of CSV uploads under way.
    uploads: Arc<payoutd_api::csv_uploads::CsvUploads>,
}

impl Api {
    async fn start(db: TestDb) -> Api {
        let engine =
            Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
        let mut state = AppState::new(engine.clone(), Some(&ApiKey::presented(OPERATOR_KEY)));
        state.batch_lines_max = LINES_MAX;
        state.csv_batch_lines_max = CSV_LINES_MAX;
        let uploads = state.csv_uploads.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            payoutd_api::serve(listener, state, std::future::pending()).await.unwrap()
        });
        let (merchant, key) = engine.create_merchant("batches", [1; 32]).await.unwrap();
        let key = key.expose().to_owned();
        Api { base, http: reqwest::Client::new(), db, merchant, key, engine, uploads }
    }

    async fn fund(&self, amount: &str, key: &str) {
        let body = json!({"merchant_id": self.merchant.as_str(), "asset": USDC, "amount": amount, "idempotency_key": key});
        let r = self
            .http
            .post(format!("{}/v1/deposits", self.base))
            .bearer_auth(OPERATOR_KEY)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }

    async fn submit_json(&self, body: &Value) -> (StatusCode, Value) {
        let r = self
            .http
            .post(format!("{}/v1/payout_batches", self.base))
            .bearer_auth(&self.key)
            .json(body)
            .send()
            .await
            .unwrap();
        (r.status(), r.json().await.unwrap())
    }

    async fn submit_csv(&self, text: &str) -> (StatusCode, Value) {
        let r = self.post_csv(text).await;
        (r.status(), r.json().await.unwrap())
    }

    async fn post_csv(&self, text: &str) -> reqwest::Response {
        self.http
            .post(format!("{}/v1/payout_batches", self.base))
            .bearer_auth(&self.key)
            .header("content-type", "text/csv")
            .body(text.to_owned())
            .send()
            .await
            .unwrap()
    }

    /// A merchant's read of `path`.
    async fn read(&self, path: &str) -> Value {
        let r = self.http.get(format!("{}{path}", self.base)).bearer_auth(&self.key);
        r.send().await.unwrap().json().await.unwrap()
    }

    async fn payouts(&self) -> i64 {
        self.db.scalar_raw("SELECT count(*) FROM payouts").await
    }
}

fn line(external_id: &str, amount: &str, n: u32) -> Value {
    json!({"external_id": external_id, "asset": USDC, "amount": amount, "destination": format!("0x{:040x}", 0xabc000 + n)})
}

/// SPEC 8 item 17, first half.
async fn a_batch_with_a_duplicate_external_id_is_refused_whole(db: TestDb) {
    let api = Api::start(db).await;
    api.fund("1000", "fund-1").await;
    let body = json!({"payouts": [line("withdrawal-0001", "1", 1), line("withdrawal-0002", "1", 2), line("withdrawal-0001", "2", 3)]});
    let (status, problem) = api.submit_json(&body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert!(problem["type"].as_str().unwrap().ends_with("invalid-batch"));
    assert_eq!(
        problem["errors"],
        json!([{"line": 3, "external_id": "withdrawal-0001", "detail": "external_id repeats line 1"}])
    );
    assert_eq!(api.payouts().await, 0, "nothing was created");
    assert_eq!(api.db.scalar_raw("SELECT count(*) FROM payout_batches").await, 0);
}

/// SPEC 8 item 17, second half: the lines that failed (here: no funds) are created on resubmission,
/// the others come back as they are.
async fn a_resubmitted_batch_creates_only_the_missing_lines(db: TestDb) {
    let api = Api::start(db).await;
    api.fund("30", "fund-1").await;
    let body = json!({"payouts": [line("payroll-0001", "10", 1), line("payroll-0002", "10", 2), line("payroll-0003", "20", 3)]});
    let (status, first) = api.submit_json(&body).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(
        (first["created"].as_u64(), first["existing"].as_u64(), first["failed"].as_u64()),
        (Some(2), Some(0), Some(1))
    );
    // Lines are created a few at a time, so which one found the balance short is not fixed.
    let failed: Vec<&Value> =
        first["lines"].as_array().unwrap().iter().filter(|l| !l["error"].is_null()).collect();
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0]["error"]["type"].as_str().unwrap().ends_with("insufficient-funds"),
        "{first}"
    );
    assert_eq!(api.payouts().await, 2);

    api.fund("20", "fund-2").await;
    let (status, again) = api.submit_json(&body).await;
    assert_eq!(status, StatusCode::OK, "the same batch again: {again}");
    assert_eq!(again["id"], first["id"]);
    assert_eq!(
        (again["created"].as_u64(), again["existing"].as_u64(), again["failed"].as_u64()),
        (Some(1), Some(2), Some(0))
    );
    let kept =
        first["lines"].as_array().unwrap().iter().position(|l| !l["payout"].is_null()).unwrap();
    assert_eq!(
        again["lines"][kept]["payout"]["id"], first["lines"][kept]["payout"]["id"],
        "existing lines come back as they are"
    );
    assert_eq!(api.payouts().await, 3, "only the missing line was created");
    let (_, third) = api.submit_json(&body).await;
    assert_eq!((third["created"].as_u64(), third["existing"].as_u64()), (Some(0), Some(3)));
    assert_eq!(api.payouts().await, 3);

    let id = first["id"].as_str().unwrap();
    let view = api.read(&format!("/v1/payout_batches/{id}")).await;
    assert_eq!(view["lines"].as_array().unwrap().len(), 3);
    assert!(
        view["lines"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["status"] == "requested" && l["error"].is_null()),
        "{view}"
    );
    assert_eq!(view["counts"]["requested"], 3);
    assert!(api.db.store().audit_ledger().await.unwrap().is_clean());
}

async fn csv_batches_and_their_bad_lines(db: TestDb) {
    let api = Api::start(db).await;
    api.fund("1000", "fund-1").await;
    let good = format!(
        "external_id,asset,amount,destination\r\ncsv-line-0001,{USDC},5,0x{:040x}\r\ncsv-line-0002,{USDC},6,0x{:040x}\r\n",
        1, 2
    );
    let (status, created) = api.submit_csv(&good).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["created"], 2);

    let bad = format!(
        "external_id,asset,amount,destination\nshort,{USDC},5,0x{:040x}\ncsv-line-0004,{USDC},-5,0x{:040x}\ncsv-line-0005,{USDC},5\n",
        3, 4
    );
    let (status, problem) = api.submit_csv(&bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let lines: Vec<u64> =
        problem["errors"].as_array().unwrap().iter().map(|e| e["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, vec![1, 2, 3], "every bad line is listed: {problem}");
    let (status, problem) = api.submit_csv("id,asset,amount,to\nx,y,1,z\n").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("external_id,asset,amount,destination"));
    assert_eq!(api.payouts().await, 2, "refused batches created nothing");
}

async fn batch_limits_are_enforced_and_a_large_batch_fits(db: TestDb) {
    let api = Api::start(db).await;
    api.fund("1000000", "fund-1").await;
    let too_many: Vec<Value> =
        (0..=LINES_MAX as u32).map(|n| line(&format!("limit-{n:06}"), "1", n)).collect();
    let (status, problem) = api.submit_json(&json!({"payouts": too_many})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(problem["type"].as_str().unwrap().ends_with("batch-too-large"), "{problem}");
    // 500 lines is well over the 64 KiB of an ordinary request body.
    let many: Vec<Value> = (0..500u32)
        .map(|n| {
            let mut l = line(&format!("bulk-{n:06}"), "1", n);
            l["metadata"] =
                json!({"employee": format!("employee number {n:06} of the payroll run")});
            l
        })
        .collect();
    let body = json!({"payouts": many});
    assert!(body.to_string().len() > 64 * 1024);
    let (status, created) = api.submit_json(&body).await;
    assert_eq!(status, StatusCode::CREATED, "{}", created["detail"]);
    assert_eq!(created["created"], 500);
    assert_eq!(api.payouts().await, 500);
    let (status, _) = api.submit_json(&json!({"payouts": []})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "an empty batch");
}

async fn a_batch_whose_payouts_are_all_final_is_completed_once(db: TestDb) {
    use payoutd_domain::EventType;
    let api = Api::start(db).await;
    api.fund("100", "fund-1").await;
    let body = json!({"payouts": [line("final-0001", "10", 1), line("final-0002", "10", 2), line("final-0003", "1000", 3)]});
    let (status, created) = api.submit_json(&body).await;
    assert_eq!(status, StatusCode::CREATED);
    let store = api.db.webhooks();
    let completed = || async {
        api.db.store().count_events(&api.merchant, EventType::BatchCompleted).await.unwrap()
    };
    assert_eq!(store.complete_batches(1, 100).await.unwrap(), 0, "two payouts are still requested");
    for l in created["lines"].as_array().unwrap().iter().filter(|l| !l["payout"].is_null()) {
        let id = l["payout"]["id"].as_str().unwrap();
        let r = api
            .http
            .post(format!("{}/v1/payouts/{id}/cancel", api.base))
            .bearer_auth(&api.key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    assert_eq!(completed().await, 0);
    assert_eq!(
        store.complete_batches(2, 100).await.unwrap(),
        1,
        "every payout is final (the third line never got one)"
    );
    assert_eq!(store.complete_batches(3, 100).await.unwrap(), 0, "completed once");
    assert_eq!(completed().await, 1);
    // On PostgreSQL a page waits for every older transaction in the cluster (other tests' too).
    let mut payload = String::new();
    for _ in 0..100 {
        let page = store
            .events(&payoutd_engine::webhook_store::EventQuery {
                owner: payoutd_domain::EndpointOwner::Merchant(api.merchant.clone()),
                event_type: Some(EventType::BatchCompleted),
                after: None,
                limit: 10,
            })
            .await
            .unwrap();
        if let Some(e) = page.first() {
            payload = e.payload_json.clone();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let payload: Value = serde_json::from_str(&payload).unwrap();
    assert_eq!(payload["counts"], json!({"canceled": 2, "not_created": 1}), "{payload}");
    assert_eq!(payload["id"], created["id"]);
}

/// A batch is decided line by line, in its order, as single payouts one after the other would be:
/// a line the balance no longer covers is refused and a later smaller one is still created. A batch
/// racing single POSTs with the same keys gives one payout per key, whoever wins each, with the
/// ledger exact. (Before, lines went 8 at a time, so which line found the balance short was not
/// fixed: the first assertion failed on the old code in 7 of 8 runs here.)
async fn a_batch_decides_its_lines_in_order_and_races_single_posts_to_one_payout_per_key(
    db: TestDb,
) {
    let api = Api::start(db).await;
    api.fund("25", "fund-1").await;
    let body = json!({"payouts": [line("order-0001", "10", 1), line("order-0002", "20", 2), line("order-0003", "5", 3), line("order-0004", "10", 4)]});
    let (status, answer) = api.submit_json(&body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let errors: Vec<Option<&str>> = answer["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["error"]["type"].as_str().map(|t| t.rsplit('/').next().unwrap()))
        .collect();
    assert_eq!(errors, [None, Some("insufficient-funds"), None, None], "{answer}");
    let balance = api.db.store().balances(&api.merchant).await.unwrap();
    assert_eq!(
        (balance[0].available.to_string(), balance[0].held.to_string()),
        ("0".to_owned(), "25".to_owned())
    );

    api.fund("100000", "fund-2").await;
    const RACED: u32 = 40;
    let lines: Vec<Value> =
        (0..RACED).map(|n| line(&format!("race-{n:04}"), "7", 100 + n)).collect();
    let batch_body = json!({"payouts": lines.clone()});
    let batch = api.submit_json(&batch_body);
    let singles = futures::future::join_all(lines.iter().map(|l| {
        let single =
            json!({"asset": l["asset"], "amount": l["amount"], "destination": l["destination"]});
        let key = l["external_id"].as_str().unwrap().to_owned();
        let request = api
            .http
            .post(format!("{}/v1/payouts", api.base))
            .bearer_auth(&api.key)
            .header("Idempotency-Key", key)
            .json(&single);
        async move { request.send().await.unwrap().status() }
    }));
    let ((status, answer), statuses) = tokio::join!(batch, singles);
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert!(
        statuses.iter().all(|s| *s == StatusCode::CREATED || *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert!(
        answer["lines"].as_array().unwrap().iter().all(|l| l["error"].is_null()),
        "every line has its payout: {answer}"
    );
    assert_eq!(api.payouts().await, 3 + i64::from(RACED), "one payout per key");
    let balance = api.db.store().balances(&api.merchant).await.unwrap();
    assert_eq!(balance[0].held.to_string(), (25 + 7 * RACED).to_string(), "each key held once");
    assert!(api.db.store().audit_ledger().await.unwrap().is_clean());
}

/// A CSV payroll larger than any JSON batch is streamed: checked whole, then written and answered
/// 1,000 lines at a time, each line decided in order (one the balance cannot cover is refused, the
/// others are created); resubmitted, it creates nothing and answers every line as it stands.
/// (Before, a CSV batch was read whole under the JSON batch's limit: this one was refused with 400.)
async fn a_csv_batch_larger_than_any_json_batch_is_streamed_chunk_by_chunk(db: TestDb) {
    let api = Api::start(db).await;
    api.fund("100000", "fund-1").await;
    let lines = 2_500u32;
    let mut csv = String::from("external_id,asset,amount,destination\n");
    for n in 1..=lines {
        let amount = if n == 1_500 { "1000000000" } else { "1" };
        csv.push_str(&format!("payroll-{n:06},{USDC},{amount},0x{:040x}\n", 0xdef000 + n));
    }
    let r = api.post_csv(&csv).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    let created: Value = r.json().await.unwrap();
    assert_eq!((created["created"].as_u64(), created["failed"].as_u64()), (Some(2_499), Some(1)));
    assert_eq!(created["existing"], 0);
    let answered = created["lines"].as_array().unwrap();
    assert_eq!(answered.len(), lines as usize);
    for (i, line) in answered.iter().enumerate() {
        assert_eq!(line["line"], i + 1, "lines answered in order");
        assert_eq!(line["external_id"], format!("payroll-{:06}", i + 1));
    }
    let refused = &answered[1_499];
    assert!(refused["payout"].is_null() && !refused["error"].is_null(), "{refused}");
    assert!(
        refused["error"]["type"].as_str().unwrap().ends_with("insufficient-funds"),
        "{refused}"
    );
    assert_eq!(answered[1_500]["payout"]["status"], "requested", "a later line still created");
    assert_eq!(api.payouts().await, 2_499);
    assert_eq!(location, format!("/v1/payout_batches/{}", created["id"].as_str().unwrap()));

    let r = api.post_csv(&csv).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    let again: Value = r.json().await.unwrap();
    assert_eq!(again["id"], created["id"]);
    assert_eq!((again["existing"].as_u64(), again["failed"].as_u64()), (Some(2_499), Some(1)));
    assert_eq!(again["created"], 0);
    assert_eq!(api.payouts().await, 2_499, "a resubmission creates nothing");
    let view = api.read(&location).await;
    assert_eq!(view["lines"].as_array().unwrap().len(), lines as usize);
    assert_eq!(view["counts"], json!({"requested": 2_499, "no_payout": 1}));
    assert_eq!(view["has_more"], false);
    // Read back a page at a time: the counts are always the whole batch's.
    let first = api.read(&format!("{location}?limit=1000")).await;
    assert_eq!(
        (first["lines"].as_array().unwrap().len(), first["has_more"].as_bool()),
        (1_000, Some(true))
    );
    let last = api.read(&format!("{location}?starting_after=2000&limit=1000")).await;
    let last_lines = last["lines"].as_array().unwrap();
    assert_eq!((last_lines.len(), last["has_more"].as_bool()), (500, Some(false)));
    assert_eq!(
        (last_lines[0]["line"].as_u64(), last_lines[499]["line"].as_u64()),
        (Some(2_001), Some(2_500))
    );
    assert_eq!(last["counts"], view["counts"]);
    for bad in ["?limit=0", "?limit=10001", "?starting_after=x"] {
        let r = api
            .http
            .get(format!("{}{location}{bad}", api.base))
            .bearer_auth(&api.key)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    assert!(api.db.store().audit_ledger().await.unwrap().is_clean());
}

/// A CSV batch over its own limit, or with a bad line anywhere, is refused whole before anything is
/// written, however far into the upload the fault is.
async fn a_csv_batch_over_its_limit_or_with_a_late_bad_line_creates_nothing(db: TestDb) {
    let api = Api::start(db).await;
    api.fund("100000", "fund-1").await;
    let csv = |lines: usize, bad_at: usize| {
        let mut csv = String::from("external_id,asset,amount,destination\n");
        for n in 1..=lines {
            let amount = if n == bad_at { "-1" } else { "1" };
            csv.push_str(&format!("late-{n:06},{USDC},{amount},0x{:040x}\n", 0xfed000 + n));
        }
        csv
    };
    let (status, problem) = api.submit_csv(&csv(CSV_LINES_MAX + 1, 0)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(problem["type"].as_str().unwrap().ends_with("batch-too-large"), "{problem}");
    let (status, problem) = api.submit_csv(&csv(2_400, 2_399)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(problem["errors"][0]["line"], 2_399, "{problem}");
    assert_eq!(api.payouts().await, 0, "nothing was created");
    assert_eq!(api.db.scalar_raw("SELECT count(*) FROM payout_batches").await, 0);
}

/// While a merchant's CSV upload is under way (its place held in the server's table, as the
/// handler holds it from the first byte to the last line answered), a second upload of the merchant
/// is answered 429 `rate-limited` with `Retry-After` and creates nothing; once the place is given
/// back, the merchant's next upload is taken. (Before, any number
/// of uploads spooled at once.)
async fn a_merchant_s_second_csv_upload_waits_for_the_first(db: TestDb) {
    let api = Api::start(db).await;
    api.fund("100000", "fund-1").await;
    let header = "external_id,asset,amount,destination\n";
    let csv = |key: &str, n: u32| format!("{header}{key},{USDC},1,0x{:040x}\n", 0xa11ce + n);
    let first = api.uploads.begin(&api.merchant).unwrap();
    let refused = api.post_csv(&csv("second-000001", 1)).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().contains_key("retry-after"));
    let problem: Value = refused.json().await.unwrap();
    assert!(problem["type"].as_str().unwrap().ends_with("rate-limited"), "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("under way"), "{problem}");
    assert_eq!(api.payouts().await, 0, "the refused upload created nothing");
    drop(first);
    let (status, _) = api.submit_csv(&csv("next-000001", 2)).await;
    assert_eq!(status, StatusCode::CREATED, "the place was given back");
    let (status, _) = api.submit_csv(&csv("then-000001", 3)).await;
    assert_eq!(status, StatusCode::CREATED, "an answered upload gives its place back");
    assert_eq!(api.payouts().await, 2);
}

/// A batch is opened before its lines are written, chunk by chunk: it is not completed while a
/// line is still to be written, even when every line written so far is final.
async fn a_batch_is_not_completed_before_all_its_lines_are_written(db: TestDb) {
    let api = Api::start(db).await;
    api.fund("100", "fund-1").await;
    let open = api.engine.open_batch(&api.merchant, "two-chunks".into(), 2).await.unwrap();
    let request = |key: &str, amount: &str, n: u32| {
        let asset = api.engine.assets().get(USDC).unwrap().clone();
        payoutd_domain::PayoutRequest::new(
            payoutd_domain::PayoutKey::parse(key).unwrap(),
            asset.code.clone(),
            payoutd_domain::Amount::parse_positive(amount).unwrap(),
            asset.parse_destination(&format!("0x{:040x}", 0xcab000 + n)).unwrap(),
            payoutd_domain::Metadata::empty(),
        )
    };
    let first = api
        .engine
        .submit_batch_lines(&api.merchant, &open.id, 1, vec![request("chunk-one-1", "5", 1)])
        .await
        .unwrap();
    let (payout, _) = first[0].result.as_ref().unwrap();
    api.engine.cancel_payout(&api.merchant, &payout.id).await.unwrap();
    let store = api.db.webhooks();
    assert_eq!(store.complete_batches(1, 100).await.unwrap(), 0, "line 2 is not written yet");
    api.engine
        .submit_batch_lines(&api.merchant, &open.id, 2, vec![request("chunk-two-1", "1000", 2)])
        .await
        .unwrap();
    assert_eq!(store.complete_batches(2, 100).await.unwrap(), 1, "every line written and final");
}

both_stores!(
    a_merchant_s_second_csv_upload_waits_for_the_first,
    a_csv_batch_larger_than_any_json_batch_is_streamed_chunk_by_chunk,
    a_csv_batch_over_its_limit_or_with_a_late_bad_line_creates_nothing,
    a_batch_is_not_completed_before_all_its_lines_are_written,
    a_batch_decides_its_lines_in_order_and_races_single_posts_to_one_payout_per_key,
    a_batch_whose_payouts_are_all_final_is_completed_once,
    a_batch_with_a_duplicate_external_id_is_refused_whole,
    a_resubmitted_batch_creates_only_the_missing_lines,
    csv_batches_and_their_bad_lines,
    batch_limits_are_enforced_and_a_large_batch_fits,
);
