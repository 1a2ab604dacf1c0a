//! A process whose settings or counters show it can drop keys, or has, while it runs (safety
//! review 3, N1): eviction switched on, keys evicted, persistence on, a replica's role (its
//! dataset replaced). That is the loss the hold exists for, without a restart to show it, so
//! it is treated as one: fenced at once, held in full, and its pod replaced, so that the
//! process that serves after the hold starts from the enforced settings of its files, which
//! nobody changed at run time. Nothing of such a process is ever released.

use super::holds::start_hold;
use super::input::PlanInput;
use super::step::Step;
use crate::crd::MemberStatus;
use crate::crd::reasons::MemberReason;
use crate::decide::observe::{PodState, SlotObservation};

/// What the probe of the slot's own process found deviating, if anything.
pub(super) fn deviations(obs: &SlotObservation) -> Option<&[String]> {
    obs.probe
        .answered()
        .map(|i| i.deviations.as_slice())
        .filter(|d| !d.is_empty())
}

/// A released member whose process deviates: fenced, held in full from now, its pod replaced.
pub(super) fn tampered(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    obs: &SlotObservation,
    run_id: &str,
    found: &[String],
    step: &mut Step,
) -> MemberStatus {
    let why = format!(
        "process {run_id} changed while it ran ({}): it may drop lock keys, or has, as if it had lost them",
        found.join("; ")
    );
    step.fence = Some(run_id.to_owned());
    replace(prev, &why, step);
    start_hold(input, prev.slot, obs, why, step)
}

/// A held process that deviates: never released; its pod is replaced (the new process is held
/// as every replacement is).
pub(super) fn replace_held(prev: &MemberStatus, obs: &SlotObservation, found: &[String], step: &mut Step) {
    if matches!(
        obs.pod,
        PodState::Running {
            terminating: true,
            ..
        }
    ) {
        // Its replacement is under way.
        return;
    }
    let why = format!(
        "process {} changed while it was held ({})",
        prev.run_id.as_deref().unwrap_or("?"),
        found.join("; ")
    );
    replace(prev, &why, step);
}

fn replace(prev: &MemberStatus, why: &str, step: &mut Step) {
    step.delete_pod = true;
    step.tell(
        prev.slot,
        MemberReason::ProcessTampered,
        format!(
            "{}: {why}; fenced, held in full and its pod replaced (the new process starts from the enforced settings)",
            prev.name
        ),
        true,
    );
}
