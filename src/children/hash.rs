//! Content hashes the operator stamps on what it builds: below the builders and the writer, so
//! both (and the rollout policy) can use them without importing each other.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::crd::RedlockClusterSpec;

/// Annotation holding the hash of the last applied desired state.
pub(crate) const APPLIED_HASH: &str = "redlock.dev/applied-hash";

/// Hash of an object's desired state (hex, 16 chars is plenty to detect a change).
pub(crate) fn desired_hash<K: Serialize>(desired: &K) -> String {
    let json = serde_json::to_vec(desired).expect("child objects serialize");
    Sha256::digest(&json)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Pod annotation: hash of the spec fields the pod was built from.
pub(crate) const SPEC_HASH: &str = "redlock.dev/spec-hash";

/// Hash of every spec field that shapes an instance's pod or its Redis process (image,
/// resources, redis.conf, auth, scheduling, pod template, TLS). `instances`, `maxLockTTL` and the
/// hold settings are absent on purpose: changing them needs no replacement.
pub fn spec_hash(spec: &RedlockClusterSpec) -> String {
    let shaping = serde_json::json!({
        "image": spec.image,
        "resources": spec.resources,
        "redisConfig": spec.redis_config,
        "auth": spec.auth,
        "scheduling": spec.scheduling,
        "podTemplate": spec.pod_template,
        "tls": spec.tls,
    });
    desired_hash(&shaping)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_covers_pod_shaping_fields_only() {
        let base: RedlockClusterSpec =
            serde_json::from_value(serde_json::json!({"maxLockTTL": "30s"})).unwrap();
        let mut other = base.clone();
        other.instances = 7;
        other.hold_margin = kube::core::Duration::from(std::time::Duration::from_secs(5));
        assert_eq!(spec_hash(&base), spec_hash(&other));
        other.image = "redis:8.0".into();
        assert_ne!(spec_hash(&base), spec_hash(&other));
        let mut config = base.clone();
        config.redis_config.insert("maxclients".into(), "100".into());
        assert_ne!(spec_hash(&base), spec_hash(&config));
    }
}
