//! One real node's processes: containerd (with the images imported) and the kubelet, its
//! veth (the node IP), cgroup root and directories.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use nix::sys::signal::Signal;
use tracing::{info, warn};

use super::config::{self, KubeletTimings};
use super::layout::NodeLayout;
use super::node_network::Netns;
use super::{RealNodesConfig, cgroups, device_plugin_socket, node_is_ready};
use crate::controlplane::log_tail;
use crate::procs::{ManagedChild, free_port};

pub(super) struct RealNode {
    pub(super) layout: NodeLayout,
    /// Both replaced when a lost node boots again (behind locks: faults run on a shared
    /// handle). No containerd means the node is down.
    containerd: std::sync::Mutex<Option<ManagedChild>>,
    kubelet: std::sync::Mutex<Option<ManagedChild>>,
    bin_dir: std::path::PathBuf,
    /// The control plane's network namespace, where containerd and the kubelet run.
    netns: Netns,
}

impl RealNode {
    pub(super) async fn start(layout: NodeLayout, config: &RealNodesConfig) -> Result<Self> {
        std::fs::create_dir_all(&layout.dir)?;
        // A node IP must sit on an interface; this kernel has no dummy devices, so a veth.
        let netns = config.netns.clone();
        let _ = netns.run("ip", &["link", "del", &layout.veth]);
        netns.run(
            "ip",
            &[
                "link",
                "add",
                &layout.veth,
                "type",
                "veth",
                "peer",
                "name",
                &layout.veth_peer,
            ],
        )?;
        netns.run(
            "ip",
            &["addr", "add", &format!("{}/32", layout.ip), "dev", &layout.veth],
        )?;
        netns.run("ip", &["link", "set", &layout.veth, "up"])?;
        netns.run("ip", &["link", "set", &layout.veth_peer, "up"])?;
        cgroups::create(&layout.cgroup_root)?;

        let node = Self {
            layout,
            containerd: std::sync::Mutex::new(None),
            kubelet: std::sync::Mutex::new(None),
            bin_dir: config.bin_dir.clone(),
            netns,
        };
        node.write_containerd_files(config)?;
        node.start_containerd().await?;
        node.import_images(&config.images)?;
        node.write_kubelet_files(config)?;
        node.start_kubelet().await?;
        Ok(node)
    }

    fn write_containerd_files(&self, config: &RealNodesConfig) -> Result<()> {
        let l = &self.layout;
        std::fs::create_dir_all(l.cni_conf_dir())?;
        std::fs::write(
            l.cni_conf_dir().join("10-redlock.conflist"),
            config::cni_conflist(l),
        )?;
        std::fs::write(
            l.dir.join("containerd.toml"),
            config::containerd_toml(l, &config.bin_dir.join("runc"), &config.cni_bin),
        )?;
        // The node's clock starts true; `set_clock` steps it. Readable by the containers'
        // users (uid 999), whatever the umask.
        std::fs::create_dir_all(l.clock_dir())?;
        std::fs::set_permissions(l.clock_dir(), std::fs::Permissions::from_mode(0o755))?;
        self.set_clock("+0")?;
        let default_spec = Command::new(self.bin_dir.join("ctr"))
            .args(["oci", "spec"])
            .output()?;
        if !default_spec.status.success() {
            bail!("ctr oci spec: {}", String::from_utf8_lossy(&default_spec.stderr));
        }
        std::fs::write(
            l.base_runtime_spec(),
            config::base_runtime_spec(&String::from_utf8_lossy(&default_spec.stdout), l)?,
        )?;
        Ok(())
    }

