//! A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager
//! and kube-scheduler, built from their Go modules (`tests/controlplane/build.sh`), plus the
//! process kubelet. Dropping a [`ControlPlane`] stops every process it started.

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::certs::Pki;
use crate::kubelet::{KubeletConfig, ProcessKubelet};
use crate::nodes::images::NodeImages;
use crate::nodes::layout::Layout;
use crate::nodes::node_network::NodeNetwork;
use crate::nodes::{RealNodes, RealNodesConfig};
use crate::procs::{ManagedChild, free_port};

const AUDIT_LOG: &str = "audit.log";

/// The user whose every request the audit log records (see `AUDIT_POLICY`).
pub const OPERATOR_USER: &str = "redlock-operator";

/// Audit requests for RedlockClusters (and their status), and every request of the user
/// [`OPERATOR_USER`] (an operator started with [`ControlPlane::kubeconfig_for_user`] under that
/// name), without bodies.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [redlock-operator]
- level: Metadata
  resources:
  - group: redlock.dev
    resources: [redlockclusters, redlockclusters/status]
- level: None
";

/// What to start.
#[derive(Debug, Clone)]
pub struct ControlPlaneConfig {
    /// Fake nodes of the process kubelet; 0 starts no kubelet.
    pub nodes: usize,
    /// Zones the nodes are spread over.
    pub zones: Vec<String>,
    /// First restart delay of crashed containers (a real kubelet uses 10s).
    pub restart_backoff_base: Duration,
    /// How long a node may miss heartbeats before the node lifecycle controller marks it
    /// unreachable (kube-controller-manager `--node-monitor-grace-period`).
    pub node_monitor_grace_period: Duration,
    /// Default tolerations for `not-ready`/`unreachable` taints: how long pods stay bound to
    /// a lost node before they are evicted.
    pub eviction_toleration: Duration,
    /// Directory for all state; a fresh temporary directory when `None`.
    pub dir: Option<PathBuf>,
    /// More images pods may use: (image key, local program), see
    /// `KubeletConfig::extra_images`. Such pods reach this API server in-cluster style.
    pub extra_images: Vec<(String, PathBuf)>,
    /// Per-node wall clocks for Redis pods (a redis-server that runs under libfaketime), see
    /// `KubeletConfig::node_clocks`. Real nodes always have their clocks; their Redis
    /// processes follow them in the `redis:7.0-faketime` image ([`Self::redis_image`]).
    pub node_clocks: Option<PathBuf>,
    /// Real nodes (kubelet, containerd, CNI, kube-proxy; see [`crate::nodes`]) instead of the
    /// process kubelet. Only inside the run's namespaces ([`crate::nodes::namespace::enter`]).
    /// The default is `REDLOCK_TEST_NODES=real` (`make test-real-nodes`, which runs whole test
    /// binaries inside such namespaces).
    pub real_nodes: bool,
    /// Niceness of the process kubelet's pods (`KubeletConfig::pod_nice`); 0 leaves it.
    /// Real nodes ignore it.
    pub pod_nice: i32,
    /// The images real nodes import besides the pause image and [`ControlPlane::redis_image`]'s
    /// (each import costs every node about a second of CPU; [`crate::nodes::images`]). The
    /// process kubelet runs any tag and ignores it.
    pub node_images: NodeImages,
}

impl Default for ControlPlaneConfig {
    fn default() -> Self {
        Self {
            nodes: 3,
            zones: vec!["zone-a".into(), "zone-b".into(), "zone-c".into()],
            restart_backoff_base: Duration::from_millis(200),
            node_monitor_grace_period: Duration::from_secs(8),
            eviction_toleration: Duration::from_secs(10),
            dir: None,
            extra_images: Vec::new(),
            node_clocks: None,
            real_nodes: real_nodes_by_default(),
            pod_nice: 0,
            node_images: NodeImages::default(),
        }
    }
}

