//! A sweep's settlements on PostgreSQL as one statement per table: the common ends (a payout
//! transition with its journals and event, nothing else) written together instead of ~7 round trips each.

use std::collections::{BTreeMap, HashSet};

use payoutd_domain::{Amount, AssetCode, Journal, JournalId, MerchantId};
use payoutd_engine::StoreError;
use payoutd_engine::pipeline_store::{AttemptSettlement, PayoutEffect};
use payoutd_engine::store::{NewEvent, PayoutTransition, TransitionOutcome};
use sqlx::{Postgres, Row, Transaction};

use crate::classify;
use crate::pg::{entry_arrays, insert_events as insert_many_events, payout_row};
use crate::rows::{self, BalanceDelta};

/// Locks the attempt and payout rows of every candidate still at the state its settlement expects,
/// and names them by position (1-based). `FOR UPDATE` re-reads a row another transaction changed
/// meanwhile, so what it returns is true until COMMIT.
const LOCK_EXPECTED: &str = "SELECT u.i FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int8[]) \
     WITH ORDINALITY AS u(attempt_id, attempt_from, payout_id, merchant_id, payout_from, payout_version, i) \
     JOIN attempts a ON a.id = u.attempt_id AND a.status = u.attempt_from AND a.payout_id = u.payout_id \
     JOIN payouts p ON p.id = u.payout_id AND p.merchant_id = u.merchant_id AND p.status = u.payout_from \
     AND p.version = u.payout_version ORDER BY p.id FOR UPDATE OF a, p";

/// `SETTLE_ATTEMPT` for many; the conditions stay so a miscount is caught, not written.
const SETTLE_ATTEMPTS: &str = "UPDATE attempts SET status = u.u_to, evidence = u.u_evidence, \
     death_proof = coalesce(u.u_death_proof, attempts.death_proof), updated_at_ms = u.u_at_ms, mined_block = u.u_block, \
     mined_hash = u.u_hash FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[], $7::text[], $8::text[]) \
     AS u(u_id, u_to, u_evidence, u_death_proof, u_at_ms, u_block, u_hash, u_from) \
     WHERE attempts.id = u.u_id AND attempts.status = u.u_from";

/// The conditional payout transition (I5) for many.
const TRANSITION_PAYOUTS: &str = concat!(
    "UPDATE payouts SET status = u.u_to, version = payouts.version + 1, updated_at_ms = u.u_at_ms \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::text[], $6::int8[]) \
     AS u(u_id, u_merchant, u_from, u_version, u_to, u_at_ms) \
     WHERE payouts.id = u.u_id AND payouts.merchant_id = u.u_merchant AND payouts.status = u.u_from \
     AND payouts.version = u.u_version RETURNING ",
    crate::shared_reads::payout_columns!("payouts.")
);

/// Each merchant's summed change per asset; draws only where they are covered (the CHECK
/// constraints stand behind this), so fewer rows than groups means a journal exceeded a balance.
const DRAW_BALANCES: &str = "UPDATE balances SET available = available + u.ai::numeric - u.ao::numeric, \
     held = held + u.hi::numeric - u.ho::numeric \
     FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS u(m, a, ai, ao, hi, ho) \
     WHERE balances.merchant_id = u.m AND balances.asset = u.a \
     AND balances.available + u.ai::numeric >= u.ao::numeric AND balances.held + u.hi::numeric >= u.ho::numeric";

const INSERT_JOURNALS: &str = "WITH j AS (INSERT INTO journals (id, kind, asset, reference, created_at_ms) \
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[])) \
     INSERT INTO ledger_entries (journal_id, account, asset, direction, amount) \
     SELECT e.j, e.account, e.asset, e.direction, e.amount::numeric \
     FROM unnest($6::text[], $7::text[], $8::text[], $9::int2[], $10::text[]) AS e(j, account, asset, direction, amount)";

