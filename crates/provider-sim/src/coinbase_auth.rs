//! Coinbase CDP's request authentication as the simulator checks it: a JWT signed with the simulator's Ed25519 API key, naming this very request, not expired.

use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::core::Req;

/// The simulator's API key id and secret, as the CDP portal shows them (base64 of the Ed25519
/// seed then public key: RFC 8032's first test vector, never a real key).
pub const COINBASE_SIM_API_KEY_ID: &str = "organizations/payoutd-sim/apiKeys/7b8e9c1e-sim";
const SEED_HEX: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
const PUBLIC_HEX: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
/// Clock difference tolerated on `nbf` and `exp`, in seconds.
const LEEWAY_SECS: u64 = 60;

/// The secret, as an operator would put it in the environment.
pub fn coinbase_sim_api_key_secret() -> String {
    let raw = [hex_bytes(SEED_HEX), hex_bytes(PUBLIC_HEX)].concat();
    base64::engine::general_purpose::STANDARD.encode(raw)
}

fn hex_bytes(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex constant")).collect()
}

/// A token for `method` on `host` + `path` signed with the simulator's key, as CDP's SDKs make them:
/// what a test client sends.
pub fn sim_token(method: &str, host: &str, path: &str) -> String {
    const ED25519_PKCS8_PREFIX: [u8; 16] = [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut header = jsonwebtoken::Header::new(Algorithm::EdDSA);
    header.kid = Some(COINBASE_SIM_API_KEY_ID.to_owned());
    let claims = serde_json::json!({"sub": COINBASE_SIM_API_KEY_ID, "iss": "cdp", "aud": ["cdp_service"], "nbf": now, "exp": now + 120,
        "uris": [format!("{method} {host}{path}")]});
    let key = jsonwebtoken::EncodingKey::from_ed_der(&[ED25519_PKCS8_PREFIX.as_slice(), &hex_bytes(SEED_HEX)].concat());
    jsonwebtoken::encode(&header, &claims, &key).expect("the simulator's key signs")
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    iss: String,
    #[serde(default)]
    uris: Vec<String>,
    uri: Option<String>,
}

/// Whether the request carries a valid token for itself.
pub fn token_ok(req: &Req) -> bool {
    let Some(token) = req.header("authorization").and_then(|v| v.strip_prefix("Bearer ")) else { return false };
    let mut validation = Validation::new(Algorithm::EdDSA);
    validation.set_audience(&["cdp_service"]);
    validation.set_required_spec_claims(&["exp", "nbf", "sub", "aud"]);
    validation.validate_nbf = true;
    validation.leeway = LEEWAY_SECS;
    let Ok(decoded) = jsonwebtoken::decode::<Claims>(token, &DecodingKey::from_ed_der(&hex_bytes(PUBLIC_HEX)), &validation) else { return false };
    let host = req.header("host").unwrap_or_default();
    let this_request = format!("{} {host}{}", req.method, req.path);
    let claims = decoded.claims;
    decoded.header.kid.as_deref() == Some(COINBASE_SIM_API_KEY_ID)
        && claims.sub == COINBASE_SIM_API_KEY_ID
        && claims.iss == "cdp"
        && (claims.uris.contains(&this_request) || claims.uri.as_deref() == Some(this_request.as_str()))
}
