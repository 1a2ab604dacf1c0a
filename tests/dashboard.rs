//! The chart's Grafana dashboard (issue 19): valid JSON Grafana can provision, every panel on
//! the `${datasource}` variable, and every PromQL query names only series the operator
//! exports (read from `Metrics::render`, so a renamed or dropped metric fails here, not on a
//! blank panel).

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use redlock_test_support::helm_chart::tool;
use redlock_test_support::promql::{exported_series, metric_names};

const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/charts/redlock-operator/dashboards/redlock-operator.json"
);

fn dashboard() -> Value {
    let text = std::fs::read_to_string(Path::new(DASHBOARD)).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"))
}

/// Every panel, rows' nested panels included.
fn panels(dash: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    out
}

fn templating(dash: &Value) -> &Vec<Value> {
    dash["templating"]["list"].as_array().unwrap()
}

/// Every PromQL expression of the dashboard with where it is: panel targets and query
/// variables (whose query is a string or, since Grafana 10, an object with a `query` string).
fn queries(dash: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in panels(dash) {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap_or_default();
            out.push((format!("panel {:?} {}", p["title"], t["refId"]), expr.to_owned()));
        }
    }
    for v in templating(dash).iter().filter(|v| v["type"] == "query") {
        let q = &v["query"];
        let expr = q.as_str().or_else(|| q["query"].as_str()).unwrap_or_default();
        out.push((format!("variable {}", v["name"]), expr.to_owned()));
    }
    out
}

#[test]
fn dashboard_is_valid_and_every_panel_uses_the_datasource_variable() {
    let dash = dashboard();
    assert_eq!(dash["uid"], "redlock-operator");
    assert!(dash["title"].is_string());
    assert!(dash["schemaVersion"].as_u64().unwrap() >= 36, "schemaVersion");
    // Provisioned dashboards carry no id of their own and no import-time inputs.
    assert!(dash["id"].is_null());
    assert!(
        dash.get("__inputs").is_none(),
        "__inputs only work in the import UI"
    );

    let vars = templating(&dash);
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no template variable {name}"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    for name in ["namespace", "cluster"] {
        assert_eq!(var(name)["type"], "query", "{name}");
        assert_eq!(var(name)["datasource"]["uid"], "${datasource}", "{name}");
    }

    let all = panels(&dash);
    assert!(all.len() >= 10, "only {} panels", all.len());
    let mut ids = BTreeSet::new();
    for p in &all {
        let title = &p["title"];
        let id = p["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("panel {title} has no id"));
        assert!(ids.insert(id), "panel id {id} used twice ({title})");
        let g = &p["gridPos"];
        for k in ["h", "w", "x", "y"] {
            assert!(g[k].is_u64(), "panel {title}: gridPos.{k}");
        }
        assert!(
            g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24,
            "panel {title} is wider than the grid"
        );
        assert_eq!(p["datasource"]["type"], "prometheus", "panel {title}");
        assert_eq!(p["datasource"]["uid"], "${datasource}", "panel {title}");
        if p["type"] == "row" {
            continue;
        }
        assert!(
            p["description"].as_str().is_some_and(|d| !d.is_empty()),
            "panel {title} has no description"
        );
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("panel {title} has no targets"));
        assert!(!targets.is_empty(), "panel {title} has no targets");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert!(
                refs.insert(t["refId"].as_str().unwrap()),
                "panel {title}: refId twice"
            );
            assert_eq!(t["datasource"]["uid"], "${datasource}", "panel {title} target");
            assert!(
                t["expr"].as_str().is_some_and(|e| !e.trim().is_empty()),
                "panel {title}: empty expr"
            );
        }
    }
}

#[test]
fn every_query_names_only_metrics_the_operator_exports() {
    let dash = dashboard();
    let exported = exported_series();
    let mut unknown = Vec::new();
    for (place, expr) in queries(&dash) {
        let names = metric_names(&expr);
        assert!(!names.is_empty(), "{place} names no redlock_ metric: {expr}");
        for name in names {
            if !exported.contains_key(&name) {
                unknown.push(format!("{place}: {name}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "the dashboard queries series the operator does not export:\n  {}\nexported: {:?}",
        unknown.join("\n  "),
        exported.keys().collect::<Vec<_>>()
    );
}

#[test]
fn every_exported_metric_is_on_the_dashboard() {
    let dash = dashboard();
    let shown: BTreeSet<String> = queries(&dash).iter().flat_map(|(_, e)| metric_names(e)).collect();
    let exported = exported_series();
    let families: BTreeSet<&String> = exported.values().collect();
    let missing: Vec<&&String> = families
        .iter()
        .filter(|f| !exported.iter().any(|(s, fam)| fam == **f && shown.contains(s)))
        .collect();
    assert!(
        missing.is_empty(),
        "exported but on no panel of the dashboard: {missing:?}"
    );
}

#[test]
fn metric_names_are_found_in_promql() {
    let expr = r#"histogram_quantile(0.99, sum by (le) (rate(redlock_reconcile_duration_seconds_bucket{namespace=~"$namespace"}[$__rate_interval])))
- on (namespace) max(redlock_cluster_quorum) > 0"#;
    assert_eq!(
        metric_names(expr).into_iter().collect::<Vec<_>>(),
        [
            "redlock_cluster_quorum",
            "redlock_reconcile_duration_seconds_bucket"
        ]
    );
    assert!(metric_names("label_values(redlock_members, namespace)").contains("redlock_members"));
    assert_eq!(metric_names("sum(up) + $redlock_var").len(), 1);
}

/// Each panel query parses as PromQL: promtool (`make promtool`) checks them as recording
/// rules, with Grafana's variables replaced by what Grafana would put there.
#[test]
fn every_panel_query_is_valid_promql() {
    let promtool = tool("promtool", "promtool");
    let dash = dashboard();
    let rules: Vec<Value> = queries(&dash)
        .into_iter()
        .filter(|(place, _)| place.starts_with("panel"))
        .enumerate()
        .map(|(i, (_, expr))| {
            let expr = expr
                .replace("$__rate_interval", "1m")
                .replace("$namespace", ".*")
                .replace("$cluster", ".*");
            serde_json::json!({"record": format!("dashboard:query_{i}"), "expr": expr})
        })
        .collect();
    let n = rules.len();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard-queries.json");
    let doc = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]});
    std::fs::write(&file, doc.to_string()).unwrap();
    let out = std::process::Command::new(&promtool)
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "promtool check rules:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!("{n} rules found")), "{stdout}");
}
