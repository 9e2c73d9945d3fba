//! A batch's new payouts on PostgreSQL as sets: the lines' key locks, the keys that exist, the hour's count and the balances read under lock in four statements, the lines decided in order in memory, then one statement per table.

use std::collections::{BTreeMap, HashMap};

use payoutd_domain::{Amount, AssetCode, MerchantId, Payout, PayoutKey, PayoutStatus};
use payoutd_engine::StoreError;
use payoutd_engine::store::{InsertPayoutOutcome, NewEvent, NewPayout, intake_hour_ms};
use sqlx::{Postgres, Row, Transaction};

use crate::classify;
use crate::pg::{PgStore, insert_events, payout_key_lock, payout_row};
use crate::shared_reads::payout_columns;

/// The same advisory lock per (merchant, key) as a single payout's intake, taken in ascending
/// order so two batches (or a batch and single requests) never wait on each other in a circle.
const LOCK_KEYS: &str = "SELECT count(pg_advisory_xact_lock(k)) FROM unnest($1::int8[]) AS k";

const EXISTING: &str = concat!(
    "SELECT ",
    payout_columns!(""),
    " FROM payouts WHERE merchant_id = $1 AND idempotency_key = ANY($2)"
);

/// Each clock hour's row, created when missing and locked: the count the hourly limit reads.
const LOCK_HOURS: &str = "INSERT INTO merchant_intake_hours AS h (merchant_id, hour_ms, payouts) \
     SELECT $1, hour, 0 FROM unnest($2::int8[]) AS hour \
     ON CONFLICT (merchant_id, hour_ms) DO UPDATE SET payouts = h.payouts RETURNING hour_ms, payouts";

const LOCK_BALANCES: &str = "SELECT asset, available::text AS available FROM balances WHERE merchant_id = $1 AND asset = ANY($2) \
     ORDER BY asset FOR UPDATE";

const INSERT_PAYOUTS: &str = "INSERT INTO payouts (id, merchant_id, idempotency_key, fingerprint, asset, amount, network_fee, \
     destination, metadata, status, version, created_at_ms, updated_at_ms) \
     SELECT id, $1, key, fingerprint, asset, amount::numeric, fee::numeric, destination, metadata, $2, 1, at, at \
     FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::int8[]) \
     AS u(id, key, fingerprint, asset, amount, fee, destination, metadata, at)";

const COUNT_HOURS: &str = "UPDATE merchant_intake_hours AS h SET payouts = h.payouts + u.n \
     FROM unnest($2::int8[], $3::int8[]) AS u(hour, n) WHERE h.merchant_id = $1 AND h.hour_ms = u.hour";

/// What one merchant's lines may still take, read under lock and drawn down line by line.
struct Room {
    existing: HashMap<String, Payout>,
    hours: HashMap<i64, i64>,
    available: HashMap<AssetCode, Amount>,
}

/// `insert_payout` for each line, in one transaction, as one call after the other would answer.
pub(crate) async fn insert_payouts(
    store: &PgStore,
    lines: &[NewPayout],
) -> Result<Vec<InsertPayoutOutcome>, StoreError> {
    let Some(first) = lines.first() else { return Ok(Vec::new()) };
    let merchant = first.payout.merchant_id.clone();
    for line in lines {
        assert!(
            line.payout.merchant_id == merchant && line.payout.status == PayoutStatus::Requested,
            "one merchant's new payouts"
        );
        assert_eq!(
            line.event.entity_id,
            line.payout.id.as_str(),
            "each event announces its payout"
        );
    }
    let mut tx = store.pool.begin().await.map_err(classify)?;
    let mut room = lock_room(&mut tx, &merchant, lines).await?;
    let mut outcomes = Vec::with_capacity(lines.len());
    let mut created: Vec<&NewPayout> = Vec::new();
    for line in lines {
        let outcome = decide(&mut room, line)?;
        if let InsertPayoutOutcome::Created(_) = outcome {
            created.push(line);
        }
        outcomes.push(outcome);
    }
    if !created.is_empty() {
        write_created(&mut tx, &merchant, &created).await?;
    }
    tx.commit().await.map_err(classify)?;
    Ok(outcomes)
}

