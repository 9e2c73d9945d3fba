//! Failed authentications per client address: past a small burst, a client whose keys keep failing gets 429 before any key is looked up, so neither a merchant's key nor the operator's can be guessed at the request rate (which counts each new key afresh).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use payoutd_domain::ApiKey;

use crate::AppState;
use crate::client::Client;
use crate::problem::Problem;

/// Failed authentications a client address may have in a row before it must wait: enough for a
/// person mistyping a key or a client rotating keys; far too few to guess one.
pub const FAILED_AUTHS_BURST: u32 = 20;
/// One more failed authentication is allowed this often once the burst is spent: at most 3,600 an
/// hour per address.
pub const FAILED_AUTH_REFILL_MS: u64 = 1_000;
/// Addresses remembered at once; past it, those whose bucket is full again are forgotten first.
const ADDRESSES_MAX: usize = 100_000;
/// Keys of ours remembered at once (their hashes); past it, all are forgotten and learnt again.
const KNOWN_KEYS_MAX: usize = 10_000;

/// What each client address has left, and the keys known to be ours (a merchant's key refused at
/// an operator endpoint is a 401 too, but no guess): shared by every request of one API process.
#[derive(Debug, Default)]
pub struct FailedAuths {
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
    known_keys: Mutex<HashSet<String>>,
}

/// Failures an address may still have, as of `at`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    left: u32,
    at: Instant,
}

impl Bucket {
    fn full(at: Instant) -> Bucket {
        Bucket { left: FAILED_AUTHS_BURST, at }
    }

    /// The bucket refilled up to `now`: one failure per `FAILED_AUTH_REFILL_MS` elapsed.
    fn refilled(self, now: Instant) -> Bucket {
        let elapsed_ms = now.saturating_duration_since(self.at).as_millis();
        let refills =
            u32::try_from(elapsed_ms / u128::from(FAILED_AUTH_REFILL_MS)).unwrap_or(u32::MAX);
        if refills == 0 {
            return self;
        }
        let left = self.left.saturating_add(refills).min(FAILED_AUTHS_BURST);
        Bucket { left, at: now }
    }
}

impl FailedAuths {
    /// Whether `address` may try a request now; if not, the seconds until it may.
    pub fn may_try(&self, address: IpAddr, now: Instant) -> Result<(), u64> {
        let buckets = self.buckets.lock().expect("the failed-auth table is never poisoned");
        match buckets.get(&address).map(|b| b.refilled(now)) {
            Some(bucket) if bucket.left == 0 => Err(FAILED_AUTH_REFILL_MS.div_ceil(1_000)),
            _ => Ok(()),
        }
    }

    /// `key` authenticated (or is one of ours refused where it does not belong): it is neither
    /// refused nor counted here again, from any address.
    pub(crate) fn know(&self, key: &ApiKey) {
        self.know_hash(key.hash().as_str());
    }

    fn know_hash(&self, key_hash: &str) {
        let mut known = self.known_keys.lock().expect("the known-key set is never poisoned");
        if known.len() >= KNOWN_KEYS_MAX {
            known.clear();
        }
        known.insert(key_hash.to_owned());
    }

    fn knows(&self, key_hash: &str) -> bool {
        self.known_keys.lock().expect("the known-key set is never poisoned").contains(key_hash)
    }

    /// Counts one failed authentication against `address`.
    pub fn failed(&self, address: IpAddr, now: Instant) {
        let mut buckets = self.buckets.lock().expect("the failed-auth table is never poisoned");
        if buckets.len() >= ADDRESSES_MAX && !buckets.contains_key(&address) {
            buckets.retain(|_, b| b.refilled(now).left < FAILED_AUTHS_BURST);
            if buckets.len() >= ADDRESSES_MAX {
                // Every remembered address is still failing: forget them all rather than grow.
                buckets.clear();
            }
        }
        let bucket = buckets.get(&address).map_or(Bucket::full(now), |b| b.refilled(now));
        buckets.insert(address, Bucket { left: bucket.left.saturating_sub(1), ..bucket });
    }
}

/// The middleware: counts against the client's address (the client a trusted proxy forwards,
/// else the peer) each 401 answered to a presented key that is not ours, and once those used up
/// the burst, refuses the address's unknown keys (429) before any is looked up. A key that
/// authenticated in this process passes from any address; a request with no key guesses nothing
/// and is neither counted nor refused here (the request rate counts it).
pub(crate) async fn limit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    let address = Client::of(peer, request.headers(), &state.trusted_proxies).address;
    let (Some(address), Some(key)) = (address, presented_key(&request)) else {
        return next.run(request).await; // no key, or no server (tests driving the router)
    };
    if state.failed_auths.knows(key.hash().as_str()) {
        return next.run(request).await;
    }
    if let Err(retry_after_s) = state.failed_auths.may_try(address, Instant::now()) {
        return refusal(retry_after_s);
    }
    let response = next.run(request).await;
    if response.status() == StatusCode::UNAUTHORIZED {
        if is_ours(&state, &key).await {
            state.failed_auths.know(&key);
        } else {
            state.failed_auths.failed(address, Instant::now());
        }
    }
    response
}

/// The bearer token, as authentication would read it.
fn presented_key(request: &Request) -> Option<ApiKey> {
    crate::auth::bearer_of(request.headers()).ok()
}

/// The operator's key, the deposit key or a merchant's (one lookup, made only for a refused key
/// while its address has failures left).
async fn is_ours(state: &AppState, key: &ApiKey) -> bool {
    let hash = key.hash();
    let configured = [&state.operator_key_hash, &state.deposit_key_hash];
    if configured.into_iter().flatten().any(|h| crate::auth::key_hash_eq(&hash, h)) {
        return true;
    }
    matches!(state.engine.authenticate(key).await, Ok(Some(_)))
}

fn refusal(retry_after_s: u64) -> Response {
    let mut problem = Problem::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate-limited",
        "Too many failed authentications",
        format!(
            "this address presented {FAILED_AUTHS_BURST} keys that did not authenticate; try again in {retry_after_s} s"
        ),
    );
    problem.retry_after_s = Some(retry_after_s);
    problem.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_of_failures_then_one_a_second() {
        let table = FailedAuths::default();
        let (address, start) = (IpAddr::from([203, 0, 113, 7]), Instant::now());
        for _ in 0..FAILED_AUTHS_BURST {
            assert_eq!(table.may_try(address, start), Ok(()));
            table.failed(address, start);
        }
        assert_eq!(table.may_try(address, start), Err(1), "the burst is spent");
        let other = IpAddr::from([203, 0, 113, 8]);
        assert_eq!(table.may_try(other, start), Ok(()), "another address has its own");
        let later = start + Duration::from_millis(FAILED_AUTH_REFILL_MS);
        assert_eq!(table.may_try(address, later), Ok(()), "one more a second");
        table.failed(address, later);
        assert_eq!(table.may_try(address, later), Err(1));
    }
}
