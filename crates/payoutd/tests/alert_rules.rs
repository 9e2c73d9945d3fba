//! The alert rules shipped for Prometheus (ops/prometheus/alerts.yml) cover every incident kind payoutd can open: a new kind without an alert fails here.

use payoutd_domain::IncidentKind;

#[test]
fn every_incident_kind_has_an_alert_with_its_runbook() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ops/prometheus/alerts.yml");
    let rules = std::fs::read_to_string(&path).unwrap();
    for kind in IncidentKind::ALL {
        let kind = kind.as_str();
        assert!(
            rules.contains(&format!("payoutd_incidents_open{{kind=\"{kind}\"}}")),
            "no alert watches open {kind} incidents in {}",
            path.display()
        );
        assert!(rules.contains(&format!("docs/operating.md#{kind}")), "no runbook link for {kind}");
    }
}
