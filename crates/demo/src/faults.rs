//! Injects transport faults on payoutd's `eth_sendRawTransaction` calls through the harness proxy, one at a time, and records each one that fired.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use payoutd_rail_evm::RPC_CALL_TIMEOUT_MS;
use payoutd_testkit::{Fault, FaultProxy, FaultRule};

pub const SEND_METHOD: &str = "eth_sendRawTransaction";
/// Sends forwarded untouched between two faults, so that faults spread over the run.
pub const SENDS_BETWEEN_FAULTS: u64 = 15;
/// A slow node: the answer arrives late but within payoutd's RPC budget.
pub const SLOW_ANSWER_MS: u64 = 1_500;
/// Past payoutd's RPC budget: the node acted, payoutd sees a timeout ("outcome unknown").
pub const TIMEOUT_ANSWER_MS: u64 = RPC_CALL_TIMEOUT_MS + 2_000;
const POLL_MS: u64 = 10;

/// The faults, in order. Lost answers dominate because they are the case that pays twice
/// in a naive system: the node took the transaction and the sender heard nothing.
pub const SCHEDULE: &[Fault] = &[
    Fault::DropResponse,
    Fault::DelayResponse { delay_ms: SLOW_ANSWER_MS },
    Fault::DropResponse,
    Fault::Refuse,
    Fault::DropResponse,
    Fault::DelayResponse { delay_ms: SLOW_ANSWER_MS },
    Fault::DelayResponse { delay_ms: TIMEOUT_ANSWER_MS },
    Fault::DropResponse,
    Fault::Refuse,
    Fault::DropResponse,
    Fault::DelayResponse { delay_ms: SLOW_ANSWER_MS },
    Fault::DropResponse,
];

/// A name for the summary.
pub fn label(fault: Fault) -> &'static str {
    match fault {
        Fault::DropResponse => "lost_response",
        Fault::DelayResponse { delay_ms } if delay_ms >= RPC_CALL_TIMEOUT_MS => "timed_out",
        Fault::DelayResponse { .. } => "delayed",
        Fault::Refuse => "refused",
        Fault::NoBatches => "batch_refused",
        Fault::Answer { .. } => "canned_answer",
        Fault::Behind { .. } => "lagging_read",
        Fault::Forward => "none",
    }
}

/// What fired, shared with the summary.
#[derive(Default)]
pub struct FaultLog {
    fired: Mutex<Vec<Fault>>,
}

impl FaultLog {
    pub fn by_label(&self) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for &fault in self.fired.lock().unwrap().iter() {
            *out.entry(label(fault)).or_default() += 1;
        }
        out
    }

    pub fn total(&self) -> usize {
        self.fired.lock().unwrap().len()
    }
}

/// Waits until `proxy` has seen `target` sends in all, or `stop` is set (then `false`).
async fn sends_reach(proxy: &FaultProxy, target: u64, stop: &AtomicBool) -> bool {
    while proxy.count(SEND_METHOD) < target {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    true
}

/// Runs [`SCHEDULE`]: each fault applies to exactly one send (`times(1)`) and is recorded
/// once the proxy has received a send after it was armed. Stops early, disarmed, on `stop`.
pub async fn run(proxy: Arc<FaultProxy>, log: Arc<FaultLog>, stop: Arc<AtomicBool>) {
    for &fault in SCHEDULE {
        if !sends_reach(&proxy, proxy.count(SEND_METHOD) + SENDS_BETWEEN_FAULTS, &stop).await {
            break;
        }
        let armed_at = proxy.count(SEND_METHOD);
        proxy.set_rule(FaultRule::method(SEND_METHOD, fault).times(1));
        // The count is taken before the rule is read for each request, so the first send
        // counted after arming is the one the rule applies to (a send already counted but
        // not yet matched could take it instead: still exactly one fault).
        if !sends_reach(&proxy, armed_at + 1, &stop).await {
            break;
        }
        log.fired.lock().unwrap().push(fault);
    }
    proxy.clear();
}
