//! Coinbase CDP's request authentication: a JWT per request, signed with the API key secret (Ed25519, or a legacy EC P-256 PEM key).
//!
//! The token names the one request it authorises (`uris`: "POST api.cdp.coinbase.com/platform/v2/transfers")
//! and lives two minutes, as the CDP SDKs make it.

use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use payoutd_domain::Secret;
use serde::Serialize;

/// How long a token is valid, in seconds (what the CDP SDKs use).
const TOKEN_LIFETIME_SECS: i64 = 120;
/// PKCS#8 v1 prefix of an Ed25519 private key: the 32-byte seed follows.
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// A CDP API key: its id and the key that signs the tokens (never printed).
pub struct CdpKey {
    id: String,
    key: EncodingKey,
    alg: Algorithm,
}

#[derive(Debug, thiserror::Error)]
pub enum CdpKeyError {
    #[error(
        "the CDP API key secret is neither base64 of an Ed25519 key (64 bytes) nor an EC P-256 private key in PEM (SEC1 `BEGIN EC PRIVATE KEY` or PKCS#8 `BEGIN PRIVATE KEY`)"
    )]
    Format,
}

#[derive(Serialize)]
struct Claims<'a> {
    sub: &'a str,
    iss: &'static str,
    nbf: i64,
    exp: i64,
    uris: [String; 1],
}

