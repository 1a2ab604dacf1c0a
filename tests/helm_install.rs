//! The README's install steps, run verbatim against the local control plane (issue 7, items 3
//! and 10): the chart's operator runs as real pods (the process kubelet maps the image to the
//! locally built binary and serves its projected ServiceAccount token), under the chart's
//! ServiceAccount and RBAC, not as admin; a RedlockCluster becomes Available, an app connects
//! from the published Secret, and a `kill -9` is held and released under those permissions.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::jiff::SignedDuration;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use nix::sys::signal::Signal;
use redlock_operator::crd::{MemberState, RedlockCluster};
use redlock_test_support::*;
use redlock_testenv::resolver::Resolver;
use redlock_testenv::{ControlPlane, ControlPlaneConfig};
use serde_json::json;

const OPERATOR_NS: &str = "redlock-system";
const APP_NS: &str = "team";

#[test]
fn readme_install_steps_are_the_documented_ones() {
    let steps = install_steps();
    assert_eq!(
        steps.first().map(String::as_str),
        Some("kubectl apply --server-side -f crds/")
    );
    assert!(steps.iter().any(|s| s.starts_with("helm install ")), "{steps:?}");
    assert!(
        steps.iter().any(|s| s.contains("examples/redlockcluster.yaml")),
        "{steps:?}"
    );
}

/// One README line under `sh`, from the repository root, with the control plane's kubeconfig
/// and the locally built kubectl and helm first on PATH. Async: the process kubelet runs on
/// this test's runtime.
async fn run_step(cp: &ControlPlane, line: &str) -> String {
    let out = readme_step(cp, line).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "README step failed: {line}\nstdout:\n{stdout}\nstderr:\n{}\noperator logs:\n{}",
        String::from_utf8_lossy(&out.stderr),
        operator_logs(cp)
            .iter()
            .map(|(p, l)| format!("== {}\n{l}", p.display()))
            .collect::<String>()
    );
    println!("$ {line}\n{stdout}");
    stdout
}

/// Logs of the operator pods' containers as the process kubelet wrote them.
fn operator_logs(cp: &ControlPlane) -> Vec<(PathBuf, String)> {
    let pods = cp.dir().join("kubelet/pods");
    let Ok(dirs) = std::fs::read_dir(&pods) else {
        return Vec::new();
    };
    dirs.flatten()
        .filter(|d| {
            d.file_name()
                .to_string_lossy()
                .starts_with(&format!("{OPERATOR_NS}_"))
        })
        .map(|d| d.path().join("logs/operator.log"))
        .filter_map(|p| Some((p.clone(), std::fs::read_to_string(&p).ok()?)))
        .collect()
}

async fn kubectl(cp: &ControlPlane, args: &[&str]) -> (bool, String) {
    let mut cmd = cp.kubectl();
    cmd.args(args);
    let out = tokio::process::Command::from(cmd).output().await.unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
    )
}