/// Writes the settlements that can go together (see `together`) inside `tx` and answers, per
/// settlement, its outcome, or `None` for those the caller must write one by one after these.
/// Commits nothing; an error means the caller must roll back.
pub(crate) async fn settle_together(
    tx: &mut Transaction<'_, Postgres>,
    settlements: &[AttemptSettlement],
) -> Result<Vec<Option<TransitionOutcome>>, StoreError> {
    let candidates = together(settlements);
    let mut outcomes: Vec<Option<TransitionOutcome>> = vec![None; settlements.len()];
    if candidates.is_empty() {
        return Ok(outcomes);
    }
    let locked = lock_expected(tx, &candidates).await?;
    for (index, _, _) in &candidates {
        outcomes[*index] = Some(TransitionOutcome::Stale);
    }
    let applied: Vec<(usize, &AttemptSettlement, &PayoutTransition)> =
        candidates.into_iter().filter(|(i, _, _)| locked.contains(i)).collect();
    if applied.is_empty() {
        return Ok(outcomes);
    }
    settle_attempt_rows(tx, &applied).await?;
    let mut payouts = transition_payouts(tx, &applied).await?;
    draw_balances(tx, &applied).await?;
    insert_journals(tx, &applied).await?;
    insert_events(tx, &applied).await?;
    for (index, _, t) in &applied {
        let payout = payouts.remove(t.payout_id.as_str()).ok_or_else(|| {
            StoreError::Invariant(format!("payout {} was locked but not moved", t.payout_id))
        })?;
        outcomes[*index] = Some(TransitionOutcome::Applied(payout));
    }
    Ok(outcomes)
}

/// The settlements that go together: a payout transition with no incident whose journals only
/// draw on existing balance rows, at most one per payout (a second one is written after, one by
/// one, and finds the payout moved).
fn together(
    settlements: &[AttemptSettlement],
) -> Vec<(usize, &AttemptSettlement, &PayoutTransition)> {
    let mut payouts = HashSet::new();
    let mut candidates = Vec::with_capacity(settlements.len());
    for (index, s) in settlements.iter().enumerate() {
        let PayoutEffect::Transition(t) = &s.payout else { continue };
        let draws_only =
            t.journals.iter().all(|j| rows::deltas(j).iter().all(|(_, d)| d.decreases()));
        if s.incident.is_none() && draws_only && payouts.insert(t.payout_id.as_str()) {
            assert!(
                t.from.can_become(t.to),
                "transition {} -> {} is not in the table",
                t.from,
                t.to
            );
            candidates.push((index, s, t));
        }
    }
    candidates
}

async fn lock_expected(
    tx: &mut Transaction<'_, Postgres>,
    candidates: &[(usize, &AttemptSettlement, &PayoutTransition)],
) -> Result<HashSet<usize>, StoreError> {
    let attempt_ids: Vec<&str> = candidates.iter().map(|(_, s, _)| s.attempt_id.as_str()).collect();
    let attempt_from: Vec<&str> =
        candidates.iter().map(|(_, s, _)| s.attempt_from.as_str()).collect();
    let payout_ids: Vec<&str> = candidates.iter().map(|(_, _, t)| t.payout_id.as_str()).collect();
    let merchants: Vec<&str> = candidates.iter().map(|(_, _, t)| t.merchant_id.as_str()).collect();
    let payout_from: Vec<&str> = candidates.iter().map(|(_, _, t)| t.from.as_str()).collect();
    let versions: Vec<i64> = candidates.iter().map(|(_, _, t)| t.from_version).collect();
    let positions: Vec<i64> = sqlx::query_scalar(LOCK_EXPECTED)
        .bind(&attempt_ids)
        .bind(&attempt_from)
        .bind(&payout_ids)
        .bind(&merchants)
        .bind(&payout_from)
        .bind(&versions)
        .fetch_all(&mut **tx)
        .await
        .map_err(classify)?;
    positions
        .into_iter()
        .map(|p| {
            let at = usize::try_from(p - 1)
                .map_err(|e| StoreError::Invariant(format!("position {p}: {e}")))?;
            candidates
                .get(at)
                .map(|(index, _, _)| *index)
                .ok_or_else(|| StoreError::Invariant(format!("position {p} names no candidate")))
        })
        .collect()
}

