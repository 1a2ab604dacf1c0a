//! The Helm chart (issue 7, item 1): `helm lint --strict`, `helm template` with good values
//! renders what a restricted, least-privilege install needs, and bad values are refused by
//! `values.schema.json` (or the chart's own checks) before anything reaches a cluster.

use std::path::Path;

use serde_yaml::Value;

use redlock_test_support::helm_chart::{self, chart, helm};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn template(sets: &[&str]) -> Result<Vec<Value>, String> {
    helm_chart::template("rl", "redlock-system", sets)
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

/// Every rule the chart grants the operator, flattened to (apiGroup, resource, verb,
/// resourceNames).
fn rules(docs: &[Value]) -> Vec<(String, String, String, Vec<String>)> {
    let mut out = Vec::new();
    for role in std::iter::once(helm_chart::operator_cluster_role(docs)).chain(kind(docs, "Role")) {
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
        ("redlock.dev", "redlockclusters", "list,watch"),
        ("redlock.dev", "redlockclusters/status", "patch"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "get"),
        ("", "pods", "get,list,watch,create,delete"),
        ("", "pods/status", "patch"),
        ("", "services", "get,list,watch,create,patch,delete"),
        ("", "configmaps", "get,list,watch,create,patch"),
        ("", "secrets", "get,list,watch,create,patch"),
        ("policy", "poddisruptionbudgets", "get,list,watch,create,patch"),
        (
            "networking.k8s.io",
            "networkpolicies",
            "get,list,watch,create,patch,delete",
        ),
        ("", "nodes", "get,list,watch"),
        ("", "nodes/proxy", "get"),
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
    // Reading CRDs is limited to ours (the start-up schema check).
    for (g, r, v, names) in rules.iter().filter(|(g, ..)| g == "apiextensions.k8s.io") {
        assert_eq!(names, &["redlockclusters.redlock.dev".to_owned()], "{g}/{r} {v}");
    }
    // The Lease is the only namespaced grant, and renewing it is limited to its name (reading
    // is not: another operator's Lease that a cluster's status names is read, N6).
    let role = one(&docs, "Role");
    assert_eq!(role["metadata"]["namespace"], "redlock-system");
    for (g, _, v, names) in rules.iter().filter(|(g, ..)| g == "coordination.k8s.io") {
        if v == "update" {
            assert_eq!(names, &["redlock-operator".to_owned()], "{g} {v}");
        }
    }
}

/// Users' access to RedlockClusters comes with Kubernetes' default roles (a namespace's `edit`
/// may create and edit them, `view` may read them), through aggregation labels; nothing else
/// is granted to anybody, and the roles can be left out.
#[test]
fn redlockclusters_join_the_default_view_edit_and_admin_roles() {
    let docs = template(&[]).unwrap();
    let aggregated: Vec<&Value> = kind(&docs, "ClusterRole")
        .into_iter()
        .filter(|r| !std::ptr::eq(*r, helm_chart::operator_cluster_role(&docs)))
        .collect();
    let to = |role: &Value, default: &str| {
        role["metadata"]["labels"][format!("rbac.authorization.k8s.io/aggregate-to-{default}").as_str()]
            == "true"
    };
    let mut seen = Vec::new();
    for role in &aggregated {
        for rule in role["rules"].as_sequence().unwrap() {
            assert_eq!(strings(&rule["apiGroups"]), ["redlock.dev"], "{role:?}");
            for verb in strings(&rule["verbs"]) {
                let readonly = matches!(verb.as_str(), "get" | "list" | "watch");
                // A write verb never reaches `view`.
                assert!(readonly || !to(role, "view"), "{verb} in view: {role:?}");
                assert!(to(role, "edit") && to(role, "admin"), "{role:?}");
                for r in strings(&rule["resources"]) {
                    seen.push(format!("{r} {verb} view={}", to(role, "view")));
                }
            }
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "redlockclusters create view=false",
            "redlockclusters delete view=false",
            "redlockclusters deletecollection view=false",
            "redlockclusters get view=true",
            "redlockclusters list view=true",
            "redlockclusters patch view=false",
            "redlockclusters update view=false",
            "redlockclusters watch view=true",
            "redlockclusters/status get view=true",
            "redlockclusters/status list view=true",
            "redlockclusters/status watch view=true",
        ]
    );
    // No binding names them: the API server aggregates them into the default roles.
    for binding in kind(&docs, "ClusterRoleBinding")
        .into_iter()
        .chain(kind(&docs, "RoleBinding"))
    {
        assert!(
            aggregated
                .iter()
                .all(|r| r["metadata"]["name"] != binding["roleRef"]["name"]),
            "{binding:?}"
        );
    }
    let without = template(&["rbac.aggregateToDefaultRoles=false"]).unwrap();
    assert_eq!(kind(&without, "ClusterRole").len(), 1);
}

/// Operator flags and environment the chart has no value of its own for, and a security
/// context for platforms that assign their own UID (OpenShift's restricted SCC).
#[test]
fn extra_flags_environment_and_security_contexts_reach_the_operator() {
    let docs = template(&[
        "extraArgs={--probe-period-ms=2000,--max-clock-offset-ms=3000}",
        "extraEnv[0].name=TZ",
        "extraEnv[0].value=UTC",
        "podSecurityContext.runAsUser=null",
        "podSecurityContext.runAsGroup=null",
    ])
    .unwrap();
    let spec = &one(&docs, "Deployment")["spec"]["template"]["spec"];
    let c = &spec["containers"][0];
    let args = strings(&c["args"]);
    assert_eq!(args[0], "run");
    assert!(
        args.ends_with(&[
            "--probe-period-ms=2000".to_owned(),
            "--max-clock-offset-ms=3000".to_owned()
        ]),
        "{args:?}"
    );
    let env = c["env"].as_sequence().unwrap();
    assert!(
        env.iter().any(|e| e["name"] == "TZ" && e["value"] == "UTC"),
        "{env:?}"
    );
    assert!(
        env.iter().any(|e| e["name"] == "POD_IP"),
        "the chart's own stay: {env:?}"
    );
    let pod_security = &spec["securityContext"];
    assert!(pod_security["runAsUser"].is_null(), "{pod_security:?}");
    assert!(pod_security["runAsGroup"].is_null(), "{pod_security:?}");
    assert_eq!(pod_security["runAsNonRoot"], true);
    assert_eq!(pod_security["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
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
        ("rbac.aggregateToDefaultRoles=maybe", "aggregateToDefaultRoles"),
        ("extraArgs={probe-period-ms=2000}", "extraArgs"),
        ("extraEnv[0].value=UTC", "name"),
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

fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn chart_yaml() -> Value {
    serde_yaml::from_str(&read(chart().join("Chart.yaml"))).unwrap()
}

#[test]
fn dashboard_configmap_is_opt_in_and_labelled_for_the_grafana_sidecar() {
    let docs = template(&[]).unwrap();
    assert!(
        kind(&docs, "ConfigMap").is_empty(),
        "the dashboard ConfigMap is opt-in"
    );

    let file = read(chart().join("dashboards/redlock-operator.json"));
    let docs = template(&["dashboard.enabled=true"]).unwrap();
    let cm = one(&docs, "ConfigMap");
    assert_eq!(cm["metadata"]["namespace"], "redlock-system");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        cm["metadata"]["labels"]["app.kubernetes.io/name"],
        "redlock-operator"
    );
    let data = cm["data"].as_mapping().unwrap();
    assert_eq!(data.len(), 1, "one dashboard per ConfigMap");
    assert!(
        cm["data"]["redlock-operator.json"].as_str() == Some(file.as_str()),
        "the ConfigMap's redlock-operator.json is not dashboards/redlock-operator.json byte for byte"
    );
    // What Grafana reads is JSON (tests/dashboard.rs checks its content).
    serde_json::from_str::<serde_json::Value>(&file).unwrap();
    // A ConfigMap holds at most 1 MiB.
    assert!(file.len() < 512 * 1024, "dashboard is {} bytes", file.len());

    let docs = template(&[
        "dashboard.enabled=true",
        "dashboard.label=grafana.example.com/dashboard",
        "dashboard.labelValue=redlock",
        "dashboard.namespace=monitoring",
        "dashboard.labels.team=platform",
        "dashboard.annotations.grafana_folder=Redlock",
    ])
    .unwrap();
    let meta = &one(&docs, "ConfigMap")["metadata"];
    assert_eq!(meta["namespace"], "monitoring");
    assert_eq!(meta["labels"]["grafana.example.com/dashboard"], "redlock");
    assert!(meta["labels"]["grafana_dashboard"].is_null());
    assert_eq!(meta["labels"]["team"], "platform");
    assert_eq!(meta["annotations"]["grafana_folder"], "Redlock");

    for (set, mentions) in [
        ("dashboard.label=a/b/c", "label"),
        ("dashboard.labelValue=-1-", "labelValue"),
        ("dashboard.namespace=Monitoring", "namespace"),
        ("dashboard.enable=true", "enable"),
    ] {
        match template(&["dashboard.enabled=true", set]) {
            Ok(_) => panic!("--set {set} was accepted"),
            Err(stderr) => assert!(
                stderr.contains(mentions),
                "--set {set}: error does not name {mentions}:\n{stderr}"
            ),
        }
    }
}

/// The newest released or planned version of CHANGELOG.md (Keep a Changelog: `## [x.y.z] -
/// date`, newest first; `[Unreleased]` is skipped) and its entries as (kind, text), the
/// text of each bullet on one line.
fn newest_changelog_entries() -> (String, Vec<(String, String)>) {
    let text = read(chart().join("CHANGELOG.md"));
    let mut version = None;
    let mut kind = String::new();
    let mut entries: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("## [") {
            let v = rest.split(']').next().unwrap();
            if v.eq_ignore_ascii_case("unreleased") {
                continue;
            }
            if version.is_some() {
                break;
            }
            version = Some(v.to_owned());
        } else if version.is_none() {
            continue;
        } else if let Some(k) = line.strip_prefix("### ") {
            kind = k.trim().to_lowercase();
        } else if let Some(item) = line.strip_prefix("- ") {
            entries.push((kind.clone(), item.trim().to_owned()));
        } else if line.starts_with("  ") && !line.trim().is_empty() {
            let last = entries.last_mut().expect("a continuation line after a bullet");
            last.1.push(' ');
            last.1.push_str(line.trim());
        }
    }
    (version.expect("CHANGELOG.md has a version"), entries)
}

/// An annotation that holds a YAML document.
fn annotation_yaml(chart: &Value, key: &str) -> Value {
    let text = chart["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("Chart.yaml has no annotation {key}"));
    serde_yaml::from_str(text).unwrap_or_else(|e| panic!("{key}: {e}"))
}

#[test]
fn chart_metadata_agrees_with_the_changelog_crd_example_and_values() {
    let meta = chart_yaml();
    let a = &meta["annotations"];

    // kubeVersion: refused below it, provider builds of supported versions accepted.
    let constraint = meta["kubeVersion"].as_str().expect("kubeVersion");
    assert!(constraint.starts_with(">="), "{constraint}");
    let render = |v: &str| {
        helm()
            .args(["template", "rl", "--kube-version", v])
            .arg(chart())
            .output()
            .unwrap()
    };
    let old = render("1.32.9");
    assert!(!old.status.success(), "Kubernetes 1.32 was accepted");
    assert!(String::from_utf8_lossy(&old.stderr).contains("kubeVersion"));
    for v in ["1.33.0", "1.33.2-gke.1200", "1.37.1"] {
        let out = render(v);
        assert!(
            out.status.success(),
            "{v}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The changelog's newest version is the chart's, and its entries are the annotation's.
    let (version, entries) = newest_changelog_entries();
    assert_eq!(meta["version"].as_str(), Some(version.as_str()));
    assert!(!entries.is_empty());
    let kinds = ["added", "changed", "deprecated", "removed", "fixed", "security"];
    let changes = annotation_yaml(&meta, "artifacthub.io/changes");
    let changes: Vec<(String, String)> = changes
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| {
            let k = c["kind"].as_str().unwrap().to_owned();
            assert!(kinds.contains(&k.as_str()), "change kind {k}");
            (k, c["description"].as_str().unwrap().to_owned())
        })
        .collect();
    let expected: Vec<(String, String)> = entries
        .iter()
        .map(|(k, t)| (k.clone(), t.replace('`', "")))
        .collect();
    assert_eq!(
        changes, expected,
        "artifacthub.io/changes differs from CHANGELOG.md's {version} (without code marks)"
    );

    assert!(
        [
            "ai-machine-learning",
            "database",
            "integration-delivery",
            "monitoring-logging",
            "networking",
            "security",
            "storage",
            "streaming-messaging"
        ]
        .contains(&a["artifacthub.io/category"].as_str().unwrap())
    );
    assert_eq!(a["artifacthub.io/license"], env!("CARGO_PKG_LICENSE"));
    assert_eq!(a["artifacthub.io/operator"], "true");
    assert!(
        [
            "Basic Install",
            "Seamless Upgrades",
            "Full Lifecycle",
            "Deep Insights",
            "Auto Pilot"
        ]
        .contains(&a["artifacthub.io/operatorCapabilities"].as_str().unwrap())
    );
    for link in annotation_yaml(&meta, "artifacthub.io/links")
        .as_sequence()
        .unwrap()
    {
        assert!(link["name"].is_string());
        assert!(link["url"].as_str().unwrap().starts_with("https://"), "{link:?}");
    }

    // The CRD entry names the chart's CRD; the example is examples/redlockcluster.yaml.
    let crd: Value = serde_yaml::from_str(&read(chart().join("crds/redlockcluster.yaml"))).unwrap();
    let crds = annotation_yaml(&meta, "artifacthub.io/crds");
    let entry = &crds[0];
    assert_eq!(crds.as_sequence().unwrap().len(), 1);
    assert_eq!(entry["name"], crd["metadata"]["name"]);
    assert_eq!(entry["kind"], crd["spec"]["names"]["kind"]);
    assert_eq!(entry["version"], crd["spec"]["versions"][0]["name"]);
    assert!(entry["description"].is_string() && entry["displayName"].is_string());
    let example: Value =
        serde_yaml::from_str(&read(Path::new(ROOT).join("examples/redlockcluster.yaml"))).unwrap();
    assert_eq!(
        annotation_yaml(&meta, "artifacthub.io/crdsExamples"),
        Value::Sequence(vec![example]),
        "artifacthub.io/crdsExamples differs from examples/redlockcluster.yaml"
    );

    // Images: the operator's as values.yaml and appVersion make it, the CRD's default member image.
    let values: Value = serde_yaml::from_str(&read(chart().join("values.yaml"))).unwrap();
    let images = annotation_yaml(&meta, "artifacthub.io/images");
    let image = |name: &str| {
        images
            .as_sequence()
            .unwrap()
            .iter()
            .find(|i| i["name"] == name)
            .unwrap_or_else(|| panic!("no image {name} in artifacthub.io/images"))["image"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        image("redlock-operator"),
        format!(
            "{}:{}",
            values["image"]["repository"].as_str().unwrap(),
            meta["appVersion"].as_str().unwrap()
        )
    );
    let default_member = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["image"]["default"];
    assert_eq!(Value::from(image("redis")), *default_member);
}
