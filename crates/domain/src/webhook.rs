//! Webhook endpoints as values: their owner, URL, signing secret and event filter, and which addresses count as public.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::Engine as _;

use crate::event::EventType;
use crate::ids::MerchantId;

/// Prefix of a Standard Webhooks secret.
pub const WEBHOOK_SECRET_PREFIX: &str = "whsec_";
/// Random bytes in a fresh secret (Standard Webhooks asks for 24 to 64).
pub const WEBHOOK_SECRET_RANDOM_BYTES: usize = 32;
pub const WEBHOOK_SECRET_BYTES_MIN: usize = 24;
pub const WEBHOOK_SECRET_BYTES_MAX: usize = 64;
pub const WEBHOOK_URL_MAX_LEN: usize = 2_048;
/// Event types one endpoint may name; more is a typo, not a need.
pub const WEBHOOK_EVENT_TYPES_MAX: usize = 32;

/// Who an endpoint belongs to: a merchant receives its own events; the operator receives operator
/// events (incidents) of every merchant and of none.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EndpointOwner {
    Merchant(MerchantId),
    Operator,
}

impl EndpointOwner {
    /// The merchant column: `None` for the operator.
    pub fn merchant(&self) -> Option<&MerchantId> {
        match self {
            EndpointOwner::Merchant(m) => Some(m),
            EndpointOwner::Operator => None,
        }
    }

    /// Whether this owner may read an event of `event_type` that concerns `merchant` (`None`: no
    /// merchant). Incidents are the platform's own business (its wallets, its losses, its alarms):
    /// only the operator sees them, whichever merchant's payout they are about.
    pub fn sees(&self, event_type: crate::EventType, merchant: Option<&MerchantId>) -> bool {
        match self {
            EndpointOwner::Operator => true,
            EndpointOwner::Merchant(m) => merchant == Some(m) && !event_type.is_operator_event(),
        }
    }

    /// Whether this owner's endpoints may ask for events of `event_type` at all.
    pub fn may_receive(&self, event_type: crate::EventType) -> bool {
        matches!(self, EndpointOwner::Operator) || !event_type.is_operator_event()
    }
}

/// A webhook signing secret, `whsec_` + base64 of the key bytes. Debug and Display print nothing;
/// it is shown once, when the endpoint is created or its secret rotated.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a webhook secret is `whsec_` followed by base64 of {WEBHOOK_SECRET_BYTES_MIN}-{WEBHOOK_SECRET_BYTES_MAX} bytes"
)]
pub struct WebhookSecretError;

impl WebhookSecret {
    /// Builds a secret from caller-supplied randomness (the domain does no I/O).
    pub fn from_random(bytes: [u8; WEBHOOK_SECRET_RANDOM_BYTES]) -> WebhookSecret {
        WebhookSecret(format!(
            "{WEBHOOK_SECRET_PREFIX}{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        ))
    }

    pub fn parse(text: &str) -> Result<WebhookSecret, WebhookSecretError> {
        let encoded = text.strip_prefix(WEBHOOK_SECRET_PREFIX).ok_or(WebhookSecretError)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| WebhookSecretError)?;
        if !(WEBHOOK_SECRET_BYTES_MIN..=WEBHOOK_SECRET_BYTES_MAX).contains(&bytes.len()) {
            return Err(WebhookSecretError);
        }
        Ok(WebhookSecret(text.to_owned()))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(***)")
    }
}

/// An endpoint URL: http or https, a host, no user info, no fragment, at most 2,048 characters.
/// Whether http and private addresses are allowed is configuration, checked where the address is
/// resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookUrl {
    url: url::Url,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookUrlError {
    #[error("the URL does not parse: {0}")]
    Malformed(String),
    #[error("the URL is longer than {WEBHOOK_URL_MAX_LEN} characters")]
    TooLong,
    #[error("the URL must use https (or http where private URLs are allowed)")]
    Scheme,
    #[error("the URL must name a host and carry no user name, password or fragment")]
    Shape,
}

impl WebhookUrl {
    pub fn parse(text: &str) -> Result<WebhookUrl, WebhookUrlError> {
        if text.len() > WEBHOOK_URL_MAX_LEN {
            return Err(WebhookUrlError::TooLong);
        }
        let url = url::Url::parse(text).map_err(|e| WebhookUrlError::Malformed(e.to_string()))?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err(WebhookUrlError::Scheme);
        }
        if url.host().is_none()
            || !url.username().is_empty()
            || url.password().is_some()
            || url.fragment().is_some()
        {
            return Err(WebhookUrlError::Shape);
        }
        Ok(WebhookUrl { url })
    }

    pub fn as_str(&self) -> &str {
        self.url.as_str()
    }

    pub fn is_https(&self) -> bool {
        self.url.scheme() == "https"
    }

    /// The host as written (a name, or an address literal without brackets).
    pub fn host(&self) -> String {
        match self.url.host() {
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            Some(host) => host.to_string(),
            None => String::new(),
        }
    }

