//! The cluster's optional NetworkPolicy: the Redis port admits only the operator (which probes
//! and releases every instance) and the lock clients `spec.networkPolicy` selects. Nothing else
//! in the cluster network can reach a lock server, flush it or read its keys, even with the
//! client password.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use kube::api::ObjectMeta;

use super::names::{LABEL_INSTANCE, LABEL_NAME, OPERATOR_APP_NAME, REDIS_PORT, cluster_labels};
use crate::crd::RedlockCluster;

/// Label every namespace carries with its own name (set by the API server since 1.22).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Name of a cluster's NetworkPolicy: the cluster's name (like its PodDisruptionBudget).
pub(crate) fn network_policy_name(cluster: &str) -> String {
    cluster.to_owned()
}

/// The desired NetworkPolicy, or `None` when the spec does not ask for one (then an existing
/// one is deleted). `operator_namespace` is where the operator's pods run; unknown (the
/// operator runs outside the cluster), pods labelled as the operator in any namespace are
/// admitted.
pub(crate) fn network_policy(
    cluster: &RedlockCluster,
    operator_namespace: Option<&str>,
) -> Option<NetworkPolicy> {
    let wanted = cluster.spec.network_policy.as_ref().filter(|n| n.enabled)?;
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let operator = NetworkPolicyPeer {
        pod_selector: Some(match_labels([(LABEL_NAME, OPERATOR_APP_NAME)])),
        namespace_selector: Some(match operator_namespace {
            Some(ns) => match_labels([(NAMESPACE_NAME_LABEL, ns)]),
            None => LabelSelector::default(),
        }),
        ..Default::default()
    };
    // Both selectors in one peer means "these pods in these namespaces"; a lone pod selector
    // stays in the cluster's namespace; none at all admits the cluster's namespace.
    let clients = NetworkPolicyPeer {
        pod_selector: Some(wanted.client_pod_selector.clone().unwrap_or_default()),
        namespace_selector: wanted.client_namespace_selector.clone(),
        ..Default::default()
    };
    let instances = [LABEL_NAME, LABEL_INSTANCE].map(|k| (k, cluster_labels(&name)[k].clone()));
    Some(NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(network_policy_name(&name)),
            namespace: cluster.metadata.namespace.clone(),
            labels: Some(cluster_labels(&name)),
            owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(match_labels(instances.iter().map(|(k, v)| (*k, v.as_str())))),
            // Ingress only: Redis opens no connections of its own, and an egress rule could cut
            // the exec readiness probe off from the pod's own address on some network plugins.
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![operator, clients]),
                ports: Some(vec![NetworkPolicyPort {
                    port: Some(IntOrString::Int(i32::from(REDIS_PORT))),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
            }]),
            ..Default::default()
        }),
    })
}

fn match_labels<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            labels
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn cluster(network_policy: Value) -> RedlockCluster {
        crate::fixtures::cluster(json!({"networkPolicy": network_policy}))
    }

    /// The `from` peers as JSON, for compact comparisons.
    fn peers(np: &NetworkPolicy) -> Value {
        serde_json::to_value(&np.spec.as_ref().unwrap().ingress.as_ref().unwrap()[0].from).unwrap()
    }

    #[test]
    fn none_unless_enabled() {
        assert!(network_policy(&cluster(json!(null)), Some("ops")).is_none());
        assert!(network_policy(&cluster(json!({"enabled": false})), Some("ops")).is_none());
        assert!(network_policy(&cluster(json!({})), Some("ops")).is_none());
    }

    #[test]
    fn selects_the_clusters_pods_and_admits_only_the_redis_port() {
        let np = network_policy(&cluster(json!({"enabled": true})), Some("ops")).unwrap();
        assert_eq!(np.metadata.name.as_deref(), Some("locks"));
        assert_eq!(np.metadata.namespace.as_deref(), Some("team"));
        assert_eq!(np.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-1");
        assert_eq!(
            np.metadata.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
            "redlock-operator"
        );
        let spec = np.spec.unwrap();
        assert_eq!(
            serde_json::to_value(&spec.pod_selector).unwrap(),
            json!({"matchLabels": {"app.kubernetes.io/instance": "locks", "app.kubernetes.io/name": "redis"}})
        );
        assert_eq!(spec.policy_types.unwrap(), vec!["Ingress"]);
        let rules = spec.ingress.unwrap();
        assert_eq!(rules.len(), 1, "one rule: nothing but the listed peers, one port");
        assert_eq!(
            serde_json::to_value(&rules[0].ports).unwrap(),
            json!([{"port": 6379, "protocol": "TCP"}])
        );
    }

    #[test]
    fn operator_and_client_peers() {
        let operator_in_ops = json!({
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "redlock-operator"}},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
        });
        let app = json!({"matchLabels": {"app": "checkout"}});
        let prod = json!({"matchLabels": {"env": "prod"}});
        for (spec, clients) in [
            // No selector: the cluster's own namespace.
            (json!({"enabled": true}), json!({"podSelector": {}})),
            (
                json!({"enabled": true, "clientPodSelector": app}),
                json!({"podSelector": app}),
            ),
            (
                json!({"enabled": true, "clientNamespaceSelector": prod}),
                json!({"podSelector": {}, "namespaceSelector": prod}),
            ),
            (
                json!({"enabled": true, "clientPodSelector": app, "clientNamespaceSelector": prod}),
                json!({"podSelector": app, "namespaceSelector": prod}),
            ),
        ] {
            let np = network_policy(&cluster(spec.clone()), Some("ops")).unwrap();
            assert_eq!(peers(&np), json!([operator_in_ops, clients]), "{spec}");
        }
    }

    #[test]
    fn an_operator_outside_the_cluster_is_admitted_from_any_namespace() {
        let np = network_policy(&cluster(json!({"enabled": true})), None).unwrap();
        assert_eq!(
            peers(&np)[0],
            json!({
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "redlock-operator"}},
                "namespaceSelector": {},
            })
        );
    }
}
