//! The JSON shapes of the API (serde and OpenAPI live here only) and their hand conversion to and from the domain.

use payoutd_domain::{
    Amount, Asset, AssetRegistry, Attempt, AttemptSlot, Incident, Metadata, SolanaExpiry,
};
use payoutd_engine::store::{Balance, Deposit};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::problem::Problem;

/// `POST /v1/payouts`. Amounts are decimal strings in base units, never JSON numbers.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePayoutBody {
    /// Asset code, e.g. `evm:31337/USDC`.
    pub asset: String,
    /// Base units as a decimal string, e.g. `"1500000"` for 1.5 USDC: positive, no leading zero, at most 2^256-1.
    #[schema(value_type = String, pattern = "^[1-9][0-9]{0,77}$", example = "1500000")]
    pub amount: serde_json::Value,
    /// Address on the asset's rail (EVM: 0x + 40 hex, EIP-55 checked when mixed case).
    pub destination: String,
    /// 8-128 printable ASCII. The server also takes it from the `Idempotency-Key` or
    /// `X-Idempotency-Key` header instead (all that are present must agree); described as required
    /// here so a client generated from this document always sends one.
    #[schema(
        min_length = 8,
        max_length = 128,
        pattern = "^[!-~]+$",
        required = true,
        nullable = false
    )]
    pub idempotency_key: Option<String>,
    /// A JSON object of at most 4 KiB, stored and returned as given (keys sorted); absent or
    /// null: none.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
}

/// `POST /v1/deposits` (operator): credits a merchant's available balance, idempotently.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateDepositBody {
    #[schema(pattern = "^mer_[0-9a-f]{32}$")]
    pub merchant_id: String,
    pub asset: String,
    #[schema(value_type = String, pattern = "^[1-9][0-9]{0,77}$", example = "1000000000")]
    pub amount: serde_json::Value,
    /// 1-128 printable ASCII; or send it in `Idempotency-Key` (described as required here so a
    /// generated client always sends one).
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = "^[!-~]+$",
        required = true,
        nullable = false
    )]
    pub idempotency_key: Option<String>,
}

/// The payout object: one shape for the API and the events (`payoutd_engine::store`).
pub use payoutd_engine::store::PayoutBody;

