//! Configuration files of a real node: containerd, the CNI network, the kubelet and
//! kube-proxy. Pure builders; the settings that this machine needs (and why) are commented
//! where they are set. Source of the machine facts: the real-node notes in docs/design.md §7.

use std::path::Path;

use serde_json::json;

use super::layout::{Layout, NodeLayout};

/// The sandbox image every node's containerd uses; built from the Kubernetes module's
/// `pause.c` (tests/nodes/images.sh), never pulled.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10.2";

/// Where every container of a node (not the pod sandboxes, whose spec ignores base specs) sees
/// the node's clock directory, read-only: the test image `redis:7.0-faketime` runs its server
/// under libfaketime with `offset` in it as the wall clock's offset (tests/nodes/images.py), so
/// a test can step the clock of every Redis process on a node, as a node's stepped system
/// clock would (`RealNodes::set_node_clock`). Other images ignore it.
pub const NODE_CLOCK_DIR: &str = "/redlock-node-clock";

/// The base OCI spec of a node's containers: the spec the CRI plugin builds without one, plus
/// the read-only bind of the node's clock directory. That is containerd's default (`ctr oci
/// spec`) without what the plugin drops from it when no base spec is set
/// (`WithoutDefaultSecuritySettings`, containerd 2.4 `internal/cri/opts/spec_opts.go`): its
/// rlimits (`RLIMIT_NOFILE` 1024, which would cap Redis's `maxclients` at 992), AppArmor
/// profile and seccomp filter (the pod's own settings still apply). The plugin keeps a base
/// spec's mounts unless the pod mounts the same path.
pub fn base_runtime_spec(default_spec: &str, node: &NodeLayout) -> anyhow::Result<String> {
    let mut spec: serde_json::Value = serde_json::from_str(default_spec)?;
    if let Some(process) = spec.get_mut("process").and_then(|p| p.as_object_mut()) {
        process.remove("rlimits");
        process.remove("apparmorProfile");
    }
    if let Some(linux) = spec.get_mut("linux").and_then(|l| l.as_object_mut()) {
        linux.remove("seccomp");
    }
    let mounts = spec
        .get_mut("mounts")
        .and_then(|m| m.as_array_mut())
        .ok_or_else(|| anyhow::anyhow!("containerd's default spec has no mounts"))?;
    mounts.push(json!({
        "destination": NODE_CLOCK_DIR,
        "type": "bind",
        "source": node.clock_dir(),
        "options": ["rbind", "ro", "nosuid", "nodev", "noexec"],
    }));
    Ok(serde_json::to_string_pretty(&spec)?)
}

/// containerd 2.x config (version 3) of one node: everything under the node's directory,
/// so several containerds share one kernel without sharing state.
pub fn containerd_toml(node: &NodeLayout, runc: &Path, cni_bin: &Path) -> String {
    format!(
        r#"version = 3
root = "{root}"
state = "{state}"
# Never merge the machine's /etc/containerd/conf.d into a test node.
imports = []

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[plugins.'io.containerd.nri.v1.nri']
  # It would listen on the machine-wide /var/run/nri/nri.sock; nothing here uses it.
  disable = true

[plugins.'io.containerd.internal.v1.opt']
  path = "{opt}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{pause}"

[plugins.'io.containerd.cri.v1.runtime']
  # This machine removes CAP_SYS_RESOURCE from every process, so no one may lower
  # oom_score_adj; with the default, runc fails every pod sandbox (it sets -998).
  restrict_oom_score_adj = true
  # Pod network namespaces under the node's state, not the machine's /var/run/netns.
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      base_runtime_spec = "{base_spec}"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{runc}"
        # The default /run/containerd/runc would be shared by every node's containerd.
        Root = "{runc_root}"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{cni_conf}"
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"#,
        root = node.containerd_root().display(),
        opt = node.dir.join("opt").display(),
        state = node.containerd_state().display(),
        socket = node.containerd_socket().display(),
        pause = PAUSE_IMAGE,
        runc = runc.display(),
        runc_root = node.runc_root().display(),
        cni_bin = cni_bin.display(),
        cni_conf = node.cni_conf_dir().display(),
        base_spec = node.base_runtime_spec().display(),
    )
}

