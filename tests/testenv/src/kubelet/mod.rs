//! The process kubelet (docs/design.md §7): registers fake Nodes, runs the pods scheduled to
//! them as local processes (Redis images as `redis-server` on the pod's own loopback
//! address), reports their status like a kubelet, and lets tests inject faults: kill or
//! stop a pod's process, lose and restore a node.
//!
//! Layout: `node` (registration, lease, status), `dispatch` (the one pod watch and the
//! index of pod workers), `pod_worker` (one task per pod), `runtime` (argv and mount
//! namespace), `image` (image → program table), `env`, `volumes`, `probes`, `status`
//! (pure pod status), `backoff`, `ipam`, `proc_table` (owner of every process).

pub(crate) mod backoff;
mod dispatch;
mod env;
mod image;
mod ipam;
mod node;
mod pod_worker;
mod probes;
mod proc_table;
mod runtime;
mod status;
mod volumes;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;
use nix::sys::signal::Signal;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use dispatch::PodIndex;
use ipam::Ipam;
use node::NodeIdentity;
use proc_table::ProcTable;

pub use image::{Flavor, MappedImage, map_image};

/// Settings of the process kubelet.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// Number of fake nodes to register (`<node_prefix>-0` …).
    pub nodes: usize,
    /// Zones the nodes are spread over, round-robin (`topology.kubernetes.io/zone`).
    pub zones: Vec<String>,
    pub node_prefix: String,
    /// Second octet of every address this kubelet hands out: nodes are 127.B.0.(i+1),
    /// pods 127.B.1.1 … 127.B.239.254. Unique per running control plane; not 0.
    pub ip_block: u8,
    /// Directory for per-pod files (volumes, logs).
    pub work_dir: PathBuf,
    /// First restart delay of a crashed container (kubelet: 10s); doubles up to the max.
    /// The first restart after a healthy run is immediate, as in the kubelet.
    pub restart_backoff_base: Duration,
    pub restart_backoff_max: Duration,
    /// How often node leases are renewed.
    pub lease_interval: Duration,
    /// A container that ran this long without crashing starts over with an immediate
    /// restart (kubelet: 10 minutes).
    pub restart_backoff_reset: Duration,
    /// More images the kubelet can run: (image prefix, or `*name` for a repository named
    /// `name` in any registry; local program). Matched before the built-in Redis/Valkey table. Such programs get no `--bind`, but the
    /// `KUBERNETES_SERVICE_HOST`/`_PORT` variables of the real API server.
    pub extra_images: Vec<(String, PathBuf)>,
    /// The API server as programs of `extra_images` reach it (`KUBERNETES_SERVICE_HOST`/
    /// `_PORT`); must be a loopback address. When `None`, taken from the `kubernetes`
    /// Service's EndpointSlice if that has a loopback endpoint.
    pub api_server: Option<SocketAddr>,
    /// Per-node wall clocks: when set (to a redis-server that runs under libfaketime, see
    /// tests/tools/build-redis-libc.sh), every Redis container runs that binary under
    /// libfaketime with its node's offset file (`<work_dir>/clocks/<node>`, "+0" at first);
    /// `ProcessKubelet::set_node_clock` steps it. Exec probes run unfaked.
    pub node_clocks: Option<PathBuf>,
    /// Niceness of every process this kubelet starts (containers and exec probes); 0 leaves
    /// it. On a real cluster pods run on other machines than the API server; a benchmark that
    /// puts hundreds of them on its control plane's 2 cores can keep them from crowding out
    /// what it measures.
    pub pod_nice: i32,
}

impl Default for KubeletConfig {
    /// One node with kubelet timings; tests usually shorten the backoff.
    fn default() -> Self {
        Self {
            nodes: 1,
            zones: vec!["zone-a".into()],
            node_prefix: "node".into(),
            ip_block: 1,
            work_dir: std::env::temp_dir().join("process-kubelet"),
            restart_backoff_base: Duration::from_secs(10),
            restart_backoff_max: Duration::from_secs(300),
            lease_interval: Duration::from_secs(10),
            restart_backoff_reset: Duration::from_secs(600),
            extra_images: Vec::new(),
            api_server: None,
            node_clocks: None,
            pod_nice: 0,
        }
    }
}