#[derive(Debug, Serialize, ToSchema)]
pub struct PayoutList {
    /// Always `list`.
    pub object: &'static str,
    pub data: Vec<PayoutBody>,
    pub has_more: bool,
    /// Pass as `cursor` to get the next (older) page.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListPayoutsParams {
    /// "Query before retry": find the payout a key created, if any.
    #[param(min_length = 8, max_length = 128, pattern = "^[!-~]+$")]
    pub idempotency_key: Option<String>,
    pub status: Option<String>,
    /// The `next_cursor` of the previous page.
    #[param(pattern = "^po_[0-9a-f]{32}$")]
    pub cursor: Option<String>,
    /// 1-100, default 20.
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BalanceBody {
    pub asset: String,
    pub available: String,
    pub held: String,
}

impl BalanceBody {
    pub fn from_domain(b: &Balance) -> BalanceBody {
        BalanceBody {
            asset: b.asset.to_string(),
            available: b.available.to_string(),
            held: b.held.to_string(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BalanceList {
    pub object: &'static str,
    pub data: Vec<BalanceBody>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DepositBody {
    pub id: String,
    pub object: &'static str,
    pub merchant_id: String,
    pub asset: String,
    pub amount: String,
    pub idempotency_key: String,
    pub created_at_ms: i64,
}

impl DepositBody {
    pub fn from_domain(d: &Deposit) -> DepositBody {
        DepositBody {
            id: d.id.to_string(),
            object: "deposit",
            merchant_id: d.merchant_id.to_string(),
            asset: d.asset.to_string(),
            amount: d.amount.to_string(),
            idempotency_key: d.key.to_string(),
            created_at_ms: d.created_at_ms,
        }
    }
}

/// The problem+json body (RFC 9457).
#[derive(Debug, Serialize, ToSchema)]
pub struct ProblemBody {
    #[serde(rename = "type")]
    pub type_uri: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
}

/// Amount fields must be JSON strings: a JSON number may already have lost precision in the client.
pub fn amount_text(value: &serde_json::Value) -> Result<&str, Problem> {
    value.as_str().ok_or_else(|| {
        Problem::invalid(
            "amount must be a JSON string of decimal digits in base units, e.g. \"1500000\"",
        )
        .with_slug("invalid-amount")
    })
}

/// A body's asset, as configured, and its amount: positive, in that asset's base units.
pub fn asset_and_amount<'a>(
    assets: &'a AssetRegistry,
    asset: &str,
    amount: &serde_json::Value,
) -> Result<(&'a Asset, Amount), Problem> {
    let asset = assets
        .get(asset)
        .map_err(|e| Problem::invalid(e.to_string()).with_slug("unknown-asset"))?;
    let amount = Amount::parse_positive(amount_text(amount)?)
        .map_err(|e| Problem::invalid(e.to_string()).with_slug("invalid-amount"))?;
    Ok((asset, amount))
}

/// Metadata is an object; stored in canonical form (sorted keys, compact) so fingerprints compare.
pub fn metadata(value: Option<serde_json::Value>) -> Result<Metadata, Problem> {
    match value {
        None | Some(serde_json::Value::Null) => Ok(Metadata::empty()),
        Some(v @ serde_json::Value::Object(_)) => Metadata::from_canonical_json(v.to_string())
            .map_err(|e| Problem::invalid(e.to_string()).with_slug("invalid-metadata")),
        Some(_) => {
            Err(Problem::invalid("metadata must be a JSON object").with_slug("invalid-metadata"))
        }
    }
}

/// `POST /v1/payouts/{id}/resolve` (operator): settle a payout that needs attention.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolvePayoutBody {
    /// `paid`, `failed` (hold released) or `retry` (the next attempt, same hold); `failed` and `retry`
    /// need the chain's proof that the last attempt moved nothing.
    #[schema(pattern = "^(paid|failed|retry)$")]
    pub verdict: String,
    /// What the person looked at (explorer links, provider statements); stored with the attempt.
    #[schema(min_length = 1, max_length = 4096, pattern = "[^\\s]")]
    pub evidence: String,
}

/// `POST /v1/incidents/{id}/resolve` (operator).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveIncidentBody {
    /// What was decided (not blank).
    #[schema(min_length = 1, max_length = 4096, pattern = "[^\\s]")]
    pub resolution: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptTxBody {
    pub hash: String,
    /// `original`, `replacement` or `cancel`.
    pub kind: &'static str,
    /// EVM: the transaction's fee bid, wei per gas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_fee_per_gas: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_priority_fee_per_gas: Option<String>,
    pub created_at_ms: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptBody {
    pub id: String,
    pub attempt_no: u32,
    pub status: &'static str,
    /// `evm`, `solana` or `provider`: which of the slot fields below are set.
    pub rail: &'static str,
    /// EVM and Solana: the hot wallet (Solana: the fee payer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot_wallet_id: Option<String>,
    /// EVM: the nonce every transaction of the attempt shares.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nonce: Option<u64>,
    /// Solana: the block height after which the attempt's transactions can no longer land.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_valid_block_height: Option<u64>,
    /// Provider: which one, and its reference for the request once recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_reference: Option<String>,
    /// Every transaction this attempt ever signed, oldest first.
    pub transactions: Vec<AttemptTxBody>,
    pub mined_block: Option<u64>,
    pub mined_hash: Option<String>,
}

impl AttemptBody {
    pub fn from_domain(a: &Attempt) -> AttemptBody {
        AttemptBody {
            id: a.id.to_string(),
            attempt_no: a.attempt_no,
            status: a.status.as_str(),
            rail: a.slot.rail(),
            hot_wallet_id: a.slot.paying_wallet().map(str::to_owned),
            nonce: a.slot.as_evm().map(|evm| evm.nonce),
            last_valid_block_height: match &a.slot {
                AttemptSlot::Solana {
                    expiry: SolanaExpiry::LastValidBlockHeight(height), ..
                } => Some(*height),
                _ => None,
            },
            provider: match &a.slot {
                AttemptSlot::Provider { provider, .. } => Some(provider.clone()),
                _ => None,
            },
            provider_reference: match &a.slot {
                AttemptSlot::Provider { reference, .. } => {
                    reference.as_ref().map(ToString::to_string)
                }
                _ => None,
            },
            transactions: a
                .txs
                .iter()
                .map(|t| AttemptTxBody {
                    hash: t.hash.to_string(),
                    kind: t.kind.as_str(),
                    max_fee_per_gas: t.fees.map(|f| f.max_fee_per_gas.to_string()),
                    max_priority_fee_per_gas: t
                        .fees
                        .map(|f| f.max_priority_fee_per_gas.to_string()),
                    created_at_ms: t.created_at_ms,
                })
                .collect(),
            mined_block: a.mined.as_ref().map(|(b, _)| *b),
            mined_hash: a.mined.as_ref().map(|(_, h)| h.to_string()),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptList {
    pub object: &'static str,
    pub data: Vec<AttemptBody>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct IncidentBody {
    pub id: String,
    pub kind: &'static str,
    pub payout_id: Option<String>,
    pub attempt_id: Option<String>,
    pub detail: String,
    pub created_at_ms: i64,
}

impl IncidentBody {
    pub fn from_domain(i: &Incident) -> IncidentBody {
        IncidentBody {
            id: i.id.to_string(),
            kind: i.kind.as_str(),
            payout_id: i.payout_id.as_ref().map(ToString::to_string),
            attempt_id: i.attempt_id.as_ref().map(ToString::to_string),
            detail: i.detail.clone(),
            created_at_ms: i.created_at_ms,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct IncidentList {
    pub object: &'static str,
    pub data: Vec<IncidentBody>,
}
