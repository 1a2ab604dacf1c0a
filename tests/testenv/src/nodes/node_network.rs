//! One control plane's own network namespace, inside the run's. Its real nodes live there:
//! node IPs, CNI bridges, pods' veths, kube-proxy's iptables rules, and the kubelet and
//! containerd processes (the CNI plugins run in containerd's namespace). Two control planes
//! of one run therefore never share iptables chains, and their tests can run at the same
//! time; before, one kube-proxy per run namespace forced real-node tests to run one by one.
//!
//! The API server, etcd, the operator and the test process stay in the run's namespace. A
//! veth pair joins the two: its run-side end holds the API server's address for pods
//! ([`Layout::api_ip`], 10.B.255.1/30), its other end 10.B.255.2 is the control plane's
//! default gateway, and the run's namespace routes the whole block 10.B.0.0/16 (node IPs,
//! pod subnets, Service ClusterIPs) through it, so the test process reaches pods and Services
//! as before.
//!
//! The nodes reach the run's namespace at one address and port: the API server's. Everything
//! else there (another control plane's API server, bound to every address of the run's
//! namespace; the operator's HTTP port) is refused to them, and nothing they send is forwarded
//! (to another control plane's nodes), whatever `ip_forward` the run's namespace inherited
//! from the machine: the chain `rlcpB-nodes` in the run's namespace, on the traffic that comes
//! in over the link.
//!
//! The namespace is named `rlcpB` under `/run/netns`, a private tmpfs of the run's mount
//! namespace (`ip netns add`; never `ip netns exec`, which remounts /sys and loses the cgroup
//! mounts: processes enter with `setns` before they exec). Dropping it removes the namespace;
//! what was in it (bridges, veths, iptables rules) goes with it.

use std::ffi::OsStr;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use super::layout::Layout;
use super::namespace;

/// A handle that starts commands inside a control plane's network namespace; cheap to clone.
#[derive(Clone, Debug)]
pub struct Netns {
    name: String,
    file: Arc<std::fs::File>,
}

impl Netns {
    fn open(name: &str) -> Result<Self> {
        let path = PathBuf::from("/run/netns").join(name);
        let file = std::fs::File::open(&path)
            .with_context(|| format!("open the network namespace {}", path.display()))?;
        Ok(Self {
            name: name.to_owned(),
            file: Arc::new(file),
        })
    }

    /// `program` to be run inside this namespace: the child enters it between fork and exec,
    /// so the program (and whatever it starts) never runs in the run's namespace.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        let file = self.file.clone();
        // SAFETY: setns is a plain system call, async-signal-safe; the file stays open for as
        // long as the command (the closure owns a reference to it).
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    /// Runs a short command (ip, iptables) inside this namespace; fails with its stderr.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<()> {
        namespace::run_command(self.command(program), program, args)
            .with_context(|| format!("in the network namespace {}", self.name))
    }

    /// A network sysctl of this namespace (`/proc/sys/net/...` shows the namespace of the
    /// process that opens it).
    fn write_sysctl(&self, key: &str, value: &str) -> Result<()> {
        let path = format!("/proc/sys/{key}");
        self.run("sh", &["-c", &format!("echo {value} > {path}")])
            .with_context(|| format!("sysctl {key}={value}"))
    }

    /// A TCP connection to `addr` made from inside this namespace (only the connecting thread
    /// enters it; the socket stays in it).
    pub fn connect(&self, addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
        namespace::in_network_namespace(self.file.clone(), move || {
            TcpStream::connect_timeout(&addr, timeout)
        })
    }

    /// A TCP listener bound to `addr` inside this namespace.
    pub fn listen(&self, addr: SocketAddr) -> std::io::Result<TcpListener> {
        namespace::in_network_namespace(self.file.clone(), move || TcpListener::bind(addr))
    }
}

/// A control plane's network namespace and the link to it; removed on drop.
pub struct NodeNetwork {
    netns: Netns,
    link: String,
    /// The run namespace's chain that admits the nodes' traffic (see the module's comment).
    chain: String,
}

/// The rules that send traffic from the nodes' link to `chain`, as `iptables` arguments
/// without the operation: INPUT (to an address of the run's namespace) and FORWARD (through
/// it, refused outright).
fn jumps<'a>(link: &'a str, chain: &'a str) -> [[&'a str; 5]; 2] {
    [
        ["INPUT", "-i", link, "-j", chain],
        ["FORWARD", "-i", link, "-j", "REJECT"],
    ]
}

/// Switches IPv6 off on a link through `write` (given `setting`), unless the kernel has no IPv6
/// (`/proc/sys/net/ipv6` missing), when there is nothing to switch off.
fn disable_ipv6(setting: &str, write: impl FnOnce(&str) -> Result<()>) -> Result<()> {
    if !std::path::Path::new("/proc/sys/net/ipv6").exists() {
        return Ok(());
    }
    write(setting)
}

