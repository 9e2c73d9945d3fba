//! The operator dashboard over real HTTP on both stores: sign-in, the session cookie, CSRF and confirmation on every action, escaping of merchant text, the audit log, and the dashboard's reads.

use std::sync::Arc;

use payoutd_api::AppState;
use payoutd_api::dashboard::{CONTENT_SECURITY_POLICY, Dashboard};
use payoutd_domain::{
    Amount, ApiKey, AssetRegistry, DepositKey, Destination, EvmAddress, IncidentKind, MerchantId,
    Metadata, PayoutId, PayoutKey, PayoutRequest, PayoutStatus,
};
use payoutd_engine::operator_view::OperatorPayoutQuery;
use payoutd_engine::{Engine, IncidentSubject, NewIncident, Pipeline, PipelineConfig, SystemClock};
use payoutd_testkit::{TestDb, both_stores};
use reqwest::StatusCode;
use reqwest::redirect::Policy;

const OPERATOR_KEY: &str = "op_dashboard_key_0123456789abcdef";
const USDC: &str = "evm:31337/USDC";
const XSS_SCRIPT: &str = "<script>window.__xss=1</script>";
const XSS_ATTRIBUTE: &str = "\"><img src=x onerror=\"window.__xss=2\">";

struct Site {
    base: String,
    http: reqwest::Client,
    db: TestDb,
    engine: Engine,
    pipeline: Arc<Pipeline>,
    merchant: MerchantId,
    dashboard: Arc<Dashboard>,
}

async fn site(db: TestDb) -> Site {
    let engine = Engine::new(db.store(), Arc::new(SystemClock), AssetRegistry::local_development());
    let pipeline =
        Arc::new(Pipeline::new(db.pipeline(), Arc::new(SystemClock), PipelineConfig::default()));
    let mut state = AppState::new(engine.clone(), Some(&ApiKey::presented(OPERATOR_KEY)));
    state.pipeline = Some(pipeline.clone());
    let dashboard = Arc::new(Dashboard::new(db.operator_views(), db.pipeline()));
    state.dashboard = Some(dashboard.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        payoutd_api::serve(listener, state, std::future::pending()).await.unwrap()
    });
    let (merchant, _) = engine.create_merchant("dashboard", [7; 32]).await.unwrap();
    let asset = payoutd_domain::AssetCode::parse(USDC).unwrap().0;
    engine
        .deposit(
            &merchant,
            &asset,
            Amount::from_u128(1_000_000),
            DepositKey::parse("dashboard-funding").unwrap(),
        )
        .await
        .unwrap();
    let http = reqwest::Client::builder().redirect(Policy::none()).build().unwrap();
    Site { base, http, db, engine, pipeline, merchant, dashboard }
}

/// The overview's count of payouts held for review (0 when the status is not listed).
fn held_on_overview(page: &str) -> u64 {
    let Some(row) =
        page.split("status=held_for_review\">held_for_review</a></td><td class=\"num\">").nth(1)
    else {
        return 0;
    };
    row.split('<')
        .next()
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("a count: {row}"))
}

/// Serves the same stores again with another dashboard; returns the new address.
async fn restart(s: &Site, dashboard: Dashboard) -> String {
    restart_with(s, dashboard, Vec::new()).await
}

/// `restart`, believing forwarded headers from `trusted_proxies`.
async fn restart_with(
    s: &Site,
    dashboard: Dashboard,
    trusted_proxies: Vec<std::net::IpAddr>,
) -> String {
    let mut state = AppState::new(s.engine.clone(), Some(&ApiKey::presented(OPERATOR_KEY)));
    state.trusted_proxies = Arc::new(trusted_proxies);
    state.pipeline = Some(s.pipeline.clone());
    state.dashboard = Some(Arc::new(dashboard));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        payoutd_api::serve(listener, state, std::future::pending()).await.unwrap()
    });
    base
}

