//! The chart's alerting rules (issue 19): `templates/prometheusrule.yaml`, rendered with
//! `alerts.enabled=true`, passes `promtool check rules` and the unit tests in
//! `tests/alerts/*.yaml` (`promtool test rules`); every metric an alert reads is one the
//! operator exports; every alert has a runbook section in docs/runbooks.md, a test where it fires
//! and one where it must not; and nothing is rendered by default.
//!
//! Needs `target/dev/bin/helm` (`make controlplane`) and `target/dev/bin/promtool`
//! (`make promtool`, tests/alerts/build.sh).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml::{Mapping, Value};

use redlock_test_support::helm_chart::{self, helm, tool};
use redlock_test_support::markdown;
use redlock_test_support::promql::{exported_series, metric_names};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Release and namespace of the rendering the unit tests are written against (the README's
/// install): the operator's job is then "redlock-operator-metrics".
const RELEASE: &str = "redlock-operator";
const NAMESPACE: &str = "redlock-system";
/// Where each alert's `runbook_url` points by default: its heading in docs/runbooks.md.
const RUNBOOKS_URL: &str = "https://github.com/redlock-dev/redlock-operator/blob/main/docs/runbooks.md";

fn template(sets: &[&str]) -> Result<Vec<Value>, String> {
    helm_chart::template(RELEASE, NAMESPACE, sets)
}

fn prometheus_rules(docs: &[Value]) -> Vec<&Value> {
    docs.iter().filter(|d| d["kind"] == "PrometheusRule").collect()
}

/// The one PrometheusRule of a rendering with `sets` (alerts.enabled=true added).
fn rendered_rule(sets: &[&str]) -> Value {
    let mut all = vec!["alerts.enabled=true"];
    all.extend_from_slice(sets);
    let docs = template(&all).unwrap();
    let rules = prometheus_rules(&docs);
    assert_eq!(rules.len(), 1, "expected one PrometheusRule");
    rules[0].clone()
}

/// Every alerting rule of a PrometheusRule.
fn alerts(rule: &Value) -> Vec<&Value> {
    rule["spec"]["groups"]
        .as_sequence()
        .expect("spec.groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("group rules"))
        .filter(|r| r["alert"].is_string())
        .collect()
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The unit-test files, tests/alerts/*.yaml.
fn unit_test_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("tests/alerts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no tests/alerts/*.yaml");
    files
}

#[test]
fn alerts_are_not_rendered_by_default() {
    let docs = template(&[]).unwrap();
    assert!(
        prometheus_rules(&docs).is_empty(),
        "the PrometheusRule is opt-in (alerts.enabled)"
    );
}

#[test]
fn rules_pass_promtool_check_and_unit_tests() {
    let promtool = tool("promtool", "promtool");
    let rule = rendered_rule(&[]);
    let dir = tempfile::tempdir().unwrap();
    let rules_file = dir.path().join("rules.yaml");
    let mut groups = Mapping::new();
    groups.insert("groups".into(), rule["spec"]["groups"].clone());
    std::fs::write(&rules_file, serde_yaml::to_string(&groups).unwrap()).unwrap();

    let (ok, out) = run(Command::new(&promtool).args(["check", "rules"]).arg(&rules_file));
    assert!(ok, "promtool check rules failed:\n{out}");

    // Each unit-test file, pointed at the rendered rules.
    let mut tests = Vec::new();
    for file in unit_test_files() {
        let mut doc: Value = serde_yaml::from_str(&std::fs::read_to_string(&file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        doc["rule_files"] = Value::Sequence(vec![rules_file.to_str().unwrap().into()]);
        let copy = dir
            .path()
            .join(format!("test-{}", file.file_name().unwrap().to_str().unwrap()));
        std::fs::write(&copy, serde_yaml::to_string(&doc).unwrap()).unwrap();
        tests.push(copy);
    }
    let (ok, out) = run(Command::new(&promtool).args(["test", "rules"]).args(&tests));
    assert!(ok, "promtool test rules failed:\n{out}");
}

/// Every alert is unit-tested both ways: some case expects it to fire, some case checks it
/// does not (an `alert_rule_test` without exp_alerts).
#[test]
fn every_alert_has_a_firing_and_a_quiet_case() {
    let rule = rendered_rule(&[]);
    let names: BTreeSet<String> = alerts(&rule)
        .iter()
        .map(|a| a["alert"].as_str().unwrap().to_owned())
        .collect();
    let (mut fires, mut quiet) = (BTreeSet::new(), BTreeSet::new());
    for file in unit_test_files() {
        let doc: Value = serde_yaml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        for case in doc["tests"].as_sequence().unwrap() {
            for t in case["alert_rule_test"].as_sequence().into_iter().flatten() {
                let name = t["alertname"].as_str().unwrap().to_owned();
                let expected = t["exp_alerts"].as_sequence().map_or(0, Vec::len);
                if expected > 0 { &mut fires } else { &mut quiet }.insert(name);
            }
        }
    }
    let unfired: Vec<_> = names.difference(&fires).collect();
    let unquiet: Vec<_> = names.difference(&quiet).collect();
    assert!(
        unfired.is_empty(),
        "alerts never expected to fire in tests/alerts: {unfired:?}"
    );
    assert!(
        unquiet.is_empty(),
        "alerts never checked quiet in tests/alerts: {unquiet:?}"
    );
    let unknown: Vec<_> = fires.union(&quiet).filter(|n| !names.contains(*n)).collect();
    assert!(
        unknown.is_empty(),
        "tests/alerts name alerts the chart lacks: {unknown:?}"
    );
}

#[test]
fn alerts_read_only_metrics_the_operator_exports() {
    let exported = exported_series();
    assert!(
        exported.contains_key("redlock_reconciles_total"),
        "unexpected exposition: {exported:?}"
    );
    let rule = rendered_rule(&[]);
    let mut missing = Vec::new();
    for alert in alerts(&rule) {
        let name = alert["alert"].as_str().unwrap();
        let used = metric_names(alert["expr"].as_str().unwrap());
        assert!(!used.is_empty(), "{name} reads no metric");
        for m in used {
            // `up` is Prometheus's own, per scrape target.
            if m != "up" && !exported.contains_key(&m) {
                missing.push(format!("{name}: {m}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "alerts read metrics the operator does not export: {missing:?}\nexported: {exported:?}"
    );
}

/// GitHub's anchor of a Markdown heading: lower case, spaces to '-', punctuation other than
/// '-' and '_' dropped.
#[test]
fn every_alert_links_its_runbook() {
    let runbooks = std::fs::read_to_string(Path::new(ROOT).join("docs/runbooks.md")).unwrap();
    let anchors = markdown::anchors(&runbooks);
    let rule = rendered_rule(&[]);
    for alert in alerts(&rule) {
        let name = alert["alert"].as_str().unwrap();
        let a = &alert["annotations"];
        assert!(a["summary"].is_string(), "{name}: summary");
        assert!(a["description"].is_string(), "{name}: description");
        assert!(alert["labels"]["severity"].is_string(), "{name}: severity");
        let url = a["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: runbook_url"));
        let expected = format!("{RUNBOOKS_URL}#{}", name.to_lowercase());
        assert_eq!(url, expected, "{name}: runbook_url");
        assert!(
            anchors.contains(&name.to_lowercase()),
            "docs/runbooks.md has no section \"{name}\" (runbook of {name})"
        );
        if let Err(e) = markdown::check_repo_url(Path::new(ROOT), url) {
            panic!("{name}: {e}");
        }
    }
}

#[test]
fn alert_values_are_applied() {
    let rule = rendered_rule(&[
        "alerts.labels.release=kube-prometheus-stack",
        "alerts.alertLabels.team=platform",
        "alerts.runbookBaseUrl=https://wiki.example.com/redlock/",
        "alerts.operatorJob=redlock",
        "alerts.rules.quorumLost.severity=page",
        "alerts.rules.quorumLost.for=30s",
        "alerts.rules.memberReleaseOverdue.overdueSeconds=600",
        "alerts.rules.ttlPolicyViolated.enabled=false",
    ]);
    assert_eq!(rule["metadata"]["namespace"], NAMESPACE);
    assert_eq!(rule["metadata"]["labels"]["release"], "kube-prometheus-stack");
    let all = alerts(&rule);
    let by_name = |n: &str| *all.iter().find(|a| a["alert"] == n).unwrap();
    assert!(all.iter().all(|a| a["labels"]["team"] == "platform"));
    assert!(all.iter().all(|a| {
        a["annotations"]["runbook_url"]
            .as_str()
            .unwrap()
            .starts_with("https://wiki.example.com/redlock#redlock")
    }));
    assert!(!all.iter().any(|a| a["alert"] == "RedlockTTLPolicyViolated"));
    let lost = by_name("RedlockQuorumLost");
    assert_eq!(lost["labels"]["severity"], "page");
    assert_eq!(lost["for"], "30s");
    let overdue = by_name("RedlockMemberReleaseOverdue");
    assert!(
        overdue["expr"].as_str().unwrap().ends_with("> 600"),
        "{overdue:?}"
    );
    let down = by_name("RedlockOperatorDown")["expr"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        down.contains(r#"up{job="redlock", namespace="redlock-system"}"#),
        "{down}"
    );
}

#[test]
fn bad_alert_values_are_refused() {
    for bad in [
        "alerts.enabled=yes",
        "alerts.rules.quorumLost.for=2 minutes",
        "alerts.rules.quorumLost.for=1.5m",
        "alerts.rules.quorumLost.page=true",
        "alerts.rules.unknownAlert.enabled=true",
        "alerts.rules.memberReleaseOverdue.overdueSeconds=-1",
        "alerts.runbookBaseUrl=README.md#x",
        "alerts.operatorJob=a\"b",
        "alerts.labels.x=null",
    ] {
        let err = template(&["alerts.enabled=true", bad]);
        assert!(err.is_err(), "accepted {bad}");
    }
}

#[test]
fn lint_strict_is_clean_with_alerts() {
    let mut cmd = helm();
    cmd.args(["lint", "--strict", "--set", "alerts.enabled=true"])
        .arg(Path::new(ROOT).join("charts/redlock-operator"));
    let (ok, out) = run(&mut cmd);
    assert!(ok, "helm lint --strict with alerts:\n{out}");
}

/// The per-cluster alerts group by the metrics' own `namespace` label; a ServiceMonitor
/// without honorLabels would rename it to exported_namespace (the target's namespace wins).
#[test]
fn service_monitor_keeps_the_metrics_namespace_label() {
    let docs = template(&["metrics.serviceMonitor.enabled=true", "alerts.enabled=true"]).unwrap();
    let monitor = docs
        .iter()
        .find(|d| d["kind"] == "ServiceMonitor")
        .expect("ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["honorLabels"], true);
    // The operator alerts' default job is the name of the Service the monitor scrapes.
    let service = docs
        .iter()
        .find(|d| d["kind"] == "Service" && d["metadata"]["name"].as_str().unwrap().ends_with("-metrics"))
        .expect("metrics Service");
    let job = service["metadata"]["name"].as_str().unwrap();
    assert_eq!(job, "redlock-operator-metrics");
    let rule = prometheus_rules(&docs)[0].clone();
    let down = alerts(&rule)
        .into_iter()
        .find(|a| a["alert"] == "RedlockOperatorDown")
        .unwrap()["expr"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        down.contains(&format!("up{{job=\"{job}\", namespace=\"{NAMESPACE}\"}}")),
        "{down}"
    );
}
