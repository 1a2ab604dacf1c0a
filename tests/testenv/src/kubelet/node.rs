//! The fake nodes: registration, lease renewal and status reports.
//!
//! The node lifecycle controller of kube-controller-manager judges node health by the
//! Lease in `kube-node-lease` (and the Ready condition's heartbeat). A lost node simply
//! stops renewing both, and the real controller marks it NotReady/unreachable, taints it
//! and evicts its pods exactly as in a cluster.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tracing::warn;

use super::Shared;
use super::env::{NODE_CPU, NODE_EPHEMERAL_STORAGE, NODE_MEMORY};

/// How long a lease stays valid without renewal (the kubelet's default).
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// Taint the API server puts on a new node until the node lifecycle controller sees it Ready.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// The identity of one fake node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    pub name: String,
    pub ip: Ipv4Addr,
    pub zone: String,
}

/// The nodes of a kubelet configuration: `<prefix>-<i>` at 127.B.0.(i+1), zones round-robin.
pub fn identities(prefix: &str, count: usize, zones: &[String], block: u8) -> Vec<NodeIdentity> {
    (0..count)
        .map(|i| NodeIdentity {
            name: format!("{prefix}-{i}"),
            ip: Ipv4Addr::new(127, block, 0, (i + 1) as u8),
            zone: if zones.is_empty() {
                String::new()
            } else {
                zones[i % zones.len()].clone()
            },
        })
        .collect()
}

pub fn node_object(id: &NodeIdentity) -> Node {
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), id.name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        (
            "kubernetes.io/arch".to_string(),
            std::env::consts::ARCH.replace("x86_64", "amd64"),
        ),
    ]);
    if !id.zone.is_empty() {
        labels.insert("topology.kubernetes.io/zone".into(), id.zone.clone());
    }
    Node {
        metadata: ObjectMeta {
            name: Some(id.name.clone()),
            labels: Some(labels),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn node_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    since: Timestamp,
    now: Timestamp,
) -> NodeCondition {
    NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(since)),
    }
}

/// The node's status at `now`; `ready_since` is when it last became Ready.
pub fn node_status(
    id: &NodeIdentity,
    kubelet_version: &str,
    ready_since: Timestamp,
    now: Timestamp,
) -> NodeStatus {
    let resources = BTreeMap::from([
        ("cpu".to_string(), Quantity(NODE_CPU.into())),
        ("memory".to_string(), Quantity(NODE_MEMORY.into())),
        (
            "ephemeral-storage".to_string(),
            Quantity(NODE_EPHEMERAL_STORAGE.into()),
        ),
        ("pods".to_string(), Quantity("110".into())),
    ]);
    let c = |t: &str, s: &str, r: &str, m: &str| node_condition(t, s, r, m, ready_since, now);
    NodeStatus {
        capacity: Some(resources.clone()),
        allocatable: Some(resources),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: id.ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: id.name.clone(),
            },
        ]),
        conditions: Some(vec![
            c(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            c(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            c(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            c(
                "Ready",
                "True",
                "KubeletReady",
                "process kubelet is posting ready status",
            ),
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: std::env::consts::ARCH.replace("x86_64", "amd64"),
            boot_id: format!("process-kubelet-{}", id.name),
            container_runtime_version: "process://1.0.0".into(),
            kernel_version: kernel_version(),
            kube_proxy_version: String::new(),
            kubelet_version: kubelet_version.into(),
            machine_id: format!("process-kubelet-{}", id.name),
            operating_system: "linux".into(),
            os_image: "redlock envtest process kubelet".into(),
            system_uuid: format!("process-kubelet-{}", id.name),
            swap: None,
        }),
        ..Default::default()
    }
}

fn kernel_version() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| r.trim().to_string())
        .unwrap_or_default()
}

pub fn lease_object(node: &str, node_uid: Option<String>, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(node.into()),
            namespace: Some("kube-node-lease".into()),
            owner_references: node_uid.map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: node.into(),
                    uid,
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node.into()),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// Creates the Node (or takes over an existing one of the same name) and reports status.
pub async fn register(
    client: &kube::Client,
    id: &NodeIdentity,
    kubelet_version: &str,
    ready_since: Timestamp,
) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = node_object(id);
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_already_exists() => {
            let labels = json!({ "metadata": { "labels": node.metadata.labels } });
            nodes
                .patch(&id.name, &PatchParams::default(), &Patch::Merge(labels))
                .await
                .with_context(|| format!("update node {}", id.name))?;
        }
        Err(e) => return Err(e).with_context(|| format!("register node {}", id.name)),
    }
    report_status(client, id, kubelet_version, ready_since).await?;
    renew_lease(client, &id.name).await
}

