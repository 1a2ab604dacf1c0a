//! The Helm chart (issue 7, item 1): `helm lint --strict`, `helm template` with good values
//! renders what a restricted, least-privilege install needs, and bad values are refused by
//! `values.schema.json` (or the chart's own checks) before anything reaches a cluster.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn chart() -> PathBuf {
    Path::new(ROOT).join("charts/redlock-operator")
}

fn helm() -> Command {
    let bin = redlock_testenv::controlplane::bin_dir().join("helm");
    assert!(
        bin.exists(),
        "{} is missing: run `make controlplane` (tests/controlplane/build.sh) first",
        bin.display()
    );
    let mut c = Command::new(bin);
    // Helm keeps caches and config under these; never the user's.
    let home = std::env::temp_dir().join("redlock-helm-home");
    c.env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    c
}

/// `helm template` with `--set` pairs: Ok(documents) or Err(stderr).
fn template(sets: &[&str]) -> Result<Vec<Value>, String> {
    let mut cmd = helm();
    cmd.args(["template", "rl", "--namespace", "redlock-system"])
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

fn kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn one<'a>(docs: &'a [Value], k: &str) -> &'a Value {
    let found = kind(docs, k);
    assert_eq!(found.len(), 1, "expected one {k}");
    found[0]
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| s.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