/// The merchant's payouts with these keys.
pub(crate) async fn payouts_by_keys(
    store: &PgStore,
    merchant: &MerchantId,
    keys: &[PayoutKey],
) -> Result<Vec<Payout>, StoreError> {
    let keys: Vec<&str> = keys.iter().map(PayoutKey::as_str).collect();
    let rows = sqlx::query(EXISTING)
        .bind(merchant.as_str())
        .bind(&keys)
        .fetch_all(&store.pool)
        .await
        .map_err(classify)?;
    rows.iter().map(payout_row).collect()
}

/// The keys locked, then what exists, each hour's count and each asset's balance, under lock.
async fn lock_room(
    tx: &mut Transaction<'_, Postgres>,
    merchant: &MerchantId,
    lines: &[NewPayout],
) -> Result<Room, StoreError> {
    let mut locks: Vec<i64> =
        lines.iter().map(|l| payout_key_lock(merchant, &l.payout.key)).collect();
    locks.sort_unstable();
    locks.dedup();
    sqlx::query(LOCK_KEYS).bind(&locks).fetch_one(&mut **tx).await.map_err(classify)?;
    let keys: Vec<&str> = lines.iter().map(|l| l.payout.key.as_str()).collect();
    let rows = sqlx::query(EXISTING)
        .bind(merchant.as_str())
        .bind(&keys)
        .fetch_all(&mut **tx)
        .await
        .map_err(classify)?;
    let existing = rows
        .iter()
        .map(|row| payout_row(row).map(|p| (p.key.as_str().to_owned(), p)))
        .collect::<Result<_, _>>()?;
    let mut hours: Vec<i64> =
        lines.iter().map(|l| intake_hour_ms(l.payout.created_at_ms)).collect();
    hours.sort_unstable();
    hours.dedup();
    let rows = sqlx::query(LOCK_HOURS)
        .bind(merchant.as_str())
        .bind(&hours)
        .fetch_all(&mut **tx)
        .await
        .map_err(classify)?;
    let hours = rows
        .iter()
        .map(|r| {
            Ok((r.try_get("hour_ms").map_err(classify)?, r.try_get("payouts").map_err(classify)?))
        })
        .collect::<Result<_, StoreError>>()?;
    let mut assets: Vec<&str> = lines.iter().map(|l| l.payout.asset.as_str()).collect();
    assets.sort_unstable();
    assets.dedup();
    let rows = sqlx::query(LOCK_BALANCES)
        .bind(merchant.as_str())
        .bind(&assets)
        .fetch_all(&mut **tx)
        .await
        .map_err(classify)?;
    let mut available = HashMap::new();
    for row in &rows {
        let asset: String = row.try_get("asset").map_err(classify)?;
        let asset = AssetCode::parse(&asset)
            .map_err(|e| StoreError::Corrupt(format!("balance asset {asset:?}: {e}")))?
            .0;
        let text: String = row.try_get("available").map_err(classify)?;
        available.insert(
            asset,
            Amount::parse(&text)
                .map_err(|e| StoreError::Corrupt(format!("balance {text:?}: {e}")))?,
        );
    }
    Ok(Room { existing, hours, available })
}