async fn settle_attempt_rows(
    tx: &mut Transaction<'_, Postgres>,
    applied: &[(usize, &AttemptSettlement, &PayoutTransition)],
) -> Result<(), StoreError> {
    let mut ids = Vec::with_capacity(applied.len());
    let mut to = Vec::with_capacity(applied.len());
    let mut evidence = Vec::with_capacity(applied.len());
    let mut death_proofs = Vec::with_capacity(applied.len());
    let mut at = Vec::with_capacity(applied.len());
    let mut blocks = Vec::with_capacity(applied.len());
    let mut hashes = Vec::with_capacity(applied.len());
    let mut from = Vec::with_capacity(applied.len());
    for (_, s, t) in applied {
        let (block, hash) = rows::mined_columns(s)?;
        ids.push(s.attempt_id.as_str());
        to.push(s.attempt_to.as_str());
        evidence.push(s.evidence.as_str());
        death_proofs.push(
            (s.attempt_to == payoutd_domain::AttemptStatus::Dead).then_some(s.evidence.as_str()),
        );
        at.push(t.at_ms);
        blocks.push(block);
        hashes.push(hash);
        from.push(s.attempt_from.as_str());
    }
    let updated = sqlx::query(SETTLE_ATTEMPTS)
        .bind(&ids)
        .bind(&to)
        .bind(&evidence)
        .bind(&death_proofs)
        .bind(&at)
        .bind(&blocks)
        .bind(&hashes)
        .bind(&from)
        .execute(&mut **tx)
        .await
        .map_err(classify)?;
    expect_rows(updated.rows_affected(), applied.len(), "attempts")
}

async fn transition_payouts(
    tx: &mut Transaction<'_, Postgres>,
    applied: &[(usize, &AttemptSettlement, &PayoutTransition)],
) -> Result<std::collections::HashMap<String, payoutd_domain::Payout>, StoreError> {
    let ids: Vec<&str> = applied.iter().map(|(_, _, t)| t.payout_id.as_str()).collect();
    let merchants: Vec<&str> = applied.iter().map(|(_, _, t)| t.merchant_id.as_str()).collect();
    let from: Vec<&str> = applied.iter().map(|(_, _, t)| t.from.as_str()).collect();
    let versions: Vec<i64> = applied.iter().map(|(_, _, t)| t.from_version).collect();
    let to: Vec<&str> = applied.iter().map(|(_, _, t)| t.to.as_str()).collect();
    let at: Vec<i64> = applied.iter().map(|(_, _, t)| t.at_ms).collect();
    let moved = sqlx::query(TRANSITION_PAYOUTS)
        .bind(&ids)
        .bind(&merchants)
        .bind(&from)
        .bind(&versions)
        .bind(&to)
        .bind(&at)
        .fetch_all(&mut **tx)
        .await
        .map_err(classify)?;
    expect_rows(moved.len() as u64, applied.len(), "payouts")?;
    moved
        .iter()
        .map(|row| {
            let id: String = row.try_get("id").map_err(classify)?;
            Ok((id, payout_row(row)?))
        })
        .collect()
}

/// Sums every journal's draw per (merchant, asset) and applies each sum in one conditional row
/// update. Only draws go together, so the sum is covered exactly when each draw in turn would be.
async fn draw_balances(
    tx: &mut Transaction<'_, Postgres>,
    applied: &[(usize, &AttemptSettlement, &PayoutTransition)],
) -> Result<(), StoreError> {
    let journals: Vec<&Journal> = applied.iter().flat_map(|(_, _, t)| &t.journals).collect();
    draw_summed(tx, &journals).await
}

