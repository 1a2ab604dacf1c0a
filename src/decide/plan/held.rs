//! A `Held` or `Lost` member: its hold runs until `heldUntil`, and it is released once the
//! hold has run (and nothing else keeps it fenced).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

use super::holds::{extend_hold, fence_if_serving, hold_end, refence, restart_hold, timed_hold};
use super::identity::{Process, fill_identity, fresh_record, is_other_process, record_of, running_process};
use super::input::{PlanInput, Timing};
use super::step::Step;
use super::tampered;
use super::unstopped::{Gone, PROCESSES_GONE, gone_evidence, refence_unstopped, tell_gone};
use crate::crd::model::Slot;
use crate::crd::reasons::MemberReason;
use crate::crd::{MemberState, MemberStatus, UnstoppedProcess};
use crate::decide::observe::{PodState, SlotObservation};
use crate::hold::floor_micros;

/// `Ready` for process `run_id`, with a release unless it already serves clients.
fn ready_and_release(
    input: &PlanInput<'_>,
    slot: Slot,
    p: &Process<'_>,
    run_id: &str,
    step: &mut Step,
) -> MemberStatus {
    if p.client_enabled != Some(true) {
        step.release = Some(run_id.to_owned());
    }
    record_of(input, slot, MemberState::Ready, p)
}

/// `Held` or `Lost`, with a process of the slot that was never seen to stop: it is looked
/// for at its last address and asked about at its node's kubelet (docs/design.md §9.5). Found
/// serving: fenced, and the hold restarts. The slot is released only on positive evidence that
/// it can grant no lock any more ([`gone_evidence`]: seen fenced, its address refusing or
/// answering as another process, its kubelet running no container of its pod, an admin's
/// word); without it, the slot stays held once its hold has run, and says why.
pub(super) fn holding(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    obs: &SlotObservation,
    step: &mut Step,
) -> MemberStatus {
    let Some(u) = &prev.unstopped else {
        return hold_runs(input, prev, obs, step);
    };
    let found = match obs.unstopped.as_ref().map(|s| &s.answer) {
        Some(Ok(info)) if info.run_id == u.run_id => Some(info.client_enabled),
        _ => None,
    };
    if found == Some(true) {
        let why = format!(
            "process {} at {} outlived its pod and still lets lock clients in (its node is cut off or was deleted while it ran); fenced, and the hold restarts",
            u.run_id, u.pod_ip
        );
        return refence_unstopped(input, prev, u, why, step);
    }
    let seen = UnstoppedProcess {
        fenced: u.fenced || found == Some(false),
        ..u.clone()
    };
    match gone_evidence(&seen, obs.unstopped.as_ref(), input.gone_asserted) {
        Ok(Gone::Fenced) if !u.fenced => {
            // Found fenced for the first time: by someone else, or by this operator's fence of it
            // a probe ago (which restarted the hold then). Either way it may have granted locks
            // until it was fenced, so the hold runs from now (a probe period more at most after
            // the operator's own fence).
            let why = format!(
                "process {} at {} (its pod vanished while it ran) was found fenced; it may have granted locks until then, so the hold restarts",
                u.run_id, u.pod_ip
            );
            let (until, _) = hold_end(input, prev);
            let restarted = MemberStatus {
                unstopped: Some(seen.clone()),
                ..restart_hold(input, prev.clone(), until, &why)
            };
            let mut next = hold_runs(input, &restarted, obs, step);
            next.unstopped = (next.state != MemberState::Ready).then_some(seen);
            next
        }
        Ok(Gone::Fenced) => {
            let mut next = hold_runs(input, prev, obs, step);
            // Released: a fenced process grants nothing, and is no longer looked for.
            next.unstopped = (next.state != MemberState::Ready).then_some(seen);
            next
        }
        Ok(gone) => {
            // Found by the model check (docs/model-check.md): the process was never seen fenced,
            // so it may have granted locks until this very evidence (a node cut off past the
            // hold, whose kubelet stops the process when it comes back). Its locks live until
            // their TTL from then: the hold runs again from now, never ending earlier.
            tell_gone(prev, u, &gone, step);
            let why = format!(
                "process {} (its pod vanished while it ran) is gone ({gone}) but may have granted locks until now; the hold restarts",
                u.run_id
            );
            let (until, _) = hold_end(input, prev);
            let without = MemberStatus {
                unstopped: None,
                ..restart_hold(input, prev.clone(), until, &why)
            };
            hold_runs(input, &without, obs, step)
        }
        Err(why) => {
            let waits = format!(
                "process {} (its pod vanished while it ran) may still grant locks: {why}. Released once it is found fenced (then fenced if found serving), its address refuses connections or answers as another process, its node's kubelet reports no container of its pod, or an admin asserts it dead (annotation {PROCESSES_GONE})",
                u.run_id
            );
            let blocked = PlanInput {
                timing: Timing {
                    release_blocked: Some(&waits),
                    ..input.timing
                },
                ..*input
            };
            let mut next = hold_runs(&blocked, prev, obs, step);
            next.unstopped = Some(seen);
            let hold_ended = next.message.as_deref().is_some_and(|m| m.contains(&waits));
            if hold_ended && next.message != prev.message {
                step.tell(
                    prev.slot,
                    MemberReason::ReleaseWaitsForProcessGone,
                    format!("{}: hold ended, not released: {waits}", prev.name),
                    true,
                );
            }
            next
        }
    }
}