/// `iptables` in the run's namespace; `-w` waits for the lock another control plane's setup
/// may hold at the same moment.
fn iptables(args: &[&str]) -> Result<()> {
    let mut all = vec!["-w"];
    all.extend_from_slice(args);
    namespace::run("iptables", &all)
}

fn remove_admission(link: &str, chain: &str) {
    for jump in jumps(link, chain) {
        while iptables(&[&["-D"][..], &jump].concat()).is_ok() {}
    }
    let _ = iptables(&["-F", chain]);
    let _ = iptables(&["-X", chain]);
}

impl NodeNetwork {
    /// The namespace and its link; the nodes may reach the run's namespace at the API
    /// server's address on `api_port` only.
    pub fn create(layout: &Layout, api_port: u16) -> Result<Self> {
        namespace::prepare()?;
        let name = layout.netns_name();
        let (link, peer) = layout.api_veth();
        let chain = format!("{name}-nodes");
        // Leftovers of a control plane of the same block that died without cleaning up.
        let _ = namespace::run("ip", &["netns", "del", &name]);
        let _ = namespace::run("ip", &["link", "del", &link]);
        remove_admission(&link, &chain);
        namespace::run("ip", &["netns", "add", &name])?;
        let netns = Netns::open(&name)?;
        // Constructed now, so that whatever fails below still removes the namespace.
        let this = Self {
            netns,
            link: link.clone(),
            chain: chain.clone(),
        };
        let (api_ip, gateway) = (layout.api_ip(), layout.node_network_gateway());
        namespace::run(
            "ip",
            &[
                "link", "add", &link, "type", "veth", "peer", "name", &peer, "netns", &name,
            ],
        )?;
        // IPv4 only: the rules below are iptables', and a link-local IPv6 address on the link
        // would let the nodes reach every listener of the run's namespace past them.
        disable_ipv6(&format!("/proc/sys/net/ipv6/conf/{link}/disable_ipv6"), |path| {
            std::fs::write(path, "1").with_context(|| format!("write {path}"))
        })?;
        namespace::run("ip", &["addr", "add", &format!("{api_ip}/30"), "dev", &link])?;
        namespace::run("ip", &["link", "set", &link, "up"])?;
        let (api_ip_text, api_port_text) = (api_ip.to_string(), api_port.to_string());
        iptables(&["-N", &chain])?;
        for rule in [
            // Replies to what the run's namespace opened (the tests reach pods and Services).
            &[
                "-m",
                "conntrack",
                "--ctstate",
                "ESTABLISHED,RELATED",
                "-j",
                "ACCEPT",
            ][..],
            &[
                "-p",
                "tcp",
                "-d",
                &api_ip_text,
                "--dport",
                &api_port_text,
                "-j",
                "ACCEPT",
            ],
            // Refused at once rather than dropped: a stray connection fails fast and clearly.
            &["-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"],
            &["-j", "REJECT"],
        ] {
            let mut args = vec!["-A", chain.as_str()];
            args.extend_from_slice(rule);
            iptables(&args)?;
        }
        for jump in jumps(&link, &chain) {
            iptables(&[&["-I"][..], &jump].concat())?;
        }
        // The run's namespace has no default route: the whole block goes to the nodes'.
        namespace::run(
            "ip",
            &[
                "route",
                "add",
                &layout.cluster_cidr(),
                "via",
                &gateway.to_string(),
            ],
        )?;
        let ns = &this.netns;
        ns.run("ip", &["link", "set", "lo", "up"])?;
        disable_ipv6(&format!("net/ipv6/conf/{peer}/disable_ipv6"), |key| {
            ns.write_sysctl(key, "1")
        })?;
        ns.run("ip", &["addr", "add", &format!("{gateway}/30"), "dev", &peer])?;
        ns.run("ip", &["link", "set", &peer, "up"])?;
        ns.run("ip", &["route", "add", "default", "via", &api_ip.to_string()])?;
        ns.write_sysctl("net/ipv4/ip_forward", "1")?;
        // Per network namespace since Linux 5.3; without it traffic between pods on one bridge
        // bypasses kube-proxy's DNAT of Service IPs.
        if std::path::Path::new("/proc/sys/net/bridge").exists() {
            ns.write_sysctl("net/bridge/bridge-nf-call-iptables", "1")?;
        }
        Ok(this)
    }

    pub fn netns(&self) -> &Netns {
        &self.netns
    }
}

impl Drop for NodeNetwork {
    fn drop(&mut self) {
        remove_admission(&self.link, &self.chain);
        let _ = namespace::run("ip", &["link", "del", &self.link]);
        let _ = namespace::run("ip", &["netns", "del", &self.netns.name]);
    }
}
