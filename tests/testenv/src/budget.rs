//! One machine-wide budget of control planes running at once, shared by every process that
//! starts one (each test binary, devenv), not per binary: a control plane with its nodes
//! takes a slot before its etcd starts ([`ControlPlane::start`](crate::ControlPlane::start))
//! and holds it until it is dropped; the rest queue. With two test binaries side by side
//! (tests/tools/run-test-binaries.sh) times two test threads each, four control planes with
//! five real nodes each had run at once on 2 cores: etcd requests took 7.6–7.9 s and the
//! operators' leases were lost.
//!
//! A slot is an exclusive `flock` on a file in a machine-wide directory, as the address blocks
//! (`controlplane::IpBlock`) and port reservations (`procs::free_port`) are held: the kernel
//! releases it when its holder exits, however it ends, so a crashed test frees its slot. The
//! number of slots comes from the machine ([`machine_slots`]) unless
//! `REDLOCK_TEST_CONTROL_PLANES` says.
//!
//! A test that starts a second control plane while its thread holds a slot takes a second one
//! only if one is free at once, and otherwise runs it on the slot it holds: waiting could
//! deadlock (every slot held by a test waiting for another).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Overrides the number of slots (a positive number).
pub const SLOTS_ENV: &str = "REDLOCK_TEST_CONTROL_PLANES";

/// What a control plane with five real nodes uses at most (etcd, the API server, controller
/// manager and scheduler; five kubelets and containerds; their Redis pods and the operator),
/// with room for the page cache its images and logs need.
pub const BYTES_PER_CONTROL_PLANE: u64 = 2_500 * 1024 * 1024 * 1024 / 1000;

/// How often a waiting control plane tries the slots again.
const RETRY: Duration = Duration::from_millis(200);
/// How often a waiting control plane says it still waits, and for whom.
const REPORT_EVERY: Duration = Duration::from_secs(30);

/// A held slot; dropping it frees the slot (as the holder's exit does).
#[derive(Debug)]
pub struct Slot {
    /// The slot's number, or `None` when it runs on a slot its thread holds already.
    index: Option<usize>,
    count: usize,
    waited: Duration,
    thread: ThreadId,
    _lock: Option<std::fs::File>,
}

impl Slot {
    /// How long it waited for its slot.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// A line for the logs: which slot, of how many, after how long.
    pub fn describe(&self) -> String {
        match self.index {
            Some(i) => format!(
                "control-plane slot {} of {} on this machine, after waiting {:.1} s",
                i + 1,
                self.count,
                self.waited.as_secs_f64()
            ),
            None => format!(
                "no control-plane slot of its own (all {} taken): it runs on the slot its test already holds",
                self.count
            ),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = held();
        if let Some(n) = held.get_mut(&self.thread) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.thread);
            }
        }
        // The file closes after this: the kernel drops the lock.
    }
}

/// Slots (of any budget directory) held by each thread of this process.
fn held() -> std::sync::MutexGuard<'static, HashMap<ThreadId, usize>> {
    static HELD: LazyLock<Mutex<HashMap<ThreadId, usize>>> = LazyLock::new(Default::default);
    HELD.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where the slots of every process on the machine live.
pub fn slot_dir() -> PathBuf {
    std::env::temp_dir().join("redlock-test-control-planes")
}

/// How many control planes may run at once here: `REDLOCK_TEST_CONTROL_PLANES`, else
/// [`machine_slots`] of this machine's cores and memory.
pub fn slots() -> Result<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    slots_from(std::env::var(SLOTS_ENV).ok().as_deref(), cores, memory_bytes())
}

/// [`slots`] given the variable's value, the cores and the memory.
fn slots_from(var: Option<&str>, cores: usize, memory_bytes: Option<u64>) -> Result<usize> {
    match var.map(|v| (v, v.trim().parse::<usize>())) {
        None => Ok(machine_slots(cores, memory_bytes)),
        Some((_, Ok(n))) if n > 0 => Ok(n),
        Some((v, _)) => bail!("{SLOTS_ENV}={v:?}: expected a number of control planes, at least 1"),
    }
}

