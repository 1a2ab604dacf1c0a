//! Faults on the nodes of a control plane, whichever runtime runs them: the process kubelet
//! or real nodes. Tests that must run on both (the safety suite) inject faults through this.

use anyhow::Result;
use nix::sys::signal::Signal;

use crate::kubelet::ProcessKubelet;
use crate::nodes::RealNodes;

/// The nodes of a running control plane.
pub enum Nodes<'a> {
    Process(&'a ProcessKubelet),
    Real(&'a RealNodes),
}

impl Nodes<'_> {
    pub fn node_names(&self) -> Vec<String> {
        match self {
            Self::Process(k) => k.node_names(),
            Self::Real(r) => r.node_names(),
        }
    }

    /// The PID of the pod's first container's main process, while it runs.
    pub async fn pid(&self, namespace: &str, pod: &str) -> Result<u32> {
        match self {
            Self::Process(k) => k
                .pid(namespace, pod)
                .ok_or_else(|| anyhow::anyhow!("pod {namespace}/{pod} has no running container")),
            Self::Real(r) => r.pid(namespace, pod).await,
        }
    }

    /// `kill -SIG` of the pod's first container's main process, as on its node.
    pub async fn signal_pod(&self, namespace: &str, pod: &str, sig: Signal) -> Result<()> {
        match self {
            Self::Process(k) => k.signal_pod(namespace, pod, sig),
            Self::Real(r) => r.signal_pod(namespace, pod, sig).await,
        }
    }

    /// The node is cut off from the API server; its pods' processes keep serving.
    pub fn partition_node(&self, node: &str) -> Result<()> {
        match self {
            Self::Process(k) => k.partition_node(node),
            Self::Real(r) => r.partition_node(node),
        }
    }

    pub async fn heal_node(&self, node: &str) -> Result<()> {
        match self {
            Self::Process(k) => k.heal_node(node).await,
            Self::Real(r) => r.heal_node(node),
        }
    }

    /// The partition ends for a node whose Node object was deleted meanwhile. A real kubelet
    /// registers its Node only when it starts, so the node's kubelet starts anew: it registers
    /// the Node again and kills the containers of pods deleted meanwhile (their processes kept
    /// serving through the partition).
    pub async fn rejoin_node(&self, node: &str) -> Result<()> {
        match self {
            // Its restore registers the Node again when it is missing.
            Self::Process(k) => k.heal_node(node).await,
            Self::Real(r) => r.restore_node(node).await,
        }
    }

    /// The node and its pods' processes die.
    pub async fn lose_node(&self, node: &str) -> Result<()> {
        match self {
            Self::Process(k) => k.lose_node(node).await,
            Self::Real(r) => r.lose_node(node),
        }
    }

    pub async fn restore_node(&self, node: &str) -> Result<()> {
        match self {
            Self::Process(k) => k.restore_node(node).await,
            Self::Real(r) => r.restore_node(node).await,
        }
    }

    /// Steps the wall clock of every Redis process on `node` to `offset` from true time (a
    /// libfaketime offset such as "+30s"): on the process kubelet started with `node_clocks`,
    /// and on real nodes for the processes of the `redis:7.0-faketime` image
    /// ([`crate::nodes::FAKETIME_IMAGE`]).
    pub fn set_node_clock(&self, node: &str, offset: &str) -> Result<()> {
        match self {
            Self::Process(k) => k.set_node_clock(node, offset),
            Self::Real(r) => r.set_node_clock(node, offset),
        }
    }
}
