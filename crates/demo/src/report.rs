//! What a run prints and checks: prefixed output lines, the list of pass/fail checks, status counts, and the ledger check against the payouts' final states.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::api::Api;
use crate::chain::Coin;
use crate::intake::Planned;

/// Statuses in which the merchant's money is still held (`PayoutStatus::holds_funds`).
pub const HOLDING: &[&str] =
    &["requested", "held_for_review", "approved", "processing", "needs_attention"];

static PREFIX: OnceLock<&'static str> = OnceLock::new();

/// Names the binary in front of every line (`demo`, `chaos`); set once at start.
pub fn set_prefix(prefix: &'static str) {
    let _ = PREFIX.set(prefix);
}

pub fn say(text: impl AsRef<str>) {
    println!("{}: {}", PREFIX.get().copied().unwrap_or("payoutd-demo"), text.as_ref());
}

/// Checks whose failure fails the run, printed as they are made.
#[derive(Default)]
pub struct Checks(Vec<(String, bool)>);

impl Checks {
    pub fn add(&mut self, ok: bool, what: impl Into<String>) {
        let what = what.into();
        say(format!("check {}: {what}", if ok { "ok" } else { "FAILED" }));
        self.0.push((what, ok));
    }

    pub fn failed(&self) -> usize {
        self.0.iter().filter(|(_, ok)| !ok).count()
    }
}

pub fn count_by_status<'a>(statuses: impl Iterator<Item = &'a str>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for s in statuses {
        *counts.entry(s.to_owned()).or_default() += 1;
    }
    counts
}

pub fn format_counts<K: std::fmt::Display, V: std::fmt::Display>(
    counts: &BTreeMap<K, V>,
) -> String {
    counts.iter().map(|(s, n)| format!("{s}={n}")).collect::<Vec<_>>().join(" ")
}

/// One asset the merchant was credited with, for the ledger check.
pub struct Deposit<'a> {
    pub asset: &'a str,
    pub coin: Coin,
    pub amount: u128,
}

/// Balances must follow from the payouts alone: held = what is still in flight, available =
/// deposit - paid - held.
pub async fn ledger_checks(
    api: &Api,
    final_states: &[(&Planned, &str)],
    deposits: &[Deposit<'_>],
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let balances = api.get("/v1/balances").await?;
    for deposit in deposits {
        let mut held = 0u128;
        let mut spent = 0u128;
        let amount = |p: &Planned| p.amount.to_string().parse::<u128>().unwrap_or(u128::MAX);
        for &(p, o) in final_states {
            if p.coin != deposit.coin {
                continue;
            }
            if o == "paid" {
                spent += amount(p);
            } else if HOLDING.contains(&o) {
                held += amount(p);
            }
        }
        let row = balances.body["data"]
            .as_array()
            .and_then(|d| d.iter().find(|b| b["asset"] == deposit.asset));
        let field = |name: &str| row.and_then(|b| b[name].as_str()).unwrap_or("?").to_owned();
        // None only if payoutd paid out more than was deposited: then the check fails.
        let expected_available = deposit.amount.checked_sub(held + spent).map(|a| a.to_string());
        checks.add(
            Some(field("available")) == expected_available && field("held") == held.to_string(),
            format!(
                "ledger {}: available={} held={} (deposit {} - paid {spent} - held {held})",
                deposit.asset,
                field("available"),
                field("held"),
                deposit.amount
            ),
        );
    }
    Ok(())
}

/// One rail's counts for the per-rail summary lines.
#[derive(Debug, Clone, Copy, Default)]
pub struct RailCount {
    pub payouts: usize,
    pub paid: usize,
    pub transfers_on_chain: usize,
    pub duplicates: usize,
}

impl RailCount {
    /// `rail=<name> payouts=N paid=P transfers_on_chain=T duplicates=D`.
    pub fn line(&self, rail: &str) -> String {
        format!(
            "rail={rail} payouts={} paid={} transfers_on_chain={} duplicates={}",
            self.payouts, self.paid, self.transfers_on_chain, self.duplicates
        )
    }
}
