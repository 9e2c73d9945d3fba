//! Second payments whose books wait for finality are read in turn, on both stores: each pass resumes after the last one, so incidents that never become final cannot keep newer ones waiting.

use payoutd_domain::IncidentKind;
use payoutd_engine::pipeline_store::{BooksCursor, IncidentSubject, NewIncident};
use payoutd_testkit::db::TestDb;

fn awaiting(detail: &str, at_ms: i64) -> NewIncident {
    let subject = IncidentSubject { merchant_id: None, payout_id: None, attempt_id: None };
    NewIncident::new(IncidentKind::DuplicateTransfer, subject, detail.to_owned(), at_ms)
}

/// Five incidents await their books (two opened in the same millisecond); a pass reads two. Passes
/// go 2, 2, 1, then start again: every incident is read within three passes whatever the oldest do.
/// (Before, every pass read the oldest two again, and the other three were never judged.)
async fn incidents_awaiting_books_are_read_in_turn_past_the_pass_limit(db: TestDb) {
    let store = db.pipeline();
    let mut opened = Vec::new();
    for (i, at_ms) in [1_000, 2_000, 2_000, 3_000, 4_000].into_iter().enumerate() {
        let incident = awaiting(&format!("second transfer {i}"), at_ms);
        assert!(store.open_incident_awaiting_books(&incident, &format!("0xdup{i}")).await.unwrap());
        opened.push(incident.id.to_string());
    }
    let mut cursor = BooksCursor::start();
    let mut seen = Vec::new();
    for expected in [2, 2, 1] {
        let read = store.incidents_awaiting_books(&cursor, 2).await.unwrap();
        assert_eq!(read.len(), expected, "after {cursor:?}");
        seen.extend(read.iter().map(|a| a.incident.id.to_string()));
        cursor = BooksCursor::after_pass(&read, 2);
    }
    assert_eq!(cursor, BooksCursor::start(), "a pass that reached the end starts again");
    let mut all = opened.clone();
    all.sort();
    seen.sort();
    assert_eq!(seen, all, "each incident read exactly once in one turn");
    let again = store.incidents_awaiting_books(&cursor, 2).await.unwrap();
    assert_eq!(
        again[0].incident.detail, "second transfer 0",
        "the next turn starts with the oldest"
    );
}

payoutd_testkit::both_stores!(incidents_awaiting_books_are_read_in_turn_past_the_pass_limit);
