//! A statement as text: the instants a person writes for its period (a day or milliseconds), RFC 3339 instants, and the CSV that the CLI prints and the API serves, with spreadsheet formulas defused.

use payoutd_domain::{Amount, Bucket};

use crate::statements::{Balances, Statement};

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;
/// The CSV's header: one opening row, one row per entry, one closing row.
pub const STATEMENT_CSV_HEADER: &str = "row,at,at_ms,journal_id,journal_kind,reference,account,change_base_units,available_base_units,held_base_units";
/// The first characters that make a spreadsheet read a cell as a formula (OWASP's CSV injection).
const FORMULA_STARTS: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is neither a day (YYYY-MM-DD, its first instant in UTC) nor milliseconds since the epoch"
)]
pub struct InstantError(String);

/// A day (`2026-12-01`, its first instant in UTC) or milliseconds since the Unix epoch.
pub fn parse_instant(text: &str) -> Result<i64, InstantError> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let bad = || InstantError(text.chars().take(64).collect());
    let parts: Vec<&str> = text.split('-').collect();
    let [year, month, day] = parts.as_slice() else { return Err(bad()) };
    let number = |part: &str, digits: usize| {
        (part.len() == digits && part.bytes().all(|b| b.is_ascii_digit()))
            .then(|| part.parse::<i64>().ok())
            .flatten()
    };
    let (Some(year), Some(month), Some(day)) = (number(year, 4), number(month, 2), number(day, 2))
    else {
        return Err(bad());
    };
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Err(bad());
    }
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
pub fn rfc3339(ms: i64) -> String {
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

/// A text cell as CSV holds it: one that a spreadsheet would run as a formula is prefixed with `'`,
/// and one holding a comma, quote or line break is quoted. Numbers are written as they are.
pub fn text_cell(text: &str) -> String {
    let defused =
        if text.starts_with(FORMULA_STARTS) { format!("'{text}") } else { text.to_owned() };
    if defused.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", defused.replace('"', "\"\""))
    } else {
        defused
    }
}

/// The account an entry moved, as the statement names it.
pub fn account_name(bucket: Bucket) -> &'static str {
    match bucket {
        Bucket::Available => "available",
        Bucket::Held => "held",
    }
}

/// An entry's signed change in base units: `-` for what left the account.
pub fn signed_change(arrives: bool, amount: Amount) -> String {
    if amount == Amount::ZERO || arrives { amount.to_string() } else { format!("-{amount}") }
}

/// The statement as CSV: the header, the opening row, one row per entry, the closing row.
pub fn statement_csv(statement: &Statement) -> String {
    let balances_row = |row: &str, at_ms: i64, b: &Balances| {
        format!("{row},{},{at_ms},,,,,,{},{}\n", rfc3339(at_ms), b.available, b.held)
    };
    let mut out = format!("{STATEMENT_CSV_HEADER}\n");
    out.push_str(&balances_row("opening", statement.period.from_ms(), &statement.opening));
    for line in &statement.lines {
        let e = &line.entry;
        out.push_str(&format!(
            "entry,{},{},{},{},{},{},{},{},{}\n",
            rfc3339(e.at_ms),
            e.at_ms,
            text_cell(&e.journal_id),
            text_cell(&e.kind),
            text_cell(&e.reference),
            account_name(e.bucket),
            signed_change(e.arrives, e.amount),
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
        assert_eq!(parse_instant("1970-01-01").unwrap(), 0);
        assert_eq!(parse_instant("2026-12-01").unwrap(), 1_796_083_200_000);
        assert_eq!(parse_instant("2000-03-01").unwrap(), 951_868_800_000);
        assert_eq!(parse_instant("1796083200123").unwrap(), 1_796_083_200_123);
        assert_eq!(rfc3339(1_796_083_200_123), "2026-12-01T00:00:00.123Z");
        assert_eq!(rfc3339(951_868_799_999), "2000-02-29T23:59:59.999Z");
        for bad in ["2026-13-01", "2026-12", "yesterday", "2026-12-01T00:00", "+2026-1-1", ""] {
            assert!(parse_instant(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cells_a_spreadsheet_would_run_are_defused_and_commas_quoted() {
        assert_eq!(text_cell("po_0192f0"), "po_0192f0");
        assert_eq!(text_cell("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        for formula in ["+1", "-1+2", "@SUM(A1)", "\tx"] {
            assert!(text_cell(formula).trim_start_matches('"').starts_with('\''), "{formula:?}");
        }
        assert_eq!(text_cell("a,b"), "\"a,b\"");
        assert_eq!(signed_change(false, Amount::from_u128(5)), "-5");
        assert_eq!(signed_change(false, Amount::ZERO), "0");
    }
}
