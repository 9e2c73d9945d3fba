//! Faithful simulators of the providers' payout APIs (Circle, Coinbase CDP, Bridge, Stripe), for tests, the demo and the chaos run.

// A handler's error is the provider's HTTP answer (status and body), built once per refused
// request: its size costs nothing worth a box.
#![allow(clippy::result_large_err)]

mod bridge;
mod circle;
mod coinbase;
mod coinbase_auth;
mod coinbase_read;
mod control;
mod core;
mod history;
mod server;
mod stripe;
mod stripe_read;

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;

pub use circle::{
    CIRCLE_SIM_ENTITY_SECRET_HEX, CIRCLE_SIM_NATIVE_TOKEN_ID, CIRCLE_SIM_NETWORK_FEE,
    CIRCLE_SIM_PUBLIC_KEY_PEM, CIRCLE_SIM_USDC_TOKEN_ID,
};
pub use core::{E18, MAX_BODY_BYTES, MAX_IDEMPOTENCY_KEYS, MAX_OBJECTS, MAX_REQUESTS};

/// The Circle wallet the simulator holds from the start (its developer-controlled wallet).
pub const CIRCLE_SIM_WALLET_ID: &str = "0f9c0a52-2e84-4c0c-9f0e-4a6c0b6f1b10";
/// The Stripe connected account the simulated platform has from the start (transfers go to it).
pub const STRIPE_SIM_CONNECTED_ACCOUNT: &str = "acct_1Nv0FGQ9RKHgCVdK";
/// The Coinbase account the simulator holds from the start.
pub const COINBASE_SIM_ACCOUNT_ID: &str = "account_af2937b0-9846-4fe7-bfe9-ccc22d935114";
pub use history::HISTORY_AMOUNT;

/// Which provider's API a simulator speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    Circle,
    Coinbase,
    Bridge,
    Stripe,
}

impl FromStr for ProviderKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "circle" => Ok(ProviderKind::Circle),
            "coinbase" => Ok(ProviderKind::Coinbase),
            "bridge" => Ok(ProviderKind::Bridge),
            "stripe" => Ok(ProviderKind::Stripe),
            other => Err(format!(
                "unknown provider {other:?} (expected circle, coinbase, bridge or stripe)"
            )),
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProviderKind::Circle => "circle",
            ProviderKind::Coinbase => "coinbase",
            ProviderKind::Bridge => "bridge",
            ProviderKind::Stripe => "stripe",
        })
    }
}

/// What goes wrong with the next create request (one fault per create, first in first out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A 5xx answer; nothing is created and nothing is saved under the idempotency key.
    ServerErrorBeforeCreate,
    /// A 5xx answer after execution began, nothing created: Stripe saves that 500 and answers
    /// every later request with the key with it, marked `Idempotent-Replayed: true`; Coinbase
    /// returns "the exact same response" to a repeated key, that error too. The key is spent.
    /// Circle and Bridge (which document no saved errors) answer it as `ServerErrorBeforeCreate`.
    ServerErrorSaved,
    /// The object is created, then a 5xx answer. Stripe saves that 500 for replays ("including 500 errors");
    /// the others save the success, so a replay returns the created object.
    ServerErrorAfterCreate,
    /// The object is created, then an error the adapter cannot know: Circle's HTTP 400 with code
    /// -1 ("Something went wrong", an unknown error); a 400 of an error type Coinbase or Stripe
    /// documents nowhere (one added later); Bridge answers it as `ServerErrorAfterCreate`.
    UnknownErrorAfterCreate,
    /// The object is created and the answer comes this many milliseconds late.
    DelayAfterCreate(u64),
    /// The object is created and the connection is closed without an answer.
    ResetAfterCreate,
    /// A 400 validation refusal before the idempotency key is looked at (a provider may validate
    /// first, and a Circle retry carries a fresh ciphertext): nothing is created by this request,
    /// though an earlier one with the same key may have created the object.
    RefusedBeforeKeyCheck,
}

