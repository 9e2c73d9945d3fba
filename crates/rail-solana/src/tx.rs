//! SOL and SPL transfers built and signed offline: the bytes stored before anything is sent, and their decoding for checks.

use solana_compute_budget_interface::ComputeBudgetInstruction;
use solana_sdk::hash::Hash;
use solana_sdk::instruction::Instruction;
use solana_sdk::message::{Message, VersionedMessage};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;
use solana_sdk::transaction::Transaction;

use payoutd_domain::ChainReference;

use crate::key::SolanaKey;

/// Compute units a SOL transfer may use: the system transfer (150), the two budget instructions
/// and the reference's memo.
pub const SOL_TRANSFER_COMPUTE_UNITS: u32 = 1_400 + MEMO_COMPUTE_UNITS;
/// Compute units an SPL transfer may use: creating the recipient's token account when missing
/// (about 25,000) and `transferChecked` (about 6,000), with room, and the reference's memo.
pub const SPL_TRANSFER_COMPUTE_UNITS: u32 = 60_000 + MEMO_COMPUTE_UNITS;
/// Compute units the reference's memo may use: the Memo program logs its 32 characters (287
/// measured on the local node), with room.
pub const MEMO_COMPUTE_UNITS: u32 = 1_000;
/// The SPL Memo program (v3), which every payout transfer calls with its reference.
pub const MEMO_PROGRAM_ID: Pubkey =
    solana_sdk::pubkey!("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr");
/// A signed transaction never exceeds the packet size.
pub const TRANSACTION_BYTES_MAX: usize = 1_232;

/// The SPL Token program (not Token-2022): the program every configured mint belongs to.
pub fn token_program_id() -> Pubkey {
    spl_token_interface::id()
}

/// The Token-2022 program: its accounts (token accounts, mints) are no more a wallet than SPL Token's.
pub const TOKEN_2022_PROGRAM_ID: &str = "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb";

/// Lamports that make an account with no data rent-exempt (128 bytes of account overhead at 3,480
/// lamports per byte-year, for 2 years): a SOL transfer creating an account with less fails on chain.
pub const RENT_EXEMPT_EMPTY_ACCOUNT_LAMPORTS: u64 = 890_880;

/// Whether `program` is SPL Token or Token-2022: an account it owns is a token account or a mint.
pub fn is_token_program(program: &Pubkey) -> bool {
    *program == token_program_id() || program.to_string() == TOKEN_2022_PROGRAM_ID
}

/// The recipient's associated token account for `mint`.
pub fn associated_token_account(owner: &Pubkey, mint: &Pubkey) -> Pubkey {
    spl_associated_token_account_interface::address::get_associated_token_address_with_program_id(
        owner,
        mint,
        &token_program_id(),
    )
}

/// What is sent: the native coin, or an SPL token of a mint with its decimals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SolanaToken {
    Sol,
    Spl { mint: Pubkey, decimals: u8 },
}

/// One payout transfer to sign.
#[derive(Debug, Clone, Copy)]
pub struct Transfer {
    pub token: SolanaToken,
    pub destination: Pubkey,
    pub amount_base_units: u64,
    /// Priority fee, in micro-lamports per compute unit.
    pub compute_unit_price_micro_lamports: u64,
    /// The business event it pays, carried as its memo.
    pub reference: ChainReference,
}

/// A signed transaction: its first signature names it on the chain.
#[derive(Clone)]
pub struct SignedTransfer {
    pub signature: Signature,
    pub raw: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("the token instruction could not be built: {0}")]
    Instruction(String),
    #[error("the signed transaction could not be serialized: {0}")]
    Encode(String),
    #[error("the signed transaction is {0} bytes, over the {TRANSACTION_BYTES_MAX}-byte packet")]
    TooLarge(usize),
}

#[derive(Debug, thiserror::Error)]
#[error("stored bytes are not a Solana transaction: {0}")]
pub struct DecodeError(String);

/// The memo naming the business event a transaction pays: the reference in hex, no signer (the
/// fee payer's signature already says who sent it).
pub fn reference_memo(reference: &ChainReference) -> Instruction {
    Instruction::new_with_bytes(MEMO_PROGRAM_ID, reference.to_string().as_bytes(), Vec::new())
}

