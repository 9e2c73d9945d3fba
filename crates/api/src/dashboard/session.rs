//! Dashboard sessions: the operator key exchanged for an expiring HttpOnly, SameSite=Strict cookie, each session with its own CSRF token.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};

use super::page::{Failure, now_ms};
use crate::AppState;

/// The session cookie's name.
pub const COOKIE: &str = "payoutd_dashboard";
/// How long a session lives after sign-in, in seconds (a working day).
pub const SESSION_LIFETIME_SECS: i64 = 8 * 60 * 60;
/// Sessions held at once; past it a sign-in is refused until some expire or sign out.
pub const SESSIONS_MAX: usize = 1_000;
/// Random bytes in a session token and a CSRF token.
const TOKEN_BYTES: usize = 32;

/// One signed-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    /// Names the session in the audit log without revealing its token.
    pub actor: String,
    /// Every form of this session carries it; a POST without it changes nothing.
    pub csrf: String,
    pub expires_at_ms: i64,
    /// The cookie's token, to sign out.
    token: String,
}

impl Session {
    /// The hidden field every state-changing form carries.
    pub fn csrf_matches(&self, presented: &str) -> bool {
        crate::auth::constant_time_eq(presented.as_bytes(), self.csrf.as_bytes())
    }
}

/// The sessions of this process (a restart signs everyone out).
#[derive(Default)]
pub struct Sessions(Mutex<HashMap<String, Session>>);

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("too many open sessions; sign out elsewhere or wait for one to expire")]
    Full,
    #[error("no randomness for a session token: {0}")]
    Random(String),
}

fn random_hex() -> Result<String, SessionError> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| SessionError::Random(e.to_string()))?;
    Ok(hex::encode(bytes))
}

impl Sessions {
    /// A new session; the token goes in the cookie.
    pub fn open(&self, now_ms: i64) -> Result<(String, Session), SessionError> {
        let token = random_hex()?;
        let actor = format!("session:{}", &hex::encode(Sha256::digest(token.as_bytes()))[..12]);
        let session = Session {
            actor,
            csrf: random_hex()?,
            expires_at_ms: now_ms + SESSION_LIFETIME_SECS * 1_000,
            token: token.clone(),
        };
        let mut sessions = self.0.lock().expect("sessions lock");
        sessions.retain(|_, s| s.expires_at_ms > now_ms);
        if sessions.len() >= SESSIONS_MAX {
            return Err(SessionError::Full);
        }
        sessions.insert(token.clone(), session.clone());
        Ok((token, session))
    }

    fn get(&self, token: &str, now_ms: i64) -> Option<Session> {
        let sessions = self.0.lock().expect("sessions lock");
        sessions.get(token).filter(|s| s.expires_at_ms > now_ms).cloned()
    }

    pub fn close(&self, session: &Session) {
        self.0.lock().expect("sessions lock").remove(&session.token);
    }
}

/// The session cookie's value in a request, if any.
fn token_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .map(|c| c.value().to_owned())
}

/// The `Set-Cookie` value that opens (`token`) or ends (empty, expired) a session.
pub fn set_cookie(token: &str, secure: bool) -> String {
    let mut c = cookie::Cookie::build((COOKIE, token.to_owned()))
        .http_only(true)
        .same_site(cookie::SameSite::Strict)
        .path("/dashboard")
        .secure(secure)
        .max_age(cookie::time::Duration::seconds(if token.is_empty() {
            0
        } else {
            SESSION_LIFETIME_SECS
        }));
    if token.is_empty() {
        c = c.expires(cookie::time::OffsetDateTime::UNIX_EPOCH);
    }
    c.build().to_string()
}

/// A request from a signed-in browser. Pages without it redirect to the sign-in; actions answer 401.
pub struct SignedIn(pub Session);

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<SignedIn, Failure> {
        let dashboard = state.dashboard.as_ref().ok_or(Failure::Disabled)?;
        let session = token_of(&parts.headers).and_then(|t| dashboard.sessions.get(&t, now_ms()));
        match (session, parts.method == axum::http::Method::GET) {
            (Some(s), _) => Ok(SignedIn(s)),
            (None, true) => Err(Failure::SignIn),
            (None, false) => Err(Failure::Unauthorized),
        }
    }
}
