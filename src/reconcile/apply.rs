//! The only writer of child objects. Objects are server-side applied with one field manager,
//! and only when what would be applied differs from what the cache holds, so a cluster in
//! steady state costs no API writes. "Differs" is decided by content where content is what the
//! safety argument reads (the ACL file, redis.conf, the published endpoints), so an edit made
//! outside the operator is reverted on the next reconcile, not trusted because an annotation
//! still matches. Services, the PDB and the NetworkPolicy are compared by content too, but only
//! in the fields the operator sets and read the way the API server stores them (defaults
//! filled in, empty maps dropped), so that a hand edit is put back and an object the API
//! server merely completed is not written again. An object controlled by another owner is
//! never overwritten.

use std::collections::BTreeMap;
use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServicePort};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::children::names::FIELD_MANAGER;
use crate::error::{Error, Result};

use crate::children::hash::{APPLIED_HASH, desired_hash};

/// A kind of child object, and which part of it is compared by content.
pub trait Child:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned
{
    /// Whether `live` carries what `desired` says in the parts that are compared by content:
    /// those the operator sets, compared as the API server stores them. A field the API server
    /// defaults or another manager added must not count as drift: server-side apply would leave
    /// it as it is, and the object would be written again on every reconcile.
    fn content_matches(live: &Self, desired: &Self) -> bool;

    /// Whether a hand-edited object whose forced apply the API server refuses as invalid is
    /// replaced whole instead (see [`apply_if_changed_at`]). Only where replacing it costs
    /// nothing but the edit: a Service replaced would need its cluster IP carried over.
    const REPLACED_WHEN_APPLY_REFUSED: bool = false;
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

// A Service's selector and ports decide which process a slot's address reaches: an edited
// selector sends slot i's clients to another member, and two of a client's "independent"
// locks land on one process.
impl Child for Service {
    fn content_matches(live: &Self, desired: &Self) -> bool {
        let Some(d) = desired.spec.as_ref() else {
            return true;
        };
        let Some(l) = live.spec.as_ref() else {
            return false;
        };
        // Absent means ClusterIP to the API server, and it fills clusterIP in unless we set it
        // (`None`: headless), so only a clusterIP we set is compared.
        let kind = |s: &k8s_openapi::api::core::v1::ServiceSpec| {
            s.type_.clone().unwrap_or_else(|| "ClusterIP".into())
        };
        kind(l) == kind(d)
            && d.cluster_ip.as_ref().is_none_or(|ip| l.cluster_ip.as_ref() == Some(ip))
            // An atomic map: applying replaces it whole, so it must be equal, not contain ours.
            && l.selector.clone().unwrap_or_default() == d.selector.clone().unwrap_or_default()
            && l.publish_not_ready_addresses.unwrap_or(false) == d.publish_not_ready_addresses.unwrap_or(false)
            // Ports are a map keyed by (port, protocol): a port another manager added stays
            // after our apply, so only ours must be there, as we set them.
            && d.ports.iter().flatten().all(|dp| l.ports.iter().flatten().any(|lp| same_port(lp, dp)))
    }
}

fn same_port(live: &ServicePort, desired: &ServicePort) -> bool {
    let protocol = |p: &ServicePort| p.protocol.clone().unwrap_or_else(|| "TCP".into());
    // An absent targetPort is the port itself.
    let target = |p: &ServicePort| p.target_port.clone().unwrap_or(IntOrString::Int(p.port));
    live.port == desired.port
        && protocol(live) == protocol(desired)
        && live.name == desired.name
        && target(live) == target(desired)
}

// minAvailable is what keeps a drain from taking the cluster below quorum.
impl Child for PodDisruptionBudget {
    /// A PDB switched to `maxUnavailable` by hand cannot be put back by an apply: the field
    /// stays (another manager's), and with `minAvailable` beside it the object is invalid.
    const REPLACED_WHEN_APPLY_REFUSED: bool = true;

