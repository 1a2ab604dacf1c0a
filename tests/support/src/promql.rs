//! PromQL as the chart's alerts and dashboard use it, checked against what the operator
//! exports (tests/alerts.rs, tests/dashboard.rs).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;
use redlock_operator::crd::{MemberState, MemberStatus, RedlockClusterStatus};
use redlock_operator::error::Error;
use redlock_operator::runtime::metrics::{EndedHold, Metrics};

/// The metric names a PromQL expression reads: identifiers outside strings, label matchers
/// and durations that start with `redlock_` (every operator metric does), and `up`. A Grafana
/// variable (`$redlock_x`) is not one.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut chars = expr.chars().peekable();
    let (mut braces, mut brackets) = (0, 0);
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' | '`' => {
                // A string literal (only inside matchers here); skip it, escapes included.
                while let Some(s) = chars.next() {
                    if s == '\\' {
                        chars.next();
                    } else if s == c {
                        break;
                    }
                }
            }
            '{' => braces += 1,
            '}' => braces -= 1,
            '[' => brackets += 1,
            ']' => brackets -= 1,
            '$' => {
                while chars
                    .peek()
                    .is_some_and(|n| n.is_ascii_alphanumeric() || *n == '_')
                {
                    chars.next();
                }
            }
            c if (c.is_ascii_alphabetic() || c == '_' || c == ':') => {
                let mut ident = String::from(c);
                while let Some(&n) = chars.peek() {
                    if n.is_ascii_alphanumeric() || n == '_' || n == ':' {
                        ident.push(n);
                        chars.next();
                    } else {
                        break;
                    }
                }
                if braces == 0 && brackets == 0 && (ident.starts_with("redlock_") || ident == "up") {
                    names.insert(ident);
                }
            }
            _ => {}
        }
    }
    names
}

/// The operator's metrics with a series in every family: an empty family renders nothing,
/// not even its `# TYPE` line.
fn metrics_with_every_family() -> Metrics {
    let m = Metrics::default();
    drop(m.reconcile_started());
    m.reconcile_failed(&Error::CrdNotInstalled);
    m.clock_offset(0.01, 0.002);
    m.clock_offset_limit(2.0);
    m.clock_steps(0.0);
    m.leading(true);
    let status = RedlockClusterStatus {
        members: vec![MemberStatus::new("locks-0".into(), 0, MemberState::Held)],
        quorum: Some(1),
        conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: "SpecAccepted".into(),
            status: "True".into(),
            reason: "Valid".into(),
            message: String::new(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
            observed_generation: None,
        }],
        ..RedlockClusterStatus::default()
    };
    m.observe_members("ns", "locks", &status, 1, Timestamp::now());
    m.instance_lost("ns", "locks");
    m.member_clock_jump("ns", "locks");
    m.released(
        "ns",
        "locks",
        Some(EndedHold {
            length: 31.3,
            lateness: 0.01,
        }),
        true,
    );
    m.ttl_violations("ns", "locks", 0);
    m
}

/// What Prometheus stores from the operator's `/metrics`: each `# TYPE` family's sample names
/// (a counter's `_total`, a histogram's `_bucket`, `_sum` and `_count`), mapped to the family.
pub fn exported_series() -> BTreeMap<String, String> {
    let text = metrics_with_every_family().render();
    let mut series = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(family), Some(kind)) = (parts.next(), parts.next()) else {
            panic!("unexpected TYPE line {line:?}");
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            "summary" => &["", "_sum", "_count"],
            _ => &[""],
        };
        for s in suffixes {
            series.insert(format!("{family}{s}"), family.to_owned());
        }
    }
    assert!(
        series.contains_key("redlock_reconciles_total"),
        "render() no longer shows the counters as expected:\n{text}"
    );
    series
}

#[test]
fn metric_names_skip_labels_strings_durations_and_variables() {
    let names = metric_names(
        r#"max by (namespace) (increase(redlock_a_total{state=~"redlock_x|held"}[1h])) > 0
           unless on (namespace) redlock_b offset 5m or absent(up{job="j"}) + $redlock_var"#,
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["redlock_a_total", "redlock_b", "up"]
    );
}
