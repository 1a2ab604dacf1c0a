//! Observation: what exists now for one RedlockCluster, read from the watch caches only
//! (no API calls), so a reconcile that changes nothing costs nothing.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::Store;

use crate::crd::RedlockCluster;
use crate::resources::names::LABEL_INSTANCE;

/// The facts a reconcile decides from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observed {
    /// Instance pods owned by the cluster (by owner UID, not just by label).
    pub pods: usize,
    /// Of those, pods that are Ready and not being deleted: the readiness probe logs in as the
    /// client user, so Ready means "serving lock clients".
    pub ready_pods: usize,
}

pub fn observe(cluster: &RedlockCluster, pods: &Store<Pod>) -> Observed {
    let uid = cluster.uid();
    let ns = cluster.namespace();
    let name = cluster.name_any();
    let owned: Vec<_> = pods
        .state()
        .into_iter()
        .filter(|p| p.namespace() == ns && p.labels().get(LABEL_INSTANCE) == Some(&name))
        .filter(|p| {
            p.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == uid.as_ref() && o.controller == Some(true))
        })
        .collect();
    Observed {
        pods: owned.len(),
        ready_pods: owned.iter().filter(|p| is_serving(p)).count(),
    }
}

/// Ready and not terminating.
pub fn is_serving(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
