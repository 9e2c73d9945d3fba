//! Who is on the other end of a request: the connection's peer, or, when that peer is a proxy the operator trusts, the client it forwards and whether that client spoke TLS.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::request::Parts;

use crate::AppState;

/// The client of one request, as far as this server can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    /// `None` only when the router is driven without a server (tests calling it directly).
    pub address: Option<IpAddr>,
    /// The client spoke TLS to a trusted proxy in front of payoutd (payoutd serves plain HTTP).
    pub over_tls: bool,
}

impl Client {
    /// `X-Forwarded-For` and `X-Forwarded-Proto` count only from a peer in `trusted_proxies`:
    /// anyone else could write them. The client is the right-most forwarded address that is not
    /// itself a trusted proxy (what the last trusted hop saw).
    pub fn of(peer: Option<IpAddr>, headers: &HeaderMap, trusted_proxies: &[IpAddr]) -> Client {
        let Some(peer) = peer.filter(|p| trusted_proxies.contains(p)) else {
            return Client { address: peer, over_tls: false };
        };
        let forwarded = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|a| a.trim().parse::<IpAddr>().ok())
            .rfind(|a| !trusted_proxies.contains(a));
        let over_tls = headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"));
        Client { address: Some(forwarded.unwrap_or(peer)), over_tls }
    }

    /// For logs and the audit log.
    pub fn shown(&self) -> String {
        self.address.map_or_else(|| "unknown".to_owned(), |a| a.to_string())
    }
}

impl FromRequestParts<AppState> for Client {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Client, Self::Rejection> {
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(a)| a.ip());
        Ok(Client::of(peer, &parts.headers, &state.trusted_proxies))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (axum::http::HeaderName::from_static(k), v.parse().unwrap()))
            .collect()
    }

    /// Forwarded headers count only from a trusted proxy, and a client cannot slip an address of
    /// its choosing to the left of what the proxy appended. (Before, `X-Forwarded-Proto` from any
    /// client decided the cookie's `Secure` flag.)
    #[test]
    fn forwarded_headers_count_only_from_trusted_proxies() {
        let (proxy, client, spoofed): (IpAddr, IpAddr, IpAddr) = (
            "10.0.0.2".parse().unwrap(),
            "203.0.113.7".parse().unwrap(),
            "198.51.100.1".parse().unwrap(),
        );
        let forwarded = headers(&[
            ("x-forwarded-for", "198.51.100.1, 203.0.113.7"),
            ("x-forwarded-proto", "https"),
        ]);
        assert_eq!(
            Client::of(Some(client), &forwarded, &[]),
            Client { address: Some(client), over_tls: false },
            "no proxy is trusted"
        );
        assert_eq!(
            Client::of(Some(client), &forwarded, &[proxy]),
            Client { address: Some(client), over_tls: false },
            "the peer is not the proxy"
        );
        let via_proxy = Client::of(Some(proxy), &forwarded, &[proxy]);
        assert_eq!(via_proxy, Client { address: Some(client), over_tls: true });
        assert_ne!(via_proxy.address, Some(spoofed));
        assert_eq!(
            Client::of(Some(proxy), &HeaderMap::new(), &[proxy]).address,
            Some(proxy),
            "nothing forwarded: the proxy itself"
        );
    }
}