/// The reference a transaction's memo carries: the first instruction calling the Memo program
/// whose data is a reference in hex. `None` for a transaction that names nothing of ours.
pub fn carried_reference(message: &VersionedMessage) -> Option<ChainReference> {
    let keys = message.static_account_keys();
    message
        .instructions()
        .iter()
        .filter(|i| keys.get(usize::from(i.program_id_index)) == Some(&MEMO_PROGRAM_ID))
        .find_map(|i| ChainReference::parse_hex(std::str::from_utf8(&i.data).ok()?))
}

/// The instructions of a transfer from `payer`: the compute budget first, then the transfer (an SPL
/// transfer first creates the recipient's token account when it is missing, paid by `payer`), then
/// the memo naming its business event.
pub fn transfer_instructions(payer: &Pubkey, t: &Transfer) -> Result<Vec<Instruction>, SignError> {
    let units = match t.token {
        SolanaToken::Sol => SOL_TRANSFER_COMPUTE_UNITS,
        SolanaToken::Spl { .. } => SPL_TRANSFER_COMPUTE_UNITS,
    };
    let mut instructions = vec![
        ComputeBudgetInstruction::set_compute_unit_limit(units),
        ComputeBudgetInstruction::set_compute_unit_price(t.compute_unit_price_micro_lamports),
    ];
    match t.token {
        SolanaToken::Sol => instructions.push(solana_system_interface::instruction::transfer(
            payer,
            &t.destination,
            t.amount_base_units,
        )),
        SolanaToken::Spl { mint, decimals } => {
            let program = token_program_id();
            instructions.push(spl_associated_token_account_interface::instruction::create_associated_token_account_idempotent(
                payer,
                &t.destination,
                &mint,
                &program,
            ));
            let source = associated_token_account(payer, &mint);
            let destination = associated_token_account(&t.destination, &mint);
            let transfer = spl_token_interface::instruction::transfer_checked(
                &program,
                &source,
                &mint,
                &destination,
                payer,
                &[],
                t.amount_base_units,
                decimals,
            )
            .map_err(|e| SignError::Instruction(e.to_string()))?;
            instructions.push(transfer);
        }
    }
    instructions.push(reference_memo(&t.reference));
    Ok(instructions)
}

/// What the fee payer signs: `instructions` with `payer` paying fees, against `blockhash`.
pub fn message(payer: &Pubkey, instructions: &[Instruction], blockhash: Hash) -> Message {
    Message::new_with_blockhash(instructions, Some(payer), &blockhash)
}

/// The transaction of `message` with its fee payer's `signature`, the only one it needs; refused
/// when the signature is not the payer's of this message or the bytes exceed a packet.
pub fn signed(message: Message, signature: Signature) -> Result<SignedTransfer, SignError> {
    if message.header.num_required_signatures != 1 {
        return Err(SignError::Instruction(format!(
            "{} signers needed, only the fee payer signs here",
            message.header.num_required_signatures
        )));
    }
    let tx = Transaction { signatures: vec![signature], message };
    if !tx.verify_with_results().iter().all(|ok| *ok) {
        return Err(SignError::Instruction(
            "the signature is not the fee payer's of this message".into(),
        ));
    }
    let raw = bincode::serialize(&tx).map_err(|e| SignError::Encode(e.to_string()))?;
    if raw.len() > TRANSACTION_BYTES_MAX {
        return Err(SignError::TooLarge(raw.len()));
    }
    Ok(SignedTransfer { signature, raw })
}

/// A payout transfer against a durable nonce: the nonce's advance first (it makes the transaction
/// valid until the nonce moves, and moves it when the transaction lands).
pub fn durable_transfer_instructions(
    payer: &Pubkey,
    t: &Transfer,
    nonce: &DurableNonce,
) -> Result<Vec<Instruction>, SignError> {
    let mut instructions =
        vec![solana_system_interface::instruction::advance_nonce_account(&nonce.account, payer)];
    instructions.extend(transfer_instructions(payer, t)?);
    Ok(instructions)
}