/// One line, as the single intake decides it: its key taken, its hour full, its funds short, or
/// created (the hour counted, amount and fee drawn).
fn decide(room: &mut Room, line: &NewPayout) -> Result<InsertPayoutOutcome, StoreError> {
    let p = &line.payout;
    if let Some(existing) = room.existing.get(p.key.as_str()) {
        return Ok(InsertPayoutOutcome::Existing(existing.clone()));
    }
    let count =
        room.hours.get_mut(&intake_hour_ms(p.created_at_ms)).expect("every line's hour was locked");
    if *count >= i64::from(line.payouts_per_hour_max) {
        return Ok(InsertPayoutOutcome::HourFull);
    }
    let needed = p.amount.checked_add(p.network_fee).ok_or_else(|| {
        StoreError::Invariant(format!("payout {} with its fee exceeds 256 bits", p.id))
    })?;
    let Some(available) = room.available.get_mut(&p.asset) else {
        return Ok(InsertPayoutOutcome::InsufficientFunds);
    };
    let Some(left) = available.checked_sub(needed) else {
        return Ok(InsertPayoutOutcome::InsufficientFunds);
    };
    *available = left;
    *count += 1;
    // A key twice among the lines would be created twice: the caller refuses such batches.
    room.existing.insert(p.key.as_str().to_owned(), p.clone());
    Ok(InsertPayoutOutcome::Created(p.clone()))
}

/// The created lines' payouts, journals with their entries, summed balance draws, events and
/// hour counts: one statement each.
async fn write_created(
    tx: &mut Transaction<'_, Postgres>,
    merchant: &MerchantId,
    created: &[&NewPayout],
) -> Result<(), StoreError> {
    let column = |f: fn(&Payout) -> String| -> Vec<String> {
        created.iter().map(|l| f(&l.payout)).collect()
    };
    let inserted = sqlx::query(INSERT_PAYOUTS)
        .bind(merchant.as_str())
        .bind(PayoutStatus::Requested.as_str())
        .bind(column(|p| p.id.as_str().to_owned()))
        .bind(column(|p| p.key.as_str().to_owned()))
        .bind(column(|p| p.fingerprint.as_str().to_owned()))
        .bind(column(|p| p.asset.as_str().to_owned()))
        .bind(column(|p| p.amount.to_string()))
        .bind(column(|p| p.network_fee.to_string()))
        .bind(column(|p| p.destination.to_string()))
        .bind(column(|p| p.metadata.as_json().to_owned()))
        .bind(created.iter().map(|l| l.payout.created_at_ms).collect::<Vec<i64>>())
        .execute(&mut **tx)
        .await
        .map_err(classify)?;
    expect_rows(inserted.rows_affected(), created.len(), "payout")?;
    let journals: Vec<(payoutd_domain::Journal, i64)> = created
        .iter()
        .flat_map(|l| l.payout.intake_journals().into_iter().map(|j| (j, l.payout.created_at_ms)))
        .collect();
    crate::pg_settle::draw_summed(tx, &journals.iter().map(|(j, _)| j).collect::<Vec<_>>()).await?;
    crate::pg_settle::insert_journal_rows(
        tx,
        &journals.iter().map(|(j, at)| (j, *at)).collect::<Vec<_>>(),
    )
    .await?;
    let events: Vec<&NewEvent> = created.iter().map(|l| &l.event).collect();
    expect_rows(insert_events(tx, &events).await?, events.len(), "event")?;
    let mut per_hour: BTreeMap<i64, i64> = BTreeMap::new();
    for line in created {
        *per_hour.entry(intake_hour_ms(line.payout.created_at_ms)).or_default() += 1;
    }
    let (hours, counts): (Vec<i64>, Vec<i64>) = per_hour.into_iter().unzip();
    sqlx::query(COUNT_HOURS)
        .bind(merchant.as_str())
        .bind(&hours)
        .bind(&counts)
        .execute(&mut **tx)
        .await
        .map_err(classify)?;
    Ok(())
}

/// A set statement that wrote another number of rows than the lines decided is a store bug.
fn expect_rows(affected: u64, expected: usize, what: &str) -> Result<(), StoreError> {
    if affected != expected as u64 {
        return Err(StoreError::Invariant(format!(
            "a batch's intake wrote {affected} {what} rows, expected {expected}"
        )));
    }
    Ok(())
}
