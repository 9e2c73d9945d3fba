//! An open incident found by what its subject begins with, on both stores: the one open incident about a thing (a hot wallet whose records are behind its chain), whatever else its subject says, and never one about another thing whose name merely matches a pattern.

use payoutd_domain::IncidentKind;
use payoutd_engine::pipeline_store::{IncidentSubject, NewIncident};
use payoutd_testkit::db::TestDb;

fn behind(detail: &str) -> NewIncident {
    NewIncident::new(
        IncidentKind::RecordsBehindChain,
        IncidentSubject::default(),
        detail.to_owned(),
        1_000,
    )
}

async fn an_open_incident_is_found_by_its_subjects_prefix_and_no_other(db: TestDb) {
    let store = db.pipeline();
    let kind = IncidentKind::RecordsBehindChain;
    assert_eq!(store.open_incident_about(kind, "hw_1_ab:").await.unwrap(), None);
    let first = behind("wallet ab behind");
    assert!(store.open_incident_once(&first, "hw_1_ab:4:6").await.unwrap());
    // A `_` in a prefix is a character, not a pattern: hw_1_abc is not hw_1_ab.
    let other = behind("wallet abc behind");
    assert!(store.open_incident_once(&other, "hw_1_abc:9:10").await.unwrap());
    assert_eq!(store.open_incident_about(kind, "hw_1_ab:").await.unwrap(), Some(first.id.clone()));
    assert_eq!(store.open_incident_about(kind, "hw%1%ab:").await.unwrap(), None);
    assert_eq!(
        store.open_incident_about(IncidentKind::UnmatchedTransfer, "hw_1_ab:").await.unwrap(),
        None,
        "another kind"
    );
    assert!(store.resolve_incident(&first.id, "caught up", 2_000).await.unwrap());
    assert_eq!(store.open_incident_about(kind, "hw_1_ab:").await.unwrap(), None, "resolved");
    assert_eq!(store.open_incident_about(kind, "hw_1_abc:").await.unwrap(), Some(other.id));
}

payoutd_testkit::both_stores!(an_open_incident_is_found_by_its_subjects_prefix_and_no_other);
