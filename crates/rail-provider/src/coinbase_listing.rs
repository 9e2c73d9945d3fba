//! Coinbase CDP's transfer listing read back for reconciliation: time windows from a stored cursor, narrowed while a backlog is caught up and widened again, so a pass reads a bounded number of pages.

use super::{CdpList, CdpTransfer, CoinbaseApi, WINDOW_MS_MIN, created_ms, iso_of, read};
use crate::api::CallError;

impl CoinbaseApi {
    /// The account's transfers created within `window` (from, until; our clock, the skew already
    /// allowed) that match `narrow` (extra list filters), oldest first, read whole or not at all:
    /// an error when the pages allowed did not reach the end, since a partial list proves no
    /// absence.
    pub(super) async fn created_within(
        &self,
        window: (i64, i64),
        narrow: &[(&str, String)],
    ) -> Result<Vec<CdpTransfer>, CallError> {
        let (from_ms, until_ms) = window;
        let pages = self.lookup_pages_max;
        let listed = self.list_window(from_ms, Some(until_ms), narrow, pages).await?;
        if !listed.complete {
            return Err(CallError::Ambiguous(format!(
                "{pages} pages of Coinbase transfers from {} to {} did not reach the end; read again later",
                iso_of(from_ms),
                iso_of(until_ms)
            )));
        }
        let mut all = listed.transfers;
        all.sort_by_key(judged_key);
        Ok(all)
    }

    /// The account's transfers created from `from_ms` (and before `to_ms`), in CDP's order, read
    /// with at most `pages_max` pages. The filters are asked in whole seconds around the window (a
    /// superset, however CDP rounds); only what lies past its end is dropped here, so a lookup
    /// still sees a transfer whose creation time does not parse.
    pub(super) async fn list_window(
        &self,
        from_ms: i64,
        to_ms: Option<i64>,
        narrow: &[(&str, String)],
        pages_max: u32,
    ) -> Result<Listed, CallError> {
        let mut listed = Listed { transfers: Vec::new(), complete: false, pages: 0 };
        let mut token: Option<String> = None;
        while listed.pages < pages_max {
            let mut query = vec![
                ("sourceAccountId", self.config.account_id.clone()),
                ("createdAfter", iso_of(from_ms)),
                ("pageSize", self.transfers_per_page.to_string()),
            ];
            if let Some(to) = to_ms {
                // Inclusive, and `iso_of` drops the milliseconds: the whole second holding `to - 1`.
                query.push(("createdBefore", iso_of(to + 999)));
            }
            query.extend(narrow.iter().cloned());
            if let Some(t) = &token {
                query.push(("pageToken", t.clone()));
            }
            let sent =
                self.request(reqwest::Method::GET, "/v2/transfers")?.query(&query).send().await;
            let page: CdpList = read(sent).await?;
            listed.pages += 1;
            listed.transfers.extend(
                page.transfers.into_iter().filter(|t| to_ms.is_none_or(|to| created_ms(t) < to)),
            );
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(next) => token = Some(next),
                None => {
                    listed.complete = true;
                    break;
                }
            }
        }
        Ok(listed)
    }

    /// One time window from `cursor`, read with at most `pages_max` pages: the transfers read
    /// after the cursor (judged even when the window was not read whole: each is what CDP
    /// holds) and where the cursor goes.
    pub(super) async fn read_window(
        &self,
        cursor: &Cursor,
        pages_max: u32,
    ) -> Result<WindowRead, CallError> {
        let from = cursor.judged.0;
        let to = cursor.catch_up.map(|c| c.window_end_ms(from));
        let listed = self.list_window(from, to, &[], pages_max).await?;
        let newest_ms = listed.transfers.iter().map(created_ms).max();
        let mut fresh: Vec<CdpTransfer> =
            listed.transfers.into_iter().filter(|t| judged_key(t) > cursor.judged).collect();
        fresh.sort_by_key(judged_key);
        let next = match (cursor.catch_up, to, listed.complete) {
            // Caught up: the cursor moves to the newest transfer judged.
            (None, _, true) => Cursor {
                judged: fresh.last().map_or_else(|| cursor.judged.clone(), judged_key),
                catch_up: None,
            },
            // Read whole: everything created before the window's end is judged. A window read
            // with half the pages or fewer is doubled, so a dense stretch past does not slow the rest.
            (Some(c), Some(to), true) => {
                let span_ms = if listed.pages * 2 <= self.pages_per_call_max {
                    c.span_ms.saturating_mul(2)
                } else {
                    c.span_ms
                };
                Cursor {
                    judged: (to, String::new()),
                    catch_up: (to < c.horizon_ms).then_some(CatchUp { span_ms, ..c }),
                }
            }
            (None, _, false) => Cursor {
                judged: cursor.judged.clone(),
                catch_up: Some(CatchUp::up_to(from, newest_ms, pages_max)?),
            },
            // Too full for the pages a whole pass has: halved. Read with fewer (after other
            // windows this pass), it is read again whole next pass.
            (Some(c), _, false) if pages_max == self.pages_per_call_max => {
                Cursor { judged: cursor.judged.clone(), catch_up: Some(c.halved(from, pages_max)?) }
            }
            (Some(_), _, false) | (Some(_), None, true) => cursor.clone(),
        };
        Ok(WindowRead { fresh, pages: listed.pages, complete: listed.complete, next })
    }
}

