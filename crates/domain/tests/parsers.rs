//! Property tests of the parsers that take outside input (amounts, addresses of each rail, idempotency keys, webhook URLs, explorer links): none panics on any text, each accepts exactly its documented form, and what it accepts reads back as written.

use payoutd_domain::keys::{DEPOSIT_KEY_MAX_LEN, PAYOUT_KEY_MAX_LEN, PAYOUT_KEY_MIN_LEN};
use payoutd_domain::money::AMOUNT_MAX_DIGITS;
use payoutd_domain::webhook::WEBHOOK_URL_MAX_LEN;
use payoutd_domain::{
    Amount, DepositKey, Destination, EvmAddress, ExplorerUrl, PayoutKey, RailFamily, SolanaAddress,
    WebhookUrl,
};
use proptest::prelude::*;

/// Cases per property: enough to cross every branch of these parsers, bounded so that the file
/// runs in about a second.
const CASES: u32 = 2_000;

fn config() -> ProptestConfig {
    ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() }
}

fn canonical_digits(text: &str) -> bool {
    !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && !(text.len() > 1 && text.starts_with('0'))
}

proptest! {
    #![proptest_config(config())]

    /// Any text: no panic; accepted only in canonical form (digits, no leading zero, at most
    /// 2^256-1), which reads back as written.
    #[test]
    fn an_amount_is_accepted_only_in_canonical_form(text in "\\PC{0,90}|[0-9]{0,80}") {
        match Amount::parse(&text) {
            Ok(amount) => prop_assert_eq!(amount.to_string(), text),
            Err(_) => prop_assert!(!canonical_digits(&text) || text.len() >= AMOUNT_MAX_DIGITS),
        }
    }

    #[test]
    fn every_u128_amount_reads_back(n in any::<u128>()) {
        prop_assert_eq!(Amount::parse(&n.to_string()).unwrap(), Amount::from_u128(n));
        prop_assert_eq!(Amount::parse_positive(&n.to_string()).is_ok(), n > 0);
    }

    /// Any text: no panic; what is accepted reads back from its checksum form; every nonzero
    /// address is accepted all-lower, all-upper and checksummed; the zero address never.
    #[test]
    fn an_evm_address_reads_back_in_every_case_form(text in "\\PC{0,50}|0x[0-9a-fA-F]{40}", bytes in any::<[u8; 20]>()) {
        if let Ok(address) = EvmAddress::parse(&text) {
            prop_assert_eq!(EvmAddress::parse(&address.to_checksum()).unwrap(), address);
        }
        let address = EvmAddress::from_bytes(bytes);
        let lower = format!("0x{}", hex::encode(bytes));
        let upper = format!("0x{}", hex::encode(bytes).to_uppercase());
        if bytes == [0u8; 20] {
            prop_assert!(EvmAddress::parse(&lower).is_err(), "the zero address is refused");
        } else {
            prop_assert_eq!(EvmAddress::parse(&address.to_checksum()).unwrap(), address);
            prop_assert_eq!(EvmAddress::parse(&lower).unwrap(), address);
            prop_assert_eq!(EvmAddress::parse(&upper).unwrap(), address);
        }
    }

    /// A checksummed address with one letter's case flipped is refused while it stays mixed case
    /// (EIP-55 catches the typo).
    #[test]
    fn a_flipped_case_breaks_the_evm_checksum(bytes in any::<[u8; 20]>(), at in 0usize..40) {
        let checksum = EvmAddress::from_bytes(bytes).to_checksum();
        let mut digits: Vec<char> = checksum[2..].chars().collect();
        if bytes != [0u8; 20] && digits[at].is_ascii_alphabetic() {
            digits[at] = if digits[at].is_ascii_lowercase() { digits[at].to_ascii_uppercase() } else { digits[at].to_ascii_lowercase() };
            let mixed = digits.iter().any(char::is_ascii_lowercase) && digits.iter().any(char::is_ascii_uppercase);
            let text = format!("0x{}", digits.iter().collect::<String>());
            prop_assert_eq!(EvmAddress::parse(&text).is_ok(), !mixed);
        }
    }

    /// Any text: no panic; every 32 bytes read back from base58; a destination is never a program.
    #[test]
    fn a_solana_address_reads_back_and_no_program_is_a_destination(text in "\\PC{0,50}|[1-9A-HJ-NP-Za-km-z]{32,44}", bytes in any::<[u8; 32]>()) {
        if let Ok(address) = SolanaAddress::parse(&text) {
            prop_assert_eq!(SolanaAddress::parse(&address.to_string()).unwrap(), address);
        }
        if let Ok(Destination::Solana(address)) = Destination::parse(RailFamily::Solana, &text) {
            prop_assert!(!address.is_program());
        }
        let address = SolanaAddress::from_bytes(bytes);
        prop_assert_eq!(SolanaAddress::parse(&address.to_string()).unwrap(), address);
    }

    /// Any text on any rail: no panic.
    #[test]
    fn a_destination_on_any_rail_never_panics(text in "\\PC{0,120}") {
        for rail in [RailFamily::Evm, RailFamily::Solana, RailFamily::Provider] {
            let _ = Destination::parse(rail, &text);
        }
    }

    /// Accepted exactly when every byte is printable ASCII and the length is within the bounds.
    #[test]
    fn an_idempotency_key_is_printable_ascii_within_its_length(text in "\\PC{0,140}|[!-~]{0,140}") {
        let printable = text.bytes().all(|b| (0x21..=0x7e).contains(&b));
        prop_assert_eq!(PayoutKey::parse(&text).is_ok(), printable && (PAYOUT_KEY_MIN_LEN..=PAYOUT_KEY_MAX_LEN).contains(&text.len()));
        prop_assert_eq!(DepositKey::parse(&text).is_ok(), printable && (1..=DEPOSIT_KEY_MAX_LEN).contains(&text.len()));
    }

    /// Any text: no panic; an accepted URL is http(s), names a host, carries no fragment, and is
    /// within its length.
    #[test]
    fn a_webhook_url_is_http_with_a_host_and_no_credentials(text in "\\PC{0,200}|https?://[a-z0-9.:@/#?-]{0,60}") {
        if let Ok(url) = WebhookUrl::parse(&text) {
            prop_assert!(url.as_str().starts_with("https://") || url.as_str().starts_with("http://"));
            prop_assert!(!url.host().is_empty());
            prop_assert!(!url.as_str().contains('#'));
            prop_assert!(text.len() <= WEBHOOK_URL_MAX_LEN);
        }
    }

    /// Any text: no panic; an accepted link template is http(s) with `{tx}` exactly once.
    #[test]
    fn an_explorer_link_has_its_placeholder_once(text in "\\PC{0,120}|https?://[a-z.]{1,20}/tx/\\{tx\\}[a-z?=]{0,10}") {
        if ExplorerUrl::parse(&text).is_ok() {
            prop_assert!(text.starts_with("https://") || text.starts_with("http://"));
            prop_assert_eq!(text.matches("{tx}").count(), 1);
        }
    }
}
