//! The shared core of every simulator: clock, idempotency store, fault queue, objects, request log, connection kill switch.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::BorrowedFormatItem;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;

use crate::{Fault, ProviderKind, RecordedRequest, SimOptions};

/// Objects kept for lookups and lists; the oldest go first past this (the `created` counters keep counting).
pub const MAX_OBJECTS: usize = 10_000;
/// Requests kept in the log; the oldest go first past this.
pub const MAX_REQUESTS: usize = 10_000;
/// Idempotency keys kept; the oldest go first past this.
pub const MAX_IDEMPOTENCY_KEYS: usize = 10_000;
/// Request bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// Circle ciphertexts remembered as used; past this the memory is cleared (a test never gets near it).
pub const MAX_CIPHERTEXTS: usize = 100_000;
/// The failure reason `ProviderSim::bridge_refund` records: Bridge shows the transfer `refunded`.
pub const BRIDGE_REFUNDED: &str = "refunded by Bridge support";
/// A Bridge transfer's reason that holds it in the state after the prefix (`ProviderSim::bridge_state`).
pub const BRIDGE_STATE_PREFIX: &str = "bridge state ";
/// A failure reason naming the terminal state Circle shows for it (`CANCELLED`, `DENIED`) instead
/// of `FAILED`.
pub const CIRCLE_STATE_PREFIX: &str = "circle state ";
/// Faults that may wait in the queue.
pub const MAX_FAULTS: usize = 1_000;

/// One object a simulator created (a transfer, payout or transaction), rendered per provider.
pub struct SimObject {
    pub id: String,
    /// e.g. "transfer" or "payout" (Stripe has both).
    pub kind: &'static str,
    pub created_ms: u64,
    /// The provider's fields fixed at creation; the time-dependent ones are rendered on read.
    pub data: Value,
    pub reference: Option<String>,
    /// (reason, when) once `ProviderSim::fail` was called.
    pub failed: Option<(String, u64)>,
    /// What creating it took from the account, per currency, in the purse's units (amount and
    /// fee); given back if the provider reports it failed without moving money.
    pub took: Vec<(String, i128)>,
}

/// The saved outcome of the first request with an idempotency key.
#[derive(Clone)]
pub struct Saved {
    pub endpoint: String,
    pub params: String,
    pub status: u16,
    pub body: String,
    pub at_ms: u64,
}

pub enum IdemCheck {
    New,
    Replay(Saved),
    OtherParams,
    OtherEndpoint,
    /// The key was seen, but longer ago than the window.
    Expired,
}

#[derive(Default)]
pub struct State {
    pub objects: VecDeque<SimObject>,
    idem: HashMap<String, Saved>,
    idem_order: VecDeque<String>,
    pub faults: VecDeque<Fault>,
    pub created: usize,
    pub by_reference: HashMap<String, usize>,
    pub requests: VecDeque<RecordedRequest>,
    /// Requests recorded ever, including those the log has let go: names each one for its answer.
    requests_recorded: u64,
    /// What the account holds per currency (lower-case), in the provider's purse units (Stripe:
    /// minor units; the others: 10^-18 of a whole unit, see `e18_of`); an absent currency holds
    /// `OPENING_BALANCE_E18` (or Stripe's `PLATFORM_BALANCE`) until something moves it.
    pub purse: HashMap<String, i128>,
    /// What a currency the purse has not seen holds.
    opening_units: i128,
    /// Circle: every entity secret ciphertext ever presented.
    pub seen_ciphertexts: HashSet<String>,
    /// Lists show an object only this long after its creation (`ProviderSim::set_lookup_lag_ms`).
    pub lookup_lag_ms: u64,
    /// Circle: the page size the list answers with at most, below the documented 50 when set
    /// ("in case the specified value is higher than the allowed limit, the collection limit will
    /// be used"); 0 for the documented limit.
    pub circle_page_cap: usize,
    /// Circle: `pageAfter` reads on in the collection's natural order (newest first) whatever the
    /// `order` asked: the reading of Circle's words the adapter must survive (`order=ASC` pages
    /// then run backwards). Circle does not say which way it runs.
    pub circle_page_after_natural: bool,
    /// Circle: transactions accelerated (`POST .../{id}/accelerate`): no longer stuck.
    pub circle_accelerated: HashSet<String>,
    /// Circle: steps a transaction shows `STUCK` after `SENT` before it confirms (0: never).
    pub circle_stuck_steps: u64,
    /// Circle: transactions made now are in a token the wallet does not monitor, and the ids of
    /// those made so: lists leave them out unless `includeAll=true`.
    pub circle_unmonitored: bool,
    pub unmonitored_ids: HashSet<String>,
    /// Bridge: the gas fee (decimal text) Bridge takes out of each transfer made from now on; its
    /// receipt's `final_amount` is the amount less it. `None`: no fee.
    pub bridge_gas_fee: Option<String>,
    /// Circle's wallets, Coinbase's accounts and Stripe's connected accounts the simulator holds,
    /// beside its own (`CIRCLE_SIM_WALLET_ID`, `COINBASE_SIM_ACCOUNT_ID`,
    /// `STRIPE_SIM_CONNECTED_ACCOUNT`): a transfer out of (Stripe: to) any other is refused.
    pub accounts: HashSet<String>,
    /// Bridge: the wallets the developer account has, by id (`ProviderSim::add_bridge_wallet`):
    /// a transfer out of any other is refused, as Bridge refuses an unknown wallet.
    pub bridge_wallets: HashMap<String, crate::bridge::Wallet>,
    /// Coinbase: the network fee (decimal text, in the source asset) CDP charges each transfer
    /// made from now on, on top of its amount (`sourceAmount` is the sum). `None`: no fee.
    pub coinbase_fee: Option<String>,
    /// The next this many objects created are reported failed from their creation on (the
    /// provider declined them after accepting the request): nothing moved.
    pub fail_next_created: usize,
    /// Objects made under `fail_next_created` so far.
    pub declined: usize,
}

