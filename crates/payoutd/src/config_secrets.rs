//! The secrets the environment gives payoutd: the operator's, the metrics scraper's and the deposit feed's keys, the webhook secrets' sealing key, and hot wallet key files (refused when others may read them).

use anyhow::{Context, bail};
use payoutd_domain::ApiKey;

use crate::config::{KEY_FILE_OTHERS_MODE_BITS, OPERATOR_KEY_MIN_LEN};

/// The keys the environment gives the operator, the metrics scraper and the deposit feed: each
/// long enough, and no two alike (each is its own power).
pub(crate) struct OperatorKeys {
    pub(crate) operator_key: Option<ApiKey>,
    pub(crate) metrics_token: Option<ApiKey>,
    pub(crate) deposit_key: Option<ApiKey>,
}

pub(crate) fn operator_keys() -> anyhow::Result<OperatorKeys> {
    let operator_key = match std::env::var("PAYOUTD_OPERATOR_KEY") {
        Ok(k) if k.len() < OPERATOR_KEY_MIN_LEN => {
            bail!("PAYOUTD_OPERATOR_KEY must be at least {OPERATOR_KEY_MIN_LEN} characters")
        }
        Ok(k) => Some(ApiKey::presented(&k)),
        Err(_) => None,
    };
    let metrics_token = match std::env::var("PAYOUTD_METRICS_TOKEN") {
        Ok(k) if k.len() < OPERATOR_KEY_MIN_LEN => {
            bail!("PAYOUTD_METRICS_TOKEN must be at least {OPERATOR_KEY_MIN_LEN} characters")
        }
        Ok(k) if Some(ApiKey::presented(&k).hash()) == operator_key.as_ref().map(ApiKey::hash) => {
            bail!(
                "PAYOUTD_METRICS_TOKEN must differ from PAYOUTD_OPERATOR_KEY: whatever scrapes metrics must not hold the operator's key"
            )
        }
        Ok(k) => Some(ApiKey::presented(&k)),
        Err(_) => None,
    };
    let deposit_key = match std::env::var("PAYOUTD_DEPOSIT_KEY") {
        Ok(k) if k.len() < OPERATOR_KEY_MIN_LEN => {
            bail!("PAYOUTD_DEPOSIT_KEY must be at least {OPERATOR_KEY_MIN_LEN} characters")
        }
        Ok(k)
            if [&operator_key, &metrics_token]
                .into_iter()
                .flatten()
                .any(|other| other.hash() == ApiKey::presented(&k).hash()) =>
        {
            bail!(
                "PAYOUTD_DEPOSIT_KEY must differ from PAYOUTD_OPERATOR_KEY and PAYOUTD_METRICS_TOKEN: crediting balances is its own power"
            )
        }
        Ok(k) => Some(ApiKey::presented(&k)),
        Err(_) => None,
    };
    Ok(OperatorKeys { operator_key, metrics_token, deposit_key })
}

/// `PAYOUTD_WEBHOOK_SECRETS_KEY_PREVIOUS`, for `payoutd webhooks reseal` when the key is rotated:
/// the key the secrets were sealed with until now.
pub fn previous_webhook_secrets_key()
-> anyhow::Result<Option<std::sync::Arc<payoutd_store::SecretsKey>>> {
    let text = std::env::var("PAYOUTD_WEBHOOK_SECRETS_KEY_PREVIOUS").ok();
    text.map(|t| webhook_secrets_key(&t).context("PAYOUTD_WEBHOOK_SECRETS_KEY_PREVIOUS"))
        .transpose()
}

/// `PAYOUTD_WEBHOOK_SECRETS_KEY`: 64 hex digits (32 random bytes), wiped from memory once read.
pub(crate) fn webhook_secrets_key(
    text: &str,
) -> anyhow::Result<std::sync::Arc<payoutd_store::SecretsKey>> {
    let bytes = zeroize::Zeroizing::new(hex::decode(text.trim()).unwrap_or_default());
    let bytes: &[u8; payoutd_store::SECRETS_KEY_BYTES] =
        bytes.as_slice().try_into().map_err(|_| {
            anyhow::anyhow!(
                "PAYOUTD_WEBHOOK_SECRETS_KEY must be {} hex digits (e.g. `openssl rand -hex 32`)",
                2 * payoutd_store::SECRETS_KEY_BYTES
            )
        })?;
    Ok(std::sync::Arc::new(payoutd_store::SecretsKey::from_bytes(bytes)))
}

/// A hot wallet key file's text, wiped from memory once dropped. Refused when anyone but its owner
/// may read or write it (as ssh refuses a private key): a key others can read is a key others hold.
pub(crate) fn read_key_file(path: &str) -> anyhow::Result<zeroize::Zeroizing<String>> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).context("cannot read it")?.permissions().mode() & 0o777;
        if mode & KEY_FILE_OTHERS_MODE_BITS != 0 {
            bail!(
                "its permissions {mode:o} let others than its owner read or write it: chmod 600 {path}"
            );
        }
    }
    Ok(zeroize::Zeroizing::new(std::fs::read_to_string(path).context("cannot read it")?))
}
