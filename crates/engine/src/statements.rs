//! A merchant's statement for a period, for finance: every ledger entry of its available and held accounts in one asset, with the balances before, after each entry, and at the end.

use payoutd_domain::{Amount, AssetCode, Bucket, MerchantId};

use crate::operator_view::{MerchantEntry, OperatorViewStore};
use crate::store::StoreError;

/// Entries one store read returns at most.
pub const ENTRIES_PER_READ_MAX: u32 = 5_000;
/// Lines one statement holds at most: a longer period is asked for in parts.
pub const STATEMENT_LINES_MAX: usize = 100_000;

/// `[from_ms, to_ms)` on the database's clock, as journals are stamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    from_ms: i64,
    to_ms: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum StatementError {
    #[error("the period ends ({to_ms}) before it starts ({from_ms})")]
    EmptyPeriod { from_ms: i64, to_ms: i64 },
    #[error("more than {STATEMENT_LINES_MAX} entries in the period: ask for a shorter one")]
    TooManyLines,
    #[error("the ledger's entries for the merchant do not add up: {0}")]
    Unbalanced(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Period {
    pub fn new(from_ms: i64, to_ms: i64) -> Result<Period, StatementError> {
        if to_ms <= from_ms {
            return Err(StatementError::EmptyPeriod { from_ms, to_ms });
        }
        Ok(Period { from_ms, to_ms })
    }

    pub fn from_ms(&self) -> i64 {
        self.from_ms
    }

    pub fn to_ms(&self) -> i64 {
        self.to_ms
    }
}

/// The merchant's two balances in one asset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Balances {
    pub available: Amount,
    pub held: Amount,
}

/// One entry of the period with the balances after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementLine {
    pub entry: MerchantEntry,
    pub after: Balances,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub period: Period,
    pub opening: Balances,
    pub lines: Vec<StatementLine>,
    pub closing: Balances,
}

impl Balances {
    /// The balances once `entry` is applied; `None` when it would take an account below zero or
    /// past 256 bits (the ledger refuses both, so a statement that meets one reads a broken ledger).
    fn after(self, entry: &MerchantEntry) -> Option<Balances> {
        let mut next = self;
        let bucket = match entry.bucket {
            Bucket::Available => &mut next.available,
            Bucket::Held => &mut next.held,
        };
        *bucket = if entry.arrives {
            bucket.checked_add(entry.amount)?
        } else {
            bucket.checked_sub(entry.amount)?
        };
        Some(next)
    }
}

/// Reads every entry of the merchant's accounts in `asset`, in ledger order: those stamped before
/// the period make the opening balances, those within it are the lines, later ones are left out.
pub async fn statement(
    views: &dyn OperatorViewStore,
    merchant: &MerchantId,
    asset: &AssetCode,
    period: Period,
) -> Result<Statement, StatementError> {
    let mut statement = Statement {
        period,
        opening: Balances::default(),
        lines: Vec::new(),
        closing: Balances::default(),
    };
    let mut within = Vec::new();
    let mut after_entry = 0;
    loop {
        let page =
            views.merchant_entries(merchant, asset, after_entry, ENTRIES_PER_READ_MAX).await?;
        let Some(last) = page.last() else { break };
        after_entry = last.entry_id;
        for entry in page {
            if entry.at_ms < period.from_ms {
                statement.opening =
                    statement.opening.after(&entry).ok_or_else(|| unbalanced(&entry))?;
            } else if entry.at_ms < period.to_ms {
                if within.len() >= STATEMENT_LINES_MAX {
                    return Err(StatementError::TooManyLines);
                }
                within.push(entry);
            }
        }
    }
    // The lines in ledger order from the opening (every entry before the period is in it,
    // whatever its place in the ledger).
    statement.closing = statement.opening;
    for entry in within {
        let after = statement.closing.after(&entry).ok_or_else(|| unbalanced(&entry))?;
        statement.closing = after;
        statement.lines.push(StatementLine { entry, after });
    }
    Ok(statement)
}

fn unbalanced(entry: &MerchantEntry) -> StatementError {
    StatementError::Unbalanced(format!("entry {} of journal {}", entry.entry_id, entry.journal_id))
}
