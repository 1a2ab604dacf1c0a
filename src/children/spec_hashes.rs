//! Each cluster's spec hash (`resources::hash::spec_hash`: what its pods are built from, which
//! the rollout compares with each pod's), remembered until the cluster object changes:
//! computing it serializes the pod-shaping part of the spec and hashes it, once a probe period
//! per cluster.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::children::hash::spec_hash;
use crate::crd::RedlockCluster;

/// Per cluster UID: the resourceVersion the hash was computed at, and the hash.
#[derive(Default)]
pub(crate) struct SpecHashes {
    by_uid: Mutex<HashMap<String, (String, String)>>,
}

impl SpecHashes {
    /// `spec_hash(&cluster.spec)`, computed again only when the object changed.
    pub fn of(&self, cluster: &RedlockCluster) -> String {
        let (Some(uid), Some(version)) = (&cluster.metadata.uid, &cluster.metadata.resource_version) else {
            return spec_hash(&cluster.spec);
        };
        let mut by_uid = self.by_uid.lock().expect("spec hash lock is never poisoned");
        match by_uid.get(uid) {
            Some((at, hash)) if at == version => hash.clone(),
            _ => {
                let hash = spec_hash(&cluster.spec);
                by_uid.insert(uid.clone(), (version.clone(), hash.clone()));
                hash
            }
        }
    }

    pub fn forget(&self, uid: &str) {
        self.by_uid
            .lock()
            .expect("spec hash lock is never poisoned")
            .remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(version: &str, image: &str) -> RedlockCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "redlock.dev/v1alpha1", "kind": "RedlockCluster",
            "metadata": {"name": "locks", "namespace": "team", "uid": "u1", "resourceVersion": version},
            "spec": {"maxLockTTL": "30s", "image": image}
        }))
        .unwrap()
    }

    #[test]
    fn computed_again_when_the_object_changed() {
        let hashes = SpecHashes::default();
        let a = cluster("1", "redis:7.4");
        assert_eq!(hashes.of(&a), spec_hash(&a.spec));
        assert_eq!(hashes.of(&a), spec_hash(&a.spec));
        let b = cluster("2", "redis:8.0");
        assert_eq!(hashes.of(&b), spec_hash(&b.spec));
        assert_ne!(hashes.of(&a), hashes.of(&b));
    }

    /// Another cluster at the same resourceVersion (or the same name created again) has its
    /// own hash; a forgotten cluster's is computed again; without a UID or resourceVersion
    /// nothing is remembered.
    #[test]
    fn kept_per_cluster_uid_and_forgotten_with_it() {
        let hashes = SpecHashes::default();
        let a = cluster("1", "redis:7.4");
        assert_eq!(hashes.of(&a), spec_hash(&a.spec));
        let mut other = cluster("1", "redis:8.0");
        other.metadata.uid = Some("u2".into());
        assert_eq!(hashes.of(&other), spec_hash(&other.spec));
        hashes.forget("u1");
        let mut edited_while_forgotten = cluster("1", "valkey:9");
        assert_eq!(
            hashes.of(&edited_while_forgotten),
            spec_hash(&edited_while_forgotten.spec)
        );
        edited_while_forgotten.metadata.resource_version = None;
        edited_while_forgotten.spec.image = "redis:6".into();
        assert_eq!(
            hashes.of(&edited_while_forgotten),
            spec_hash(&edited_while_forgotten.spec)
        );
    }
}
