//! Webhook signing secrets sealed at rest (AES-256-GCM, the endpoint's id as associated data): a copy of the database alone cannot sign webhooks that merchants would trust.

use std::fmt;

use payoutd_engine::StoreError;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

/// Bytes in the key that seals webhook secrets (`PAYOUTD_WEBHOOK_SECRETS_KEY`, 64 hex digits).
pub const SECRETS_KEY_BYTES: usize = 32;
/// What a sealed secret's stored text starts with; anything else was written in clear, before a
/// key was configured, and reads as it is.
const SEALED_PREFIX: &str = "sealed:v1:";

/// The key webhook secrets are sealed with. Its Debug prints nothing.
pub struct SecretsKey(LessSafeKey);

impl fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretsKey(***)")
    }
}

impl SecretsKey {
    pub fn from_bytes(bytes: &[u8; SECRETS_KEY_BYTES]) -> SecretsKey {
        SecretsKey(LessSafeKey::new(
            UnboundKey::new(&AES_256_GCM, bytes).expect("a 32-byte AES-256 key"),
        ))
    }

    /// `secret` sealed for `endpoint`: a fresh random nonce, the ciphertext and its tag, in hex.
    fn seal(&self, endpoint: &str, secret: &str) -> Result<String, StoreError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).map_err(|_| {
            StoreError::Unavailable("no randomness to seal a webhook secret".into())
        })?;
        let mut sealed = secret.as_bytes().to_vec();
        self.0
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(endpoint.as_bytes()),
                &mut sealed,
            )
            .map_err(|_| StoreError::Invariant("a webhook secret could not be sealed".into()))?;
        Ok(format!("{SEALED_PREFIX}{}{}", hex::encode(nonce), hex::encode(&sealed)))
    }

    /// The secret sealed for `endpoint` in `text` (after the prefix); refused when the key, the
    /// endpoint or the text is not the one it was sealed with.
    fn open(&self, endpoint: &str, text: &str) -> Result<String, StoreError> {
        let bytes = hex::decode(text)
            .map_err(|_| StoreError::Corrupt("a sealed webhook secret is not hex".into()))?;
        if bytes.len() < NONCE_LEN {
            return Err(StoreError::Corrupt("a sealed webhook secret is too short".into()));
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce)
            .map_err(|_| StoreError::Corrupt("a sealed webhook secret's nonce".into()))?;
        let mut sealed = sealed.to_vec();
        let opened = self
            .0
            .open_in_place(nonce, Aad::from(endpoint.as_bytes()), &mut sealed)
            .map_err(|_| {
                StoreError::Corrupt(format!(
                    "endpoint {endpoint}'s webhook secret does not open with the configured key"
                ))
            })?;
        String::from_utf8(opened.to_vec())
            .map_err(|_| StoreError::Corrupt("an opened webhook secret is not text".into()))
    }
}

/// The text stored for `secret`: sealed when a key is configured, else the secret itself.
pub(crate) fn to_stored(
    key: Option<&SecretsKey>,
    endpoint: &str,
    secret: &str,
) -> Result<String, StoreError> {
    match key {
        Some(key) => key.seal(endpoint, secret),
        None => Ok(secret.to_owned()),
    }
}

/// The secret in `stored`: sealed text needs the key it was sealed with; text stored in clear
/// (before a key was configured) reads as it is.
pub(crate) fn from_stored(
    key: Option<&SecretsKey>,
    endpoint: &str,
    stored: &str,
) -> Result<String, StoreError> {
    match (stored.strip_prefix(SEALED_PREFIX), key) {
        (None, _) => Ok(stored.to_owned()),
        (Some(sealed), Some(key)) => key.open(endpoint, sealed),
        (Some(_), None) => Err(StoreError::Corrupt(format!(
            "endpoint {endpoint}'s webhook secret is sealed and no key is configured (PAYOUTD_WEBHOOK_SECRETS_KEY)"
        ))),
    }
}

/// `stored` sealed under `current`, or `None` when it already is: a secret stored in clear, or
/// sealed under `previous` (a key being rotated out), is sealed again; a secret that opens with
/// neither key is refused, so that nothing is rewritten on a guess.
pub(crate) fn resealed(
    current: &SecretsKey,
    previous: Option<&SecretsKey>,
    endpoint: &str,
    stored: &str,
) -> Result<Option<String>, StoreError> {
    let Some(sealed) = stored.strip_prefix(SEALED_PREFIX) else {
        return Ok(Some(current.seal(endpoint, stored)?));
    };
    if current.open(endpoint, sealed).is_ok() {
        return Ok(None);
    }
    let previous = previous.ok_or_else(|| {
        StoreError::Corrupt(format!("endpoint {endpoint}'s webhook secret opens with neither key: set PAYOUTD_WEBHOOK_SECRETS_KEY_PREVIOUS to the key it was sealed with"))
    })?;
    Ok(Some(current.seal(endpoint, &previous.open(endpoint, sealed)?)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_with_its_key_and_endpoint() {
        let (key, other) = (SecretsKey::from_bytes(&[7; 32]), SecretsKey::from_bytes(&[8; 32]));
        let stored = to_stored(Some(&key), "we_1", "whsec_abc").unwrap();
        assert!(stored.starts_with(SEALED_PREFIX) && !stored.contains("whsec_abc"), "{stored}");
        assert_ne!(
            stored,
            to_stored(Some(&key), "we_1", "whsec_abc").unwrap(),
            "a fresh nonce each time"
        );
        assert_eq!(from_stored(Some(&key), "we_1", &stored).unwrap(), "whsec_abc");
        assert!(
            matches!(from_stored(Some(&other), "we_1", &stored), Err(StoreError::Corrupt(_))),
            "another key"
        );
        assert!(
            matches!(from_stored(Some(&key), "we_2", &stored), Err(StoreError::Corrupt(_))),
            "another endpoint's row"
        );
        assert!(
            matches!(from_stored(None, "we_1", &stored), Err(StoreError::Corrupt(_))),
            "no key"
        );
        assert_eq!(
            from_stored(Some(&key), "we_1", "whsec_plain").unwrap(),
            "whsec_plain",
            "written before a key was configured"
        );
    }

    #[test]
    fn resealing_seals_clear_and_previous_secrets_under_the_current_key_and_refuses_strangers() {
        let (old, new, stranger) = (
            SecretsKey::from_bytes(&[1; 32]),
            SecretsKey::from_bytes(&[2; 32]),
            SecretsKey::from_bytes(&[3; 32]),
        );
        let clear = resealed(&new, None, "we_1", "whsec_clear").unwrap().expect("sealed");
        assert_eq!(from_stored(Some(&new), "we_1", &clear).unwrap(), "whsec_clear");
        let under_old = to_stored(Some(&old), "we_1", "whsec_old").unwrap();
        let moved = resealed(&new, Some(&old), "we_1", &under_old).unwrap().expect("sealed again");
        assert_eq!(from_stored(Some(&new), "we_1", &moved).unwrap(), "whsec_old");
        assert_eq!(
            resealed(&new, Some(&old), "we_1", &moved).unwrap(),
            None,
            "already under the current key"
        );
        let foreign = to_stored(Some(&stranger), "we_1", "whsec_x").unwrap();
        assert!(matches!(
            resealed(&new, Some(&old), "we_1", &foreign),
            Err(StoreError::Corrupt(_))
        ));
        assert!(
            matches!(resealed(&new, None, "we_1", &under_old), Err(StoreError::Corrupt(_))),
            "without the previous key"
        );
    }
}
