//! The Solana JSON-RPC calls the rail makes, through the standard client, with node errors classified in one place.

use std::time::Duration;

use payoutd_engine::rail::answers_at;
use solana_commitment_config::CommitmentConfig;
use solana_rpc_client::nonblocking::rpc_client::RpcClient;
use solana_rpc_client::rpc_client::GetConfirmedSignaturesForAddress2Config;
use solana_rpc_client_api::client_error::{Error as ClientError, ErrorKind};
use solana_rpc_client_api::request::{RpcError as ApiRpcError, RpcResponseErrorData};
use solana_rpc_client_types::config::{
    RpcBlockConfig, RpcSendTransactionConfig, RpcTransactionConfig,
};
use solana_sdk::hash::Hash;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;
use solana_sdk::transaction::TransactionError;
use solana_transaction_status_client_types::{
    EncodedConfirmedTransactionWithStatusMeta, TransactionDetails, TransactionStatus,
    UiTransactionEncoding,
};

use payoutd_domain::SecretUrl;

use crate::tx::decode;

/// One JSON-RPC call's budget; a call past it is "unknown", never "absent".
pub const RPC_CALL_TIMEOUT_MS: u64 = 10_000;
/// `getSignatureStatuses` takes at most this many signatures per call.
pub const SIGNATURE_STATUSES_PER_CALL_MAX: usize = 256;
/// `getSignaturesForAddress` answers at most this many per page.
pub const SIGNATURES_PER_PAGE_MAX: usize = 1_000;
/// Node error text kept in logs and errors.
pub const RPC_ERROR_MESSAGE_MAX_CHARS: usize = 300;

/// What a node's refusal or a failed call means, decided here and nowhere else.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// The same signature was already processed: an earlier copy of these bytes is on the chain.
    #[error("already processed")]
    AlreadyProcessed,
    /// The transaction's blockhash is not (or no longer) known to the node.
    #[error("blockhash not found")]
    BlockhashNotFound,
    /// The fee payer cannot pay the fee or the transfer.
    #[error("insufficient funds")]
    InsufficientFunds,
    /// Simulation before sending failed for another reason.
    #[error("preflight failed: {0}")]
    Preflight(String),
    /// No answer, a broken connection, a timeout: the node may or may not have acted.
    #[error("transport: {0}")]
    Transport(String),
    /// The node answered with an error object.
    #[error("node error {code}: {message}")]
    Node { code: i64, message: String },
    /// An answer that does not parse.
    #[error("bad answer: {0}")]
    BadAnswer(String),
    /// The node that answered had not reached the slot a read is judged at: its "not found" says
    /// nothing about that slot (a replica behind the others of one endpoint).
    #[error("the node that answered is at slot {slot}, behind slot {needed} the read is judged at")]
    NodeBehind { slot: u64, needed: u64 },
}

fn cut(text: String) -> String {
    text.chars().take(RPC_ERROR_MESSAGE_MAX_CHARS).collect()
}

fn classify_transaction_error(e: &TransactionError) -> RpcError {
    match e {
        TransactionError::AlreadyProcessed => RpcError::AlreadyProcessed,
        TransactionError::BlockhashNotFound => RpcError::BlockhashNotFound,
        TransactionError::InsufficientFundsForFee
        | TransactionError::InsufficientFundsForRent { .. } => RpcError::InsufficientFunds,
        other => RpcError::Preflight(cut(other.to_string())),
    }
}

/// Every node error, by kind: the engine and the rail decide by variant, never by text.
pub fn classify_node_error(e: &ClientError) -> RpcError {
    if let Some(tx_error) = e.get_transaction_error() {
        return classify_transaction_error(&tx_error);
    }
    match e.kind() {
        ErrorKind::RpcError(ApiRpcError::RpcResponseError { code, message, data }) => match data {
            RpcResponseErrorData::SendTransactionPreflightFailure(result) => match &result.err {
                Some(err) => classify_transaction_error(&err.clone().into()),
                None => RpcError::Preflight(cut(message.clone())),
            },
            _ => RpcError::Node { code: *code, message: cut(message.clone()) },
        },
        ErrorKind::RpcError(ApiRpcError::ParseError(text)) => {
            RpcError::BadAnswer(cut(text.clone()))
        }
        ErrorKind::SerdeJson(e) => RpcError::BadAnswer(cut(e.to_string())),
        ErrorKind::TransactionError(e) => classify_transaction_error(e),
        // reqwest names the URL it called, and an RPC URL carries its provider's API key.
        ErrorKind::Reqwest(e) => RpcError::Transport(cut(transport_without_url(
            e.is_timeout(),
            e.is_connect(),
            std::error::Error::source(e),
        ))),
        other => RpcError::Transport(cut(other.to_string())),
    }
}

