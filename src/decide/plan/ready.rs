//! A `Ready` member: released and serving, until its process is seen gone or replaced, its
//! clock jumps, or a process its vanished pod left behind turns up serving.

use super::clock::{clock_jumped, report_clock};
use super::holds::{fence_if_serving, start_hold};
use super::identity::{Process, fill_identity, is_other_process, running_process};
use super::input::PlanInput;
use super::step::Step;
use super::tampered;
use super::unstopped::{carry_earlier_unstopped, gone_evidence, tell_gone};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use crate::clock::member::Verdict;
use crate::crd::reasons::MemberReason;
use crate::crd::{MemberState, MemberStatus};
use crate::decide::observe::{PodState, Probe, SlotObservation};
use crate::hold::floor_micros;

/// `Ready`: released; it serves until its process is seen gone or replaced, or its clock is
/// seen to jump forward.
pub(super) fn ready(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    obs: &SlotObservation,
    step: &mut Step,
) -> MemberStatus {
    if let Some(next) = unstopped_after_release(input, prev, obs, step) {
        return next;
    }
    let process = running_process(obs);
    if let Some(Verdict::JumpedForward { by, unwatched_since }) = obs.clock
        && let Some(p) = &process
        && let Some(run_id) = p.run_id
        && !is_other_process(prev, p)
    {
        return clock_jumped(input, prev, obs, run_id, by, unwatched_since, step);
    }
    if let Some(found) = tampered::deviations(obs)
        && let Some(p) = &process
        && let Some(run_id) = p.run_id
        && !is_other_process(prev, p)
    {
        return tampered::tampered(input, prev, obs, run_id, found, step);
    }
    report_clock(prev, obs, step);
    let lost = lost_why(prev, obs, process.as_ref());
    if let Some(why) = lost {
        return lost_process(input, prev, obs, process.as_ref(), why, step);
    }
    let mut next = prev.clone();
    let Some(p) = &process else {
        return next;
    };
    // Same process. Fill in what was unknown; release again what this process released and
    // has not seen serving (a release that failed to send); hold in full what was fenced
    // outside it.
    fill_identity(&mut next, p);
    if let Some(run_id) = p.run_id
        && input.timing.fenced_unrecorded(prev.slot, run_id)
    {
        // Fenced by this operator ahead of a status write that did not land, and this record
        // is not the one that fence was planned from (someone else wrote it): never released
        // again from it, which would undo the fence with no hold run. Held in full from now,
        // fenced again if it serves (`crate::hold::fence_ahead`).
        let why = format!(
            "process {run_id} was fenced by this operator ahead of a status write that did not land, and its record says Ready"
        );
        let held = start_hold(input, prev.slot, obs, why, step);
        return fence_if_serving(held, Some(p), step);
    }
    if p.client_enabled == Some(false)
        && let Some(run_id) = p.run_id
    {
        if !input.timing.owes_release(prev.slot, run_id) {
            // Safety review 3, N1: fenced by hand (`ACL SETUSER <client> off`, before a flush
            // or a config change the admin thinks safe behind the fence), or released by an
            // operator process that crashed before it sent the release. Releasing it again at
            // once would undo a fence no hold has run behind: held in full first. An earlier
            // process's unsent release costs that member one hold.
            let why = format!(
                "process {run_id} was found fenced although its record says Ready (fenced outside the operator, or a release an earlier operator process did not send)"
            );
            return start_hold(input, prev.slot, obs, why, step);
        }
        if input.timing.release_blocked.is_none() {
            step.release = Some(run_id.to_owned());
        }
    }
    if let Some(why) = refused_while_running(prev, obs) {
        return presumed_crashed(input, next, why);
    }
    next.message = serving_message(obs);
    next
}