/// `Held` or `Lost`: a hold runs until `heldUntil`.
fn hold_runs(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    obs: &SlotObservation,
    step: &mut Step,
) -> MemberStatus {
    let slot = prev.slot;
    let (next, until) = timed_hold(input, prev, step);
    match running_process(obs) {
        Some(p) if is_other_process(prev, &p) => {
            let held = extend_hold(
                input,
                record_of(input, slot, MemberState::Held, &p),
                until,
                "restarted again during its hold",
                "restarted during its hold",
                step,
            );
            fence_if_serving(held, Some(&p), step)
        }
        Some(p) if let Some(found) = tampered::deviations(obs) => {
            // Never released: replaced, and the new process is held as every replacement.
            tampered::replace_held(prev, obs, found, step);
            let mut next = next;
            fill_identity(&mut next, &p);
            next
        }
        Some(p) => {
            let next = same_process_held(input, next, &p, until, step);
            // Only a record that never heard from its process: a known one that stops
            // answering for a moment keeps its message (no status write per slow probe).
            match (&next.run_id, obs.probe.failure()) {
                (None, Some(why)) => unanswered(next, why),
                (Some(_), _) => answered(next),
                (None, None) => next,
            }
        }
        None => {
            step.create_pod = obs.pod == PodState::Missing;
            if prev.state == MemberState::Held {
                // The fenced replacement died too: count the hold again from now.
                let lost = "replacement lost during its hold";
                extend_hold(
                    input,
                    fresh_record(input, slot, MemberState::Lost),
                    until,
                    lost,
                    lost,
                    step,
                )
            } else {
                next
            }
        }
    }
}

/// What a held record's message adds while its pod runs but its process has never answered
/// the operator: nothing is released before it does, and the message says why (e.g. the pod's
/// address answers as another pod's process, docs/design.md §9.6).
pub(super) const UNANSWERED: &str = "; not released before its own process answers: ";

/// `next` with the probe's failure in its message, in place of an earlier one.
fn unanswered(mut next: MemberStatus, why: &str) -> MemberStatus {
    let cause = next
        .message
        .as_deref()
        .and_then(|m| m.split(UNANSWERED).next())
        .unwrap_or("held");
    next.message = Some(format!("{cause}{UNANSWERED}{why}"));
    next
}

/// `next` without an earlier probe failure in its message, now that its process answered.
fn answered(mut next: MemberStatus) -> MemberStatus {
    if let Some(m) = &next.message
        && let Some((cause, _)) = m.split_once(UNANSWERED)
    {
        next.message = Some(cause.to_owned());
    }
    next
}

/// The held slot's own process runs: fenced again if it serves too early, released once the
/// hold has run (unless it is fenced for maintenance, the operator's clock blocks releases,
/// or it is a scale-up's new member whose list clients do not use yet). `next` is the
/// record with its hold timed (`timed_hold`).
fn same_process_held(
    input: &PlanInput<'_>,
    mut next: MemberStatus,
    p: &Process<'_>,
    until: Timestamp,
    step: &mut Step,
) -> MemberStatus {
    let slot = next.slot;
    if next.state == MemberState::Lost {
        next.state = MemberState::Held;
        next.since = Some(MicroTime(floor_micros(input.now)));
    }
    fill_identity(&mut next, p);
    match (p.run_id, p.client_enabled) {
        // Serving during its hold, or after it while it must not serve yet (a scale-up's
        // new member before the new list is confirmed, a member fenced for maintenance).
        (Some(run_id), Some(true))
            if until > input.now
                || !slot.within(input.confirmed)
                || input.maintenance.contains_key(&slot) =>
        {
            refence(input, next, until, run_id, step)
        }
        (Some(_), _) if until <= input.now && input.maintenance.contains_key(&slot) => MemberStatus {
            message: Some(format!(
                "hold ended; stays fenced for maintenance ({}) until unfenced (kubectl redlock unfence)",
                input.maintenance[&slot]
            )),
            ..next
        },
        (Some(_), _)
            if until <= input.now
                && slot.within(input.confirmed)
                && input.timing.release_blocked.is_some() =>
        {
            MemberStatus {
                message: Some(format!(
                    "hold ended; release waits: {}",
                    input.timing.release_blocked.unwrap_or_default()
                )),
                ..next
            }
        }
        (Some(run_id), _) if until <= input.now && slot.within(input.confirmed) => {
            ready_and_release(input, slot, p, run_id, step)
        }
        (Some(_), _) if until <= input.now => MemberStatus {
            message: Some(format!(
                "hold ended; a new member of a scale-up serves once every client uses the list of {} (annotation {})",
                input.instances,
                crate::decide::resize::CLIENTS_USE_INSTANCES
            )),
            ..next
        },
        _ => next,
    }
}
