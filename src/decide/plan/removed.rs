//! Slots at or above N (scale-down): fenced and held while clients are still told a list
//! that contains them, then their pods go and their records wait out the hold.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use super::holds::{hold_end, start_hold};
use super::identity::{Process, fill_identity, fresh_record, is_other_process, record_of, running_process};
use super::input::PlanInput;
use super::name_taken::name_taken;
use super::step::Step;
use super::unstopped::{LookedFor, removed_unstopped, vanished_unfenced};
use crate::crd::model::Slot;
use crate::crd::{MemberState, MemberStatus};
use crate::decide::observe::{PodState, SlotObservation};
use crate::hold::{floor_micros, held_until};

/// A slot at or above N. While clients are still told a list that contains it, it is fenced
/// and held (its locks expire before the shorter list is published); after that its pod goes,
/// and a slot that ever served keeps a `Lost` record until its hold has run out, so scaling
/// back up within the hold cannot reuse it unheld.
pub(super) fn retire_member(
    input: &PlanInput<'_>,
    slot: Slot,
    prev: Option<&MemberStatus>,
    obs: &SlotObservation,
) -> Step {
    if let PodState::Foreign { owner } = &obs.pod {
        // Never delete a pod this cluster does not control.
        let mut step = Step::default();
        step.member = Some(name_taken(input, slot, prev, owner, &mut step));
        return step;
    }
    if slot.within(input.published) {
        return fence_removed(input, slot, prev, obs);
    }
    let mut step = Step {
        delete_pod: obs.pod != PodState::Missing,
        ..Step::default()
    };
    let Some(prev) = prev else {
        if obs.pod != PodState::Missing {
            // A process with no record may have served clients: hold the slot once it is gone.
            let mut m = fresh_record(input, slot, MemberState::Lost);
            m.message = Some("unknown process being removed; the slot is held once it is gone".into());
            step.member = Some(m);
        }
        return step;
    };
    if obs.pod != PodState::Missing {
        // Keep the record as it is until the pod (and its process) is gone.
        step.member = Some(prev.clone());
        return step;
    }
    step.member = retired_record(input, slot, prev, obs, &mut step);
    step
}

/// A removed slot whose pod is gone, no longer on the list clients are told: a slot that
/// ever served keeps a `Lost` record until its hold has run out; none after that.
fn retired_record(
    input: &PlanInput<'_>,
    slot: Slot,
    prev: &MemberStatus,
    obs: &SlotObservation,
    step: &mut Step,
) -> Option<MemberStatus> {
    // A process that outlived its pod is still looked for while the record lasts: clients
    // that kept the longer list may reach it.
    let prev = match removed_unstopped(input, prev, obs, step) {
        LookedFor::PlanFrom(prev) => prev,
        LookedFor::Refenced(restarted) => return Some(restarted),
    };
    let prev = &prev;
    let (until, started) = match prev.state {
        MemberState::Starting => return None,
        MemberState::Ready => (held_until(input.now, input.hold), floor_micros(input.now)),
        MemberState::Held | MemberState::Lost => hold_end(input, prev),
    };
    if until <= input.now {
        return None;
    }
    let mut m = fresh_record(input, slot, MemberState::Lost);
    m.held_until = Some(MicroTime(until));
    m.hold_started_at = Some(MicroTime(started));
    m.message = Some(format!(
        "removed by scale-down; the slot can be reused without a hold after {until}"
    ));
    if prev.state == MemberState::Lost {
        m.since = prev.since.clone();
    }
    m.unstopped = prev.unstopped.clone().filter(|u| !u.fenced);
    Some(m)
}

/// A removed slot that clients are still told about (a scale-down whose shorter list is not
/// published yet): shut clients out now and hold it, so every lock it granted has expired
/// before any client is told the shorter list. The hold counts only from an observation that
/// proves it cannot grant locks any more (seen fenced, or its process gone): a fence sent but
/// not yet landed, or a process that does not answer, proves nothing. Its pod stays until the
/// shorter list is out.
fn fence_removed(
    input: &PlanInput<'_>,
    slot: Slot,
    prev: Option<&MemberStatus>,
    obs: &SlotObservation,
) -> Step {
    let mut step = Step::default();
    // A process of the slot that outlived its pod (docs/design.md §9.5): clients on the list
    // that still names this slot reach it where it runs. Found letting them in, it is fenced
    // there and the hold restarts; found fenced, it grants nothing.
    let prev = match prev.map(|prev| removed_unstopped(input, prev, obs, &mut step)) {
        Some(LookedFor::Refenced(restarted)) => {
            step.member = Some(restarted);
            return step;
        }
        Some(LookedFor::PlanFrom(prev)) => Some(prev),
        None => None,
    };
    let prev = prev.as_ref();
    let next = fenced_removed_record(input, slot, prev, obs, &mut step);
    step.record(prev, next);
    step
}