/// A member `Lost` on a refusal (`refusedSince`): planned as the `Ready` member it stands for
/// ([`as_ready`]), so whatever is seen now (its process answering again, a replacement, its
/// container or pod reported stopped, a clock jump) is judged exactly as for that member.
/// Still refused, its record stays as it was (no status write per probe period).
pub(super) fn refused(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    obs: &SlotObservation,
    step: &mut Step,
) -> MemberStatus {
    let mut next = ready(input, &as_ready(prev), obs, step);
    if next.refused_since.is_some() {
        // Still refused: since the first refusal (what else the record says is as just
        // planned, e.g. a container id filled in).
        next.refused_since = prev.refused_since.clone();
        next.since = prev.since.clone();
        return next;
    }
    if next.state == MemberState::Ready {
        next.since = Some(MicroTime(floor_micros(input.now)));
    }
    next
}

/// The `Ready` record a member `Lost` on a refusal stands for; any other record as it is.
pub(super) fn as_ready(prev: &MemberStatus) -> MemberStatus {
    if !prev.lost_on_refusal() {
        return prev.clone();
    }
    MemberStatus {
        state: MemberState::Ready,
        refused_since: None,
        message: None,
        ..prev.clone()
    }
}

/// Why a released member's process is presumed crashed: its pod shows the container running
/// (not terminating), but its address refused the connection, so nothing listens there. Only
/// about a process on record (its run id), so that a replacement is told apart from it.
fn refused_while_running<'o>(prev: &MemberStatus, obs: &'o SlotObservation) -> Option<&'o str> {
    match (&obs.pod, &obs.probe) {
        (
            PodState::Running {
                terminating: false, ..
            },
            Probe::Refused(why),
        ) if prev.run_id.is_some() => Some(why),
        _ => None,
    }
}

/// `Lost` on a refusal (`refusedSince`): shown as not serving at once (a crashed process
/// closes its connections, and the rest watch probes on that), not only once the kubelet
/// restarts the container or reports it stopped, which takes seconds on a loaded node.
/// Nothing else changes: a refusal does not prove the process dead (something in between may
/// reject the operator alone), so no hold starts, the record stays about the same process,
/// and it is planned as the `Ready` member it was ([`refused`]). Its replacement is held in
/// full from when it is seen, as today.
fn presumed_crashed(input: &PlanInput<'_>, mut next: MemberStatus, why: &str) -> MemberStatus {
    let now = Some(MicroTime(floor_micros(input.now)));
    next.state = MemberState::Lost;
    next.refused_since = now.clone();
    next.since = now;
    next.message = Some(format!(
        "process {} refuses connections ({why}) while its pod shows the container running: presumed crashed, not serving; a replacement is held in full from when it is seen, and this process serves on if it answers again",
        next.run_id.as_deref().unwrap_or_default()
    ));
    next
}

/// A released member whose process counts as lost (`why`, from [`lost_why`]): its keys are
/// gone, so it is held in full from now; a process its vanished pod left behind is looked for.
fn lost_process(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    obs: &SlotObservation,
    process: Option<&Process<'_>>,
    why: String,
    step: &mut Step,
) -> MemberStatus {
    let slot = prev.slot;
    step.tell(
        slot,
        MemberReason::InstanceLost,
        format!("{}: {why}; its keys are gone", prev.name),
        true,
    );
    step.create_pod = obs.pod == PodState::Missing;
    let mut held = start_hold(input, slot, obs, why, step);
    if (obs.pod == PodState::Missing || obs.stop_unconfirmed)
        && let Some(u) = prev.process_record()
    {
        // The pod object is gone (or marked failed by the control plane), but nothing
        // showed its process stop: a node cut off from the API server keeps serving
        // clients that reach it.
        held.message = Some(format!(
            "{}; its process {} was never seen to stop, so it is looked for at {} (and fenced if found) before the slot is released",
            held.message.unwrap_or_default(),
            u.run_id,
            u.pod_ip
        ));
        held.unstopped = Some(u);
    }
    carry_earlier_unstopped(prev, &mut held, step);
    fence_if_serving(held, process, step)
}

