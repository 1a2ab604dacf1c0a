//! The only writer of child objects. Objects are server-side applied with one field manager,
//! and only when what would be applied differs from what the cache holds, so a cluster in
//! steady state costs no API writes. "Differs" is decided by content where content is what the
//! safety argument reads (the ACL file, redis.conf, the published endpoints), so an edit made
//! outside the operator is reverted on the next reconcile, not trusted because an annotation
//! still matches. An object controlled by another owner is never overwritten.

use std::collections::BTreeMap;
use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::resources::names::FIELD_MANAGER;

use crate::resources::hash::{APPLIED_HASH, desired_hash};

/// A kind of child object, and which part of it is compared by content.
pub trait Child:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned
{
    /// Whether `live` carries what `desired` says in the parts that are compared by content.
    /// The default compares nothing beyond the applied-hash annotation: for Services, PDBs and
    /// NetworkPolicies the API server fills in defaults, so a field-by-field comparison would
    /// see drift that is not there.
    fn content_matches(_live: &Self, _desired: &Self) -> bool {
        true
    }
}

// Every key the operator sets must have its value; keys someone else added are left alone
// (server-side apply never removes another manager's key, so demanding equality would
// re-apply forever). Redis reads only the operator's keys.
impl Child for ConfigMap {
    fn content_matches(live: &Self, desired: &Self) -> bool {
        contains(live.data.as_ref(), desired.data.as_ref())
            && contains(live.binary_data.as_ref(), desired.binary_data.as_ref())
    }
}

impl Child for Secret {
    fn content_matches(live: &Self, desired: &Self) -> bool {
        secret_contains(live, desired) && live.type_ == desired.type_
    }
}

fn contains<V: PartialEq>(live: Option<&BTreeMap<String, V>>, desired: Option<&BTreeMap<String, V>>) -> bool {
    desired
        .into_iter()
        .flatten()
        .all(|(k, v)| live.and_then(|l| l.get(k)) == Some(v))
}

/// Whether `live` holds every key of `desired` with its value, as the API server stores a
/// Secret (`stringData` folded into `data`, where it wins).
fn secret_contains(live: &Secret, desired: &Secret) -> bool {
    fn value<'a>(s: &'a Secret, k: &str) -> Option<&'a [u8]> {
        match s.string_data.as_ref().and_then(|d| d.get(k)) {
            Some(v) => Some(v.as_bytes()),
            None => s.data.as_ref().and_then(|d| d.get(k)).map(|b| b.0.as_slice()),
        }
    }
    let keys = desired
        .data
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .chain(desired.string_data.iter().flatten().map(|(k, _)| k));
    keys.into_iter().all(|k| value(live, k) == value(desired, k))
}

impl Child for Service {}
impl Child for PodDisruptionBudget {}
impl Child for NetworkPolicy {}

/// Whether `live` already is `desired`: it carries the desired hash and, where compared, the
/// same content.
pub fn is_current<K: Child>(live: Option<&K>, desired: &K, hash: &str) -> bool {
    live.is_some_and(|c| {
        c.annotations().get(APPLIED_HASH).map(String::as_str) == Some(hash) && K::content_matches(c, desired)
    })
}

/// Whose a live child object is, compared with the `desired` one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// Controlled by the same RedlockCluster object as `desired`.
    Ours,
    /// Safe to take over: controlled by a RedlockCluster of the same name but another UID (an
    /// earlier incarnation, which cannot still exist: names are unique), or controlled by
    /// nothing while carrying this cluster's labels (orphaned with `--cascade=orphan`).
    Adoptable,
    /// Someone else's (another cluster, a user's own object): never overwritten.
    Other(String),
}

/// Whose `live` is, given the controller ownerReference and labels `desired` carries.
pub fn ownership<K: Resource>(live: &K, desired: &K) -> Ownership {
    let ours = desired
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true));
    match (
        live.owner_references()
            .iter()
            .find(|o| o.controller == Some(true)),
        ours,
    ) {
        (Some(o), Some(ours)) if o.uid == ours.uid => Ownership::Ours,
        (Some(o), Some(ours))
            if o.kind == ours.kind && o.name == ours.name && o.api_version == ours.api_version =>
        {
            Ownership::Adoptable
        }
        (Some(o), _) => Ownership::Other(format!("controlled by {} {} (uid {})", o.kind, o.name, o.uid)),
        (None, _) if carries_labels_of(live, desired) => Ownership::Adoptable,
        (None, _) => Ownership::Other("not controlled by this RedlockCluster (no controller)".to_owned()),
    }
}

