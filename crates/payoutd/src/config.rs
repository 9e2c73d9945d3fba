//! Configuration: a TOML file plus environment variables, parsed here into domain values (serde stops at this file).

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{bail, Context};
use payoutd_domain::asset::TokenKind;
use payoutd_domain::{ApiKey, Asset, AssetRegistry, EvmAddress};
use serde::Deserialize;

/// The embedded default: an SQLite file in the working directory.
pub const DATABASE_URL_DEFAULT: &str = "sqlite://payoutd.db";
pub const LISTEN_DEFAULT: &str = "127.0.0.1:8080";
/// Operator keys shorter than this are refused: they guard deposits and approvals.
pub const OPERATOR_KEY_MIN_LEN: usize = 24;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    database_url: Option<String>,
    require_payout_idempotency_key: Option<bool>,
    assets: Option<Vec<FileAsset>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAsset {
    code: String,
    decimals: u8,
    /// `native` or `erc20` (then `token_address`).
    kind: String,
    token_address: Option<String>,
}

/// Everything the binary needs, validated.
pub struct Config {
    pub listen: SocketAddr,
    pub database_url: String,
    pub require_payout_key: bool,
    pub assets: AssetRegistry,
    pub operator_key: Option<ApiKey>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("database_url", &redact_url(&self.database_url))
            .field("require_payout_key", &self.require_payout_key)
            .field("assets", &self.assets.iter().map(|a| a.code.as_str()).collect::<Vec<_>>())
            .field("operator_key", &self.operator_key.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Hides a password in `postgres://user:password@host/db`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Flags given on the command line win over the environment, which wins over the file.
pub struct Overrides {
    pub config_file: Option<String>,
    pub listen: Option<String>,
    pub database_url: Option<String>,
}

pub fn load(overrides: Overrides) -> anyhow::Result<Config> {
    let file = match &overrides.config_file {
        Some(path) => {
            let text = std::fs::read_to_string(Path::new(path)).with_context(|| format!("cannot read config file {path}"))?;
            toml::from_str::<FileConfig>(&text).with_context(|| format!("invalid config file {path}"))?
        }
        None => FileConfig::default(),
    };
    let listen_text = overrides.listen.or(file.listen).unwrap_or_else(|| LISTEN_DEFAULT.to_owned());
    let listen = listen_text.parse().with_context(|| format!("listen address {listen_text:?} is not HOST:PORT"))?;
    let database_url = overrides.database_url.or(file.database_url).unwrap_or_else(|| DATABASE_URL_DEFAULT.to_owned());
    let assets = match file.assets {
        None => AssetRegistry::local_development(),
        Some(list) => {
            let mut assets = Vec::with_capacity(list.len());
            for a in list {
                let token = match (a.kind.as_str(), a.token_address) {
                    ("native", None) => TokenKind::Native,
                    ("erc20", Some(addr)) => TokenKind::Erc20(
                        EvmAddress::parse(&addr).with_context(|| format!("asset {}: bad token_address", a.code))?,
                    ),
                    (kind, _) => bail!("asset {}: kind must be `native` (no token_address) or `erc20` (with token_address), got {kind:?}", a.code),
                };
                assets.push(Asset::new(&a.code, a.decimals, token).with_context(|| format!("asset {:?}", a.code))?);
            }
            AssetRegistry::new(assets)?
        }
    };
    let operator_key = match std::env::var("PAYOUTD_OPERATOR_KEY") {
        Ok(k) if k.len() < OPERATOR_KEY_MIN_LEN => {
            bail!("PAYOUTD_OPERATOR_KEY must be at least {OPERATOR_KEY_MIN_LEN} characters")
        }
        Ok(k) => Some(ApiKey::presented(&k)),
        Err(_) => None,
    };
    Ok(Config {
        listen,
        database_url,
        require_payout_key: file.require_payout_idempotency_key.unwrap_or(true),
        assets,
        operator_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_passwords_are_redacted() {
        assert_eq!(redact_url("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact_url("sqlite://payoutd.db"), "sqlite://payoutd.db");
    }
}
