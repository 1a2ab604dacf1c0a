//! Child processes that cannot outlive the test: each runs in its own process group, dies
//! with its parent (`PR_SET_PDEATHSIG`), and is stopped (SIGTERM, then SIGKILL) on drop.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// A running child process; killed with its whole process group when dropped.
///
/// The group is killed *before* the leader is reaped, never after: a zombie leader keeps its
/// number (and so its group's) from being handed out again, while a reaped one's number is
/// free at once. A `killpg` of a reaped leader's number, seconds later on a machine whose
/// 32,768 PIDs wrap in minutes, killed whatever group had taken that number meanwhile: once a
/// real node's containerd shim (shims lead their own session) of a test running beside a
/// process-kubelet test, whose pod then never started again.
pub struct ManagedChild {
    name: String,
    child: Option<Child>,
    /// Set once the leader is reaped (its group killed just before): nothing is sent to its
    /// number from then on.
    status: Option<ExitStatus>,
}

impl ManagedChild {
    /// Spawns `cmd` with stdout and stderr appended to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Self> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("open log {}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().with_context(|| format!("spawn {name}"))?;
        Ok(Self {
            name: name.to_owned(),
            child: Some(child),
            status: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the process has exited. If so, whatever is left of its group is killed and the
    /// leader reaped (in that order).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            match self.child.as_ref().map(|c| peek_exit(c.id())) {
                Some(Some(true)) => self.reap(false),
                Some(None) => self.reap(true),
                Some(Some(false)) | None => {}
            }
        }
        self.status
    }

    /// Sends `signal` to the whole process group; an error once the leader is reaped.
    pub fn signal(&self, signal: Signal) -> Result<()> {
        if self.status.is_some() || self.child.is_none() {
            bail!("{} has exited: its process group is gone", self.name);
        }
        let pid = Pid::from_raw(self.pid() as i32);
        killpg(pid, signal).with_context(|| format!("signal {signal} to {}", self.name))
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL; always reaps.
    pub fn stop(&mut self, grace: Duration) {
        if self.status.is_some() || self.child.is_none() {
            self.child = None;
            return;
        }
        let pgid = Pid::from_raw(self.pid() as i32);
        if self.exited().is_none() {
            let _ = killpg(pgid, Signal::SIGCONT);
            let _ = killpg(pgid, Signal::SIGTERM);
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if self.exited().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let gone = peek_exit(self.pid()).is_none();
        self.reap(gone);
        self.child = None;
    }

    /// Kills the group (children of the leader share it) while the leader, alive or a
    /// zombie, still pins its number, then reaps the leader. A leader that is `gone` (no
    /// longer our child to wait for: [`peek_exit`] said so) pins nothing: it is not
    /// signalled, and counts as exited with an unknown status.
    fn reap(&mut self, gone: bool) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        if self.status.is_none() {
            if !gone {
                let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            }
            self.status = Some(child.wait().unwrap_or_else(|_| unknown_exit()));
        }
    }
}

/// `waitid` on our child `pid` without reaping it (`WNOWAIT`, `WNOHANG`): `None` if it is not
/// our child to wait for (ECHILD: reaped already), else whether it has exited.
fn peek_exit(pid: u32) -> Option<bool> {
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on our own child with a valid siginfo buffer; WNOWAIT leaves it a zombie.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // With WNOHANG, si_pid stays 0 while the child runs.
    (rc == 0).then(|| unsafe { info.si_pid() } != 0)
}

/// The status of a child that could not be waited for (reaped elsewhere): a wait status of
/// exit code 127, since the real one is lost.
fn unknown_exit() -> ExitStatus {
    std::os::unix::process::ExitStatusExt::from_raw(127 << 8)
}

impl Drop for ManagedChild {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// A free TCP port on 127.0.0.1 for a server started later (bound and released), reserved
/// for this process until it exits.
///
/// Chosen at random *below* the kernel's ephemeral range: a port from `bind(0)` comes from
/// that range, and between its release and the server's own bind any outgoing connection on
/// the machine (API clients, Redis probes) could take it as its source port, which made etcd
/// fail with "address already in use".
///
/// A bind test alone cannot see a port another test process has chosen but whose server has
/// not bound it yet; with test binaries running side by side two of them picked the same port
/// and kube-controller-manager failed to listen. So every port handed out is also pinned by a
/// lock on a file named after it (see [`reserve`]), which other test processes respect and the
/// kernel drops when this process exits, however it ends.
pub fn free_port() -> Result<u16> {
    use std::hash::{BuildHasher, Hasher};
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral_start.saturating_sub(1).max(10_001));
    let seed = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    for i in 0..1000u64 {
        let port = low + ((seed.wrapping_add(i.wrapping_mul(7919)) % u64::from(high - low)) as u16);
        let Some(reservation) = reserve(port)? else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            keep(reservation);
            return Ok(port);
        }
    }
    bail!("no free port in 1000 tries between {low} and {high}")
}

/// Where the port reservations of every test process on the machine live.
fn reservation_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("redlock-test-ports")
}