/// `REDLOCK_TEST_NODES`: `real` or `process` (the default).
fn real_nodes_by_default() -> bool {
    match std::env::var("REDLOCK_TEST_NODES").as_deref() {
        Err(_) | Ok("process") => false,
        Ok("real") => true,
        Ok(other) => panic!("REDLOCK_TEST_NODES={other:?}: expected \"real\" or \"process\""),
    }
}

/// The Redis image of real nodes' test clusters whose spec names none
/// ([`ControlPlane::redis_image`]).
fn default_redis_image(node_clocks: bool) -> &'static str {
    static CHOSEN: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        std::env::var("REDLOCK_TEST_IMAGE")
            .ok()
            .filter(|i| !i.trim().is_empty())
            .unwrap_or_else(|| "redis:7.0".to_owned())
    });
    if node_clocks {
        crate::nodes::FAKETIME_IMAGE
    } else {
        CHOSEN.as_str()
    }
}

/// A running control plane. Fields drop in declaration order: kubelet, then the control
/// plane processes newest first, then the directory.
pub struct ControlPlane {
    kubelet: Option<ProcessKubelet>,
    real_nodes: Option<RealNodes>,
    /// The nodes' network namespace. Declared after the nodes: it goes when they are gone.
    node_network: Option<NodeNetwork>,
    processes: Vec<ManagedChild>,
    client: Client,
    kubeconfig: PathBuf,
    api_url: String,
    bin_dir: PathBuf,
    ip_block: IpBlock,
    dir: PathBuf,
    pki: Pki,
    node_clocks: bool,
    _tempdir: Option<tempfile::TempDir>,
    /// Its slot of the machine's budget (`budget`): declared last, freed once everything
    /// above is gone.
    slot: crate::budget::Slot,
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root exists")
}

/// Where `tests/controlplane/build.sh` links the binaries.
pub fn bin_dir() -> PathBuf {
    repo_root().join("target/dev/bin")
}

impl ControlPlane {
    pub async fn start(config: ControlPlaneConfig) -> Result<Self> {
        let bin_dir = bin_dir();
        for b in [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ] {
            if !bin_dir.join(b).exists() {
                bail!(
                    "{} is missing: run `make controlplane` (tests/controlplane/build.sh) first",
                    bin_dir.join(b).display()
                );
            }
        }
        if config.real_nodes && !config.extra_images.is_empty() {
            bail!(
                "extra_images are local programs run by the process kubelet; real nodes run images \
                 (tests/nodes/images.sh): set real_nodes: false"
            );
        }
        // The machine's budget of control planes first: nothing of this one starts (etcd,
        // nodes) before it has a slot, so the control planes of every test binary running
        // side by side fit the machine; the rest wait here.
        let slot = crate::budget::acquire(&format!(
            "control plane with {} {} nodes",
            config.nodes,
            if config.real_nodes {
                "real"
            } else {
                "process-kubelet"
            }
        ))
        .await?;
        if config.real_nodes {
            // Loopback and private mounts first: etcd binds before any node.
            crate::nodes::namespace::prepare()?;
        }
        let (tempdir, dir) = match &config.dir {
            Some(d) => {
                std::fs::create_dir_all(d)?;
                (None, d.clone())
            }
            None => {
                let t = tempfile::Builder::new().prefix("redlock-envtest-").tempdir()?;
                let p = t.path().to_owned();
                (Some(t), p)
            }
        };
        let ip_block = IpBlock::acquire()?;
        let layout = Layout::new(ip_block.octet, &dir);
        // Pods of the process kubelet live on loopback, real pods in 10.B.0.0/16.
        let (service_range, service_ip) = if config.real_nodes {
            (layout.service_range(), IpAddr::V4(layout.kubernetes_service_ip()))
        } else {
            (
                format!("127.{}.240.0/20", ip_block.octet),
                IpAddr::V4(Ipv4Addr::new(127, ip_block.octet, 240, 1)),
            )
        };
        // Real nodes live in a network namespace of their own; they and their pods reach the
        // API server at the run's end of the link to it. The process kubelet's programs reach
        // it on loopback.
        // Chosen now: the nodes' network admits its traffic to this port only.
        let api_port = free_port()?;
        let node_network = if config.real_nodes {
            Some(NodeNetwork::create(&layout, api_port)?)
        } else {
            None
        };
        let api_ip = IpAddr::V4(if config.real_nodes {
            layout.api_ip()
        } else {
            Ipv4Addr::LOCALHOST
        });
        let pki = Pki::write(&dir.join("pki"), service_ip, &[api_ip])?;
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)?;
        std::fs::write(
            logs.join("control-plane-slot.log"),
            format!("{}\n", slot.describe()),
        )?;

