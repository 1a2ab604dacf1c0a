//! The one owner of every process the kubelet starts (containers and exec probes).
//!
//! Keeping all `ManagedChild`ren in one table, not in the async tasks that use them, is
//! what lets `ProcessKubelet`'s synchronous `Drop` kill everything at once, and lets a lost
//! node's processes be killed without waiting for its tasks to notice.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Result;
use nix::sys::signal::Signal;

use crate::procs::ManagedChild;

/// Handle of one process in the table.
pub type ProcId = u64;

struct Entry {
    /// UID of the pod the process belongs to.
    owner: String,
    child: ManagedChild,
}

#[derive(Default)]
pub struct ProcTable {
    entries: Mutex<HashMap<ProcId, Entry>>,
    next_id: AtomicU64,
    /// Niceness every process starts with (`KubeletConfig::pod_nice`); 0 leaves it.
    nice: i32,
}

impl ProcTable {
    pub fn with_nice(nice: i32) -> Self {
        Self {
            entries: Mutex::default(),
            next_id: AtomicU64::default(),
            nice,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ProcId, Entry>> {
        // A panic while holding the lock cannot leave the map inconsistent.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts `cmd` for pod `owner`; returns its id and PID.
    pub fn spawn(&self, owner: &str, name: &str, mut cmd: Command, log: &Path) -> Result<(ProcId, u32)> {
        if self.nice != 0 {
            let nice = self.nice;
            // SAFETY: setpriority is a plain system call, safe between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setpriority(libc::PRIO_PROCESS, 0, nice) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = ManagedChild::spawn(name, cmd, log)?;
        let pid = child.pid();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(
            id,
            Entry {
                owner: owner.to_string(),
                child,
            },
        );
        Ok((id, pid))
    }

    /// The mount namespace of the table's running process `pid` (`/proc/<pid>/ns/mnt`),
    /// opened while the table's lock keeps it from being reaped, so the number cannot name
    /// another process by then. An error if no running process of the table has that PID.
    pub fn mount_namespace(&self, pid: u32) -> Result<std::fs::File> {
        let mut entries = self.lock();
        let entry = entries
            .values_mut()
            .find(|e| e.child.pid() == pid)
            .ok_or_else(|| anyhow::anyhow!("no process {pid} of this kubelet runs"))?;
        if entry.child.exited().is_some() {
            anyhow::bail!("process {pid} has exited");
        }
        let path = format!("/proc/{pid}/ns/mnt");
        std::fs::File::open(&path).map_err(|e| anyhow::anyhow!("opening {path}: {e}"))
    }

    /// The exit status once the process has exited; `None` while it runs (or when the id
    /// is unknown, i.e. it was killed through the table).
    pub fn exited(&self, id: ProcId) -> Option<ExitStatus> {
        self.lock().get_mut(&id).and_then(|e| e.child.exited())
    }

    /// Sends `signal` to the group of the table's process `pid`; an error if no process of the
    /// table has that PID or it has been reaped (its number may be another process's by now).
    pub fn signal_pid(&self, pid: u32, signal: Signal) -> Result<()> {
        let entries = self.lock();
        let entry = entries
            .values()
            .find(|e| e.child.pid() == pid)
            .ok_or_else(|| anyhow::anyhow!("no process {pid} of this kubelet runs"))?;
        entry.child.signal(signal)
    }

    /// Sends `signal` to the process group of `id`.
    pub fn signal(&self, id: ProcId, signal: Signal) -> Result<()> {
        match self.lock().get(&id) {
            Some(e) => e.child.signal(signal),
            None => Ok(()),
        }
    }

    /// Removes `id`, killing its process group if it still runs, and reaps it.
    pub fn kill(&self, id: ProcId) {
        let entry = self.lock().remove(&id);
        if let Some(e) = entry {
            stop_now(vec![e.child]);
        }
    }

    /// Kills every process of pod `owner`.
    pub fn kill_owner(&self, owner: &str) {
        let children: Vec<ManagedChild> = {
            let mut entries = self.lock();
            let ids: Vec<ProcId> = entries
                .iter()
                .filter(|(_, e)| e.owner == owner)
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter()
                .filter_map(|id| entries.remove(&id))
                .map(|e| e.child)
                .collect()
        };
        stop_now(children);
    }

    /// Kills every process in the table.
    pub fn kill_all(&self) {
        let children: Vec<ManagedChild> = self.lock().drain().map(|(_, e)| e.child).collect();
        stop_now(children);
    }

    /// Number of live processes (containers and running exec probes).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// SIGKILLs all groups first and only then reaps, so killing many processes takes as long
/// as the slowest, not the sum. (Called outside the table lock.)
fn stop_now(children: Vec<ManagedChild>) {
    for c in &children {
        let _ = c.signal(Signal::SIGKILL);
    }
    for mut c in children {
        c.stop(std::time::Duration::from_secs(2));
    }
}

impl Drop for ProcTable {
    fn drop(&mut self) {
        self.kill_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_by_owner_and_reports_exits() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let table = ProcTable::default();
        let sleep = || {
            let mut c = Command::new("sleep");
            c.arg("30");
            c
        };
        let (a, pid_a) = table.spawn("pod-a", "a", sleep(), &log).unwrap();
        let (_b, _) = table.spawn("pod-b", "b", sleep(), &log).unwrap();
        assert!(table.exited(a).is_none());
        table.kill_owner("pod-a");
        assert_eq!(table.len(), 1);
        assert!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid_a as i32), None).is_err(),
            "killed and reaped"
        );
        let (c, _) = table.spawn("pod-c", "c", Command::new("true"), &log).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while table.exited(c).is_none() {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(table.exited(c).unwrap().success());
        table.kill_all();
        assert!(table.is_empty());
    }

    #[test]
    fn starts_processes_at_its_niceness() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let niceness = |table: &ProcTable| {
            let mut c = Command::new("sleep");
            c.arg("30");
            let (id, pid) = table.spawn("pod", "sleep", c, &log).unwrap();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            table.kill(id);
            // Field 19, counted after the command name (which may hold spaces).
            stat[stat.rfind(") ").unwrap() + 2..]
                .split(' ')
                .nth(16)
                .unwrap()
                .parse::<i32>()
                .unwrap()
        };
        let ours = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        assert_eq!(niceness(&ProcTable::default()), ours, "inherited when not set");
        assert_eq!(niceness(&ProcTable::with_nice(7)), 7);
    }
}
