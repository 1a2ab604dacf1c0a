//! The only writer of child objects. Objects are server-side applied with one field manager,
//! and only when what would be applied differs from what the cache holds (recorded as a hash
//! annotation), so a cluster in steady state costs no API writes.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::resources::names::FIELD_MANAGER;

/// Annotation holding the hash of the last applied desired state.
pub const APPLIED_HASH: &str = "redlock.dev/applied-hash";

/// Hash of an object's desired state (hex, 16 chars is plenty to detect a change).
pub fn desired_hash<K: Serialize>(desired: &K) -> String {
    let json = serde_json::to_vec(desired).expect("child objects serialize");
    Sha256::digest(&json)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `cached` already carries `hash`.
pub fn is_current<K: Resource>(cached: Option<&K>, hash: &str) -> bool {
    cached.is_some_and(|c| c.annotations().get(APPLIED_HASH).map(String::as_str) == Some(hash))
}

/// Applies `desired` unless the copy in `cache` (the operator's watch of its own objects)
/// already carries its hash. Returns whether it wrote.
pub async fn apply_if_changed<K>(api: &Api<K>, cache: &Store<K>, mut desired: K) -> Result<bool>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    let hash = desired_hash(&desired);
    let cached = cache.get(&ObjectRef::from_obj(&desired));
    if is_current(cached.as_deref(), &hash) {
        return Ok(false);
    }
    desired.annotations_mut().insert(APPLIED_HASH.into(), hash);
    let name = desired.name_any();
    let mut value = serde_json::to_value(&desired)?;
    value["apiVersion"] = K::api_version(&()).into();
    value["kind"] = K::kind(&()).into();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&value),
    )
    .await?;
    Ok(true)
}

/// Creates a slot's pod. Pods are never patched: their spec is immutable in the ways that
/// matter, and a changed instance is a replacement (a crash, under the hold rule).
pub async fn create_pod(api: &Api<Pod>, pod: &Pod) -> Result<bool> {
    match api.create(&PostParams::default(), pod).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Deletes a child; one already gone is fine.
pub async fn delete<K>(api: &Api<K>, name: &str) -> Result<bool>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::collections::BTreeMap;

    fn cm(value: &str) -> ConfigMap {
        ConfigMap {
            data: Some(BTreeMap::from([("k".into(), value.into())])),
            ..Default::default()
        }
    }

    #[test]
    fn hash_detects_changes_and_only_changes() {
        assert_eq!(desired_hash(&cm("a")), desired_hash(&cm("a")));
        assert_ne!(desired_hash(&cm("a")), desired_hash(&cm("b")));
        let mut cached = cm("a");
        let h = desired_hash(&cm("a"));
        assert!(!is_current(Some(&cached), &h));
        cached.annotations_mut().insert(APPLIED_HASH.into(), h.clone());
        assert!(is_current(Some(&cached), &h));
        assert!(!is_current::<ConfigMap>(None, &h));
    }
}
