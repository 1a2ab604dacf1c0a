//! What lock clients are configured from (docs/design.md §4): the `<name>-endpoints` ConfigMap and the
//! addresses in the `<name>-client` Secret. Clients must be given **all N** stable addresses
//! and compute the quorum from N, never from the servers that happen to be up, so `servers`
//! and `urls` always list every slot, held or not.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Resource;
use kube::api::ObjectMeta;

use super::names::{REDIS_PORT, cluster_labels, endpoints_config_map_name, slot_name};
use crate::crd::RedlockCluster;
use crate::crd::model::{Slot, quorum};

/// Key of the `<name>-endpoints` ConfigMap that tells clients the maxLockTTL in milliseconds.
pub(crate) const MAX_LOCK_TTL_MILLIS: &str = "maxLockTTLMillis";

/// Key of `<name>-endpoints` with the maxLockTTL holds use (`status.hold.maxLockTTL`, ms):
/// above `maxLockTTLMillis` while a lowering is pending. It is the second record of that
/// lowering, read when the status has none (`hold_policy::recovered`).
pub(crate) const HOLD_MAX_LOCK_TTL_MILLIS: &str = "holdMaxLockTTLMillis";

/// Stable `host:port` of a slot: its Service's cluster DNS name. `<svc>.<ns>.svc` resolves
/// from every namespace with the default pod DNS search path, whatever the cluster domain.
pub(crate) fn server_address(cluster: &str, namespace: &str, slot: Slot) -> String {
    format!("{}.{namespace}.svc:{REDIS_PORT}", slot_name(cluster, slot))
}

/// Every published slot's address (`instances` of them: the published list, see `resize`),
/// in slot order.
pub(crate) fn servers(cluster: &RedlockCluster, instances: i32) -> Vec<String> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let ns = cluster.metadata.namespace.clone().unwrap_or_default();
    Slot::all(instances)
        .map(|slot| server_address(&name, &ns, slot))
        .collect()
}

/// One URL per slot, in slot order, with the client's credentials when auth is on:
/// `rediss://` when the instances serve TLS, else `redis://`.
pub(crate) fn client_urls(
    cluster: &RedlockCluster,
    instances: i32,
    username: &str,
    password: Option<&str>,
) -> Vec<String> {
    let userinfo = match password {
        Some(password) => format!("{username}:{password}@"),
        None => String::new(),
    };
    let scheme = if cluster.spec.tls.is_some() {
        "rediss"
    } else {
        "redis"
    };
    servers(cluster, instances)
        .into_iter()
        .map(|server| format!("{scheme}://{userinfo}{server}"))
        .collect()
}

/// The `<name>-endpoints` ConfigMap for the published list of `instances` servers; `servers`
/// and `quorum` always come from that one number, in this one object. `ready_slots` are the
/// slots serving clients now; it is the only key that changes while the spec does not.
/// `confirmed` (`confirmedInstances`: slots at or above it are not released, during a
/// scale-up until its confirmation) makes this object the second record of a resize, read
/// when the status has none (`resize::Told`); so does `hold_ttl`, the maxLockTTL holds use.
pub(crate) fn endpoints_config_map(
    cluster: &RedlockCluster,
    instances: i32,
    confirmed: i32,
    ready_slots: &[Slot],
    hold_ttl: Duration,
) -> ConfigMap {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let servers = servers(cluster, instances);
    let ready: Vec<&str> = ready_slots
        .iter()
        .filter_map(|slot| servers.get(usize::try_from(slot.index()).ok()?))
        .map(String::as_str)
        .collect();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(endpoints_config_map_name(&name)),
            namespace: cluster.metadata.namespace.clone(),
            labels: Some(cluster_labels(&name)),
            owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("servers".to_owned(), lines(&servers)),
            ("quorum".to_owned(), quorum(instances).to_string()),
            ("maxLockTTL".to_owned(), cluster.spec.max_lock_ttl.to_string()),
            // Most clients take the TTL in milliseconds; spare them parsing a duration.
            (
                MAX_LOCK_TTL_MILLIS.to_owned(),
                Duration::from(cluster.spec.max_lock_ttl).as_millis().to_string(),
            ),
            (
                HOLD_MAX_LOCK_TTL_MILLIS.to_owned(),
                hold_ttl.as_millis().to_string(),
            ),
            ("ready".to_owned(), lines(&ready)),
            (CONFIRMED_INSTANCES.to_owned(), confirmed.to_string()),
        ])),
        ..Default::default()
    }
}

