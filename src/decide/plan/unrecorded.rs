//! A slot with no record: a new slot, or a status lost or restored without it.

use super::holds::start_hold;
use super::identity::{fresh_record, record_of, running_process};
use super::input::PlanInput;
use super::step::Step;
use super::unstopped::{predecessor, recalled_message};
use crate::children::names::slot_name;
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
        // be done (fencing it now would not undo what it served, and it has its keys).
        (_, Some(p)) if p.client_enabled == Some(true) => {
            let mut m = record_of(input, slot, MemberState::Ready, &p);
            m.message = Some("adopted a process that already serves clients".into());
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