impl CdpKey {
    /// `secret`: what the CDP portal gives, base64 of the 64-byte Ed25519 key (seed then public
    /// key), or an EC key in PEM.
    pub fn parse(id: &str, secret: &Secret) -> Result<CdpKey, CdpKeyError> {
        let text = secret.expose().trim();
        if text.starts_with("-----BEGIN") {
            let der = Self::ec_pkcs8_der_of(&text.replace("\\n", "\n"))?;
            return Ok(CdpKey {
                id: id.to_owned(),
                key: EncodingKey::from_ec_der(&der),
                alg: Algorithm::ES256,
            });
        }
        let raw = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|_| CdpKeyError::Format)?;
        let seed = match raw.len() {
            64 | 32 => &raw[..32],
            _ => return Err(CdpKeyError::Format),
        };
        let der = [ED25519_PKCS8_PREFIX.as_slice(), seed].concat();
        Ok(CdpKey { id: id.to_owned(), key: EncodingKey::from_ed_der(&der), alg: Algorithm::EdDSA })
    }

    /// An EC P-256 private key in PEM, as PKCS#8 DER (what the signer takes). CDP shows legacy EC
    /// keys in SEC1 form (`BEGIN EC PRIVATE KEY`); a PKCS#8 PEM (`BEGIN PRIVATE KEY`) loads too.
    fn ec_pkcs8_der_of(pem: &str) -> Result<Vec<u8>, CdpKeyError> {
        use p256::pkcs8::{DecodePrivateKey, EncodePrivateKey};
        let key = if pem.contains("BEGIN EC PRIVATE KEY") {
            p256::SecretKey::from_sec1_pem(pem).ok()
        } else {
            p256::SecretKey::from_pkcs8_pem(pem).ok()
        };
        let der =
            key.ok_or(CdpKeyError::Format)?.to_pkcs8_der().map_err(|_| CdpKeyError::Format)?;
        Ok(der.as_bytes().to_vec())
    }

    /// The bearer token for one request: `method` on `host` + `path` (no query), at `now_secs`.
    pub fn token(
        &self,
        method: &str,
        host: &str,
        path: &str,
        now_secs: i64,
    ) -> Result<String, jsonwebtoken::errors::Error> {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.id.clone());
        header.typ = Some("JWT".to_owned());
        header.nonce = Some(hex::encode(uuid::Uuid::new_v4().as_bytes()));
        // No `aud`: the official SDKs send one only when their caller asks for it.
        let claims = Claims {
            sub: &self.id,
            iss: "cdp",
            nbf: now_secs,
            exp: now_secs + TOKEN_LIFETIME_SECS,
            uris: [format!("{method} {host}{path}")],
        };
        jsonwebtoken::encode(&header, &claims, &self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{DecodingKey, Validation};

    /// An Ed25519 key pair as the CDP portal shows it: base64(seed || public key), from RFC 8032's
    /// first test vector.
    const SEED_HEX: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
    const PUBLIC_HEX: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

    #[test]
    fn tokens_name_the_request_and_verify_with_the_public_key() {
        let raw = [hex::decode(SEED_HEX).unwrap(), hex::decode(PUBLIC_HEX).unwrap()].concat();
        let key = CdpKey::parse(
            "organizations/o/apiKeys/k",
            &Secret::new(base64::engine::general_purpose::STANDARD.encode(raw)),
        )
        .unwrap();
        let token = key
            .token("POST", "api.cdp.coinbase.com", "/platform/v2/transfers", 1_800_000_000)
            .unwrap();
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.validate_aud = false;
        validation.validate_exp = false;
        validation.validate_nbf = false;
        let decoded = jsonwebtoken::decode::<serde_json::Value>(
            &token,
            &DecodingKey::from_ed_der(&hex::decode(PUBLIC_HEX).unwrap()),
            &validation,
        )
        .unwrap();
        assert_eq!(decoded.header.kid.as_deref(), Some("organizations/o/apiKeys/k"));
        assert_eq!(decoded.header.nonce.as_ref().map(String::len), Some(32));
        assert_eq!(decoded.claims["uris"][0], "POST api.cdp.coinbase.com/platform/v2/transfers");
        assert!(
            decoded.claims.get("aud").is_none(),
            "made as the official SDKs make it: {}",
            decoded.claims
        );
        assert_eq!(
            (decoded.claims["iss"].as_str(), decoded.claims["exp"].as_i64()),
            (Some("cdp"), Some(1_800_000_120))
        );
        assert!(CdpKey::parse("k", &Secret::new("not a key".into())).is_err());
    }

    /// A P-256 key made for this test with `openssl ecparam -name prime256v1 -genkey -noout`: the
    /// SEC1 form the CDP portal shows for EC keys.
    const EC_SEC1_PEM: &str = "-----BEGIN EC PRIVATE KEY-----\n\
        MHcCAQEEIJ1LEwnFA3rG8ygkc/tWHOJSQmJ0qrIHnLlRKS2QgSNBoAoGCCqGSM49\n\
        AwEHoUQDQgAERF383eAO17FKREBVNKCxJqvj7bUwns1yFYDN/XXVc/4imRk1Db2S\n\
        cWvTH9OdZqRvSY6nc3Jo6cntJZpXcnRaoA==\n\
        -----END EC PRIVATE KEY-----\n";
    const EC_PUBLIC_PEM: &str = "-----BEGIN PUBLIC KEY-----\n\
        MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAERF383eAO17FKREBVNKCxJqvj7bUw\n\
        ns1yFYDN/XXVc/4imRk1Db2ScWvTH9OdZqRvSY6nc3Jo6cntJZpXcnRaoA==\n\
        -----END PUBLIC KEY-----\n";

    /// An EC key as CDP shows it (SEC1), and the same key as PKCS#8, sign ES256 tokens that verify
    /// with its public key. (Before, the SEC1 form was refused at start.)
    #[test]
    fn an_ec_key_in_sec1_or_pkcs8_form_signs_es256_tokens() {
        use p256::pkcs8::{EncodePrivateKey, LineEnding};
        let pkcs8 = p256::SecretKey::from_sec1_pem(EC_SEC1_PEM)
            .unwrap()
            .to_pkcs8_pem(LineEnding::LF)
            .unwrap()
            .to_string();
        // The portal's JSON export holds the PEM with escaped newlines.
        let escaped = EC_SEC1_PEM.replace('\n', "\\n");
        for pem in [EC_SEC1_PEM.to_owned(), escaped, pkcs8] {
            let key = CdpKey::parse("organizations/o/apiKeys/ec", &Secret::new(pem)).unwrap();
            let token = key
                .token("GET", "api.cdp.coinbase.com", "/platform/v2/transfers", 1_800_000_000)
                .unwrap();
            let mut validation = Validation::new(Algorithm::ES256);
            validation.validate_aud = false;
            validation.validate_exp = false;
            validation.validate_nbf = false;
            let decoded = jsonwebtoken::decode::<serde_json::Value>(
                &token,
                &DecodingKey::from_ec_pem(EC_PUBLIC_PEM.as_bytes()).unwrap(),
                &validation,
            )
            .unwrap();
            assert_eq!(decoded.claims["uris"][0], "GET api.cdp.coinbase.com/platform/v2/transfers");
        }
    }
}