/// How a simulator runs.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// 0 = any free port.
    pub port: u16,
    pub api_key: String,
    /// How long an idempotency key is honoured.
    pub key_window_ms: u64,
    /// Objects move one state forward per step.
    pub step_ms: u64,
    /// Objects (transfers, transactions) kept at most; the oldest go first.
    pub objects_max: usize,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            port: 0,
            api_key: "sim-api-key".to_string(),
            key_window_ms: 24 * 60 * 60 * 1000,
            step_ms: 1000,
            objects_max: MAX_OBJECTS,
        }
    }
}

/// One request a simulator received (the Authorization header left out), with the answer it got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    /// Path with the query, e.g. "/v1/transfers?limit=3".
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// The answer's status; `None` while it is not sent yet, or when the connection was dropped
    /// (a reset fault, or the client gave up before a late answer).
    pub status: Option<u16>,
    /// The answer's body, exactly as sent; `None` when `status` is.
    pub response_body: Option<String>,
}

/// A running simulator; dropping it stops the server.
pub struct ProviderSim {
    core: Arc<core::Core>,
    addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
}

impl ProviderSim {
    /// Defaults: any port, api key "sim-api-key", 24 h key window, 1 s steps.
    pub async fn start(kind: ProviderKind) -> ProviderSim {
        Self::start_with(kind, SimOptions::default()).await
    }

    /// Panics if the port cannot be bound (this is test support).
    pub async fn start_with(kind: ProviderKind, options: SimOptions) -> ProviderSim {
        let core = Arc::new(core::Core::new(kind, options));
        let (addr, server) =
            server::serve(core.clone()).await.expect("bind the provider simulator's port");
        ProviderSim { core, addr, server }
    }

    pub fn kind(&self) -> ProviderKind {
        self.core.kind
    }

    /// "http://127.0.0.1:PORT", no trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The API key (Coinbase: the key secret that signs each request's JWT).
    pub fn api_key(&self) -> String {
        match self.core.kind {
            ProviderKind::Coinbase => coinbase_auth::coinbase_sim_api_key_secret(),
            _ => self.core.options.api_key.clone(),
        }
    }

    /// A Coinbase token for `method` on `path` (no query) of this simulator, as a client signs it.
    pub fn coinbase_token(&self, method: &str, path: &str) -> String {
        coinbase_auth::sim_token(method, &self.addr.to_string(), path)
    }

    /// The API key's id: Coinbase names it in each token; the others have none.
    pub fn api_key_id(&self) -> String {
        match self.core.kind {
            ProviderKind::Coinbase => coinbase_auth::COINBASE_SIM_API_KEY_ID.to_owned(),
            _ => String::new(),
        }
    }

    /// Coinbase: the simulator's second API key, an EC P-256 key (ES256), as (id, SEC1 PEM secret).
    pub fn coinbase_ec_api_key(&self) -> (String, String) {
        (
            coinbase_auth::COINBASE_SIM_EC_API_KEY_ID.to_owned(),
            coinbase_auth::coinbase_sim_ec_api_key_secret(),
        )
    }

    /// Moves the simulator's clock forward (key windows, state progression).
    pub fn advance(&self, ms: u64) {
        self.core.advance(ms);
    }

    /// The simulator's clock, unix milliseconds.
    pub fn now_ms(&self) -> u64 {
        self.core.now_ms()
    }

    /// Lists and lookups by reference show an object only this long after it was created (a
    /// provider's search index behind its writes); a get by id sees it at once.
    pub fn set_lookup_lag_ms(&self, ms: u64) {
        self.core.lock().lookup_lag_ms = ms;
    }

    /// Queues a fault for the next create request.
    pub fn fault_next_create(&self, fault: Fault) {
        self.core.push_fault(fault);
    }

    /// Objects created so far (transfers, payouts, transactions).
    pub fn created(&self) -> usize {
        self.core.lock().created
    }

    /// Objects created so far that carry our reference.
    pub fn created_with_reference(&self, reference: &str) -> usize {
        self.core.lock().by_reference.get(reference).copied().unwrap_or(0)
    }

