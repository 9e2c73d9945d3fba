//! Unit tests of the JSON-RPC client: error classification, batches, redaction, canned answers.

use super::*;

const SEND: &str = "eth_sendRawTransaction";

fn kind(code: i64, message: &str) -> RpcError {
    classify_node_error(SEND, code, message)
}

#[test]
fn classifies_anvil_messages() {
    // Verbatim from anvil 1.7.1 (see tests/anvil.rs, which re-checks them live).
    assert!(matches!(kind(-32003, "transaction already imported"), RpcError::AlreadyKnown { .. }));
    assert!(matches!(kind(-32003, "nonce too low"), RpcError::NonceTooLow { .. }));
    assert!(matches!(
        kind(-32003, "replacement transaction underpriced"),
        RpcError::ReplacementUnderpriced { .. }
    ));
    assert!(matches!(
        kind(-32003, "Insufficient funds for gas * price + value"),
        RpcError::InsufficientFunds { .. }
    ));
}

#[test]
fn classifies_geth_messages() {
    assert!(matches!(kind(-32000, "already known"), RpcError::AlreadyKnown { .. }));
    assert!(matches!(
        kind(-32000, "nonce too low: next nonce 5, tx nonce 3"),
        RpcError::NonceTooLow { .. }
    ));
    assert!(matches!(
        kind(-32000, "replacement transaction underpriced"),
        RpcError::ReplacementUnderpriced { .. }
    ));
    assert!(matches!(
        kind(
            -32000,
            "insufficient funds for gas * price + value: balance 0, tx cost 21000, overshot 21000"
        ),
        RpcError::InsufficientFunds { .. }
    ));
    assert!(matches!(
        kind(-32000, "transaction underpriced: tip needed 1, tip permitted 0"),
        RpcError::FeeTooLow { .. }
    ));
    assert!(matches!(
        kind(
            -32000,
            "max fee per gas less than block base fee: address 0x0, maxFeePerGas: 1, baseFee: 7"
        ),
        RpcError::FeeTooLow { .. }
    ));
}

#[test]
fn classifies_other_clients_messages() {
    assert!(matches!(
        kind(-32000, "INTERNAL_ERROR: existing tx with same hash"),
        RpcError::AlreadyKnown { .. }
    )); // erigon
    assert!(matches!(kind(-32000, "Known transaction"), RpcError::AlreadyKnown { .. })); // besu
    assert!(matches!(
        kind(-32000, "Transaction nonce is too low. Try incrementing the nonce."),
        RpcError::NonceTooLow { .. }
    ));
    assert!(matches!(
        kind(-32000, "Upfront cost exceeds account balance"),
        RpcError::InsufficientFunds { .. }
    )); // besu
}

#[test]
fn replacement_underpriced_is_never_already_known() {
    // Failure catalogue 14: the pooled transaction at this nonce may not be ours.
    let error = kind(-32003, "replacement transaction underpriced");
    assert!(!error.maybe_already_sent());
    assert!(!error.outcome_unknown());
}

#[test]
fn unknown_errors_keep_code_and_text() {
    let error = kind(-32000, "exceeds block gas limit");
    assert_eq!(
        error,
        RpcError::Rejected {
            method: SEND,
            code: -32000,
            message: "exceeds block gas limit".into()
        }
    );
    assert!(!error.outcome_unknown());
}

#[test]
fn only_timeouts_transport_and_decode_are_unknown_outcomes() {
    assert!(RpcError::Timeout { method: SEND, timeout_ms: 1 }.outcome_unknown());
    assert!(RpcError::Transport { method: SEND, detail: String::new() }.outcome_unknown());
    assert!(RpcError::Decode { method: SEND, detail: String::new() }.outcome_unknown());
    assert!(!kind(-32003, "nonce too low").outcome_unknown());
    assert!(kind(-32003, "nonce too low").maybe_already_sent());
    assert!(kind(-32000, "already known").maybe_already_sent());
}

#[test]
fn long_messages_are_truncated() {
    let long = "x".repeat(RPC_ERROR_MESSAGE_MAX_CHARS * 3);
    let RpcError::Rejected { message, .. } = kind(-1, &long) else { panic!() };
    assert_eq!(message.len(), RPC_ERROR_MESSAGE_MAX_CHARS + 3);
}

