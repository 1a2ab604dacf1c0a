//! What the watch caches keep of each object. A cache holds one copy of every watched object
//! for the life of the process, so only what a reconcile reads is kept. Every write is a
//! server-side apply built from scratch, so nothing is ever written back from a trimmed copy.

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceSpec};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Resource;

use crate::crd::RedlockCluster;

/// How an object is trimmed before it is cached.
pub(crate) trait Trim: Resource {
    fn trim(&mut self) {
        trim_metadata(self);
    }
}

// Pods keep what an observation reads: their `Trim` is `decide::observe`'s, beside the reads
// it must keep.

/// Services, the PDB and the NetworkPolicy are compared by content in the fields the operator
/// sets (`apply::Child::content_matches`): those are kept, what the API server adds (cluster
/// IPs, families, policies, status) is not.
impl Trim for Service {
    fn trim(&mut self) {
        trim_metadata(self);
        self.spec = self.spec.take().map(|s| ServiceSpec {
            type_: s.type_,
            cluster_ip: s.cluster_ip,
            selector: s.selector,
            publish_not_ready_addresses: s.publish_not_ready_addresses,
            ports: s.ports,
            ..Default::default()
        });
        self.status = None;
    }
}

impl Trim for PodDisruptionBudget {
    fn trim(&mut self) {
        trim_metadata(self);
        self.status = None;
    }
}

impl Trim for NetworkPolicy {
    fn trim(&mut self) {
        trim_metadata(self);
    }
}

/// Their content is compared (redis.conf, the endpoints, passwords, the ACL file) and read.
impl Trim for Secret {}
impl Trim for ConfigMap {}
impl Trim for RedlockCluster {}

/// No plan reads managedFields (an entry per writer, rewritten on every status write) or the
/// client-side-apply annotation (a second copy of the object), and they are often larger than
/// the rest of the object.
pub(crate) fn trim_metadata<K: Resource + ?Sized>(object: &mut K) {
    object.meta_mut().managed_fields = None;
    if let Some(annotations) = object.meta_mut().annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// The annotation `kubectl apply` (client-side) keeps the whole applied object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::children::hash::{APPLIED_HASH, desired_hash};
    use crate::reconcile::apply::{Ownership, is_current, ownership};
    use kube::ResourceExt;

    /// A Service, PDB or NetworkPolicy as the operator applied it is still current and still
    /// its own once trimmed, and an edited one is still drift: what `apply_if_changed` decides
    /// from the cache does not change.
    fn judged_as_before<K: crate::reconcile::apply::Child + Trim>(
        mut desired: K,
        edit: impl FnOnce(&mut serde_json::Value),
    ) {
        let hash = desired_hash(&desired);
        desired
            .annotations_mut()
            .insert(APPLIED_HASH.into(), hash.clone());
        let mut cached = desired.clone();
        cached.trim();
        assert!(is_current(Some(&cached), &desired, &hash));
        assert_eq!(ownership(&cached, &desired), Ownership::Ours);
        let mut edited = serde_json::to_value(&desired).unwrap();
        edit(&mut edited);
        let mut edited: K = serde_json::from_value(edited).unwrap();
        edited.trim();
        assert!(!is_current(Some(&edited), &desired, &hash));
    }

    #[test]
    fn trimmed_children_are_judged_as_before() {
        let cluster: RedlockCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "redlock.dev/v1alpha1", "kind": "RedlockCluster",
            "metadata": {"name": "locks", "namespace": "team", "uid": "u1"},
            "spec": {"maxLockTTL": "30s", "networkPolicy": {"enabled": true}}
        }))
        .unwrap();
        judged_as_before(crate::children::service::headless_service(&cluster), |v| {
            v["spec"]["publishNotReadyAddresses"] = true.into()
        });
        judged_as_before(
            crate::children::service::slot_service(&cluster, crate::crd::model::Slot::new(1)),
            |v| v["spec"]["selector"]["redlock.dev/slot"] = "0".into(),
        );
        judged_as_before(crate::children::pdb::pod_disruption_budget(&cluster), |v| {
            v["spec"]["minAvailable"] = 0.into()
        });
        judged_as_before(
            crate::children::network_policy::network_policy(&cluster, None).unwrap(),
            |v| v["spec"]["ingress"][0]["from"][1]["namespaceSelector"] = serde_json::json!({}),
        );
    }

    #[test]
    fn what_no_plan_reads_is_dropped() {
        let mut cm = ConfigMap::default();
        cm.annotations_mut().insert(LAST_APPLIED.into(), "{...}".into());
        cm.annotations_mut().insert("keep".into(), "me".into());
        cm.meta_mut().managed_fields = Some(vec![Default::default()]);
        cm.trim();
        assert_eq!(cm.annotations().keys().collect::<Vec<_>>(), ["keep"]);
        assert_eq!(cm.meta().managed_fields, None);
    }
}
