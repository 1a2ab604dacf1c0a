//! The control plane's one kube-proxy (its nodes share one network namespace, and a second
//! kube-proxy would rewrite the same iptables chains), kept running the way a DaemonSet keeps
//! a node's: started again whenever it exits ([`Restarting`]).
//!
//! kube-proxy exits by design when the Node it runs as is deleted or changes its addresses
//! (`NodeManager.OnNodeDelete` in pkg/proxy/node.go), and a test that deletes a node
//! (`partition-delete-node`) did exactly that. Unsupervised, the iptables rules it had written
//! stayed but nothing followed the Services any more: a Service created again got a ClusterIP
//! that led nowhere, and a 150-fault real-node safety run went 38 minutes without a lock.
//!
//! Each start runs as the next node of the list: the node it ran as was most likely deleted,
//! and kube-proxy waits up to 30 s at start for its Node to exist before it writes any rule.
//! Which node it runs as matters little: the name gives it the node IPs for NodePorts, which
//! no test uses; the Services' rules are the same for every node.

use std::path::PathBuf;

use anyhow::{Result, bail};

use super::config;
use super::layout::Layout;
use super::node_network::Netns;
use crate::procs::{ManagedChild, free_port};
use crate::restarting::Restarting;

/// What starting kube-proxy needs.
pub struct KubeProxySpec {
    pub netns: Netns,
    pub binary: PathBuf,
    /// Its directory: kubeconfig, config.yaml, kube-proxy.log.
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub layout: Layout,
    /// The nodes it may run as, in the order it takes them.
    pub node_names: Vec<String>,
}

/// Starts kube-proxy as the first node of `spec.node_names`, and again as the next one each
/// time it exits.
pub fn start(spec: KubeProxySpec) -> Result<Restarting> {
    if spec.node_names.is_empty() {
        bail!("kube-proxy needs a node to run as");
    }
    let log = spec.dir.join("kube-proxy.log");
    let spawn_log = log.clone();
    Restarting::start(
        "kube-proxy",
        log,
        Box::new(move |start| {
            let node = node_for_start(&spec.node_names, start);
            let conf = spec.dir.join("config.yaml");
            std::fs::write(
                &conf,
                config::kube_proxy_yaml(&spec.layout, &spec.kubeconfig, node, free_port()?),
            )?;
            let mut cmd = spec.netns.command(&spec.binary);
            cmd.arg(format!("--config={}", conf.display()));
            ManagedChild::spawn("kube-proxy", cmd, &spawn_log)
        }),
    )
}

/// The node start number `start` runs as: the list in turn.
pub(crate) fn node_for_start(nodes: &[String], start: u32) -> &str {
    &nodes[start as usize % nodes.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_start_runs_as_the_next_node() {
        let nodes: Vec<String> = ["node-0", "node-1", "node-2"].map(String::from).to_vec();
        let names: Vec<&str> = (0..5).map(|s| node_for_start(&nodes, s)).collect();
        assert_eq!(names, ["node-0", "node-1", "node-2", "node-0", "node-1"]);
    }
}
