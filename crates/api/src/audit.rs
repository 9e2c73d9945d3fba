//! The operator's audit log for what the operator key does over the API (the dashboard writes its own entries): who (the API, from which client address), what, on what, with which outcome.

use payoutd_engine::operator_view::OperatorAction;

use crate::AppState;
use crate::client::Client;

/// Records an operator action that took effect. A failed write is logged at error and does not
/// undo the answer: the action already happened, and the client would only repeat it.
pub(crate) async fn record(
    state: &AppState,
    client: &Client,
    action: &str,
    subject: &str,
    detail: String,
) {
    let Some(log) = &state.operator_views else { return };
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let entry = OperatorAction {
        at_ms,
        actor: format!("api ({})", client.shown()),
        action: action.to_owned(),
        subject: subject.to_owned(),
        detail,
    };
    if let Err(e) = log.record_operator_action(&entry).await {
        tracing::error!(action, subject, error = %e, "an operator action took effect but could not be written to the audit log");
    }
}
