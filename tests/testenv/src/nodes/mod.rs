//! Real nodes: per node a containerd, a kubelet v1.37 and a CNI bridge with its own pod
//! subnet, plus one kube-proxy, all inside the run's own namespaces ([`namespace`]) and there
//! in a network namespace of their control plane's ([`node_network`]). Pods
//! run in real containers from locally built images (tests/nodes/images.sh); faults use the
//! real processes: a container's PID comes from containerd, a partition is a stopped kubelet
//! whose containers keep serving, a lost node is a killed kubelet with its containers.
//!
//! Layout: `layout` (addresses and names, pure), `config` (config files, pure), `namespace`
//! (the run's namespaces), `node_network` (a control plane's network namespace), `cgroups`
//! (cgroup roots), `node` (one node's processes), `images` (which built images nodes import),
//! `kube_proxy` (the one kube-proxy, started again when it exits),
//! `port_forward` (a port outside forwarded into the namespaces, for `make demo`).

pub mod cgroups;
pub mod config;
mod device_plugin_socket;
pub mod images;
pub mod kube_proxy;
pub mod layout;
pub mod namespace;
mod node;
pub mod node_network;
pub mod port_forward;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use nix::sys::signal::Signal;
use tracing::info;

use crate::certs::Pki;
use crate::restarting::Restarting;
use layout::{Layout, NodeLayout};
use node::RealNode;
use node_network::Netns;

/// The test image whose Redis follows its node's clock (`RealNodes::set_node_clock`):
/// redis 7.0 built with libc's malloc, under libfaketime (tests/nodes/images.py).
pub const FAKETIME_IMAGE: &str = "redis:7.0-faketime";

/// Kernel settings the kubelet changes machine-wide at start (`setupKernelTunables`); they
/// are put back when the nodes stop.
const KUBELET_SYSCTLS: &[&str] = &["vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"];

/// What to start.
#[derive(Debug, Clone)]
pub struct RealNodesConfig {
    pub nodes: usize,
    pub zones: Vec<String>,
    pub layout: Layout,
    /// The API server as the nodes' network namespace reaches it.
    pub api_url: String,
    /// The control plane's network namespace: kubelets, containerds, kube-proxy, bridges.
    pub netns: Netns,
    pub pki: Pki,
    /// kubelet, kube-proxy, containerd, containerd-shim-runc-v2, ctr, runc.
    pub bin_dir: PathBuf,
    /// CNI plugins (bridge, host-local, loopback, portmap).
    pub cni_bin: PathBuf,
    /// Image tarballs imported into every node's containerd ([`images::node_image_tarballs`]).
    pub images: Vec<PathBuf>,
    /// Node lease duration; the kubelet renews every quarter of it.
    pub node_lease_seconds: u32,
    /// Whether tests step the nodes' clocks (`set_node_clock`): their clusters then run the
    /// image that follows them ([`FAKETIME_IMAGE`]); other images ignore a node's clock.
    pub node_clocks: bool,
}

/// Where `tests/nodes/build.sh` and `tests/nodes/images.sh` put their results.
pub fn default_paths(repo: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let dev = repo.join("target/dev");
    (dev.join("bin"), dev.join("cni/bin"), dev.join("images"))
}

/// Running real nodes. Dropping them kills every process they started and removes their
/// interfaces, cgroups and mounts, also when a test panics.
pub struct RealNodes {
    client: kube::Client,
    nodes: Vec<RealNode>,
    kube_proxy: Option<Restarting>,
    _kernel_tunables: KernelTunables,
    config: RealNodesConfig,
}

