//! A busy account's history: transfers made elsewhere (the platform's other payouts), shaped as each provider lists them, for lookups and benchmarks to read through.

use serde_json::json;

use crate::ProviderKind;
use crate::circle::{CIRCLE_SIM_USDC_TOKEN_ID, DEFAULT_BLOCKCHAIN};
use crate::core::{SimObject, iso};

/// What each transfer of the history moves, in whole units.
pub const HISTORY_AMOUNT: &str = "1";

/// Transfer `n` of `account`'s history, made at `created_ms`, to an address of its own and with a
/// reference of its own; `None` for a provider whose history is not modelled.
pub(crate) fn made_elsewhere(
    kind: ProviderKind,
    account: &str,
    n: usize,
    created_ms: u64,
) -> Option<SimObject> {
    let address = format!("0x{:040x}", 0x00e1_5e00_0000_u64 + n as u64);
    let reference = format!("elsewhere-{n}");
    let id = uuid::Uuid::from_u128(0x00e1_5e00_0000_4000_8000_0000_0000_0000 + n as u128);
    let (kind_name, id, data) = match kind {
        ProviderKind::Coinbase => {
            let id = format!("transfer_{id}");
            let data = json!({"transferId": id, "status": "processing",
                "source": {"accountId": account, "asset": "usdc"},
                "target": {"address": address, "network": "base", "asset": "usdc"},
                "amount": HISTORY_AMOUNT, "asset": "usdc", "sourceAmount": HISTORY_AMOUNT, "sourceAsset": "usdc",
                "targetAmount": HISTORY_AMOUNT, "targetAsset": "usdc", "fees": [],
                "createdAt": iso(created_ms), "updatedAt": iso(created_ms), "executedAt": iso(created_ms),
                "metadata": {"payoutd_reference": reference}});
            ("transfer", id, data)
        }
        ProviderKind::Circle => {
            let id = id.to_string();
            let data = json!({"id": id, "blockchain": DEFAULT_BLOCKCHAIN, "transactionType": "OUTBOUND",
                "createDate": iso(created_ms), "updateDate": iso(created_ms), "refId": reference,
                "amounts": [HISTORY_AMOUNT], "destinationAddress": address,
                "sourceAddress": "0x00000000000000000000000000000000000c1c1e", "walletId": account,
                "tokenId": CIRCLE_SIM_USDC_TOKEN_ID, "feeLevel": "MEDIUM", "operation": "TRANSFER",
                "custodyType": "DEVELOPER", "state": "INITIATED"});
            ("transaction", id, data)
        }
        ProviderKind::Bridge => {
            // `account` is the customer the transfers are made for, out of its Bridge wallet.
            let id = id.to_string();
            let data = json!({"id": id, "client_reference_id": reference, "state": "funds_received",
                "on_behalf_of": account, "amount": HISTORY_AMOUNT, "currency": "usd", "developer_fee": "0.0",
                "source": {"payment_rail": "bridge_wallet", "currency": "usdb", "bridge_wallet_id": "elsewhere"},
                "destination": {"payment_rail": "ethereum", "currency": "usdc", "to_address": address},
                "receipt": {"initial_amount": HISTORY_AMOUNT, "developer_fee": "0.0", "exchange_fee": "0.0",
                    "subtotal_amount": HISTORY_AMOUNT, "gas_fee": "0.0", "final_amount": HISTORY_AMOUNT},
                "created_at": iso(created_ms), "updated_at": iso(created_ms)});
            ("transfer", id, data)
        }
        ProviderKind::Stripe => return None,
    };
    Some(SimObject {
        id,
        kind: kind_name,
        created_ms,
        data,
        reference: Some(reference),
        failed: None,
        took: Vec::new(),
    })
}
