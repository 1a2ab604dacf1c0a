//! Where everything of a real-node control plane lives: its addresses, interface names,
//! cgroup roots and directories. Pure, so that the plan can be checked without starting
//! anything.
//!
//! A control plane owns the block 10.B.0.0/16, B being its [`IpBlock`](crate::controlplane::IpBlock)
//! octet (unique among the control planes running on this machine):
//!
//! | what | address |
//! |---|---|
//! | node i's IP (a veth end in the control plane's network namespace) | 10.B.250.(i+1) |
//! | node i's pod subnet (its CNI bridge) | 10.B.(i+1).0/24 |
//! | Service ClusterIPs | 10.B.224.0/20 |
//! | the API server, for pods (the run's end of the link to the nodes' namespace) | 10.B.255.1/30 |
//! | the nodes' namespace's end of that link, their default gateway's peer | 10.B.255.2/30 |
//!
//! The nodes live in a network namespace of their own, `rlcpB` ([`super::node_network`]).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// First octet of every real-node address; these never leave the run's network namespace.
const NET: u8 = 10;

/// Addresses, names and directories of one control plane's real nodes.
#[derive(Debug, Clone)]
pub struct Layout {
    pub block: u8,
    pub dir: PathBuf,
}

/// One node of a [`Layout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLayout {
    pub index: usize,
    pub name: String,
    pub zone: String,
    pub ip: Ipv4Addr,
    pub pod_subnet: String,
    pub gateway: Ipv4Addr,
    /// Host end of the node's veth pair (holds `ip`) and its peer.
    pub veth: String,
    pub veth_peer: String,
    pub bridge: String,
    /// The kubelet's `cgroupRoot`, relative to each cgroup v1 hierarchy's root.
    pub cgroup_root: String,
    pub dir: PathBuf,
}

impl NodeLayout {
    pub fn containerd_socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }
    pub fn containerd_root(&self) -> PathBuf {
        self.dir.join("containerd-root")
    }
    pub fn containerd_state(&self) -> PathBuf {
        self.dir.join("containerd-state")
    }
    pub fn runc_root(&self) -> PathBuf {
        self.dir.join("runc")
    }
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("cni-conf")
    }
    pub fn ipam_dir(&self) -> PathBuf {
        self.dir.join("cni-ipam")
    }
    pub fn kubelet_root(&self) -> PathBuf {
        self.dir.join("kubelet")
    }
    /// The node's wall clock as libfaketime reads it (`offset` in it: "+0", "+30s", ...),
    /// bound read-only into every container at [`super::config::NODE_CLOCK_DIR`].
    pub fn clock_dir(&self) -> PathBuf {
        self.dir.join("clock")
    }
    /// The OCI spec every container of the node starts from (containerd's default plus the
    /// clock's bind mount).
    pub fn base_runtime_spec(&self) -> PathBuf {
        self.dir.join("base-runtime-spec.json")
    }
    pub fn pod_logs(&self) -> PathBuf {
        self.dir.join("pod-logs")
    }
}

impl Layout {
    pub fn new(block: u8, dir: &Path) -> Self {
        Self {
            block,
            dir: dir.to_owned(),
        }
    }

    /// `count` nodes named `node-0` …, spread round-robin over `zones`.
    pub fn nodes(&self, count: usize, zones: &[String]) -> Vec<NodeLayout> {
        (0..count)
            .map(|i| {
                let subnet_octet = u8::try_from(i + 1).expect("at most 200 nodes");
                NodeLayout {
                    index: i,
                    name: format!("node-{i}"),
                    zone: zones
                        .get(i % zones.len().max(1))
                        .cloned()
                        .unwrap_or_else(|| "zone-a".into()),
                    ip: Ipv4Addr::new(NET, self.block, 250, subnet_octet),
                    pod_subnet: format!("{NET}.{}.{subnet_octet}.0/24", self.block),
                    gateway: Ipv4Addr::new(NET, self.block, subnet_octet, 1),
                    // Interface names have at most 15 bytes: "rlv250n199p" is 11.
                    veth: format!("rlv{}n{i}", self.block),
                    veth_peer: format!("rlv{}n{i}p", self.block),
                    bridge: format!("rlbr{}n{i}", self.block),
                    cgroup_root: format!("/redlock-envtest-{}-{}", self.block, i),
                    dir: self.dir.join(format!("nodes/node-{i}")),
                }
            })
            .collect()
    }

