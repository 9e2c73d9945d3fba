//! EVM rail of payoutd: offline EIP-1559 signing and a JSON-RPC client that classifies node errors.

mod adapter;
mod erc20;
mod key;
mod rpc;
mod signer;
mod tx;

pub use adapter::{
    EvmNode, Finality, RECEIPT_BATCHES_IN_FLIGHT_MAX, RECEIPTS_PER_BATCH_MAX,
    SEND_BATCH_MAX_DEFAULT, SEND_BATCH_MAX_LIMIT,
};
/// The AWS KMS client crate, for building the client a `KmsSigner` uses.
pub use aws_sdk_kms;
pub use erc20::{decode_transfer_calldata, transfer_calldata};
pub use key::{KeyError, PRIVATE_KEY_HEX_LEN, SigningKey};
pub use rpc::{
    BASE_FEE_HEADROOM_MULTIPLIER, EvmRpc, LogInfo, OUTGOING_SCAN_MAX_BLOCKS, ObservedTx,
    OutgoingScan, RPC_CALL_TIMEOUT_MS, RPC_CONNECT_TIMEOUT_MS, RPC_ERROR_MESSAGE_MAX_CHARS,
    ReceiptInfo, RpcError, RpcSetupError, SentTx, classify_node_error,
};
pub use signer::{KmsSigner, RemoteSigner, WalletSignError, WalletSigner};
pub use tx::{
    BPS_PER_WHOLE, DecodeTxError, DecodedTx, ERC20_TRANSFER_GAS_LIMIT_DEFAULT,
    FEE_BUMP_DEFAULT_BPS, Fees, NATIVE_TRANSFER_GAS_LIMIT, SignError, SignedTx, TxHash,
    TxHashParseError, TxParams, calldata_gas, calldata_tokens, cancel, decode_raw, erc20_transfer,
    native_transfer, sign_cancel, sign_create, sign_erc20_transfer, sign_local,
    sign_native_transfer,
};