/// Sums `journals`' draws per (merchant, asset) and applies each sum in one conditional row
/// update; a sum not covered is an invariant breach (the callers decided coverage under lock).
pub(crate) async fn draw_summed(
    tx: &mut Transaction<'_, Postgres>,
    journals: &[&Journal],
) -> Result<(), StoreError> {
    let mut sums: BTreeMap<(MerchantId, AssetCode), BalanceDelta> = BTreeMap::new();
    for journal in journals.iter().copied() {
        for (merchant, d) in rows::deltas(journal) {
            let sum = sums.entry((merchant, journal.asset.clone())).or_default();
            sum.available_in = add(sum.available_in, d.available_in)?;
            sum.available_out = add(sum.available_out, d.available_out)?;
            sum.held_in = add(sum.held_in, d.held_in)?;
            sum.held_out = add(sum.held_out, d.held_out)?;
        }
    }
    if sums.is_empty() {
        return Ok(());
    }
    let merchants: Vec<&str> = sums.keys().map(|(m, _)| m.as_str()).collect();
    let assets: Vec<&str> = sums.keys().map(|(_, a)| a.as_str()).collect();
    let column = |f: fn(&BalanceDelta) -> Amount| -> Vec<String> {
        sums.values().map(|d| f(d).to_string()).collect()
    };
    let updated = sqlx::query(DRAW_BALANCES)
        .bind(&merchants)
        .bind(&assets)
        .bind(column(|d| d.available_in))
        .bind(column(|d| d.available_out))
        .bind(column(|d| d.held_in))
        .bind(column(|d| d.held_out))
        .execute(&mut **tx)
        .await
        .map_err(classify)?;
    if updated.rows_affected() != sums.len() as u64 {
        // A release or settle larger than what is held means the ledger is already wrong: stop.
        return Err(StoreError::Invariant(format!(
            "summed journals exceed the balance of {} of {} merchant assets",
            sums.len() as u64 - updated.rows_affected(),
            sums.len()
        )));
    }
    Ok(())
}

fn add(a: Amount, b: Amount) -> Result<Amount, StoreError> {
    a.checked_add(b).ok_or_else(|| {
        StoreError::Invariant("a sweep's summed journals overflow an amount".to_owned())
    })
}

async fn insert_journals(
    tx: &mut Transaction<'_, Postgres>,
    applied: &[(usize, &AttemptSettlement, &PayoutTransition)],
) -> Result<(), StoreError> {
    let journals: Vec<(&Journal, i64)> =
        applied.iter().flat_map(|(_, _, t)| t.journals.iter().map(|j| (j, t.at_ms))).collect();
    insert_journal_rows(tx, &journals).await
}

/// Each journal (with when it was written) and its entries, in two set statements.
pub(crate) async fn insert_journal_rows(
    tx: &mut Transaction<'_, Postgres>,
    journals: &[(&Journal, i64)],
) -> Result<(), StoreError> {
    let (mut ids, mut kinds, mut assets, mut references, mut at) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut entry_journals, mut accounts, mut entry_assets, mut directions, mut amounts) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for &(journal, at_ms) in journals {
        let id = JournalId::new().as_str().to_owned();
        let (journal_accounts, journal_directions, journal_amounts) = entry_arrays(journal);
        entry_journals.extend(std::iter::repeat_n(id.clone(), journal_accounts.len()));
        entry_assets.extend(std::iter::repeat_n(journal.asset.as_str(), journal_accounts.len()));
        accounts.extend(journal_accounts);
        directions.extend(journal_directions);
        amounts.extend(journal_amounts);
        ids.push(id);
        kinds.push(journal.kind.as_str());
        assets.push(journal.asset.as_str());
        references.push(journal.reference.as_str());
        at.push(at_ms);
    }
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query(INSERT_JOURNALS)
        .bind(&ids)
        .bind(&kinds)
        .bind(&assets)
        .bind(&references)
        .bind(&at)
        .bind(&entry_journals)
        .bind(&accounts)
        .bind(&entry_assets)
        .bind(&directions)
        .bind(&amounts)
        .execute(&mut **tx)
        .await
        .map_err(classify)?;
    Ok(())
}

/// In the sweep's order, so `seq` orders the events as the one-by-one path would.
async fn insert_events(
    tx: &mut Transaction<'_, Postgres>,
    applied: &[(usize, &AttemptSettlement, &PayoutTransition)],
) -> Result<(), StoreError> {
    let events: Vec<&NewEvent> = applied.iter().map(|(_, _, t)| &t.event).collect();
    let inserted = insert_many_events(tx, &events).await?;
    expect_rows(inserted, events.len(), "events")
}

/// A set statement that touched another number of rows than the locked set is a store bug.
fn expect_rows(affected: u64, expected: usize, what: &str) -> Result<(), StoreError> {
    if affected != expected as u64 {
        return Err(StoreError::Invariant(format!(
            "settling together moved {affected} {what} rows, expected {expected}"
        )));
    }
    Ok(())
}
