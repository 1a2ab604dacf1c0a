//! Planning: from the persisted member states, what was observed, and the clock, decide each
//! slot's next state and the actions that follow. Pure; every transition is tested below.
//!
//! Safety rests on ordering, which `apply` enforces: the new member states are written to
//! status first; only then are pods created and processes released. So a hold is always on
//! record before anything could end it, and a release is always on record before it happens
//! (an operator crash in between leaves a `Ready` member whose process is still fenced, which
//! the next reconcile simply releases again, or sees as lost).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

use crate::crd::{MemberState, MemberStatus};
use crate::hold::{floor_micros, held_until, remaining};
use crate::observe::{PodState, SlotObservation};
use crate::resources::names::slot_name;

/// Something worth telling the user about (becomes an event and a log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberEvent {
    pub slot: i32,
    pub reason: &'static str,
    pub message: String,
    pub warning: bool,
}

/// Everything one reconcile should do.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// Next member states, in slot order; written to status before any action.
    pub members: Vec<MemberStatus>,
    /// Slots whose pod must be created (every process starts fenced, so this is always safe).
    pub create_pods: Vec<i32>,
    /// Slots whose pod must go (scale-down).
    pub delete_pods: Vec<i32>,
    /// (slot, run id) to release with `ACL SETUSER <client> on`, after the status write.
    pub releases: Vec<(i32, String)>,
    pub events: Vec<MemberEvent>,
    /// When the earliest running hold ends: reconcile again exactly then.
    pub next_hold_end: Option<Duration>,
}

/// The planner's inputs besides the observations.
pub struct PlanInput<'a> {
    pub cluster: &'a str,
    pub instances: i32,
    /// Member states as persisted in status.
    pub members: &'a [MemberStatus],
    pub now: Timestamp,
    pub hold: Duration,
}

pub fn plan(input: &PlanInput<'_>, observed: &BTreeMap<i32, SlotObservation>) -> Plan {
    let previous: BTreeMap<i32, &MemberStatus> = input.members.iter().map(|m| (m.slot, m)).collect();
    let slots: BTreeSet<i32> = (0..input.instances)
        .chain(previous.keys().copied())
        .chain(observed.keys().copied())
        .collect();
    let mut plan = Plan::default();
    let missing = SlotObservation::default();
    for slot in slots {
        let obs = observed.get(&slot).unwrap_or(&missing);
        let prev = previous.get(&slot).copied();
        let step = if slot < input.instances {
            step_member(input, slot, prev, obs)
        } else {
            retire_member(input, slot, prev, obs)
        };
        if let Some(m) = step.member {
            if matches!(m.state, MemberState::Held | MemberState::Lost)
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
        }
        if step.delete_pod {
            plan.delete_pods.push(slot);
        }
        if let Some(run_id) = step.release {
            plan.releases.push((slot, run_id));
        }
        plan.events.extend(step.events);
    }
    plan
}

#[derive(Default)]
struct Step {
    member: Option<MemberStatus>,
    create_pod: bool,
    delete_pod: bool,
    release: Option<String>,
    events: Vec<MemberEvent>,
}

fn member(input: &PlanInput<'_>, slot: i32, state: MemberState) -> MemberStatus {
    MemberStatus {
        name: slot_name(input.cluster, slot),
        slot,
        endpoint: None,
        state,
        run_id: None,
        container_id: None,
        held_until: None,
        since: Some(MicroTime(floor_micros(input.now))),
        message: None,
    }
}

/// The identity of the process running on a slot right now, as far as it can be told.
struct Process<'a> {
    run_id: Option<&'a str>,
    container_id: Option<&'a str>,
    client_enabled: Option<bool>,
}

fn running_process(obs: &SlotObservation) -> Option<Process<'_>> {
    match &obs.pod {
        PodState::Running { container_id, .. } => Some(Process {
            run_id: obs.redis.as_ref().map(|r| r.run_id.as_str()),
            container_id: container_id.as_deref(),
            client_enabled: obs.redis.as_ref().map(|r| r.client_enabled),
        }),
        _ => None,
    }
}

/// Whether the process seen now differs from the one `prev` is about. Unknown parts of
/// either side prove nothing.
fn is_other_process(prev: &MemberStatus, now: &Process<'_>) -> bool {
    let run_differs = matches!((prev.run_id.as_deref(), now.run_id), (Some(a), Some(b)) if a != b);
    let container_differs =
        matches!((prev.container_id.as_deref(), now.container_id), (Some(a), Some(b)) if a != b);
    run_differs || container_differs
}