/// Why a released member's process counts as lost (its keys gone), if it does.
fn lost_why(prev: &MemberStatus, obs: &SlotObservation, process: Option<&Process<'_>>) -> Option<String> {
    match (&obs.pod, process) {
        (PodState::Missing, _) => Some("pod deleted".to_owned()),
        (PodState::Finished { reason }, _) => Some(format!("pod {reason}")),
        (PodState::NotRunning { reason }, _) => Some(format!("container not running ({reason})")),
        (_, Some(p)) if is_other_process(prev, p) => Some("new process (restarted)".to_owned()),
        // A fenced process the record cannot vouch for (no run id on record: an edited or
        // restored status). Releasing it could unfence a new, empty process: count it lost.
        (_, Some(p)) if prev.run_id.is_none() && p.client_enabled == Some(false) => {
            Some("fenced process the record has no run id for (status edited or restored)".to_owned())
        }
        _ => None,
    }
}

/// What a released member that keeps its process says: why it is not answering, or why a
/// terminating pod's slot waits.
fn serving_message(obs: &SlotObservation) -> Option<String> {
    match (&obs.pod, obs.probe.answered()) {
        // A terminating pod (also one evicted from a node that stopped reporting) may still
        // run a process that serves old clients: the hold cannot start and no replacement can
        // be made until the pod is gone.
        (
            PodState::Running {
                terminating: true, ..
            },
            _,
        ) => Some(format!(
            "pod terminating{}; its process may still serve, so the hold starts once it is known to be gone (container stopped or pod removed)",
            if obs.probe.is_answered() {
                String::new()
            } else {
                format!(
                    " and not answering the operator ({})",
                    obs.probe.failure().unwrap_or("unreachable")
                )
            }
        )),
        (_, None) => Some(format!(
            "not answering the operator ({}); keys presumed intact while the container runs",
            obs.probe.failure().unwrap_or("unreachable")
        )),
        _ => None,
    }
}

/// `Ready` after a release that relied on a vanished pod's process being dead (§9.5): that
/// process is still looked for at its last address. Found letting lock clients in (the
/// partition healed, a paused process resumed), the slot has two processes that grant locks,
/// and locks the old one granted may still be valid: it is fenced there, and the replacement
/// is fenced and held in full from now. Found fenced, it grants nothing and is no longer
/// looked for. Not found, it is looked for again next time.
fn unstopped_after_release(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    obs: &SlotObservation,
    step: &mut Step,
) -> Option<MemberStatus> {
    let u = prev.unstopped.as_ref().filter(|u| !u.fenced)?;
    let search = obs.unstopped.as_ref()?;
    let serving = matches!(&search.answer, Ok(info) if info.run_id == u.run_id && info.client_enabled);
    if !serving {
        // Proven gone (or fenced): no longer looked for, and the record says so. Nothing
        // proven: looked for again next time.
        let gone = gone_evidence(u, Some(search), input.gone_asserted).ok()?;
        tell_gone(prev, u, &gone, step);
        let mut seen_fenced = prev.clone();
        seen_fenced.unstopped = None;
        return Some(ready(input, &seen_fenced, obs, step));
    }
    step.fence_unstopped = Some(u.run_id.clone());
    let why = format!(
        "process {} at {} outlived its pod and lets lock clients in again after this slot's replacement was released (the release relied on it being dead); both are fenced, and the replacement is held in full",
        u.run_id, u.pod_ip
    );
    step.tell(
        prev.slot,
        MemberReason::UnstoppedProcessFenced,
        format!("{}: {why}", prev.name),
        true,
    );
    let process = running_process(obs);
    if let Some(p) = &process
        && p.client_enabled != Some(false)
        && let Some(run_id) = p.run_id
    {
        step.fence = Some(run_id.to_owned());
    }
    let mut held = start_hold(input, prev.slot, obs, why, step);
    held.unstopped = Some(u.clone());
    Some(held)
}