    /// Sets the wall-clock offset every Redis process of the `redis:7.0-faketime` image on
    /// this node sees (a libfaketime offset such as "+30s"), within a second for running
    /// ones (`FAKETIME_CACHE_DURATION=1`) and from the start for new ones. Written whole and
    /// renamed into place, so a reader never sees half an offset.
    pub(super) fn set_clock(&self, offset: &str) -> Result<()> {
        let dir = self.layout.clock_dir();
        let tmp = dir.join(".offset.tmp");
        std::fs::write(&tmp, format!("{offset}\n"))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))?;
        std::fs::rename(&tmp, dir.join("offset"))?;
        Ok(())
    }

    fn containerd(&self) -> std::sync::MutexGuard<'_, Option<ManagedChild>> {
        // Every critical section only swaps, polls or signals the child: a poisoned lock is fine.
        self.containerd.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn start_containerd(&self) -> Result<()> {
        let l = &self.layout;
        // The CNI plugins containerd runs put the bridge and the pods' veths in its namespace.
        let mut cmd = self.netns.command(self.bin_dir.join("containerd"));
        cmd.arg("--config").arg(l.dir.join("containerd.toml"));
        // The shim is found on PATH.
        let path = format!(
            "{}:{}",
            self.bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        cmd.env("PATH", path);
        let log = l.dir.join("containerd.log");
        *self.containerd() = Some(ManagedChild::spawn(&format!("containerd {}", l.name), cmd, &log)?);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.ctr(&["version"]).is_ok_and(|o| o.status.success()) {
            let exited = self.containerd().as_mut().and_then(|c| c.exited());
            if let Some(status) = exited {
                bail!(
                    "containerd of {} exited ({status}):\n{}",
                    l.name,
                    log_tail(&log, 30)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "containerd of {} not answering in 30s:\n{}",
                    l.name,
                    log_tail(&log, 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    fn ctr(&self, args: &[&str]) -> std::io::Result<std::process::Output> {
        Command::new(self.bin_dir.join("ctr"))
            .arg("--address")
            .arg(self.layout.containerd_socket())
            .args(["--namespace", "k8s.io"])
            .args(args)
            .output()
    }

    /// Into the CRI namespace (`k8s.io`): images anywhere else are invisible to the kubelet.
    fn import_images(&self, images: &[std::path::PathBuf]) -> Result<()> {
        for image in images {
            let path = image.display().to_string();
            let out = self.ctr(&["images", "import", &path])?;
            if !out.status.success() {
                bail!(
                    "import {path} into {}: {}",
                    self.layout.name,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        Ok(())
    }

    pub(super) fn tag_image(&self, source: &str, target: &str) -> Result<()> {
        let out = self.ctr(&["images", "tag", "--force", source, target])?;
        if !out.status.success() {
            bail!(
                "tag {source} as {target} on {}: {}",
                self.layout.name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    fn write_kubelet_files(&self, config: &RealNodesConfig) -> Result<()> {
        let l = &self.layout;
        let pki_dir = l.dir.join("pki");
        let (cert, key) = config.pki.issue(
            &pki_dir,
            "client",
            &format!("system:node:{}", l.name),
            Some("system:nodes"),
            &[],
        )?;
        let (serving_cert, serving_key) =
            config
                .pki
                .issue(&pki_dir, "serving", &l.name, None, &[std::net::IpAddr::V4(l.ip)])?;
        std::fs::write(
            l.dir.join("kubeconfig"),
            config.pki.kubeconfig_for(&config.api_url, &cert, &key),
        )?;
        std::fs::write(
            l.dir.join("kubelet.yaml"),
            config::kubelet_yaml(
                l,
                &config.pki.ca_cert,
                (&serving_cert, &serving_key),
                free_port()?,
                KubeletTimings {
                    node_lease_seconds: config.node_lease_seconds,
                },
            ),
        )?;
        Ok(())
    }

    fn kubelet(&self) -> std::sync::MutexGuard<'_, Option<ManagedChild>> {
        // Every critical section only swaps or signals the child: a poisoned lock is fine.
        self.kubelet.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the kubelet in turn with every other kubelet of the machine
    /// ([`device_plugin_socket`]).
    async fn start_kubelet(&self) -> Result<()> {
        let l = &self.layout;
        let mut cmd = self.netns.command(self.bin_dir.join("kubelet"));
        cmd.arg(format!("--config={}", l.dir.join("kubelet.yaml").display()))
            .arg(format!("--kubeconfig={}", l.dir.join("kubeconfig").display()))
            .arg(format!("--root-dir={}", l.kubelet_root().display()))
            .arg(format!("--cert-dir={}", l.dir.join("pki").display()))
            .arg(format!("--hostname-override={}", l.name))
            .arg(format!("--node-ip={}", l.ip))
            .arg(format!("--node-labels=topology.kubernetes.io/zone={}", l.zone))
            .arg("--v=1");
        let log = l.dir.join("kubelet.log");
        let kubelet = device_plugin_socket::start_in_turn(|| {
            ManagedChild::spawn(&format!("kubelet {}", l.name), cmd, &log)
        })
        .await?;
        *self.kubelet() = Some(kubelet);
        Ok(())
    }

    pub(super) async fn wait_ready(&self, client: &kube::Client, timeout: Duration) -> Result<()> {
        let api = Api::<Node>::all(client.clone());
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(n) = api.get_opt(&self.layout.name).await?
                && node_is_ready(&n)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "node {} not Ready in {timeout:?}; its kubelet log ends:\n{}",
                    self.layout.name,
                    log_tail(&self.layout.dir.join("kubelet.log"), 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The PID of a running container's task, from containerd (`ctr tasks ls`).
    pub(super) fn task_pid(&self, container_id: &str) -> Result<u32> {
        let out = self.ctr(&["tasks", "ls"])?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .skip(1)
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                Some((f.next()?, f.next()?, f.next()?))
            })
            .find(|(id, _, status)| *id == container_id && *status == "RUNNING")
            .and_then(|(_, pid, _)| pid.parse().ok())
            .with_context(|| format!("container {container_id} is not running on {}", self.layout.name))
    }

    fn kubelet_signal(&self, sig: Signal) -> Result<()> {
        self.kubelet()
            .as_ref()
            .with_context(|| format!("the kubelet of {} is not running", self.layout.name))?
            .signal(sig)
    }

    pub(super) fn partition(&self) -> Result<()> {
        self.kubelet_signal(Signal::SIGSTOP)?;
        info!(node = %self.layout.name, "node partitioned (kubelet stopped, containers serving)");
        Ok(())
    }

    pub(super) fn heal(&self) -> Result<()> {
        self.kubelet_signal(Signal::SIGCONT)?;
        info!(node = %self.layout.name, "node healed");
        Ok(())
    }

    /// The machine dies (power off): kubelet, containers, shims and containerd are killed at
    /// once, and what a reboot does not keep goes too: every mount (container root
    /// filesystems, Secret volumes, pod network namespaces), containerd's and runc's runtime
    /// state (a machine's `/run`) and the cgroups. What is on disk stays: the images and
    /// containerd's metadata, the kubelet's directory, the CNI address allocations.
    pub(super) fn lose(&self) -> Result<()> {
        let l = &self.layout;
        let kubelet = self.kubelet().take();
        // An error only says the process had exited already: the rest must still happen.
        if let Some(k) = &kubelet {
            let _ = k.signal(Signal::SIGKILL);
        }
        let containerd = self.containerd().take();
        if let Some(c) = &containerd {
            let _ = c.signal(Signal::SIGKILL);
        }
        // Kills every container (and pause) process, waits until none is left, and removes the
        // cgroups; the shims live outside them.
        cgroups::remove(&l.cgroup_root)?;
        kill_processes_naming(&l.containerd_socket());
        // Reaped only now, so that nothing of the node ran on after the first kill.
        for mut child in [kubelet, containerd].into_iter().flatten() {
            child.stop(Duration::ZERO);
        }
        unmount_below(&l.dir);
        for volatile in [l.containerd_state(), l.runc_root()] {
            match std::fs::remove_dir_all(&volatile) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("remove {}", volatile.display()));
                }
                _ => {}
            }
        }
        info!(node = %l.name, "node lost (kubelet, containerd and every container killed; runtime state gone)");
        Ok(())
    }

    /// The node comes back. A lost node boots: new cgroups, containerd on the same disk, and
    /// a new kubelet, which starts the pods still bound to it in new sandboxes. A node whose
    /// containerd runs (a partition's end) only gets a new kubelet, which registers its Node
    /// again and kills the containers of pods deleted meanwhile.
    pub(super) async fn restore(&self) -> Result<()> {
        let old = self.kubelet().take();
        if let Some(mut k) = old {
            k.stop(Duration::from_secs(2));
        }
        let booting = self.containerd().is_none();
        if booting {
            cgroups::create(&self.layout.cgroup_root)?;
            self.start_containerd().await?;
        }
        self.start_kubelet().await?;
        info!(node = %self.layout.name, booting, "node restored (new kubelet)");
        Ok(())
    }

    /// Kills everything of this node and removes its traces; best effort, never panics.
    fn stop(&mut self) {
        let l = self.layout.clone();
        let kubelet = self.kubelet().take();
        if let Some(mut k) = kubelet {
            k.stop(Duration::from_secs(2));
        }
        // Containers (and their pause processes) live in the node's cgroups, their shims
        // outside them: both go before containerd, which would otherwise restart nothing but
        // leave shims running.
        if let Err(e) = cgroups::remove(&l.cgroup_root) {
            warn!(node = %l.name, "{e:#}");
        }
        kill_processes_naming(&l.containerd_socket());
        let containerd = self.containerd().take();
        if let Some(mut c) = containerd {
            c.stop(Duration::from_secs(5));
        }
        kill_processes_naming(&l.containerd_socket());
        unmount_below(&l.dir);
        // A failing test keeps its state for the post-mortem (ControlPlane's Drop), but not
        // the node's image store and snapshots: the images every run imports (their tarballs
        // alone are 160 MB, on each node), none of the logs. Pod logs and containerd's own log
        // stay.
        if std::thread::panicking() {
            let _ = std::fs::remove_dir_all(l.containerd_root());
        }
        let _ = self.netns.run("ip", &["link", "del", &l.veth]);
        let _ = self.netns.run("ip", &["link", "del", &l.bridge]);
        if let Err(e) = cgroups::remove(&l.cgroup_root) {
            warn!(node = %l.name, "{e:#}");
        }
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.stop();
    }
}

/// SIGKILL to every process whose command line mentions `needle` (containerd shims name
/// their containerd's socket in `-address`).
fn kill_processes_naming(needle: &Path) {
    let needle = needle.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == std::process::id() as i32 {
            continue;
        }
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Unmounts (lazily) every mount at or below `dir`, deepest first: container root
/// filesystems, Secret tmpfs volumes, the overlay snapshots.
fn unmount_below(dir: &Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(unescape_mountinfo))
        .filter(|p| Path::new(p).starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = nix::mount::umount2(p.as_str(), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// mountinfo escapes space, tab, newline and backslash as octal (`\040`).
fn unescape_mountinfo(s: &str) -> String {
    let mut out = String::new();
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 4 <= bytes.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8)
        {
            out.push(v as char);
            i += 4;
            continue;
        }
        out.push(bytes[i] as char);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::unescape_mountinfo;

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape_mountinfo(r"/a\040b/c"), "/a b/c");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
    }
}