fn event(slot: i32, reason: &'static str, message: String, warning: bool) -> MemberEvent {
    MemberEvent {
        slot,
        reason,
        message,
        warning,
    }
}

fn start_hold(
    input: &PlanInput<'_>,
    slot: i32,
    obs: &SlotObservation,
    why: String,
    steps: &mut Step,
) -> MemberStatus {
    let until = held_until(input.now, input.hold);
    let mut m = match running_process(obs) {
        Some(p) => {
            let mut m = member(input, slot, MemberState::Held);
            m.run_id = p.run_id.map(str::to_owned);
            m.container_id = p.container_id.map(str::to_owned);
            m
        }
        None => member(input, slot, MemberState::Lost),
    };
    m.held_until = Some(MicroTime(until));
    m.message = Some(format!("{why}; held until {until}"));
    steps.events.push(event(
        slot,
        "HoldStarted",
        format!("{}: {why}; fenced until {until} (hold {:?})", m.name, input.hold),
        false,
    ));
    m
}

/// One slot that should exist (slot < N).
fn step_member(input: &PlanInput<'_>, slot: i32, prev: Option<&MemberStatus>, obs: &SlotObservation) -> Step {
    let mut step = Step::default();
    let pod_missing = obs.pod == PodState::Missing;
    let process = running_process(obs);

    let Some(prev) = prev else {
        // No record of this slot. With no pod it is new: record `Starting` first (so a later
        // reconcile can tell "new" from "status lost"), then create the pod.
        let m = match (&obs.pod, &process) {
            (PodState::Missing, _) => {
                step.create_pod = true;
                step.events.push(event(
                    slot,
                    "InstanceCreated",
                    format!("creating {}", slot_name(input.cluster, slot)),
                    false,
                ));
                member(input, slot, MemberState::Starting)
            }
            // A process already serving clients: someone released it; adopting it is all
            // that can be done (fencing it now would not undo what it served).
            (_, Some(p)) if p.client_enabled == Some(true) => {
                let mut m = member(input, slot, MemberState::Ready);
                m.run_id = p.run_id.map(str::to_owned);
                m.container_id = p.container_id.map(str::to_owned);
                m.message = Some("adopted a process that already serves clients".into());
                m
            }
            // A pod the operator knows nothing about: unknown means unsafe, full hold from now.
            _ => start_hold(
                input,
                slot,
                obs,
                "unknown process (no record of this slot)".into(),
                &mut step,
            ),
        };
        step.member = Some(m);
        return step;
    };

    let mut next = prev.clone();
    match prev.state {
        MemberState::Starting => {
            step.create_pod = pod_missing;
            if let Some(p) = &process
                && let Some(run_id) = p.run_id
            {
                // Never released before: nothing it could have granted, no hold.
                next = member(input, slot, MemberState::Ready);
                next.run_id = Some(run_id.to_owned());
                next.container_id = p.container_id.map(str::to_owned);
                if p.client_enabled != Some(true) {
                    step.release = Some(run_id.to_owned());
                }
            }
        }
        MemberState::Ready => {
            let lost = match (&obs.pod, &process) {
                (PodState::Missing, _) => Some("pod deleted".to_owned()),
                (PodState::Finished { reason }, _) => Some(format!("pod {reason}")),
                (PodState::NotRunning { reason }, _) => Some(format!("container not running ({reason})")),
                (_, Some(p)) if is_other_process(prev, p) => Some("new process (restarted)".to_owned()),
                _ => None,
            };
            if let Some(why) = lost {
                step.events.push(event(
                    slot,
                    "InstanceLost",
                    format!("{}: {why}; its keys are gone", prev.name),
                    true,
                ));
                next = start_hold(input, slot, obs, why, &mut step);
                step.create_pod = pod_missing;
            } else if let Some(p) = &process {
                // Same process. Fill in what was unknown; release again if a crash between the
                // status write and the release left it fenced.
                if next.run_id.is_none() {
                    next.run_id = p.run_id.map(str::to_owned);
                }
                if next.container_id.is_none() {
                    next.container_id = p.container_id.map(str::to_owned);
                }
                if p.client_enabled == Some(false)
                    && let Some(run_id) = p.run_id
                {
                    step.release = Some(run_id.to_owned());
                }
                next.message = if obs.redis.is_none() {
                    Some(format!(
                        "not answering the operator ({}); keys presumed intact while the container runs",
                        obs.redis_error.as_deref().unwrap_or("unreachable")
                    ))
                } else {
                    None
                };
            } else {
                // Terminating, or a pod whose container state is unknown: the process may
                // still be alive and serving, so the hold cannot start yet.
                next.message =
                    Some("pod terminating or not reporting; the hold starts once its process is gone".into());
            }
        }
        MemberState::Held | MemberState::Lost => {
            let until = prev.held_until.as_ref().map(|t| t.0);
            match &process {
                Some(p) if is_other_process(prev, p) => {
                    // A further crash during the hold: the hold runs again from this observation.
                    let extended = held_until(input.now, input.hold).max(until.unwrap_or(input.now));
                    next = member(input, slot, MemberState::Held);
                    next.run_id = p.run_id.map(str::to_owned);
                    next.container_id = p.container_id.map(str::to_owned);
                    next.held_until = Some(MicroTime(extended));
                    next.message = Some(format!("restarted again during its hold; held until {extended}"));
                    step.events.push(event(
                        slot,
                        "HoldExtended",
                        format!(
                            "{}: restarted during its hold; fenced until {extended}",
                            prev.name
                        ),
                        true,
                    ));
                }
                Some(p) => {
                    if prev.state == MemberState::Lost {
                        next.state = MemberState::Held;
                        next.since = Some(MicroTime(floor_micros(input.now)));
                    }
                    if next.run_id.is_none() {
                        next.run_id = p.run_id.map(str::to_owned);
                    }
                    if next.container_id.is_none() {
                        next.container_id = p.container_id.map(str::to_owned);
                    }
                    let expired = until.is_none_or(|u| u <= input.now);
                    if expired && let Some(run_id) = p.run_id {
                        next = member(input, slot, MemberState::Ready);
                        next.run_id = Some(run_id.to_owned());
                        next.container_id = p.container_id.map(str::to_owned);
                        if p.client_enabled != Some(true) {
                            step.release = Some(run_id.to_owned());
                        }
                    }
                }
                None => {
                    step.create_pod = pod_missing;
                    if prev.state == MemberState::Held {
                        // The fenced replacement died too: count the hold again from now.
                        let extended = held_until(input.now, input.hold).max(until.unwrap_or(input.now));
                        next = member(input, slot, MemberState::Lost);
                        next.held_until = Some(MicroTime(extended));
                        next.message =
                            Some(format!("replacement lost during its hold; held until {extended}"));
                        step.events.push(event(
                            slot,
                            "HoldExtended",
                            format!(
                                "{}: replacement lost during its hold; fenced until {extended}",
                                prev.name
                            ),
                            true,
                        ));
                    }
                }
            }
        }
    }
    // A state that did not change keeps its `since`, so an unchanged cluster recomputes an
    // identical status (no writes in steady state).
    if next.state == prev.state {
        next.since = prev.since.clone();
    }
    step.member = Some(next);
    step
}