    /// The Service ClusterIP range (`--service-cluster-ip-range`).
    pub fn service_range(&self) -> String {
        format!("{NET}.{}.224.0/20", self.block)
    }

    /// The first ClusterIP: the `kubernetes` Service, which the API server's certificate names.
    pub fn kubernetes_service_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(NET, self.block, 224, 1)
    }

    /// Where pods and nodes reach the API server (the `kubernetes` Service's endpoint): the
    /// run's end of the link to the nodes' network namespace.
    pub fn api_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(NET, self.block, 255, 1)
    }

    /// The nodes' namespace's end of that link: the run's namespace routes the whole block
    /// through it.
    pub fn node_network_gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(NET, self.block, 255, 2)
    }

    /// The link between the run's namespace and the nodes': (run's end, nodes' end).
    pub fn api_veth(&self) -> (String, String) {
        (format!("rlv{}api", self.block), format!("rlv{}apip", self.block))
    }

    /// The nodes' network namespace (under `/run/netns`).
    pub fn netns_name(&self) -> String {
        format!("rlcp{}", self.block)
    }

    /// Every address of this control plane (`clusterCIDR` of kube-proxy).
    pub fn cluster_cidr(&self) -> String {
        format!("{NET}.{}.0.0/16", self.block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_get_distinct_addresses_names_and_cgroups_within_the_block_and_a_link_of_their_own() {
        let l = Layout::new(42, Path::new("/x"));
        let zones = vec!["a".to_string(), "b".to_string()];
        let nodes = l.nodes(5, &zones);
        assert_eq!(nodes[0].ip, Ipv4Addr::new(10, 42, 250, 1));
        assert_eq!(nodes[4].pod_subnet, "10.42.5.0/24");
        assert_eq!(nodes[4].gateway, Ipv4Addr::new(10, 42, 5, 1));
        assert_eq!(nodes[2].zone, "a");
        assert_eq!(nodes[3].zone, "b");
        for field in [
            |n: &NodeLayout| n.veth.clone(),
            |n: &NodeLayout| n.veth_peer.clone(),
            |n: &NodeLayout| n.bridge.clone(),
            |n: &NodeLayout| n.cgroup_root.clone(),
            |n: &NodeLayout| n.ip.to_string(),
        ] {
            let values: std::collections::BTreeSet<String> = nodes.iter().map(field).collect();
            assert_eq!(values.len(), 5);
        }
        let worst = Layout::new(250, Path::new("/x")).nodes(200, &zones);
        assert!(
            worst
                .iter()
                .all(|n| n.veth_peer.len() <= 15 && n.bridge.len() <= 15)
        );
        // Pod subnets and node IPs stay clear of the Service range (10.B.224.0/20).
        assert!(
            worst
                .iter()
                .all(|n| n.gateway.octets()[2] < 224 && n.ip.octets()[2] > 239)
        );
        // The link to the nodes' namespace is one /30 of its own, outside every node's subnet,
        // the node IPs and the Service range, and its namespace name fits `ip netns`.
        let l = Layout::new(250, Path::new("/x"));
        assert_eq!(l.api_ip(), Ipv4Addr::new(10, 250, 255, 1));
        assert_eq!(l.node_network_gateway(), Ipv4Addr::new(10, 250, 255, 2));
        assert!(
            worst
                .iter()
                .all(|n| n.ip.octets()[2] != 255 && n.gateway.octets()[2] != 255)
        );
        assert_eq!(l.netns_name(), "rlcp250");
        let (run_end, nodes_end) = l.api_veth();
        assert!(run_end.len() <= 15 && nodes_end.len() <= 15 && run_end != nodes_end);
    }
}
