//! The HTTP transport under alloy's `RpcClient`: answers read under a size cap, a single call's id checked, and a batch refused as a whole told apart from a lost answer.

use std::task::{Context, Poll};

use alloy::rpc::json_rpc::{
    ErrorPayload, Id, RequestPacket, Response, ResponsePacket, ResponsePayload,
};
use alloy::transports::{TransportError, TransportErrorKind, TransportFut};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::RPC_ANSWER_BYTES_MAX;
use super::error::error_chain;

/// Why an exchange with the node failed below JSON-RPC; `EvmRpc` turns it into an `RpcError`
/// with the method's name (alloy carries it as `TransportErrorKind::Custom`).
#[derive(Debug, thiserror::Error)]
pub(super) enum Failure {
    #[error("no answer within the call budget")]
    Timeout,
    #[error("{0}")]
    Transport(String),
    /// A gateway page or rate limiter answered instead of the node.
    #[error("HTTP {0} without a JSON-RPC body")]
    NotJsonRpc(reqwest::StatusCode),
    #[error("{0}")]
    Undecodable(String),
    /// One error object for a whole batch: the node or a gateway takes no batches.
    #[error("batch refused as a whole: code {code}: {message}")]
    BatchRefused { code: i64, message: String },
}

/// One node URL over a shared reqwest pool; clones share the pool.
#[derive(Clone)]
pub(super) struct NodeHttp {
    pub(super) http: reqwest::Client,
    pub(super) url: reqwest::Url,
}

impl tower::Service<RequestPacket> for NodeHttp {
    type Response = ResponsePacket;
    type Error = TransportError;
    type Future = TransportFut<'static>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), TransportError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: RequestPacket) -> TransportFut<'static> {
        let node = self.clone();
        Box::pin(async move { node.exchange(request).await.map_err(TransportErrorKind::custom) })
    }
}

impl NodeHttp {
    async fn exchange(self, request: RequestPacket) -> Result<ResponsePacket, Failure> {
        // A single call's id, kept to check its answer against; a batch's ids alloy matches.
        let single_id = request.as_single().map(|sent| sent.id().clone());
        let body = request.serialize().map_err(|e| Failure::Undecodable(e.to_string()))?;
        let (status, bytes) = self.post(String::from(Box::<str>::from(body))).await?;
        let not_json_rpc = |e: serde_json::Error| match status.is_success() {
            true => Failure::Undecodable(e.to_string()),
            false => Failure::NotJsonRpc(status),
        };
        match single_id {
            Some(sent) => {
                let wire: Wire = serde_json::from_slice(&bytes).map_err(not_json_rpc)?;
                Ok(ResponsePacket::Single(wire.answer_to(&sent)?))
            }
            None => batch_answer(&bytes).map_err(|e| match e {
                BatchParse::Json(e) => not_json_rpc(e),
                BatchParse::Failure(failure) => failure,
            }),
        }
    }

    /// POSTs one body and reads the answer a chunk at a time, cut past the limit: a node (or
    /// whatever answers in its place) cannot make the process hold an answer of any size.
    async fn post(&self, body: String) -> Result<(reqwest::StatusCode, Vec<u8>), Failure> {
        let mut response = self
            .http
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(http_failure)?;
        let status = response.status();
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(http_failure)? {
            if bytes.len() + chunk.len() > RPC_ANSWER_BYTES_MAX {
                return Err(Failure::Undecodable(format!(
                    "the answer is longer than {RPC_ANSWER_BYTES_MAX} bytes"
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok((status, bytes))
    }
}

fn http_failure(error: reqwest::Error) -> Failure {
    if error.is_timeout() {
        Failure::Timeout
    } else {
        // Node URLs often embed an API key; reqwest would print the URL.
        Failure::Transport(error_chain(&error.without_url()))
    }
}

/// One JSON-RPC answer object, read more leniently than alloy's own `Response`: an error beside
/// `"result": null` is still the error, and a missing id is null.
#[derive(Deserialize)]
struct Wire {
    #[serde(default = "no_id")]
    id: Id,
    #[serde(default)]
    result: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<ErrorPayload>,
}

fn no_id() -> Id {
    Id::None
}

impl Wire {
    /// The answer to a single call, which must carry its id; some gateways answer errors with a
    /// null id, and the error still belongs to this call. (alloy matches no id on a single call.)
    fn answer_to(self, sent: &Id) -> Result<Response, Failure> {
        let id_matches = self.id == *sent || (self.id == Id::None && self.error.is_some());
        if !id_matches {
            return Err(Failure::Undecodable(format!(
                "answer id {} does not match request id {sent}",
                self.id
            )));
        }
        Ok(Response { id: sent.clone(), payload: self.into_payload().1 })
    }

    /// The answer's id and its payload: an error object wins over any result, and no result at
    /// all reads as `null`.
    fn into_payload(self) -> (Id, ResponsePayload) {
        let payload = match (self.error, self.result) {
            (Some(error), _) => ResponsePayload::Failure(error),
            (None, Some(result)) => ResponsePayload::Success(result),
            (None, None) => ResponsePayload::Success(null()),
        };
        (self.id, payload)
    }
}

fn null() -> Box<RawValue> {
    RawValue::from_string("null".to_owned()).expect("null is JSON")
}

enum BatchParse {
    Json(serde_json::Error),
    Failure(Failure),
}

/// A batch's answers. Entries that do not parse are left out (alloy then reports each one it
/// lacks as missing, an unknown outcome of its own); one error object for the whole batch is
/// `BatchRefused`, never a lost answer.
fn batch_answer(bytes: &[u8]) -> Result<ResponsePacket, BatchParse> {
    let starts_as_object = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    if starts_as_object {
        let single: Wire = serde_json::from_slice(bytes).map_err(BatchParse::Json)?;
        return Err(BatchParse::Failure(match single.error {
            Some(error) => {
                Failure::BatchRefused { code: error.code, message: error.message.into_owned() }
            }
            None => Failure::Undecodable("a batch answered with a single object".into()),
        }));
    }
    let items: Vec<&RawValue> = serde_json::from_slice(bytes).map_err(BatchParse::Json)?;
    let answers = items
        .into_iter()
        .filter_map(|item| serde_json::from_str::<Wire>(item.get()).ok())
        .map(|wire| {
            let (id, payload) = wire.into_payload();
            Response { id, payload }
        })
        .collect();
    Ok(ResponsePacket::Batch(answers))
}