/// What a simulated account holds of a currency before anything moves it: a billion whole units.
pub const OPENING_BALANCE_E18: i128 = 1_000_000_000 * E18;
/// One whole unit in the purse's units of the providers that write decimal amounts.
pub const E18: i128 = 1_000_000_000_000_000_000;

fn opening_of(kind: ProviderKind) -> i128 {
    match kind {
        ProviderKind::Stripe => i128::from(crate::stripe::PLATFORM_BALANCE),
        _ => OPENING_BALANCE_E18,
    }
}

/// A provider's decimal amount ("12.34") in 10^-18 units; `None` for anything else.
pub fn e18_of(text: &str) -> Option<i128> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty()
        || fraction.len() > 18
        || !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: i128 = whole.parse().ok()?;
    let fraction: i128 =
        if fraction.is_empty() { 0 } else { format!("{fraction:0<18}").parse().ok()? };
    whole.checked_mul(E18)?.checked_add(fraction)
}

/// 10^-18 units as a decimal string with at most `decimals` fraction digits (truncated).
pub fn decimal_of_e18(units: i128, decimals: u32) -> String {
    let sign = if units < 0 { "-" } else { "" };
    let units = units.unsigned_abs();
    let whole = units / E18 as u128;
    let fraction = format!("{:018}", units % E18 as u128);
    let fraction = fraction[..decimals.min(18) as usize].trim_end_matches('0');
    if fraction.is_empty() { format!("{sign}{whole}") } else { format!("{sign}{whole}.{fraction}") }
}

/// Why an object made under `fail_next_created` failed.
pub const DECLINED_REASON: &str =
    "declined by the simulated provider after it accepted the request";

impl State {
    /// What to do with `key` for a request on `endpoint` with canonical `params` at `now`.
    pub fn check_idem(
        &self,
        key: &str,
        endpoint: &str,
        params: &str,
        now: u64,
        window: u64,
    ) -> IdemCheck {
        match self.idem.get(key) {
            None => IdemCheck::New,
            Some(s) if now.saturating_sub(s.at_ms) > window => IdemCheck::Expired,
            Some(s) if s.endpoint != endpoint => IdemCheck::OtherEndpoint,
            Some(s) if s.params != params => IdemCheck::OtherParams,
            Some(s) => IdemCheck::Replay(s.clone()),
        }
    }

    pub fn saved(&self, key: &str) -> Option<&Saved> {
        self.idem.get(key)
    }

    pub fn save_idem(&mut self, key: &str, saved: Saved) {
        if self.idem.insert(key.to_string(), saved).is_none() {
            self.idem_order.push_back(key.to_string());
        }
        while self.idem_order.len() > MAX_IDEMPOTENCY_KEYS {
            if let Some(old) = self.idem_order.pop_front() {
                self.idem.remove(&old);
            }
        }
    }

    pub fn add_object(&mut self, mut object: SimObject, objects_max: usize) {
        self.created += 1;
        if self.fail_next_created > 0 {
            self.fail_next_created -= 1;
            self.declined += 1;
            object.failed.get_or_insert((DECLINED_REASON.to_owned(), object.created_ms));
        }
        if object.failed.is_none() {
            for (currency, units) in &object.took {
                *self.purse.entry(currency.clone()).or_insert(self.opening_units) -= units;
            }
        }
        if let Some(r) = &object.reference {
            *self.by_reference.entry(r.clone()).or_default() += 1;
        }
        self.objects.push_back(object);
        while self.objects.len() > objects_max {
            self.objects.pop_front();
        }
    }