/// One listing of a time window.
pub(super) struct Listed {
    pub(super) transfers: Vec<CdpTransfer>,
    /// Its last page was read: nothing else in the window exists (yet).
    pub(super) complete: bool,
    pub(super) pages: u32,
}

/// What one window of a reconciliation pass gave.
pub(super) struct WindowRead {
    pub(super) fresh: Vec<CdpTransfer>,
    pub(super) pages: u32,
    pub(super) complete: bool,
    pub(super) next: Cursor,
}

/// Where reconciliation of the account stands: every transfer at or before `judged` (creation
/// time in ms, then transfer id) is judged. Stored as `<ms>|<id>`, or, while catching up,
/// `<ms>|<id>|<span ms>|<horizon ms>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Cursor {
    pub(super) judged: (i64, String),
    pub(super) catch_up: Option<CatchUp>,
}

/// A backlog too long for one pass, read in windows of `span_ms` up to `horizon_ms`: the newest
/// creation time CDP listed when the backlog was found, so no window ends in CDP's future (a
/// transfer created later would land behind the cursor). Past the horizon, open reads again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CatchUp {
    pub(super) span_ms: i64,
    pub(super) horizon_ms: i64,
}

impl CatchUp {
    /// Catching up from `from_ms` to the newest creation time a too-long open read listed.
    pub(super) fn up_to(
        from_ms: i64,
        newest_ms: Option<i64>,
        pages: u32,
    ) -> Result<CatchUp, CallError> {
        match newest_ms.filter(|newest| *newest > from_ms) {
            Some(horizon_ms) => {
                Ok(CatchUp { span_ms: ((horizon_ms - from_ms) / 2).max(WINDOW_MS_MIN), horizon_ms })
            }
            None => Err(burst(from_ms, pages)),
        }
    }

    pub(super) fn window_end_ms(self, from_ms: i64) -> i64 {
        from_ms.saturating_add(self.span_ms).min(self.horizon_ms)
    }

    /// Half the span; a window of the narrowest span that is still too full cannot be narrowed.
    pub(super) fn halved(self, from_ms: i64, pages: u32) -> Result<CatchUp, CallError> {
        if self.window_end_ms(from_ms) - from_ms <= WINDOW_MS_MIN {
            return Err(burst(from_ms, pages));
        }
        Ok(CatchUp { span_ms: (self.span_ms / 2).max(WINDOW_MS_MIN), ..self })
    }
}

/// More transfers within one second than a pass reads: no window CDP's filters can name fits.
pub(super) fn burst(from_ms: i64, pages: u32) -> CallError {
    CallError::Ambiguous(format!(
        "{pages} pages of Coinbase transfers created within one second from {} did not reach the end: no time window is narrow enough; raise the pages per pass",
        iso_of(from_ms)
    ))
}

impl Cursor {
    pub(super) fn parse(text: &str) -> Option<Cursor> {
        let parts: Vec<&str> = text.split('|').collect();
        let judged = (parts.first()?.parse().ok()?, (*parts.get(1)?).to_owned());
        let catch_up = match parts.len() {
            2 => None,
            4 => Some(CatchUp {
                span_ms: parts[2].parse().ok().filter(|s| *s > 0)?,
                horizon_ms: parts[3].parse().ok()?,
            }),
            _ => return None,
        };
        Some(Cursor { judged, catch_up })
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}|{}", self.judged.0, self.judged.1)?;
        match self.catch_up {
            Some(c) => write!(f, "|{}|{}", c.span_ms, c.horizon_ms),
            None => Ok(()),
        }
    }
}

/// The order reconciliation judges transfers in: creation time, then id.
pub(super) fn judged_key(t: &CdpTransfer) -> (i64, String) {
    (created_ms(t), t.transfer_id.clone())
}
