//! `payoutd statement`: a merchant's statement for a period as CSV, for finance (the opening balances, each ledger entry with the balances after it, the closing balances).

use anyhow::Context;
use payoutd::config;
use payoutd_domain::{Amount, Bucket, MerchantId};
use payoutd_engine::statements::{Balances, Period, Statement, statement};

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;
/// The CSV's header: one opening row, one row per entry, one closing row.
pub(crate) const STATEMENT_HEADER: &str = "row,at,at_ms,journal_id,journal_kind,reference,account,change_base_units,available_base_units,held_base_units";

pub(crate) async fn statement_command(
    stores: &payoutd_store::Stores,
    cfg: &config::Config,
    engine: &payoutd_engine::Engine,
    merchant: &str,
    asset: &str,
    (from, to): (&str, &str),
) -> anyhow::Result<()> {
    let merchant =
        MerchantId::parse(merchant).context("--merchant is not a merchant id (mer_...)")?;
    let asset = cfg.assets.get(asset)?.code.clone();
    let period = Period::new(instant(from).context("--from")?, instant(to).context("--to")?)?;
    // A merchant keeps every key it was given, revoked ones too: none means no such merchant.
    if engine.api_keys(&merchant).await?.is_empty() {
        anyhow::bail!("no merchant {merchant}");
    }
    let statement = statement(stores.operator_views.as_ref(), &merchant, &asset, period).await?;
    print!("{}", csv(&statement));
    Ok(())
}

/// A day (`2026-12-01`, its first instant in UTC) or milliseconds since the Unix epoch.
fn instant(text: &str) -> anyhow::Result<i64> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let parts: Vec<&str> = text.split('-').collect();
    let [year, month, day] = parts.as_slice() else {
        anyhow::bail!("{text:?} is neither a day (YYYY-MM-DD) nor milliseconds since the epoch");
    };
    let (year, month, day): (i64, i64, i64) = (year.parse()?, month.parse()?, day.parse()?);
    anyhow::ensure!((1..=12).contains(&month) && (1..=31).contains(&day), "{text:?} is not a day");
    Ok(days_from_civil(year, month, day) * DAY_MS)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `ms` as an RFC 3339 instant in UTC, to the millisecond (the inverse of `days_from_civil`).
fn rfc3339(ms: i64) -> String {
    let (days, in_day_ms) = (ms.div_euclid(DAY_MS), ms.rem_euclid(DAY_MS));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s, milli) =
        (in_day_ms / 3_600_000, in_day_ms / 60_000 % 60, in_day_ms / 1_000 % 60, in_day_ms % 1_000);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

/// The statement as CSV. Journal ids, kinds and references are payoutd's own identifiers (no
/// commas or quotes), so no field needs quoting.
pub(crate) fn csv(statement: &Statement) -> String {
    let balances_row = |row: &str, at_ms: i64, b: &Balances| {
        format!("{row},{},{at_ms},,,,,,{},{}\n", rfc3339(at_ms), b.available, b.held)
    };
    let mut out = format!("{STATEMENT_HEADER}\n");
    out.push_str(&balances_row("opening", statement.period.from_ms(), &statement.opening));
    for line in &statement.lines {
        let e = &line.entry;
        let account = match e.bucket {
            Bucket::Available => "available",
            Bucket::Held => "held",
        };
        let sign = if e.arrives { "" } else { "-" };
        let change =
            if e.amount == Amount::ZERO { "0".to_owned() } else { format!("{sign}{}", e.amount) };
        out.push_str(&format!(
            "entry,{},{},{},{},{},{account},{change},{},{}\n",
            rfc3339(e.at_ms),
            e.at_ms,
            e.journal_id,
            e.kind,
            e.reference,
            line.after.available,
            line.after.held
        ));
    }
    out.push_str(&balances_row("closing", statement.period.to_ms(), &statement.closing));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_and_instants_round_trip_and_bad_ones_are_refused() {
        assert_eq!(instant("1970-01-01").unwrap(), 0);
        assert_eq!(instant("2026-12-01").unwrap(), 1_796_083_200_000);
        assert_eq!(instant("2000-03-01").unwrap(), 951_868_800_000);
        assert_eq!(instant("1796083200123").unwrap(), 1_796_083_200_123);
        assert_eq!(rfc3339(1_796_083_200_123), "2026-12-01T00:00:00.123Z");
        assert_eq!(rfc3339(951_868_799_999), "2000-02-29T23:59:59.999Z");
        for bad in ["2026-13-01", "2026-12", "yesterday", "2026-12-01T00:00"] {
            assert!(instant(bad).is_err(), "{bad}");
        }
    }
}