#[test]
fn lint_strict_is_clean() {
    let out = helm().args(["lint", "--strict"]).arg(chart()).output().unwrap();
    assert!(
        out.status.success(),
        "helm lint --strict:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn default_render_is_restricted_and_highly_available() {
    let docs = template(&[]).unwrap();
    let deploy = one(&docs, "Deployment");
    assert_eq!(deploy["spec"]["replicas"], 2);
    let pod = &deploy["spec"]["template"];
    assert_eq!(
        pod["metadata"]["labels"]["app.kubernetes.io/name"],
        "redlock-operator"
    );
    let spec = &pod["spec"];
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert!(spec["securityContext"]["runAsUser"].as_u64().unwrap() > 0);
    let c = &spec["containers"][0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(strings(&c["securityContext"]["capabilities"]["drop"]), ["ALL"]);
    assert!(c["resources"]["requests"]["cpu"].is_string());
    assert!(c["resources"]["requests"]["memory"].is_string());
    let downward = |name: &str| {
        c["env"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["valueFrom"]["fieldRef"]["fieldPath"].clone())
    };
    assert_eq!(downward("POD_NAME"), Some(Value::from("metadata.name")));
    assert_eq!(downward("POD_NAMESPACE"), Some(Value::from("metadata.namespace")));
    assert!(
        strings(&c["args"]).contains(&"--http-addr=$(POD_IP):8080".to_owned()),
        "{:?}",
        c["args"]
    );
    assert_eq!(c["ports"][0]["containerPort"], 8080);
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(
        spec["serviceAccountName"],
        one(&docs, "ServiceAccount")["metadata"]["name"]
    );

    let pdb = one(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deploy["spec"]["selector"]["matchLabels"]
    );
    let svc = one(&docs, "Service");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "http");
    let np = one(&docs, "NetworkPolicy");
    assert_eq!(strings(&np["spec"]["policyTypes"]), ["Ingress", "Egress"]);
    assert!(
        kind(&docs, "ServiceMonitor").is_empty(),
        "ServiceMonitor is opt-in"
    );
    let with_monitor = template(&["metrics.serviceMonitor.enabled=true"]).unwrap();
    assert_eq!(
        one(&with_monitor, "ServiceMonitor")["spec"]["endpoints"][0]["path"],
        "/metrics"
    );
}

/// Every rule of the chart, flattened to (apiGroup, resource, verb, resourceNames).
fn rules(docs: &[Value]) -> Vec<(String, String, String, Vec<String>)> {
    let mut out = Vec::new();
    for role in kind(docs, "ClusterRole").into_iter().chain(kind(docs, "Role")) {
        for rule in role["rules"].as_sequence().unwrap() {
            for g in strings(&rule["apiGroups"]) {
                for r in strings(&rule["resources"]) {
                    for v in strings(&rule["verbs"]) {
                        out.push((g.clone(), r.clone(), v, strings(&rule["resourceNames"])));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn rbac_has_no_wildcards_and_nothing_beyond_the_audited_list() {
    let docs = template(&[]).unwrap();
    let rules = rules(&docs);
    assert!(!rules.is_empty());
    for (g, r, v, _) in &rules {
        assert!(
            !g.contains('*') && !r.contains('*') && !v.contains('*'),
            "wildcard in {g}/{r} {v}"
        );
        // Cluster-wide write access to anything not owned by the operator would be a leak.
        assert!(
            !matches!(
                v.as_str(),
                "escalate" | "bind" | "impersonate" | "deletecollection"
            ),
            "{g}/{r} {v}"
        );
    }
    let audited: &[(&str, &str, &str)] = &[
        ("redlock.dev", "redlockclusters", "get,list,watch"),
        ("redlock.dev", "redlockclusters/status", "patch"),
        ("", "pods", "get,list,watch,create,delete"),
        ("", "services", "get,list,watch,create,patch,delete"),
        ("", "configmaps", "get,list,watch,create,patch"),
        ("", "secrets", "get,list,watch,create,patch"),
        ("policy", "poddisruptionbudgets", "get,list,watch,create,patch"),
        (
            "networking.k8s.io",
            "networkpolicies",
            "get,list,watch,create,patch,delete",
        ),
        ("", "nodes", "list,watch"),
        ("events.k8s.io", "events", "create,patch"),
        ("coordination.k8s.io", "leases", "create,get,update"),
    ];
    let mut expected: Vec<(String, String, String)> = audited
        .iter()
        .flat_map(|(g, r, verbs)| {
            verbs
                .split(',')
                .map(|v| (g.to_string(), r.to_string(), v.to_string()))
        })
        .collect();
    let mut got: Vec<(String, String, String)> = rules
        .iter()
        .map(|(g, r, v, _)| (g.clone(), r.clone(), v.clone()))
        .collect();
    expected.sort();
    got.sort();
    assert_eq!(got, expected);
    // The Lease is the only namespaced grant, and reading/renewing it is limited to its name.
    let role = one(&docs, "Role");
    assert_eq!(role["metadata"]["namespace"], "redlock-system");
    for (g, _, v, names) in rules.iter().filter(|(g, ..)| g == "coordination.k8s.io") {
        if v != "create" {
            assert_eq!(names, &["redlock-operator".to_owned()], "{g} {v}");
        }
    }
}

#[test]
fn bad_values_are_refused() {
    let cases: &[(&str, &str)] = &[
        ("replicaCount=0", "replicaCount"),
        ("replicaCount=two", "replicaCount"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("image.repository=", "repository"),
        ("logFormat=xml", "logFormat"),
        ("http.port=80", "port"),
        ("http.bindAddress=localhost", "bindAddress"),
        ("leaderElection.leaseDurationSeconds=1", "leaseDurationSeconds"),
        (
            "leaderElection.renewDeadlineMs=20000",
            "renewDeadlineMs must be shorter",
        ),
        ("leaderElection.retryPeriodMs=9000", "retryPeriodMs x 1.2"),
        ("watchNamespace=Not_A_Namespace", "watchNamespace"),
        ("resources.requests.cpu=lots", "cpu"),
        ("metrics.serviceMonitor.interval=often", "interval"),
        ("networkPolicy.apiServerPorts={}", "apiServerPorts"),
        ("unknownKey=1", "unknownKey"),
        ("rbac.create=maybe", "create"),
    ];
    for (set, mentions) in cases {
        match template(&[set]) {
            Ok(_) => panic!("--set {set} was accepted"),
            Err(stderr) => assert!(
                stderr.contains(mentions),
                "--set {set}: error does not name {mentions}:\n{stderr}"
            ),
        }
    }
}

#[test]
fn chart_crd_is_the_committed_crd() {
    let committed = std::fs::read_to_string(Path::new(ROOT).join("crds/redlockcluster.yaml")).unwrap();
    let in_chart = std::fs::read_to_string(chart().join("crds/redlockcluster.yaml")).unwrap();
    assert!(
        committed == in_chart,
        "charts/redlock-operator/crds/redlockcluster.yaml differs from crds/: run `make crds`"
    );
}

#[test]
fn chart_version_follows_the_crate() {
    let chart_yaml: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart().join("Chart.yaml")).unwrap()).unwrap();
    assert_eq!(chart_yaml["appVersion"], env!("CARGO_PKG_VERSION"));
}
