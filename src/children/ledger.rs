//! The `<name>-ledger` ConfigMap: where the operator keeps its ledger of each slot's last
//! identified process (`crate::hold::ledger`, docs/design.md §9.5). Not for clients, and not
//! to be edited: a ledger that does not read counts as none.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Resource;
use kube::api::ObjectMeta;

use super::names::{cluster_labels, ledger_config_map_name};
use crate::crd::RedlockCluster;
use crate::hold::ledger::{self, Ledger};

/// The key that holds the ledger (JSON: slot → process).
pub(crate) const PROCESSES: &str = "processes";

/// The ConfigMap that stores `ledger` for `cluster`.
pub(crate) fn ledger_config_map(cluster: &RedlockCluster, ledger: &Ledger) -> ConfigMap {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(ledger_config_map_name(&name)),
            namespace: cluster.metadata.namespace.clone(),
            labels: Some(cluster_labels(&name)),
            owner_references: cluster.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(PROCESSES.to_owned(), ledger::to_json(ledger))])),
        ..Default::default()
    }
}

/// The ledger `cm` stores, or why it does not read.
pub(crate) fn read(cm: &ConfigMap) -> Result<Ledger, String> {
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(PROCESSES))
        .ok_or_else(|| format!("no key {PROCESSES:?}"))?;
    ledger::from_json(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::UnstoppedProcess;
    use crate::crd::model::Slot;

    #[test]
    fn the_config_map_reads_back_the_ledger_it_was_built_from() {
        let cluster = crate::fixtures::cluster(serde_json::json!({"instances": 3}));
        let l = Ledger::from([(
            Slot::new(1),
            UnstoppedProcess {
                run_id: "r1".into(),
                pod_ip: "10.0.0.1".into(),
                listener: None,
                fenced: false,
                pod_uid: Some("u1".into()),
                node: Some("n1".into()),
            },
        )]);
        let cm = ledger_config_map(&cluster, &l);
        assert_eq!(cm.metadata.name.as_deref(), Some("locks-ledger"));
        assert!(cm.metadata.owner_references.is_some(), "owned by the cluster");
        assert_eq!(read(&cm), Ok(l));
        let mut edited = cm.clone();
        edited.data = Some(BTreeMap::from([(PROCESSES.to_owned(), "garbled".to_owned())]));
        assert!(read(&edited).is_err());
        edited.data = None;
        assert!(read(&edited).is_err());
    }
}