/// One control plane per core, and no more than the memory holds at
/// [`BYTES_PER_CONTROL_PLANE`] each (the whole memory, not what is free: every process on the
/// machine must come to the same number, whatever runs at the moment); at least one.
pub fn machine_slots(cores: usize, memory_bytes: Option<u64>) -> usize {
    let by_memory = memory_bytes.map_or(usize::MAX, |m| (m / BYTES_PER_CONTROL_PLANE) as usize);
    cores.min(by_memory).max(1)
}

/// The machine's memory (`MemTotal`), or the cgroup's limit if that is lower.
fn memory_bytes() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let kib = m.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
        Some(kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok()? * 1024)
    });
    let limit = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("0::"))
                .map(|p| p.trim().to_owned())
        })
        .and_then(|path| {
            std::fs::read_to_string(format!("/sys/fs/cgroup{path}/memory.max"))
                .ok()?
                .trim()
                .parse::<u64>()
                .ok()
        });
    match (total, limit) {
        (Some(t), Some(l)) => Some(t.min(l)),
        (t, l) => t.or(l),
    }
}

/// Takes a slot of the machine's budget for a control plane (`what` names it in the logs),
/// waiting for one as long as it takes; says on stderr how long it waited.
pub async fn acquire(what: &str) -> Result<Slot> {
    let count = slots()?;
    let slot = acquire_in(&slot_dir(), count, what).await?;
    let line = format!("{what}: {}", slot.describe());
    tracing::info!("{line}");
    eprintln!("{line}");
    Ok(slot)
}

/// Takes one of `count` slots in `dir`, waiting until one is free (see the module's docs for
/// a thread that holds one already).
pub async fn acquire_in(dir: &Path, count: usize, what: &str) -> Result<Slot> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let thread = std::thread::current().id();
    let nested = held().get(&thread).is_some_and(|n| *n > 0);
    let started = Instant::now();
    let mut reported = started;
    loop {
        for index in 0..count {
            if let Some(file) = try_slot(dir, index, what)? {
                *held().entry(thread).or_default() += 1;
                return Ok(Slot {
                    index: Some(index),
                    count,
                    waited: started.elapsed(),
                    thread,
                    _lock: Some(file),
                });
            }
        }
        if nested {
            *held().entry(thread).or_default() += 1;
            return Ok(Slot {
                index: None,
                count,
                waited: started.elapsed(),
                thread,
                _lock: None,
            });
        }
        if reported.elapsed() >= REPORT_EVERY {
            reported = Instant::now();
            let line = format!(
                "{what}: still waiting for one of {count} control-plane slots after {:.0} s ({SLOTS_ENV} sets how many); held by: {}",
                started.elapsed().as_secs_f64(),
                holders(dir, count).join("; ")
            );
            tracing::info!("{line}");
            eprintln!("{line}");
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// The file of slot `index` in `dir` (what `flock(1)` takes in the tests).
pub fn slot_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("slot-{index}.lock"))
}