/// The key of `<name>-endpoints` that keeps `status.confirmedInstances`.
pub(crate) const CONFIRMED_INSTANCES: &str = "confirmedInstances";

/// Newline-terminated lines: easy to read with `read`, `splitlines()` and `strings.Fields`.
pub(crate) fn lines<S: AsRef<str>>(items: &[S]) -> String {
    items.iter().map(|s| format!("{}\n", s.as_ref())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(instances: i32, ttl: &str) -> RedlockCluster {
        crate::fixtures::cluster(serde_json::json!({"instances": instances, "maxLockTTL": ttl}))
    }

    fn data(cm: &ConfigMap, key: &str) -> String {
        cm.data.as_ref().unwrap()[key].clone()
    }

    #[test]
    fn lists_every_slot_whatever_serves() {
        let cm = endpoints_config_map(
            &cluster(5, "30s"),
            5,
            3,
            &[Slot::new(0), Slot::new(3)],
            Duration::from_secs(120),
        );
        assert_eq!(cm.metadata.name.as_deref(), Some("locks-endpoints"));
        assert_eq!(
            data(&cm, "servers"),
            "locks-0.team.svc:6379\nlocks-1.team.svc:6379\nlocks-2.team.svc:6379\n\
             locks-3.team.svc:6379\nlocks-4.team.svc:6379\n"
        );
        assert_eq!(data(&cm, "quorum"), "3");
        assert_eq!(data(&cm, "maxLockTTL"), "30s");
        assert_eq!(data(&cm, "maxLockTTLMillis"), "30000");
        // A lowering from 120s pending: holds still use 120s.
        assert_eq!(data(&cm, "holdMaxLockTTLMillis"), "120000");
        assert_eq!(data(&cm, "confirmedInstances"), "3");
        assert_eq!(
            data(&cm, "ready"),
            "locks-0.team.svc:6379\nlocks-3.team.svc:6379\n"
        );
    }

    #[test]
    fn nothing_ready_is_an_empty_list_and_retired_slots_are_ignored() {
        let cm = endpoints_config_map(&cluster(3, "1m30s"), 3, 3, &[], Duration::from_secs(90));
        assert_eq!(data(&cm, "ready"), "");
        assert_eq!(data(&cm, "quorum"), "2");
        assert_eq!(data(&cm, "maxLockTTL"), "90s");
        assert_eq!(data(&cm, "maxLockTTLMillis"), "90000");
        let cm = endpoints_config_map(
            &cluster(3, "30s"),
            3,
            3,
            &[Slot::new(1), Slot::new(7)],
            Duration::from_secs(30),
        );
        assert_eq!(data(&cm, "ready"), "locks-1.team.svc:6379\n");
    }

    #[test]
    fn urls_carry_credentials_only_when_there_are_some() {
        let c = cluster(2, "30s");
        assert_eq!(
            client_urls(&c, c.spec.instances, "redlock-client", Some("s3cret")),
            vec![
                "redis://redlock-client:s3cret@locks-0.team.svc:6379",
                "redis://redlock-client:s3cret@locks-1.team.svc:6379",
            ]
        );
        assert_eq!(
            client_urls(&c, c.spec.instances, "default", None),
            vec!["redis://locks-0.team.svc:6379", "redis://locks-1.team.svc:6379"]
        );
    }

    #[test]
    fn urls_use_tls_when_the_instances_do() {
        let mut c = cluster(2, "30s");
        c.spec.tls = Some(crate::crd::TlsSpec {
            secret_name: "locks-tls".into(),
        });
        assert_eq!(
            client_urls(&c, c.spec.instances, "redlock-client", Some("s3cret")),
            vec![
                "rediss://redlock-client:s3cret@locks-0.team.svc:6379",
                "rediss://redlock-client:s3cret@locks-1.team.svc:6379",
            ]
        );
    }
}
