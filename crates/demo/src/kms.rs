//! `--signer kms`: the demo's EVM hot wallet is a key in a local AWS KMS (moto's server with AWS's `Sign`), funded from anvil's first account; payoutd signs every EVM payout through KMS and never holds that key.

use anyhow::Context;
use payoutd_domain::{Amount, EvmAddress};
use payoutd_rail_evm::{EvmRpc, Fees, KmsSigner, SigningKey, TxParams};
use payoutd_testkit::{LOCAL_KMS_REGION, LocalKms, wait_for_receipt};

/// A funding transfer is mined within a few of anvil's blocks.
const FUNDING_RECEIPT_TIMEOUT_MS: u64 = 30_000;
/// Gas of the ERC-20 funding transfer (the test token's `transfer` takes about 35,000).
const FUNDING_ERC20_GAS_LIMIT: u64 = 100_000;

/// The local KMS and the hot wallet's key in it.
pub struct KmsWallet {
    kms: LocalKms,
    key_id: String,
    pub address: EvmAddress,
}

impl KmsWallet {
    /// Starts the local KMS and makes the hot wallet's key in it, as an operator would.
    pub async fn start() -> anyhow::Result<KmsWallet> {
        let kms = tokio::task::spawn_blocking(LocalKms::start).await?;
        let key_id = kms.create_signing_key().await;
        let address = KmsSigner::key_address(&kms.client(), &key_id)
            .await
            .context("read the KMS key's address")?;
        Ok(KmsWallet { kms, key_id, address })
    }

    /// Sends the wallet `wei` of ETH and `token_units` of `token` from `funder`, and waits for both.
    pub async fn fund(
        &self,
        rpc: &EvmRpc,
        funder: &SigningKey,
        token: EvmAddress,
        wei: Amount,
        token_units: Amount,
    ) -> anyhow::Result<()> {
        let chain_id = rpc.chain_id().await?;
        // The funder's earlier transactions (the token's deployment) are mined: its count is final.
        let nonce = rpc.mined_nonce(funder.address()).await?;
        let fees: Fees = rpc.suggest_fees().await?;
        let native = TxParams {
            chain_id,
            nonce,
            fees,
            gas_limit: payoutd_rail_evm::NATIVE_TRANSFER_GAS_LIMIT,
        };
        let erc20 = TxParams { nonce: nonce + 1, gas_limit: FUNDING_ERC20_GAS_LIMIT, ..native };
        for signed in [
            payoutd_rail_evm::sign_native_transfer(funder, &native, self.address, wei)?,
            payoutd_rail_evm::sign_erc20_transfer(
                funder,
                &erc20,
                token,
                self.address,
                token_units,
            )?,
        ] {
            rpc.send_raw(&signed.raw).await?;
            let receipt = wait_for_receipt(rpc, signed.hash, FUNDING_RECEIPT_TIMEOUT_MS).await?;
            anyhow::ensure!(receipt.status_ok, "funding transfer {} reverted", signed.hash);
        }
        Ok(())
    }

    /// The `[[chains]]` line that makes this key the chain's hot wallet.
    pub fn chain_toml(&self) -> String {
        format!(
            "kms_signers = [{{ key_id = \"{}\", region = \"{LOCAL_KMS_REGION}\", address = \"{}\", endpoint_url = \"{}\" }}]",
            self.key_id,
            self.address,
            self.kms.url()
        )
    }

    /// What payoutd needs in its environment to reach KMS: credentials from the standard chain
    /// (the local KMS checks none; a real deployment uses its role's).
    pub fn env() -> Vec<(String, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID".to_owned(), "demo".to_owned()),
            ("AWS_SECRET_ACCESS_KEY".to_owned(), "demo".to_owned()),
        ]
    }
}