/// The node's pod network: a bridge with its own subnet, routed (not masqueraded) in the
/// control plane's network namespace, so every pod reaches every other pod and the test process
/// reaches every pod by its IP.
pub fn cni_conflist(node: &NodeLayout) -> String {
    let conf = json!({
        "cniVersion": "1.0.0",
        "name": "redlock-envtest",
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                "isGateway": true,
                "ipMasq": false,
                // A pod reaching itself through a Service ClusterIP comes back on its port.
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.pod_subnet, "gateway": node.gateway.to_string()}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": node.ipam_dir().display().to_string(),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ],
    });
    serde_json::to_string_pretty(&conf).expect("static JSON")
}

/// Timings of a real kubelet that the tests shorten (the process kubelet's are the same).
#[derive(Debug, Clone, Copy)]
pub struct KubeletTimings {
    /// Lease duration in seconds; the kubelet renews every quarter of it.
    pub node_lease_seconds: u32,
}

/// The kubelet's configuration file.
pub fn kubelet_yaml(
    node: &NodeLayout,
    ca: &Path,
    serving: (&Path, &Path),
    port: u16,
    t: KubeletTimings,
) -> String {
    let socket = format!("unix://{}", node.containerd_socket().display());
    let conf = json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        // This host mounts cgroup v1; kubelet 1.35+ refuses it unless told otherwise.
        "failCgroupV1": false,
        "cgroupDriver": "cgroupfs",
        // One root per node: kubelets sharing a root would fight over the same pod cgroups.
        "cgroupRoot": node.cgroup_root,
        "cgroupsPerQOS": true,
        "address": node.ip.to_string(),
        "port": port,
        "readOnlyPort": 0,
        "healthzPort": 0,
        "authentication": {
            "anonymous": {"enabled": false},
            "webhook": {"enabled": false},
            "x509": {"clientCAFile": ca.display().to_string()},
        },
        // The kubelet's port exists only inside the run's network namespace.
        "authorization": {"mode": "AlwaysAllow"},
        "tlsCertFile": serving.0.display().to_string(),
        "tlsPrivateKeyFile": serving.1.display().to_string(),
        "serverTLSBootstrap": false,
        "rotateCertificates": false,
        "containerRuntimeEndpoint": socket,
        "imageServiceEndpoint": socket,
        "podLogsDir": node.pod_logs().display().to_string(),
        "failSwapOn": false,
        // Lowering oom_score_adj needs CAP_SYS_RESOURCE, which this machine does not grant.
        "oomScoreAdj": 0,
        "nodeLeaseDurationSeconds": t.node_lease_seconds,
        "nodeStatusUpdateFrequency": "1s",
        "nodeStatusReportFrequency": "5s",
        // Secret and ConfigMap volumes follow their objects within seconds.
        "syncFrequency": "5s",
        // Disk and memory on CI machines vary; eviction would only make tests flaky.
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        // The images are imported, never pulled: they must never be collected.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "localStorageCapacityIsolation": false,
        "shutdownGracePeriod": "0s",
        "maxPods": 110,
    });
    serde_yaml::to_string(&conf).expect("static YAML")
}

