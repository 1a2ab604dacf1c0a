//! The cluster's PodDisruptionBudget: at most one member voluntarily disrupted at a time.
//! A replacement is not Ready until its hold ends, so a `kubectl drain` (or any eviction)
//! moves one member per hold and never takes the cluster below quorum.
//!
//! Expressed as `minAvailable: N-1`, not `maxUnavailable: 1`: the disruption controller can
//! only resolve `maxUnavailable` for pods whose controller has a scale subresource
//! (Deployment, StatefulSet, …); for pods an operator manages directly it answers with 0
//! allowed disruptions forever, and only an integer `minAvailable` works.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use kube::api::ObjectMeta;

use super::names::{LABEL_INSTANCE, LABEL_NAME, cluster_labels};
use crate::crd::RedlockCluster;

pub(crate) fn pod_disruption_budget(cluster: &RedlockCluster) -> PodDisruptionBudget {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let selector = [LABEL_NAME, LABEL_INSTANCE]
        .iter()
        .map(|k| (k.to_string(), cluster_labels(&name)[*k].clone()))
        .collect();
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: cluster.metadata.namespace.clone(),
            labels: Some(cluster_labels(&name)),
            owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int((cluster.spec.instances - 1).max(0))),
            selector: Some(LabelSelector {
                match_labels: Some(selector),
                ..Default::default()
            }),
            // A pod that is not Ready (held, starting) may always be evicted: evicting it
            // takes nothing away from clients, and it must not block a drain forever.
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::RedlockClusterSpec;

    #[test]
    fn one_member_at_a_time_selecting_every_member() {
        let spec: RedlockClusterSpec =
            serde_json::from_value(serde_json::json!({"maxLockTTL": "30s"})).unwrap();
        let pdb = pod_disruption_budget(&RedlockCluster::new("locks", spec));
        assert_eq!(pdb.metadata.name.as_deref(), Some("locks"));
        let spec = pdb.spec.unwrap();
        // The default 5 instances: 4 must stay available.
        assert_eq!(spec.min_available, Some(IntOrString::Int(4)));
        assert_eq!(spec.max_unavailable, None);
        let labels = spec.selector.unwrap().match_labels.unwrap();
        assert_eq!(labels[LABEL_INSTANCE], "locks");
        assert_eq!(labels[LABEL_NAME], "redis");
        assert_eq!(labels.len(), 2);
    }
}
