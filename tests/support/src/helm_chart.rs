//! The chart rendered by the Helm built from its Go module (`make controlplane`), with its
//! caches kept away from the user's: shared by tests/chart.rs, tests/alerts.rs and
//! tests/dashboard.rs.

use std::path::PathBuf;
use std::process::Command;

use serde_yaml::Value;

pub fn chart() -> PathBuf {
    redlock_testenv::controlplane::repo_root().join("charts/redlock-operator")
}

/// A tool of `target/dev/bin`, or a failure that says which `make` target builds it.
pub fn tool(name: &str, make_target: &str) -> PathBuf {
    let bin = redlock_testenv::controlplane::bin_dir().join(name);
    assert!(
        bin.exists(),
        "{} is missing: run `make {make_target}` first",
        bin.display()
    );
    bin
}

pub fn helm() -> Command {
    let mut c = Command::new(tool("helm", "controlplane"));
    // Helm keeps caches and config under these; never the user's.
    let home = std::env::temp_dir().join("redlock-helm-home");
    c.env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    c
}

/// `helm template <release> --namespace <namespace>` with `--set` pairs: Ok(documents) or
/// Err(stderr).
pub fn template(release: &str, namespace: &str, sets: &[&str]) -> Result<Vec<Value>, String> {
    let mut cmd = helm();
    cmd.args(["template", release, "--namespace", namespace])
        .arg(chart());
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8(out.stdout).unwrap();
    Ok(serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect())
}

/// The ClusterRole the chart binds to the operator's ServiceAccount (the one a
/// ClusterRoleBinding names), not the roles it adds to Kubernetes' `view`/`edit`/`admin`.
pub fn operator_cluster_role(docs: &[Value]) -> &Value {
    let bound: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding")
        .filter_map(|d| d["roleRef"]["name"].as_str())
        .collect();
    let roles: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole")
        .filter(|d| d["metadata"]["name"].as_str().is_some_and(|n| bound.contains(&n)))
        .collect();
    assert_eq!(roles.len(), 1, "one ClusterRole bound to the operator: {bound:?}");
    roles[0]
}