/// An exclusive lock on slot `index`'s file, or `None` while another holder has it. The file
/// is opened close-on-exec: the control plane's processes never inherit the lock, which ends
/// with this process. Its content says who holds it, for those who wait.
fn try_slot(dir: &Path, index: usize, what: &str) -> Result<Option<std::fs::File>> {
    let Some(mut file) = crate::procs::try_lock_file(&slot_path(dir, index))? else {
        return Ok(None);
    };
    let exe = std::env::current_exe()
        .ok()
        .and_then(|e| e.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let thread = std::thread::current();
    let _ = file.set_len(0);
    let _ = writeln!(
        file,
        "pid {} ({exe}), thread {}, {what}, since {}",
        std::process::id(),
        thread.name().unwrap_or("?"),
        jiff::Timestamp::now()
    );
    Ok(Some(file))
}

/// Who holds each slot, as its file says.
fn holders(dir: &Path, count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            let text = std::fs::read_to_string(slot_path(dir, i)).unwrap_or_default();
            format!("{}: {}", i + 1, text.trim())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    const GB: u64 = 1024 * 1024 * 1024;

    #[test]
    fn one_slot_per_core_bounded_by_memory() {
        // The CI machine: 2 cores, 24 GB.
        assert_eq!(machine_slots(2, Some(24 * GB)), 2);
        assert_eq!(machine_slots(16, Some(8 * GB)), 3);
        assert_eq!(machine_slots(16, Some(10 * GB)), 4);
        assert_eq!(machine_slots(1, Some(GB)), 1, "at least one");
        assert_eq!(machine_slots(4, None), 4);
    }

    #[tokio::test]
    async fn with_one_slot_a_second_holder_waits_until_the_first_holder_exits() {
        let dir = tempfile::tempdir().unwrap();
        // Another process holds the one slot, with the lock `try_slot` takes (flock(1);
        // --close: the lock stays with flock itself, not the sleep it starts).
        let mut holder = Command::new("flock")
            .arg("--close")
            .arg(slot_path(dir.path(), 0))
            .args(["sleep", "60"])
            .process_group(0)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        // Tried and let go at once while the child has not locked it yet.
        while try_slot(dir.path(), 0, "probe").unwrap().is_some() {
            assert!(Instant::now() < deadline, "the child never took the slot");
            std::thread::sleep(Duration::from_millis(20));
        }
        // A task of this test's thread, which holds no slot: it waits.
        let path = dir.path().to_owned();
        let waiter = tokio::spawn(async move { acquire_in(&path, 1, "second").await });
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!waiter.is_finished(), "took a slot another process holds");

        let killed = Instant::now();
        killpg(Pid::from_raw(holder.id() as i32), Signal::SIGKILL).unwrap();
        holder.wait().unwrap();
        let slot = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the slot is free once its holder exited")
            .unwrap()
            .unwrap();
        assert_eq!(slot.index, Some(0));
        assert!(slot.waited() >= Duration::from_millis(1500), "{slot:?}");
        assert!(killed.elapsed() < Duration::from_secs(10));
        assert!(slot.describe().contains("slot 1 of 1"), "{}", slot.describe());
        let holder_line = std::fs::read_to_string(slot_path(dir.path(), 0)).unwrap();
        assert!(
            holder_line.contains(&format!("pid {}", std::process::id())) && holder_line.contains("second"),
            "{holder_line}"
        );
        // Held: nobody else gets it; dropped: free again.
        assert!(try_slot(dir.path(), 0, "probe").unwrap().is_none());
        drop(slot);
        assert!(try_slot(dir.path(), 0, "probe").unwrap().is_some());
    }

    /// A test that starts a second control plane while it holds the only slot does not wait
    /// for itself.
    #[tokio::test]
    async fn a_second_control_plane_of_the_same_test_does_not_deadlock() {
        let dir = tempfile::tempdir().unwrap();
        let first = acquire_in(dir.path(), 1, "first").await.unwrap();
        let second = tokio::time::timeout(Duration::from_secs(5), acquire_in(dir.path(), 1, "second"))
            .await
            .expect("no deadlock")
            .unwrap();
        assert_eq!((first.index, second.index), (Some(0), None));
        assert!(
            second
                .describe()
                .contains("runs on the slot its test already holds")
        );
        drop(second);
        drop(first);
        // All let go: a fresh holder waits no more.
        let again = acquire_in(dir.path(), 1, "again").await.unwrap();
        assert_eq!(again.index, Some(0));
    }

    #[test]
    fn the_variable_overrides_the_machine_and_must_be_a_positive_number() {
        assert_eq!(slots_from(None, 2, Some(24 * GB)).unwrap(), 2);
        assert_eq!(slots_from(Some("3"), 2, Some(24 * GB)).unwrap(), 3);
        assert_eq!(slots_from(Some(" 1 "), 8, None).unwrap(), 1);
        for bad in ["0", "many", ""] {
            assert!(slots_from(Some(bad), 2, None).is_err(), "{bad:?}");
        }
    }
}
