//! Names and labels shared by every child of a RedlockCluster (docs/design.md §3).

use std::collections::BTreeMap;

use crate::crd::model::Slot;

/// Field manager of every server-side apply the operator sends.
pub const FIELD_MANAGER: &str = "redlock-operator";

pub(crate) const LABEL_NAME: &str = "app.kubernetes.io/name";
pub const LABEL_INSTANCE: &str = "app.kubernetes.io/instance";
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub(crate) const LABEL_SLOT: &str = "redlock.dev/slot";

/// Value of `app.kubernetes.io/managed-by` on every child; the operator's watches select on it
/// so it caches only its own objects (and never every Secret in the cluster).
pub(crate) const MANAGED_BY: &str = "redlock-operator";

/// `app.kubernetes.io/name` of the operator's own pods (the Helm chart sets it); a cluster's
/// NetworkPolicy admits them so the operator can probe and release.
pub(crate) const OPERATOR_APP_NAME: &str = "redlock-operator";

/// Name of the Redis container in every instance pod.
pub(crate) const REDIS_CONTAINER: &str = "redis";

/// Port every instance serves on.
pub(crate) const REDIS_PORT: u16 = 6379;

/// ACL user the operator itself logs in as.
pub(crate) const ADMIN_USER: &str = "redlock-admin";

/// ACL user lock clients log in as when auth is enabled.
pub(crate) const CLIENT_USER: &str = "redlock-client";

/// Every ACL user lock clients may log in as: `default` with auth off, [`CLIENT_USER`] with it
/// on. A process whose pod is gone is probed and fenced as both.
pub(crate) const CLIENT_USERS: [&str; 2] = ["default", CLIENT_USER];

/// Environment variable of the Redis container naming the ACL user lock clients log in as
/// there. The pod keeps the value it was built with, so the operator reads it back to address
/// each process as it was started, whatever the spec says now (an auth toggle mid-rollout, a
/// rejected edit).
pub(crate) const CLIENT_USER_ENV: &str = "REDIS_CLIENT_USER";

pub(crate) fn admin_secret_name(cluster: &str) -> String {
    format!("{cluster}-admin")
}

pub(crate) fn client_secret_name(cluster: &str) -> String {
    format!("{cluster}-client")
}

pub(crate) fn acl_secret_name(cluster: &str) -> String {
    format!("{cluster}-acl")
}

pub(crate) fn config_map_name(cluster: &str) -> String {
    format!("{cluster}-config")
}

pub(crate) fn endpoints_config_map_name(cluster: &str) -> String {
    format!("{cluster}-endpoints")
}

/// The ConfigMap of the operator's ledger (`crate::hold::ledger`): not for clients.
pub(crate) fn ledger_config_map_name(cluster: &str) -> String {
    format!("{cluster}-ledger")
}

/// Label selector matching every object this operator manages.
pub(crate) fn managed_selector() -> String {
    format!("{LABEL_MANAGED_BY}={MANAGED_BY}")
}

/// Labels every child of `cluster` carries.
pub(crate) fn cluster_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.to_owned(), "redis".to_owned()),
        (LABEL_INSTANCE.to_owned(), cluster.to_owned()),
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
    ])
}

/// Labels of the objects of one slot: the cluster's plus `redlock.dev/slot`.
pub(crate) fn slot_labels(cluster: &str, slot: Slot) -> BTreeMap<String, String> {
    let mut labels = cluster_labels(cluster);
    labels.insert(LABEL_SLOT.to_owned(), slot.to_string());
    labels
}

/// Pod (and per-slot Service) name of a slot. Takes a bare index too, for the callers that
/// still speak in numbers.
pub(crate) fn slot_name(cluster: &str, slot: impl Into<Slot>) -> String {
    let slot = slot.into();
    format!("{cluster}-{slot}")
}

/// The pod condition the operator sets on every instance pod, and the pod's one readiness
/// gate: `True` while the operator has this pod's process released to lock clients
/// (`serving_gate`). A pod is Ready only with it, so Services route only to released members.
pub const SERVING_CONDITION: &str = "redlock.dev/serving";

/// The word of a Redis process title that names the pod it was started for
/// (`--proc-title-template "... pod=<uid>"`); read back by the operator's probe and release.
pub(crate) const POD_UID_TAG: &str = "pod=";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_objects_carry_all_design_labels() {
        let labels = slot_labels("locks", Slot::new(2));
        assert_eq!(labels[LABEL_NAME], "redis");
        assert_eq!(labels[LABEL_INSTANCE], "locks");
        assert_eq!(labels[LABEL_MANAGED_BY], "redlock-operator");
        assert_eq!(labels[LABEL_SLOT], "2");
        assert_eq!(slot_name("locks", 2), "locks-2");
        assert_eq!(
            managed_selector(),
            "app.kubernetes.io/managed-by=redlock-operator"
        );
    }
}
