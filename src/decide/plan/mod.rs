//! Planning: from the persisted member states, what was observed, and the clock, decide each
//! slot's next state and the actions that follow. Pure; every transition is tested (`tests`).
//!
//! Safety rests on ordering, which `reconcile` keeps: the new member states are written to
//! status first; only then are pods created, processes fenced and processes released. So a
//! hold is always on record before anything could end it, and a release is always on record
//! before it happens (an operator crash in between leaves a `Ready` member whose process is
//! still fenced, which the next reconcile releases again, or sees as lost). A release whose
//! hold is on record in the operator's own last write goes ahead of its `Ready` write
//! (`reconcile::persist::AheadOfWrite`): that record already permits it.
//!
//! Unknown means unsafe: a process is released without a full hold never. Even a slot's very
//! first process is held, because nothing the operator can read proves that no earlier
//! process of the same name (an earlier incarnation of the cluster, a status lost or restored)
//! granted locks that are still valid.
//!
//! One file per recorded state: [`unrecorded`] (no record), [`starting`], [`ready`], [`held`]
//! (`Held` or `Lost`), plus [`name_taken`] for a slot whose pod name is taken by a pod this
//! cluster does not control, [`removed`] for slots at or above N, and [`maintenance`] for a
//! slot fenced on purpose. Beneath them: [`identity`] (which process runs), [`holds`] (starting
//! and timing holds), [`unstopped`] (processes that outlived their pods) and [`clock`] (what a
//! member's clock did); [`input`] and [`step`] hold what planning is given and what it
//! decides. [`plan`] and [`step_member`] dispatch each slot to its state.

mod clock;
mod held;
mod holds;
mod identity;
mod input;
mod maintenance;
mod name_taken;
mod ready;
mod removed;
mod starting;
mod step;
mod tampered;
mod unrecorded;
mod unstopped;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

pub(crate) use holds::hold_timer_keys;
pub(crate) use input::{PlanInput, Timing};
pub(crate) use step::{MemberEvent, Plan};
pub(crate) use unstopped::{PROCESSES_GONE, asserted_gone};

use crate::clock::record;
use crate::crd::model::Slot;
use crate::crd::{MemberState, MemberStatus};
use crate::decide::observe::{PodState, SlotObservation};
use crate::hold::remaining;
use held::holding;
use maintenance::maintenance;
use name_taken::name_taken;
use ready::{ready, refused};
use removed::retire_member;
use starting::starting;
use step::Step;
use unrecorded::unrecorded;

