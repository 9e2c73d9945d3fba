//! End-of-seed checks of the rules that span payouts and time: the caps at signing (I8) and the escalation of attempts no rail resolved in time.

use payoutd_domain::{
    Amount, AssetCode, Attempt, AttemptStatus, Destination, IncidentKind, PayoutId,
};
use payoutd_engine::pipeline::HOUR_MS;

use super::{ATTEMPT_UNRESOLVED_AFTER_MS, INCIDENTS_READ_MAX, World};

/// One stored attempt with what the caps count of its payout.
struct Made {
    payout: PayoutId,
    asset: AssetCode,
    destination: Destination,
    amount: Amount,
    attempt: Attempt,
}

impl World {
    /// The caps and escalation rules over every attempt of the seed.
    pub(super) async fn check_rules(&self) -> anyhow::Result<Vec<String>> {
        let mut made = Vec::new();
        for s in &self.submitted {
            for attempt in self.store.attempts_of(&s.id).await? {
                let r = &s.request;
                made.push(Made {
                    payout: s.id.clone(),
                    asset: r.asset.clone(),
                    destination: r.destination,
                    amount: r.amount,
                    attempt,
                });
            }
        }
        let mut violations = self.over_caps(&made);
        violations.extend(self.unescalated(&made).await?);
        Ok(violations)
    }

    /// I8: when a payout nobody reviewed got its first attempt, what was signed within the hour
    /// before (attempts not dead then) plus the payout stayed within the destination's and the
    /// wallet's caps. Of the attempts made in the same millisecond (two workers at once), only the
    /// checked ones count, first attempts of payouts nobody reviewed: whichever of them committed
    /// last counted all the others; a next attempt or a reviewed payout's may have come after.
    fn over_caps(&self, made: &[Made]) -> Vec<String> {
        let mut violations = Vec::new();
        // An attempt that died in the millisecond it was made (a refused first call) is not
        // checked: attempts made after its death in that millisecond rightly did not count it.
        let died_at_once = |m: &Made| {
            m.attempt.status == AttemptStatus::Dead
                && m.attempt.updated_at_ms == m.attempt.created_at_ms
        };
        // An attempt relinked from the chain after a failover lost it was signed before the loss,
        // under the caps as they stood then; stored again at its relinking, it is no signing of
        // its own (later signings count it from then on).
        let relinked = |m: &Made| m.attempt.txs.iter().any(|t| self.lost.contains(t.hash.as_str()));
        for first in made.iter().filter(|m| {
            m.attempt.attempt_no == 1
                && !self.reviewed.contains(&m.payout)
                && !died_at_once(m)
                && !relinked(m)
        }) {
            let Some(caps) = self.caps.get(&first.asset) else { continue };
            let t = first.attempt.created_at_ms;
            let counted = |o: &&Made| {
                let a = &o.attempt;
                a.id != first.attempt.id
                    && o.asset == first.asset
                    && a.created_at_ms > t - HOUR_MS
                    && (a.created_at_ms < t
                        || (a.created_at_ms == t
                            && a.attempt_no == 1
                            && !self.reviewed.contains(&o.payout)))
                    && (a.status != AttemptStatus::Dead || a.updated_at_ms > t)
            };
            let sum = |filter: &dyn Fn(&&Made) -> bool| {
                made.iter().filter(counted).filter(filter).fold(first.amount, |total, o| {
                    total.checked_add(o.amount).expect("simulated amounts are small")
                })
            };
            let to_destination = sum(&|o| o.destination == first.destination);
            let of_wallet = sum(&|_| true);
            if to_destination > caps.per_destination_per_hour {
                let with: Vec<String> = made
                    .iter()
                    .filter(counted)
                    .filter(|o| o.destination == first.destination)
                    .map(|o| {
                        format!(
                            "{} #{} {} at {} ({:?}, updated {})",
                            o.payout,
                            o.attempt.attempt_no,
                            o.amount,
                            o.attempt.created_at_ms,
                            o.attempt.status,
                            o.attempt.updated_at_ms
                        )
                    })
                    .collect();
                violations.push(format!(
                    "I8: payout {} signed at {t} with {to_destination} towards {} within the hour, over the cap of {}; counted with: {}",
                    first.payout,
                    first.destination,
                    caps.per_destination_per_hour,
                    with.join(", ")
                ));
            }
            if of_wallet > caps.per_wallet_per_hour {
                violations.push(format!("I8: payout {} signed at {t} with {of_wallet} of {} within the hour, over the wallet's cap of {}", first.payout, first.asset, caps.per_wallet_per_hour));
            }
        }
        violations
    }

    /// Every attempt a sweep saw live `ATTEMPT_UNRESOLVED_AFTER_MS` after it was made (its last
    /// update came from a sweep at least that late) opened one `attempt_unresolved` incident.
    async fn unescalated(&self, made: &[Made]) -> anyhow::Result<Vec<String>> {
        let incidents = self.store.open_incidents(INCIDENTS_READ_MAX).await?;
        let escalated: Vec<String> = incidents
            .into_iter()
            .filter(|i| i.kind == IncidentKind::AttemptUnresolved)
            .filter_map(|i| i.attempt_id.map(|a| a.to_string()))
            .collect();
        Ok(made
            .iter()
            .filter(|m| !self.ended_by_verdict.contains(&m.payout))
            .filter(|m| m.attempt.updated_at_ms - m.attempt.created_at_ms >= ATTEMPT_UNRESOLVED_AFTER_MS)
            .filter(|m| !escalated.contains(&m.attempt.id.to_string()))
            .map(|m| {
                let age_ms = m.attempt.updated_at_ms - m.attempt.created_at_ms;
                format!("escalation: attempt {} of payout {} was live {age_ms} ms and opened no attempt_unresolved incident", m.attempt.id, m.payout)
            })
            .collect())
    }
}
