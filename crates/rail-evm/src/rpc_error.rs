//! Every failure of a node call classified once into a kind the engine acts on (never matched by text elsewhere).

use alloy::rpc::json_rpc::ErrorPayload;

/// Node error messages are kept up to this length; some nodes echo whole payloads.
pub const RPC_ERROR_MESSAGE_MAX_CHARS: usize = 512;

/// Why a call failed, decided here once so that callers match on variants, never on text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// The node already holds a transaction with this hash (geth "already known", anvil
    /// "transaction already imported"). It may be ours: look the stored hash up.
    #[error("node already knows this transaction: {message}")]
    AlreadyKnown { message: String },
    /// The account's nonce has moved past this transaction's: ours may have been mined, or
    /// another transaction took the nonce. Check receipts of every stored hash.
    #[error("nonce too low: {message}")]
    NonceTooLow { message: String },
    /// Another transaction holds this nonce in the pool and ours does not outbid it.
    /// Not proof that the pooled one is ours.
    #[error("replacement transaction underpriced: {message}")]
    ReplacementUnderpriced { message: String },
    #[error("insufficient funds: {message}")]
    InsufficientFunds { message: String },
    /// Below the pool's minimum or the block's base fee.
    #[error("fee too low: {message}")]
    FeeTooLow { message: String },
    /// No answer within the budget; the node may have acted on the request.
    #[error("{method} timed out after {timeout_ms} ms; outcome unknown")]
    Timeout { method: &'static str, timeout_ms: u64 },
    /// Connection refused, reset or closed before a full answer; the node may have acted.
    #[error("{method}: transport failure, outcome unknown: {detail}")]
    Transport { method: &'static str, detail: String },
    /// Any other JSON-RPC error object.
    #[error("{method} rejected by node: code {code}: {message}")]
    Rejected { method: &'static str, code: i64, message: String },
    /// An answer arrived but could not be understood; the node may have acted.
    #[error("{method}: undecodable answer: {detail}")]
    Decode { method: &'static str, detail: String },
    /// A batch request answered with one error object for all of it: the node or a gateway in
    /// front of it takes no batches, and acted on none of the calls.
    #[error("batch request refused as a whole: code {code}: {message}")]
    BatchRefused { code: i64, message: String },
    /// The node that answered had not reached the block a read is judged at: its "no receipt"
    /// says nothing about that block (a replica behind the others of one endpoint).
    #[error(
        "the node that answered is at block {head}, behind block {needed} the read is judged at"
    )]
    NodeBehind { head: u64, needed: u64 },
}

impl RpcError {
    /// True when the node may or may not have acted: the caller must not record a failure,
    /// only look the outcome up later.
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            RpcError::Timeout { .. }
                | RpcError::Transport { .. }
                | RpcError::Decode { .. }
                | RpcError::NodeBehind { .. }
        )
    }

    /// True when the answer says a transaction like this may already be on its way
    /// (pooled or mined); the stored hashes decide whether it is ours.
    pub fn maybe_already_sent(&self) -> bool {
        matches!(self, RpcError::AlreadyKnown { .. } | RpcError::NonceTooLow { .. })
    }
}

/// Maps a JSON-RPC error object to a kind. Matching on text is unavoidable here because
/// nodes share codes (-32000, -32003) across causes; it happens in this one place only.
pub fn classify_node_error(method: &'static str, code: i64, message: &str) -> RpcError {
    let text = message.to_ascii_lowercase();
    let message = truncate(message);
    let has = |needle: &str| text.contains(needle);
    // Order matters: "replacement transaction underpriced" also contains "underpriced".
    if has("already known")
        || has("already imported")
        || has("known transaction")
        || has("existing tx with same hash")
    {
        RpcError::AlreadyKnown { message }
    } else if has("replacement transaction underpriced") || has("replacement underpriced") {
        RpcError::ReplacementUnderpriced { message }
    } else if has("nonce too low") || has("nonce is too low") {
        RpcError::NonceTooLow { message }
    } else if has("insufficient funds") || has("exceeds account balance") {
        RpcError::InsufficientFunds { message }
    } else if has("underpriced")
        || has("less than block base fee")
        || has("fee cap less than")
        || has("feecap too low")
        || has("gas price too low")
        || has("below configured minimum")
    {
        RpcError::FeeTooLow { message }
    } else {
        RpcError::Rejected { method, code, message }
    }
}

/// A JSON-RPC error object as a kind, with the node's `data` text kept in the message.
pub(super) fn node_error(method: &'static str, error: &ErrorPayload) -> RpcError {
    let data = error.data.as_ref().and_then(|data| serde_json::from_str::<String>(data.get()).ok());
    let message = match data {
        Some(data) if !data.is_empty() => format!("{} ({data})", error.message),
        _ => error.message.to_string(),
    };
    tracing::debug!(method, code = error.code, message = %message, "node answered with a JSON-RPC error");
    classify_node_error(method, error.code, &message)
}

pub(super) fn truncate(message: &str) -> String {
    match message.char_indices().nth(RPC_ERROR_MESSAGE_MAX_CHARS) {
        Some((cut, _)) => format!("{}...", &message[..cut]),
        None => message.to_owned(),
    }
}

pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