/// What went wrong in transport, from the error's kind and its cause, never its URL.
fn transport_without_url(
    timeout: bool,
    connect: bool,
    cause: Option<&(dyn std::error::Error + 'static)>,
) -> String {
    let what = if timeout {
        "timed out"
    } else if connect {
        "could not connect"
    } else {
        "request failed"
    };
    match cause {
        Some(cause) => format!("{what}: {cause}"),
        None => what.to_owned(),
    }
}

/// Which page of an address's signatures to read.
#[derive(Debug, Clone, Copy)]
pub struct SignaturePage {
    pub until: Option<Signature>,
    pub before: Option<Signature>,
    pub limit: usize,
    pub commitment: CommitmentConfig,
}

/// The calls the Solana rail makes, over one reused client.
pub struct SolanaRpc {
    client: RpcClient,
    url: SecretUrl,
}

impl SolanaRpc {
    pub fn new(url: &SecretUrl) -> SolanaRpc {
        let client = RpcClient::new_with_timeout_and_commitment(
            url.expose().to_owned(),
            Duration::from_millis(RPC_CALL_TIMEOUT_MS),
            CommitmentConfig::confirmed(),
        );
        SolanaRpc { client, url: url.clone() }
    }

    /// The node's host and port, never its path or query (where hosted nodes carry API keys).
    pub fn host(&self) -> String {
        self.url.redacted().split_once("://").map_or_else(String::new, |(_, host)| host.to_owned())
    }

    /// `classify_node_error`, with the configured URL (and its key) out of any text the node
    /// client wrote: these errors reach logs and API answers.
    fn error(&self, e: &ClientError) -> RpcError {
        let (full, shown) = (self.url.expose(), self.url.redacted());
        let scrub = |text: String| if full.is_empty() { text } else { text.replace(full, &shown) };
        match classify_node_error(e) {
            RpcError::Preflight(text) => RpcError::Preflight(scrub(text)),
            RpcError::Transport(text) => RpcError::Transport(scrub(text)),
            RpcError::Node { code, message } => RpcError::Node { code, message: scrub(message) },
            RpcError::BadAnswer(text) => RpcError::BadAnswer(scrub(text)),
            other => other,
        }
    }

    /// A blockhash to sign against and the last block height at which it can land.
    pub async fn latest_blockhash(&self) -> Result<(Hash, u64), RpcError> {
        self.client
            .get_latest_blockhash_with_commitment(CommitmentConfig::confirmed())
            .await
            .map_err(|e| self.error(&e))
    }

    pub async fn slot(&self, commitment: CommitmentConfig) -> Result<u64, RpcError> {
        self.client.get_slot_with_commitment(commitment).await.map_err(|e| self.error(&e))
    }

    pub async fn block_height(&self, commitment: CommitmentConfig) -> Result<u64, RpcError> {
        self.client.get_block_height_with_commitment(commitment).await.map_err(|e| self.error(&e))
    }

    /// Sends stored bytes unchanged. Preflight is skipped: a refusal proves nothing about an
    /// earlier copy, and the status check decides; the node retries by itself until expiry.
    pub async fn send_raw(&self, raw: &[u8]) -> Result<Signature, RpcError> {
        let tx = decode(raw).map_err(|e| RpcError::BadAnswer(e.to_string()))?;
        let config = RpcSendTransactionConfig {
            skip_preflight: true,
            encoding: Some(UiTransactionEncoding::Base64),
            ..RpcSendTransactionConfig::default()
        };
        self.client.send_transaction_with_config(&tx, config).await.map_err(|e| self.error(&e))
    }

    /// The block height of the oldest block the node still holds: a status search finds nothing
    /// older, so "not found" is absence only for transactions that could not land below it.
    pub async fn first_available_block_height(&self) -> Result<u64, RpcError> {
        let slot = self.client.get_first_available_block().await.map_err(|e| self.error(&e))?;
        let config = RpcBlockConfig {
            encoding: None,
            transaction_details: Some(TransactionDetails::None),
            rewards: Some(false),
            commitment: Some(CommitmentConfig::finalized()),
            max_supported_transaction_version: Some(0),
        };
        let block =
            self.client.get_block_with_config(slot, config).await.map_err(|e| self.error(&e))?;
        block
            .block_height
            .ok_or_else(|| RpcError::BadAnswer(format!("block at slot {slot} has no block height")))
    }

    /// The finalized slot and the finalized block height as a node that has reached that slot
    /// answers it (`minContextSlot`): the moment a proof of expiry is judged at.
    pub async fn finalized_slot_and_height(&self) -> Result<(u64, u64), RpcError> {
        let slot = self.slot(CommitmentConfig::finalized()).await?;
        let config = serde_json::json!([{ "commitment": "finalized", "minContextSlot": slot }]);
        let height: u64 = self
            .client
            .send(solana_rpc_client_api::request::RpcRequest::GetBlockHeight, config)
            .await
            .map_err(|e| self.error(&e))?;
        Ok((slot, height))
    }

    /// `statuses`, answered by a node that has reached `min_context_slot`: a `None` here is absence
    /// as of that slot (in the node's history), never the silence of a node behind it.
    pub async fn statuses_as_of(
        &self,
        signatures: &[Signature],
        min_context_slot: u64,
    ) -> Result<Vec<Option<TransactionStatus>>, RpcError> {
        let (slot, statuses) = self.statuses_with_slot(signatures).await?;
        answers_at(slot, min_context_slot)
            .map_err(|behind| RpcError::NodeBehind { slot: behind.at, needed: behind.needed })?;
        Ok(statuses)
    }

    /// Statuses of `signatures`, searching the node's whole history; `None` where it knows none.
    pub async fn statuses(
        &self,
        signatures: &[Signature],
    ) -> Result<Vec<Option<TransactionStatus>>, RpcError> {
        Ok(self.statuses_with_slot(signatures).await?.1)
    }

    /// The statuses and the slot the node answered them at (the answer's `context.slot`).
    async fn statuses_with_slot(
        &self,
        signatures: &[Signature],
    ) -> Result<(u64, Vec<Option<TransactionStatus>>), RpcError> {
        assert!(
            signatures.len() <= SIGNATURE_STATUSES_PER_CALL_MAX,
            "{} signatures in one status call",
            signatures.len()
        );
        let answer = self
            .client
            .get_signature_statuses_with_history(signatures)
            .await
            .map_err(|e| self.error(&e))?;
        if answer.value.len() != signatures.len() {
            return Err(RpcError::BadAnswer(format!(
                "{} statuses for {} signatures",
                answer.value.len(),
                signatures.len()
            )));
        }
        Ok((answer.context.slot, answer.value))
    }

    /// A landed transaction with its balances before and after, at `commitment`.
    pub async fn transaction(
        &self,
        signature: &Signature,
        commitment: CommitmentConfig,
    ) -> Result<EncodedConfirmedTransactionWithStatusMeta, RpcError> {
        let config = RpcTransactionConfig {
            encoding: Some(UiTransactionEncoding::Base64),
            commitment: Some(commitment),
            max_supported_transaction_version: Some(0),
        };
        self.client.get_transaction_with_config(signature, config).await.map_err(|e| self.error(&e))
    }

    /// Priority fees paid recently by transactions writing `accounts`, one per recent slot.
    pub async fn recent_priority_fees(&self, accounts: &[Pubkey]) -> Result<Vec<u64>, RpcError> {
        let fees = self
            .client
            .get_recent_prioritization_fees(accounts)
            .await
            .map_err(|e| self.error(&e))?;
        Ok(fees.into_iter().map(|f| f.prioritization_fee).collect())
    }

    /// Signatures of transactions naming `address`, newest first: newer than `until`, older than
    /// `before`, at most `limit` (up to [`SIGNATURES_PER_PAGE_MAX`]).
    pub async fn signatures_page(
        &self,
        address: &Pubkey,
        page: SignaturePage,
    ) -> Result<Vec<(Signature, u64)>, RpcError> {
        assert!(page.limit <= SIGNATURES_PER_PAGE_MAX, "a page of {} signatures", page.limit);
        let config = GetConfirmedSignaturesForAddress2Config {
            before: page.before,
            until: page.until,
            limit: Some(page.limit),
            commitment: Some(page.commitment),
        };
        let page = self
            .client
            .get_signatures_for_address_with_config(address, config)
            .await
            .map_err(|e| self.error(&e))?;
        page.into_iter()
            .map(|s| {
                s.signature
                    .parse::<Signature>()
                    .map(|sig| (sig, s.slot))
                    .map_err(|e| RpcError::BadAnswer(format!("signature {}: {e}", s.signature)))
            })
            .collect()
    }

    /// The value a durable nonce account holds now, at `commitment`.
    pub async fn nonce_value(
        &self,
        account: &Pubkey,
        commitment: CommitmentConfig,
    ) -> Result<Hash, RpcError> {
        Ok(self.nonce_state(account, commitment).await?.0)
    }

    /// A durable nonce account's value and authority, at `commitment`.
    pub async fn nonce_state(
        &self,
        account: &Pubkey,
        commitment: CommitmentConfig,
    ) -> Result<(Hash, Pubkey), RpcError> {
        let found = solana_rpc_client_nonce_utils::nonblocking::get_account_with_commitment(
            &self.client,
            account,
            commitment,
        )
        .await
        .map_err(|e| RpcError::BadAnswer(cut(format!("nonce account {account}: {e}"))))?;
        let data = solana_rpc_client_nonce_utils::nonblocking::data_from_account(&found)
            .map_err(|e| RpcError::BadAnswer(cut(format!("nonce account {account}: {e}"))))?;
        Ok((data.blockhash(), data.authority))
    }

    pub async fn balance(
        &self,
        address: &Pubkey,
        commitment: CommitmentConfig,
    ) -> Result<u64, RpcError> {
        Ok(self
            .client
            .get_balance_with_commitment(address, commitment)
            .await
            .map_err(|e| self.error(&e))?
            .value)
    }

    /// The program owning the account at `address` at `commitment`; `None` while it does not exist.
    pub async fn account_owner(
        &self,
        address: &Pubkey,
        commitment: CommitmentConfig,
    ) -> Result<Option<Pubkey>, RpcError> {
        Ok(self
            .client
            .get_account_with_commitment(address, commitment)
            .await
            .map_err(|e| self.error(&e))?
            .value
            .map(|a| a.owner))
    }

    /// The token amount an SPL token account holds at `commitment`; zero while it does not exist.
    pub async fn token_account_amount(
        &self,
        account: &Pubkey,
        commitment: CommitmentConfig,
    ) -> Result<u64, RpcError> {
        use solana_sdk::program_pack::Pack;
        let found = self
            .client
            .get_account_with_commitment(account, commitment)
            .await
            .map_err(|e| self.error(&e))?
            .value;
        let Some(found) = found else { return Ok(0) };
        let state = spl_token_interface::state::Account::unpack(&found.data)
            .map_err(|e| RpcError::BadAnswer(cut(format!("token account {account}: {e}"))))?;
        Ok(state.amount)
    }

    /// The client, for test and demo set-up (airdrops, mints).
    pub fn client(&self) -> &RpcClient {
        &self.client
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node that cannot be reached: the error names what happened, never the URL's key. (Before,
    /// reqwest's "error sending request for url (...)" carried the whole URL into logs and 503s.)
    #[tokio::test]
    async fn transport_errors_do_not_carry_the_rpc_url() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let rpc = SolanaRpc::new(&SecretUrl::new(format!(
            "http://127.0.0.1:{port}/rpc?api-key=SECRET123"
        )));
        let error = rpc.slot(CommitmentConfig::finalized()).await.unwrap_err();
        assert!(matches!(error, RpcError::Transport(_)), "{error:?}");
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains("SECRET123") && !shown.contains("/rpc"), "{shown}");
    }
}
