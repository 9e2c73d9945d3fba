//! A block explorer's link template for one network: where an operator can see a transaction.

use std::fmt;

/// The placeholder a template holds exactly once; a transaction hash, signature or provider reference replaces it.
pub const EXPLORER_PLACEHOLDER: &str = "{tx}";
/// Longest template accepted.
pub const EXPLORER_URL_LEN_MAX: usize = 512;

/// `https://etherscan.io/tx/{tx}`: an http(s) URL holding `{tx}` exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplorerUrl(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExplorerUrlError {
    #[error("an explorer URL starts with https:// or http://")]
    Scheme,
    #[error(
        "an explorer URL holds {EXPLORER_PLACEHOLDER} exactly once (where the transaction goes)"
    )]
    Placeholder,
    #[error("an explorer URL is at most {EXPLORER_URL_LEN_MAX} characters of printable ASCII")]
    Text,
}

/// Everything but RFC 3986's unreserved characters (letters, digits, `-_.~`) is encoded.
const UNRESERVED_KEPT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

impl ExplorerUrl {
    pub fn parse(text: &str) -> Result<ExplorerUrl, ExplorerUrlError> {
        if text.len() > EXPLORER_URL_LEN_MAX || !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ExplorerUrlError::Text);
        }
        if !(text.starts_with("https://") || text.starts_with("http://")) {
            return Err(ExplorerUrlError::Scheme);
        }
        if text.matches(EXPLORER_PLACEHOLDER).count() != 1 {
            return Err(ExplorerUrlError::Placeholder);
        }
        Ok(ExplorerUrl(text.to_owned()))
    }

    /// The link for one transaction; the reference is percent-encoded beyond its usual alphabet, so
    /// a value read from a chain or a provider can never change the link's shape.
    pub fn link(&self, tx: &str) -> String {
        let encoded = percent_encoding::utf8_percent_encode(tx, UNRESERVED_KEPT).to_string();
        self.0.replacen(EXPLORER_PLACEHOLDER, &encoded, 1)
    }
}

impl fmt::Display for ExplorerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_takes_one_placeholder_and_links_a_hash() {
        let url = ExplorerUrl::parse("https://etherscan.io/tx/{tx}").unwrap();
        assert_eq!(url.link("0xab12"), "https://etherscan.io/tx/0xab12");
        assert_eq!(url.link("a\"b<c"), "https://etherscan.io/tx/a%22b%3Cc");
        assert_eq!(ExplorerUrl::parse("https://x/{tx}/{tx}"), Err(ExplorerUrlError::Placeholder));
        assert_eq!(ExplorerUrl::parse("https://x/tx"), Err(ExplorerUrlError::Placeholder));
        assert_eq!(ExplorerUrl::parse("javascript:alert(1)//{tx}"), Err(ExplorerUrlError::Scheme));
        assert_eq!(ExplorerUrl::parse("https://x/ {tx}"), Err(ExplorerUrlError::Text));
    }
}
