//! Remembers, per cluster, that its children (Secrets, ConfigMaps, Services, PDB,
//! NetworkPolicy; and apart, the endpoints ConfigMap, which also depends on which members
//! serve) were all found current, and from what: applying them builds every object
//! (password hashes, redis.conf, a content hash of each) and compares it with the cache, which
//! costs more than the rest of a steady-state reconcile together, once a probe period per
//! cluster.
//!
//! What applying finds depends only on the cluster object, the credentials and the children's
//! caches: when the cluster is at the same resourceVersion, the credentials are the same, and no
//! watch event of its children's caches arrived since (`Caches::child_versions`), every object
//! would again be found current, and nothing would be written. Only such an outcome is
//! remembered: every object shown current by the cache itself (none written, none read from the
//! API server, none refused or failed). An edit or a delete of a child by anyone is a watch
//! event, so the next reconcile applies again, as soon as it would have without this memo.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

use crate::crd::RedlockCluster;

/// What children were built from: the cluster object's version and whatever else they
/// depend on (the credentials, what the endpoints list), hashed (the key keeps no password).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fingerprint(u64);

impl Fingerprint {
    pub fn of(cluster: &RedlockCluster, inputs: &impl Hash) -> Self {
        let mut h = DefaultHasher::new();
        cluster.metadata.uid.hash(&mut h);
        cluster.metadata.resource_version.hash(&mut h);
        inputs.hash(&mut h);
        Self(h.finish())
    }
}

/// Per cluster UID: the fingerprint and children-cache version at which every child was last
/// found current.
#[derive(Default)]
pub(crate) struct ChildrenMemo {
    by_uid: Mutex<HashMap<String, (Fingerprint, u64)>>,
}

impl ChildrenMemo {
    /// Whether the children were found current from `fingerprint`, with the caches at
    /// `version` (nothing changed since).
    pub fn current(&self, uid: &str, fingerprint: Fingerprint, version: u64) -> bool {
        self.lock().get(uid) == Some(&(fingerprint, version))
    }

    /// Every child was found current from `fingerprint`, by an apply that started when the
    /// caches were at `version` (read before it, so that an event during it does not go
    /// unnoticed).
    pub fn found_current(&self, uid: &str, fingerprint: Fingerprint, version: u64) {
        self.lock().insert(uid.to_owned(), (fingerprint, version));
    }

    /// Anything else came of it (a write, a read, a failure): the next reconcile applies again.
    pub fn unsettled(&self, uid: &str) {
        self.lock().remove(uid);
    }

    pub fn forget(&self, uid: &str) {
        self.unsettled(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Fingerprint, u64)>> {
        self.by_uid.lock().expect("children memo lock is never poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::secrets::Credentials;

    fn cluster(uid: &str, version: &str) -> RedlockCluster {
        let mut c: RedlockCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "redlock.dev/v1alpha1",
            "kind": "RedlockCluster",
            "metadata": {"name": "locks", "namespace": "team", "uid": uid, "resourceVersion": version},
            "spec": {"maxLockTTL": "30s"},
        }))
        .unwrap();
        c.metadata.resource_version = Some(version.into());
        c
    }

    fn creds(admin: &str) -> Credentials {
        Credentials::new(admin.into(), "client".into(), "probe".into())
    }

    #[test]
    fn current_only_from_the_same_inputs_and_caches() {
        let memo = ChildrenMemo::default();
        let f = Fingerprint::of(&cluster("u1", "10"), &creds("a"));
        assert!(!memo.current("u1", f, 7), "nothing remembered yet");
        memo.found_current("u1", f, 7);
        assert!(memo.current("u1", f, 7));
        assert!(!memo.current("u1", f, 8), "a child cache changed since");
        assert!(!memo.current("u2", f, 7), "another cluster");
        let newer = Fingerprint::of(&cluster("u1", "11"), &creds("a"));
        assert!(!memo.current("u1", newer, 7), "the cluster object changed");
        let rotated = Fingerprint::of(&cluster("u1", "10"), &creds("b"));
        assert!(!memo.current("u1", rotated, 7), "the credentials changed");
    }

    #[test]
    fn an_unsettled_apply_or_a_deleted_cluster_is_forgotten() {
        let memo = ChildrenMemo::default();
        let f = Fingerprint::of(&cluster("u1", "10"), &creds("a"));
        memo.found_current("u1", f, 7);
        memo.unsettled("u1");
        assert!(!memo.current("u1", f, 7));
        memo.found_current("u1", f, 7);
        memo.forget("u1");
        assert!(!memo.current("u1", f, 7));
    }
}