#[test]
fn debug_hides_the_url_path_where_api_keys_live() {
    let rpc = EvmRpc::new("https://eth.example.com/v3/SECRETKEY123").unwrap();
    assert_eq!(format!("{rpc:?}"), "EvmRpc(https://eth.example.com)");
    assert!(EvmRpc::new("ftp://x").is_err());
}

/// A one-shot HTTP server answering every request with `status` and `body`.
async fn canned(status: &'static str, body: &'static str) -> EvmRpc {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 64 * 1024];
        let _ = stream.read(&mut request).await;
        let answer = format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(answer.as_bytes()).await;
    });
    EvmRpc::new(&url).unwrap()
}

/// A signer service's caller token goes out in the Authorization header of every call, and no
/// debug print of the client shows it.
#[tokio::test]
async fn a_bearer_token_is_sent_with_every_call_and_never_printed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 64 * 1024];
        let n = stream.read(&mut request).await.unwrap();
        let body = r#"{"jsonrpc":"2.0","id":0,"result":"0x1"}"#;
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(answer.as_bytes()).await;
        String::from_utf8_lossy(&request[..n]).to_lowercase()
    });
    let rpc = EvmRpc::with_bearer_token(&url, "caller-token-1").unwrap();
    assert!(!format!("{rpc:?}").contains("caller-token-1"));
    let _ = rpc.mined_nonce(EvmAddress::from_bytes([1; 20])).await;
    let request = seen.await.unwrap();
    assert!(request.contains("authorization: bearer caller-token-1"), "{request}");
    assert!(matches!(
        EvmRpc::with_bearer_token(&url, "bad\ntoken"),
        Err(RpcSetupError::InvalidToken)
    ));
}

#[tokio::test]
async fn error_objects_are_classified_even_with_a_null_id() {
    let rpc = canned(
        "200 OK",
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"already known"}}"#,
    )
    .await;
    let error = rpc.send_raw(&[0x02]).await.unwrap_err();
    assert_eq!(error, RpcError::AlreadyKnown { message: "already known".into() });
}

#[tokio::test]
async fn a_gateway_page_is_a_transport_failure() {
    let rpc = canned("502 Bad Gateway", "<html>bad gateway</html>").await;
    let error = rpc.send_raw(&[0x02]).await.unwrap_err();
    assert!(matches!(error, RpcError::Transport { .. }), "{error:?}");
    assert!(error.outcome_unknown());
}

#[tokio::test]
async fn garbage_or_a_foreign_id_is_a_decode_failure() {
    let rpc = canned("200 OK", "not json").await;
    assert!(matches!(rpc.block_number().await.unwrap_err(), RpcError::Decode { .. }));
    let rpc = canned("200 OK", r#"{"jsonrpc":"2.0","id":999,"result":"0x1"}"#).await;
    let error = rpc.block_number().await.unwrap_err();
    assert!(matches!(error, RpcError::Decode { .. }), "{error:?}");
    assert!(error.outcome_unknown());
}

#[tokio::test]
async fn null_receipt_is_none() {
    let rpc = answering(|call| {
        serde_json::json!({ "jsonrpc": "2.0", "id": call["id"], "result": null }).to_string()
    })
    .await;
    assert_eq!(rpc.receipt(TxHash::from_bytes([7; 32])).await.unwrap(), None);
}

#[tokio::test]
async fn refused_connection_is_transport_and_hides_the_url() {
    // Port 0 is never connectable. A port freed by a dropped listener was not safe: another test
    // of this binary could bind it meanwhile and answer this request with its canned body.
    let rpc = EvmRpc::new("http://127.0.0.1:0/SECRETKEY123").unwrap();
    let error = rpc.block_number().await.unwrap_err();
    assert!(matches!(error, RpcError::Transport { .. }), "{error:?}");
    assert!(error.outcome_unknown());
    assert!(!error.to_string().contains("SECRETKEY123"), "{error}");
}

/// An answer longer than `RPC_ANSWER_BYTES_MAX` is cut as it streams in and counted undecodable,
/// never held whole. (Before, it was read to the end, or until the call's timeout.)
#[tokio::test]
async fn an_answer_past_the_limit_is_cut_while_it_streams() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let sent = RPC_ANSWER_BYTES_MAX + (1 << 20);
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 64 * 1024];
        let _ = stream.read(&mut request).await;
        let head =
            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", 4 * RPC_ANSWER_BYTES_MAX);
        let _ = stream.write_all(head.as_bytes()).await;
        let chunk = vec![b' '; 64 * 1024];
        for _ in 0..sent / chunk.len() {
            if stream.write_all(&chunk).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(std::time::Duration::from_secs(60)).await; // the rest never comes
    });
    let error = EvmRpc::new(&url).unwrap().block_number().await.unwrap_err();
    assert!(
        matches!(&error, RpcError::Decode { detail, .. } if detail.contains("longer than")),
        "{error:?}"
    );
}

