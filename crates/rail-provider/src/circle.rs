//! Circle developer-controlled wallets: transfer transactions (`POST /v1/w3s/developer/transactions/transfer`) keyed by `idempotencyKey`, each call with a fresh entity secret ciphertext.
//!
//! Shapes follow Circle's generated SDK `@circle-fin/developer-controlled-wallets` 10.8.1 (built
//! from Circle's OpenAPI). Circle rejects a ciphertext used before (code 156004), so a retry sends
//! the stored body and key with a new ciphertext: RSA-OAEP (SHA-256) of the entity secret under
//! the entity public key, which is randomised. The list cannot filter by `refId`: our reference is
//! matched here over the wallet's transactions since the attempt.

use std::sync::Mutex;

use async_trait::async_trait;
use base64::Engine;
use payoutd_domain::{Amount, Asset, Payout, Secret};
use rsa::pkcs8::DecodePublicKey;
use rsa::{Oaep, RsaPublicKey};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::{
    CURSOR_FROM_START, CallError, Created, CreatedWithin, ProviderApi, ProviderState,
    ProviderTransfer, TransferPage,
};
use crate::coinbase::{iso_of, ms_of_iso};
use crate::http;
use crate::units::{base_units_of, decimal_of};

/// Circle's largest page.
const PAGE_SIZE_MAX: u32 = 50;
const PAGES_PER_CALL_MAX: u32 = 40;
/// Pages one lookup by reference reads at most: 5,000 transactions in its window (from ten minutes
/// before the attempt to ten after its last possible create), what a wallet paying about 190,000
/// a day makes in it. A lookup runs only for an attempt whose outcome is unknown.
const LOOKUP_PAGES_MAX: u32 = 100;
const CLOCK_SKEW_MS: i64 = 10 * 60 * 1_000;
/// An entity secret is 32 bytes.
const ENTITY_SECRET_BYTES: usize = 32;

#[derive(Clone)]
pub struct CircleConfig {
    /// `https://api.circle.com` in production.
    pub base_url: String,
    pub api_key: Secret,
    /// The entity secret, 64 hex digits.
    pub entity_secret: Secret,
    /// The developer-controlled wallet paid from, and the token it pays (Circle's ids).
    pub wallet_id: String,
    pub token_id: String,
    /// `LOW`, `MEDIUM` or `HIGH`.
    pub fee_level: String,
    pub decimals: u8,
    /// The chain's native token when the wallet pays its own network fees (an EOA wallet without
    /// Gas Station): each transaction's `networkFee` is then the wallet's cost. `None` when
    /// Circle's Gas Station pays them: nothing leaves the wallet for fees.
    pub gas: Option<CircleGas>,
    pub request_timeout_ms: u64,
}

/// The native token a Circle wallet pays its network fees in.
#[derive(Clone, Debug)]
pub struct CircleGas {
    /// As in asset codes (`ETH`).
    pub symbol: String,
    pub decimals: u8,
}

pub struct CircleApi {
    config: CircleConfig,
    entity_secret: Vec<u8>,
    http: reqwest::Client,
    /// The entity public key, read once.
    public_key: Mutex<Option<RsaPublicKey>>,
}

#[derive(Debug, thiserror::Error)]
pub enum CircleSetupError {
    #[error("the entity secret must be {ENTITY_SECRET_BYTES} bytes as 64 hex digits")]
    EntitySecret,
    #[error("HTTP client: {0}")]
    Client(#[from] http::ClientError),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CircleTransaction {
    id: String,
    state: Option<String>,
    ref_id: Option<String>,
    #[serde(default)]
    amounts: Vec<String>,
    destination_address: Option<String>,
    error_reason: Option<String>,
    /// In the chain's native token, as a decimal string.
    network_fee: Option<String>,
    /// When Circle made it (ISO 8601): what `order` sorts by.
    create_date: Option<String>,
}

/// `GET /wallets/{id}/balances`: one entry per token the wallet holds.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Balances {
    #[serde(default)]
    token_balances: Vec<TokenBalance>,
}