    /// The next `count` objects created are reported failed from their creation on: the provider
    /// accepted each request, then declined it, and nothing moved.
    pub fn fail_next_created(&self, count: usize) {
        self.core.lock().fail_next_created = count;
    }

    /// Objects made under `fail_next_created` so far.
    pub fn declined(&self) -> usize {
        self.core.lock().declined
    }

    /// Objects created so far that carry our reference and were not reported failed: what moved
    /// (or may still move) money.
    pub fn not_failed_with_reference(&self, reference: &str) -> usize {
        self.core
            .lock()
            .objects
            .iter()
            .filter(|o| o.reference.as_deref() == Some(reference) && o.failed.is_none())
            .count()
    }

    /// The provider reports this object failed, with `reason`. Returns false for an unknown id.
    /// Circle: FAILED + errorReason; Coinbase: failed + failureReason; Bridge: state "error";
    /// Stripe payout: failed + failure_code; Stripe transfer: a full reversal.
    /// What it took from the account (amount and fee) goes back to it.
    pub fn fail(&self, id: &str, reason: &str) -> bool {
        let now = self.core.now_ms();
        let mut st = self.core.lock();
        match st.objects.iter_mut().find(|o| o.id == id) {
            Some(o) => {
                o.failed.get_or_insert((reason.to_string(), now));
                // A Circle transaction that reached the chain (SENT) and failed there spent its gas.
                let on_chain = self.core.kind == ProviderKind::Circle
                    && !reason.starts_with(core::CIRCLE_STATE_PREFIX)
                    && self.core.steps(o.created_ms, now) >= circle::SENT_STEP;
                if on_chain {
                    st.give_back_all_but(id, CIRCLE_SIM_NATIVE_TOKEN_ID)
                } else {
                    st.give_back(id)
                }
            }
            None => false,
        }
    }

    /// Stripe: `amount` of the transfer is reversed (a clawback in part, made by someone with the
    /// platform's account): `amount_reversed` shows it, `reversed` stays false, and the amount goes
    /// back to the platform's balance. False for an unknown transfer or an amount it did not move.
    pub fn reverse_stripe_transfer_in_part(&self, id: &str, amount: u64) -> bool {
        let now = self.core.now_ms();
        let mut st = self.core.lock();
        let Some(o) = st.objects.iter_mut().find(|o| o.kind == "transfer" && o.id == id) else {
            return false;
        };
        if o.data["amount"].as_u64().is_none_or(|moved| amount == 0 || amount >= moved) {
            return false;
        }
        let currency = o.data["currency"].as_str().unwrap_or_default().to_owned();
        let reversal = serde_json::json!({"id": format!("trr_part_{}", &id[3..]), "object": "transfer_reversal",
            "amount": amount, "balance_transaction": format!("txn_rev_{}", &id[3..]), "created": now / 1000,
            "currency": currency, "destination_payment_refund": format!("pyr_{}", &id[3..]), "metadata": {},
            "source_refund": null, "transfer": id});
        o.data["amount_reversed"] = serde_json::json!(amount);
        o.data["reversals"]["data"] = serde_json::json!([reversal]);
        let back = i128::from(amount);
        if let Some(took) = o.took.iter_mut().find(|(c, _)| *c == currency) {
            took.1 -= back;
        }
        st.credit(&currency, back);
        true
    }

    /// Circle: the transaction ends in `state`, one of its terminal states that are not
    /// `COMPLETE` (`CANCELLED`, `DENIED`, `FAILED`), from now on; nothing moved. False for an
    /// unknown id.
    pub fn end_circle_transaction(&self, id: &str, state: &str) -> bool {
        self.fail(id, &format!("{}{state}", core::CIRCLE_STATE_PREFIX))
    }

    /// Circle: transactions show `STUCK` for `steps` steps after `SENT`, then confirm (the
    /// states page: a transaction stuck on chain, which Circle may still send).
    pub fn set_circle_stuck_steps(&self, steps: u64) {
        self.core.lock().circle_stuck_steps = steps;
    }

    /// Circle: `pageAfter` reads on in the list's natural order (newest first) even under
    /// `order=ASC`, so ascending pages run backwards: one reading of Circle's undocumented words.
    pub fn set_circle_page_after_in_natural_order(&self) {
        self.core.lock().circle_page_after_natural = true;
    }