pub async fn report_status(
    client: &kube::Client,
    id: &NodeIdentity,
    kubelet_version: &str,
    ready_since: Timestamp,
) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let status = node_status(id, kubelet_version, ready_since, Timestamp::now());
    nodes
        .patch_status(
            &id.name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .with_context(|| format!("report status of node {}", id.name))?;
    Ok(())
}

/// Renews the node's lease, creating it when missing.
pub async fn renew_lease(client: &kube::Client, node: &str) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let now = Timestamp::now();
    let renew = json!({ "spec": { "renewTime": MicroTime(now), "holderIdentity": node } });
    match leases
        .patch(node, &PatchParams::default(), &Patch::Merge(&renew))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => {
            let uid = Api::<Node>::all(client.clone()).get(node).await?.metadata.uid;
            match leases
                .create(&PostParams::default(), &lease_object(node, uid, now))
                .await
            {
                Ok(_) => Ok(()),
                // Created meanwhile: a node's restore and its heartbeat both renew the lease
                // of a node that comes back after its Node (and lease) were deleted.
                Err(kube::Error::Api(s)) if s.is_already_exists() => leases
                    .patch(node, &PatchParams::default(), &Patch::Merge(&renew))
                    .await
                    .map(|_| ())
                    .with_context(|| format!("renew lease of node {node}")),
                Err(e) => Err(e).with_context(|| format!("create lease of node {node}")),
            }
        }
        Err(e) => Err(e).with_context(|| format!("renew lease of node {node}")),
    }
}

/// How often a node's status (condition heartbeats) is reported; the kubelet's default
/// `nodeStatusUpdateFrequency` is 10s.
pub const STATUS_INTERVAL: Duration = Duration::from_secs(10);

/// Renews leases every `lease_interval` and reports status every `STATUS_INTERVAL`, for
/// every node that is not lost, until aborted. Each node on its own (as each real kubelet
/// is): one after the other, a slow API server (seconds per request at 600 pods on 2 cores)
/// made a round over 7 nodes outlast the node monitor grace period, and the node lifecycle
/// controller marked healthy nodes NotReady and their pods not Ready.
pub async fn run_heartbeats(shared: Arc<Shared>) {
    futures::future::join_all(shared.nodes.iter().map(|id| heartbeats(&shared, id))).await;
}

async fn heartbeats(shared: &Shared, id: &NodeIdentity) {
    // Registration just renewed and reported.
    let mut lease_renewed = Instant::now();
    let mut status_reported = Instant::now();
    let step = shared
        .config
        .lease_interval
        .min(STATUS_INTERVAL)
        .min(Duration::from_secs(1));
    loop {
        tokio::time::sleep(step).await;
        if shared.is_lost(&id.name) {
            continue;
        }
        if lease_renewed.elapsed() >= shared.config.lease_interval {
            match renew_lease(&shared.client, &id.name).await {
                Ok(()) => lease_renewed = Instant::now(),
                Err(e) => warn!("{e:#}"),
            }
        }
        if status_reported.elapsed() >= STATUS_INTERVAL {
            let since = shared.ready_since(&id.name);
            match report_status(&shared.client, id, &shared.kubelet_version, since).await {
                Ok(()) => status_reported = Instant::now(),
                Err(e) => warn!("{e:#}"),
            }
        }
    }
}

/// Whether the node is Ready and the scheduler may use it (the not-ready taint is gone).
pub fn schedulable(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == NOT_READY_TAINT));
    ready && !tainted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_spread_over_zones() {
        let zones = vec!["a".to_string(), "b".to_string()];
        let ids = identities("node", 3, &zones, 9);
        assert_eq!(ids[2].name, "node-2");
        assert_eq!(ids[2].ip, Ipv4Addr::new(127, 9, 0, 3));
        let zs: Vec<&str> = ids.iter().map(|i| i.zone.as_str()).collect();
        assert_eq!(zs, ["a", "b", "a"]);
    }

    #[test]
    fn node_has_the_required_labels_and_status() {
        let id = &identities("n", 1, &["z1".into()], 4)[0];
        let node = node_object(id);
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], "n-0");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["topology.kubernetes.io/zone"], "z1");
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let t1 = Timestamp::from_second(1_700_000_100).unwrap();
        let status = node_status(id, "v1.33.0", t0, t1);
        assert_eq!(
            status.capacity.as_ref().unwrap()["memory"],
            Quantity("32Gi".into())
        );
        let ready = status
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(ready.last_heartbeat_time, Some(Time(t1)));
        assert_eq!(ready.last_transition_time, Some(Time(t0)));
        assert_eq!(status.addresses.unwrap()[0].address, "127.4.0.1");
    }
}