    fn content_matches(live: &Self, desired: &Self) -> bool {
        let Some(d) = desired.spec.as_ref() else {
            return true;
        };
        let Some(l) = live.spec.as_ref() else {
            return false;
        };
        l.min_available == d.min_available
            && same_selector(l.selector.as_ref(), d.selector.as_ref())
            && d.unhealthy_pod_eviction_policy
                .as_ref()
                .is_none_or(|p| l.unhealthy_pod_eviction_policy.as_ref() == Some(p))
    }
}

// Which peers reach the Redis port. Egress is not compared: the operator sets none, and with
// policyTypes Ingress only (compared) an egress rule someone added is not enforced.
impl Child for NetworkPolicy {
    fn content_matches(live: &Self, desired: &Self) -> bool {
        let Some(d) = desired.spec.as_ref() else {
            return true;
        };
        let Some(l) = live.spec.as_ref() else {
            return false;
        };
        let rules =
            |s: &k8s_openapi::api::networking::v1::NetworkPolicySpec| s.ingress.clone().unwrap_or_default();
        let (lr, dr) = (rules(l), rules(d));
        same_selector(l.pod_selector.as_ref(), d.pod_selector.as_ref())
            && l.policy_types == d.policy_types
            // Atomic lists (ingress, from, ports): equal, in order.
            && lr.len() == dr.len()
            && lr.iter().zip(&dr).all(|(lr, dr)| {
                let (lf, df) = (lr.from.clone().unwrap_or_default(), dr.from.clone().unwrap_or_default());
                let (lp, dp) = (lr.ports.clone().unwrap_or_default(), dr.ports.clone().unwrap_or_default());
                lf.len() == df.len()
                    && lf.iter().zip(&df).all(|(l, d)| same_peer(l, d))
                    && lp.len() == dp.len()
                    && lp.iter().zip(&dp).all(|(l, d)| same_policy_port(l, d))
            })
    }
}

fn same_peer(live: &NetworkPolicyPeer, desired: &NetworkPolicyPeer) -> bool {
    same_selector(live.pod_selector.as_ref(), desired.pod_selector.as_ref())
        && same_selector(
            live.namespace_selector.as_ref(),
            desired.namespace_selector.as_ref(),
        )
        && live.ip_block == desired.ip_block
}

fn same_policy_port(live: &NetworkPolicyPort, desired: &NetworkPolicyPort) -> bool {
    let protocol = |p: &NetworkPolicyPort| p.protocol.clone().unwrap_or_else(|| "TCP".into());
    live.port == desired.port && protocol(live) == protocol(desired) && live.end_port == desired.end_port
}

/// Label selectors as the API server stores them: an empty `matchLabels`,
/// `matchExpressions` or expression `values` is dropped (`omitempty`), and means the same as
/// none (else a user's `{operator: Exists, values: []}` would never match, and be written
/// again every reconcile). An absent selector stays apart from an empty one (`{}` selects
/// everything, none selects nothing in a peer).
fn same_selector(live: Option<&LabelSelector>, desired: Option<&LabelSelector>) -> bool {
    /// (key, operator, values) of one expression.
    type Expression = (String, String, Vec<String>);
    fn parts(s: &LabelSelector) -> (BTreeMap<String, String>, Vec<Expression>) {
        let expressions = s
            .match_expressions
            .iter()
            .flatten()
            .map(|e| {
                let values = e.values.clone().unwrap_or_default();
                (e.key.clone(), e.operator.clone(), values)
            })
            .collect();
        (s.match_labels.clone().unwrap_or_default(), expressions)
    }
    match (live, desired) {
        (Some(l), Some(d)) => parts(l) == parts(d),
        (l, d) => l.is_none() && d.is_none(),
    }
}

/// Whether `live` already is `desired`: it carries the desired hash, the labels the operator
/// sets, and the same content where compared.
pub(crate) fn is_current<K: Child>(live: Option<&K>, desired: &K, hash: &str) -> bool {
    live.is_some_and(|c| {
        c.annotations().get(APPLIED_HASH).map(String::as_str) == Some(hash) && matches_by_content(c, desired)
    })
}

/// Whether `live` carries what the operator sets in `desired`, hash aside. Labels count: the
/// slot label says which slot a Service serves (a retired slot's Service is found by it).
fn matches_by_content<K: Child>(live: &K, desired: &K) -> bool {
    let (l, d) = (live.labels(), desired.labels());
    d.iter().all(|(k, v)| l.get(k) == Some(v)) && K::content_matches(live, desired)
}

/// Whether `live` was applied from `desired` (the annotation matches) and edited since: drift
/// that applying puts back, and that is reported.
fn edited_since_applied<K: Child>(live: &K, desired: &K, hash: &str) -> bool {
    live.annotations().get(APPLIED_HASH).map(String::as_str) == Some(hash)
        && !matches_by_content(live, desired)
}

/// Whose a live child object is, compared with the `desired` one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ownership {
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
pub(crate) fn ownership<K: Resource>(live: &K, desired: &K) -> Ownership {
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
    use crate::children::names::{LABEL_INSTANCE, LABEL_MANAGED_BY};
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
    /// Written over a hand edit: the object carried the hash of what was applied, and its
    /// content had changed since.
    Restored,
}

/// Applies `desired` unless the copy in `cache` (the operator's watch of its own objects)
/// already is it. Refuses ([`Error::OwnedByOther`]) to touch an object of that name that
/// another owner controls, and adopts one that is [`Ownership::Adoptable`]: the cache holds
/// only objects labelled as the operator's, so an object missing there is looked up by name
/// before it is created. Returns whether it wrote, and how it knew when it did not.
pub(crate) async fn apply_if_changed<K: Child>(
    api: &Api<K>,
    cache: &Store<K>,
    desired: K,
) -> Result<Applied> {
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
    let mut written = Applied::Written;
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
        Some(Ownership::Ours) if live.is_some_and(|l| edited_since_applied(l, &desired, &hash)) => {
            written = Applied::Restored;
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
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&value),
        )
        .await;
    match applied {
        Err(kube::Error::Api(s))
            if s.code == 422 && written == Applied::Restored && K::REPLACED_WHEN_APPLY_REFUSED =>
        {
            // Whole, at the version the edit was judged from: a newer write wins (409).
            desired.meta_mut().resource_version = live.and_then(|l| l.resource_version());
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            api.replace(&name, &params, &desired).await?;
        }
        result => {
            result?;
        }
    }
    Ok(written)
}

