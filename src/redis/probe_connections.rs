//! Persistent admin connections for probes, per cluster and (address, login). Probing every
//! member every probe period on a fresh connection costs a TCP (and TLS) handshake and an
//! `AUTH` each time, for every member of every cluster: at 200 clusters × 3 members that is
//! 600 handshakes a second.
//!
//! A kept connection is only ever used to *read* (the probe, and the TTL audit's `SCAN` and
//! `PTTL`). It reads which process it reaches (the run id) once, on its first probe
//! (`admin_connection::KnownProcess`): a process that restarts takes its connections with
//! it, so the next probe fails, and is retried once on a fresh connection, which reads the
//! run id again (a reconnect is itself the signal that the run id must be read again). What
//! can change while a connection lives (the fence, the passwords, the clock) every probe
//! reads. Releases and fences never use these: each opens its own connection
//! and checks the run id on it (`redis_admin::connect_to_process`).
//!
//! A connection is taken out while it is used and put back once its exchange is complete: one
//! that failed is simply not put back (its replies may be half read).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::IpAddr;
use std::sync::Mutex;

use crate::redis::connection::{AdminConnection, ClosedWatch};

/// What a connection was opened with: another address, login or CA needs another connection.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConnectionKey {
    pub ip: IpAddr,
    pub port: u16,
    pub user: String,
    /// A hash of the password and the CA, so that a changed one opens a new connection
    /// without keeping the secret itself in the key.
    pub secret: u64,
}

impl ConnectionKey {
    pub fn new(ip: IpAddr, port: u16, user: &str, password: &str, tls_ca: Option<&[u8]>) -> Self {
        let mut h = DefaultHasher::new();
        password.hash(&mut h);
        tls_ca.hash(&mut h);
        Self {
            ip,
            port,
            user: user.to_owned(),
            secret: h.finish(),
        }
    }
}

/// The kept connections, per cluster UID.
#[derive(Default)]
pub struct ProbeConnections {
    by_cluster: Mutex<HashMap<String, HashMap<ConnectionKey, AdminConnection>>>,
}

impl ProbeConnections {
    /// Takes the kept connection for `key` of cluster `uid` out, if there is one; it is kept
    /// again only by [`Self::keep`].
    pub fn take(&self, uid: &str, key: &ConnectionKey) -> Option<AdminConnection> {
        self.lock().get_mut(uid)?.remove(key)
    }

    pub fn keep(&self, uid: &str, key: ConnectionKey, conn: AdminConnection) {
        let mut by_cluster = self.lock();
        match by_cluster.get_mut(uid) {
            Some(conns) => {
                conns.insert(key, conn);
            }
            None => {
                by_cluster.insert(uid.to_owned(), HashMap::from([(key, conn)]));
            }
        }
    }

    /// Watches ([`ClosedWatch`]) on the kept connections of cluster `uid` for `keys`, those
    /// there are: a resting cluster's watch wakes as soon as a member's process closes its
    /// connection (it crashed), not a probe period later. A watch in `watches` that is still
    /// on its connection is kept; a connection replaced since (a probe that failed on the old
    /// one and succeeded on a new one) gets a new watch, and the old socket's is dropped with
    /// it. A connection that cannot be watched is left to the periodic probe.
    pub fn closed_watches(
        &self,
        uid: &str,
        keys: &[ConnectionKey],
        mut watches: Vec<ClosedWatch>,
    ) -> Vec<ClosedWatch> {
        let by_cluster = self.lock();
        let Some(conns) = by_cluster.get(uid) else {
            return Vec::new();
        };
        keys.iter()
            .filter_map(|k| {
                let conn = conns.get(k)?;
                match watches.iter().position(|w| conn.watched_by(w)) {
                    Some(i) => Some(watches.swap_remove(i)),
                    None => conn.closed_watch().ok(),
                }
            })
            .collect()
    }

    /// Keeps only the connections of `used` (this probe round's): a member that moved or went
    /// away closes its old connection.
    pub fn retain(&self, uid: &str, used: &[ConnectionKey]) {
        if let Some(conns) = self.lock().get_mut(uid) {
            conns.retain(|k, _| used.contains(k));
        }
    }

    /// Closes the connections of cluster `uid` kept for `ip`: the next probe dials afresh, as
    /// fences and releases do. After a fence failed on a fresh connection (the operator's
    /// password no longer accepted, `maxclients` reached), a kept connection would go on
    /// answering probes that nothing the operator sends can act on (safety review 3, N5).
    pub fn close_to(&self, uid: &str, ip: IpAddr) {
        if let Some(conns) = self.lock().get_mut(uid) {
            conns.retain(|k, _| k.ip != ip);
        }
    }

    /// Closes every connection of a deleted cluster.
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    /// How many connections are kept (for tests and the benchmark).
    pub fn len(&self) -> usize {
        self.lock().values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<ConnectionKey, AdminConnection>>> {
        self.by_cluster
            .lock()
            .expect("probe connections lock is never poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_password_or_ca_is_another_connection() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let a = ConnectionKey::new(ip, 6379, "admin", "p1", None);
        assert_eq!(a, ConnectionKey::new(ip, 6379, "admin", "p1", None));
        assert_ne!(a, ConnectionKey::new(ip, 6379, "admin", "p2", None));
        assert_ne!(a, ConnectionKey::new(ip, 6379, "admin", "p1", Some(b"ca")));
        assert_ne!(
            a,
            ConnectionKey::new("10.0.0.2".parse().unwrap(), 6379, "admin", "p1", None)
        );
        assert!(!format!("{a:?}").contains("p1"), "the password is not in the key");
    }
}