impl RealNodes {
    pub async fn start(client: kube::Client, config: RealNodesConfig) -> Result<Self> {
        namespace::prepare()?;
        for b in [
            "kubelet",
            "kube-proxy",
            "containerd",
            "containerd-shim-runc-v2",
            "ctr",
            "runc",
        ] {
            if !config.bin_dir.join(b).exists() {
                bail!(
                    "{} is missing: run `make nodes` (tests/nodes/build.sh) first",
                    config.bin_dir.join(b).display()
                );
            }
        }
        let kernel_tunables = KernelTunables::hold()?;
        bind_nodes_to_their_role(&client).await?;
        let mut this = Self {
            client: client.clone(),
            nodes: Vec::new(),
            kube_proxy: None,
            _kernel_tunables: kernel_tunables,
            config: config.clone(),
        };
        let started = Instant::now();
        for layout in config.layout.nodes(config.nodes, &config.zones) {
            let node = RealNode::start(layout, &config).await?;
            this.nodes.push(node);
        }
        for node in &this.nodes {
            node.wait_ready(&client, Duration::from_secs(120)).await?;
        }
        this.kube_proxy = Some(this.start_kube_proxy()?);
        info!(
            nodes = config.nodes,
            seconds = started.elapsed().as_secs_f64(),
            "real nodes ready"
        );
        Ok(this)
    }

    fn start_kube_proxy(&self) -> Result<Restarting> {
        let dir = self.config.layout.dir.join("kube-proxy");
        let (cert, key) = self
            .config
            .pki
            .issue(&dir, "client", "system:kube-proxy", None, &[])?;
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            self.config.pki.kubeconfig_for(&self.config.api_url, &cert, &key),
        )?;
        kube_proxy::start(kube_proxy::KubeProxySpec {
            netns: self.config.netns.clone(),
            binary: self.config.bin_dir.join("kube-proxy"),
            dir,
            kubeconfig,
            layout: self.config.layout.clone(),
            node_names: self.node_names(),
        })
    }

    /// How often kube-proxy was started again after it exited (it exits when the node it runs
    /// as is deleted).
    pub fn kube_proxy_restarts(&self) -> u32 {
        self.kube_proxy.as_ref().map_or(0, Restarting::restarts)
    }

    /// The node kube-proxy's latest start runs as (after an exit, until the next start runs,
    /// still the node of the one that exited).
    pub fn kube_proxy_node(&self) -> String {
        kube_proxy::node_for_start(&self.node_names(), self.kube_proxy_restarts()).to_owned()
    }

    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.layout.name.clone()).collect()
    }

    pub fn layouts(&self) -> Vec<NodeLayout> {
        self.nodes.iter().map(|n| n.layout.clone()).collect()
    }

    fn node(&self, name: &str) -> Result<&RealNode> {
        self.nodes
            .iter()
            .find(|n| n.layout.name == name)
            .with_context(|| format!("unknown node {name}"))
    }

    /// PID (in this PID namespace) of the pod's first container's main process, from
    /// containerd, while it runs.
    pub async fn pid(&self, namespace: &str, pod: &str) -> Result<u32> {
        let p = Api::<Pod>::namespaced(self.client.clone(), namespace)
            .get(pod)
            .await
            .with_context(|| format!("get pod {namespace}/{pod}"))?;
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .with_context(|| format!("pod {namespace}/{pod} is not bound to a node"))?;
        let id = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .and_then(|c| c.container_id.clone())
            .with_context(|| format!("pod {namespace}/{pod} has no container yet"))?;
        let id = id.strip_prefix("containerd://").unwrap_or(&id).to_owned();
        self.node(&node)?.task_pid(&id)
    }

    /// Sends `sig` to the pod's first container's main process, as `kill` on its node would.
    pub async fn signal_pod(&self, namespace: &str, pod: &str, sig: Signal) -> Result<()> {
        let pid = self.pid(namespace, pod).await?;
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig)
            .with_context(|| format!("send {sig} to pod {namespace}/{pod} (pid {pid})"))
    }

    /// The kubelet goes silent (stopped), its containers keep serving: a node cut off from
    /// the API server but not from its clients.
    pub fn partition_node(&self, node: &str) -> Result<()> {
        self.node(node)?.partition()
    }

    /// The partition ends: the kubelet runs again and acts on what changed meanwhile.
    pub fn heal_node(&self, node: &str) -> Result<()> {
        self.node(node)?.heal()
    }

    /// The machine dies: kubelet, containerd and every container on it are killed, and its
    /// runtime state (mounts, `/run`, cgroups) goes as in a power-off; its disk stays.
    pub fn lose_node(&self, node: &str) -> Result<()> {
        self.node(node)?.lose()
    }

    /// The node comes back: a lost one boots (containerd, then a new kubelet, which starts
    /// the pods still bound to it in new sandboxes); a partitioned one gets a new kubelet.
    pub async fn restore_node(&self, node: &str) -> Result<()> {
        self.node(node)?.restore().await
    }

    /// Steps the wall clock of every Redis process on `node` that runs the
    /// `redis:7.0-faketime` image to `offset` from true time (a libfaketime offset such as
    /// "+30s"); running processes see it within a second.
    pub fn set_node_clock(&self, node: &str, offset: &str) -> Result<()> {
        if !self.config.node_clocks {
            bail!(
                "node clocks are off (ControlPlaneConfig::node_clocks): the pods run images that ignore them"
            );
        }
        self.node(node)?.set_clock(offset)
    }

    /// Tags an imported image under another name on every node (`ctr images tag`), e.g. the
    /// operator image under the name the chart asks for.
    pub fn tag_image(&self, source: &str, target: &str) -> Result<()> {
        for n in &self.nodes {
            n.tag_image(source, target)?;
        }
        Ok(())
    }

    /// Pod IPs are routable only inside the run's network namespace (through the control
    /// plane's link to its nodes).
    pub fn pod_network(&self) -> String {
        self.config.layout.cluster_cidr()
    }

    fn stop_all(&mut self) {
        // Its iptables chains go with the control plane's network namespace.
        drop(self.kube_proxy.take());
        // Each node stops everything of its own when dropped.
        self.nodes.clear();
    }
}

