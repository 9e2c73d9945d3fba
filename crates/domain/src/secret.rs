//! Secrets (API keys, signing keys, webhook secrets): a type whose Debug and Display print nothing.

use std::fmt;

use sha2::{Digest, Sha256};

/// Holds a secret string; it can only be read through [`Secret::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// The text is overwritten when the last holder lets go of it, so a key does not linger in freed
/// memory for a core dump or a later allocation to show.
impl Drop for Secret {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Prefix of merchant API keys, so a leaked key is recognisable in a scanner.
pub const API_KEY_PREFIX: &str = "pk_";
/// Random bytes in an API key; 256 bits makes a plain SHA-256 at rest sufficient (no guessing).
pub const API_KEY_RANDOM_BYTES: usize = 32;

/// A merchant API key in clear: exists only between creation and the one time it is shown.
#[derive(Clone)]
pub struct ApiKey(Secret);

impl ApiKey {
    /// Builds a key from caller-supplied randomness (the domain does no I/O, including the OS RNG).
    pub fn from_random(bytes: [u8; API_KEY_RANDOM_BYTES]) -> ApiKey {
        ApiKey(Secret(format!("{API_KEY_PREFIX}{}", hex::encode(bytes))))
    }

    /// Wraps a presented bearer token; it is only ever hashed and compared.
    pub fn presented(text: &str) -> ApiKey {
        ApiKey(Secret(text.to_owned()))
    }

    pub fn expose(&self) -> &str {
        self.0.expose()
    }

    pub fn hash(&self) -> ApiKeyHash {
        ApiKeyHash(hex::encode(Sha256::digest(self.0.expose().as_bytes())))
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// A URL that may carry a credential (an RPC provider's API key in its path or query, a password
/// in its user info). Debug and Display show only the scheme, host and port.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    pub fn new(url: String) -> SecretUrl {
        SecretUrl(url)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `scheme://host[:port]`, nothing of user info, path, query or fragment.
    pub fn redacted(&self) -> String {
        let (scheme, rest) = self.0.split_once("://").unwrap_or(("?", self.0.as_str()));
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
        format!("{scheme}://{host_port}")
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretUrl({})", self.redacted())
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// Whether `url` names this machine's loopback (127.0.0.0/8, `::1`, `localhost`): the only host a
/// credential (an API key, a signer's token) may go to without TLS, and the only one an
/// unauthenticated signer may listen on.
pub fn on_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// SHA-256 of an API key, hex: what the database stores and looks up.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ApiKeyHash(String);

impl ApiKeyHash {
    pub fn from_stored(hex_digest: String) -> ApiKeyHash {
        ApiKeyHash(hex_digest)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key's id: `key_` and the first half of its hash (the stores derive it the same way, in
    /// SQL, and the migration that introduced ids gave existing keys the same).
    pub fn id(&self) -> crate::ids::ApiKeyId {
        crate::ids::ApiKeyId::parse(&format!("{}{}", crate::ids::ApiKeyId::PREFIX, &self.0[..32]))
            .expect("a SHA-256 hex digest starts with 32 lowercase hex digits")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_id_is_half_its_hash_and_reveals_nothing_of_the_key() {
        let key = ApiKey::from_random([9u8; 32]);
        let id = key.hash().id();
        assert_eq!(id.as_str(), format!("key_{}", &key.hash().as_str()[..32]));
        assert!(!id.as_str().contains(&key.expose()[3..19]));
    }

    #[test]
    fn debug_prints_no_secret() {
        let key = ApiKey::from_random([7u8; 32]);
        let printed = format!("{key:?} {:?}", Secret::new("hunter2".into()));
        assert!(!printed.contains("0707") && !printed.contains("hunter2"), "{printed}");
    }

    #[test]
    fn secrets_in_urls_never_reach_debug_or_display() {
        for (url, shown) in [
            ("https://eth-mainnet.g.alchemy.com/v2/KEYINPATH", "https://eth-mainnet.g.alchemy.com"),
            ("https://rpc.example/?apikey=KEYINQUERY", "https://rpc.example"),
            ("https://user:KEYINUSERINFO@rpc.example:8545/x", "https://rpc.example:8545"),
            ("wss://KEYASUSER@rpc.example#KEYINFRAGMENT", "wss://rpc.example"),
            ("http://127.0.0.1:8545", "http://127.0.0.1:8545"),
        ] {
            let secret = SecretUrl::new(url.to_owned());
            let printed = format!("{secret:?} {secret}");
            assert!(!printed.contains("KEY"), "{printed}");
            assert_eq!(secret.to_string(), shown);
            assert_eq!(secret.expose(), url);
        }
    }

    #[test]
    fn hash_is_stable_and_distinguishes_keys() {
        let a = ApiKey::from_random([1u8; 32]);
        assert_eq!(a.hash(), ApiKey::presented(a.expose()).hash());
        assert_ne!(a.hash(), ApiKey::from_random([2u8; 32]).hash());
        assert!(a.expose().starts_with(API_KEY_PREFIX));
    }
}