/// Only the nonce's advance from `nonce.value`: it lands only if no other transaction signed against
/// that value landed first, and once it lands none of them can.
pub fn nonce_advance_instructions(payer: &Pubkey, nonce: &DurableNonce) -> Vec<Instruction> {
    vec![solana_system_interface::instruction::advance_nonce_account(&nonce.account, payer)]
}

/// Signs `instructions` with `payer` as fee payer against `blockhash`.
pub fn sign(
    payer: &SolanaKey,
    instructions: &[Instruction],
    blockhash: Hash,
) -> Result<SignedTransfer, SignError> {
    sign_with_others(payer, &[], instructions, blockhash)
}

/// `sign`, for instructions that other accounts must sign too (a new account being created).
pub fn sign_with_others(
    payer: &SolanaKey,
    others: &[&SolanaKey],
    instructions: &[Instruction],
    blockhash: Hash,
) -> Result<SignedTransfer, SignError> {
    let mut signers = vec![payer.keypair()];
    signers.extend(others.iter().map(|k| k.keypair()));
    let tx = Transaction::new_signed_with_payer(
        instructions,
        Some(&payer.pubkey()),
        &signers,
        blockhash,
    );
    let raw = bincode::serialize(&tx).map_err(|e| SignError::Encode(e.to_string()))?;
    if raw.len() > TRANSACTION_BYTES_MAX {
        return Err(SignError::TooLarge(raw.len()));
    }
    Ok(SignedTransfer { signature: tx.signatures[0], raw })
}

/// Signs one payout transfer.
pub fn sign_transfer(
    payer: &SolanaKey,
    t: &Transfer,
    blockhash: Hash,
) -> Result<SignedTransfer, SignError> {
    sign(payer, &transfer_instructions(&payer.pubkey(), t)?, blockhash)
}

/// Signs one payout transfer against a durable nonce: the nonce's advance first (it makes the
/// transaction valid until the nonce moves, and moves it when the transaction lands).
pub fn sign_transfer_durable(
    payer: &SolanaKey,
    t: &Transfer,
    nonce: &DurableNonce,
) -> Result<SignedTransfer, SignError> {
    sign(payer, &durable_transfer_instructions(&payer.pubkey(), t, nonce)?, nonce.value)
}

/// A transaction that only advances the nonce from `nonce.value`: it lands only if no other
/// transaction signed against that value landed first, and once it lands none of them can.
pub fn sign_nonce_advance(
    payer: &SolanaKey,
    nonce: &DurableNonce,
) -> Result<SignedTransfer, SignError> {
    sign(payer, &nonce_advance_instructions(&payer.pubkey(), nonce), nonce.value)
}

/// A nonce account and the value a transaction is signed against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableNonce {
    pub account: Pubkey,
    pub value: Hash,
}

/// The stored bytes back as a transaction (to re-send them unchanged, or to check them).
pub fn decode(raw: &[u8]) -> Result<Transaction, DecodeError> {
    bincode::deserialize(raw).map_err(|e| DecodeError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_transfer_decodes_to_the_same_signature_blockhash_and_instructions() {
        let key = SolanaKey::generate();
        let mint = Pubkey::new_unique();
        let t = Transfer {
            token: SolanaToken::Spl { mint, decimals: 6 },
            destination: Pubkey::new_unique(),
            amount_base_units: 1_500_000,
            compute_unit_price_micro_lamports: 7,
            reference: ChainReference::parse_hex("00112233445566778899aabbccddeeff").unwrap(),
        };
        let blockhash = Hash::new_unique();
        let signed = sign_transfer(&key, &t, blockhash).unwrap();
        let tx = decode(&signed.raw).unwrap();
        assert_eq!(tx.signatures[0], signed.signature);
        assert_eq!(tx.message.recent_blockhash, blockhash);
        assert_eq!(
            tx.message.instructions.len(),
            5,
            "budget limit, budget price, create account, transferChecked, memo"
        );
        let message = VersionedMessage::Legacy(tx.message.clone());
        assert_eq!(carried_reference(&message), Some(t.reference), "the memo names the event");
        assert!(tx.verify().is_ok());
        assert!(signed.raw.len() <= TRANSACTION_BYTES_MAX);
        assert!(decode(&signed.raw[..10]).is_err());
    }
}