#[derive(Debug, Deserialize)]
struct TokenBalance {
    /// A decimal string in the token's whole units.
    amount: String,
    token: Token,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Token {
    id: String,
    #[serde(default)]
    is_native: bool,
}

#[derive(Debug, Deserialize)]
struct Data<T> {
    data: T,
}

#[derive(Debug, Deserialize)]
struct One {
    transaction: CircleTransaction,
}

#[derive(Debug, Deserialize)]
struct Many {
    #[serde(default)]
    transactions: Vec<CircleTransaction>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PublicKey {
    public_key: String,
}

#[derive(Debug, Deserialize)]
struct CircleError {
    code: Option<i64>,
    message: Option<String>,
}

impl CircleApi {
    pub fn new(config: CircleConfig) -> Result<CircleApi, CircleSetupError> {
        let entity_secret = hex::decode(config.entity_secret.expose().trim())
            .map_err(|_| CircleSetupError::EntitySecret)?;
        if entity_secret.len() != ENTITY_SECRET_BYTES {
            return Err(CircleSetupError::EntitySecret);
        }
        Ok(CircleApi {
            http: http::client(&config.base_url, config.request_timeout_ms)?,
            config,
            entity_secret,
            public_key: Mutex::new(None),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}/v1/w3s{path}", self.config.base_url.trim_end_matches('/'))
    }

    /// `POST /developer/transactions/{id}/{action}` (`accelerate`, `cancel`): the key and a fresh
    /// ciphertext, nothing else; the answer's body says nothing the rail needs (the transaction's
    /// state is read again).
    async fn act_on(&self, id: &str, action: &str, key: &str) -> Result<(), CallError> {
        let body = json!({"idempotencyKey": key, "entitySecretCiphertext": self.fresh_ciphertext().await?});
        let sent = self
            .http
            .post(self.url(&format!("/developer/transactions/{id}/{action}")))
            .bearer_auth(self.config.api_key.expose())
            .json(&body)
            .send()
            .await;
        read::<Value>(sent).await.map(|_| ())
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(self.url(path)).bearer_auth(self.config.api_key.expose())
    }

    /// Every token balance of the wallet, page after page until an empty one (Circle may cap a page
    /// below what is asked, so a short page is no end). `includeAll`: a token the wallet does not
    /// monitor is left out otherwise.
    async fn token_balances(&self) -> Result<Vec<TokenBalance>, CallError> {
        let path = format!("/wallets/{}/balances", self.config.wallet_id);
        let mut held: Vec<TokenBalance> = Vec::new();
        for _ in 0..PAGES_PER_CALL_MAX {
            let mut query =
                vec![("includeAll", "true".to_owned()), ("pageSize", PAGE_SIZE_MAX.to_string())];
            if let Some(last) = held.last() {
                query.push(("pageAfter", last.token.id.clone()));
            }
            let page: Data<Balances> = read(self.get(&path).query(&query).send().await).await?;
            if page.data.token_balances.is_empty() {
                return Ok(held);
            }
            held.extend(page.data.token_balances);
        }
        Err(CallError::Ambiguous(format!(
            "{PAGES_PER_CALL_MAX} pages of Circle token balances did not reach the end"
        )))
    }

    /// A ciphertext for one request: never sent twice.
    async fn fresh_ciphertext(&self) -> Result<String, CallError> {
        let cached = self.public_key.lock().expect("public key lock").clone();
        let key = match cached {
            Some(key) => key,
            None => {
                let answer: Data<PublicKey> =
                    read(self.get("/config/entity/publicKey").send().await).await?;
                let key = RsaPublicKey::from_public_key_pem(&answer.data.public_key)
                    .map_err(|e| CallError::BadAnswer(format!("Circle entity public key: {e}")))?;
                *self.public_key.lock().expect("public key lock") = Some(key.clone());
                key
            }
        };
        let sealed = key
            .encrypt(&mut rsa::rand_core::OsRng, Oaep::new::<sha2::Sha256>(), &self.entity_secret)
            .map_err(|e| CallError::BadAnswer(format!("sealing the entity secret: {e}")))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(sealed))
    }

