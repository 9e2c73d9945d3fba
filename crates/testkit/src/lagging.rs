//! A replica behind the node it fronts, as a load-balanced endpoint may answer: the node's answer rewritten as a node some blocks (EVM) or slots (Solana) behind would give it.

use serde_json::{Value, json};

use crate::http1::{forward, methods_of};

/// The node's answer to `body`, rewritten as a replica `blocks` behind its head would give it; the
/// head (an EVM node's block, a Solana node's slot) is read first, so the replica is behind
/// whatever the answer saw.
pub async fn forward_behind(
    http: &reqwest::Client,
    upstream: &reqwest::Url,
    body: Vec<u8>,
    blocks: u64,
) -> (String, Vec<u8>) {
    let evm = methods_of(&body).iter().any(|m| m.starts_with("eth_"));
    let ask_head = if evm {
        br#"{"jsonrpc":"2.0","id":0,"method":"eth_blockNumber","params":[]}"#.to_vec()
    } else {
        br#"{"jsonrpc":"2.0","id":0,"method":"getSlot","params":[{"commitment":"processed"}]}"#
            .to_vec()
    };
    let (_, head) = forward(http, upstream, ask_head).await;
    let head =
        serde_json::from_slice::<serde_json::Value>(&head).ok().and_then(|v| match &v["result"] {
            serde_json::Value::String(hex) => {
                u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok()
            }
            number => number.as_u64(),
        });
    let (status, answer) = forward(http, upstream, body.clone()).await;
    match head.and_then(|head| behind(&body, &answer, head, blocks)) {
        Some(lagged) => (status, lagged),
        None => ("502 Bad Gateway".into(), Vec::new()),
    }
}

/// What a node `blocks` behind a head of `head` would have answered to `request` (a call or a
/// batch), given the up-to-date node's `answer`: its head lower, the newest blocks' receipts
/// unknown, and state at a block it does not have refused. `None` when either is not JSON.
pub fn behind(request: &[u8], answer: &[u8], head: u64, blocks: u64) -> Option<Vec<u8>> {
    let request: Value = serde_json::from_slice(request).ok()?;
    let mut answer: Value = serde_json::from_slice(answer).ok()?;
    let lagged = head.saturating_sub(blocks);
    match (&request, &mut answer) {
        (Value::Array(calls), Value::Array(answers)) => {
            for entry in answers.iter_mut() {
                let call = calls.iter().find(|c| c.get("id") == entry.get("id"));
                if let Some(call) = call {
                    rewrite(call, entry, lagged);
                }
            }
        }
        (call, entry) => rewrite(call, entry, lagged),
    }
    Some(answer.to_string().into_bytes())
}

/// One entry of the answer as the lagging node gives it.
fn rewrite(call: &Value, entry: &mut Value, lagged: u64) {
    let method = call.get("method").and_then(Value::as_str).unwrap_or_default();
    let params = call.get("params").and_then(Value::as_array).cloned().unwrap_or_default();
    match method {
        "eth_blockNumber" => entry["result"] = json!(format!("{lagged:#x}")),
        "eth_getTransactionReceipt" => {
            let block = entry.pointer("/result/blockNumber").and_then(Value::as_str).and_then(hex);
            if block.is_some_and(|b| b > lagged) {
                entry["result"] = Value::Null;
            }
        }
        "eth_getTransactionCount" | "eth_getBalance" | "eth_call" => {
            let at = params.last().and_then(Value::as_str).and_then(hex);
            if at.is_some_and(|b| b > lagged) {
                let id = entry.get("id").cloned().unwrap_or(Value::Null);
                *entry = json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32000, "message": "header not found"}});
            }
        }
        // A block past the replica's head is one it does not have yet.
        "eth_getBlockByNumber" => {
            let number = params.first().and_then(Value::as_str).and_then(hex);
            if number.is_some_and(|b| b > lagged) {
                entry["result"] = Value::Null;
            }
        }
        "getSignatureStatuses" => signature_statuses_behind(entry, lagged),
        _ => {}
    }
}

/// A Solana node at slot `lagged` knows no signature that landed after it, and says so at its slot.
fn signature_statuses_behind(entry: &mut Value, lagged: u64) {
    if let Some(slot) = entry.pointer_mut("/result/context/slot")
        && slot.as_u64().is_some_and(|s| s > lagged)
    {
        *slot = json!(lagged);
    }
    if let Some(Value::Array(statuses)) = entry.pointer_mut("/result/value") {
        for status in statuses {
            if status.get("slot").and_then(Value::as_u64).is_some_and(|s| s > lagged) {
                *status = Value::Null;
            }
        }
    }
}

fn hex(text: &str) -> Option<u64> {
    u64::from_str_radix(text.strip_prefix("0x")?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_answered_as_the_lagging_node_would() {
        let request = br#"[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]},
            {"jsonrpc":"2.0","id":2,"method":"eth_getTransactionReceipt","params":["0xab"]},
            {"jsonrpc":"2.0","id":3,"method":"eth_getTransactionCount","params":["0x01","0x9"]}]"#;
        let answer = br#"[{"jsonrpc":"2.0","id":1,"result":"0xa"},
            {"jsonrpc":"2.0","id":2,"result":{"blockNumber":"0x9"}},
            {"jsonrpc":"2.0","id":3,"result":"0x1"}]"#;
        let lagged: Value =
            serde_json::from_slice(&behind(request, answer, 10, 3).unwrap()).unwrap();
        assert_eq!(lagged[0]["result"], "0x7");
        assert_eq!(lagged[1]["result"], Value::Null);
        assert_eq!(lagged[2]["error"]["message"], "header not found");
    }

    #[test]
    fn a_block_past_the_replicas_head_is_not_there_yet() {
        let request =
            br#"[{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x9",true]},
            {"jsonrpc":"2.0","id":2,"method":"eth_getBlockByNumber","params":["0x6",true]}]"#;
        let answer = br#"[{"jsonrpc":"2.0","id":1,"result":{"number":"0x9"}},
            {"jsonrpc":"2.0","id":2,"result":{"number":"0x6"}}]"#;
        let lagged: Value =
            serde_json::from_slice(&behind(request, answer, 10, 3).unwrap()).unwrap();
        assert_eq!(lagged[0]["result"], Value::Null);
        assert_eq!(lagged[1]["result"]["number"], "0x6");
    }

    #[test]
    fn a_solana_replica_behind_knows_no_later_signature() {
        let request =
            br#"{"jsonrpc":"2.0","id":3,"method":"getSignatureStatuses","params":[["a","b"]]}"#;
        let answer = br#"{"jsonrpc":"2.0","id":3,"result":{"context":{"slot":500},
            "value":[{"slot":480,"confirmations":null},{"slot":100,"confirmations":null}]}}"#;
        let lagged: Value =
            serde_json::from_slice(&behind(request, answer, 500, 50).unwrap()).unwrap();
        assert_eq!(lagged["result"]["context"]["slot"], 450);
        assert_eq!(lagged["result"]["value"][0], Value::Null);
        assert_eq!(lagged["result"]["value"][1]["slot"], 100);
    }

    #[test]
    fn a_receipt_in_a_block_the_replica_has_is_kept() {
        let request =
            br#"{"jsonrpc":"2.0","id":7,"method":"eth_getTransactionReceipt","params":["0xab"]}"#;
        let answer = br#"{"jsonrpc":"2.0","id":7,"result":{"blockNumber":"0x5"}}"#;
        let lagged: Value =
            serde_json::from_slice(&behind(request, answer, 10, 3).unwrap()).unwrap();
        assert_eq!(lagged["result"]["blockNumber"], "0x5");
    }
}