/// A one-shot HTTP server that reads the whole request and answers `200 OK` with
/// `answer(request)`: for answers that must carry the ids the client chose.
async fn answering(answer: fn(&Value) -> String) -> EvmRpc {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buffer = [0u8; 4096];
        let body = loop {
            let read = stream.read(&mut buffer).await.unwrap();
            assert!(read > 0, "the request ended early");
            request.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&request).to_string();
            let Some((head, body)) = text.split_once("\r\n\r\n") else { continue };
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase().strip_prefix("content-length:").map(str::to_owned)
                })
                .map(|v| v.trim().parse().unwrap())
                .unwrap();
            if body.len() >= length {
                break body.to_owned();
            }
        };
        let body = answer(&serde_json::from_str(&body).unwrap());
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(answer.as_bytes()).await;
    });
    EvmRpc::new(&url).unwrap()
}

fn ids(batch: &Value) -> Vec<Value> {
    batch.as_array().unwrap().iter().map(|call| call["id"].clone()).collect()
}

#[tokio::test]
async fn one_error_object_for_a_whole_batch_is_a_refusal_not_a_lost_answer() {
    let rpc = canned(
        "200 OK",
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"batch requests are not supported"}}"#,
    )
    .await;
    let error = rpc.send_raw_batch(&[&[0x02], &[0x03]]).await.unwrap_err();
    assert!(matches!(error, RpcError::BatchRefused { code: -32600, .. }), "{error:?}");
    assert!(!error.outcome_unknown());
}

/// Each entry of a batch stands alone: one the answer lacks, or one that does not parse, is
/// unknown by itself, and the others keep their own outcome.
#[tokio::test]
async fn a_batch_entry_missing_or_unreadable_is_unknown_by_itself() {
    let rpc = answering(|batch| {
        let ids = ids(batch);
        let hash = format!("0x{}", "ab".repeat(32));
        serde_json::json!([
            { "jsonrpc": "2.0", "id": ids[2], "error": "not an error object" },
            { "jsonrpc": "2.0", "id": ids[0], "result": hash },
            { "jsonrpc": "2.0", "id": ids[3], "error": { "code": -32000, "message": "nonce too low" } },
        ])
        .to_string()
    })
    .await;
    let answers = rpc.send_raw_batch(&[&[0x02], &[0x03], &[0x04], &[0x05]]).await.unwrap();
    assert_eq!(answers[0], Ok(TxHash::from_bytes([0xab; 32])));
    assert!(
        matches!(&answers[1], Err(RpcError::Decode { detail, .. }) if detail.contains("no answer"))
    );
    assert!(matches!(&answers[2], Err(e) if e.outcome_unknown()), "{:?}", answers[2]);
    assert!(matches!(answers[3], Err(RpcError::NonceTooLow { .. })), "{:?}", answers[3]);
}

