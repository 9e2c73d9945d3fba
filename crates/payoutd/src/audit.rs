//! The operator's audit log for what the command line does (deposits, keys, verdicts, top-ups): written after the action took effect, naming the operating-system user who ran it.

use payoutd_engine::OperatorViewStore;
use payoutd_engine::operator_view::OperatorAction;

/// Records a command-line action that took effect. Unlike the API, a command can fail loudly: the
/// action is done, and the error tells the person at the terminal that its record is missing.
pub async fn record(
    log: &dyn OperatorViewStore,
    action: &str,
    subject: &str,
    detail: String,
) -> anyhow::Result<()> {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown user".to_owned());
    let at_ms = payoutd_engine::Clock::now_ms(&payoutd_engine::SystemClock);
    let entry = OperatorAction {
        at_ms,
        actor: format!("cli ({user})"),
        action: action.to_owned(),
        subject: subject.to_owned(),
        detail,
    };
    log.record_operator_action(&entry).await.map_err(|e| {
        anyhow::anyhow!(
            "{action} on {subject} took effect, but its audit log entry could not be written: {e}"
        )
    })
}