/// State shared by the node heartbeats, the pod watch and the pod workers.
pub(crate) struct Shared {
    client: kube::Client,
    config: KubeletConfig,
    nodes: Vec<NodeIdentity>,
    kubelet_version: String,
    /// Directory with `valkey-*` aliases, first on every container's `PATH`.
    bin_dir: PathBuf,
    procs: Arc<ProcTable>,
    ipam: Mutex<Ipam>,
    pods: Mutex<PodIndex>,
    lost: Mutex<HashSet<String>>,
    /// Nodes cut off from the API server whose processes keep running (a subset of `lost`).
    partitioned: Mutex<HashSet<String>>,
    /// When each node last became Ready (its Ready condition's transition time).
    ready_since: Mutex<HashMap<String, Timestamp>>,
    /// Pods (`namespace/name`) whose status names another address than their own: what the
    /// API shows for a pod after the CNI handed its address on, until the view catches up.
    /// The flag says whether pods yet to report an address get it (see `report_address`).
    reported_addresses: Mutex<HashMap<String, (Ipv4Addr, bool)>>,
    service_env: tokio::sync::Mutex<Option<Vec<(String, String)>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a few map operations; a poisoned lock holds valid data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn node_ip(&self, node: &str) -> Option<Ipv4Addr> {
        self.nodes.iter().find(|n| n.name == node).map(|n| n.ip)
    }

    fn is_lost(&self, node: &str) -> bool {
        lock(&self.lost).contains(node)
    }

    /// The libfaketime offset file of `node`'s Redis processes (created with "+0").
    fn clock_file(&self, node: &str) -> PathBuf {
        let dir = self.config.work_dir.join("clocks");
        let file = dir.join(node);
        if !file.exists() {
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::write(&file, "+0\n");
        }
        file
    }

    fn is_partitioned(&self, node: &str) -> bool {
        lock(&self.partitioned).contains(node)
    }

    fn allocate_ip(&self, uid: &str, preferred: Option<Ipv4Addr>) -> Option<Ipv4Addr> {
        lock(&self.ipam).allocate(uid, preferred)
    }

    /// Frees what a pod held beyond its processes (its address).
    fn release_pod(&self, uid: &str) {
        lock(&self.ipam).release(uid);
    }

    /// The address pod `key` (`namespace/name`) is to be reported at instead of its own, and
    /// whether a pod that has reported none yet is to take it.
    fn reported_address(&self, key: &str) -> Option<(Ipv4Addr, bool)> {
        lock(&self.reported_addresses).get(key).copied()
    }

    fn ready_since(&self, node: &str) -> Timestamp {
        *lock(&self.ready_since)
            .entry(node.to_string())
            .or_insert_with(Timestamp::now)
    }

    /// `KUBERNETES_SERVICE_*` for programs that talk to the API server: the address of
    /// the real API server from the `kubernetes` Service's EndpointSlice (its ClusterIP
    /// is not routable here). Only a loopback address is ever handed out.
    async fn service_env(&self) -> Vec<(String, String)> {
        let mut cached = self.service_env.lock().await;
        if let Some(env) = cached.as_ref() {
            return env.clone();
        }
        let found = match self.config.api_server {
            Some(addr) => Some((addr.ip(), addr.port() as i32)),
            None => {
                let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), "default");
                let lp = ListParams::default().labels("kubernetes.io/service-name=kubernetes");
                slices.list(&lp).await.ok().and_then(|list| {
                    list.items.into_iter().find_map(|s| {
                        let ip: IpAddr = s.endpoints.first()?.addresses.first()?.parse().ok()?;
                        Some((ip, s.ports.as_ref()?.first()?.port?))
                    })
                })
            }
        };
        let Some((ip, port)) = found.filter(|(ip, _)| ip.is_loopback()) else {
            warn!(
                "no loopback API server address known (KubeletConfig::api_server); KUBERNETES_SERVICE_HOST not set"
            );
            return Vec::new();
        };
        let env = vec![
            ("KUBERNETES_SERVICE_HOST".to_string(), ip.to_string()),
            ("KUBERNETES_SERVICE_PORT".to_string(), port.to_string()),
            ("KUBERNETES_SERVICE_PORT_HTTPS".to_string(), port.to_string()),
            ("KUBERNETES_PORT".to_string(), format!("tcp://{ip}:{port}")),
            (
                "KUBERNETES_PORT_443_TCP".to_string(),
                format!("tcp://{ip}:{port}"),
            ),
            ("KUBERNETES_PORT_443_TCP_PROTO".to_string(), "tcp".to_string()),
            ("KUBERNETES_PORT_443_TCP_ADDR".to_string(), ip.to_string()),
            ("KUBERNETES_PORT_443_TCP_PORT".to_string(), port.to_string()),
        ];
        *cached = Some(env.clone());
        env
    }
}

