//! The operator runtime against a real kube-apiserver: refusing to start without the CRD or
//! against an older one,
//! status written once per change, health endpoints, graceful shutdown, API-server validation.

use std::time::Duration;

use anyhow::bail;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use redlock_operator::crd::RedlockCluster;
use redlock_test_support::{operator_bin, wait_for};
use redlock_testenv::operator::OperatorProcess;
use redlock_testenv::{ControlPlane, ControlPlaneConfig};
use serde_json::json;

async fn control_plane() -> ControlPlane {
    ControlPlane::start(ControlPlaneConfig {
        nodes: 0,
        ..Default::default()
    })
    .await
    .expect("control plane starts")
}

fn cluster(name: &str, instances: i32) -> RedlockCluster {
    serde_json::from_value(json!({
        "apiVersion": "redlock.dev/v1alpha1",
        "kind": "RedlockCluster",
        "metadata": {"name": name},
        "spec": {"instances": instances, "maxLockTTL": "30s"},
    }))
    .unwrap()
}

#[tokio::test]
async fn refuses_to_start_without_the_crd() {
    let cp = control_plane().await;
    let (line, _) = refused_start(&cp).await;
    assert!(
        line.contains("kubectl apply -f crds/redlockcluster.yaml"),
        "{line}"
    );
}

/// Starts the operator and waits for it to exit non-zero: its `error: ` line, and its log.
async fn refused_start(cp: &ControlPlane) -> (String, String) {
    let log = cp.dir().join("operator.log");
    let mut op = OperatorProcess::start(&operator_bin(), cp.kubeconfig(), &log, &[]).unwrap();
    let status = op.wait_exit(Duration::from_secs(30)).await.unwrap();
    assert!(!status.success(), "must exit non-zero");
    let out = op.log();
    let line = out
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line in:\n{out}"))
        .to_owned();
    (line, out)
}

/// Helm never upgrades CRDs: a new operator against the CRD of an older release would have
/// the API server prune what the old schema lacks from every status write (safety review N2).
/// Here the installed CRD is ours without a member's `unstopped`, a field the hold rule
/// relies on: the operator must refuse to start and name it.
#[tokio::test]
async fn refuses_to_start_against_an_older_crd_and_names_what_it_lacks() {
    let cp = control_plane().await;
    let mut older = serde_json::to_value(redlock_operator::crd::crd()).unwrap();
    older
        .pointer_mut(
            "/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/members/items/properties",
        )
        .and_then(|p| p.as_object_mut())
        .and_then(|p| p.remove("unstopped"))
        .expect("our CRD has status.members[].unstopped");
    cp.install_crd(&serde_json::from_value(older).unwrap())
        .await
        .unwrap();
    let (line, out) = refused_start(&cp).await;
    assert!(line.contains("v1alpha1: status.members[].unstopped"), "{line}");
    assert!(
        line.contains("kubectl apply -f crds/redlockcluster.yaml"),
        "{line}"
    );
    // Nothing was acted on: the operator stopped before the election and the watches.
    assert!(!out.contains("acquired the leader lease"), "{out}");
    assert!(!out.contains("operator started"), "{out}");
}

#[tokio::test]
async fn writes_status_once_per_change_and_shuts_down_cleanly() {
    let cp = control_plane().await;
    cp.install_crd(&redlock_operator::crd::crd()).await.unwrap();
    let ns = cp.new_namespace("runtime").await.unwrap();
    let log = cp.dir().join("operator.log");
    let mut op = OperatorProcess::start(&operator_bin(), cp.kubeconfig(), &log, &[]).unwrap();
    op.wait_ready(Duration::from_secs(30)).await.unwrap();
    assert_eq!(op.get("/healthz").await.unwrap().0, 200);

    let api: Api<RedlockCluster> = Api::namespaced(cp.client(), &ns);
    api.create(&PostParams::default(), &cluster("locks", 5))
        .await
        .unwrap();
    // Settled: generation 1 observed and every member says why it is not up (no nodes: the
    // scheduler's reason), which is the last change this cluster goes through.
    let first = wait_for("status of generation 1", Duration::from_secs(20), async || {
        let c = api.get("locks").await?;
        let settled = c.status.as_ref().is_some_and(|s| {
            s.observed_generation == Some(1)
                && s.members.len() == 5
                && s.members.iter().all(|m| {
                    m.message
                        .as_deref()
                        .is_some_and(|msg| msg.starts_with("cannot be placed"))
                })
        });
        Ok(settled.then_some(c))
    })
    .await;
    let status = first.status.clone().unwrap();
    assert_eq!(
        (status.instances, status.quorum, status.ready_instances),
        (Some(5), Some(3), Some(0))
    );
    let progressing = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap();
    assert_eq!(
        (progressing.status.as_str(), progressing.observed_generation),
        ("True", Some(1))
    );
    let available = status.conditions.iter().find(|c| c.type_ == "Available").unwrap();
    assert_eq!(available.status, "False");

    // Steady state: nothing changes, so nothing is written.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = api.get("locks").await.unwrap();
    assert_eq!(
        again.metadata.resource_version, first.metadata.resource_version,
        "no writes in steady state"
    );

    // A spec change is observed: new generation, quorum follows N.
    api.patch(
        "locks",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"instances": 3}})),
    )
    .await
    .unwrap();
    let second = wait_for("status of generation 2", Duration::from_secs(20), async || {
        let c = api.get("locks").await?;
        Ok(c.status.clone().filter(|s| s.observed_generation == Some(2)))
    })
    .await;
    assert_eq!((second.instances, second.quorum), (Some(3), Some(2)));
    let progressing2 = second
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap();
    assert_eq!(progressing2.observed_generation, Some(2));
    assert_eq!(
        progressing2.last_transition_time, progressing.last_transition_time,
        "no flip, no new time"
    );

    let (code, metrics) = op.get("/metrics").await.unwrap();
    assert_eq!(code, 200);
    let reconciles: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("redlock_reconciles_total "))
        .expect("reconcile counter exported")
        .parse()
        .unwrap();
    assert!(reconciles >= 2.0, "{metrics}");
    assert!(
        metrics.contains("redlock_reconcile_duration_seconds_bucket"),
        "{metrics}"
    );

    let exit = op.terminate(Duration::from_secs(10)).await.unwrap();
    assert!(
        exit.success(),
        "SIGTERM must end the operator cleanly, got {exit}:\n{}",
        op.log()
    );
}