/// The record of a removed slot still on the list, by what its process was seen doing:
/// letting clients in, fenced, not answering, or gone.
fn fenced_removed_record(
    input: &PlanInput<'_>,
    slot: Slot,
    prev: Option<&MemberStatus>,
    obs: &SlotObservation,
    step: &mut Step,
) -> MemberStatus {
    let removing = format!(
        "removed by scale-down: fenced and held; the list of {} is published once its hold has ended, then its pod is deleted",
        input.instances
    );
    let unproven = format!(
        "removed by scale-down: being fenced; its hold starts once it is seen fenced or gone, then the list of {} is published",
        input.instances
    );
    let p = running_process(obs);
    let answer = p.as_ref().and_then(|p| Some((p, p.run_id?, p.client_enabled?)));
    match (answer, &p) {
        // Lets clients in: fence it; no hold yet.
        (Some((p, run_id, true)), _) => {
            step.fence = Some(run_id.to_owned());
            MemberStatus {
                held_until: None,
                hold_started_at: None,
                message: Some(unproven),
                ..record_of(input, slot, MemberState::Held, p)
            }
        }
        // Seen fenced: the hold runs (from now, unless it already ran for this process).
        (Some((p, _, false)), _) => removed_seen_fenced(input, slot, prev, p, obs, &removing, step),
        // Running but not answering: nothing is proven; a hold already running stays.
        (None, Some(_)) => removed_unanswering(input, slot, prev, unproven),
        // No process (pod gone, not running, finished): it grants nothing from now on.
        (None, None) => removed_gone(input, slot, prev, obs, &removing, step),
    }
}

/// A removed member whose process runs but does not answer: nothing is proven, so a hold
/// already running stays and none starts.
fn removed_unanswering(
    input: &PlanInput<'_>,
    slot: Slot,
    prev: Option<&MemberStatus>,
    unproven: String,
) -> MemberStatus {
    match prev {
        Some(prev) if hold_recorded(prev) => prev.clone(),
        Some(prev) if prev.state == MemberState::Starting => prev.clone(),
        // Which process it was stays on record: if its pod vanishes before it answers,
        // that process is looked for where it ran.
        Some(prev) => MemberStatus {
            state: MemberState::Held,
            held_until: None,
            hold_started_at: None,
            message: Some(unproven),
            ..prev.clone()
        },
        None => MemberStatus {
            message: Some(unproven),
            ..fresh_record(input, slot, MemberState::Held)
        },
    }
}

/// Whether `m` records a hold with an end (one that has been running).
fn hold_recorded(m: &MemberStatus) -> bool {
    m.state.is_holding() && m.held_until.is_some()
}

/// A removed member seen fenced: its hold runs, from now unless it already ran for this
/// very process.
fn removed_seen_fenced(
    input: &PlanInput<'_>,
    slot: Slot,
    prev: Option<&MemberStatus>,
    p: &Process<'_>,
    obs: &SlotObservation,
    removing: &str,
    step: &mut Step,
) -> MemberStatus {
    match prev {
        Some(prev) if hold_recorded(prev) && !is_other_process(prev, p) => {
            let (until, started) = hold_end(input, prev);
            let mut next = MemberStatus {
                held_until: Some(MicroTime(until)),
                hold_started_at: Some(MicroTime(started)),
                message: Some(removing.to_owned()),
                ..prev.clone()
            };
            fill_identity(&mut next, p);
            next
        }
        _ => {
            let mut m = start_hold(input, slot, obs, "removed by scale-down".into(), step);
            m.message = Some(removing.to_owned());
            m
        }
    }
}

/// A removed member with no process (pod gone, not running, finished): it grants nothing
/// from now on, unless its pod vanished before it was seen fenced (then its process is
/// looked for where it ran).
fn removed_gone(
    input: &PlanInput<'_>,
    slot: Slot,
    prev: Option<&MemberStatus>,
    obs: &SlotObservation,
    removing: &str,
    step: &mut Step,
) -> MemberStatus {
    match prev {
        Some(prev) if prev.state == MemberState::Starting => prev.clone(),
        Some(prev) if hold_recorded(prev) => {
            let (until, started) = hold_end(input, prev);
            MemberStatus {
                held_until: Some(MicroTime(until)),
                hold_started_at: Some(MicroTime(started)),
                ..prev.clone()
            }
        }
        _ => {
            let mut m = start_hold(input, slot, obs, "removed by scale-down".into(), step);
            m.message = Some(removing.to_owned());
            if let Some(u) = prev.and_then(|prev| vanished_unfenced(prev, obs)) {
                // Its pod went before it was seen fenced: nothing shows the process
                // stopped, and old-list clients may still reach it.
                m.message = Some(format!(
                    "{removing}; its process {} was never seen to stop, so it is looked for at {} (and fenced if found) until then",
                    u.run_id, u.pod_ip
                ));
                m.unstopped = Some(u);
            }
            m
        }
    }
}