    /// Circle: lists answer at most `cap` transactions a page (0: the documented 50).
    pub fn set_circle_page_cap(&self, cap: usize) {
        self.core.lock().circle_page_cap = cap;
    }

    /// Circle: transactions made from now on are in a token the wallet does not monitor (lists
    /// leave them out unless asked with `includeAll=true`).
    pub fn set_circle_unmonitored(&self, unmonitored: bool) {
        self.core.lock().circle_unmonitored = unmonitored;
    }

    /// Circle: `amount` (decimal text) arrives in wallet `wallet_id` from outside: an INBOUND
    /// transaction in its list, complete.
    pub fn circle_inbound(&self, wallet_id: &str, amount: &str) -> String {
        let now = self.core.now_ms();
        let id = uuid::Uuid::new_v4().to_string();
        let data = serde_json::json!({"id": id, "blockchain": "ETH-SEPOLIA", "transactionType": "INBOUND",
            "createDate": core::iso(now), "updateDate": core::iso(now), "refId": "", "amounts": [amount],
            "destinationAddress": "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed", "sourceAddress": "0x00000000000000000000000000000000000000aa",
            "walletId": wallet_id, "operation": "TRANSFER", "custodyType": "DEVELOPER", "state": "COMPLETE"});
        let mut st = self.core.lock();
        st.add_object(
            core::SimObject {
                id: id.clone(),
                kind: "transaction",
                created_ms: now,
                data,
                reference: None,
                failed: None,
                took: Vec::new(),
            },
            self.core.options.objects_max,
        );
        let token = circle::CIRCLE_SIM_USDC_TOKEN_ID.to_owned();
        let held = st.held(&token);
        st.purse.insert(token, held + core::e18_of(amount).unwrap_or(0));
        drop(st);
        id
    }

    /// The ids of the objects created with our reference `reference`, oldest first.
    pub fn ids_with_reference(&self, reference: &str) -> Vec<String> {
        self.core
            .lock()
            .objects
            .iter()
            .filter(|o| o.reference.as_deref() == Some(reference))
            .map(|o| o.id.clone())
            .collect()
    }

    /// Bridge: a transfer in `error` that Bridge's support resolved by returning the funds moves
    /// to `refunded`, its terminal state that proves nothing reached the recipient. Returns false
    /// for an unknown id.
    pub fn bridge_refund(&self, id: &str) -> bool {
        let now = self.core.now_ms();
        let mut st = self.core.lock();
        match st.objects.iter_mut().find(|o| o.id == id) {
            Some(o) => {
                o.failed = Some((core::BRIDGE_REFUNDED.to_string(), now));
                st.give_back(id)
            }
            None => false,
        }
    }

    /// Coinbase: each transfer made from now on costs the account `fee` (decimal text, in the source
    /// asset) on top of its amount, listed in its `fees[]` and in `sourceAmount`.
    pub fn set_coinbase_fee(&self, fee: &str) {
        self.core.lock().coinbase_fee = Some(fee.to_owned());
    }

    /// What the simulated account holds of `currency` (lower-case, or a Circle token id) now, as a
    /// decimal string with `decimals` digits (Stripe: minor units).
    pub fn balance(&self, currency: &str, decimals: u32) -> String {
        let st = self.core.lock();
        match self.core.kind {
            ProviderKind::Stripe => st.held(currency).to_string(),
            _ => core::decimal_of_e18(st.held(currency), decimals),
        }
    }

    /// Money arrives in the simulated account from outside (a top-up the ledger never saw):
    /// `units` in the purse's units of `currency` (Stripe: minor units; others 10^-18).
    pub fn top_up(&self, currency: &str, units: i128) {
        let mut st = self.core.lock();
        let held = st.held(currency);
        st.purse.insert(currency.to_owned(), held + units);
    }

