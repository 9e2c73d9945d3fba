//! Simulated crashes are panics with a known message: silenced when they happen, told apart from the engine's own assertions afterwards.

use crate::chain::CRASH_MESSAGE;

/// Silences the panics that stand for simulated crashes; other panics still print.
pub fn quiet_simulated_crashes() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info.payload().downcast_ref::<String>().map(String::as_str).unwrap_or("");
        if !message.starts_with(CRASH_MESSAGE) {
            default(info);
        }
    }));
}

/// The message of a panic that is not a simulated crash: an assertion of the engine (crashing
/// beats paying twice), which a clean seed must never reach.
pub(crate) fn engine_assertion(panic: &(dyn std::any::Any + Send)) -> Option<String> {
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default();
    (!message.starts_with(CRASH_MESSAGE)).then_some(message)
}