pub(crate) fn plan(input: &PlanInput<'_>, observed: &BTreeMap<Slot, SlotObservation>) -> Plan {
    let previous: BTreeMap<Slot, &MemberStatus> = input.members.iter().map(|m| (m.slot, m)).collect();
    let slots: BTreeSet<Slot> = Slot::all(input.instances)
        .chain(previous.keys().copied())
        .chain(observed.keys().copied())
        .collect();
    let mut plan = Plan::default();
    let missing = SlotObservation::default();
    for slot in slots {
        let obs = observed.get(&slot).unwrap_or(&missing);
        // A record about another pod (a status restored from before this one) takes back the
        // process this pod's predecessor left behind, as the pod records it.
        let recalled_record = previous.get(&slot).and_then(|p| unstopped::recalled(p, obs));
        // No record of a slot whose pod is gone (a status wiped before any reconcile saw the
        // pod vanish): the ledger's process is planned as the released member it may be.
        let ledger_record = (!previous.contains_key(&slot))
            .then(|| unrecorded::from_ledger(input, slot, obs))
            .flatten();
        let prev = recalled_record
            .as_ref()
            .or(ledger_record.as_ref())
            .or(previous.get(&slot).copied());
        // A process this operator fenced ahead of a status write that did not land is released
        // by no rule until a write that holds it is on record (`crate::hold::fence_ahead`).
        // Nor is a process the ledger does not name yet (`crate::hold::ledger`): written as
        // soon as it is identified, it names a held process long before its hold ends.
        let blocked = if fenced_unrecorded_here(input, slot, obs) {
            Some(FENCE_NOT_ON_RECORD)
        } else if !ledger_names_running(input, slot, obs) {
            Some(input.timing.release_blocked.unwrap_or(NOT_IN_LEDGER))
        } else {
            None
        };
        let slot_input;
        let input = match blocked {
            Some(why) => {
                slot_input = PlanInput {
                    timing: Timing {
                        release_blocked: Some(why),
                        ..input.timing
                    },
                    ..*input
                };
                &slot_input
            }
            None => input,
        };
        let step = if slot.within(input.instances) {
            let mut step = step_member(input, slot, prev, obs);
            if let (Some(from), Some(m)) = (&ledger_record, step.member.as_mut()) {
                m.message = Some(unrecorded::ledger_message(from, m));
            }
            maintenance(input, slot, prev, step, obs)
        } else {
            // A member `Lost` on a refusal leaves as the `Ready` member it stands for.
            let planned = prev.map(ready::as_ready);
            let mut step = retire_member(input, slot, planned.as_ref(), obs);
            // A removed slot is not a member to fence or unfence: it only waits out its hold.
            if let Some(m) = step.member.as_mut() {
                m.maintenance = None;
            }
            step
        };
        if let Some(m) = &step.member
            && slot.within(input.confirmed)
            && step.release.is_none()
            && waits_for_process(m, input.now)
            && !obs.probe.is_answered()
            // Fenced on purpose: nothing is released, so nothing waits for it to answer.
            && !input.maintenance.contains_key(&slot)
            && !matches!(obs.pod, PodState::Foreign { .. })
        {
            plan.awaiting_process = true;
        }
        let predecessor = step
            .member
            .as_ref()
            .and_then(|m| m.unstopped.clone())
            .filter(|u| !u.fenced);
        if let Some(mut m) = step.member {
            // The clock on record follows the process the record is about, whichever state
            // built it (crate::clock::record).
            m.clock = record::for_process(
                m.run_id.as_deref(),
                obs.clock_record.as_ref(),
                prev.and_then(|p| p.clock.as_ref()),
            );
            m.fence_seen_at = fence_seen_at(&m, prev, obs, input.now);
            if m.state.is_holding()
                && let Some(until) = &m.held_until
                && until.0 > input.now
            {
                let left = remaining(input.now, until.0);
                plan.next_hold_end = Some(plan.next_hold_end.map_or(left, |d: Duration| d.min(left)));
            }
            plan.members.push(m);
        }
        if step.create_pod {
            plan.create_pods.push(slot);
            if let Some(u) = predecessor {
                plan.predecessors.insert(slot, u);
            }
        }
        if step.delete_pod {
            plan.delete_pods.push(slot);
        }
        for run_id in step.fence_unstopped.into_iter().chain(step.fence) {
            plan.fences.push((slot, run_id));
        }
        if let Some(run_id) = step.release {
            plan.releases.push((slot, run_id));
        }
        plan.events.extend(step.events);
    }
    plan
}

/// Of the releases `owed` (decided by this process, `Timing::owed_releases`), those the
/// observation does not settle: a release is settled once its process is seen serving, or
/// another process (or none) runs at its slot; one whose process did not answer stays owed.
pub fn still_owed(
    owed: &[(Slot, String)],
    observed: &BTreeMap<Slot, SlotObservation>,
) -> Vec<(Slot, String)> {
    owed.iter()
        .filter(|(slot, run_id)| {
            let Some(obs) = observed.get(slot) else {
                return false;
            };
            match identity::running_process(obs) {
                // Running, not answering: nothing is known of its client user yet.
                Some(p) if p.run_id.is_none() => true,
                Some(p) => p.run_id == Some(run_id.as_str()) && p.client_enabled != Some(true),
                None => false,
            }
        })
        .cloned()
        .collect()
}