        let mut processes = Vec::new();
        let etcd_port = free_port()?;
        let etcd_peer = free_port()?;
        let mut etcd = Command::new(bin_dir.join("etcd"));
        etcd.args([
            "--name=envtest",
            &format!("--data-dir={}", dir.join("etcd").display()),
            &format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
            &format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
            &format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
            &format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
            &format!("--initial-cluster=envtest=http://127.0.0.1:{etcd_peer}"),
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]);
        processes.push(ManagedChild::spawn("etcd", etcd, &logs.join("etcd.log"))?);

        // Requests for RedlockClusters are audited (who asked, which verb), so tests can
        // attribute API cost to the operator: the API server's own metrics count every client.
        let audit_policy = dir.join("audit-policy.yaml");
        std::fs::write(&audit_policy, AUDIT_POLICY)?;
        let api_url = format!("https://127.0.0.1:{api_port}");
        let tolerate = config.eviction_toleration.as_secs().max(1).to_string();
        let mut apiserver = Command::new(bin_dir.join("kube-apiserver"));
        apiserver.args([
            &format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            // Only inside the run's network namespace with real nodes, else on loopback.
            &format!(
                "--bind-address={}",
                if config.real_nodes { "0.0.0.0" } else { "127.0.0.1" }
            ),
            &format!("--advertise-address={api_ip}"),
            &format!("--secure-port={api_port}"),
            &format!("--tls-cert-file={}", pki.serving_cert.display()),
            &format!("--tls-private-key-file={}", pki.serving_key.display()),
            &format!("--client-ca-file={}", pki.ca_cert.display()),
            &format!("--service-account-key-file={}", pki.sa_pub.display()),
            &format!("--service-account-signing-key-file={}", pki.sa_key.display()),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            &format!("--service-cluster-ip-range={service_range}"),
            "--authorization-mode=RBAC",
            // As strict as hardened clusters: owner references are checked against the
            // writer's RBAC (blockOwnerDeletion needs `update` on the owner's finalizers), so
            // the chart's RBAC is tested under the same rules.
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
            "--allow-privileged=true",
            "--profiling=false",
            // The `kubernetes` Service would point at 127.0.0.1, which Endpoints refuse; with
            // real nodes it points at the API server's address in the run's namespace.
            &format!(
                "--endpoint-reconciler-type={}",
                if config.real_nodes { "lease" } else { "none" }
            ),
            // `kubectl logs/exec` reach kubelets with the admin certificate (the kubelets trust
            // this CA); the process kubelet serves no such port.
            &format!("--kubelet-client-certificate={}", pki.admin_cert.display()),
            &format!("--kubelet-client-key={}", pki.admin_key.display()),
            // Node names resolve nowhere here; their InternalIP does.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            &format!("--default-not-ready-toleration-seconds={tolerate}"),
            &format!("--default-unreachable-toleration-seconds={tolerate}"),
            &format!("--audit-policy-file={}", audit_policy.display()),
            &format!("--audit-log-path={}", logs.join(AUDIT_LOG).display()),
        ]);
        processes.push(ManagedChild::spawn(
            "kube-apiserver",
            apiserver,
            &logs.join("kube-apiserver.log"),
        )?);

        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, pki.kubeconfig(&api_url))?;
        let client = client_from(&kubeconfig).await?;
        wait_api_ready(&client, &mut processes, &logs, Duration::from_secs(60)).await?;

        let kcm_port = free_port()?;
        let grace = config.node_monitor_grace_period.as_secs().max(2);
        // Endpoint(Slice)s refuse loopback addresses, and every pod IP of the process kubelet
        // is loopback: these controllers could only log errors, and the test resolver applies
        // their rules. Real pods have real addresses: every controller runs.
        let controllers = if config.real_nodes {
            "*".to_owned()
        } else {
            "*,-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller".to_owned()
        };
        let mut kcm = Command::new(bin_dir.join("kube-controller-manager"));
        kcm.args([
            &format!("--kubeconfig={}", kubeconfig.display()),
            &format!("--authentication-kubeconfig={}", kubeconfig.display()),
            &format!("--authorization-kubeconfig={}", kubeconfig.display()),
            "--bind-address=127.0.0.1",
            &format!("--secure-port={kcm_port}"),
            "--leader-elect=false",
            &format!("--service-account-private-key-file={}", pki.sa_key.display()),
            &format!("--root-ca-file={}", pki.ca_cert.display()),
            &format!("--service-cluster-ip-range={service_range}"),
            "--allocate-node-cidrs=false",
            &format!("--controllers={controllers}"),
            "--node-monitor-period=1s",
            &format!("--node-monitor-grace-period={grace}s"),
        ]);
        processes.push(ManagedChild::spawn(
            "kube-controller-manager",
            kcm,
            &logs.join("kube-controller-manager.log"),
        )?);

        let sched_port = free_port()?;
        let mut scheduler = Command::new(bin_dir.join("kube-scheduler"));
        scheduler.args([
            &format!("--kubeconfig={}", kubeconfig.display()),
            &format!("--authentication-kubeconfig={}", kubeconfig.display()),
            &format!("--authorization-kubeconfig={}", kubeconfig.display()),
            "--bind-address=127.0.0.1",
            &format!("--secure-port={sched_port}"),
            "--leader-elect=false",
        ]);
        processes.push(ManagedChild::spawn(
            "kube-scheduler",
            scheduler,
            &logs.join("kube-scheduler.log"),
        )?);

        let mut cp = Self {
            kubelet: None,
            real_nodes: None,
            node_network,
            processes,
            client,
            kubeconfig,
            api_url,
            bin_dir,
            ip_block,
            dir,
            pki: pki.clone(),
            node_clocks: config.node_clocks.is_some(),
            _tempdir: tempdir,
            slot,
        };
        // The service-account controller creating `default` proves the controller manager
        // runs; pods cannot be created in a namespace before its `default` account exists.
        cp.wait_service_account("default", Duration::from_secs(60))
            .await?;
        if config.nodes > 0 && config.real_nodes {
            let (node_bin, cni_bin, images) = crate::nodes::default_paths(&repo_root());
            let nodes = RealNodes::start(
                cp.client.clone(),
                RealNodesConfig {
                    nodes: config.nodes,
                    zones: config.zones.clone(),
                    api_url: format!("https://{}:{api_port}", layout.api_ip()),
                    netns: cp
                        .node_network
                        .as_ref()
                        .expect("created with real nodes")
                        .netns()
                        .clone(),
                    layout,
                    pki: pki.clone(),
                    bin_dir: node_bin,
                    cni_bin,
                    images: crate::nodes::images::node_image_tarballs(
                        &images,
                        &config.node_images,
                        default_redis_image(config.node_clocks.is_some()),
                    )?,
                    // Renewed every second, like the process kubelet's lease.
                    node_lease_seconds: 4,
                    node_clocks: config.node_clocks.is_some(),
                },
            )
            .await
            .context("start real nodes")?;
            cp.real_nodes = Some(nodes);
        } else if config.nodes > 0 {
            let kubelet = ProcessKubelet::start(
                cp.client.clone(),
                KubeletConfig {
                    nodes: config.nodes,
                    zones: config.zones.clone(),
                    node_prefix: "node".into(),
                    ip_block: cp.ip_block.octet,
                    work_dir: cp.dir.join("kubelet"),
                    restart_backoff_base: config.restart_backoff_base,
                    restart_backoff_max: Duration::from_secs(10),
                    lease_interval: Duration::from_secs(1),
                    extra_images: config.extra_images.clone(),
                    node_clocks: config.node_clocks.clone(),
                    pod_nice: config.pod_nice,
                    // In-cluster clients (KUBERNETES_SERVICE_HOST/PORT) reach the API server
                    // on loopback; its serving certificate names 127.0.0.1.
                    api_server: Some(std::net::SocketAddr::from(([127, 0, 0, 1], api_port))),
                    ..KubeletConfig::default()
                },
            )
            .await
            .context("start the process kubelet")?;
            cp.kubelet = Some(kubelet);
        }
        Ok(cp)
    }

    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The nodes, whichever runtime runs them (for faults).
    pub fn nodes(&self) -> crate::faults::Nodes<'_> {
        match (&self.kubelet, &self.real_nodes) {
            (_, Some(r)) => crate::faults::Nodes::Real(r),
            (Some(k), None) => crate::faults::Nodes::Process(k),
            (None, None) => panic!("control plane started without nodes"),
        }
    }

    /// Whether pods run on real nodes (kubelet, containerd) rather than the process kubelet.
    pub fn has_real_nodes(&self) -> bool {
        self.real_nodes.is_some()
    }

    /// The image a test cluster's spec names when it names none, if it must: on real nodes
    /// `REDLOCK_TEST_IMAGE` or else `redis:7.0`, as the CRD's default (`redis:7.4`) is no image
    /// built here (tests/nodes/images.sh: no Debian suite packages 7.4) and the nodes pull
    /// from no registry; with node clocks, redis 7.0 under libfaketime whatever the variable
    /// says (the one image that follows its node's clock). The process kubelet runs any tag as
    /// the machine's Redis (under libfaketime with `node_clocks`). `make version-matrix` runs
    /// the tests once per image through the variable.
    pub fn redis_image(&self) -> Option<&'static str> {
        self.has_real_nodes()
            .then(|| default_redis_image(self.node_clocks))
    }

    /// The real nodes (a control plane started with `real_nodes`).
    pub fn real_nodes(&self) -> &RealNodes {
        self.real_nodes
            .as_ref()
            .expect("control plane started without real nodes")
    }

    pub fn kubelet(&self) -> &ProcessKubelet {
        self.kubelet
            .as_ref()
            .expect("control plane started without nodes")
    }

    /// Admin kubeconfig of this control plane.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn api_url(&self) -> &str {
        &self.api_url
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How long this control plane waited for its slot of the machine's budget
    /// ([`crate::budget`]) before anything of it started.
    pub fn slot_wait(&self) -> Duration {
        self.slot.waited()
    }

    /// A kubeconfig that logs in as `user` in `group` (a client certificate), so it may do
    /// only what RBAC grants them: e.g. nothing, to test permission errors; or everything
    /// (`system:masters`) under a name the audit log can tell apart.
    pub fn kubeconfig_for_user(&self, user: &str, group: Option<&str>) -> Result<PathBuf> {
        let dir = self.dir.join("users");
        let (cert, key) = self.pki.issue(&dir, user, user, group, &[])?;
        let path = dir.join(format!("{user}.kubeconfig"));
        std::fs::write(&path, self.pki.kubeconfig_for(&self.api_url, &cert, &key))?;
        Ok(path)
    }

    /// The API server's audit log (JSON lines): every request for RedlockClusters, with its
    /// verb, user and user agent, at the Metadata level.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("logs").join(AUDIT_LOG)
    }

    /// Second octet of every address of this control plane (pods are 127.B.x.y).
    pub fn ip_block(&self) -> u8 {
        self.ip_block.octet
    }

    /// `kubectl` against this control plane.
    pub fn kubectl(&self) -> Command {
        let mut c = Command::new(self.bin_dir.join("kubectl"));
        c.env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", self.kube_cache_dir());
        c
    }

    /// kubectl's discovery and HTTP cache for this control plane. Not `~/.kube/cache`: that
    /// is keyed by host and port, and a port is reused by later control planes (other tests,
    /// other binaries running side by side) whose API server serves other types.
    pub fn kube_cache_dir(&self) -> PathBuf {
        self.dir.join("kube-cache")
    }

    /// A fresh namespace, usable for pods (its `default` ServiceAccount exists).
    pub async fn new_namespace(&self, prefix: &str) -> Result<String> {
        let ns = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("{prefix}-")),
                ..Default::default()
            },
            ..Default::default()
        };
        let created = Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        let name = created.metadata.name.context("created namespace has a name")?;
        self.wait_service_account(&name, Duration::from_secs(30)).await?;
        Ok(name)
    }

    /// Installs (server-side applies) a CRD and waits until it is Established.
    pub async fn install_crd(&self, crd: &CustomResourceDefinition) -> Result<()> {
        let api = Api::<CustomResourceDefinition>::all(self.client.clone());
        let name = crd.metadata.name.clone().context("CRD has a name")?;
        api.patch(&name, &PatchParams::apply("envtest").force(), &Patch::Apply(crd))
            .await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let current = api.get(&name).await?;
            let established = current
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("CRD {name} not Established within 30s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_service_account(&self, namespace: &str, timeout: Duration) -> Result<()> {
        let api = Api::<ServiceAccount>::namespaced(self.client.clone(), namespace);
        let deadline = Instant::now() + timeout;
        while api.get_opt("default").await?.is_none() {
            if Instant::now() > deadline {
                bail!(
                    "ServiceAccount {namespace}/default not created within {timeout:?}: is kube-controller-manager running? Its log ends:\n{}",
                    log_tail(&self.dir.join("logs/kube-controller-manager.log"), 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Stops the kubelet (and its pods' processes), then the control plane.
    pub async fn shutdown(mut self) {
        if let Some(k) = self.kubelet.take() {
            k.shutdown().await;
        }
        drop(self.real_nodes.take());
        while let Some(mut p) = self.processes.pop() {
            p.stop(Duration::from_secs(5));
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        drop(self.kubelet.take());
        drop(self.real_nodes.take());
        while let Some(mut p) = self.processes.pop() {
            p.stop(Duration::from_secs(5));
        }
        // A failing test keeps its logs and state for the post-mortem.
        if std::thread::panicking()
            && let Some(t) = self._tempdir.take()
        {
            eprintln!("control plane state kept for inspection: {}", t.keep().display());
        }
    }
}

pub async fn client_from(kubeconfig: &Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

async fn wait_api_ready(
    client: &Client,
    processes: &mut [ManagedChild],
    logs: &Path,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        for p in processes.iter_mut() {
            if let Some(status) = p.exited() {
                bail!(
                    "{} exited ({status}) during start; its log ends:\n{}",
                    p.name(),
                    log_tail(&logs.join(format!("{}.log", p.name())), 30)
                );
            }
        }
        let req = http::Request::get("/readyz")
            .body(vec![])
            .expect("static request");
        if let Ok(body) = client.request_text(req).await
            && body.trim() == "ok"
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "kube-apiserver not ready within {timeout:?}; its log ends:\n{}",
                log_tail(&logs.join("kube-apiserver.log"), 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An exclusive second octet for addresses (127.B.0.0/16), held with `flock` for the life of
/// the control plane, so control planes running at once (parallel tests, the demo) never hand
/// out the same pod IP. The lock dies with the process.
pub struct IpBlock {
    pub octet: u8,
    _lock: std::fs::File,
}

impl IpBlock {
    pub fn acquire() -> Result<Self> {
        let dir = std::env::temp_dir().join("redlock-envtest-ipblocks");
        std::fs::create_dir_all(&dir)?;
        for octet in 10..=250u8 {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(format!("{octet}.lock")))?;
            // SAFETY: flock on a valid fd.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                return Ok(Self { octet, _lock: file });
            }
        }
        bail!("no free 127.B.0.0/16 block: 241 control planes running?")
    }
}

/// The last `lines` lines of a log file, for error messages that must explain themselves.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| format!("<cannot read {}: {e}>", path.display()));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
