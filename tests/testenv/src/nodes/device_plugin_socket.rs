//! Kubelets take turns binding the one device-plugin socket of a machine.
//!
//! Every kubelet serves device-plugin registration on a path it hard-codes,
//! `/var/lib/kubelet/device-plugins/kubelet.sock`, not below its `--root-dir`. Starting, it
//! removes the sockets it finds in that directory and then binds the path. Two kubelets
//! starting at once can both remove and then both bind: the second bind fails with
//! "address already in use", and that kubelet exits ("Failed to start ContainerManager").
//! A loaded CI run lost a node so (three real-node kubelets of one control plane and those
//! of another starting side by side). So a kubelet starts holding a lock shared by every
//! process on the machine, and the next one starts only once this one listens on the
//! socket (or has exited). A kubelet that removes an earlier one's socket costs nothing
//! here: no device plugin ever registers in these tests.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use tracing::warn;

use crate::procs::{ManagedChild, try_lock_file};

/// The path every kubelet binds (`k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1.KubeletSocket`).
pub(super) const SOCKET: &str = "/var/lib/kubelet/device-plugins/kubelet.sock";

/// The lock every kubelet start holds. In the socket's directory: it is the one place all
/// kubelets of the machine share, in any mount namespace, and the kubelet's clean-up removes
/// only sockets from it.
const LOCK: &str = "/var/lib/kubelet/device-plugins/redlock-tests-kubelet-start.lock";

/// How long a start may keep the lock: a kubelet that neither listens nor exits in this time
/// is stuck elsewhere, and waiting for the node to be Ready reports it.
const MOST: Duration = Duration::from_secs(120);

/// Waits for the lock, starts the kubelet with `spawn`, and holds the lock until the kubelet
/// listens on [`SOCKET`] or has exited.
pub(super) async fn start_in_turn(spawn: impl FnOnce() -> Result<ManagedChild>) -> Result<ManagedChild> {
    std::fs::create_dir_all(Path::new(SOCKET).parent().expect("an absolute path"))?;
    let waited = Instant::now();
    let lock = loop {
        if let Some(lock) = try_lock_file(Path::new(LOCK))? {
            break lock;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if waited.elapsed() > Duration::from_secs(10) {
        warn!(
            waited_s = waited.elapsed().as_secs_f64(),
            "a kubelet waited for another one's start"
        );
    }
    let mut kubelet = spawn()?;
    let deadline = Instant::now() + MOST;
    while !listens(kubelet.pid(), SOCKET) && kubelet.exited().is_none() {
        if Instant::now() > deadline {
            warn!(
                kubelet = kubelet.name(),
                "the kubelet did not listen on {SOCKET} in {MOST:?}; the next one starts anyway"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(lock);
    Ok(kubelet)
}

/// Whether process `pid` holds a listening Unix socket bound to `path`: one of its file
/// descriptors is a socket whose inode its network namespace lists as listening on `path`.
fn listens(pid: u32, path: &str) -> bool {
    let Ok(table) = std::fs::read_to_string(format!("/proc/{pid}/net/unix")) else {
        return false;
    };
    let listening = listening_inodes(&table, path);
    if listening.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .ok()
            .and_then(|target| socket_inode(&target.to_string_lossy()))
            .is_some_and(|inode| listening.contains(&inode))
    })
}

/// `__SO_ACCEPTCON` in the Flags column of `/proc/net/unix`: the socket listens.
const ACCEPTING: u64 = 0x10000;

/// The inodes of the sockets `/proc/net/unix` (`table`) lists as listening on `path`. Lines
/// are `Num RefCount Protocol Flags Type St Inode Path`, numbers in hex but the inode.
fn listening_inodes(table: &str, path: &str) -> HashSet<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [_, _, _, flags, _, _, inode, bound] = fields.as_slice() else {
                return None;
            };
            let flags = u64::from_str_radix(flags, 16).ok()?;
            if *bound != path || flags & ACCEPTING == 0 {
                return None;
            }
            inode.parse().ok()
        })
        .collect()
}

/// The inode of a file descriptor's link target `socket:[N]`.
fn socket_inode(target: &str) -> Option<u64> {
    target.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 41234 /var/lib/kubelet/device-plugins/kubelet.sock
0000000000000000: 00000003 00000000 00000000 0001 03 41240 /var/lib/kubelet/device-plugins/kubelet.sock
0000000000000000: 00000002 00000000 00010000 0001 01 41300 /tmp/other.sock
0000000000000000: 00000003 00000000 00000000 0001 03 41301
";

    #[test]
    fn only_listening_sockets_on_the_path_count() {
        assert_eq!(listening_inodes(TABLE, SOCKET), HashSet::from([41234]));
        assert_eq!(listening_inodes(TABLE, "/nowhere"), HashSet::new());
    }

    #[test]
    fn socket_links_give_their_inode() {
        assert_eq!(socket_inode("socket:[41234]"), Some(41234));
        assert_eq!(socket_inode("pipe:[41234]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
    }

    /// A real listener: this process binds a socket and is seen listening on its path, and
    /// not on another.
    #[test]
    fn a_process_listening_on_a_path_is_seen() {
        let dir = std::env::temp_dir().join(format!("redlock-listens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let me = std::process::id();
        assert!(listens(me, path.to_str().unwrap()));
        assert!(!listens(me, dir.join("other.sock").to_str().unwrap()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
