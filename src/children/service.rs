//! The cluster's Services: one stable ClusterIP address per slot (what clients are configured
//! with) and a headless Service for discovery. Both select Ready pods only, and a pod is Ready
//! exactly when the client user can log in (its readiness probe), so a held instance is never
//! behind a client address.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use kube::api::ObjectMeta;

use super::names::{
    LABEL_INSTANCE, LABEL_NAME, LABEL_SLOT, REDIS_PORT, cluster_labels, slot_labels, slot_name,
};
use crate::crd::RedlockCluster;
use crate::crd::model::Slot;

/// Name of the Redis container port the Services target.
pub(crate) const REDIS_PORT_NAME: &str = "redis";

/// The stable address of one slot: `<cluster>-<slot>`, selecting only that slot's pod.
pub(crate) fn slot_service(cluster: &RedlockCluster, slot: Slot) -> Service {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let mut selector = selector(&name);
    selector.insert(LABEL_SLOT.into(), slot.to_string());
    service(
        cluster,
        slot_name(&name, slot),
        slot_labels(&name, slot),
        selector,
        None,
    )
}

/// `<cluster>-headless`: headless, every serving member, for discovery (DNS A records per
/// Ready pod). Not `<cluster>`: that is slot k's Service name of a cluster named `<cluster>`
/// minus a `-k` suffix (the headless Service of `locks-1` would be slot 1's of `locks`).
/// `-headless` cannot collide: a slot Service name ends in digits.
pub(crate) fn headless_service(cluster: &RedlockCluster) -> Service {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    service(
        cluster,
        headless_service_name(&name),
        cluster_labels(&name),
        selector(&name),
        Some("None".into()),
    )
}

pub(crate) fn headless_service_name(cluster: &str) -> String {
    format!("{cluster}-headless")
}

/// The slot a Service of this operator serves, if it is a per-slot Service.
pub(crate) fn service_slot(service: &Service) -> Option<Slot> {
    service.metadata.labels.as_ref()?.get(LABEL_SLOT)?.parse().ok()
}

fn selector(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.to_owned(), "redis".to_owned()),
        (LABEL_INSTANCE.to_owned(), cluster.to_owned()),
    ])
}

fn service(
    cluster: &RedlockCluster,
    name: String,
    labels: BTreeMap<String, String>,
    selector: BTreeMap<String, String>,
    cluster_ip: Option<String>,
) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: cluster.metadata.namespace.clone(),
            labels: Some(labels),
            owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip,
            selector: Some(selector),
            // Held pods are not Ready and must stay unreachable through these addresses.
            publish_not_ready_addresses: Some(false),
            ports: Some(vec![ServicePort {
                name: Some(REDIS_PORT_NAME.into()),
                port: i32::from(REDIS_PORT),
                target_port: Some(IntOrString::String(REDIS_PORT_NAME.into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> RedlockCluster {
        crate::fixtures::cluster(serde_json::json!({}))
    }

    #[test]
    fn slot_service_selects_exactly_its_slot_and_only_ready_pods() {
        let s = slot_service(&cluster(), Slot::new(3));
        assert_eq!(s.metadata.name.as_deref(), Some("locks-3"));
        assert_eq!(s.metadata.namespace.as_deref(), Some("team"));
        assert_eq!(service_slot(&s), Some(Slot::new(3)));
        let spec = s.spec.unwrap();
        let sel = spec.selector.unwrap();
        assert_eq!(sel[LABEL_SLOT], "3");
        assert_eq!(sel[LABEL_INSTANCE], "locks");
        assert_eq!(sel.len(), 3);
        assert_eq!(spec.publish_not_ready_addresses, Some(false));
        assert_eq!(spec.cluster_ip, None);
        let port = &spec.ports.unwrap()[0];
        assert_eq!(port.port, 6379);
        assert_eq!(port.target_port, Some(IntOrString::String("redis".into())));
        let owner = &s.metadata.owner_references.unwrap()[0];
        assert_eq!((owner.uid.as_str(), owner.controller), ("uid-1", Some(true)));
    }

    #[test]
    fn headless_service_selects_every_member() {
        let s = headless_service(&cluster());
        assert_eq!(s.metadata.name.as_deref(), Some("locks-headless"));
        assert_eq!(service_slot(&s), None);
        let spec = s.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert!(!spec.selector.unwrap().contains_key(LABEL_SLOT));
    }
}