    /// Coinbase or Circle: `count` transfers out of `account` made elsewhere (other payouts of the
    /// platform, each to its own address, carrying another reference), one every `spacing_ms` from
    /// `first_ms` (the simulator's clock): a busy account's history for a lookup to read through.
    /// False for a provider whose history is not modelled (Stripe, Bridge).
    pub fn seed_history(
        &self,
        account: &str,
        count: usize,
        first_ms: u64,
        spacing_ms: u64,
    ) -> bool {
        let mut st = self.core.lock();
        for n in 0..count {
            let created_ms = first_ms + spacing_ms * n as u64;
            let Some(object) = history::made_elsewhere(self.core.kind, account, n, created_ms)
            else {
                return false;
            };
            st.add_object(object, self.core.options.objects_max);
        }
        true
    }

    /// Circle, Coinbase or Stripe: the simulator holds wallet, account or connected account `id`
    /// too (beside its own), so transfers out of it (Stripe: to it) are made; any other, refused.
    pub fn add_account(&self, id: &str) {
        self.core.lock().accounts.insert(id.to_owned());
    }

    /// Bridge: the developer account has wallet `wallet` of `customer`, holding `currency` (a
    /// Bridge wallet's `usdb`, or `usdc`): transfers out of it are made; out of any other refused.
    pub fn add_bridge_wallet(&self, customer: &str, wallet: &str, currency: &str) {
        let wallet_of = bridge::Wallet {
            customer: customer.to_owned(),
            currency: currency.to_ascii_lowercase(),
            initiation_required: false,
        };
        self.core.lock().bridge_wallets.insert(wallet.to_owned(), wallet_of);
    }

    /// Bridge: wallet `wallet` answers `initiation_required: true` from now on, and transfers out
    /// of it without an `initiation` object are refused. Returns false for an unknown wallet.
    pub fn require_bridge_initiation(&self, wallet: &str) -> bool {
        let mut st = self.core.lock();
        st.bridge_wallets.get_mut(wallet).map(|w| w.initiation_required = true).is_some()
    }

    /// Bridge: each transfer made from now on pays `gas_fee` (decimal text, in the transfer's
    /// currency) out of its amount: the receipt's `final_amount`, what the recipient gets, is less.
    pub fn set_bridge_gas_fee(&self, gas_fee: &str) {
        self.core.lock().bridge_gas_fee = Some(gas_fee.to_owned());
    }

    /// Bridge: the transfer's receipt shows `final_amount` (decimal text), or, with `None`, leaves
    /// `final_amount` and `gas_fee` out, as Bridge does until the gas is known. Returns false for
    /// an unknown id.
    pub fn bridge_receipt_final_amount(&self, id: &str, final_amount: Option<&str>) -> bool {
        let mut st = self.core.lock();
        let Some(o) = st.objects.iter_mut().find(|o| o.id == id) else { return false };
        let receipt = &mut o.data["receipt"];
        match final_amount {
            Some(amount) => receipt["final_amount"] = serde_json::json!(amount),
            None => {
                if let Some(r) = receipt.as_object_mut() {
                    r.remove("final_amount");
                    r.remove("gas_fee");
                }
            }
        }
        true
    }

    /// Bridge: the transfer is in `state` from now on (one of Bridge's documented states:
    /// `awaiting_funds`, `undeliverable`, `returned`, `refunded`, `refund_failed`, `canceled`,
    /// `error`, ...). Returns false for an unknown id.
    /// The funds are back in the wallet only once Bridge says `refunded` or `canceled`.
    pub fn bridge_state(&self, id: &str, state: &str) -> bool {
        let now = self.core.now_ms();
        let mut st = self.core.lock();
        match st.objects.iter_mut().find(|o| o.id == id) {
            Some(o) => {
                o.failed = Some((format!("{}{state}", core::BRIDGE_STATE_PREFIX), now));
                if matches!(state, "refunded" | "canceled") {
                    st.give_back(id);
                }
                true
            }
            None => false,
        }
    }

    /// Every request received so far (oldest first, at most MAX_REQUESTS), control endpoints excluded.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.core.lock().requests.iter().cloned().collect()
    }
}

impl Drop for ProviderSim {
    fn drop(&mut self) {
        self.server.abort();
    }
}
