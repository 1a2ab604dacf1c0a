//! A `Starting` member: the slot has never had a process the operator saw.

use super::holds::{refence, start_hold};
use super::identity::{record_of, running_process};
use super::input::PlanInput;
use super::step::Step;
use crate::crd::reasons::MemberReason;
use crate::crd::{MemberState, MemberStatus};
use crate::decide::observe::{PodState, SlotObservation, image_pull_failure};
use crate::hold::held_until;

/// `Starting`: the slot has never had a process the operator saw.
pub(super) fn starting(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    obs: &SlotObservation,
    step: &mut Step,
) -> MemberStatus {
    let slot = prev.slot;
    step.create_pod = obs.pod == PodState::Missing;
    let p = running_process(obs);
    match p.as_ref().and_then(|p| Some((p, p.run_id?))) {
        Some((p, run_id)) if p.client_enabled == Some(true) => {
            // Clients got in without a release (an edited ACL Secret): fenced and held in full.
            let until = held_until(input.now, input.hold);
            refence(input, record_of(input, slot, MemberState::Held, p), until, run_id, step)
        }
        // The first process the operator sees. Nothing proves it is the first ever behind this
        // name (delete and re-create, a status wiped or restored): held in full from now.
        Some(_) => start_hold(
            input,
            slot,
            obs,
            "first process of the slot; held in full, since an earlier process of this name may have granted locks that are still valid".into(),
            step,
        ),
        None => {
            // Say why it is not up yet (e.g. the scheduler cannot place it).
            let message = match &obs.pod {
                PodState::NotRunning { reason } => Some(reason.clone()),
                _ => None,
            };
            // An image that cannot be pulled never starts: a Warning, once per record of it
            // (the message is one text however the kubelet words its retries).
            if let Some(failure) = image_pull_failure(obs)
                && prev.message.as_deref() != Some(failure)
            {
                step.tell(slot, MemberReason::ImagePullFailed, format!("{}: {failure}", prev.name), true);
            }
            MemberStatus { message, ..prev.clone() }
        }
    }
}
