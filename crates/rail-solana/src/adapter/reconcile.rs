//! Reconciliation's reads: the hot wallet's finalized signatures since the stored cursor, and which of them the wallet signed.

use payoutd_engine::rail::ReadError;
use solana_commitment_config::CommitmentConfig;
use solana_sdk::signature::Signature;

use super::{SolanaRail, read_error};
use crate::rpc::{SIGNATURES_PER_PAGE_MAX, SignaturePage};

/// The cursor of a wallet whose history was empty when reconciliation started: everything counts.
pub(super) const CURSOR_FROM_GENESIS: &str = "-";
/// Pages of signatures one reconciliation pass reads at most; more than that since the cursor is
/// an error to look into, not something to skip.
pub const RECONCILE_PAGES_PER_PASS_MAX: usize = 10;

impl SolanaRail {
    /// Everything naming the hot wallet since `cursor`, finalized, newest first.
    pub(super) async fn finalized_since(&self, cursor: &str) -> Result<Vec<Signature>, ReadError> {
        let until = match cursor {
            CURSOR_FROM_GENESIS => None,
            text => Some(text.parse::<Signature>().map_err(|e| ReadError(format!("stored cursor {text}: {e}")))?),
        };
        let mut all = Vec::new();
        let mut before = None;
        for _ in 0..RECONCILE_PAGES_PER_PASS_MAX {
            let page = SignaturePage { until, before, limit: SIGNATURES_PER_PAGE_MAX, commitment: CommitmentConfig::finalized() };
            let signatures = self.rpc.signatures_page(&self.key.pubkey(), page).await.map_err(read_error)?;
            let full = signatures.len() == SIGNATURES_PER_PAGE_MAX;
            before = signatures.last().map(|(s, _)| *s);
            all.extend(signatures.into_iter().map(|(s, _)| s));
            if !full {
                return Ok(all);
            }
        }
        Err(ReadError(format!("more than {} signatures since the cursor", RECONCILE_PAGES_PER_PASS_MAX * SIGNATURES_PER_PAGE_MAX)))
    }

    /// Whether the hot wallet signed `signature`'s transaction (it paid or sent), rather than receiving.
    pub(super) async fn signed_by_hot_wallet(&self, signature: &Signature) -> Result<bool, ReadError> {
        let landed = self.rpc.transaction(signature, CommitmentConfig::finalized()).await.map_err(read_error)?;
        let tx = landed.transaction.transaction.decode().ok_or_else(|| ReadError(format!("transaction {signature} does not decode")))?;
        let signers = usize::from(tx.message.header().num_required_signatures);
        Ok(tx.message.static_account_keys().iter().take(signers).any(|k| *k == self.key.pubkey()))
    }
}