#[tokio::test]
async fn a_batch_answer_to_a_single_call_is_undecodable() {
    let rpc = canned("200 OK", r#"[{"jsonrpc":"2.0","id":0,"result":"0x1"}]"#).await;
    let error = rpc.block_number().await.unwrap_err();
    assert!(matches!(error, RpcError::Decode { .. }), "{error:?}");
}

/// Some nodes send `"result": null` beside the error; the error decides (a strict reader would
/// call the answer undecodable and lose a definite refusal).
#[tokio::test]
async fn an_error_beside_a_null_result_is_the_error() {
    let rpc = answering(|call| {
        serde_json::json!({
            "jsonrpc": "2.0", "id": call["id"], "result": null,
            "error": { "code": -32000, "message": "insufficient funds for gas * price + value" },
        })
        .to_string()
    })
    .await;
    let error = rpc.send_raw(&[0x02]).await.unwrap_err();
    assert!(matches!(error, RpcError::InsufficientFunds { .. }), "{error:?}");
}

#[tokio::test]
async fn an_error_s_text_data_is_kept_in_its_message() {
    let rpc = answering(|call| {
        serde_json::json!({
            "jsonrpc": "2.0", "id": call["id"],
            "error": { "code": 3, "message": "execution reverted", "data": "0x08c379a0" },
        })
        .to_string()
    })
    .await;
    let error = rpc.send_raw(&[0x02]).await.unwrap_err();
    assert_eq!(
        error,
        RpcError::Rejected {
            method: SEND,
            code: 3,
            message: "execution reverted (0x08c379a0)".into()
        }
    );
}

/// A receipt as the node gives it, mined in `block`, with an OP Stack chain's `l1Fee` when given.
fn mined_receipt(block: u64, l1_fee: Option<&str>) -> Value {
    let mut receipt = serde_json::json!({
        "transactionHash": format!("0x{}", "07".repeat(32)),
        "blockNumber": format!("{block:#x}"),
        "blockHash": format!("0x{}", "11".repeat(32)),
        "status": "0x1",
        "from": format!("0x{}", "22".repeat(20)),
        "to": format!("0x{}", "33".repeat(20)),
        "gasUsed": "0x5208",
        "effectiveGasPrice": "0x3b9aca00",
        "logs": [],
    });
    if let Some(fee) = l1_fee {
        receipt["l1Fee"] = Value::String(fee.to_owned());
    }
    receipt
}

/// Base and Optimism charge an L1 data fee beside the execution fee, reported as the receipt's
/// `l1Fee`: it is part of what the sender paid. (Before, only gas used times its price was read.)
#[tokio::test]
async fn an_op_stack_receipt_s_l1_fee_is_part_of_the_fee_paid() {
    let rpc = answering(|call| {
        serde_json::json!({ "jsonrpc": "2.0", "id": call["id"], "result": mined_receipt(9, Some("0x2540be400")) })
            .to_string()
    })
    .await;
    let receipt = rpc.receipt(TxHash::from_bytes([7; 32])).await.unwrap().unwrap();
    let execution = 21_000u128 * 1_000_000_000;
    assert_eq!(receipt.fee_paid(), Amount::from_u128(execution + 10_000_000_000));
}

/// One batch answers the head, the nonce at the judged block and the receipts: a node whose head
/// is below that block is `NodeBehind` (unknown), whatever its receipts say.
#[tokio::test]
async fn a_node_behind_the_judged_block_answers_nothing_a_proof_can_use() {
    let rpc = answering(|batch| {
        let ids = ids(batch);
        serde_json::json!([
            { "jsonrpc": "2.0", "id": ids[0], "result": "0x5" },
            { "jsonrpc": "2.0", "id": ids[1], "result": "0x3" },
            { "jsonrpc": "2.0", "id": ids[2], "result": null },
        ])
        .to_string()
    })
    .await;
    let address = EvmAddress::parse(&format!("0x{}", "22".repeat(20))).unwrap();
    let error =
        rpc.nonce_and_receipts_at(address, 8, &[TxHash::from_bytes([7; 32])]).await.unwrap_err();
    assert!(matches!(error, RpcError::NodeBehind { head: 5, needed: 8 }), "{error:?}");
    assert!(error.outcome_unknown());
}

/// The same batch from a node at or past the judged block: its nonce there and its receipts,
/// `None` for a hash it has no receipt of.
#[tokio::test]
async fn a_node_that_has_the_judged_block_answers_the_proof() {
    let rpc = answering(|batch| {
        let ids = ids(batch);
        serde_json::json!([
            { "jsonrpc": "2.0", "id": ids[0], "result": "0xa" },
            { "jsonrpc": "2.0", "id": ids[1], "result": "0x4" },
            { "jsonrpc": "2.0", "id": ids[2], "result": null },
            { "jsonrpc": "2.0", "id": ids[3], "result": mined_receipt(7, None) },
        ])
        .to_string()
    })
    .await;
    let address = EvmAddress::parse(&format!("0x{}", "22".repeat(20))).unwrap();
    let (nonce, receipts) = rpc
        .nonce_and_receipts_at(
            address,
            8,
            &[TxHash::from_bytes([6; 32]), TxHash::from_bytes([7; 32])],
        )
        .await
        .unwrap();
    assert_eq!(nonce, 4);
    assert_eq!(receipts[0], None);
    assert_eq!(receipts[1].as_ref().map(|r| r.block_number), Some(7));
}
