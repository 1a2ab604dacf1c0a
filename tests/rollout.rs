//! Spec changes, drains and failure-domain loss without losing quorum (issue #8), on the
//! local control plane with kube-scheduler, process-kubelet nodes over three zones, and the
//! controller-manager's disruption and node-lifecycle controllers.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use redlock_operator::crd::{MemberState, RedlockCluster};
use serde_json::json;
use support::*;

const NAME: &str = "locks";

/// What a watcher saw of the cluster, sampled every 50 ms.
#[derive(Default)]
struct Samples {
    count: usize,
    min_ready: i32,
    max_not_serving: i32,
    available_false: usize,
    /// Per slot, every (state, runId) the slot went through.
    states: BTreeMap<i32, Vec<(MemberState, Option<String>)>>,
}

/// Samples the cluster's status until dropped.
struct Monitor {
    samples: Arc<Mutex<Samples>>,
    task: tokio::task::JoinHandle<()>,
}

impl Monitor {
    fn start(api: Api<RedlockCluster>, instances: i32) -> Self {
        let samples = Arc::new(Mutex::new(Samples {
            min_ready: i32::MAX,
            ..Default::default()
        }));
        let s = samples.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok(c) = api.get(NAME).await
                    && let Some(st) = c.status
                {
                    let mut s = s.lock().unwrap();
                    s.count += 1;
                    let ready = st.ready_instances.unwrap_or(0);
                    s.min_ready = s.min_ready.min(ready);
                    s.max_not_serving = s.max_not_serving.max(instances - ready);
                    if st
                        .conditions
                        .iter()
                        .any(|c| c.type_ == "Available" && c.status != "True")
                    {
                        s.available_false += 1;
                    }
                    for m in st.members {
                        let seen = s.states.entry(m.slot).or_default();
                        let entry = (m.state, m.run_id.clone());
                        if seen.last() != Some(&entry) {
                            seen.push(entry);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Self { samples, task }
    }

    async fn stop(self) -> Samples {
        self.task.abort();
        // Wait until the aborted task has dropped its handle on the samples.
        let _ = self.task.await;
        Arc::try_unwrap(self.samples)
            .ok()
            .map(|m| m.into_inner().unwrap())
            .unwrap_or_else(|| panic!("monitor still shared"))
    }
}

async fn pods(env: &Env) -> Vec<Pod> {
    env.pods().list(&ListParams::default()).await.unwrap().items
}

fn held_then_ready(states: &[(MemberState, Option<String>)]) -> bool {
    let held = states.iter().position(|(s, _)| *s == MemberState::Held);
    held.is_some_and(|h| states[h..].iter().any(|(s, _)| *s == MemberState::Ready))
}

#[tokio::test]
async fn image_change_replaces_one_member_at_a_time_each_held() {
    let env = Env::start(5).await;
    env.create_cluster(
        NAME,
        json!({"instances": 5, "maxLockTTL": "2s", "holdMargin": "0s"}),
    )
    .await;
    env.wait_ready(NAME, 5, Duration::from_secs(30)).await;
    let before: BTreeMap<String, String> = pods(&env)
        .await
        .into_iter()
        .map(|p| (p.name_any(), p.uid().unwrap()))
        .collect();

    let monitor = Monitor::start(env.clusters(), 5);
    let started = Instant::now();
    env.clusters()
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": "redis:7.2"}})),
        )
        .await
        .unwrap();
    // Visible in `kubectl get -o wide` and the Progressing condition while it runs.
    wait_for("rollout visible", Duration::from_secs(10), async || {
        let c = env.cluster(NAME).await;
        Ok(c.status
            .unwrap()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Progressing" && c.reason == "RollingUpdate"))
    })
    .await;
    let wide = env.kubectl(&["get", "rlc", NAME, "-o", "wide"]).await;
    assert!(wide.contains("UPDATED"), "{wide}");

    wait_for("rollout done", Duration::from_secs(120), async || {
        let s = env.cluster(NAME).await.status.unwrap_or_default();
        Ok((s.updated_instances == Some(5) && s.ready_instances == Some(5)).then_some(()))
    })
    .await;
    let took = started.elapsed();
    let samples = monitor.stop().await;
    println!("rollout of 5 took {took:?} over {} samples", samples.count);

    // Every pod was replaced and runs the new image.
    for p in pods(&env).await {
        assert_ne!(
            before.get(&p.name_any()),
            p.uid().as_ref(),
            "{} not replaced",
            p.name_any()
        );
        assert_eq!(p.spec.unwrap().containers[0].image.as_deref(), Some("redis:7.2"));
    }
    // Never more than one member out, so never below quorum (3), never unavailable.
    assert!(samples.count > 20, "too few samples: {}", samples.count);
    assert_eq!(samples.max_not_serving, 1, "min ready {}", samples.min_ready);
    assert_eq!(samples.available_false, 0);
    // Each replacement was held before it served.
    for slot in 0..5 {
        let states = &samples.states[&slot];
        assert!(held_then_ready(states), "slot {slot}: {states:?}");
    }
    let (_, metrics) = env.operator.get("/metrics").await.unwrap();
    let line = format!(
        "redlock_hold_length_seconds_count{{namespace=\"{}\",cluster=\"{NAME}\"}} 5",
        env.ns
    );
    assert!(metrics.contains(&line), "missing {line} in\n{metrics}");
    let describe = env.kubectl(&["describe", "rlc", NAME]).await;
    assert!(describe.contains("RollingReplacement"), "{describe}");
}

#[tokio::test]
async fn drain_moves_members_one_at_a_time() {
    // 3 members on 5 nodes: two spare nodes to move to.
    let env = Env::start(5).await;
    env.create_cluster(
        NAME,
        json!({"instances": 3, "maxLockTTL": "2s", "holdMargin": "0s"}),
    )
    .await;
    env.wait_ready(NAME, 3, Duration::from_secs(30)).await;
    let nodes: BTreeSet<String> = pods(&env)
        .await
        .into_iter()
        .filter_map(|p| p.spec?.node_name)
        .collect();
    let drained: Vec<String> = nodes.into_iter().take(2).collect();

    let monitor = Monitor::start(env.clusters(), 3);
    let mut args = vec!["drain"];
    args.extend(drained.iter().map(String::as_str));
    args.extend(["--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s"]);
    let out = env.kubectl(&args).await;
    println!("{out}");
    env.wait_ready(NAME, 3, Duration::from_secs(60)).await;
    let samples = monitor.stop().await;

    for p in pods(&env).await {
        let node = p.spec.clone().unwrap().node_name.unwrap();
        assert!(
            !drained.contains(&node),
            "{} still on drained node {node}",
            p.name_any()
        );
    }
    assert!(samples.count > 20);
    assert_eq!(
        samples.max_not_serving, 1,
        "quorum kept, one member moving at a time"
    );
    assert_eq!(samples.available_false, 0);
    let moved = samples.states.values().filter(|s| held_then_ready(s)).count();
    assert_eq!(moved, 2, "{:?}", samples.states);
}

#[tokio::test]
async fn zone_loss_with_spread_zone_keeps_the_lock_service() {
    // 6 nodes over zones a, b, c (two each); 5 members spread by zone: 2, 2, 1.
    let env = Env::start(6).await;
    env.create_cluster(
        NAME,
        json!({"instances": 5, "maxLockTTL": "2s", "holdMargin": "0s", "scheduling": {"spread": "zone"}}),
    )
    .await;
    env.wait_ready(NAME, 5, Duration::from_secs(30)).await;
    let c = wait_for("failure domains", Duration::from_secs(10), async || {
        let c = env.cluster(NAME).await;
        Ok(c.status
            .clone()
            .unwrap()
            .failure_domains
            .filter(|d| d.nodes.len() == 5)
            .map(|_| c))
    })
    .await;
    let status = c.status.unwrap();
    let domains = status.failure_domains.unwrap();
    assert_eq!(
        domains.zones.values().copied().collect::<BTreeSet<_>>(),
        BTreeSet::from([1, 2])
    );
    assert_eq!(domains.tolerated_zone_failures, Some(1));
    let fi = status
        .conditions
        .iter()
        .find(|c| c.type_ == "FailureIndependence")
        .unwrap();
    assert_eq!(fi.status, "True", "{}", fi.message);
    assert!(fi.message.contains("any 1 zone(s)"), "{}", fi.message);

    // Lose every node of a zone that runs two members.
    let zone = domains.zones.iter().find(|(_, n)| **n == 2).unwrap().0.clone();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.cp.client());
    let zone_nodes: Vec<String> = nodes
        .list(&ListParams::default().labels(&format!("topology.kubernetes.io/zone={zone}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| n.name_any())
        .collect();
    let monitor = Monitor::start(env.clusters(), 5);
    for n in &zone_nodes {
        env.cp.kubelet().lose_node(n).await.unwrap();
    }
    // Until the node lifecycle controller marks the pods not Ready (grace period ~8 s), and a
    // while after: the lock service stays Available with the other three members.
    wait_for(
        "members of the lost zone not ready",
        Duration::from_secs(40),
        async || {
            let s = env.cluster(NAME).await.status.unwrap_or_default();
            Ok((s.ready_instances == Some(3)).then_some(()))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let samples = monitor.stop().await;
    assert_eq!(
        samples.available_false, 0,
        "Available flipped during the zone loss"
    );
    assert!(samples.min_ready >= 3);
    let degraded = env
        .cluster(NAME)
        .await
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap();
    assert_eq!(degraded.status, "True");
    assert!(
        degraded.message.contains("0 more can fail"),
        "{}",
        degraded.message
    );
}