    /// `units` of `currency` come back to the account (a reversal in part).
    pub fn credit(&mut self, currency: &str, units: i128) {
        *self.purse.entry(currency.to_owned()).or_insert(self.opening_units) += units;
    }

    /// What the account holds of `currency` now, in purse units.
    pub fn held(&self, currency: &str) -> i128 {
        self.purse.get(currency).copied().unwrap_or(self.opening_units)
    }

    /// What object `id` took from the account goes back to it (it failed, or its funds were
    /// returned, and nothing moved), once. False for an unknown id.
    pub fn give_back(&mut self, id: &str) -> bool {
        let Some(o) = self.objects.iter_mut().find(|o| o.id == id) else { return false };
        let took = std::mem::take(&mut o.took);
        for (currency, units) in took {
            *self.purse.entry(currency.clone()).or_insert(self.opening_units) += units;
        }
        true
    }

    /// What object `id` took from the account goes back to it but what it took of `kept` (the gas
    /// of a transaction that failed on chain), once. False for an unknown id.
    pub fn give_back_all_but(&mut self, id: &str, kept: &str) -> bool {
        let Some(o) = self.objects.iter_mut().find(|o| o.id == id) else { return false };
        let took = std::mem::take(&mut o.took);
        for (currency, units) in took.into_iter().filter(|(c, _)| c != kept) {
            *self.purse.entry(currency.clone()).or_insert(self.opening_units) += units;
        }
        true
    }

    pub fn object(&self, kind: &str, id: &str) -> Option<&SimObject> {
        self.objects.iter().find(|o| o.kind == kind && o.id == id)
    }

    /// Objects of `kind` a list shows at `now`, newest first.
    pub fn newest_first(&self, kind: &str, now: u64) -> Vec<&SimObject> {
        self.objects
            .iter()
            .rev()
            .filter(|o| o.kind == kind && o.created_ms.saturating_add(self.lookup_lag_ms) <= now)
            .collect()
    }

    /// Takes a queued `RefusedBeforeKeyCheck` fault: true when the create must be refused now.
    pub fn refuse_before_key_check(&mut self) -> bool {
        if self.faults.front() == Some(&Fault::RefusedBeforeKeyCheck) {
            self.faults.pop_front();
            return true;
        }
        false
    }
}

pub struct Core {
    pub kind: ProviderKind,
    pub options: SimOptions,
    started: Instant,
    epoch_ms_at_start: u64,
    advanced: AtomicU64,
    state: Mutex<State>,
}

impl Core {
    pub fn new(kind: ProviderKind, options: SimOptions) -> Core {
        let epoch_ms_at_start =
            SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        Core {
            kind,
            options,
            started: Instant::now(),
            epoch_ms_at_start,
            advanced: AtomicU64::new(0),
            state: Mutex::new(State {
                opening_units: opening_of(kind),
                accounts: HashSet::from([
                    crate::CIRCLE_SIM_WALLET_ID.to_owned(),
                    crate::COINBASE_SIM_ACCOUNT_ID.to_owned(),
                    crate::STRIPE_SIM_CONNECTED_ACCOUNT.to_owned(),
                ]),
                ..State::default()
            }),
        }
    }

    /// Unix milliseconds on the simulator's clock: real elapsed time plus everything advanced.
    pub fn now_ms(&self) -> u64 {
        self.epoch_ms_at_start
            + self.started.elapsed().as_millis() as u64
            + self.advanced.load(Ordering::SeqCst)
    }

