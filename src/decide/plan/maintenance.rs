//! A member fenced on purpose (`kubectl redlock fence`, [`crate::hold::maintenance`]), or just
//! unfenced: applied on top of the step its recorded state planned.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use super::holds::start_hold;
use super::identity::running_process;
use super::input::PlanInput;
use super::step::Step;
use crate::crd::model::Slot;
use crate::crd::reasons::MemberReason;
use crate::crd::{MemberState, MemberStatus};
use crate::decide::observe::{PodState, SlotObservation};
use crate::hold::floor_micros;

/// A slot the user fenced on purpose (`kubectl redlock fence`), or just unfenced. A serving
/// member that answers is fenced now (by the run id just probed) and held in full from now, as
/// after a loss: whatever maintenance does to it, it serves again only once unfenced and a
/// whole hold has run since it was fenced. A member that does not answer cannot be fenced and
/// nothing proves it is shut out: it stays `Ready` (a loss is still seen as for any member),
/// marked, and is fenced once it answers. A held member stays held, also after its hold (see
/// `hold_runs`). Unfencing only lets the hold end as it would have.
pub(super) fn maintenance(
    input: &PlanInput<'_>,
    slot: Slot,
    prev: Option<&MemberStatus>,
    mut step: Step,
    obs: &SlotObservation,
) -> Step {
    let Some(next) = step.member.take() else {
        return step;
    };
    let next = match input.maintenance.get(&slot) {
        None => unmarked(input, slot, prev, next, &mut step),
        Some(_) if matches!(obs.pod, PodState::Foreign { .. }) => next,
        Some(reason) => marked(input, slot, reason, next, obs, &mut step),
    };
    step.member = Some(next);
    step
}

/// A slot not fenced on purpose: no mark, and a member just unfenced says when it serves
/// lock clients again.
fn unmarked(
    input: &PlanInput<'_>,
    slot: Slot,
    prev: Option<&MemberStatus>,
    mut next: MemberStatus,
    step: &mut Step,
) -> MemberStatus {
    next.maintenance = None;
    if prev.is_some_and(|p| p.maintenance.is_some()) {
        // Its release is due from now at the earliest (`redlock_member_release_overdue_seconds`).
        next.since = Some(MicroTime(floor_micros(input.now)));
        let when = match &next.held_until {
            _ if step.release.is_some() => "now".to_owned(),
            Some(until) if next.state.is_holding() && until.0 > input.now => {
                format!("once its hold ends at {}", until.0)
            }
            _ if next.lost_on_refusal() => {
                "as before, once it answers again (its address refuses connections)".to_owned()
            }
            _ if next.state.is_holding() => "once the operator releases it (its hold has ended)".to_owned(),
            _ => "as before (it was never fenced)".to_owned(),
        };
        step.tell(
            slot,
            MemberReason::Unfenced,
            format!("{}: unfenced; serves lock clients again {when}", next.name),
            false,
        );
    }
    next
}

/// A slot fenced on purpose (its pod ours): marked with `reason`; a `Ready` member is fenced
/// and held in full from now if it answers, else says why it is not fenced yet.
fn marked(
    input: &PlanInput<'_>,
    slot: Slot,
    reason: &str,
    mut next: MemberStatus,
    obs: &SlotObservation,
    step: &mut Step,
) -> MemberStatus {
    if next.state == MemberState::Ready {
        let why = format!("fenced for maintenance ({reason})");
        match running_process(obs)
            .and_then(|p| p.run_id)
            .filter(|_| obs.probe.is_answered())
        {
            Some(run_id) => {
                step.release = None;
                step.fence = Some(run_id.to_owned());
                step.tell(
                    slot,
                    MemberReason::FencedForMaintenance,
                    format!(
                        "{}: {why}; shut out of lock clients and held in full from now, until unfenced",
                        next.name
                    ),
                    true,
                );
                let unstopped = next.unstopped.clone();
                next = start_hold(input, slot, obs, why, step);
                // A process of the slot that outlived its pod is still looked for (§9.5).
                next.unstopped = unstopped;
            }
            None => {
                next.message = Some(format!(
                    "fence for maintenance ({reason}) requested; not answering the operator, so not fenced yet (it may still serve lock clients)"
                ));
            }
        }
    }
    if next.lost_on_refusal() {
        // Nothing answers to be fenced: it may still serve lock clients (the refusal may be a
        // rule against the operator alone), and `kubectl redlock fence` keeps waiting.
        next.message = Some(format!(
            "fence for maintenance ({reason}) requested; its address refuses connections, so not fenced yet (it may still serve lock clients)"
        ));
    }
    next.maintenance = Some(reason.to_owned());
    next
}
