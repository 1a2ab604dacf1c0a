//! The run's own network, mount and PID namespaces. Real nodes put pod subnets, bridges,
//! iptables rules and mounts in place; all of that must stay inside namespaces the run
//! created, and die with it:
//!
//! - network: pod subnets and Service IPs exist only here, never on the machine (each
//!   control plane's nodes in a network namespace of their own inside this one,
//!   [`super::node_network`]);
//! - mount: overlay and tmpfs mounts of containers, and the shared paths that the kubelet and
//!   containerd hard-code (`/run/containerd/s`, `/var/log/containers`, `/var/lib/cni`,
//!   `/run/netns`), are private tmpfs mounts here;
//! - PID: when the test binary (PID 1 here) exits, however it exits, the kernel kills every
//!   process left in the namespace, containerd shims included.
//!
//! A test binary with `harness = false` calls [`enter`] first: it re-executes itself inside
//! fresh namespaces (`unshare`), and [`prepare`] sets them up.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};

/// Set in the environment of a process re-executed inside the run's namespaces.
pub const MARKER: &str = "REDLOCK_RUN_NAMESPACES";

/// Paths shared by every kubelet/containerd on a machine that get a private tmpfs here.
const PRIVATE_DIRS: &[&str] = &[
    "/run/containerd",
    "/run/netns",
    "/var/lib/cni",
    "/var/log/containers",
    "/var/log/pods",
];

/// Set by `in-namespaces` in the environment of what it runs: it made the private mounts
/// ([`prepare`]) and keeps the kernel settings the kubelets change for the whole run. Test
/// binaries it runs side by side share its mount namespace; each mounting its own tmpfs over
/// `/run/containerd` and the rest hid the shim sockets and pod logs of the nodes of a binary
/// already running (a containerd could no longer reach its pods' shims).
pub const RUN_PREPARED: &str = "REDLOCK_RUN_PREPARED";

/// Whether this process runs inside namespaces made by [`enter`].
pub fn inside() -> bool {
    std::env::var_os(MARKER).is_some()
}

/// Whether the program that made the namespaces prepared them for every process in them.
pub fn prepared_by_run() -> bool {
    std::env::var_os(RUN_PREPARED).is_some()
}

/// Re-executes the current program inside new network, mount and PID namespaces, unless it
/// already runs there. Returns only inside them (the outer process exits with the inner one's
/// status).
pub fn enter() -> Result<()> {
    if inside() {
        return Ok(());
    }
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let err = unshare(&args, false)?.exec();
    Err(err).context("exec unshare (util-linux)")
}

/// Runs the current program again, with `args`, inside new namespaces as a *child*, so that
/// the caller stays outside (e.g. to forward a port into them, [`super::port_forward`]).
/// Returns the `unshare` process: its own network namespace is the new one, and its forked
/// child (PID 1 of the new PID namespace) is the program. `--kill-child`: if `unshare` dies,
/// the program dies too, and with it every process of the namespace.
pub fn spawn_inside(args: &[std::ffi::OsString]) -> Result<std::process::Child> {
    let mut cmd = unshare(args, true)?;
    // If the caller dies without stopping it, `unshare` is killed, and with it (`--kill-child`)
    // the whole namespace: no process of it outlives the caller.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().context("spawn unshare (util-linux)")
}

/// `unshare` running this program with `args` in new network, mount and PID namespaces
/// (`kill_child`: the program dies if `unshare` does).
fn unshare(args: &[std::ffi::OsString], kill_child: bool) -> Result<Command> {
    if unsafe { libc::geteuid() } != 0 {
        bail!("real nodes need root (network, mount and PID namespaces, cgroups)");
    }
    let exe = std::env::current_exe().context("own executable")?;
    let mut cmd = Command::new("unshare");
    if kill_child {
        cmd.arg("--kill-child");
    }
    cmd.args([
        "--net",
        "--mount",
        "--propagation",
        "private",
        "--pid",
        "--fork",
        "--mount-proc",
        "--",
    ])
    .arg(exe)
    .args(args)
    .env(MARKER, "1")
    // New namespaces: nobody has prepared these (a demo started by a test under
    // `in-namespaces` inherits the run's variable).
    .env_remove(RUN_PREPARED);
    Ok(cmd)
}

/// The program `unshare` (process `unshare_pid`) forked into the new namespaces, by its PID
/// on this side, once it exists.
pub fn program_of(unshare_pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{unshare_pid}/task/{unshare_pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A TCP connection to `addr` made inside the network namespace of process `pid` (a socket
/// stays in the namespace it was made in; only the connecting thread enters it).
pub fn connect_inside(pid: u32, addr: std::net::SocketAddr) -> Result<std::net::TcpStream> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
        .with_context(|| format!("open the network namespace of {pid}"))?;
    in_network_namespace(std::sync::Arc::new(ns), move || {
        std::net::TcpStream::connect(addr)
    })
    .with_context(|| format!("connect to {addr} inside"))
}

/// Runs `f` on a thread of its own that first enters the network namespace `ns`: what `f`
/// makes (a socket) stays in that namespace, and the caller's threads never leave theirs.
pub fn in_network_namespace<T: Send + 'static>(
    ns: std::sync::Arc<std::fs::File>,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    std::thread::spawn(move || {
        nix::sched::setns(&*ns, nix::sched::CloneFlags::CLONE_NEWNET)?;
        f()
    })
    .join()
    .map_err(|_| std::io::Error::other("the thread inside the namespace panicked"))?
}

/// Sets up the namespaces once per process (or not at all when `in-namespaces` did it for the
/// whole run, [`RUN_PREPARED`]): loopback up and the private tmpfs mounts.
/// Forwarding and bridged traffic through iptables are set where the nodes' bridges are, in
/// each control plane's own network namespace ([`super::node_network`]).
pub fn prepare() -> Result<()> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| prepare_once().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn prepare_once() -> Result<()> {
    if !inside() {
        bail!(
            "real nodes run only inside the run's own namespaces: call redlock_testenv::nodes::namespace::enter() \
             at the start of the test binary (harness = false)"
        );
    }
    if prepared_by_run() {
        return Ok(());
    }
    run("ip", &["link", "set", "lo", "up"])?;
    for dir in PRIVATE_DIRS {
        std::fs::create_dir_all(dir).with_context(|| format!("create {dir}"))?;
        nix::mount::mount(
            Some("tmpfs"),
            *dir,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("mode=0755"),
        )
        .with_context(|| format!("mount a private tmpfs on {dir}"))?;
    }
    Ok(())
}

pub fn write_sysctl(key: &str, value: &str) -> Result<()> {
    std::fs::write(Path::new("/proc/sys").join(key), value).with_context(|| format!("sysctl {key}={value}"))
}

pub fn read_sysctl(key: &str) -> Result<String> {
    Ok(std::fs::read_to_string(Path::new("/proc/sys").join(key))
        .with_context(|| format!("read sysctl {key}"))?
        .trim()
        .to_owned())
}

/// Runs a short command (ip, iptables) and fails with its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<()> {
    run_command(Command::new(program), program, args)
}

/// Runs `cmd` (`program`, set up by the caller, e.g. to start in another namespace) with
/// `args` and fails with its stderr.
pub fn run_command(mut cmd: Command, program: &str, args: &[&str]) -> Result<()> {
    let out = cmd
        .args(args)
        .output()
        .with_context(|| format!("run {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
