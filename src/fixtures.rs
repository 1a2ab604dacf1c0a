//! Fixtures shared by the unit tests: a cluster object as the API server hands it over, and
//! what a reconcile observes of a running member.

use crate::crd::RedlockCluster;
use crate::decide::observe::{PodState, Probe, RedisInfo, SlotObservation};

pub(crate) const NAME: &str = "locks";
pub(crate) const NAMESPACE: &str = "team";
pub(crate) const UID: &str = "uid-1";

/// Cluster `locks` in namespace `team` with UID `uid-1`, from a spec given as JSON;
/// `maxLockTTL` (the one required field) is 30s unless the spec says otherwise.
pub(crate) fn cluster(spec: serde_json::Value) -> RedlockCluster {
    let mut spec = spec;
    if spec.get("maxLockTTL").is_none() {
        spec["maxLockTTL"] = "30s".into();
    }
    let mut c = RedlockCluster::new(NAME, serde_json::from_value(spec).expect("a valid spec"));
    c.metadata.namespace = Some(NAMESPACE.into());
    c.metadata.uid = Some(UID.into());
    c
}

/// A running container `container` whose Redis (`run`, 7.0.15) answers the operator; its
/// client user is on (and its pod Ready) when `enabled`.
pub(crate) fn running(run: &str, enabled: bool, container: &str) -> SlotObservation {
    SlotObservation {
        pod: PodState::Running {
            container_id: Some(container.into()),
            ready: enabled,
            terminating: false,
        },
        pod_ip: None,
        probe: Probe::Answered(RedisInfo {
            run_id: run.into(),
            version: "7.0.15".into(),
            client_enabled: enabled,
            pod_uid: None,
            client_password_hashes: None,
            admin_password_hashes: None,
            deviations: Vec::new(),
        }),
        ..Default::default()
    }
}

/// A ledger (`crate::hold::ledger`) naming each process that answers in `observed`, as `act`
/// writes it once they are identified.
pub(crate) fn ledger_naming_answering(
    observed: &std::collections::BTreeMap<crate::crd::model::Slot, SlotObservation>,
) -> crate::hold::ledger::Ledger {
    observed
        .iter()
        .filter_map(|(slot, o)| {
            let r = o.probe.answered()?;
            Some((
                *slot,
                crate::crd::UnstoppedProcess {
                    run_id: r.run_id.clone(),
                    pod_ip: o.pod_ip.map_or("10.0.0.1".into(), |ip| ip.to_string()),
                    listener: None,
                    fenced: false,
                    pod_uid: o.pod_uid.clone(),
                    node: o.node.clone(),
                },
            ))
        })
        .collect()
}