impl Drop for RealNodes {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The machine-wide values of [`KUBELET_SYSCTLS`] now.
pub fn kernel_tunables() -> Result<Vec<(String, String)>> {
    KUBELET_SYSCTLS
        .iter()
        .map(|k| Ok((k.to_string(), namespace::read_sysctl(k)?)))
        .collect()
}

/// Writes back saved sysctl values, such as [`kernel_tunables`] read (best effort: every key
/// is tried).
pub fn restore_sysctls(saved: &[(String, String)]) {
    for (k, v) in saved {
        let _ = namespace::write_sysctl(k, v);
    }
}

/// The machine-wide values of [`KUBELET_SYSCTLS`] from before the first kubelet of this
/// process started; put back when the last control plane with real nodes stops (several run
/// at once, and one that stopped early must not undo them under the others, nor one that
/// started late record the kubelet's values as the originals). Under `in-namespaces`, which
/// runs several test binaries at once, the run keeps them instead
/// ([`namespace::RUN_PREPARED`]): one binary cannot know whether another's kubelets still run.
struct KernelTunables;

static KERNEL_TUNABLES: std::sync::Mutex<(usize, Vec<(String, String)>)> =
    std::sync::Mutex::new((0, Vec::new()));

impl KernelTunables {
    fn hold() -> Result<Self> {
        let mut held = KERNEL_TUNABLES.lock().unwrap_or_else(|e| e.into_inner());
        if held.0 == 0 && !namespace::prepared_by_run() {
            held.1 = kernel_tunables()?;
        }
        held.0 += 1;
        Ok(Self)
    }
}

impl Drop for KernelTunables {
    fn drop(&mut self) {
        let mut held = KERNEL_TUNABLES.lock().unwrap_or_else(|e| e.into_inner());
        held.0 -= 1;
        if held.0 == 0 {
            restore_sysctls(&std::mem::take(&mut held.1));
        }
    }
}

/// Kubelets authenticate as `system:node:<name>` in group `system:nodes`. The API server
/// here authorizes with RBAC only, and Kubernetes no longer binds the `system:node` role to
/// that group by itself.
async fn bind_nodes_to_their_role(client: &kube::Client) -> Result<()> {
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some("redlock-envtest:nodes".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "system:node".into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Group".into(),
            name: "system:nodes".into(),
            namespace: None,
        }]),
    };
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(
            "redlock-envtest:nodes",
            &PatchParams::apply("envtest").force(),
            &Patch::Apply(&binding),
        )
        .await
        .context("bind system:nodes to ClusterRole system:node")?;
    Ok(())
}

/// Whether `node` is Ready and carries no not-ready/unreachable taint.
pub(crate) fn node_is_ready(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key.starts_with("node.kubernetes.io/")));
    ready && !tainted
}