impl Site {
    /// Signs in; returns the cookie header value and the session's CSRF token.
    async fn sign_in(&self) -> (String, String) {
        let r = self
            .http
            .post(format!("{}/dashboard/login", self.base))
            .form(&[("operator_key", OPERATOR_KEY)])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
        let cookie = set.split(';').next().unwrap().to_owned();
        let page = self.get(&cookie, "/dashboard").await.1;
        let csrf = page
            .split("name=\"csrf\" value=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_owned();
        (cookie, csrf)
    }

    async fn get(&self, cookie: &str, path: &str) -> (StatusCode, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap();
        (r.status(), r.text().await.unwrap())
    }

    async fn post(&self, cookie: Option<&str>, path: &str, form: &[(&str, &str)]) -> StatusCode {
        let mut request = self.http.post(format!("{}{path}", self.base)).form(form);
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        request.send().await.unwrap().status()
    }

    async fn payout(&self, key: &str, amount: u128, metadata: Metadata) -> PayoutId {
        let request = PayoutRequest::new(
            PayoutKey::parse(key).unwrap(),
            payoutd_domain::AssetCode::parse(USDC).unwrap().0,
            Amount::from_u128(amount),
            Destination::Evm(
                EvmAddress::parse("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed").unwrap(),
            ),
            metadata,
        );
        self.engine.create_payout(&self.merchant, request).await.unwrap().0.id
    }

    async fn status(&self, id: &PayoutId) -> PayoutStatus {
        self.db.pipeline().payout_by_id(id).await.unwrap().unwrap().status
    }
}

/// Only the operator key opens a session; the cookie is HttpOnly, SameSite=Strict, scoped and
/// expiring; pages without it go to the sign-in; signing out ends it.
async fn the_dashboard_signs_in_with_the_operator_key_only(db: TestDb) {
    let s = site(db).await;
    let anonymous = s.http.get(format!("{}/dashboard/payouts", s.base)).send().await.unwrap();
    assert_eq!(
        (anonymous.status(), anonymous.headers()["location"].to_str().unwrap()),
        (StatusCode::SEE_OTHER, "/dashboard/login")
    );
    let wrong = s
        .http
        .post(format!("{}/dashboard/login", s.base))
        .form(&[("operator_key", "op_not_the_key_0123456789")])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.headers().get("set-cookie").is_none());
    assert!(wrong.text().await.unwrap().contains("role=\"alert\""));
    let r = s
        .http
        .post(format!("{}/dashboard/login", s.base))
        .form(&[("operator_key", OPERATOR_KEY)])
        .send()
        .await
        .unwrap();
    let set = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/dashboard", "Max-Age=28800"] {
        assert!(set.contains(part), "{set}");
    }
    assert!(!set.contains("Secure"), "plain http here: {set}");
    let (cookie, csrf) = s.sign_in().await;
    assert_eq!(s.get(&cookie, "/dashboard/payouts").await.0, StatusCode::OK);
    assert_eq!(
        s.post(Some(&cookie), "/dashboard/logout", &[("csrf", &csrf)]).await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(s.get(&cookie, "/dashboard/payouts").await.0, StatusCode::SEE_OTHER, "signed out");
    let claimed = s
        .http
        .post(format!("{}/dashboard/login", s.base))
        .header("x-forwarded-proto", "https")
        .form(&[("operator_key", OPERATOR_KEY)])
        .send()
        .await
        .unwrap();
    assert!(
        !claimed.headers()["set-cookie"].to_str().unwrap().contains("Secure"),
        "a client's own X-Forwarded-Proto decides nothing"
    );
}

/// Behind a proxy the operator trusts, the proxy's `X-Forwarded-Proto: https` makes the cookie
/// `Secure`, and its `X-Forwarded-For` names the client in the audit log; the same headers from
/// any other peer are ignored. (Before, any client's `X-Forwarded-Proto` was believed.)
async fn forwarded_headers_are_believed_only_from_a_trusted_proxy(db: TestDb) {
    let s = site(db).await;
    let proxied = restart_with(
        &s,
        Dashboard::new(s.db.operator_views(), s.db.pipeline()),
        vec!["127.0.0.1".parse().unwrap()],
    )
    .await;
    let login = s
        .http
        .post(format!("{proxied}/dashboard/login"))
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-for", "203.0.113.9");
    let r = login.form(&[("operator_key", OPERATOR_KEY)]).send().await.unwrap();
    assert!(
        r.headers()["set-cookie"].to_str().unwrap().contains("Secure"),
        "the trusted proxy spoke TLS to the client"
    );
    let audited = s.db.scalar_raw("SELECT count(*) FROM operator_actions WHERE action = 'sign_in' AND detail = 'from 203.0.113.9'").await;
    assert_eq!(audited, 1, "the audit log names the client the proxy forwarded");
}

