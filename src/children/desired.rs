//! Every child object one reconcile applies before it acts on members, built in one place.
//!
//! `reconcile::children` takes a [`Desired`] apart without `..`: a kind added here that the
//! apply step forgets does not compile, and neither does a field the step names but nothing
//! builds. Pods, `<name>-endpoints` and `<name>-ledger` are not here: they are written in the
//! safety order of `reconcile::act`, after the status that allows them.

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::secrets::{self, Credentials};
use super::{config, network_policy, pdb, service};
use crate::crd::RedlockCluster;
use crate::crd::model::Slot;

/// The three Secrets of one set of credentials, in the order they are written.
#[derive(Debug, Clone)]
pub(crate) struct SecretSet {
    /// `<name>-admin`: the operator's copy of every password, written first.
    pub admin: Secret,
    /// `<name>-client`: what clients read (servers, quorum, their password).
    pub client: Secret,
    /// The ACL file: hashes of the passwords the other two keep, written last.
    pub acl: Secret,
}

/// The children other than pods, as the spec wants them.
#[derive(Debug, Clone)]
pub(crate) struct Desired {
    pub secrets: SecretSet,
    /// redis.conf.
    pub config_map: ConfigMap,
    /// One Service per slot clients may be told about, then the headless Service.
    pub services: Vec<Service>,
    pub pod_disruption_budget: PodDisruptionBudget,
    /// `None`: the spec asks for none, and one this cluster made is deleted.
    pub network_policy: Option<NetworkPolicy>,
}

/// The Secrets of `credentials` for a published list of `published` servers.
pub(crate) fn secret_set(cluster: &RedlockCluster, credentials: &Credentials, published: i32) -> SecretSet {
    SecretSet {
        admin: secrets::admin_secret(cluster, credentials),
        client: secrets::client_secret(cluster, credentials, published),
        acl: secrets::acl_secret(cluster, credentials),
    }
}

/// How many slots keep a Service: a removed slot keeps its Service while clients may still be
/// told about it (it is fenced, so its pod is not Ready and the Service has no endpoints).
pub(crate) fn slots_with_service(cluster: &RedlockCluster, published: i32) -> i32 {
    cluster.spec.instances.max(published)
}

/// Every child for `published` servers told to clients; `operator_namespace` is where the
/// operator's pods run (the NetworkPolicy admits them).
pub(crate) fn desired(
    cluster: &RedlockCluster,
    credentials: &Credentials,
    published: i32,
    operator_namespace: Option<&str>,
) -> Desired {
    Desired {
        secrets: secret_set(cluster, credentials, published),
        config_map: config::config_map(cluster),
        services: Slot::all(slots_with_service(cluster, published))
            .map(|slot| service::slot_service(cluster, slot))
            .chain([service::headless_service(cluster)])
            .collect(),
        pod_disruption_budget: pdb::pod_disruption_budget(cluster),
        network_policy: network_policy::network_policy(cluster, operator_namespace),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;

    fn credentials() -> Credentials {
        Credentials::new("admin".into(), "client".into(), "probe".into())
    }

    fn names(services: &[Service]) -> Vec<String> {
        services.iter().map(|s| s.name_any()).collect()
    }

    #[test]
    fn a_slot_clients_are_still_told_about_keeps_its_service_after_a_scale_down() {
        let cluster = crate::fixtures::cluster(serde_json::json!({"instances": 3}));
        let d = desired(&cluster, &credentials(), 5, None);
        assert_eq!(
            names(&d.services),
            [
                "locks-0",
                "locks-1",
                "locks-2",
                "locks-3",
                "locks-4",
                "locks-headless"
            ]
        );
        let d = desired(&cluster, &credentials(), 3, None);
        assert_eq!(
            names(&d.services),
            ["locks-0", "locks-1", "locks-2", "locks-headless"]
        );
        // A scale-up not yet published: the new slots have their Services already.
        let d = desired(&cluster, &credentials(), 1, None);
        assert_eq!(d.services.len(), 4);
    }

    #[test]
    fn the_client_secret_tells_the_published_list_and_its_quorum() {
        let cluster = crate::fixtures::cluster(serde_json::json!({"instances": 3}));
        let d = desired(&cluster, &credentials(), 5, None);
        let data = d.secrets.client.data.expect("data");
        let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
        assert_eq!(text("quorum"), "3");
        assert_eq!(text("urls").lines().count(), 5);
    }

    #[test]
    fn a_network_policy_only_when_the_spec_asks_for_one() {
        let cluster = crate::fixtures::cluster(serde_json::json!({"instances": 3}));
        assert!(
            desired(&cluster, &credentials(), 3, None)
                .network_policy
                .is_none()
        );
        let cluster =
            crate::fixtures::cluster(serde_json::json!({"instances": 3, "networkPolicy": {"enabled": true}}));
        let np = desired(&cluster, &credentials(), 3, Some("ops")).network_policy;
        assert_eq!(np.expect("a policy").name_any(), "locks");
    }
}
