//! Processes that outlived their pods (docs/design.md §9.5): which are still looked for at
//! their last address, and what finding one serving or fenced there does to the record.

use super::holds::{hold_end, restart_hold};
use super::input::PlanInput;
use super::step::Step;
use crate::crd::{MemberStatus, UnstoppedProcess};
use crate::observe::{PodState, SlotObservation};
use crate::reasons::MemberReason;

/// A released slot still looking for an earlier process that outlived its pod (§9.5) loses
/// its replacement in turn: the earlier process is still looked for by the new hold, else a
/// release after it would rely on that process being dead without looking. Only when the
/// replacement's own process vanished unseen too does the record keep the newer one (it ran
/// until now; the earlier one has not answered for at least a whole hold), and says so.
pub(super) fn carry_earlier_unstopped(prev: &MemberStatus, held: &mut MemberStatus, step: &mut Step) {
    let Some(earlier) = prev.unstopped.as_ref().filter(|u| !u.fenced) else {
        return;
    };
    match &held.unstopped {
        None => {
            held.unstopped = Some(earlier.clone());
            held.message = Some(format!(
                "{}; process {} (an earlier pod's, never seen to stop) is still looked for at {} before the slot is released",
                held.message.clone().unwrap_or_default(),
                earlier.run_id,
                earlier.pod_ip
            ));
        }
        Some(newer) if newer.run_id != earlier.run_id => step.tell(
            prev.slot,
            MemberReason::ReleaseAssumesProcessGone,
            format!(
                "{}: process {} (an earlier pod's, never seen to stop, not answering at {} for at least one hold) is no longer looked for: this slot's next process {} vanished unseen as well and is looked for at {} instead; a release relies on {} being dead",
                prev.name, earlier.run_id, earlier.pod_ip, newer.run_id, newer.pod_ip, earlier.run_id
            ),
            true,
        ),
        Some(_) => {}
    }
}

/// What looking for a removed member's unstopped process came to.
pub(super) enum LookedFor {
    /// Plan from this record (the process marked fenced if it was seen so).
    PlanFrom(MemberStatus),
    /// Found letting clients in: fenced there, and this record's hold restarts.
    Refenced(MemberStatus),
}

/// A removed member's process that its vanished pod left behind, not yet found fenced.
pub(super) fn removed_unstopped(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    obs: &SlotObservation,
    step: &mut Step,
) -> LookedFor {
    let Some(u) = prev.unstopped.as_ref().filter(|u| !u.fenced) else {
        return LookedFor::PlanFrom(prev.clone());
    };
    let found = match &obs.unstopped {
        Some(Ok(info)) if info.run_id == u.run_id => info.client_enabled,
        _ => return LookedFor::PlanFrom(prev.clone()),
    };
    if !found {
        let mut next = prev.clone();
        next.unstopped = Some(UnstoppedProcess {
            fenced: true,
            ..u.clone()
        });
        return LookedFor::PlanFrom(next);
    }
    let why = format!(
        "removed by scale-down: process {} at {} outlived its pod and still lets lock clients in; fenced, and the hold restarts before the shorter list is published",
        u.run_id, u.pod_ip
    );
    LookedFor::Refenced(refence_unstopped(input, prev, u, why, step))
}

/// A process that outlived its pod, found letting lock clients in where it ran: fenced there
/// (event `UnstoppedProcessFenced`, saying `why`), and the record's hold restarts. The record
/// keeps `unstopped` (not yet seen fenced: only those are looked for).
pub(super) fn refence_unstopped(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    u: &UnstoppedProcess,
    why: String,
    step: &mut Step,
) -> MemberStatus {
    step.fence_unstopped = Some(u.run_id.clone());
    step.tell(
        prev.slot,
        MemberReason::UnstoppedProcessFenced,
        format!("{}: {why}", prev.name),
        true,
    );
    let (until, _) = hold_end(input, prev);
    restart_hold(input, prev.clone(), until, &why)
}

/// The process of `prev` when its pod is gone (or failed) without the process having been
/// seen to stop, and without it having been seen fenced: it may still serve (§9.5).
pub(super) fn vanished_unfenced(prev: &MemberStatus, obs: &SlotObservation) -> Option<UnstoppedProcess> {
    if let Some(u) = &prev.unstopped {
        return Some(u.clone());
    }
    let seen_fenced = prev.state.is_holding() && prev.held_until.is_some();
    if seen_fenced || !(obs.pod == PodState::Missing || obs.stop_unconfirmed) {
        return None;
    }
    Some(UnstoppedProcess {
        run_id: prev.run_id.clone()?,
        pod_ip: prev.pod_ip.clone()?,
        listener: prev.listener.clone(),
        fenced: false,
    })
}