/// Creates a slot's pod. Pods are never patched: their spec is immutable in the ways that
/// matter, and a changed instance is a replacement (a crash, under the hold rule). A pod of
/// that name that already exists is an error: the planner decided the name was free, so
/// whoever holds it now must be looked at again, never silently taken for ours.
pub(crate) async fn create_pod(api: &Api<Pod>, pod: &Pod) -> Result<()> {
    api.create(&PostParams::default(), pod).await?;
    Ok(())
}

/// Sets one condition of a pod's status (a readiness gate's), by type; the kubelet's own
/// conditions are left alone (conditions merge by type). Only on the pod with `uid`: the
/// patch carries the UID, which the API server refuses to change, so a newer pod of the same
/// name is never marked from a decision about the old one. A pod already gone is fine.
pub(crate) async fn set_pod_condition(
    api: &Api<Pod>,
    name: &str,
    uid: &str,
    condition: &k8s_openapi::api::core::v1::PodCondition,
) -> Result<bool> {
    let patch = serde_json::json!({
        "metadata": {"uid": uid},
        "status": {"conditions": [condition]},
    });
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(false),
        // The UID did not match: the name now belongs to a newer pod.
        Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("metadata.uid") => Ok(false),
        Err(e) => Err(e.into()),
    }
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

    /// An edit of an object, as JSON.
    type Edit = fn(&mut serde_json::Value);

    /// `desired` as the API server stores it after an apply: the annotation, and the defaults
    /// it fills in (`complete`).
    fn as_stored<K: Child>(desired: &K, complete: impl FnOnce(&mut serde_json::Value)) -> (K, String) {
        let hash = desired_hash(desired);
        let mut live = serde_json::to_value(applied(desired.clone(), &hash)).unwrap();
        complete(&mut live);
        (serde_json::from_value(live).unwrap(), hash)
    }

    fn edited<K: Child>(live: &K, edit: impl FnOnce(&mut serde_json::Value)) -> K {
        let mut v = serde_json::to_value(live).unwrap();
        edit(&mut v);
        serde_json::from_value(v).unwrap()
    }

    /// Steady state must cost nothing: a Service as the API server completes it (a clusterIP,
    /// families, affinity, policies; `publishNotReadyAddresses: false` omitted) is current.
    fn stored_service(desired: &Service) -> (Service, String) {
        as_stored(desired, |v| {
            let spec = &mut v["spec"];
            if spec.get("clusterIP").is_none() {
                spec["clusterIP"] = "10.96.0.17".into();
                spec["clusterIPs"] = serde_json::json!(["10.96.0.17"]);
            }
            spec["ipFamilies"] = serde_json::json!(["IPv4"]);
            spec["ipFamilyPolicy"] = "SingleStack".into();
            spec["sessionAffinity"] = "None".into();
            spec["internalTrafficPolicy"] = "Cluster".into();
            spec.as_object_mut().unwrap().remove("publishNotReadyAddresses");
        })
    }

    #[test]
    fn a_service_is_compared_in_the_fields_the_operator_sets() {
        use crate::children::service;
        use crate::crd::model::Slot;
        let cluster = crate::fixtures::cluster(serde_json::json!({}));
        let desired = service::slot_service(&cluster, Slot::new(1));
        let (live, h) = stored_service(&desired);
        assert!(is_current(Some(&live), &desired, &h), "defaults are no drift");
        assert!(!edited_since_applied(&live, &desired, &h));
        let headless = service::headless_service(&cluster);
        let (live_headless, hh) = stored_service(&headless);
        assert!(is_current(Some(&live_headless), &headless, &hh));
        // A port someone else added stays after an apply (ports are keyed by port and
        // protocol): no drift, or it would be written forever.
        let extra = edited(&live, |v| {
            v["spec"]["ports"].as_array_mut().unwrap().push(
                serde_json::json!({"name": "metrics", "port": 9121, "protocol": "TCP", "targetPort": 9121}),
            )
        });
        assert!(is_current(Some(&extra), &desired, &h));
        // Each of these reaches another process, or none, through slot 1's address.
        let drifts: [(&str, Edit); 8] = [
            ("selector to slot 0", |v| {
                v["spec"]["selector"]["redlock.dev/slot"] = "0".into()
            }),
            ("selector key removed", |v| {
                v["spec"]["selector"]
                    .as_object_mut()
                    .unwrap()
                    .remove("redlock.dev/slot");
            }),
            ("selector key added", |v| {
                v["spec"]["selector"]["extra"] = "x".into()
            }),
            ("targetPort", |v| {
                v["spec"]["ports"][0]["targetPort"] = 6380.into()
            }),
            ("port", |v| v["spec"]["ports"][0]["port"] = 6380.into()),
            ("publishNotReadyAddresses", |v| {
                v["spec"]["publishNotReadyAddresses"] = true.into()
            }),
            ("type", |v| v["spec"]["type"] = "NodePort".into()),
            ("slot label", |v| {
                v["metadata"]["labels"]["redlock.dev/slot"] = "0".into()
            }),
        ];
        for (what, edit) in drifts {
            let e = edited(&live, edit);
            assert!(!is_current(Some(&e), &desired, &h), "{what}");
            assert!(edited_since_applied(&e, &desired, &h), "{what}");
        }
        let not_headless = edited(&live_headless, |v| v["spec"]["clusterIP"] = "10.96.0.18".into());
        assert!(!is_current(Some(&not_headless), &headless, &hh));
        // A changed spec (another hash) is an ordinary apply, not a restored edit.
        assert!(!edited_since_applied(&live, &desired, "another-hash"));
    }

    #[test]
    fn a_pdb_is_compared_in_the_fields_the_operator_sets() {
        use crate::children::pdb;
        let cluster = crate::fixtures::cluster(serde_json::json!({"instances": 3}));
        let desired = pdb::pod_disruption_budget(&cluster);
        let (live, h) = as_stored(&desired, |v| {
            v["spec"]["selector"]["matchExpressions"] = serde_json::json!([])
        });
        assert!(
            is_current(Some(&live), &desired, &h),
            "an empty matchExpressions is none"
        );
        for (what, edit) in [
            (
                "minAvailable",
                (|v| v["spec"]["minAvailable"] = 0.into()) as fn(&mut serde_json::Value),
            ),
            ("selector", |v| {
                v["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] = "other".into()
            }),
            ("eviction policy", |v| {
                v["spec"]["unhealthyPodEvictionPolicy"] = "IfHealthyBudget".into()
            }),
        ] {
            assert!(edited_since_applied(&edited(&live, edit), &desired, &h), "{what}");
        }
    }

    #[test]
    fn a_network_policy_is_compared_in_the_fields_the_operator_sets() {
        use crate::children::network_policy::network_policy;
        // A client selector with an empty matchLabels: the API server drops the empty map.
        let cluster = crate::fixtures::cluster(serde_json::json!({"networkPolicy": {
            "enabled": true, "clientPodSelector": {"matchLabels": {}}}}));
        let desired = network_policy(&cluster, Some("ops")).unwrap();
        let (live, h) = as_stored(&desired, |v| {
            let peer = &mut v["spec"]["ingress"][0]["from"][1]["podSelector"];
            peer.as_object_mut().unwrap().remove("matchLabels");
            v["spec"]["ingress"][0]["ports"][0]
                .as_object_mut()
                .unwrap()
                .remove("protocol");
        });
        assert!(is_current(Some(&live), &desired, &h), "stored forms are no drift");
        // An expression with empty values (`Exists`): stored without them.
        let cluster = crate::fixtures::cluster(serde_json::json!({"networkPolicy": {
            "enabled": true, "clientNamespaceSelector": {"matchExpressions": [
                {"key": "team", "operator": "Exists", "values": []}]}}}));
        let with_exists = network_policy(&cluster, Some("ops")).unwrap();
        let (stored, h2) = as_stored(&with_exists, |v| {
            let e = &mut v["spec"]["ingress"][0]["from"][1]["namespaceSelector"]["matchExpressions"][0];
            e.as_object_mut().unwrap().remove("values");
        });
        assert!(
            is_current(Some(&stored), &with_exists, &h2),
            "values [] stored as none"
        );
        let other = edited(&stored, |v| {
            v["spec"]["ingress"][0]["from"][1]["namespaceSelector"]["matchExpressions"][0]["operator"] =
                "DoesNotExist".into()
        });
        assert!(!is_current(Some(&other), &with_exists, &h2));
        let egress = edited(&live, |v| v["spec"]["egress"] = serde_json::json!([{}]));
        assert!(
            is_current(Some(&egress), &desired, &h),
            "egress is not enforced under policyTypes Ingress"
        );
        for (what, edit) in [
            (
                "client peer opened to every namespace",
                (|v| v["spec"]["ingress"][0]["from"][1]["namespaceSelector"] = serde_json::json!({}))
                    as fn(&mut serde_json::Value),
            ),
            ("a peer added", |v| {
                v["spec"]["ingress"][0]["from"]
                    .as_array_mut()
                    .unwrap()
                    .push(serde_json::json!({"ipBlock": {"cidr": "0.0.0.0/0"}}))
            }),
            ("port", |v| {
                v["spec"]["ingress"][0]["ports"][0]["port"] = 6380.into()
            }),
            ("policy types", |v| {
                v["spec"]["policyTypes"] = serde_json::json!(["Egress"])
            }),
            ("pod selector", |v| {
                v["spec"]["podSelector"] = serde_json::json!({})
            }),
        ] {
            assert!(edited_since_applied(&edited(&live, edit), &desired, &h), "{what}");
        }
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