    fn transfer_of(&self, t: CircleTransaction) -> ProviderTransfer {
        let state = match t.state.as_deref() {
            // CLEARED and QUEUED come in either order (the states page and the SDK's enum differ).
            Some("INITIATED" | "CLEARED" | "QUEUED" | "SENT" | "CONFIRMED") => {
                ProviderState::Processing
            }
            Some("STUCK") => ProviderState::Stuck,
            Some("COMPLETE") => ProviderState::Completed,
            Some(state @ ("FAILED" | "CANCELLED" | "CANCELED" | "DENIED")) => {
                ProviderState::Failed {
                    proof: format!(
                        "state {state}: {}",
                        t.error_reason.as_deref().unwrap_or("no reason given")
                    ),
                }
            }
            other => ProviderState::Unrecognised(other.unwrap_or("(none)").to_owned()),
        };
        let amount = match t.amounts.as_slice() {
            [one] => base_units_of(one, self.config.decimals),
            _ => None,
        };
        let fee = match (&self.config.gas, t.network_fee.as_deref()) {
            (Some(gas), Some(fee)) => base_units_of(fee, gas.decimals).unwrap_or_else(|| {
                // Booked as zero, the balance check then finds the wallet short by it.
                tracing::warn!(transaction = %t.id, network_fee = fee, "Circle's networkFee is not a decimal in the native token's units");
                Amount::ZERO
            }),
            _ => Amount::ZERO,
        };
        // Circle answers an empty `refId` for a transaction made without one.
        ProviderTransfer {
            reference: t.ref_id.filter(|r| !r.is_empty()),
            id: t.id,
            state,
            amount,
            debited: None,
            destination: t.destination_address,
            withheld: Amount::ZERO,
            fee,
        }
    }

    /// What every list read asks for: the wallet's transfers out, in every token (`includeAll`:
    /// a transfer in a token the wallet does not monitor is left out otherwise, and a lookup that
    /// misses it could let its attempt die); top-ups into the wallet are not payouts.
    fn list_filter(&self) -> Vec<(&'static str, String)> {
        vec![
            ("walletIds", self.config.wallet_id.clone()),
            ("txType", "OUTBOUND".to_owned()),
            ("includeAll", "true".to_owned()),
        ]
    }