/// Whether `live` carries the instance and managed-by labels of `desired`.
fn carries_labels_of<K: Resource>(live: &K, desired: &K) -> bool {
    use crate::resources::names::{LABEL_INSTANCE, LABEL_MANAGED_BY};
    [LABEL_INSTANCE, LABEL_MANAGED_BY]
        .iter()
        .all(|l| desired.labels().get(*l).is_some() && live.labels().get(*l) == desired.labels().get(*l))
}

/// What an apply came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The cache shows the object as desired: nothing was sent.
    InCache,
    /// The object is as desired, found so by a read from the API server (the cache does not
    /// show it).
    ByRead,
    /// Written (or, for a delete, sent).
    Written,
}

/// Applies `desired` unless the copy in `cache` (the operator's watch of its own objects)
/// already is it. Refuses ([`Error::OwnedByOther`]) to touch an object of that name that
/// another owner controls, and adopts one that is [`Ownership::Adoptable`]: the cache holds
/// only objects labelled as the operator's, so an object missing there is looked up by name
/// before it is created. Returns whether it wrote, and how it knew when it did not.
pub async fn apply_if_changed<K: Child>(api: &Api<K>, cache: &Store<K>, desired: K) -> Result<Applied> {
    apply_if_changed_at(api, cache, desired, None).await
}

/// [`apply_if_changed`], written only if the object is still at `read_at` (its
/// `resourceVersion` when the decision to write was made): the API server refuses the write
/// with a conflict once anyone else wrote it since. For a write that is one step of a sequence
/// recorded in the object itself (a password rotation's phase), so that a writer deciding
/// from an older read (a replica that lost its lease and has not noticed yet) cannot undo a
/// newer step.
pub async fn apply_if_changed_at<K: Child>(
    api: &Api<K>,
    cache: &Store<K>,
    mut desired: K,
    read_at: Option<&str>,
) -> Result<Applied> {
    let hash = desired_hash(&desired);
    let name = desired.name_any();
    let cached = cache.get(&ObjectRef::from_obj(&desired));
    let read = match &cached {
        Some(_) => None,
        None => api.get_opt(&name).await?,
    };
    let live = cached.as_deref().or(read.as_ref());
    match live.map(|live| ownership(live, &desired)) {
        Some(Ownership::Other(owner)) => {
            return Err(Error::OwnedByOther {
                kind: K::kind(&()).into_owned(),
                name,
                owner,
            });
        }
        // Adopted by applying: the owner reference becomes this cluster's.
        Some(Ownership::Adoptable) => {}
        Some(Ownership::Ours) | None if is_current(live, &desired, &hash) => {
            return Ok(if cached.is_some() {
                Applied::InCache
            } else {
                Applied::ByRead
            });
        }
        _ => {}
    }
    desired.annotations_mut().insert(APPLIED_HASH.into(), hash);
    let mut value = serde_json::to_value(&desired)?;
    value["apiVersion"] = K::api_version(&()).into();
    value["kind"] = K::kind(&()).into();
    // Server-side apply treats a resourceVersion in the applied object as a precondition.
    if let Some(version) = read_at {
        value["metadata"]["resourceVersion"] = version.into();
    }
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&value),
    )
    .await?;
    Ok(Applied::Written)
}

/// Creates a slot's pod. Pods are never patched: their spec is immutable in the ways that
/// matter, and a changed instance is a replacement (a crash, under the hold rule). A pod of
/// that name that already exists is an error: the planner decided the name was free, so
/// whoever holds it now must be looked at again, never silently taken for ours.
pub async fn create_pod(api: &Api<Pod>, pod: &Pod) -> Result<()> {
    api.create(&PostParams::default(), pod).await?;
    Ok(())
}

