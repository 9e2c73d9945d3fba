//! The Grafana dashboard shipped in ops/grafana: every query parses as PromQL (promtool) and reads only metrics payoutd's code emits, and every panel says what it shows.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Suffixes Prometheus adds to a histogram's name.
const HISTOGRAM_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn dashboard() -> Value {
    let path = workspace().join("ops/grafana/payoutd.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Every panel that queries (rows excluded), with its queries.
fn panels(dashboard: &Value) -> Vec<(String, Vec<String>)> {
    let all = dashboard["panels"].as_array().unwrap();
    all.iter()
        .filter(|p| p["type"] != "row")
        .map(|p| {
            let title = p["title"].as_str().unwrap_or_default().to_owned();
            let targets = p["targets"].as_array().map(Vec::as_slice).unwrap_or_default();
            let exprs = targets.iter().map(|t| t["expr"].as_str().unwrap().to_owned()).collect();
            (title, exprs)
        })
        .collect()
}

/// The `payoutd_*` names a query reads, a histogram's series named by the histogram.
fn metrics_in(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("payoutd_") {
        let tail = &rest[at..];
        let end =
            tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        let name = &tail[..end];
        let base = HISTOGRAM_SUFFIXES.iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
        names.insert(base.to_owned());
        rest = &tail[end..];
    }
    names
}

/// Every string literal naming a `payoutd_*` metric in the shipped crates' sources.
fn emitted() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut dirs = vec![workspace().join("crates")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.ends_with("tests") {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for quoted in text.split('"').skip(1).step_by(2) {
                    if quoted.starts_with("payoutd_")
                        && quoted.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                    {
                        names.insert(quoted.to_owned());
                    }
                }
            }
        }
    }
    names
}

#[test]
fn every_dashboard_query_reads_a_metric_payoutd_emits() {
    let emitted = emitted();
    let dashboard = dashboard();
    let panels = panels(&dashboard);
    assert!(panels.len() >= 12, "the dashboard has its panels: {}", panels.len());
    for (title, exprs) in &panels {
        assert!(!exprs.is_empty(), "panel {title:?} queries nothing");
        for expr in exprs {
            let read = metrics_in(expr);
            assert!(!read.is_empty(), "panel {title:?}: {expr} reads no payoutd metric");
            for name in read {
                assert!(
                    emitted.contains(&name),
                    "panel {title:?} reads {name}, which no code emits"
                );
            }
        }
    }
}

#[test]
fn every_dashboard_panel_says_what_it_shows_in_its_unit() {
    let dashboard = dashboard();
    assert_eq!(dashboard["uid"], "payoutd-overview");
    for panel in dashboard["panels"].as_array().unwrap().iter().filter(|p| p["type"] != "row") {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(!title.is_empty(), "a panel without a title: {panel}");
        let description = panel["description"].as_str().unwrap_or_default();
        assert!(description.len() > 20, "panel {title:?} does not say what it shows");
        assert!(
            panel["fieldConfig"]["defaults"]["unit"].is_string(),
            "panel {title:?} has no unit"
        );
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "panel {title:?}");
    }
}

/// The queries, as recording rules, load in Prometheus's own checker: a query Grafana would show
/// as an error fails here.
#[test]
fn every_dashboard_query_parses_as_promql() {
    let dashboard = dashboard();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, (_, exprs)) in panels(&dashboard).iter().enumerate() {
        for (j, expr) in exprs.iter().enumerate() {
            let quoted = serde_json::to_string(expr).unwrap();
            rules.push_str(&format!(
                "      - record: dashboard:panel_{i}_{j}\n        expr: {quoted}\n"
            ));
        }
    }
    let file = std::env::temp_dir().join(format!("payoutd-dashboard-{}.yml", std::process::id()));
    std::fs::write(&file, rules).unwrap();
    let out = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool is required (scripts/install-tools installs it)");
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "promtool refused a dashboard query: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