#[tokio::test]
async fn api_server_refuses_invalid_objects_with_clear_messages() {
    let cp = control_plane().await;
    cp.install_crd(&redlock_operator::crd::crd()).await.unwrap();
    let ns = cp.new_namespace("validation").await.unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(
        cp.client(),
        &ns,
        &kube::api::ApiResource::erase::<RedlockCluster>(&()),
    );
    let object = |spec: serde_json::Value| -> DynamicObject {
        serde_json::from_value(
            json!({"apiVersion": "redlock.dev/v1alpha1", "kind": "RedlockCluster",
               "metadata": {"generateName": "bad-"}, "spec": spec}),
        )
        .unwrap()
    };
    let cases = [
        (json!({"instances": 3}), "spec.maxLockTTL: Required value"),
        (json!({"maxLockTTL": "thirty"}), "spec.maxLockTTL"),
        (
            json!({"maxLockTTL": "-5s"}),
            "maxLockTTL must be a duration greater than 0s",
        ),
        (
            json!({"maxLockTTL": "0s"}),
            "maxLockTTL must be a duration greater than 0s",
        ),
        (json!({"maxLockTTL": "48h"}), "at most 24h"),
        (json!({"maxLockTTL": "30s", "instances": 0}), "spec.instances"),
        (json!({"maxLockTTL": "30s", "instances": 100}), "spec.instances"),
        (
            json!({"maxLockTTL": "30s", "clockDriftFactor": 1}),
            "clockDriftFactor must be at least 0 and less than 1",
        ),
        (
            json!({"maxLockTTL": "30s", "holdMargin": "-1s"}),
            "holdMargin must be a duration from 0s to 1h",
        ),
        (json!({"maxLockTTL": "30s", "image": ""}), "spec.image"),
        (
            json!({"maxLockTTL": "30s", "redisConfig": {"appendonly": "yes"}}),
            "redisConfig may only set these keys",
        ),
        (
            json!({"maxLockTTL": "30s", "redisConfig": {"timeout": "0\nsave 1 1"}}),
            "may not contain newlines",
        ),
        (
            json!({"maxLockTTL": "30s", "redisConfig": {"loglevel": "'notice'", "timeout": "0\u{1}"}}),
            "may not contain newlines, quotes, control or non-ASCII characters",
        ),
        (
            json!({"maxLockTTL": "30s", "redisConfig": {"timeout": " "}}),
            "redisConfig values may not be empty",
        ),
        (
            json!({"maxLockTTL": "30s", "scheduling": {"spread": "rack"}}),
            "spec.scheduling.spread",
        ),
    ];
    let mut failures = vec![];
    for (spec, expected) in &cases {
        match api.create(&PostParams::default(), &object(spec.clone())).await {
            Ok(_) => failures.push(format!("{spec} was accepted")),
            Err(kube::Error::Api(status)) => {
                if !status.message.contains(expected) {
                    failures.push(format!("{spec}: expected {expected:?} in {:?}", status.message));
                }
            }
            Err(e) => failures.push(format!("{spec}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");

    // A valid object with defaults is accepted and the defaults are filled in.
    let ok = api
        .create(&PostParams::default(), &object(json!({"maxLockTTL": "1m30s"})))
        .await
        .unwrap();
    assert_eq!(ok.data["spec"]["instances"], 5);
    assert_eq!(ok.data["spec"]["holdMargin"], "1s");
    assert_eq!(ok.data["spec"]["clockDriftFactor"], 0.01);
}

#[tokio::test]
async fn kubectl_explain_describes_the_fields() {
    let cp = control_plane().await;
    cp.install_crd(&redlock_operator::crd::crd()).await.unwrap();
    let out = wait_for("kubectl explain", Duration::from_secs(30), async || {
        let out = cp
            .kubectl()
            .args(["explain", "redlockcluster.spec.maxLockTTL"])
            .output()?;
        if out.status.success() {
            Ok(Some(String::from_utf8(out.stdout)?))
        } else {
            bail!("{}", String::from_utf8_lossy(&out.stderr))
        }
    })
    .await;
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("The longest lock TTL any client of this cluster will ever use, as a duration such as"),
        "{out}"
    );
    let spec = cp
        .kubectl()
        .args(["explain", "redlockcluster.spec"])
        .output()
        .unwrap();
    let spec = String::from_utf8(spec.stdout).unwrap();
    assert!(
        spec.lines()
            .any(|l| l.contains("maxLockTTL") && l.contains("-required-")),
        "{spec}"
    );
}

/// The status write is conditional on the resourceVersion the plan was made from, so a write
/// from an older view (e.g. a replica that lost the lease) cannot overwrite newer hold records.
#[tokio::test]
async fn status_write_from_a_stale_view_is_refused() {
    let cp = control_plane().await;
    cp.install_crd(&redlock_operator::crd::crd()).await.unwrap();
    let ns = cp.new_namespace("stale").await.unwrap();
    let api: Api<RedlockCluster> = Api::namespaced(cp.client(), &ns);
    api.create(&PostParams::default(), &cluster("locks", 3))
        .await
        .unwrap();
    let stale = api.get("locks").await.unwrap();
    api.patch(
        "locks",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"instances": 5}})),
    )
    .await
    .unwrap();
    let status = redlock_operator::crd::RedlockClusterStatus {
        quorum: Some(2),
        ..Default::default()
    };
    let params = PatchParams::apply(redlock_operator::children::names::FIELD_MANAGER).force();
    let err = api
        .patch_status(
            "locks",
            &params,
            &Patch::Apply(&redlock_operator::reconcile::status_patch(&stale, &status)),
        )
        .await
        .expect_err("a write planned from an older resourceVersion must be refused");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409),
        "expected 409 Conflict, got {err}"
    );
    assert_eq!(api.get("locks").await.unwrap().status, None, "nothing written");
    let fresh = api.get("locks").await.unwrap();
    api.patch_status(
        "locks",
        &params,
        &Patch::Apply(&redlock_operator::reconcile::status_patch(&fresh, &status)),
    )
    .await
    .unwrap();
    assert_eq!(api.get("locks").await.unwrap().status.unwrap().quorum, Some(2));
}

