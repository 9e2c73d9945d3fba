//! Bearer authentication: merchant API keys (looked up by hash) and the operator key.

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use payoutd_domain::{ApiKey, ApiKeyHash, MerchantId};

use crate::AppState;
use crate::problem::Problem;

/// Longest bearer token we bother hashing; real keys are 67 characters.
pub const BEARER_TOKEN_MAX_LEN: usize = 256;

pub fn bearer(parts: &Parts) -> Result<ApiKey, Problem> {
    bearer_of(&parts.headers)
}

/// The bearer token of these headers, or why there is none.
pub fn bearer_of(headers: &axum::http::HeaderMap) -> Result<ApiKey, Problem> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| Problem::unauthorized("send `Authorization: Bearer <api key>`"))?;
    let text = value
        .to_str()
        .map_err(|_| Problem::unauthorized("the Authorization header is not ASCII"))?;
    let token = text
        .strip_prefix("Bearer ")
        .ok_or_else(|| {
            Problem::unauthorized("the Authorization header must use the Bearer scheme")
        })?
        .trim();
    if token.is_empty() || token.len() > BEARER_TOKEN_MAX_LEN {
        return Err(Problem::unauthorized("the bearer token is empty or too long"));
    }
    Ok(ApiKey::presented(token))
}

/// The authenticated merchant; every merchant endpoint is scoped by it.
pub struct Merchant(pub MerchantId);

impl FromRequestParts<AppState> for Merchant {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Merchant, Problem> {
        let key = bearer(parts)?;
        merchant_of(state, &key).await.map(Merchant)
    }
}

/// The merchant a presented key belongs to, or 401.
pub(crate) async fn merchant_of(state: &AppState, key: &ApiKey) -> Result<MerchantId, Problem> {
    match state.engine.authenticate(key).await {
        Ok(Some(id)) => {
            state.failed_auths.know(key);
            Ok(id)
        }
        Ok(None) => Err(Problem::from(payoutd_engine::IntakeError::UnknownApiKey)),
        Err(e) => Err(Problem::from(e)),
    }
}

/// A merchant's key as presented, not yet looked up: for payout creation, which reads the key's
/// merchant together with the payout under the request's key (one round trip for a replay).
pub struct PresentedKey(pub ApiKey);

impl FromRequestParts<AppState> for PresentedKey {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<PresentedKey, Problem> {
        bearer(parts).map(PresentedKey)
    }
}

/// Proof that the request carries the operator key.
pub struct Operator;

impl FromRequestParts<AppState> for Operator {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Operator, Problem> {
        let key = bearer(parts)?;
        let Some(expected) = &state.operator_key_hash else {
            return Err(Problem::unauthorized(
                "operator endpoints are disabled: set PAYOUTD_OPERATOR_KEY",
            ));
        };
        if key_hash_eq(&key.hash(), expected) {
            state.failed_auths.know(&key);
            Ok(Operator)
        } else {
            Err(Problem::unauthorized("this endpoint needs the operator key"))
        }
    }
}

/// Proof that the request may credit deposits: the deposit key when one is configured (and then
/// only it: the operator key, which people use daily, cannot mint balances), else the operator key.
pub struct Depositor;

impl FromRequestParts<AppState> for Depositor {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Depositor, Problem> {
        let Some(expected) = &state.deposit_key_hash else {
            return Operator::from_request_parts(parts, state).await.map(|Operator| Depositor);
        };
        let key = bearer(parts)?;
        if key_hash_eq(&key.hash(), expected) {
            state.failed_auths.know(&key);
            Ok(Depositor)
        } else {
            Err(Problem::unauthorized("deposits need the deposit key (PAYOUTD_DEPOSIT_KEY)"))
        }
    }
}

/// Either caller: endpoints that behave differently for the operator (cancel after signing).
pub enum Caller {
    Merchant(MerchantId),
    Operator,
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Caller, Problem> {
        let key = bearer(parts)?;
        if state
            .operator_key_hash
            .as_ref()
            .is_some_and(|expected| key_hash_eq(&key.hash(), expected))
        {
            state.failed_auths.know(&key);
            return Ok(Caller::Operator);
        }
        match state.engine.authenticate(&key).await {
            Ok(Some(id)) => {
                state.failed_auths.know(&key);
                Ok(Caller::Merchant(id))
            }
            Ok(None) => Err(Problem::unauthorized("unknown or revoked API key")),
            Err(e) => Err(Problem::from(e)),
        }
    }
}

/// Compares two digests without an early exit, so timing does not reveal a prefix.
pub fn key_hash_eq(a: &ApiKeyHash, b: &ApiKeyHash) -> bool {
    constant_time_eq(a.as_str().as_bytes(), b.as_str().as_bytes())
}

/// Compares two secrets in time that does not depend on where they differ (`subtle`).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}