/// When the hold of `m` was first seen to have its fence in place (safety review 3, N5: a
/// fence sent is not a fence landed, and `kubectl redlock fence` must not say "fenced" before
/// it is): the moment this reconcile's probe found the process on record with no lock-client
/// user on, or the earlier moment already on record for the same process. A probe that finds
/// it serving clears it (the fence was undone or never landed); one without an answer proves
/// nothing either way and keeps what is on record. Only while the record holds.
fn fence_seen_at(
    m: &MemberStatus,
    prev: Option<&MemberStatus>,
    obs: &SlotObservation,
    now: Timestamp,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime> {
    if !m.state.is_holding() {
        return None;
    }
    let run_id = m.run_id.as_deref()?;
    let kept = prev
        .filter(|p| p.state.is_holding() && p.run_id.as_deref() == Some(run_id))
        .and_then(|p| p.fence_seen_at.clone());
    match obs.probe.answered().filter(|r| r.run_id == run_id) {
        Some(r) if r.client_enabled => None,
        Some(_) => kept.or(Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            crate::hold::floor_micros(now),
        ))),
        None => kept,
    }
}

/// Why a process fenced ahead of a status write that did not land waits for its release.
pub(crate) const FENCE_NOT_ON_RECORD: &str = "this operator fenced this process ahead of a status write that did not land; released once a write that holds it is on record";

/// Why a process the ledger does not name waits for its release.
pub(crate) const NOT_IN_LEDGER: &str = "the ledger (<name>-ledger) does not name this process yet; released once it does (no process serves before a record outside the status names it)";

/// Whether the ledger names the process answering on `slot` (true when none answers: there
/// is nothing to release then).
fn ledger_names_running(input: &PlanInput<'_>, slot: Slot, obs: &SlotObservation) -> bool {
    identity::running_process(obs)
        .and_then(|p| p.run_id)
        .is_none_or(|run_id| crate::hold::ledger::names(input.ledger, slot, run_id))
}

/// Whether the process running on `slot` is one this operator fenced ahead of a status write
/// that did not land.
fn fenced_unrecorded_here(input: &PlanInput<'_>, slot: Slot, obs: &SlotObservation) -> bool {
    identity::running_process(obs)
        .and_then(|p| p.run_id)
        .is_some_and(|run_id| input.timing.fenced_unrecorded(slot, run_id))
}

/// Whether the next step for `m` waits on its process answering the operator: a first
/// process whose hold should start, or a hold that has ended.
fn waits_for_process(m: &MemberStatus, now: Timestamp) -> bool {
    match m.state {
        MemberState::Starting => true,
        MemberState::Held | MemberState::Lost => m.held_until.as_ref().is_some_and(|u| u.0 <= now),
        MemberState::Ready => false,
    }
}

/// One slot that should exist (slot < N).
fn step_member(
    input: &PlanInput<'_>,
    slot: Slot,
    prev: Option<&MemberStatus>,
    obs: &SlotObservation,
) -> Step {
    let mut step = Step {
        // A finished pod (Failed, e.g. evicted) never runs again and blocks its name: remove it
        // so the slot can be replaced. Its process is gone, so deleting it ends nothing that
        // serves.
        delete_pod: matches!(obs.pod, PodState::Finished { .. }),
        ..Step::default()
    };
    let next = match (prev, &obs.pod) {
        (_, PodState::Foreign { owner }) => name_taken(input, slot, prev, owner, &mut step),
        (None, _) => unrecorded(input, slot, obs, &mut step),
        (Some(prev), _) => match prev.state {
            MemberState::Starting => starting(input, prev, obs, &mut step),
            MemberState::Ready => ready(input, prev, obs, &mut step),
            MemberState::Lost if prev.lost_on_refusal() => refused(input, prev, obs, &mut step),
            MemberState::Held | MemberState::Lost => holding(input, prev, obs, &mut step),
        },
    };
    step.record(prev, next);
    step
}