/// kube-proxy's configuration file (iptables mode: this kernel has no IPVS).
pub fn kube_proxy_yaml(layout: &Layout, kubeconfig: &Path, node_name: &str, metrics_port: u16) -> String {
    let conf = json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig.display().to_string()},
        "mode": "iptables",
        "hostnameOverride": node_name,
        "clusterCIDR": layout.cluster_cidr(),
        "bindAddress": "127.0.0.1",
        "healthzBindAddress": "",
        "metricsBindAddress": format!("127.0.0.1:{metrics_port}"),
        // nf_conntrack_max is read-only in a child network namespace.
        "conntrack": {"maxPerCore": 0},
        "oomScoreAdj": 0,
        "iptables": {"syncPeriod": "5s", "minSyncPeriod": "0s"},
    });
    serde_yaml::to_string(&conf).expect("static YAML")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeLayout {
        Layout::new(7, Path::new("/run/x")).nodes(2, &["z".into()])[1].clone()
    }

    #[test]
    fn containerd_keeps_all_state_under_the_node_and_restricts_oom_score_adj() {
        let t = containerd_toml(&node(), Path::new("/bin/runc"), Path::new("/cni"));
        let v: toml::Table = t.parse().expect("valid TOML");
        let s = |v: &toml::Value| v.as_str().unwrap().to_owned();
        assert_eq!(s(&v["root"]), "/run/x/nodes/node-1/containerd-root");
        let runtime = &v["plugins"]["io.containerd.cri.v1.runtime"];
        assert_eq!(runtime["restrict_oom_score_adj"].as_bool(), Some(true));
        let runc = &runtime["containerd"]["runtimes"]["runc"]["options"];
        assert_eq!(s(&runc["Root"]), "/run/x/nodes/node-1/runc");
        assert_eq!(s(&runc["BinaryName"]), "/bin/runc");
        assert_eq!(s(&runtime["cni"]["conf_dir"]), "/run/x/nodes/node-1/cni-conf");
        assert_eq!(
            s(&v["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"]),
            PAUSE_IMAGE
        );
        assert_eq!(
            s(&runtime["containerd"]["runtimes"]["runc"]["base_runtime_spec"]),
            "/run/x/nodes/node-1/base-runtime-spec.json"
        );
    }

    #[test]
    fn every_container_sees_its_nodes_clock_read_only_on_top_of_containerds_default_spec() {
        let default = r#"{"ociVersion": "1.3.0",
            "process": {"cwd": "/", "apparmorProfile": "x",
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}]},
            "linux": {"seccomp": {"defaultAction": "SCMP_ACT_ERRNO"}, "maskedPaths": ["/proc/kcore"]},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}]}"#;
        let v: serde_json::Value =
            serde_json::from_str(&base_runtime_spec(default, &node()).unwrap()).unwrap();
        assert_eq!(v["process"]["cwd"], "/", "the default is kept");
        assert_eq!(v["linux"]["maskedPaths"][0], "/proc/kcore");
        // What CRI drops from the default when it has no base spec, dropped here too.
        assert!(v["process"].get("rlimits").is_none(), "{v}");
        assert!(v["process"].get("apparmorProfile").is_none(), "{v}");
        assert!(v["linux"].get("seccomp").is_none(), "{v}");
        assert_eq!(v["mounts"][0]["destination"], "/proc");
        let clock = &v["mounts"][1];
        assert_eq!(clock["destination"], NODE_CLOCK_DIR);
        assert_eq!(clock["source"], "/run/x/nodes/node-1/clock");
        assert_eq!(clock["type"], "bind");
        assert!(clock["options"].as_array().unwrap().contains(&json!("ro")));
        assert!(
            base_runtime_spec("{}", &node()).is_err(),
            "a spec without mounts is refused"
        );
    }

    #[test]
    fn the_pod_network_is_the_nodes_own_subnet_on_its_own_bridge() {
        let v: serde_json::Value = serde_json::from_str(&cni_conflist(&node())).unwrap();
        let bridge = &v["plugins"][0];
        assert_eq!(bridge["bridge"], "rlbr7n1");
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "10.7.2.0/24");
        assert_eq!(bridge["ipam"]["ranges"][0][0]["gateway"], "10.7.2.1");
        assert_eq!(bridge["ipMasq"], false);
    }

    #[test]
    fn kubelet_runs_on_cgroup_v1_with_its_own_root_and_short_leases() {
        let y = kubelet_yaml(
            &node(),
            Path::new("/ca"),
            (Path::new("/c"), Path::new("/k")),
            10250,
            KubeletTimings {
                node_lease_seconds: 4,
            },
        );
        let v: serde_json::Value = serde_yaml::from_str(&y).unwrap();
        assert_eq!(v["failCgroupV1"], false);
        assert_eq!(v["cgroupRoot"], "/redlock-envtest-7-1");
        assert_eq!(v["address"], "10.7.250.2");
        assert_eq!(v["nodeLeaseDurationSeconds"], 4);
        assert_eq!(v["oomScoreAdj"], 0);
        assert_eq!(
            v["containerRuntimeEndpoint"],
            "unix:///run/x/nodes/node-1/containerd.sock"
        );
    }
}