/// Five wrong keys from one address, and that address is refused for a while even with the right
/// key (429, no cookie): the operator key cannot be guessed at request speed. (Before, sign-in had
/// no limit.)
async fn sign_in_is_refused_for_a_while_after_too_many_wrong_keys(db: TestDb) {
    let s = site(db).await;
    let try_key = async |key: &str| {
        s.http
            .post(format!("{}/dashboard/login", s.base))
            .form(&[("operator_key", key)])
            .send()
            .await
            .unwrap()
    };
    for _ in 0..5 {
        assert_eq!(try_key("op_not_the_key_0123456789").await.status(), StatusCode::UNAUTHORIZED);
    }
    let refused = try_key(OPERATOR_KEY).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().get("set-cookie").is_none());
    assert!(refused.text().await.unwrap().contains("Too many failed sign-ins"));
}

/// An action without the session (401), without its CSRF token (403) or without the confirmation
/// (400) changes nothing; with all three it happens once and the audit log says who and when.
async fn an_action_needs_the_session_its_csrf_token_and_a_confirmation(db: TestDb) {
    let s = site(db).await;
    let first = s.payout("dash-0001", 500, Metadata::empty()).await;
    let twin = s.payout("dash-0002", 500, Metadata::empty()).await;
    s.pipeline.policy_pass().await.unwrap();
    assert_eq!(
        s.status(&twin).await,
        PayoutStatus::HeldForReview,
        "a near-duplicate of {first} waits for review"
    );
    let (cookie, csrf) = s.sign_in().await;
    let held = held_on_overview(&s.get(&cookie, "/dashboard").await.1);
    assert!(held >= 1, "the overview counts the held payout");
    let path = format!("/dashboard/payouts/{twin}/approve");
    assert_eq!(
        s.post(None, &path, &[("csrf", &csrf), ("confirm", "yes")]).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(s.post(Some(&cookie), &path, &[("confirm", "yes")]).await, StatusCode::FORBIDDEN);
    assert_eq!(
        s.post(Some(&cookie), &path, &[("csrf", "0".repeat(64).as_str()), ("confirm", "yes")])
            .await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(s.post(Some(&cookie), &path, &[("csrf", &csrf)]).await, StatusCode::BAD_REQUEST);
    assert_eq!(s.status(&twin).await, PayoutStatus::HeldForReview, "nothing changed");
    let review = s.get(&cookie, "/dashboard/review").await.1;
    assert!(review.contains(&format!("data-payout-id=\"{twin}\"")));
    assert_eq!(
        s.post(Some(&cookie), &path, &[("csrf", &csrf), ("confirm", "yes")]).await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(s.status(&twin).await, PayoutStatus::Approved);
    assert_eq!(
        held_on_overview(&s.get(&cookie, "/dashboard").await.1),
        held - 1,
        "an action makes the overview's shared reads again"
    );
    assert_eq!(
        s.post(Some(&cookie), &path, &[("csrf", &csrf), ("confirm", "yes")]).await,
        StatusCode::CONFLICT,
        "approved once"
    );
    let audit = s.get(&cookie, "/dashboard/audit").await.1;
    assert!(
        audit.contains("approve") && audit.contains(twin.as_str()) && audit.contains("session:"),
        "{audit}"
    );
    let actions = s.db.operator_views().operator_actions(10).await.unwrap();
    assert_eq!(actions.iter().filter(|a| a.action == "approve").count(), 1);
}

/// An incident is resolved from the dashboard with its note; a second try finds it closed.
async fn an_incident_is_resolved_from_the_dashboard(db: TestDb) {
    let s = site(db).await;
    let incident = NewIncident::new(
        IncidentKind::UnmatchedTransfer,
        IncidentSubject::default(),
        "a transfer nobody sent".into(),
        1,
    );
    assert!(s.db.pipeline().open_incident_once(&incident, "dashboard-test").await.unwrap());
    let id = s.db.pipeline().open_incidents(10).await.unwrap()[0].id.clone();
    let (cookie, csrf) = s.sign_in().await;
    assert!(
        s.get(&cookie, "/dashboard/incidents")
            .await
            .1
            .contains(&format!("data-incident-id=\"{id}\""))
    );
    let path = format!("/dashboard/incidents/{id}/resolve");
    assert_eq!(
        s.post(Some(&cookie), &path, &[("csrf", &csrf), ("confirm", "yes"), ("resolution", " ")])
            .await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        s.post(
            Some(&cookie),
            &path,
            &[("csrf", &csrf), ("confirm", "yes"), ("resolution", "our own test transfer")]
        )
        .await,
        StatusCode::SEE_OTHER
    );
    assert!(s.db.pipeline().open_incidents(10).await.unwrap().is_empty());
    assert_eq!(
        s.post(
            Some(&cookie),
            &path,
            &[("csrf", &csrf), ("confirm", "yes"), ("resolution", "again")]
        )
        .await,
        StatusCode::CONFLICT
    );
}

/// What a browser shows for escaped text (the entities askama writes).
fn unescape(html: &str) -> String {
    [
        ("&#60;", "<"),
        ("&#62;", ">"),
        ("&#34;", "\""),
        ("&#39;", "'"),
        ("&lt;", "<"),
        ("&gt;", ">"),
        ("&quot;", "\""),
        ("&#x2f;", "/"),
        ("&amp;", "&"),
        ("&#38;", "&"),
    ]
    .iter()
    .fold(html.to_owned(), |text, (entity, c)| text.replace(entity, c))
}

/// Text from a merchant reaches the page escaped, under a policy that runs no inline script.
async fn merchant_text_is_escaped_and_inline_scripts_cannot_run(db: TestDb) {
    let s = site(db).await;
    let metadata = Metadata::from_canonical_json(
        serde_json::json!({"note": XSS_SCRIPT, "ref": XSS_ATTRIBUTE}).to_string(),
    )
    .unwrap();
    let id = s.payout("dash-xss-01", 700, metadata).await;
    let (cookie, _) = s.sign_in().await;
    let r = s
        .http
        .get(format!("{}/dashboard/payouts/{id}", s.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    let csp = r.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert_eq!(csp, CONTENT_SECURITY_POLICY);
    assert!(!csp.contains("unsafe-inline") && csp.contains("script-src 'self'"));
    let page = r.text().await.unwrap();
    assert!(
        page.contains("data-field=\"network_fee\" data-base-units=\"0\">0 evm:31337/USDC</dd>"),
        "the network fee charged is shown, none here"
    );
    assert!(!page.contains("<script>window"), "the payload is not markup");
    assert!(!page.contains("<img src=x"), "the payload is not markup");
    let shown = page
        .split("data-field=\"metadata\"")
        .nth(1)
        .unwrap_or_default()
        .split("</dd>")
        .next()
        .unwrap_or_default()
        .to_owned();
    let as_text = unescape(&shown);
    assert!(
        as_text.contains(XSS_SCRIPT) && as_text.contains("onerror=\\\"window.__xss=2"),
        "shown as text: {as_text}"
    );
}

/// The dashboard's reads: filters over all merchants with a cursor, the oldest waiting payout per
/// status, the rate per minute; the audit log cannot be rewritten.
#[allow(clippy::too_many_lines)]
// a scenario read top to bottom: its steps share the state they build.
async fn the_dashboard_reads_filter_age_and_count_payouts(db: TestDb) {
    let s = site(db).await;
    let mut ids = Vec::new();
    for i in 0..5u128 {
        ids.push(s.payout(&format!("dash-read-{i:02}"), 100 + i, Metadata::empty()).await);
    }
    let views = s.db.operator_views();
    let all = views
        .operator_payouts(&OperatorPayoutQuery { limit: 3, ..OperatorPayoutQuery::default() })
        .await
        .unwrap();
    assert_eq!(
        all.iter().map(|p| p.id.clone()).collect::<Vec<_>>(),
        vec![ids[4].clone(), ids[3].clone(), ids[2].clone()],
        "newest first"
    );
    let rest = views
        .operator_payouts(&OperatorPayoutQuery {
            limit: 3,
            before: Some(ids[2].clone()),
            ..OperatorPayoutQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(rest.len(), 2);
    let by_key = OperatorPayoutQuery {
        key: Some(PayoutKey::parse("dash-read-03").unwrap()),
        limit: 10,
        ..OperatorPayoutQuery::default()
    };
    assert_eq!(views.operator_payouts(&by_key).await.unwrap()[0].id, ids[3]);
    let other = OperatorPayoutQuery {
        merchant: Some(MerchantId::new()),
        limit: 10,
        ..OperatorPayoutQuery::default()
    };
    assert!(views.operator_payouts(&other).await.unwrap().is_empty());
    let ages = views.status_ages(&[PayoutStatus::Requested, PayoutStatus::Paid]).await.unwrap();
    assert_eq!(ages.len(), 1, "only statuses that hold payouts");
    assert_eq!(
        (ages[0].status, ages[0].count, &ages[0].oldest),
        (PayoutStatus::Requested, 5, &ids[0])
    );
    let per_minute = views.payouts_per_minute(0).await.unwrap();
    assert_eq!(per_minute.iter().map(|(_, n)| n).sum::<u64>(), 5);
    let (cookie, _) = s.sign_in().await;
    let (status, page) = s
        .get(&cookie, &format!("/dashboard/payouts?key=dash-read-01&merchant={}", s.merchant))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains(&format!("data-payout-id=\"{}\"", ids[1]))
            && !page.contains(&format!("data-payout-id=\"{}\"", ids[2]))
    );
    assert_eq!(
        s.get(&cookie, "/dashboard/payouts?status=nonsense").await.0,
        StatusCode::BAD_REQUEST
    );
    // By day of creation (UTC): a range that holds them, one that does not, a day that is not one.
    let since_2000 = s.get(&cookie, "/dashboard/payouts?from=2000-01-01").await.1;
    assert!(ids.iter().all(|id| since_2000.contains(&format!("data-payout-id=\"{id}\""))));
    let in_2000 = s.get(&cookie, "/dashboard/payouts?from=2000-01-01&to=2000-12-31").await.1;
    assert!(!in_2000.contains("data-payout-id=\"po_"), "nothing was created in 2000");
    assert_eq!(s.get(&cookie, "/dashboard/payouts?to=2000-02-30").await.0, StatusCode::BAD_REQUEST);
    // Our reference at a provider (`<payout id>-<attempt no>`) finds its payout.
    let by_reference = s
        .http
        .get(format!("{}/dashboard/payouts?q={}-1", s.base, ids[3]))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(
        by_reference.headers()["location"].to_str().unwrap(),
        format!("/dashboard/payouts/{}", ids[3])
    );
    let found = s
        .http
        .get(format!("{}/dashboard/payouts?q={}", s.base, ids[2]))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(
        found.headers()["location"].to_str().unwrap(),
        format!("/dashboard/payouts/{}", ids[2])
    );
    s.db.pipeline()
        .ensure_signing_wallet("solana:localnet", "DashWallet1111111111111111111111111111111111")
        .await
        .unwrap();
    let wallets = views.hot_wallets().await.unwrap();
    assert_eq!(
        (wallets.len(), wallets[0].chain.as_str(), wallets[0].balances.len()),
        (1, "solana:localnet", 0)
    );
    // The overview's reads are shared for OVERVIEW_FRESH_MS: the wallet written straight into the
    // store (no operator action) shows once they are made again.
    s.dashboard.forget_overview().await;
    let overview = s.get(&cookie, "/dashboard").await.1;
    assert!(overview.contains("id=\"payouts-per-minute\"") && overview.contains(ids[0].as_str()));
    assert!(
        overview.contains("DashWallet1111")
            && overview.contains("no nonces")
            && overview.contains("id=\"webhook-backlog\""),
        "{overview}"
    );
    let (status, batches) = s.get(&cookie, "/dashboard/batches").await;
    assert_eq!(status, StatusCode::OK);
    assert!(batches.contains("No batch yet.") && batches.contains("No transfer yet."));
    let (other, _) = s.engine.create_merchant("other", [8; 32]).await.unwrap();
    let usdc = payoutd_domain::AssetCode::parse(USDC).unwrap().0;
    let request = payoutd_domain::TransferRequest::new(
        payoutd_domain::TransferKey::parse("dash-transfer-1").unwrap(),
        other.clone(),
        usdc,
        Amount::from_u128(1_234),
    );
    s.engine.create_transfer(&s.merchant, request).await.unwrap();
    let transfers = views.recent_transfers(10).await.unwrap();
    assert_eq!(
        (transfers.len(), transfers[0].amount, &transfers[0].to),
        (1, Amount::from_u128(1_234), &other)
    );
    assert!(s.get(&cookie, "/dashboard/batches").await.1.contains("1234"));
    let rewrite = s.db.exec_raw("UPDATE operator_actions SET actor = 'someone else'").await;
    assert!(rewrite.is_err(), "the audit log is append-only");
}

/// A payout accepted before its asset's rail left the configuration says on its page why it waits.
async fn a_payout_no_rail_pays_says_why_it_waits(db: TestDb) {
    let mut s = site(db).await;
    let usdc = payoutd_domain::AssetCode::parse(USDC).unwrap().0;
    let why = format!("no [[chains]] entry for chain 31337 is configured to pay {usdc}");
    let payable = payoutd_engine::Payable::Only {
        assets: Default::default(),
        why_not: [(usdc, why.clone())].into_iter().collect(),
    };
    let dashboard = Dashboard::new(s.db.operator_views(), s.db.pipeline()).with_payable(payable);
    s.base = restart(&s, dashboard).await;
    let waiting = s.payout("dash-wait-01", 300, Metadata::empty()).await;
    let (cookie, _) = s.sign_in().await;
    let page = unescape(&s.get(&cookie, &format!("/dashboard/payouts/{waiting}")).await.1);
    assert!(page.contains("id=\"waits-because\"") && page.contains(&why), "{page}");
}

/// Amounts are shown in the asset's units, the base units beside them: 1,234 base units of a
/// 6-decimal USDC read 0.001234 on the payout's page, in the list and in the merchant's balances;
/// the overview's chart says what its axes stand for. (Before, every amount was in base units and
/// the chart had no labels.)
async fn amounts_are_shown_in_the_asset_s_units_and_the_chart_is_labelled(db: TestDb) {
    let s = site(db).await;
    let decimals = AssetRegistry::local_development().get(USDC).unwrap().decimals;
    assert_eq!(decimals, 6, "the local USDC");
    let id = s.payout("dash-units-01", 1_234, Metadata::empty()).await;
    let (cookie, _) = s.sign_in().await;
    let page = unescape(&s.get(&cookie, &format!("/dashboard/payouts/{id}")).await.1);
    assert!(
        page.contains("data-field=\"amount\" data-base-units=\"1234\">0.001234 evm:31337/USDC"),
        "{page}"
    );
    let list = unescape(&s.get(&cookie, "/dashboard/payouts").await.1);
    assert!(list.contains("title=\"1234 base units\">0.001234</td>"), "{list}");
    let merchants = unescape(&s.get(&cookie, "/dashboard/merchants").await.1);
    // 1 USDC deposited, 0.001234 of it held by the payout.
    assert!(merchants.contains("title=\"998766 base units\">0.998766</td>"), "{merchants}");
    assert!(merchants.contains("title=\"1234 base units\">0.001234</td>"), "{merchants}");
    let overview = unescape(&s.get(&cookie, "/dashboard").await.1);
    for label in ["/min</text>", "60 min ago</text>", "payouts created per minute (UTC)</text>"] {
        assert!(overview.contains(label), "{label}: {overview}");
    }
}

/// The overview's reads are shared: once older than OVERVIEW_FRESH_MS a page gets them as they are
/// while a background task makes them again, and the next pages show the new ones.
async fn the_overview_is_served_at_once_while_its_reads_are_made_again(db: TestDb) {
    let s = site(db).await;
    let (cookie, _) = s.sign_in().await;
    assert!(!s.get(&cookie, "/dashboard").await.1.contains("StaleWallet111"));
    s.db.pipeline()
        .ensure_signing_wallet("solana:localnet", "StaleWallet1111111111111111111111111111111111")
        .await
        .unwrap();
    let fresh_ms = u64::try_from(payoutd_api::dashboard::OVERVIEW_FRESH_MS).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(fresh_ms + 100)).await;
    assert!(
        !s.get(&cookie, "/dashboard").await.1.contains("StaleWallet111"),
        "served as they were, made again behind it"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(fresh_ms * 2);
    loop {
        if s.get(&cookie, "/dashboard").await.1.contains("StaleWallet111") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the reads made in the background never showed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

both_stores!(
    amounts_are_shown_in_the_asset_s_units_and_the_chart_is_labelled,
    forwarded_headers_are_believed_only_from_a_trusted_proxy,
    sign_in_is_refused_for_a_while_after_too_many_wrong_keys,
    the_overview_is_served_at_once_while_its_reads_are_made_again,
    a_payout_no_rail_pays_says_why_it_waits,
    the_dashboard_signs_in_with_the_operator_key_only,
    an_action_needs_the_session_its_csrf_token_and_a_confirmation,
    an_incident_is_resolved_from_the_dashboard,
    merchant_text_is_escaped_and_inline_scripts_cannot_run,
    the_dashboard_reads_filter_age_and_count_payouts,
);