    pub fn port(&self) -> u16 {
        self.url.port_or_known_default().unwrap_or(443)
    }

    /// The address when the host is an IP literal.
    pub fn ip_literal(&self) -> Option<IpAddr> {
        match self.url.host()? {
            url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
            url::Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
            url::Host::Domain(_) => None,
        }
    }
}

impl fmt::Display for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.url.as_str())
    }
}

/// Whether an address is reachable on the public internet: not loopback, private, link-local,
/// shared (CGNAT), documentation, multicast, unspecified or reserved. A webhook to anything else
/// would let a merchant make payoutd call into its own network (SSRF).
pub fn is_public_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space (RFC 6598)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let first = s[0];
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || s[..6].iter().all(|x| *x == 0) // IPv4-compatible (::/96, deprecated): an IPv4 address inside
        || (first & 0xfe00) == 0xfc00 // unique local
        || (first & 0xffc0) == 0xfe80 // link local
        || (first & 0xffc0) == 0xfec0 // site local (deprecated, still routed inside some networks)
        || first == 0x2001 && s[1] == 0x0db8 // documentation
        || first == 0x2001 && s[1] == 0x0000 // Teredo (2001::/32): tunnels to an IPv4 address
        || first == 0x2002 // 6to4 (2002::/16): tunnels to the IPv4 address it embeds
        || first == 0x0064 && s[1] == 0xff9b) // NAT64 can reach private IPv4
}

/// The event types an endpoint asked for; empty means every type its owner receives.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EventFilter(Vec<EventType>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventFilterError {
    #[error(transparent)]
    Unknown(#[from] crate::event::UnknownEventType),
    #[error("at most {WEBHOOK_EVENT_TYPES_MAX} event types per endpoint")]
    TooMany,
}

impl EventFilter {
    pub fn parse<'a>(
        types: impl IntoIterator<Item = &'a str>,
    ) -> Result<EventFilter, EventFilterError> {
        let mut parsed: Vec<EventType> = Vec::new();
        for text in types {
            let t = EventType::parse(text)?;
            if !parsed.contains(&t) {
                parsed.push(t);
            }
            if parsed.len() > WEBHOOK_EVENT_TYPES_MAX {
                return Err(EventFilterError::TooMany);
            }
        }
        Ok(EventFilter(parsed))
    }

    /// The stored form: the type names separated by single spaces (`""` for every type).
    pub fn to_stored(&self) -> String {
        self.0.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(" ")
    }

    pub fn types(&self) -> &[EventType] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_round_trip_and_print_nothing() {
        let secret = WebhookSecret::from_random([7; WEBHOOK_SECRET_RANDOM_BYTES]);
        assert!(secret.expose().starts_with("whsec_"));
        assert_eq!(WebhookSecret::parse(secret.expose()).unwrap(), secret);
        assert_eq!(format!("{secret:?}"), "WebhookSecret(***)");
        assert!(WebhookSecret::parse("whsec_c2hvcnQ=").is_err(), "5 bytes is too short");
        assert!(WebhookSecret::parse("sk_abc").is_err());
    }

    #[test]
    fn urls_need_a_host_and_an_http_scheme() {
        assert!(WebhookUrl::parse("https://hooks.example.com/payoutd?token=1").unwrap().is_https());
        assert_eq!(WebhookUrl::parse("ftp://example.com/"), Err(WebhookUrlError::Scheme));
        assert_eq!(WebhookUrl::parse("https://user:pw@example.com/"), Err(WebhookUrlError::Shape));
        assert_eq!(WebhookUrl::parse("https://example.com/#frag"), Err(WebhookUrlError::Shape));
        assert!(matches!(WebhookUrl::parse("not a url"), Err(WebhookUrlError::Malformed(_))));
        let long = format!("https://example.com/{}", "a".repeat(WEBHOOK_URL_MAX_LEN));
        assert_eq!(WebhookUrl::parse(&long), Err(WebhookUrlError::TooLong));
        let v6 = WebhookUrl::parse("http://[::1]:8080/x").unwrap();
        assert_eq!(v6.ip_literal(), Some("::1".parse().unwrap()));
        assert_eq!(v6.port(), 8080);
    }

    #[test]
    fn only_public_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
            "255.255.255.255",
            "224.0.0.1",
            "::7f00:1",
            "::a00:1",
            "2002:a00:1::1",
            "2002:7f00:1::",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "fec0::1",
        ] {
            assert!(!is_public_ip(private.parse().unwrap()), "{private} must not count as public");
        }
        for public in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"] {
            assert!(is_public_ip(public.parse().unwrap()), "{public} is public");
        }
    }

    #[test]
    fn event_filters_refuse_unknown_types_and_dedupe() {
        let f = EventFilter::parse(["payout.paid", "payout.failed", "payout.paid"]).unwrap();
        assert_eq!(f.to_stored(), "payout.paid payout.failed");
        assert!(EventFilter::parse(["payout.exploded"]).is_err());
        assert_eq!(EventFilter::parse([]).unwrap().to_stored(), "");
    }
}