#[tokio::test]
async fn readme_install_runs_the_operator_under_the_charts_rbac() {
    let cp = ControlPlane::start(ControlPlaneConfig {
        // The example asks for 5 instances, at most one per node.
        nodes: 5,
        // The operator runs as a local program through the process kubelet's image table;
        // tests/real_nodes.rs runs the same install with the operator image on real nodes.
        extra_images: vec![("*redlock-operator".into(), operator_bin())],
        real_nodes: false,
        ..Default::default()
    })
    .await
    .unwrap();

    let mut outputs = Vec::new();
    for step in install_steps() {
        outputs.push(run_step(&cp, &step).await);
    }

    // The app's view: the URLs printed by the last step, all five, as in the Secret.
    let urls: Vec<String> = outputs.last().unwrap().lines().map(str::to_owned).collect();
    // `Available` means a quorum serves; each first process is held in full, and their holds
    // end moments apart. The app below locks on all five, so wait for all five.
    let clusters: Api<RedlockCluster> = Api::namespaced(cp.client(), APP_NS);
    wait_for("all five members serve", Duration::from_secs(60), async || {
        let s = clusters.get("locks").await?.status.unwrap_or_default();
        Ok((s.ready_instances == Some(5)).then_some(()))
    })
    .await;
    assert_eq!(urls.len(), 5, "{urls:?}");
    let resolver = Resolver::for_control_plane(&cp);
    let mut locked = 0;
    for url in &urls {
        let (login, hostport) = parse_url(url);
        let addrs = resolver.resolve(&hostport).await.unwrap();
        let ip = addrs
            .first()
            .with_context(|| format!("{hostport} has no endpoint"))
            .unwrap()
            .ip();
        if lock(ip, &login, "app-lock", "app-1", Duration::from_secs(10))
            .await
            .unwrap()
        {
            locked += 1;
        }
    }
    assert_eq!(
        locked, 5,
        "the app locks on every member with the Secret's credentials"
    );

    // The operator runs as the chart's pods under the chart's ServiceAccount, and one leads.
    let op_pods: Api<Pod> = Api::namespaced(cp.client(), OPERATOR_NS);
    let pods = op_pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=redlock-operator"))
        .await
        .unwrap()
        .items;
    assert_eq!(pods.len(), 2, "two replicas");
    let names: Vec<String> = pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
    for p in &pods {
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("redlock-operator"));
        assert!(
            spec.volumes.iter().flatten().any(|v| v.projected.is_some()),
            "the ServiceAccount token comes from a projected volume"
        );
        assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    }
    let lease = Api::<Lease>::namespaced(cp.client(), OPERATOR_NS)
        .get("redlock-operator")
        .await
        .unwrap();
    let holder = lease.spec.unwrap().holder_identity.unwrap();
    assert!(names.contains(&holder), "leader {holder} is one of {names:?}");

    // Not admin: the chart's account can do what the operator needs and nothing broader.
    let sa = format!("--as=system:serviceaccount:{OPERATOR_NS}:redlock-operator");
    for (verb, resource, subresource, allowed) in [
        ("create", "pods", "", true),
        ("patch", "redlockclusters.redlock.dev", "status", true),
        ("patch", "redlockclusters.redlock.dev", "", false),
        ("list", "redlockclusters.redlock.dev", "", true),
        // Planning reads the watch cache: the account has no use for get.
        ("get", "redlockclusters.redlock.dev", "", false),
        ("create", "clusterrolebindings", "", false),
        ("create", "deployments", "", false),
        ("update", "pods", "", false),
        // The readiness gate: a patch of the status, nothing else of it.
        ("patch", "pods", "status", true),
        ("update", "pods", "status", false),
        ("delete", "secrets", "", false),
        ("delete", "nodes", "", false),
        ("create", "pods", "exec", false),
    ] {
        let sub = format!("--subresource={subresource}");
        let mut args = vec!["auth", "can-i", verb, resource, &sa, "-A"];
        if !subresource.is_empty() {
            args.push(&sub);
        }
        let (_, answer) = kubectl(&cp, &args).await;
        assert_eq!(
            answer == "yes",
            allowed,
            "can-i {verb} {resource} {subresource}: {answer}"
        );
    }

    // The lifecycle under the chart's RBAC: a kill -9 is held and released at heldUntil.
    let quick: RedlockCluster = serde_json::from_value(json!({
        "apiVersion": "redlock.dev/v1alpha1", "kind": "RedlockCluster",
        "metadata": {"name": "quick"},
        "spec": {"instances": 3, "maxLockTTL": "3s", "holdMargin": "500ms"},
    }))
    .unwrap();
    clusters.create(&PostParams::default(), &quick).await.unwrap();
    let member = async |slot: i32| {
        clusters
            .get("quick")
            .await
            .ok()
            .and_then(|c| c.status)
            .and_then(|s| s.members.into_iter().find(|m| m.slot == slot))
    };
    wait_for("quick Available", Duration::from_secs(60), async || {
        let c = clusters.get("quick").await?;
        Ok(c.status
            .filter(|s| {
                s.ready_instances == Some(3)
                    && s.conditions
                        .iter()
                        .any(|c| c.type_ == "Available" && c.status == "True")
            })
            .map(|_| ()))
    })
    .await;
    let before = member(1).await.unwrap();
    let ip: std::net::IpAddr = Api::<Pod>::namespaced(cp.client(), APP_NS)
        .get("quick-1")
        .await
        .unwrap()
        .status
        .unwrap()
        .pod_ip
        .unwrap()
        .parse()
        .unwrap();
    let client_secret = |key: &'static str| {
        let cp = &cp;
        async move {
            let (ok, b64) = kubectl(
                cp,
                &[
                    "-n",
                    APP_NS,
                    "get",
                    "secret",
                    "quick-client",
                    "-o",
                    &format!("jsonpath={{.data.{key}}}"),
                ],
            )
            .await;
            assert!(ok);
            use std::io::Write;
            let mut child = std::process::Command::new("base64")
                .arg("-d")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(b64.as_bytes()).unwrap();
            String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
        }
    };
    let login = Login {
        user: client_secret("username").await,
        password: client_secret("password").await,
    };

    cp.nodes()
        .signal_pod(APP_NS, "quick-1", Signal::SIGKILL)
        .await
        .unwrap();
    let old_run = before.run_id.clone().unwrap();
    let held = wait_for("quick-1 held", Duration::from_secs(20), async || {
        Ok(member(1)
            .await
            .filter(|m| m.state == MemberState::Held && m.run_id.as_deref() != Some(old_run.as_str())))
    })
    .await;
    let until = held.held_until.clone().unwrap().0;
    let served = first_client_write(ip, &login, Duration::from_secs(20))
        .await
        .unwrap();
    let late = served.duration_since(until);
    println!("under the chart's RBAC: released {late:?} after heldUntil");
    assert!(
        late >= SignedDuration::ZERO,
        "served at {served}, before heldUntil {until}"
    );
    assert!(
        late <= SignedDuration::from_millis(1500),
        "served {late:?} after heldUntil"
    );

    // Events were published (the recorder's create/patch are allowed).
    let events: Api<Event> = Api::namespaced(cp.client(), APP_NS);
    let holds = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("HoldStarted")
                && e.related.as_ref().and_then(|r| r.name.as_deref()) == Some("quick-1")
        })
        .count();
    assert_eq!(holds, 1, "one HoldStarted event for quick-1");
    // The optional per-cluster NetworkPolicy is created and removed under the chart's RBAC.
    let policies: Api<NetworkPolicy> = Api::namespaced(cp.client(), APP_NS);
    for enabled in [true, false] {
        clusters
            .patch(
                "quick",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"networkPolicy": {"enabled": enabled}}})),
            )
            .await
            .unwrap();
        wait_for(
            "NetworkPolicy follows the spec",
            Duration::from_secs(30),
            async || Ok((policies.get_opt("quick").await?.is_some() == enabled).then_some(())),
        )
        .await;
    }

    // No call of the operator was refused by RBAC.
    let logs = operator_logs(&cp);
    assert_eq!(logs.len(), 2, "both operator pods logged: {logs:?}");
    for (path, log) in &logs {
        assert!(
            !log.to_lowercase().contains("forbidden"),
            "{} shows an RBAC refusal:\n{log}",
            path.display()
        );
    }
    assert!(
        logs.iter().any(|(_, l)| l.contains("acquired the leader lease")),
        "one pod leads"
    );
}
