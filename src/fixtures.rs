//! Fixtures shared by the unit tests: a cluster object as the API server hands it over.

use crate::crd::RedlockCluster;

pub const NAME: &str = "locks";
pub const NAMESPACE: &str = "team";
pub const UID: &str = "uid-1";

/// Cluster `locks` in namespace `team` with UID `uid-1`, from a spec given as JSON;
/// `maxLockTTL` (the one required field) is 30s unless the spec says otherwise.
pub fn cluster(spec: serde_json::Value) -> RedlockCluster {
    let mut spec = spec;
    if spec.get("maxLockTTL").is_none() {
        spec["maxLockTTL"] = "30s".into();
    }
    let mut c = RedlockCluster::new(NAME, serde_json::from_value(spec).expect("a valid spec"));
    c.metadata.namespace = Some(NAMESPACE.into());
    c.metadata.uid = Some(UID.into());
    c
}
