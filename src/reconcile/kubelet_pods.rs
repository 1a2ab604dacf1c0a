//! Asking the kubelet of the node a vanished pod ran on whether it still runs a container of
//! that pod: the kubelet's own list of what its container runtime runs (`/runningpods/`,
//! through the API server's node proxy; RBAC `nodes/proxy` `get`). A kubelet that answers and
//! lists no container of the pod is positive evidence that the pod's process is gone, which a
//! probe that times out never is (docs/design.md §9.5). A kubelet that cannot be reached (its
//! node cut off, deleted, or not answering in time) proves nothing.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::core::ObjectList;

use crate::crd::UnstoppedProcess;
use crate::decide::observe::KubeletAnswer;

/// What the kubelet of `u`'s node says of `u`'s pod, within `timeout`.
pub(crate) async fn ask(client: &kube::Client, u: &UnstoppedProcess, timeout: Duration) -> KubeletAnswer {
    let (Some(node), Some(uid)) = (&u.node, &u.pod_uid) else {
        return KubeletAnswer::NotAsked;
    };
    // The name comes from the status, which others can write: only a node name (a DNS
    // subdomain) may become part of the path, never a way to another resource's list.
    if !is_node_name(node) {
        return KubeletAnswer::Unknown(format!("{node:?} is not a node name"));
    }
    let request = match http::Request::get(format!("/api/v1/nodes/{node}/proxy/runningpods/")).body(vec![]) {
        Ok(r) => r,
        Err(e) => return KubeletAnswer::Unknown(e.to_string()),
    };
    match tokio::time::timeout(timeout, client.request::<ObjectList<Pod>>(request)).await {
        Err(_) => KubeletAnswer::Unknown(format!("no answer within {} ms", timeout.as_millis())),
        Ok(Err(e)) => KubeletAnswer::Unknown(e.to_string()),
        Ok(Ok(pods)) => runs(&pods.items, uid),
    }
}

/// The taint of Kubernetes' non-graceful node shutdown: whoever sets it asserts the node is
/// shut down (its processes dead), and the pods on it are deleted at once.
pub(crate) const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// Whether `u`'s node carries [`OUT_OF_SERVICE`] (read with a GET; RBAC `nodes` `get`). Not
/// found, unreadable or not in time: no.
pub(crate) async fn out_of_service(client: &kube::Client, u: &UnstoppedProcess, timeout: Duration) -> bool {
    let Some(node) = u.node.as_deref().filter(|n| is_node_name(n)) else {
        return false;
    };
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    match tokio::time::timeout(timeout, nodes.get_opt(node)).await {
        Ok(Ok(Some(n))) => tainted(&n),
        _ => false,
    }
}

/// Whether `node` carries [`OUT_OF_SERVICE`] (any effect).
fn tainted(node: &k8s_openapi::api::core::v1::Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == OUT_OF_SERVICE))
}

/// Whether `pods` (a kubelet's running pods) hold one with `uid`.
fn runs(pods: &[Pod], uid: &str) -> KubeletAnswer {
    if pods.iter().any(|p| p.metadata.uid.as_deref() == Some(uid)) {
        KubeletAnswer::Runs
    } else {
        KubeletAnswer::RunsNone
    }
}

/// A lowercase RFC 1123 subdomain, as node names are.
fn is_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !name.starts_with(['-', '.'])
        && !name.contains("..")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p
    }

    #[test]
    fn a_kubelet_that_lists_the_pod_runs_it_and_one_that_does_not_runs_none() {
        assert_eq!(runs(&[pod("a"), pod("b")], "b"), KubeletAnswer::Runs);
        assert_eq!(runs(&[pod("a")], "b"), KubeletAnswer::RunsNone);
        assert_eq!(runs(&[], "b"), KubeletAnswer::RunsNone);
    }

    #[test]
    fn the_out_of_service_taint_is_read_whatever_its_effect() {
        use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
        let node = |keys: &[&str]| Node {
            spec: Some(NodeSpec {
                taints: Some(
                    keys.iter()
                        .map(|k| Taint {
                            key: (*k).into(),
                            effect: "NoExecute".into(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(tainted(&node(&["a", OUT_OF_SERVICE])));
        assert!(!tainted(&node(&["node.kubernetes.io/unreachable"])));
        assert!(!tainted(&Node::default()));
    }

    #[test]
    fn only_node_names_become_part_of_the_proxy_path() {
        for ok in ["node-1", "ip-10-0-0-1.ec2.internal", "n"] {
            assert!(is_node_name(ok), "{ok}");
        }
        for bad in ["", "../pods", "a/b", "Node", "-x", ".x", "a..b", "x?y", "x%2F"] {
            assert!(!is_node_name(bad), "{bad}");
        }
    }
}
