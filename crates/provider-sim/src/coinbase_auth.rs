//! Coinbase CDP's request authentication as the simulator checks it: a JWT signed with one of the simulator's API keys (Ed25519 or EC P-256, as CDP issues both), naming this very request, not expired.

use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::core::Req;

/// The simulator's API key id and secret, as the CDP portal shows them (base64 of the Ed25519
/// seed then public key: RFC 8032's first test vector, never a real key).
pub const COINBASE_SIM_API_KEY_ID: &str = "organizations/payoutd-sim/apiKeys/7b8e9c1e-sim";
const SEED_HEX: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
const PUBLIC_HEX: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
/// The simulator's second API key, an EC P-256 key (ES256) in the SEC1 form the CDP portal shows:
/// generated for the simulator, never a real key.
pub const COINBASE_SIM_EC_API_KEY_ID: &str = "organizations/payoutd-sim/apiKeys/3c1f0e2a-sim-ec";
const EC_PRIVATE_PEM: &str = "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIGfK8bYKRNes3iNEHxnZYWfWhDwBbHbY7Yf2vqF/Kg00oAoGCCqGSM49
AwEHoUQDQgAEg37xPmqIG11Z9fy0wlvfOoZgWb9jc4BtGiuIJJ+fmUxZxYg4gFNr
U+ZDdDT7UNNYUVU8WAprGPi8GBEDHUWYdQ==
-----END EC PRIVATE KEY-----
";
const EC_PUBLIC_PEM: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEg37xPmqIG11Z9fy0wlvfOoZgWb9j
c4BtGiuIJJ+fmUxZxYg4gFNrU+ZDdDT7UNNYUVU8WAprGPi8GBEDHUWYdQ==
-----END PUBLIC KEY-----
";
/// Clock difference tolerated on `nbf` and `exp`, in seconds.
const LEEWAY_SECS: u64 = 60;

/// The secret, as an operator would put it in the environment.
pub fn coinbase_sim_api_key_secret() -> String {
    let raw = [hex_bytes(SEED_HEX), hex_bytes(PUBLIC_HEX)].concat();
    base64::engine::general_purpose::STANDARD.encode(raw)
}

/// The EC key's secret, as the CDP portal shows it (SEC1 PEM).
pub fn coinbase_sim_ec_api_key_secret() -> String {
    EC_PRIVATE_PEM.to_owned()
}

fn hex_bytes(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex constant"))
        .collect()
}

/// A token for `method` on `host` + `path` signed with the simulator's key, as CDP's SDKs make them:
/// what a test client sends.
pub fn sim_token(method: &str, host: &str, path: &str) -> String {
    const ED25519_PKCS8_PREFIX: [u8; 16] = [
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut header = jsonwebtoken::Header::new(Algorithm::EdDSA);
    header.kid = Some(COINBASE_SIM_API_KEY_ID.to_owned());
    header.typ = Some("JWT".to_owned());
    header.nonce = Some(format!("{:032x}", u128::from(now).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    // No `aud`: the official SDKs send none.
    let claims = serde_json::json!({"sub": COINBASE_SIM_API_KEY_ID, "iss": "cdp", "nbf": now, "exp": now + 120,
        "uris": [format!("{method} {host}{path}")]});
    let key = jsonwebtoken::EncodingKey::from_ed_der(
        &[ED25519_PKCS8_PREFIX.as_slice(), &hex_bytes(SEED_HEX)].concat(),
    );
    jsonwebtoken::encode(&header, &claims, &key).expect("the simulator's key signs")
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    iss: String,
    #[serde(default)]
    uris: Vec<String>,
    uri: Option<String>,
    /// The official SDKs leave it out; when present it must name CDP's service.
    aud: Option<serde_json::Value>,
}

/// The simulator's key named `kid` for the token's algorithm.
fn key_for(kid: &str, algorithm: Algorithm) -> Option<DecodingKey> {
    match (kid, algorithm) {
        (COINBASE_SIM_API_KEY_ID, Algorithm::EdDSA) => {
            Some(DecodingKey::from_ed_der(&hex_bytes(PUBLIC_HEX)))
        }
        (COINBASE_SIM_EC_API_KEY_ID, Algorithm::ES256) => {
            DecodingKey::from_ec_pem(EC_PUBLIC_PEM.as_bytes()).ok()
        }
        _ => None,
    }
}

/// Whether the request carries a valid token for itself, made as CDP's SDKs make them: header
/// `alg` (EdDSA or ES256), `kid`, `typ`, `nonce`; claims `sub`, `iss` `cdp`, `nbf`, `exp` and the
/// request in `uris` (or `uri`), `aud` optional.
pub fn token_ok(req: &Req) -> bool {
    let Some(token) = req.header("authorization").and_then(|v| v.strip_prefix("Bearer ")) else {
        return false;
    };
    let Ok(header) = jsonwebtoken::decode_header(token) else { return false };
    let Some(kid) = header.kid.as_deref() else { return false };
    let Some(key) = key_for(kid, header.alg) else { return false };
    let mut validation = Validation::new(header.alg);
    validation.validate_aud = false;
    validation.set_required_spec_claims(&["exp", "nbf", "sub"]);
    validation.validate_nbf = true;
    validation.leeway = LEEWAY_SECS;
    let Ok(decoded) = jsonwebtoken::decode::<Claims>(token, &key, &validation) else {
        return false;
    };
    let host = req.header("host").unwrap_or_default();
    let this_request = format!("{} {host}{}", req.method, req.path);
    let claims = decoded.claims;
    let audience_ok = match &claims.aud {
        None => true,
        Some(serde_json::Value::String(a)) => a == "cdp_service",
        Some(serde_json::Value::Array(all)) => all.iter().any(|a| a == "cdp_service"),
        Some(_) => false,
    };
    claims.sub == kid
        && claims.iss == "cdp"
        && audience_ok
        && (claims.uris.contains(&this_request)
            || claims.uri.as_deref() == Some(this_request.as_str()))
}