/// Deletes a child; one already gone is fine. With `uid`, only that very object is deleted
/// (a newer object of the same name is left alone: the decision was about the old one).
pub async fn delete<K>(api: &Api<K>, name: &str, uid: Option<&str>) -> Result<bool>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    let params = DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(false),
        // The precondition failed: the name now belongs to a newer object.
        Err(kube::Error::Api(s)) if s.code == 409 && uid.is_some() => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn cm(value: &str) -> ConfigMap {
        ConfigMap {
            data: Some(BTreeMap::from([("k".into(), value.into())])),
            ..Default::default()
        }
    }

    fn applied<K: Child>(mut k: K, hash: &str) -> K {
        k.annotations_mut().insert(APPLIED_HASH.into(), hash.into());
        k
    }

    #[test]
    fn hash_detects_changes_and_only_changes() {
        assert_eq!(desired_hash(&cm("a")), desired_hash(&cm("a")));
        assert_ne!(desired_hash(&cm("a")), desired_hash(&cm("b")));
        let h = desired_hash(&cm("a"));
        assert!(!is_current(Some(&cm("a")), &cm("a"), &h), "no annotation");
        assert!(is_current(Some(&applied(cm("a"), &h)), &cm("a"), &h));
        assert!(!is_current::<ConfigMap>(None, &cm("a"), &h));
    }

    #[test]
    fn edited_content_under_a_matching_annotation_is_drift() {
        let h = desired_hash(&cm("a"));
        // Someone edited the data and left the annotation alone.
        assert!(!is_current(Some(&applied(cm("edited"), &h)), &cm("a"), &h));
        let secret = |v: &str| Secret {
            data: Some(BTreeMap::from([(
                "users.acl".into(),
                ByteString(v.as_bytes().to_vec()),
            )])),
            type_: Some("Opaque".into()),
            ..Default::default()
        };
        let h = desired_hash(&secret("user c off"));
        assert!(is_current(
            Some(&applied(secret("user c off"), &h)),
            &secret("user c off"),
            &h
        ));
        assert!(!is_current(
            Some(&applied(secret("user c on"), &h)),
            &secret("user c off"),
            &h
        ));
        // stringData counts as data.
        let via_string = Secret {
            data: None,
            string_data: Some(BTreeMap::from([("users.acl".into(), "user c off".into())])),
            ..applied(secret(""), &h)
        };
        assert!(is_current(Some(&via_string), &secret("user c off"), &h));
        // A key someone else added is no drift; a removed one is.
        let mut extra = applied(secret("user c off"), &h);
        extra
            .data
            .as_mut()
            .unwrap()
            .insert("note".into(), ByteString(b"x".to_vec()));
        assert!(is_current(Some(&extra), &secret("user c off"), &h));
        let mut removed = applied(secret("user c off"), &h);
        removed.data = Some(BTreeMap::new());
        assert!(!is_current(Some(&removed), &secret("user c off"), &h));
    }

    fn owned_by(uid: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                owner_references: Some(vec![OwnerReference {
                    api_version: "redlock.dev/v1alpha1".into(),
                    kind: "RedlockCluster".into(),
                    name: "locks".into(),
                    uid: uid.into(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn ownership_of_live_objects() {
        let mut desired = owned_by("u1");
        desired
            .labels_mut()
            .insert("app.kubernetes.io/instance".into(), "locks".into());
        desired
            .labels_mut()
            .insert("app.kubernetes.io/managed-by".into(), "redlock-operator".into());
        assert_eq!(ownership(&owned_by("u1"), &desired), Ownership::Ours);
        // An earlier incarnation of the same name: gone for sure, adopted.
        assert_eq!(ownership(&owned_by("u0"), &desired), Ownership::Adoptable);
        // Another cluster's.
        let mut other = owned_by("u2");
        other.metadata.owner_references.as_mut().unwrap()[0].name = "locks-1".into();
        assert!(matches!(ownership(&other, &desired), Ownership::Other(o) if o.contains("locks-1")));
        // An orphan with this cluster's labels: adopted; without them: someone else's.
        let mut orphan = cm("x");
        orphan.metadata.labels = desired.metadata.labels.clone();
        assert_eq!(ownership(&orphan, &desired), Ownership::Adoptable);
        assert!(matches!(ownership(&cm("x"), &desired), Ownership::Other(_)));
    }
}