/// A slot at or above N: its pod goes; a slot that ever served keeps a `Lost` record until
/// its hold has run out, so scaling back up within the hold cannot reuse it unheld.
fn retire_member(
    input: &PlanInput<'_>,
    slot: i32,
    prev: Option<&MemberStatus>,
    obs: &SlotObservation,
) -> Step {
    let mut step = Step {
        delete_pod: obs.pod != PodState::Missing,
        ..Step::default()
    };
    let Some(prev) = prev else {
        return step;
    };
    if obs.pod != PodState::Missing {
        // Keep the record as it is until the pod (and its process) is gone.
        step.member = Some(prev.clone());
        return step;
    }
    let until = match prev.state {
        MemberState::Starting => None,
        MemberState::Ready => Some(held_until(input.now, input.hold)),
        MemberState::Held | MemberState::Lost => prev.held_until.as_ref().map(|t| t.0),
    };
    if let Some(until) = until.filter(|u| *u > input.now) {
        let mut m = member(input, slot, MemberState::Lost);
        m.held_until = Some(MicroTime(until));
        m.message = Some(format!(
            "removed by scale-down; the slot can be reused without a hold after {until}"
        ));
        if prev.state == MemberState::Lost {
            m.since = prev.since.clone();
        }
        step.member = Some(m);
    }
    step
}