/// The process kubelet. Dropping it kills every process it started.
pub struct ProcessKubelet {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl ProcessKubelet {
    /// Registers the nodes and starts serving pods; returns when every node is Ready and
    /// schedulable (the node lifecycle controller removed the `not-ready` taint).
    pub async fn start(client: kube::Client, config: KubeletConfig) -> Result<Self> {
        if config.ip_block == 0 {
            bail!("ip_block 0 would overlap 127.0.0.1; use 1..=255");
        }
        if config.nodes > 254 {
            bail!("at most 254 nodes per ip_block");
        }
        std::fs::create_dir_all(config.work_dir.join("pods"))
            .with_context(|| format!("create {}", config.work_dir.display()))?;
        let bin_dir = config.work_dir.join("bin");
        std::fs::create_dir_all(&bin_dir)?;
        for (alias, target) in image::PROGRAM_ALIASES {
            let link = bin_dir.join(alias);
            if std::fs::symlink_metadata(&link).is_err() && !target.ends_with(&format!("/{alias}")) {
                std::os::unix::fs::symlink(target, &link)?;
            }
        }
        let kubelet_version = client
            .apiserver_version()
            .await
            .map(|v| v.git_version)
            .unwrap_or_else(|_| "v1.33.0".into());
        let nodes = node::identities(&config.node_prefix, config.nodes, &config.zones, config.ip_block);
        let shared = Arc::new(Shared {
            client,
            nodes: nodes.clone(),
            kubelet_version,
            bin_dir,
            procs: Arc::new(ProcTable::with_nice(config.pod_nice)),
            ipam: Mutex::new(Ipam::new(config.ip_block)),
            pods: Mutex::new(PodIndex::default()),
            lost: Mutex::new(HashSet::new()),
            partitioned: Mutex::new(HashSet::new()),
            ready_since: Mutex::new(HashMap::new()),
            reported_addresses: Mutex::new(HashMap::new()),
            service_env: tokio::sync::Mutex::new(None),
            config,
        });
        let mut kubelet = ProcessKubelet {
            shared: shared.clone(),
            tasks: Vec::new(),
        };
        for id in &nodes {
            let since = shared.ready_since(&id.name);
            node::register(&shared.client, id, &shared.kubelet_version, since).await?;
        }
        kubelet
            .tasks
            .push(tokio::spawn(node::run_heartbeats(shared.clone())));
        kubelet
            .tasks
            .push(tokio::spawn(dispatch::watch_pods(shared.clone())));
        kubelet.wait_schedulable(Duration::from_secs(60)).await?;
        info!(nodes = ?kubelet.node_names(), "process kubelet ready");
        Ok(kubelet)
    }