/// An exclusive lock on `port`'s file, or `None` while another process (or another call in
/// this one) holds it. The file is opened close-on-exec, so the servers the port is handed to
/// never inherit the lock and it ends with this process.
fn reserve(port: u16) -> Result<Option<std::fs::File>> {
    let dir = reservation_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    try_lock_file(&dir.join(port.to_string()))
}

/// An exclusive lock on the file at `path` (created if missing), or `None` while another
/// holder has it. Rust opens files close-on-exec, so started processes never inherit the
/// lock; the kernel drops it when this process exits.
pub(crate) fn try_lock_file(path: &std::path::Path) -> Result<Option<std::fs::File>> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("locking {}", path.display())),
    }
}

/// Holds a reservation until the process exits: the port's server may run as long as the
/// process does, and a port is never handed out twice meanwhile.
fn keep(reservation: std::fs::File) {
    static KEPT: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());
    KEPT.lock().unwrap_or_else(|p| p.into_inner()).push(reservation);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields of `/proc/<pid>/stat` after the command name: state, ppid, pgrp, ...
    fn stat_fields(pid: u32) -> Option<Vec<String>> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(
            stat.rsplit_once(") ")?
                .1
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
        )
    }

    /// Whether these stat fields are of a process that runs: not a zombie awaiting its
    /// parent's wait (a zombie has already let go of its files).
    fn runs(fields: &[String]) -> bool {
        fields.first().is_some_and(|state| state != "Z")
    }

    /// Whether `pid` runs (neither gone nor a zombie).
    fn running(pid: u32) -> bool {
        stat_fields(pid).is_some_and(|f| runs(&f))
    }

    /// Whether any process of group `pgid` runs.
    fn group_runs(pgid: u32) -> bool {
        let pgid = pgid.to_string();
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(stat_fields)
            .any(|f| runs(&f) && f.get(2) == Some(&pgid))
    }

    #[test]
    fn a_leader_that_exits_takes_its_group_with_it_and_is_signalled_no_more() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("grandchild");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("sleep 30 & echo $! > {}; exit 3", pid_file.display()));
        let mut child = ManagedChild::spawn("leader", cmd, &dir.path().join("log")).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = child.exited() {
                break s;
            }
            assert!(Instant::now() < deadline, "the leader did not exit");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(3));
        let grandchild: u32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while running(grandchild) {
            assert!(Instant::now() < deadline, "the leader's group outlived it");
            std::thread::sleep(Duration::from_millis(10));
        }
        // Reaped: its number may belong to another process now; nothing is sent to it.
        assert!(child.signal(Signal::SIGKILL).is_err());
        assert_eq!(child.exited(), Some(status));
        child.stop(Duration::ZERO);
    }

    #[test]
    fn stop_kills_a_running_group() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("trap '' TERM; sleep 30");
        let mut child = ManagedChild::spawn("stubborn", cmd, &dir.path().join("log")).unwrap();
        let pid = child.pid();
        assert!(child.exited().is_none());
        child.stop(Duration::from_millis(100));
        assert!(!running(pid));
        assert!(child.signal(Signal::SIGTERM).is_err());
    }

    #[test]
    fn free_ports_lie_outside_the_ephemeral_range_and_can_be_bound() {
        let start: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let ports: Vec<u16> = (0..20).map(|_| free_port().unwrap()).collect();
        for p in &ports {
            assert!((10_000..start).contains(p), "{p} not below {start}");
            std::net::TcpListener::bind(("127.0.0.1", *p)).unwrap();
        }
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert!(distinct.len() > 10, "not random: {ports:?}");
    }

    #[test]
    fn a_port_handed_out_is_not_handed_out_again_while_its_holder_lives() {
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "a port twice: {ports:?}");
        // Another process sees them as taken although nothing listens on them yet.
        for p in &ports {
            assert!(reserve(*p).unwrap().is_none(), "{p} could be reserved again");
        }
    }

    #[test]
    fn a_reservation_held_by_another_process_is_respected_and_freed_when_it_exits() {
        // A port whose file nobody holds (tried and let go), then locked by a child process
        // with flock(1), the same lock `reserve` takes. Below `free_port`'s range, so no
        // other test process reserves it meanwhile.
        let port = (5_000..10_000u16)
            .find(|p| reserve(*p).unwrap().is_some())
            .unwrap();
        let mut holder = Command::new("flock")
            // --close: the lock stays with flock itself, not the sleep it starts.
            .arg("--close")
            .arg(reservation_dir().join(port.to_string()))
            .args(["sleep", "30"])
            .process_group(0)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while reserve(port).unwrap().is_some() {
            assert!(Instant::now() < deadline, "the child never took the lock");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The whole group, so the sleep goes too; flock itself is waited for. Its child may
        // still hold a copy of the locked file: it closes it between fork and exec, and a
        // loaded machine may not have run it that far when the kill comes. The lock must be
        // free once no process of the group runs, not only once flock is reaped.
        let group = holder.id();
        killpg(Pid::from_raw(group as i32), Signal::SIGKILL).unwrap();
        holder.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while group_runs(group) {
            assert!(
                Instant::now() < deadline,
                "group {group} still runs after SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(reserve(port).unwrap().is_some(), "the lock outlived its holders");
    }
}