    pub fn advance(&self, ms: u64) {
        self.advanced.fetch_add(ms, Ordering::SeqCst);
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many progression steps an object created at `created_ms` has made by `now`.
    pub fn steps(&self, created_ms: u64, now: u64) -> u64 {
        now.saturating_sub(created_ms) / self.options.step_ms.max(1)
    }

    pub fn push_fault(&self, fault: Fault) {
        let mut st = self.lock();
        if st.faults.len() < MAX_FAULTS {
            st.faults.push_back(fault);
        }
    }

    /// Logs a request before it is handled (so a dropped connection still shows it); returns its
    /// sequence number for `record_answer`.
    pub fn record(&self, request: RecordedRequest) -> u64 {
        let mut st = self.lock();
        st.requests.push_back(request);
        let seq = st.requests_recorded;
        st.requests_recorded += 1;
        while st.requests.len() > MAX_REQUESTS {
            st.requests.pop_front();
        }
        seq
    }

    /// Adds the answer sent to request `seq`; nothing when the log has already let it go.
    pub fn record_answer(&self, seq: u64, status: u16, body: String) {
        let mut st = self.lock();
        let first_kept = st.requests_recorded - st.requests.len() as u64;
        if let Some(index) = seq.checked_sub(first_kept)
            && let Some(r) = st.requests.get_mut(index as usize)
        {
            r.status = Some(status);
            r.response_body = Some(body);
        }
    }

    /// Whether `headers` carry `Authorization: Bearer <api key>`.
    pub fn bearer_ok(&self, headers: &HeaderMap) -> bool {
        header_str(headers, "authorization").and_then(|v| v.strip_prefix("Bearer "))
            == Some(self.options.api_key.as_str())
    }
}

/// A flag shared by one connection and the handler serving it: once set, the connection fails its next write.
#[derive(Clone, Debug, Default)]
pub struct KillSwitch(pub Arc<AtomicBool>);

impl KillSwitch {
    pub fn kill(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn killed(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// The parts of one request a provider handler sees.
pub struct Req {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: HeaderMap,
    pub body: String,
    pub conn: KillSwitch,
}

impl Req {
    pub fn header(&self, name: &str) -> Option<&str> {
        header_str(&self.headers, name)
    }
    /// The decoded query pairs.
    pub fn query_pairs(&self) -> Vec<(String, String)> {
        serde_urlencoded::from_str(&self.query).unwrap_or_default()
    }
    /// Path segments after `prefix`, e.g. ["transfers", "tr_1"].
    pub fn segments(&self, prefix: &str) -> Option<Vec<&str>> {
        let rest = self.path.strip_prefix(prefix)?;
        Some(rest.split('/').filter(|s| !s.is_empty()).collect())
    }
}

pub fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

pub fn json_response(status: u16, body: &Value) -> Response {
    raw_response(status, body.to_string())
}

pub fn raw_response(status: u16, body: String) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// Answers a create that did create: per the fault, the saved success, a 5xx, a late answer or no answer.
pub async fn answer_created(
    fault: Option<Fault>,
    conn: &KillSwitch,
    success: Response,
    error: Response,
) -> Response {
    match fault {
        Some(Fault::ServerErrorAfterCreate | Fault::UnknownErrorAfterCreate) => error,
        Some(Fault::DelayAfterCreate(ms)) => {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            success
        }
        Some(Fault::ResetAfterCreate) => {
            conn.kill();
            success
        }
        _ => success,
    }
}

/// "2020-01-01T00:00:00.000Z" for unix milliseconds (always three fraction digits, as the
/// providers write them).
pub fn iso(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    let at = OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .expect("simulated times lie within years 1 to 9999");
    at.format(MILLIS_UTC).expect("a UTC time formats")
}

/// RFC 3339 in UTC with milliseconds.
const MILLIS_UTC: &[BorrowedFormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

/// Unix milliseconds for an RFC 3339 time ("2020-01-01T00:00:00Z", a fraction and any offset
/// allowed); `None` for anything else, out-of-range fields and times before 1970 included.
pub fn parse_iso(s: &str) -> Option<u64> {
    let at = OffsetDateTime::parse(s, &Rfc3339).ok()?;
    u64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

/// A positive decimal string: digits, at most one '.', not all zero.
pub fn positive_decimal(s: &str) -> bool {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    !int.is_empty()
        && digits(int)
        && digits(frac)
        && (s.contains('.') <= !frac.is_empty())
        && s.bytes().any(|b| (b'1'..=b'9').contains(&b))
}

/// A fake 32-byte transaction hash derived from an id.
pub fn fake_tx_hash(id: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(id.as_bytes());
    format!("0x{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// A UUID string of version 4.
pub fn is_uuid_v4(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok_and(|u| u.get_version_num() == 4) && s.len() == 36
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_round_trips() {
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(parse_iso("2023-11-14T22:13:20.123Z"), Some(1_700_000_000_123));
        assert_eq!(parse_iso("2023-11-14T22:13:20Z"), Some(1_700_000_000_000));
        assert_eq!(parse_iso("2023-11-14 22:13:20"), None);
        assert_eq!(parse_iso("2023-11-14T23:13:20+01:00"), Some(1_700_000_000_000));
        assert_eq!(parse_iso("2023-02-29T00:00:00Z"), None, "not a leap year");
    }

    #[test]
    fn decimals() {
        assert!(positive_decimal("1.50") && positive_decimal("100") && positive_decimal("0.01"));
        assert!(
            !positive_decimal("0")
                && !positive_decimal("-1")
                && !positive_decimal("1.")
                && !positive_decimal("")
                && !positive_decimal("1e3")
        );
    }
}
