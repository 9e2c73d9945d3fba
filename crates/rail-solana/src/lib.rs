//! Solana rail of payoutd: SOL and SPL transfers signed offline, sent and resolved over Solana JSON-RPC with blockhash expiry.

mod adapter;
mod key;
mod rpc;
mod signer;
mod tx;

pub use adapter::{
    COMPUTE_UNIT_PRICE_CAP_MICRO_LAMPORTS_DEFAULT, DurableNonceConfig, PaidAt,
    RECONCILE_PAGES_PER_PASS_MAX, SIGNING_QUOTE_REUSE_MS, SOL_DECIMALS, SolanaClusterConfig,
    SolanaRail, SolanaSetupError,
};
pub use key::{KEYPAIR_BYTES_LEN, KeyError, SolanaKey};
pub use rpc::{
    RPC_CALL_TIMEOUT_MS, RPC_ERROR_MESSAGE_MAX_CHARS, RpcError, SIGNATURE_STATUSES_PER_CALL_MAX,
    SIGNATURES_PER_PAGE_MAX, SignaturePage, SolanaRpc, classify_node_error,
};
pub use signer::{
    RemoteSolanaSigner, SIGNER_ANSWER_BYTES_MAX, SIGNER_CALL_TIMEOUT_MS, SIGNER_MESSAGE_BYTES_MAX,
    SolanaSignError, SolanaSigner,
};
pub use tx::{
    DecodeError, DurableNonce, MEMO_COMPUTE_UNITS, MEMO_PROGRAM_ID,
    RENT_EXEMPT_EMPTY_ACCOUNT_LAMPORTS, SOL_TRANSFER_COMPUTE_UNITS, SPL_TRANSFER_COMPUTE_UNITS,
    SignError, SignedTransfer, SolanaToken, TRANSACTION_BYTES_MAX, Transfer,
    associated_token_account, carried_reference, decode, durable_transfer_instructions, message,
    nonce_advance_instructions, reference_memo, sign, sign_nonce_advance, sign_transfer,
    sign_transfer_durable, sign_with_others, signed, token_program_id, transfer_instructions,
};

/// The Solana public key of a domain address (the binary's configuration builds rail values with it).
pub fn solana_sdk_pubkey(address: &payoutd_domain::SolanaAddress) -> solana_sdk::pubkey::Pubkey {
    solana_sdk::pubkey::Pubkey::new_from_array(*address.as_bytes())
}
