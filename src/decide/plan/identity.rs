//! Which process runs on a slot, and whether it is the one a record is about: the identity
//! (run id, container id, address) that every decision to hold or release rests on.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use super::input::PlanInput;
use crate::children::names::slot_name;
use crate::crd::model::Slot;
use crate::crd::{Listener, MemberState, MemberStatus};
use crate::decide::observe::{PodState, SlotObservation};
use crate::hold::floor_micros;

/// A fresh record of `slot` in `state`, entered now.
pub(super) fn fresh_record(input: &PlanInput<'_>, slot: Slot, state: MemberState) -> MemberStatus {
    MemberStatus {
        since: Some(MicroTime(floor_micros(input.now))),
        ..MemberStatus::new(slot_name(input.cluster, slot), slot, state)
    }
}

/// The identity of the process running on a slot right now, as far as it can be told.
pub(super) struct Process<'a> {
    pub(super) run_id: Option<&'a str>,
    pub(super) container_id: Option<&'a str>,
    pub(super) client_enabled: Option<bool>,
    /// Where it answered the probe (only known when it did).
    pub(super) pod_ip: Option<String>,
    /// How it listens there (known with `pod_ip`).
    pub(super) listener: Option<Listener>,
    /// The pod it runs in and that pod's node (known with `pod_ip`): where its kubelet is
    /// asked about it should the pod vanish while it runs.
    pub(super) pod_uid: Option<String>,
    pub(super) node: Option<String>,
}

pub(super) fn running_process(obs: &SlotObservation) -> Option<Process<'_>> {
    match &obs.pod {
        PodState::Running { container_id, .. } => Some(Process {
            run_id: obs.probe.answered().map(|r| r.run_id.as_str()),
            container_id: container_id.as_deref(),
            client_enabled: obs.probe.answered().map(|r| r.client_enabled),
            pod_ip: obs.probe.answered().and(obs.pod_ip).map(|ip| ip.to_string()),
            listener: obs.probe.answered().and(obs.pod_ip).map(|_| Listener {
                tls_secret: obs.tls_secret.clone(),
            }),
            pod_uid: obs.probe.answered().and(obs.pod_uid.clone()),
            node: obs.probe.answered().and(obs.node.clone()),
        }),
        _ => None,
    }
}

/// Whether the process seen now differs from the one `prev` is about. Unknown parts of
/// either side prove nothing here; callers that would *release* on "same" demand a run id.
pub(super) fn is_other_process(prev: &MemberStatus, now: &Process<'_>) -> bool {
    match (prev.run_id.as_deref(), now.run_id) {
        // The run id names the process: Redis draws a new one at every start. A container id
        // comes from the pod cache, which can lag the probe (a restart's new process answers
        // before the cache shows its container), so it decides only without run ids.
        (Some(a), Some(b)) => a != b,
        _ => matches!((prev.container_id.as_deref(), now.container_id), (Some(a), Some(b)) if a != b),
    }
}

/// A fresh record in `state` about the process `p`.
pub(super) fn record_of(
    input: &PlanInput<'_>,
    slot: Slot,
    state: MemberState,
    p: &Process<'_>,
) -> MemberStatus {
    let mut m = fresh_record(input, slot, state);
    m.run_id = p.run_id.map(str::to_owned);
    m.container_id = p.container_id.map(str::to_owned);
    m.pod_ip = p.pod_ip.clone();
    m.listener = p.listener.clone();
    m.pod_uid = p.pod_uid.clone();
    m.node = p.node.clone();
    m
}

/// Records what was not yet known about the process a record is about.
pub(super) fn fill_identity(m: &mut MemberStatus, p: &Process<'_>) {
    if m.run_id.is_none() {
        m.run_id = p.run_id.map(str::to_owned);
    }
    // The same run id in another container: the container id on record was read from a pod
    // cache that had not caught up with the restart; the one observed now is newer.
    let same_run = m.run_id.is_some() && m.run_id.as_deref() == p.run_id;
    if m.container_id.is_none() || same_run && p.container_id.is_some() {
        m.container_id = p.container_id.map(str::to_owned);
    }
    if m.pod_ip.is_none() {
        m.pod_ip = p.pod_ip.clone();
    }
    // The pod and node of the process on record: filled with its address, by the same
    // answer, so all three describe one process.
    if m.pod_uid.is_none() && m.pod_ip.is_some() && m.pod_ip == p.pod_ip && same_run {
        m.pod_uid = p.pod_uid.clone();
        m.node = p.node.clone();
    }
    // With the address it describes (also for a record made before listeners were kept).
    if m.listener.is_none() && m.pod_ip.is_some() && m.pod_ip == p.pod_ip {
        m.listener = p.listener.clone();
    }
}
