//! A slot with no record: a new slot, or a status lost or restored without it.

use super::holds::start_hold;
use super::identity::{fresh_record, record_of, running_process};
use super::input::PlanInput;
use super::ready::ready;
use super::step::Step;
use super::unstopped::{predecessor, recalled_message};
use crate::children::names::slot_name;
use crate::crd::UnstoppedProcess;
use crate::crd::model::Slot;
use crate::crd::reasons::MemberReason;
use crate::crd::{MemberState, MemberStatus};
use crate::decide::observe::{PodState, SlotObservation};

/// No record of this slot (a new slot, or a status lost or restored without it).
pub(super) fn unrecorded(
    input: &PlanInput<'_>,
    slot: Slot,
    obs: &SlotObservation,
    step: &mut Step,
) -> MemberStatus {
    match (&obs.pod, running_process(obs)) {
        // Record `Starting` first (so a later reconcile can tell "new" from "status lost"),
        // then create the pod. Its first process is held in full (see `starting`).
        (PodState::Missing, _) => {
            step.create_pod = true;
            step.tell(
                slot,
                MemberReason::InstanceCreated,
                format!("creating {}", slot_name(input.cluster, slot)),
                false,
            );
            fresh_record(input, slot, MemberState::Starting)
        }
        // A process already serving clients: someone released it; adopting it is all that can
        // be done (fencing it now would not undo what it served, and it has its keys), and it
        // is then judged as any `Ready` member is: a clock jump or a deviation the probe found
        // fences and holds it (a status wiped while its clock jumped must not adopt a process
        // whose locks expired early; found by the model check with two faults).
        (_, Some(p)) if p.client_enabled == Some(true) => {
            let adopted = record_of(input, slot, MemberState::Ready, &p);
            let mut m = ready(input, &adopted, obs, step);
            if m.state == MemberState::Ready && m.message.is_none() {
                m.message = Some("adopted a process that already serves clients".into());
            }
            with_predecessor(m, obs)
        }
        // A pod the operator knows nothing about: unknown means unsafe, full hold from now.
        _ => with_predecessor(
            start_hold(
                input,
                slot,
                obs,
                "unknown process (no record of this slot)".into(),
                step,
            ),
            obs,
        ),
    }
}

/// The record `m` of a pod the status has no word of, with the process its pod replaced that
/// was never seen to stop, if the pod records one ([`predecessor`]): a held slot waits for
/// evidence that process is gone, a serving one keeps looking for it.
fn with_predecessor(mut m: MemberStatus, obs: &SlotObservation) -> MemberStatus {
    if let Some(u) = predecessor(obs) {
        m.message = Some(recalled_message(&m, u));
        m.unstopped = Some(u.clone());
    }
    m
}

/// The record the ledger gives back for a slot the status has no word of and whose pod is
/// gone ([`crate::hold::ledger`]): the ledger's process as the released `Ready` member it may
/// have been, so that planning treats it as any member whose pod vanished unseen (its
/// process looked for at its last address and fenced if found, a replacement held until it
/// is found gone). `None` for a slot with a pod (the pod's own records decide), no entry, or
/// at or above N.
pub(super) fn from_ledger(input: &PlanInput<'_>, slot: Slot, obs: &SlotObservation) -> Option<MemberStatus> {
    if obs.pod != PodState::Missing || !slot.within(input.instances) {
        return None;
    }
    let u: &UnstoppedProcess = input.ledger?.get(&slot)?;
    Some(MemberStatus {
        run_id: Some(u.run_id.clone()),
        pod_ip: Some(u.pod_ip.clone()),
        listener: u.listener.clone(),
        pod_uid: u.pod_uid.clone(),
        node: u.node.clone(),
        ..MemberStatus::new(slot_name(input.cluster, slot), slot, MemberState::Ready)
    })
}

/// What a record planned from the ledger's process (`from`) says.
pub(super) fn ledger_message(from: &MemberStatus, m: &MemberStatus) -> String {
    format!(
        "no record of this slot in the status, and its pod is gone; the ledger names process {} at {}, which may still serve: {}",
        from.run_id.as_deref().unwrap_or_default(),
        from.pod_ip.as_deref().unwrap_or_default(),
        m.message.as_deref().unwrap_or_default()
    )
}