    /// The wallet's transfers out after `after` (a transaction id), within `narrow` (more of the
    /// list's filters: `from`, `to`, `destinationAddress`), oldest first.
    async fn page(
        &self,
        after: Option<&str>,
        narrow: &[(&'static str, String)],
    ) -> Result<Vec<CircleTransaction>, CallError> {
        let mut query = self.list_filter();
        query.extend(narrow.iter().cloned());
        query.extend([("order", "ASC".to_owned()), ("pageSize", PAGE_SIZE_MAX.to_string())]);
        if let Some(id) = after {
            query.push(("pageAfter", id.to_owned()));
        }
        let answer: Data<Many> = read(self.get("/transactions").query(&query).send().await).await?;
        Ok(answer.data.transactions)
    }

    /// Every page after `after` within `narrow`, oldest first, at most `pages_max`, and whether
    /// they reached the end. Only an empty page is the end: Circle may answer fewer than the page
    /// size asked for ("the collection limit will be used"), so a short page is not.
    async fn pages(
        &self,
        mut after: Option<String>,
        narrow: &[(&'static str, String)],
        pages_max: u32,
    ) -> Result<(Vec<CircleTransaction>, bool), CallError> {
        let mut all: Vec<CircleTransaction> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..pages_max {
            let page = self.page(after.as_deref(), narrow).await?;
            let Some(last) = page.last() else { return Ok((all, true)) };
            let newest_read = all.last().and_then(|t| t.create_date.as_deref()).and_then(ms_of_iso);
            reads_forward(&page, newest_read, &mut seen)?;
            after = Some(last.id.clone());
            all.extend(page);
        }
        Ok((all, false))
    }
}

/// Circle documents `pageAfter` as "the next n items after the id ... in the natural order of the
/// collection", not which way that runs under `order=ASC`. Read backwards, a scan would meet items
/// it has read (or older ones) and could take a short read for the end, and absence for proof:
/// each page must hold only items not read yet, in creation order from the newest read, or the
/// read proves nothing.
fn reads_forward(
    page: &[CircleTransaction],
    mut newest_ms: Option<i64>,
    seen: &mut std::collections::HashSet<String>,
) -> Result<(), CallError> {
    for t in page {
        let at = t.create_date.as_deref().and_then(ms_of_iso);
        let backwards = matches!((newest_ms, at), (Some(newest), Some(at)) if at < newest);
        if !seen.insert(t.id.clone()) || backwards {
            return Err(CallError::Ambiguous(format!(
                "Circle's transactions after pageAfter did not read forward (transaction {} again or older): the list proves nothing",
                t.id
            )));
        }
        newest_ms = at.or(newest_ms);
    }
    Ok(())
}

/// The destination address of a stored create (`destinationAddress`), if it names one.
fn destination_of(stored_request: &[u8]) -> Option<String> {
    let body: serde_json::Value = serde_json::from_slice(stored_request).ok()?;
    body["destinationAddress"].as_str().map(str::to_owned)
}

/// Reads a Circle answer: the body on 2xx, else its error classified once, here.
async fn read<T: for<'de> Deserialize<'de>>(
    sent: Result<reqwest::Response, reqwest::Error>,
) -> Result<T, CallError> {
    http::read_json("Circle", sent, error_of).await
}

/// What a non-2xx answer of Circle's means, from its status and its error body (the simulator's
/// provider reads its Circle-shaped errors through it too).
pub fn error_of(status: u16, body: &str) -> CallError {
    let error = serde_json::from_str::<CircleError>(body).ok();
    let code = error.as_ref().and_then(|e| e.code).unwrap_or(0);
    let what = format!(
        "Circle {status} code {code}: {}",
        error.and_then(|e| e.message).unwrap_or_default()
    );
    match (status, code) {
        // "Please use a new idempotency key": the key met another request.
        (_, 156020) | (409, _) => CallError::KeyConflict(what),
        // A ciphertext seen before: this request was not taken; the next one carries a new one.
        (_, 156004) => CallError::Ambiguous(what),
        // "Something went wrong... unknown error" (developers.circle.com/wallets/error-codes),
        // sent with HTTP 400: it says nothing of whether the transfer was made.
        (_, -1) => CallError::Ambiguous(what),
        _ => http::by_status(status, what),
    }
}

#[async_trait]
impl ProviderApi for CircleApi {
    fn provider(&self) -> &'static str {
        "circle"
    }

    fn account(&self) -> &str {
        &self.config.wallet_id
    }

    fn request_for(&self, payout: &Payout, reference: &str) -> Result<Vec<u8>, String> {
        let address = crate::api::chain_destination("Circle", payout)?;
        let c = &self.config;
        // Stored without the key (in the attempt's slot) and without a ciphertext (made per call).
        let body = json!({
            "walletId": c.wallet_id,
            "tokenId": c.token_id,
            "destinationAddress": address,
            "amounts": [decimal_of(payout.amount, c.decimals)],
            "feeLevel": c.fee_level,
            "refId": reference,
        });
        serde_json::to_vec(&body).map_err(|e| e.to_string())
    }

    async fn accelerate(&self, id: &str, key: &str) -> Result<(), CallError> {
        self.act_on(id, "accelerate", key).await
    }

    async fn cancel(&self, id: &str, key: &str) -> Result<(), CallError> {
        self.act_on(id, "cancel", key).await
    }

    async fn create(
        &self,
        idempotency_key: &str,
        stored_request: &[u8],
    ) -> Result<Created, CallError> {
        let mut body: Value = serde_json::from_slice(stored_request)
            .map_err(|e| CallError::BadAnswer(format!("stored request: {e}")))?;
        let Some(fields) = body.as_object_mut() else {
            return Err(CallError::BadAnswer("stored request is not an object".into()));
        };
        fields.insert("idempotencyKey".into(), json!(idempotency_key));
        fields.insert("entitySecretCiphertext".into(), json!(self.fresh_ciphertext().await?));
        let sent = self
            .http
            .post(self.url("/developer/transactions/transfer"))
            .bearer_auth(self.config.api_key.expose())
            .json(&body)
            .send()
            .await;
        #[derive(Deserialize)]
        struct Accepted {
            id: String,
            state: Option<String>,
        }
        let accepted: Data<Accepted> = read(sent).await?;
        let transfer = CircleTransaction {
            id: accepted.data.id,
            state: accepted.data.state,
            ref_id: None,
            network_fee: None,
            amounts: Vec::new(),
            destination_address: None,
            error_reason: None,
            create_date: None,
        };
        Ok(Created { transfer: self.transfer_of(transfer) })
    }

    async fn get(&self, id: &str) -> Result<ProviderTransfer, CallError> {
        let answer: Data<One> = read(self.get(&format!("/transactions/{id}")).send().await).await?;
        Ok(self.transfer_of(answer.data.transaction))
    }

    /// First among the transactions to the attempt's destination address (`destinationAddress`, a
    /// filter of Circle's list; it has none by `refId`), so a busy wallet's other transfers never
    /// keep ours from being found. Found nothing there: the wallet's whole listing since the
    /// attempt decides, since how Circle compares addresses (their case) is not documented, and
    /// absence may prove a death.
    async fn find_by_reference(
        &self,
        reference: &str,
        stored_request: &[u8],
        created: CreatedWithin,
    ) -> Result<Vec<ProviderTransfer>, CallError> {
        // `from` and `to` bound `createDate`, both inclusive.
        let from = iso_of(created.from_ms - CLOCK_SKEW_MS);
        let to = iso_of(created.until_ms + CLOCK_SKEW_MS);
        let ours = |listed: Vec<CircleTransaction>| -> Vec<ProviderTransfer> {
            listed
                .into_iter()
                .filter(|t| t.ref_id.as_deref() == Some(reference))
                .map(|t| self.transfer_of(t))
                .collect()
        };
        let window = [("from", from.clone()), ("to", to.clone())];
        if let Some(address) = destination_of(stored_request) {
            let narrow = [window[0].clone(), window[1].clone(), ("destinationAddress", address)];
            let (listed, complete) = self.pages(None, &narrow, LOOKUP_PAGES_MAX).await?;
            let narrowed = ours(listed);
            if complete && !narrowed.is_empty() {
                return Ok(narrowed);
            }
        }
        let (listed, complete) = self.pages(None, &window, LOOKUP_PAGES_MAX).await?;
        if !complete {
            // A partial scan proves no absence: finding nothing in it must not let an attempt die.
            return Err(CallError::Ambiguous(format!(
                "{LOOKUP_PAGES_MAX} pages of Circle transactions from {from} to {to} did not reach the end; read again later"
            )));
        }
        Ok(ours(listed))
    }

    /// The wallet's balance of the native token it pays its fees in (when it does), and of the
    /// token it pays out (by Circle's token id) for every other asset asked.
    async fn balances(&self, assets: &[Asset]) -> Result<Vec<Amount>, CallError> {
        let held = self.token_balances().await?;
        let gas = self.config.gas.as_ref().map(|g| g.symbol.to_ascii_lowercase());
        assets
            .iter()
            .map(|asset| {
                let is_gas = gas.as_deref() == Some(crate::units::symbol_of(asset).as_str());
                let entry = held.iter().find(|b| {
                    if is_gas { b.token.is_native } else { b.token.id == self.config.token_id }
                });
                entry.map_or(Ok(Amount::ZERO), |b| {
                    crate::units::balance_of("Circle", &b.amount, asset)
                })
            })
            .collect()
    }

    async fn starting_cursor(&self, _now_ms: i64) -> Result<String, CallError> {
        // The list's default order is newest first.
        let mut query = self.list_filter();
        query.push(("pageSize", "1".to_owned()));
        let newest: Data<Many> = read(self.get("/transactions").query(&query).send().await).await?;
        Ok(newest
            .data
            .transactions
            .first()
            .map_or_else(|| CURSOR_FROM_START.to_owned(), |t| t.id.clone()))
    }

    async fn transfers_after(&self, cursor: &str) -> Result<TransferPage, CallError> {
        let after = (cursor != CURSOR_FROM_START).then(|| cursor.to_owned());
        // Oldest first: a partial read moves the cursor only over what it read.
        let (newer, _) = self.pages(after, &[], PAGES_PER_CALL_MAX).await?;
        let next = newer.last().map(|t| t.id.clone());
        Ok(TransferPage {
            transfers: newer.into_iter().map(|t| self.transfer_of(t)).collect(),
            cursor: next,
        })
    }
}