/// Safety-review F16: the operator's deletes carry the UID the decision was about. A pod
/// deleted and re-created under the same name meanwhile (a stale cache, a stale leader) is
/// left alone; the old one, already gone, counts as deleted-not-by-us.
#[tokio::test]
async fn a_delete_decided_about_an_older_pod_leaves_the_newer_one_alone() {
    use k8s_openapi::api::core::v1::Pod;
    let cp = control_plane().await;
    let pods: Api<Pod> = Api::namespaced(cp.client(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "locks-0"},
        "spec": {"containers": [{"name": "redis", "image": "redis:7.0"}]},
    }))
    .unwrap();
    let create = async || {
        pods.create(&PostParams::default(), &pod)
            .await
            .unwrap()
            .metadata
            .uid
            .unwrap()
    };
    let old = create().await;
    // Not bound to a node, so a delete removes it at once.
    pods.delete("locks-0", &Default::default()).await.unwrap();
    wait_for("old pod gone", Duration::from_secs(10), async || {
        Ok(pods.get_opt("locks-0").await?.is_none().then_some(()))
    })
    .await;
    let new = create().await;
    assert_ne!(old, new);

    let deleted = redlock_operator::reconcile::apply::delete(&pods, "locks-0", Some(&old))
        .await
        .unwrap();
    assert!(!deleted, "nothing deleted for the older pod");
    let live = pods.get("locks-0").await.unwrap();
    assert_eq!(
        live.metadata.uid.as_deref(),
        Some(new.as_str()),
        "the newer pod stays"
    );

    assert!(
        redlock_operator::reconcile::apply::delete(&pods, "locks-0", Some(&new))
            .await
            .unwrap()
    );
    wait_for("newer pod gone", Duration::from_secs(10), async || {
        Ok(pods.get_opt("locks-0").await?.is_none().then_some(()))
    })
    .await;
    assert!(
        !redlock_operator::reconcile::apply::delete(&pods, "locks-0", Some(&new))
            .await
            .unwrap(),
        "already gone"
    );
}
