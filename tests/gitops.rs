//! What GitOps tools make of a RedlockCluster through its life (issue 51), on the real control
//! plane: kstatus (sigs.k8s.io/cli-utils, in the fork Helm 4's `--wait` builds with; Flux's
//! health checks use the same rules) and the Argo CD health check `examples/argocd/health.lua`,
//! both run by `gitops-health` (tests/controlplane/gitops, `make controlplane`) on the object
//! as the API server returns it. Each must call the cluster done only once a quorum serves
//! and nothing is in progress, and failed while its spec is rejected.

use std::process::{Command, Stdio};
use std::time::Duration;

use std::io::Write;

use redlock_test_support::helm_chart::tool;
use redlock_test_support::*;
use serde_json::json;

const NAME: &str = "locks";

/// kstatus's status and Argo CD's health of the cluster as the API server has it now.
#[derive(Debug, PartialEq, Eq)]
struct Verdict {
    kstatus: String,
    argocd: String,
    message: String,
}

async fn verdict(env: &Env) -> Verdict {
    verdict_of(&env.cluster(NAME).await)
}

/// kstatus's status and Argo CD's health of `object`.
fn verdict_of(object: &redlock_operator::crd::RedlockCluster) -> Verdict {
    let script = redlock_testenv::controlplane::repo_root().join("examples/argocd/health.lua");
    let mut child = Command::new(tool("gitops-health", "controlplane"))
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(object).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8(out.stdout).unwrap();
    let field = |name: &str| {
        let rest = line.split(&format!("{name}=")).nth(1).unwrap_or_default();
        match name {
            "message" => rest.trim_end().to_owned(),
            _ => rest.split_whitespace().next().unwrap_or_default().to_owned(),
        }
    };
    Verdict {
        kstatus: field("kstatus"),
        argocd: field("argocd"),
        message: field("message"),
    }
}

/// Whether `object`'s status says a quorum serves with nothing in progress.
fn settled(object: &redlock_operator::crd::RedlockCluster) -> bool {
    let Some(status) = &object.status else {
        return false;
    };
    let is = |t: &str, s: &str| status.conditions.iter().any(|c| c.type_ == t && c.status == s);
    is("Available", "True") && is("Progressing", "False")
}

/// Every version of the object from resourceVersion `from` on, as a watch delivers them, until
/// it is settled: on each version the operator has written a status to, the verdict must be
/// `want` (kstatus, Argo CD). Returns how many such versions there were. A watch, not
/// sampling: a version that lived for a few milliseconds (an ownership claim before the first
/// status write) is judged too.
async fn in_progress_until_settled(env: &Env, from: &str, want: (&str, &str)) -> usize {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::{Api, WatchEvent, WatchParams};
    let api: Api<redlock_operator::crd::RedlockCluster> = Api::namespaced(env.cp.client(), &env.ns);
    let params = WatchParams::default()
        .fields(&format!("metadata.name={NAME}"))
        .timeout(60);
    let mut versions = api.watch(&params, from).await.unwrap().boxed();
    let mut samples = 0;
    while let Some(event) = versions.try_next().await.unwrap() {
        let object = match event {
            WatchEvent::Added(o) | WatchEvent::Modified(o) => o,
            WatchEvent::Error(e) => panic!("watch from {from}: {e:?}"),
            _ => continue,
        };
        if settled(&object) {
            return samples;
        }
        if object.status.is_some() {
            let v = verdict_of(&object);
            assert_eq!(
                (v.kstatus.as_str(), v.argocd.as_str()),
                want,
                "{v:?}: {:?}",
                object.status
            );
            samples += 1;
        }
    }
    panic!("never settled within the watch's 60 s");
}

/// The resourceVersion of the namespace's RedlockClusters now: a watch from it sees every
/// later version.
async fn now_version(env: &Env) -> String {
    let api: kube::api::Api<redlock_operator::crd::RedlockCluster> =
        kube::api::Api::namespaced(env.cp.client(), &env.ns);
    api.list_metadata(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
}

/// Both tools call the cluster done: kstatus `Current`, Argo CD `Healthy`.
async fn assert_done(env: &Env) {
    let done = verdict(env).await;
    assert_eq!(
        (done.kstatus.as_str(), done.argocd.as_str()),
        ("Current", "Healthy"),
        "{done:?}"
    );
}

#[tokio::test]
async fn gitops_tools_see_a_cluster_done_only_once_it_serves_and_failed_while_its_spec_is_rejected() {
    let env = Env::start(3).await;
    let before_create = now_version(&env).await;
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "3s", "holdMargin": "0s"}),
    )
    .await;
    // Created: in progress until a quorum serves and the holds have run.
    let samples = in_progress_until_settled(&env, &before_create, ("InProgress", "Progressing")).await;
    assert!(samples > 0, "no sample while the first holds ran");
    assert_done(&env).await;

    // A member loses its keys: in progress again while it is held.
    let before = env.member(NAME, 1).await.unwrap();
    env.cp
        .nodes()
        .signal_pod(&env.ns, &format!("{NAME}-1"), nix::sys::signal::Signal::SIGKILL)
        .await
        .unwrap();
    wait_held(&env, NAME, 1, before.run_id.as_deref().unwrap()).await;
    let held_at = env.cluster(NAME).await.metadata.resource_version.unwrap();
    let held = in_progress_until_settled(&env, &held_at, ("InProgress", "Progressing")).await;
    assert!(held > 0, "no sample while the member was held");
    assert_done(&env).await;

    // A spec the operator rejects (a memory request above its limit): failed, saying why,
    // while the old spec serves on.
    env.patch_spec(
        NAME,
        json!({"resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "512Mi"}}}),
    )
    .await;
    let rejected = wait_for("the rejection seen", Duration::from_secs(20), async || {
        let v = verdict(&env).await;
        Ok((v.kstatus == "Failed").then_some(v))
    })
    .await;
    assert_eq!(rejected.argocd, "Degraded", "{rejected:?}");
    assert!(rejected.message.contains("SpecRejected"), "{rejected:?}");

    // Put right: done again.
    env.patch_spec(NAME, json!({"resources": null})).await;
    let fixed = wait_for("done again", Duration::from_secs(30), async || {
        let v = verdict(&env).await;
        Ok((v.kstatus == "Current").then_some(v))
    })
    .await;
    assert_eq!(fixed.argocd, "Healthy", "{fixed:?}");
}

/// The ConfigMap patch users apply carries the very script tested above.
#[test]
fn the_argocd_patch_embeds_the_tested_health_script() {
    let dir = redlock_testenv::controlplane::repo_root().join("examples/argocd");
    let script = std::fs::read_to_string(dir.join("health.lua")).unwrap();
    let patch: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("argocd-cm-patch.yaml")).unwrap()).unwrap();
    let embedded = patch["data"]["resource.customizations.health.redlock.dev_RedlockCluster"]
        .as_str()
        .expect("the health check key");
    assert_eq!(embedded, script);
}
