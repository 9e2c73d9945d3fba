//! What every dashboard answer shares: the security headers, the failure pages, times shown to people.

use askama::Template;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};

/// No inline script or style: markup from a merchant or a chain can never run.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `2026-12-02 07:50:00 UTC`.
pub fn when(ms: i64) -> String {
    let secs = ms.div_euclid(1_000);
    match cookie::time::OffsetDateTime::from_unix_timestamp(secs) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => ms.to_string(),
    }
}

/// `3 h 12 min`, `45 s`: how long something has waited.
pub fn age(ms: i64) -> String {
    let secs = ms.max(0) / 1_000;
    match secs {
        0..60 => format!("{secs} s"),
        60..3_600 => format!("{} min", secs / 60),
        3_600..86_400 => format!("{} h {} min", secs / 3_600, secs % 3_600 / 60),
        _ => format!("{} d {} h", secs / 86_400, secs % 86_400 / 3_600),
    }
}

/// Renders a template as a page with the dashboard's headers.
pub fn render<T: Template>(status: StatusCode, template: &T) -> Response {
    match template.render() {
        Ok(html) => secured((status, Html(html)).into_response()),
        Err(e) => {
            tracing::error!(error = %e, "dashboard template failed");
            secured(
                (StatusCode::INTERNAL_SERVER_ERROR, "the page could not be rendered")
                    .into_response(),
            )
        }
    }
}

/// The headers every dashboard answer carries.
pub fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers
        .insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

#[derive(Template)]
#[template(path = "dashboard/message.html")]
struct MessagePage<'a> {
    title: &'a str,
    text: String,
}

/// Why a dashboard request was not served; each answers with a page that says so and changed nothing.
#[derive(Debug)]
pub enum Failure {
    /// No operator key configured: the dashboard is off.
    Disabled,
    /// A page asked for without a session: to the sign-in.
    SignIn,
    /// An action without a session.
    Unauthorized,
    /// An action without this session's CSRF token.
    Forbidden,
    BadRequest(String),
    NotFound,
    /// The action does not apply to the subject as it is now (another operator was first).
    Conflict(String),
    Unavailable(String),
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let (status, title, text) = match self {
            Failure::SignIn => return secured(Redirect::to("/dashboard/login").into_response()),
            Failure::Disabled => (StatusCode::NOT_FOUND, "Dashboard off", "The dashboard is off: start payoutd with PAYOUTD_OPERATOR_KEY set.".to_owned()),
            Failure::Unauthorized => (StatusCode::UNAUTHORIZED, "Not signed in", "Sign in with the operator key first; nothing was changed.".to_owned()),
            Failure::Forbidden => {
                (StatusCode::FORBIDDEN, "Refused", "This form did not come from this session's dashboard page (CSRF check failed); nothing was changed.".to_owned())
            }
            Failure::BadRequest(why) => (StatusCode::BAD_REQUEST, "Not done", format!("{why}; nothing was changed.")),
            Failure::NotFound => (StatusCode::NOT_FOUND, "Not found", "There is nothing here.".to_owned()),
            Failure::Conflict(why) => (StatusCode::CONFLICT, "Not done", format!("{why}; nothing was changed.")),
            Failure::Unavailable(why) => (StatusCode::SERVICE_UNAVAILABLE, "Unavailable", why),
        };
        render(status, &MessagePage { title, text })
    }
}

impl From<payoutd_engine::StoreError> for Failure {
    fn from(e: payoutd_engine::StoreError) -> Failure {
        tracing::warn!(error = %e, "dashboard read failed");
        Failure::Unavailable("The database could not be read; try again.".to_owned())
    }
}