    async fn wait_schedulable(&self, timeout: Duration) -> Result<()> {
        let api: Api<Node> = Api::all(self.shared.client.clone());
        let deadline = Instant::now() + timeout;
        for id in &self.shared.nodes {
            loop {
                let node = api.get(&id.name).await?;
                if node::schedulable(&node) {
                    break;
                }
                if Instant::now() >= deadline {
                    bail!(
                        "node {} is not Ready and untainted after {timeout:?} (is kube-controller-manager's \
                         node lifecycle controller running?)",
                        id.name
                    );
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }

    pub fn node_names(&self) -> Vec<String> {
        self.shared.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// PID of the pod's main (first) container process while it runs.
    pub fn pid(&self, namespace: &str, pod: &str) -> Option<u32> {
        let index = lock(&self.shared.pods);
        index
            .workers
            .values()
            .find(|h| h.namespace == namespace && h.name == pod)
            .map(|h| h.main_pid.load(Ordering::Relaxed))
            .filter(|pid| *pid != 0)
    }

    /// Sends `sig` to the pod's main container (its whole process group), as `kill` on
    /// the node would. The kubelet notices an exit and handles it per `restartPolicy`.
    pub fn signal_pod(&self, namespace: &str, pod: &str, sig: Signal) -> Result<()> {
        let pid = self
            .pid(namespace, pod)
            .with_context(|| format!("pod {namespace}/{pod} has no running main container here"))?;
        // Through the table, never to the bare number: the pod's process may have exited and
        // been reaped since `main_pid` was read, and its number be another process's.
        self.shared
            .procs
            .signal_pid(pid, sig)
            .with_context(|| format!("send {sig} to pod {namespace}/{pod} (pid {pid})"))?;
        Ok(())
    }

    /// A pod named `pod` that has reported no address yet (one created later under that name)
    /// reports `address` as its `podIP`, while its process listens on its own address; `None`
    /// ends this for pods started later (the API never lets a pod's address change, so one
    /// that reported `address` keeps it). This is the view a stale pod cache gives after the
    /// CNI handed an address on: the pod's address is another pod's process.
    pub fn report_address(&self, namespace: &str, pod: &str, address: Option<Ipv4Addr>) {
        let key = format!("{namespace}/{pod}");
        let mut reported = lock(&self.shared.reported_addresses);
        match address {
            Some(ip) => {
                reported.insert(key, (ip, true));
            }
            // Kept for the pods that already report it: their address cannot change.
            None => {
                if let Some((_, new_pods)) = reported.get_mut(&key) {
                    *new_pods = false;
                }
            }
        }
        info!(pod = %format!("{namespace}/{pod}"), ?address, "pod address reported");
    }

    /// The node stops renewing its lease and reporting status, its pods' processes are
    /// killed, and its pods are left alone (not restarted, not finalised) until restored.
    pub async fn lose_node(&self, node: &str) -> Result<()> {
        if self.shared.node_ip(node).is_none() {
            bail!("unknown node {node}");
        }
        lock(&self.shared.lost).insert(node.to_string());
        let handles = lock(&self.shared.pods).take_workers_on(node);
        for h in handles {
            h.task.abort();
            // The worker's drop kills its processes; waiting for it makes that synchronous.
            let _ = h.task.await;
            self.shared.procs.kill_owner(&h.uid);
        }
        info!(node, "node lost");
        Ok(())
    }

    /// Sets the wall-clock offset of every Redis process on `node` (a libfaketime offset such
    /// as "+60s"; needs `node_clocks`). Running processes see it within a second.
    pub fn set_node_clock(&self, node: &str, offset: &str) -> Result<()> {
        if self.shared.config.node_clocks.is_none() {
            bail!("node clocks are off (KubeletConfig::node_clocks)");
        }
        if self.shared.node_ip(node).is_none() {
            bail!("unknown node {node}");
        }
        let file = self.shared.clock_file(node);
        let tmp = file.with_extension("tmp");
        std::fs::write(&tmp, format!("{offset}\n"))?;
        std::fs::rename(&tmp, &file)?;
        info!(node, offset, "node clock set");
        Ok(())
    }

    /// The node is cut off from the API server, but not from its pods' clients: it stops
    /// renewing its lease and reporting status, starts no new pod, and its running processes
    /// keep serving on their addresses (also after their Pod objects are deleted, by pod
    /// garbage collection of a deleted node or a force delete) until `heal_node`.
    pub fn partition_node(&self, node: &str) -> Result<()> {
        if self.shared.node_ip(node).is_none() {
            bail!("unknown node {node}");
        }
        lock(&self.shared.partitioned).insert(node.to_string());
        lock(&self.shared.lost).insert(node.to_string());
        info!(node, "node partitioned");
        Ok(())
    }

    /// The partition ends: the kubelet reports again, and kills the processes whose pods were
    /// deleted meanwhile (as a real kubelet does when it finds them orphaned).
    pub async fn heal_node(&self, node: &str) -> Result<()> {
        lock(&self.shared.partitioned).remove(node);
        self.restore_node(node).await
    }

    /// The node comes back like a rebooted kubelet: it registers its Node (again, if it was
    /// deleted meanwhile) and reports Ready, pods still bound to it are started anew, and pods
    /// deleted meanwhile are finalised.
    pub async fn restore_node(&self, node: &str) -> Result<()> {
        let id = self
            .shared
            .nodes
            .iter()
            .find(|n| n.name == node)
            .with_context(|| format!("unknown node {node}"))?
            .clone();
        lock(&self.shared.ready_since).insert(node.to_string(), Timestamp::now());
        lock(&self.shared.lost).remove(node);
        node::register(
            &self.shared.client,
            &id,
            &self.shared.kubelet_version,
            self.shared.ready_since(node),
        )
        .await?;
        dispatch::start_workers_on(&self.shared, node);
        info!(node, "node restored");
        Ok(())
    }

    /// Number of processes the kubelet currently owns (containers and exec probes); 0 after
    /// every pod is gone, so tests can check nothing leaked.
    pub fn process_count(&self) -> usize {
        self.shared.procs.len()
    }

    /// Stops all tasks and kills every process.
    pub async fn shutdown(mut self) {
        for t in &self.tasks {
            t.abort();
        }
        for t in std::mem::take(&mut self.tasks) {
            let _ = t.await;
        }
        let handles = lock(&self.shared.pods).take_all_workers();
        for h in handles {
            h.task.abort();
            let _ = h.task.await;
        }
        let procs = self.shared.procs.clone();
        let _ = tokio::task::spawn_blocking(move || procs.kill_all()).await;
    }
}

impl Drop for ProcessKubelet {
    /// Synchronous: aborts every task and kills every process now, also on panic.
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        let handles = lock(&self.shared.pods).take_all_workers();
        for h in handles {
            h.task.abort();
        }
        self.shared.procs.kill_all();
    }
}
