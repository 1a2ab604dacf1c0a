//! The cgroup v1 roots of real nodes. A kubelet validates that its `cgroupRoot` exists in
//! each of these hierarchies before it starts, and cgroups outlive every process in them, so
//! the harness creates them and removes them (deepest first) after killing what runs there.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

const MOUNT: &str = "/sys/fs/cgroup";
/// What the kubelet's cgroup v1 manager checks (`cgroupV1impl.Validate`) plus the
/// hierarchies runc joins; missing ones (e.g. no hugetlb here) are skipped.
const HIERARCHIES: &[&str] = &[
    "cpu", "cpuacct", "cpuset", "memory", "pids", "systemd", "blkio", "devices", "freezer",
];

fn dirs(root: &str) -> Vec<PathBuf> {
    HIERARCHIES
        .iter()
        .map(|h| Path::new(MOUNT).join(h))
        .filter(|h| h.is_dir())
        .map(|h| h.join(root.trim_start_matches('/')))
        .collect()
}

/// Creates `root` in every hierarchy. A leftover of a killed run is removed first.
pub fn create(root: &str) -> Result<()> {
    remove(root)?;
    for dir in dirs(root) {
        std::fs::create_dir_all(&dir).with_context(|| format!("create cgroup {}", dir.display()))?;
        // A new cpuset has no CPUs and no memory nodes: nothing could run in it.
        if dir.starts_with(Path::new(MOUNT).join("cpuset")) {
            for file in ["cpuset.cpus", "cpuset.mems"] {
                let parent = std::fs::read_to_string(Path::new(MOUNT).join("cpuset").join(file))?;
                std::fs::write(dir.join(file), parent.trim())?;
            }
        }
    }
    Ok(())
}

/// Every process in `root` or below (from the pids hierarchy, which every container joins).
pub fn processes(root: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = dirs(root)
        .into_iter()
        .filter(|d| d.starts_with(Path::new(MOUNT).join("pids")))
        .collect();
    while let Some(dir) = stack.pop() {
        if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            out.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            stack.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
    }
    out
}

/// Kills every process in `root`, then removes its cgroups deepest first. Tolerates a root
/// that does not exist.
pub fn remove(root: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids = processes(root);
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "processes in cgroup {root} survive SIGKILL: {:?}",
                processes(root)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for top in dirs(root) {
        if !top.exists() {
            continue;
        }
        let mut all = Vec::new();
        collect_dirs(&top, &mut all);
        // Children before parents: a cgroup with children cannot be removed.
        all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for dir in all {
            remove_dir_retrying(&dir)?;
        }
    }
    Ok(())
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_owned());
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                collect_dirs(&e.path(), out);
            }
        }
    }
}

/// A cgroup whose last process just died stays busy for a moment (EBUSY).
fn remove_dir_retrying(dir: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(e).with_context(|| format!("remove cgroup {}", dir.display()));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}
