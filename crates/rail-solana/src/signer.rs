//! Who signs for the Solana hot wallet: its keypair in this process, or a signer service speaking payoutd's signer protocol (docs/signer-protocol.md), whose signature is verified against the wallet before it is kept.

use std::time::Duration;

use base64::Engine as _;
use payoutd_domain::{Secret, SecretUrl};
use serde::Deserialize;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::Signature;
use solana_sdk::signer::Signer as _;

use crate::key::SolanaKey;

/// A message the protocol carries at most: a Solana transaction's message fits in 1,232 bytes.
pub const SIGNER_MESSAGE_BYTES_MAX: usize = 4_096;
/// An answer read at most: `{"signature": "<base64 of 64 bytes>"}` and room for an error body.
pub const SIGNER_ANSWER_BYTES_MAX: usize = 4_096;
/// One signing call's budget: past it the payout waits for the next pass.
pub const SIGNER_CALL_TIMEOUT_MS: u64 = 10_000;

/// Why no signature came back.
#[derive(Debug, thiserror::Error)]
pub enum SolanaSignError {
    /// The signer could not be reached, timed out, or refused the call: nothing of ours was kept;
    /// ask again later.
    #[error("signer: {0}")]
    Unreachable(String),
    /// The signer answered with something that is not the wallet's signature of the message.
    #[error("the signer's answer is refused: {0}")]
    Mismatch(String),
}

/// The signer of the Solana hot wallet.
pub enum SolanaSigner {
    /// Its keypair, in this process.
    Local(SolanaKey),
    /// A signer service that holds it.
    Remote(RemoteSolanaSigner),
}

impl SolanaSigner {
    pub fn pubkey(&self) -> Pubkey {
        match self {
            SolanaSigner::Local(key) => key.pubkey(),
            SolanaSigner::Remote(remote) => remote.pubkey,
        }
    }

    /// The wallet's ed25519 signature of `message` (a transaction's serialized message).
    pub async fn sign(&self, message: &[u8]) -> Result<Signature, SolanaSignError> {
        match self {
            SolanaSigner::Local(key) => Ok(key.keypair().sign_message(message)),
            SolanaSigner::Remote(remote) => remote.sign(message).await,
        }
    }
}

impl std::fmt::Debug for SolanaSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SolanaSigner::Local(key) => write!(f, "Local({})", key.pubkey()),
            SolanaSigner::Remote(remote) => {
                write!(f, "Remote({}, {})", remote.pubkey, remote.url.redacted())
            }
        }
    }
}

/// A signer service reached over payoutd's signer protocol.
pub struct RemoteSolanaSigner {
    http: reqwest::Client,
    url: SecretUrl,
    token: Secret,
    pubkey: Pubkey,
}

#[derive(Deserialize)]
struct SignAnswer {
    signature: String,
}

impl RemoteSolanaSigner {
    /// The service at `url` (its base: `/v1/sign` is appended), answering for `pubkey` to `token`.
    pub fn new(
        url: SecretUrl,
        token: Secret,
        pubkey: Pubkey,
    ) -> Result<RemoteSolanaSigner, SolanaSignError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(SIGNER_CALL_TIMEOUT_MS))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| SolanaSignError::Unreachable(e.to_string()))?;
        Ok(RemoteSolanaSigner { http, url, token, pubkey })
    }

    async fn sign(&self, message: &[u8]) -> Result<Signature, SolanaSignError> {
        assert!(
            message.len() <= SIGNER_MESSAGE_BYTES_MAX,
            "a Solana message is at most {SIGNER_MESSAGE_BYTES_MAX} bytes"
        );
        let b64 = base64::engine::general_purpose::STANDARD;
        let body = serde_json::json!({"scheme": "ed25519", "public_key": self.pubkey.to_string(), "message": b64.encode(message)});
        let endpoint = format!("{}/v1/sign", self.url.expose().trim_end_matches('/'));
        let sent =
            self.http.post(endpoint).bearer_auth(self.token.expose()).json(&body).send().await;
        // reqwest's errors name the URL, which may carry credentials: only the host is told.
        let unreachable =
            |what: &str| SolanaSignError::Unreachable(format!("{} {what}", self.url.redacted()));
        let mut response =
            sent.map_err(|e| unreachable(&format!("did not answer: {}", e.without_url())))?;
        let status = response.status();
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| unreachable(&format!("answer cut: {}", e.without_url())))?
        {
            if bytes.len() + chunk.len() > SIGNER_ANSWER_BYTES_MAX {
                return Err(unreachable(&format!(
                    "answered more than {SIGNER_ANSWER_BYTES_MAX} bytes"
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            return Err(unreachable(&format!(
                "answered {status}: {}",
                String::from_utf8_lossy(&bytes).chars().take(200).collect::<String>()
            )));
        }
        let answer: SignAnswer = serde_json::from_slice(&bytes)
            .map_err(|e| SolanaSignError::Mismatch(format!("not a signature answer: {e}")))?;
        let raw = b64
            .decode(answer.signature.as_bytes())
            .map_err(|e| SolanaSignError::Mismatch(format!("signature is not base64: {e}")))?;
        let signature = Signature::try_from(raw.as_slice()).map_err(|_| {
            SolanaSignError::Mismatch(format!("signature of {} bytes, not 64", raw.len()))
        })?;
        // The one check that matters: it is this wallet's signature of exactly this message.
        if !signature.verify(self.pubkey.as_ref(), message) {
            return Err(SolanaSignError::Mismatch(format!(
                "not {}'s signature of the message asked",
                self.pubkey
            )));
        }
        Ok(signature)
    }
}
