//! Planning: from the persisted member states, what was observed, and the clock, decide each
//! slot's next state and the actions that follow. Pure; every transition is tested below.
//!
//! Safety rests on ordering, which `reconcile` keeps: the new member states are written to
//! status first; only then are pods created, processes fenced and processes released. So a
//! hold is always on record before anything could end it, and a release is always on record
//! before it happens (an operator crash in between leaves a `Ready` member whose process is
//! still fenced, which the next reconcile releases again, or sees as lost).
//!
//! Unknown means unsafe: a process is released without a full hold never. Even a slot's very
//! first process is held, because nothing the operator can read proves that no earlier
//! process of the same name (an earlier incarnation of the cluster, a status lost or restored)
//! granted locks that are still valid.
//!
//! One function per recorded state: [`unrecorded`], [`starting`], [`ready`], [`holding`],
//! plus [`name_taken`] for a slot whose pod name is taken by a pod this cluster does not
//! control, and [`retire_member`] for slots at or above N.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::clock::Reading;
use crate::crd::{Listener, MemberState, MemberStatus, UnstoppedProcess};
use crate::hold::{floor_micros, held_until, remaining};
use crate::hold_timers::{ClusterTimers, TimerKey};
use crate::member_clock::Verdict;
use crate::observe::{PodState, SlotObservation};
use crate::reasons::MemberReason;
use crate::resources::names::slot_name;

/// Something worth telling the user about (becomes an event and a log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberEvent {
    pub slot: i32,
    pub reason: MemberReason,
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
    /// (slot, run id) to fence again with `ACL SETUSER <client> off` and `CLIENT KILL USER
    /// <client>`, after the status write: a process found serving clients while its record
    /// says it must be held.
    pub fences: Vec<(i32, String)>,
    /// (slot, run id) to release with `ACL SETUSER <client> on`, after the status write.
    pub releases: Vec<(i32, String)>,
    pub events: Vec<MemberEvent>,
    /// When the earliest running hold ends: reconcile again exactly then.
    pub next_hold_end: Option<Duration>,
    /// A slot waits for its process to answer (just started, or restarted by the kubelet
    /// after the hold ended): look again soon, not a probe period later.
    pub awaiting_process: bool,
}

/// The planner's inputs besides the observations.
pub struct PlanInput<'a> {
    pub cluster: &'a str,
    pub instances: i32,
    /// Member states as persisted in status.
    pub members: &'a [MemberStatus],
    pub now: Timestamp,
    /// The hold in force (`status.hold.duration`): running holds are lengthened to it.
    pub hold: Duration,
    /// Servers in the list clients are told (`status.publishedInstances`): a removed slot
    /// still on it is fenced and held, never deleted.
    pub published: i32,
    /// Slots below this may be released (`status.confirmedInstances`).
    pub confirmed: i32,
    /// This process's own timing of running holds, and what may stop releases.
    pub timing: Timing<'a>,
    /// Slots fenced on purpose, with the reason given ([`crate::maintenance`]).
    pub maintenance: &'a BTreeMap<i32, String>,
}

/// No slot fenced on purpose.
pub static NO_MAINTENANCE: BTreeMap<i32, String> = BTreeMap::new();

/// What this operator process adds to the recorded deadlines (docs/design.md §9.1).
#[derive(Clone, Copy)]
pub struct Timing<'a> {
    /// Holds this process has timed itself: no hold ends before it has seen the hold run in
    /// full on its own clock.
    pub timers: &'a ClusterTimers,
    /// Forward steps of this process's wall clock so far.
    pub skipped: Duration,
    /// Why no process may be released now (the operator's clock cannot be trusted), if so.
    pub release_blocked: Option<&'a str>,
}

static NO_TIMERS: ClusterTimers = ClusterTimers::new();

impl Default for Timing<'_> {
    fn default() -> Self {
        Self {
            timers: &NO_TIMERS,
            skipped: Duration::ZERO,
            release_blocked: None,
        }
    }
}

/// The start of a message about a slot whose pod name is taken. (A re-plan tells that the
/// conflict was already reported by comparing the whole message with the record's.)
const NAME_TAKEN: &str = "pod name taken";

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
            maintenance(input, slot, prev, step_member(input, slot, prev, obs), obs)
        } else {
            let mut step = retire_member(input, slot, prev, obs);
            // A removed slot is not a member to fence or unfence: it only waits out its hold.
            if let Some(m) = step.member.as_mut() {
                m.maintenance = None;
            }
            step
        };
        if let Some(m) = &step.member
            && slot < input.confirmed
            && step.release.is_none()
            && waits_for_process(m, input.now)
            && obs.redis.is_none()
            // Fenced on purpose: nothing is released, so nothing waits for it to answer.
            && !input.maintenance.contains_key(&slot)
            && !matches!(obs.pod, PodState::Foreign { .. })
        {
            plan.awaiting_process = true;
        }
        if let Some(m) = step.member {
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

/// Whether the next step for `m` waits on its process answering the operator: a first
/// process whose hold should start, or a hold that has ended.
fn waits_for_process(m: &MemberStatus, now: Timestamp) -> bool {
    match m.state {
        MemberState::Starting => true,
        MemberState::Held | MemberState::Lost => m.held_until.as_ref().is_some_and(|u| u.0 <= now),
        MemberState::Ready => false,
    }
}

/// What one slot's planning decided.
#[derive(Default)]
struct Step {
    member: Option<MemberStatus>,
    create_pod: bool,
    delete_pod: bool,
    fence: Option<String>,
    /// A process of the slot that outlived its pod, fenced at its last address (a second
    /// fence of the slot: the current process may need one too).
    fence_unstopped: Option<String>,
    release: Option<String>,
    events: Vec<MemberEvent>,
}

impl Step {
    fn tell(&mut self, slot: i32, reason: MemberReason, message: String, warning: bool) {
        self.events.push(MemberEvent {
            slot,
            reason,
            message,
            warning,
        });
    }
}

/// A fresh record of `slot` in `state`, entered now.
fn fresh_record(input: &PlanInput<'_>, slot: i32, state: MemberState) -> MemberStatus {
    MemberStatus {
        since: Some(MicroTime(floor_micros(input.now))),
        ..MemberStatus::new(slot_name(input.cluster, slot), slot, state)
    }
}

/// The identity of the process running on a slot right now, as far as it can be told.
struct Process<'a> {
    run_id: Option<&'a str>,
    container_id: Option<&'a str>,
    client_enabled: Option<bool>,
    /// Where it answered the probe (only known when it did).
    pod_ip: Option<String>,
    /// How it listens there (known with `pod_ip`).
    listener: Option<Listener>,
}

fn running_process(obs: &SlotObservation) -> Option<Process<'_>> {
    match &obs.pod {
        PodState::Running { container_id, .. } => Some(Process {
            run_id: obs.redis.as_ref().map(|r| r.run_id.as_str()),
            container_id: container_id.as_deref(),
            client_enabled: obs.redis.as_ref().map(|r| r.client_enabled),
            pod_ip: obs.redis.as_ref().and(obs.pod_ip).map(|ip| ip.to_string()),
            listener: obs.redis.as_ref().and(obs.pod_ip).map(|_| Listener {
                tls_secret: obs.tls_secret.clone(),
            }),
        }),
        _ => None,
    }
}

/// Whether the process seen now differs from the one `prev` is about. Unknown parts of
/// either side prove nothing here; callers that would *release* on "same" demand a run id.
fn is_other_process(prev: &MemberStatus, now: &Process<'_>) -> bool {
    match (prev.run_id.as_deref(), now.run_id) {
        // The run id names the process: Redis draws a new one at every start. A container id
        // comes from the pod cache, which can lag the probe (a restart's new process answers
        // before the cache shows its container), so it decides only without run ids.
        (Some(a), Some(b)) => a != b,
        _ => matches!((prev.container_id.as_deref(), now.container_id), (Some(a), Some(b)) if a != b),
    }
}

/// A fresh record in `state` about the process `p`.
fn record_of(input: &PlanInput<'_>, slot: i32, state: MemberState, p: &Process<'_>) -> MemberStatus {
    let mut m = fresh_record(input, slot, state);
    m.run_id = p.run_id.map(str::to_owned);
    m.container_id = p.container_id.map(str::to_owned);
    m.pod_ip = p.pod_ip.clone();
    m.listener = p.listener.clone();
    m
}

/// Records what was not yet known about the process a record is about.
fn fill_identity(m: &mut MemberStatus, p: &Process<'_>) {
    if m.run_id.is_none() {
        m.run_id = p.run_id.map(str::to_owned);
    }
    // The same run id in another container: the container id on record was read from a pod
    // cache that had not caught up with the restart; the one observed now is newer.
    let same_run = m.run_id.is_some() && m.run_id.as_deref() == p.run_id;
    if m.container_id.is_none() || same_run && p.container_id.is_some() {
        m.container_id = p.container_id.map(str::to_owned);
    }
    if m.pod_ip.is_none() {
        m.pod_ip = p.pod_ip.clone();
    }
    // With the address it describes (also for a record made before listeners were kept).
    if m.listener.is_none() && m.pod_ip.is_some() && m.pod_ip == p.pod_ip {
        m.listener = p.listener.clone();
    }
}

/// `Ready` for process `run_id`, with a release unless it already serves clients.
fn ready_and_release(
    input: &PlanInput<'_>,
    slot: i32,
    p: &Process<'_>,
    run_id: &str,
    step: &mut Step,
) -> MemberStatus {
    if p.client_enabled != Some(true) {
        step.release = Some(run_id.to_owned());
    }
    record_of(input, slot, MemberState::Ready, p)
}

/// `next` held in full from now: its hold restarts here and never ends earlier than `until`.
fn restart_hold(input: &PlanInput<'_>, mut next: MemberStatus, until: Timestamp, what: &str) -> MemberStatus {
    let extended = held_until(input.now, input.hold).max(until);
    next.held_until = Some(MicroTime(extended));
    next.hold_started_at = Some(MicroTime(floor_micros(input.now)));
    next.message = Some(format!("{what}; held until {extended}"));
    next
}

/// A further crash during a hold: the hold runs again from this observation (never ending
/// earlier than it did). `what` goes into the record, `event_what` into the event.
fn extend_hold(
    input: &PlanInput<'_>,
    next: MemberStatus,
    until: Timestamp,
    what: &str,
    event_what: &str,
    step: &mut Step,
) -> MemberStatus {
    let next = restart_hold(input, next, until, what);
    let extended = next.held_until.as_ref().expect("just set").0;
    step.tell(
        next.slot,
        MemberReason::HoldExtended,
        format!("{}: {event_what}; fenced until {extended}", next.name),
        true,
    );
    next
}

/// A hold starting now: `Held` about the running process, or `Lost` when none runs.
fn start_hold(
    input: &PlanInput<'_>,
    slot: i32,
    obs: &SlotObservation,
    why: String,
    step: &mut Step,
) -> MemberStatus {
    let until = held_until(input.now, input.hold);
    let mut m = match running_process(obs) {
        Some(p) => record_of(input, slot, MemberState::Held, &p),
        None => fresh_record(input, slot, MemberState::Lost),
    };
    m.held_until = Some(MicroTime(until));
    m.hold_started_at = Some(MicroTime(floor_micros(input.now)));
    m.message = Some(format!("{why}; held until {until}"));
    step.tell(
        slot,
        MemberReason::HoldStarted,
        format!("{}: {why}; fenced until {until} (hold {:?})", m.name, input.hold),
        false,
    );
    m
}

/// A process serving clients while its record says it must be held (someone ran `ACL
/// SETUSER`, an edited ACL Secret): fence it again and hold it in full from now.
fn refence(
    input: &PlanInput<'_>,
    next: MemberStatus,
    until: Timestamp,
    run_id: &str,
    step: &mut Step,
) -> MemberStatus {
    step.fence = Some(run_id.to_owned());
    let next = restart_hold(
        input,
        next,
        until,
        "found serving clients while it must be held; fenced again",
    );
    let extended = next.held_until.as_ref().expect("just set").0;
    step.tell(
        next.slot,
        MemberReason::Refenced,
        format!(
            "{}: process {run_id} served lock clients during its hold (its client ACL user was turned on outside the operator); fenced again and held until {extended}",
            next.name
        ),
        true,
    );
    next
}

/// A hold that just started (or restarted) about a process that already serves clients (an
/// edited ACL Secret let it start unfenced): fence it too. The hold already counts from now.
fn fence_if_serving(held: MemberStatus, p: Option<&Process<'_>>, step: &mut Step) -> MemberStatus {
    if let Some(p) = p
        && p.client_enabled == Some(true)
        && let Some(run_id) = p.run_id
    {
        step.fence = Some(run_id.to_owned());
        step.tell(
            held.slot,
            MemberReason::Refenced,
            format!(
                "{}: process {run_id} started serving lock clients without a release (its client ACL user is on: an edited ACL Secret?); fenced",
                held.name
            ),
            true,
        );
    }
    held
}

/// One slot that should exist (slot < N).
fn step_member(input: &PlanInput<'_>, slot: i32, prev: Option<&MemberStatus>, obs: &SlotObservation) -> Step {
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
            MemberState::Held | MemberState::Lost => holding(input, prev, obs, &mut step),
        },
    };
    step.member = Some(match prev {
        // A state that did not change keeps its `since`, so an unchanged cluster recomputes an
        // identical status (no writes in steady state).
        Some(prev) if prev.state == next.state => MemberStatus {
            since: prev.since.clone(),
            ..next
        },
        _ => next,
    });
    step
}

/// A slot the user fenced on purpose (`kubectl redlock fence`), or just unfenced. A serving
/// member that answers is fenced now (by the run id just probed) and held in full from now, as
/// after a loss: whatever maintenance does to it, it serves again only once unfenced and a
/// whole hold has run since it was fenced. A member that does not answer cannot be fenced and
/// nothing proves it is shut out: it stays `Ready` (a loss is still seen as for any member),
/// marked, and is fenced once it answers. A held member stays held, also after its hold (see
/// `hold_runs`). Unfencing only lets the hold end as it would have.
fn maintenance(
    input: &PlanInput<'_>,
    slot: i32,
    prev: Option<&MemberStatus>,
    mut step: Step,
    obs: &SlotObservation,
) -> Step {
    let Some(mut next) = step.member.take() else {
        return step;
    };
    let Some(reason) = input.maintenance.get(&slot) else {
        next.maintenance = None;
        if prev.is_some_and(|p| p.maintenance.is_some()) {
            // Its release is due from now at the earliest (`redlock_member_release_overdue_seconds`).
            next.since = Some(MicroTime(floor_micros(input.now)));
            let when = match &next.held_until {
                _ if step.release.is_some() => "now".to_owned(),
                Some(until) if next.state.is_holding() && until.0 > input.now => {
                    format!("once its hold ends at {}", until.0)
                }
                _ if next.state.is_holding() => {
                    "once the operator releases it (its hold has ended)".to_owned()
                }
                _ => "as before (it was never fenced)".to_owned(),
            };
            step.tell(
                slot,
                MemberReason::Unfenced,
                format!("{}: unfenced; serves lock clients again {when}", next.name),
                false,
            );
        }
        step.member = Some(next);
        return step;
    };
    if matches!(obs.pod, PodState::Foreign { .. }) {
        step.member = Some(next);
        return step;
    }
    if next.state == MemberState::Ready {
        let why = format!("fenced for maintenance ({reason})");
        match running_process(obs)
            .and_then(|p| p.run_id)
            .filter(|_| obs.redis.is_some())
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
                next = start_hold(input, slot, obs, why, &mut step);
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
    next.maintenance = Some(reason.clone());
    step.member = Some(next);
    step
}

/// No record of this slot (a new slot, or a status lost or restored without it).
fn unrecorded(input: &PlanInput<'_>, slot: i32, obs: &SlotObservation, step: &mut Step) -> MemberStatus {
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
            m
        }
        // A pod the operator knows nothing about: unknown means unsafe, full hold from now.
        _ => start_hold(
            input,
            slot,
            obs,
            "unknown process (no record of this slot)".into(),
            step,
        ),
    }
}

/// `Starting`: the slot has never had a process the operator saw.
fn starting(
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
        None => MemberStatus {
            // Say why it is not up yet (e.g. the scheduler cannot place it).
            message: match &obs.pod {
                PodState::NotRunning { reason } => Some(reason.clone()),
                _ => None,
            },
            ..prev.clone()
        },
    }
}

/// `Ready`: released; it serves until its process is seen gone or replaced, or its clock is
/// seen to jump forward.
fn ready(input: &PlanInput<'_>, prev: &MemberStatus, obs: &SlotObservation, step: &mut Step) -> MemberStatus {
    if let Some(next) = unstopped_after_release(input, prev, obs, step) {
        return next;
    }
    let slot = prev.slot;
    let process = running_process(obs);
    if let Some(Verdict::JumpedForward { by }) = obs.clock
        && let Some(p) = &process
        && let Some(run_id) = p.run_id
        && !is_other_process(prev, p)
    {
        return clock_jumped(input, prev, obs, run_id, by, step);
    }
    report_clock(prev, obs, step);
    let lost = lost_why(prev, obs, process.as_ref());
    if let Some(why) = lost {
        step.tell(
            slot,
            MemberReason::InstanceLost,
            format!("{}: {why}; its keys are gone", prev.name),
            true,
        );
        step.create_pod = obs.pod == PodState::Missing;
        let mut held = start_hold(input, slot, obs, why, step);
        if (obs.pod == PodState::Missing || obs.stop_unconfirmed)
            && let (Some(run_id), Some(ip)) = (&prev.run_id, &prev.pod_ip)
        {
            // The pod object is gone (or marked failed by the control plane), but nothing
            // showed its process stop: a node cut off from the API server keeps serving
            // clients that reach it.
            held.unstopped = Some(UnstoppedProcess {
                run_id: run_id.clone(),
                pod_ip: ip.clone(),
                listener: prev.listener.clone(),
                fenced: false,
            });
            held.message = Some(format!(
                "{}; its process {run_id} was never seen to stop, so it is looked for at {ip} (and fenced if found) before the slot is released",
                held.message.unwrap_or_default()
            ));
        }
        carry_earlier_unstopped(prev, &mut held, step);
        return fence_if_serving(held, process.as_ref(), step);
    }
    let mut next = prev.clone();
    let Some(p) = &process else {
        return next;
    };
    // Same process. Fill in what was unknown; release again if a crash between the status
    // write and the release left it fenced.
    fill_identity(&mut next, p);
    if p.client_enabled == Some(false)
        && let Some(run_id) = p.run_id
        && input.timing.release_blocked.is_none()
    {
        step.release = Some(run_id.to_owned());
    }
    next.message = serving_message(obs);
    next
}

/// A released slot still looking for an earlier process that outlived its pod (§9.5) loses
/// its replacement in turn: the earlier process is still looked for by the new hold, else a
/// release after it would rely on that process being dead without looking. Only when the
/// replacement's own process vanished unseen too does the record keep the newer one (it ran
/// until now; the earlier one has not answered for at least a whole hold), and says so.
fn carry_earlier_unstopped(prev: &MemberStatus, held: &mut MemberStatus, step: &mut Step) {
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

/// A member clock that stepped back or drifts: reported (locks on it expire late, or a fast
/// drift is on its way to a jump), not fenced.
fn report_clock(prev: &MemberStatus, obs: &SlotObservation, step: &mut Step) {
    let slot = prev.slot;
    match obs.clock {
        // Locks on it expire late: safe, but the user should know its clock is not kept.
        Some(Verdict::SteppedBack { by }) => step.tell(
            slot,
            MemberReason::ClockStepBack,
            format!(
                "{}: its clock stepped {:.3} s back since the last probe (locks on it expire late, which is safe; check its host's time sync)",
                prev.name,
                by.as_secs_f64()
            ),
            true,
        ),
        Some(Verdict::Drifting { ratio_ppm, over }) => step.tell(
            slot,
            MemberReason::ClockDrift,
            format!(
                "{}: its clock ran {} by {:.3}% over the last {:.0} s, more than clockDriftFactor allows (locks on it expire {}); check its host's time sync",
                prev.name,
                if ratio_ppm > 0 { "fast" } else { "slow" },
                ratio_ppm.abs() as f64 / 10_000.0,
                over.as_secs_f64(),
                if ratio_ppm > 0 { "early: a faster drift becomes a clock jump" } else { "late, which is safe" }
            ),
            true,
        ),
        _ => {}
    }
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
    match (&obs.pod, &obs.redis) {
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
            match &obs.redis {
                None => format!(
                    " and not answering the operator ({})",
                    obs.redis_error.as_deref().unwrap_or("unreachable")
                ),
                Some(_) => String::new(),
            }
        )),
        (_, None) => Some(format!(
            "not answering the operator ({}); keys presumed intact while the container runs",
            obs.redis_error.as_deref().unwrap_or("unreachable")
        )),
        _ => None,
    }
}

/// A serving member whose clock jumped forward: every lock on it may have expired early, as
/// if it had lost its keys. Fenced at once and held in full (docs/design.md §9.3).
fn clock_jumped(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    obs: &SlotObservation,
    run_id: &str,
    by: Duration,
    step: &mut Step,
) -> MemberStatus {
    let why = format!(
        "its clock jumped {:.3} s forward since the last probe: locks on it may have expired early, as if it had lost its keys",
        by.as_secs_f64()
    );
    step.fence = Some(run_id.to_owned());
    step.tell(
        prev.slot,
        MemberReason::ClockJump,
        format!("{}: {why}; fenced and held in full", prev.name),
        true,
    );
    // `start_hold` records the running process (the one fenced) and tells HoldStarted; the
    // ClockJump warning says what happened.
    start_hold(input, prev.slot, obs, why, step)
}

/// When `m`'s running hold ends, lengthened to the hold in force: a raised maxLockTTL applies
/// to holds already running, counted from when each started. A record without an end (an
/// edited status, a removed process of unknown history) gets a full hold from now: unknown
/// means unsafe.
///
/// And never before this process has itself seen the hold run in full on its own clock
/// ([`crate::hold_timers`]): a hold recorded by another leader, or before a step of this
/// process's wall clock, is timed again, so no operator clock can shorten it.
fn hold_end(input: &PlanInput<'_>, m: &MemberStatus) -> (Timestamp, Timestamp) {
    let Some(until) = m.held_until.as_ref().map(|t| t.0) else {
        return (held_until(input.now, input.hold), floor_micros(input.now));
    };
    let started = hold_start(m, input.hold).expect("a hold with an end has a start");
    let timed = input.timing.timers.earliest_end(
        TimerKey::Hold {
            slot: m.slot,
            started,
        },
        input.hold,
        Reading {
            wall: input.now,
            skipped: input.timing.skipped,
        },
    );
    (until.max(held_until(started, input.hold)).max(timed), started)
}

/// Why this process timed a hold again: it had not seen it start, or its clock stepped.
fn retimed_why(input: &PlanInput<'_>, slot: i32, started: Timestamp) -> &'static str {
    if input.timing.timers.knows(TimerKey::Hold { slot, started }) {
        "hold lengthened by a forward step of the operator's wall clock"
    } else {
        "hold timed again in full by this operator process, which did not see it start (a leader change or an operator restart): another operator's clock cannot shorten it"
    }
}

/// When `m`'s running hold started (`holdStartedAt`; for records from before it existed,
/// the start that gives their end). What identifies the hold to [`crate::hold_timers`].
pub fn hold_start(m: &MemberStatus, hold: Duration) -> Option<Timestamp> {
    if let Some(t) = &m.hold_started_at {
        return Some(t.0);
    }
    let until = m.held_until.as_ref()?.0;
    let hold = SignedDuration::try_from(hold).expect("hold fits a SignedDuration");
    Some(until.checked_sub(hold).unwrap_or(until))
}

/// The timers the holds of `members` need.
pub fn hold_timer_keys(members: &[MemberStatus], hold: Duration) -> impl Iterator<Item = TimerKey> + '_ {
    members
        .iter()
        .filter(|m| m.state.is_holding() && m.held_until.is_some())
        .filter_map(move |m| {
            Some(TimerKey::Hold {
                slot: m.slot,
                started: hold_start(m, hold)?,
            })
        })
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
    let info = obs.unstopped.as_ref()?.as_ref().ok()?;
    if info.run_id != u.run_id {
        return None;
    }
    if !info.client_enabled {
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

/// `Held` or `Lost`, with a process of the slot that was never seen to stop: it is looked
/// for at its last address first (docs/design.md §9.5). Found serving: fenced, and the hold
/// restarts. Found fenced: it grants nothing. Not found: the release (once the hold has run)
/// relies on it being dead, and says so.
fn holding(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    obs: &SlotObservation,
    step: &mut Step,
) -> MemberStatus {
    let Some(u) = &prev.unstopped else {
        return hold_runs(input, prev, obs, step);
    };
    let found = match &obs.unstopped {
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
    let mut next = hold_runs(input, prev, obs, step);
    let fenced = u.fenced || found == Some(false);
    if next.state == MemberState::Ready {
        if step.release.is_some() && !fenced {
            let seen = match &obs.unstopped {
                Some(Ok(other)) => format!("{} now answers there as process {}", u.pod_ip, other.run_id),
                Some(Err(e)) => format!("nothing answered at {} ({e})", u.pod_ip),
                None => format!("{} was not probed", u.pod_ip),
            };
            step.tell(
                prev.slot,
                MemberReason::ReleaseAssumesProcessGone,
                format!(
                    "{}: released although process {} (its pod vanished while it ran) was never seen to stop; {seen}. This release relies on that process being dead, as deleting its node, tainting it out-of-service or force-deleting its pod asserts; it is still looked for at {}, and fenced (with this slot held again) if it answers",
                    prev.name, u.run_id, u.pod_ip
                ),
                true,
            );
            // Still looked for: found letting clients in later, it is fenced (see `ready`).
            next.unstopped = Some(u.clone());
            next.message = Some(format!(
                "released relying on process {} (its pod vanished while it ran) being dead; still looked for at {}",
                u.run_id, u.pod_ip
            ));
        }
    } else {
        next.unstopped = Some(UnstoppedProcess { fenced, ..u.clone() });
    }
    next
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
        Some(p) => same_process_held(input, next, &p, until, step),
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

/// The running hold's end as this process times it (`hold_end`), recorded, with a message
/// (and event) when that lengthened it; and that end.
fn timed_hold(input: &PlanInput<'_>, prev: &MemberStatus, step: &mut Step) -> (MemberStatus, Timestamp) {
    let (until, started) = hold_end(input, prev);
    let mut next = prev.clone();
    next.held_until = Some(MicroTime(until));
    next.hold_started_at = Some(MicroTime(started));
    if let Some(recorded) = prev.held_until.as_ref().map(|t| t.0)
        && recorded < until
    {
        let by_policy = recorded.max(held_until(started, input.hold));
        next.message = Some(if until > by_policy {
            let why = retimed_why(input, prev.slot, started);
            step.tell(
                prev.slot,
                MemberReason::HoldExtended,
                format!("{}: {why}; fenced until {until}", prev.name),
                false,
            );
            format!("{why}; held until {until}")
        } else {
            format!("hold lengthened to the maxLockTTL in force; held until {until}")
        });
    }
    (next, until)
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
            if until > input.now || slot >= input.confirmed || input.maintenance.contains_key(&slot) =>
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
            if until <= input.now && slot < input.confirmed && input.timing.release_blocked.is_some() =>
        {
            MemberStatus {
                message: Some(format!(
                    "hold ended; release waits: {}",
                    input.timing.release_blocked.unwrap_or_default()
                )),
                ..next
            }
        }
        (Some(run_id), _) if until <= input.now && slot < input.confirmed => {
            ready_and_release(input, slot, p, run_id, step)
        }
        (Some(_), _) if until <= input.now => MemberStatus {
            message: Some(format!(
                "hold ended; a new member of a scale-up serves once every client uses the list of {} (annotation {})",
                input.instances,
                crate::resize::CLIENTS_USE_INSTANCES
            )),
            ..next
        },
        _ => next,
    }
}

/// The slot's pod name is taken by a pod this cluster does not control. Whatever runs there
/// may serve lock clients (the slot's Service selects by labels), and nothing of ours can run
/// under the name: nothing is created, released or replaced, and a slot that had a process of
/// ours records it `Lost` with no end, so its full hold starts once the name is free.
fn name_taken(
    input: &PlanInput<'_>,
    slot: i32,
    prev: Option<&MemberStatus>,
    owner: &str,
    step: &mut Step,
) -> MemberStatus {
    let name = slot_name(input.cluster, slot);
    let message = format!(
        "{NAME_TAKEN}: pod {name} exists but is not controlled by this RedlockCluster ({owner}); nothing is created, released or replaced for this slot while it exists, and the slot is held in full once it is gone"
    );
    let reported = prev.is_some_and(|p| p.message.as_deref() == Some(message.as_str()));
    if !reported {
        step.tell(slot, MemberReason::NameConflict, message.clone(), true);
    }
    let mut next = match prev {
        None => fresh_record(input, slot, MemberState::Starting),
        Some(p) if p.state == MemberState::Starting => p.clone(),
        Some(p) => MemberStatus {
            state: MemberState::Lost,
            run_id: None,
            container_id: None,
            held_until: None,
            hold_started_at: None,
            since: Some(MicroTime(floor_micros(input.now))),
            ..p.clone()
        },
    };
    next.message = Some(message);
    next
}

/// A slot at or above N. While clients are still told a list that contains it, it is fenced
/// and held (its locks expire before the shorter list is published); after that its pod goes,
/// and a slot that ever served keeps a `Lost` record until its hold has run out, so scaling
/// back up within the hold cannot reuse it unheld.
fn retire_member(
    input: &PlanInput<'_>,
    slot: i32,
    prev: Option<&MemberStatus>,
    obs: &SlotObservation,
) -> Step {
    if let PodState::Foreign { owner } = &obs.pod {
        // Never delete a pod this cluster does not control.
        let mut step = Step::default();
        step.member = Some(name_taken(input, slot, prev, owner, &mut step));
        return step;
    }
    if slot < input.published {
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
    // A process that outlived its pod is still looked for while the record lasts: clients
    // that kept the longer list may reach it.
    let prev = match removed_unstopped(input, prev, obs, &mut step) {
        LookedFor::PlanFrom(prev) => prev,
        LookedFor::Refenced(restarted) => {
            step.member = Some(restarted);
            return step;
        }
    };
    let prev = &prev;
    let (until, started) = match prev.state {
        MemberState::Starting => return step,
        MemberState::Ready => (held_until(input.now, input.hold), floor_micros(input.now)),
        MemberState::Held | MemberState::Lost => hold_end(input, prev),
    };
    if until > input.now {
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
        step.member = Some(m);
    }
    step
}

/// A removed slot that clients are still told about (a scale-down whose shorter list is not
/// published yet): shut clients out now and hold it, so every lock it granted has expired
/// before any client is told the shorter list. The hold counts only from an observation that
/// proves it cannot grant locks any more (seen fenced, or its process gone): a fence sent but
/// not yet landed, or a process that does not answer, proves nothing. Its pod stays until the
/// shorter list is out.
fn fence_removed(
    input: &PlanInput<'_>,
    slot: i32,
    prev: Option<&MemberStatus>,
    obs: &SlotObservation,
) -> Step {
    let mut step = Step::default();
    let removing = format!(
        "removed by scale-down: fenced and held; the list of {} is published once its hold has ended, then its pod is deleted",
        input.instances
    );
    let unproven = format!(
        "removed by scale-down: being fenced; its hold starts once it is seen fenced or gone, then the list of {} is published",
        input.instances
    );
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
    let p = running_process(obs);
    let answer = p.as_ref().and_then(|p| Some((p, p.run_id?, p.client_enabled?)));
    let next = match (answer, &p) {
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
        (Some((p, _, false)), _) => removed_seen_fenced(input, slot, prev, p, obs, &removing, &mut step),
        // Running but not answering: nothing is proven; a hold already running stays.
        (None, Some(_)) => match prev {
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
        },
        // No process (pod gone, not running, finished): it grants nothing from now on.
        (None, None) => removed_gone(input, slot, prev, obs, &removing, &mut step),
    };
    step.member = Some(match prev {
        Some(prev) if prev.state == next.state => MemberStatus {
            since: prev.since.clone(),
            ..next
        },
        _ => next,
    });
    step
}

/// Whether `m` records a hold with an end (one that has been running).
fn hold_recorded(m: &MemberStatus) -> bool {
    m.state.is_holding() && m.held_until.is_some()
}

/// A removed member seen fenced: its hold runs, from now unless it already ran for this
/// very process.
fn removed_seen_fenced(
    input: &PlanInput<'_>,
    slot: i32,
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
    slot: i32,
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

/// What looking for a removed member's unstopped process came to.
enum LookedFor {
    /// Plan from this record (the process marked fenced if it was seen so).
    PlanFrom(MemberStatus),
    /// Found letting clients in: fenced there, and this record's hold restarts.
    Refenced(MemberStatus),
}

/// A removed member's process that its vanished pod left behind, not yet found fenced.
fn removed_unstopped(
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
fn refence_unstopped(
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
fn vanished_unfenced(prev: &MemberStatus, obs: &SlotObservation) -> Option<UnstoppedProcess> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::RedisInfo;

    /// 30 s TTL, 1 % drift, 1 s margin.
    const HOLD: Duration = Duration::from_millis(31_300);
    /// When the persisted records were written.
    const T0: i64 = 1_000;
    /// The injected clock of most cases.
    const NOW: i64 = 2_000;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// `NOW + HOLD`, computed independently of `held_until`.
    fn hold_from_now() -> Timestamp {
        Timestamp::from_millisecond(NOW * 1_000 + 31_300).unwrap()
    }

    fn micro(t: Timestamp) -> Option<MicroTime> {
        Some(MicroTime(t))
    }

    // Persisted member records; `since` is T0 unless a case says otherwise.

    fn record(slot: i32, state: MemberState) -> MemberStatus {
        MemberStatus {
            since: micro(at(T0)),
            ..MemberStatus::new(format!("locks-{slot}"), slot, state)
        }
    }

    fn starting(slot: i32) -> MemberStatus {
        record(slot, MemberState::Starting)
    }

    fn ready(slot: i32, run: &str, container: &str) -> MemberStatus {
        MemberStatus {
            run_id: Some(run.into()),
            container_id: Some(container.into()),
            ..record(slot, MemberState::Ready)
        }
    }

    /// When a full hold ending at `until` started.
    fn started_for(until: Timestamp) -> Option<MicroTime> {
        micro(
            until
                .checked_sub(SignedDuration::try_from(HOLD).unwrap())
                .unwrap(),
        )
    }

    fn held(slot: i32, run: &str, container: &str, until: Timestamp) -> MemberStatus {
        MemberStatus {
            run_id: Some(run.into()),
            container_id: Some(container.into()),
            held_until: micro(until),
            hold_started_at: started_for(until),
            message: Some("held".into()),
            ..record(slot, MemberState::Held)
        }
    }

    fn lost(slot: i32, until: Timestamp) -> MemberStatus {
        MemberStatus {
            held_until: micro(until),
            hold_started_at: started_for(until),
            message: Some("pod deleted".into()),
            ..record(slot, MemberState::Lost)
        }
    }

    // Observations of one slot.

    fn missing() -> SlotObservation {
        SlotObservation::default()
    }

    /// A running container whose Redis answers the operator.
    fn running(run: &str, enabled: bool, container: &str) -> SlotObservation {
        SlotObservation {
            pod: PodState::Running {
                container_id: Some(container.into()),
                ready: enabled,
                terminating: false,
            },
            pod_ip: None,
            redis: Some(RedisInfo {
                run_id: run.into(),
                version: "7.0.15".into(),
                client_enabled: enabled,
                pod_uid: None,
                client_password_hashes: None,
            }),
            ..Default::default()
        }
    }

    /// A running container whose Redis does not answer (SIGSTOP, overload, network).
    fn unreachable(container: &str) -> SlotObservation {
        SlotObservation {
            pod: PodState::Running {
                container_id: Some(container.into()),
                ready: false,
                terminating: false,
            },
            redis_error: Some("connection refused".into()),
            ..Default::default()
        }
    }

    /// A node that stopped reporting: the kubelet's last word was "running", nothing answers.
    fn node_lost(container: &str) -> SlotObservation {
        SlotObservation {
            redis_error: Some("timed out".into()),
            ..unreachable(container)
        }
    }

    fn terminating(obs: SlotObservation) -> SlotObservation {
        let PodState::Running { container_id, .. } = obs.pod else {
            panic!("only a running pod can be terminating here")
        };
        SlotObservation {
            pod: PodState::Running {
                container_id,
                ready: false,
                terminating: true,
            },
            ..obs
        }
    }

    fn not_running(reason: &str) -> SlotObservation {
        SlotObservation {
            pod: PodState::NotRunning {
                reason: reason.into(),
            },
            ..missing()
        }
    }

    fn finished(reason: &str) -> SlotObservation {
        SlotObservation {
            pod: PodState::Finished {
                reason: reason.into(),
            },
            ..missing()
        }
    }

    fn input(instances: i32, members: &[MemberStatus], now: Timestamp) -> PlanInput<'_> {
        PlanInput {
            cluster: "locks",
            instances,
            members,
            now,
            hold: HOLD,
            published: instances,
            confirmed: instances,
            timing: Timing {
                timers: own_timers(members),
                ..Timing::default()
            },
            maintenance: &NO_MAINTENANCE,
        }
    }

    /// Timers of a process that saw every recorded hold start (so recorded ends stand).
    fn own_timers(members: &[MemberStatus]) -> &'static ClusterTimers {
        let timers = members.iter().fold(ClusterTimers::default(), |t, m| {
            match (m.state.is_holding(), hold_start(m, HOLD)) {
                (true, Some(started)) if m.held_until.is_some() => t.with_anchor(
                    TimerKey::Hold {
                        slot: m.slot,
                        started,
                    },
                    Reading::at(started),
                ),
                _ => t,
            }
        });
        Box::leak(Box::new(timers))
    }

    fn observed(slots: impl IntoIterator<Item = (i32, SlotObservation)>) -> BTreeMap<i32, SlotObservation> {
        slots.into_iter().collect()
    }

    fn reasons(p: &Plan) -> Vec<(i32, MemberReason)> {
        p.events.iter().map(|e| (e.slot, e.reason)).collect()
    }

    /// One slot (slot 0 of a one-instance cluster): persisted record and observation in, the
    /// record and actions that must come out.
    struct Case {
        name: &'static str,
        prev: Option<MemberStatus>,
        obs: SlotObservation,
        now: Timestamp,
        /// The whole expected record; its `message` is ignored when `msg` is set.
        want: MemberStatus,
        /// A part the message must contain, when the exact text is not the point.
        msg: Option<String>,
        create: bool,
        delete: bool,
        release: Option<&'static str>,
        fence: Option<&'static str>,
        /// (reason, warning) in order.
        events: &'static [(MemberReason, bool)],
        next: Option<Duration>,
    }

    impl Case {
        fn new(
            name: &'static str,
            prev: Option<MemberStatus>,
            obs: SlotObservation,
            want: MemberStatus,
        ) -> Case {
            Case {
                name,
                prev,
                obs,
                now: at(NOW),
                want,
                msg: None,
                create: false,
                delete: false,
                release: None,
                fence: None,
                events: &[],
                next: None,
            }
        }
        fn at(self, now: Timestamp) -> Case {
            Case { now, ..self }
        }
        fn msg(self, part: impl Into<String>) -> Case {
            Case {
                msg: Some(part.into()),
                ..self
            }
        }
        fn create(self) -> Case {
            Case { create: true, ..self }
        }
        fn delete(self) -> Case {
            Case { delete: true, ..self }
        }
        fn release(self, run: &'static str) -> Case {
            Case {
                release: Some(run),
                ..self
            }
        }
        fn fence(self, run: &'static str) -> Case {
            Case {
                fence: Some(run),
                ..self
            }
        }
        fn events(self, events: &'static [(MemberReason, bool)]) -> Case {
            Case { events, ..self }
        }
        fn next(self, d: Duration) -> Case {
            Case {
                next: Some(d),
                ..self
            }
        }
    }

    const LOST: &[(MemberReason, bool)] = &[
        (MemberReason::InstanceLost, true),
        (MemberReason::HoldStarted, false),
    ];
    const EXTENDED: &[(MemberReason, bool)] = &[(MemberReason::HoldExtended, true)];

    fn check(c: &Case) {
        let name = c.name;
        let members: Vec<MemberStatus> = c.prev.iter().cloned().collect();
        let obs = observed([(0, c.obs.clone())]);
        let p = plan(&input(1, &members, c.now), &obs);

        assert_eq!(p.members.len(), 1, "{name}: one record");
        let got = &p.members[0];
        match &c.msg {
            Some(part) => {
                let text = got.message.as_deref().unwrap_or_default();
                assert!(
                    text.contains(part.as_str()),
                    "{name}: message {text:?} lacks {part:?}"
                );
                let got = MemberStatus {
                    message: None,
                    ..got.clone()
                };
                let want = MemberStatus {
                    message: None,
                    ..c.want.clone()
                };
                assert_eq!(got, want, "{name}: record");
            }
            None => assert_eq!(got, &c.want, "{name}: record"),
        }
        assert_eq!(
            p.create_pods,
            if c.create { vec![0] } else { vec![] },
            "{name}: create"
        );
        assert_eq!(
            p.delete_pods,
            if c.delete { vec![0] } else { vec![] },
            "{name}: delete"
        );
        assert_eq!(
            p.releases,
            c.release
                .map(|r| (0, r.to_owned()))
                .into_iter()
                .collect::<Vec<_>>(),
            "{name}: releases"
        );
        assert_eq!(
            p.fences,
            c.fence.map(|r| (0, r.to_owned())).into_iter().collect::<Vec<_>>(),
            "{name}: fences"
        );
        let events: Vec<_> = p.events.iter().map(|e| (e.reason, e.warning)).collect();
        assert_eq!(events, c.events, "{name}: events");
        for e in &p.events {
            assert_eq!(e.slot, 0, "{name}: event slot");
            assert!(
                e.message.contains("locks-0"),
                "{name}: event names the pod: {}",
                e.message
            );
            if matches!(e.reason, MemberReason::HoldStarted | MemberReason::HoldExtended) {
                let until = c
                    .want
                    .held_until
                    .as_ref()
                    .expect("a hold event comes with a hold")
                    .0;
                assert!(
                    e.message.contains(&until.to_string()),
                    "{name}: {} lacks {until}",
                    e.message
                );
            }
        }
        assert_eq!(p.next_hold_end, c.next, "{name}: next_hold_end");

        // Pure: the same input plans the same.
        assert_eq!(plan(&input(1, &members, c.now), &obs), p, "{name}: deterministic");
        // Planning again from what was just written, with nothing changed, changes no state,
        // run id, hold or `since`, and tells nothing new. A fence did change something: the
        // process no longer lets clients in.
        let mut obs = obs;
        if !p.fences.is_empty() {
            for o in obs.values_mut() {
                if let Some(r) = &mut o.redis {
                    r.client_enabled = false;
                }
            }
        }
        let again = plan(&input(1, &p.members, c.now), &obs);
        let strip = |m: &MemberStatus| MemberStatus {
            message: None,
            ..m.clone()
        };
        assert_eq!(strip(&again.members[0]), strip(got), "{name}: stable on re-plan");
        assert!(
            again.events.is_empty(),
            "{name}: re-plan tells nothing new: {:?}",
            again.events
        );
    }

    fn run(cases: Vec<Case>) {
        for c in &cases {
            check(c);
        }
    }

    #[test]
    fn starting_members() {
        let since_now = micro(at(NOW));
        run(vec![
            // 1: new slot, no pod: `Starting` on record, then the pod; no hold.
            Case::new(
                "no record, no pod",
                None,
                missing(),
                MemberStatus {
                    since: since_now.clone(),
                    ..starting(0)
                },
            )
            .create()
            .events(&[(MemberReason::InstanceCreated, false)]),
            Case::new(
                "starting, pod not there yet",
                Some(starting(0)),
                missing(),
                starting(0),
            )
            .create(),
            Case::new(
                "starting, pod pending: the record says why",
                Some(starting(0)),
                not_running("cannot be placed: 0/3 nodes are available"),
                MemberStatus {
                    message: Some("cannot be placed: 0/3 nodes are available".into()),
                    ..starting(0)
                },
            ),
            Case::new(
                "starting, process not answering yet",
                Some(starting(0)),
                unreachable("c1"),
                starting(0),
            ),
            // The first process of a slot: nothing proves no earlier process of this name
            // granted locks that are still valid (delete and re-create, a wiped status), so it
            // is held in full from when it is first seen.
            Case::new(
                "starting, fenced process up: held in full",
                Some(starting(0)),
                running("R", false, "c1"),
                MemberStatus {
                    since: since_now.clone(),
                    ..held(0, "R", "c1", hold_from_now())
                },
            )
            .msg("first process of the slot; held in full")
            .events(&[(MemberReason::HoldStarted, false)])
            .next(HOLD),
            // Clients got in without a release (an edited ACL Secret): fenced, held in full.
            Case::new(
                "starting, process already enabled: fenced and held",
                Some(starting(0)),
                running("R", true, "c1"),
                MemberStatus {
                    since: since_now.clone(),
                    ..held(0, "R", "c1", hold_from_now())
                },
            )
            .msg("fenced again")
            .fence("R")
            .events(&[(MemberReason::Refenced, true)])
            .next(HOLD),
            Case::new(
                "starting, pod failed",
                Some(starting(0)),
                finished("Failed (Evicted)"),
                starting(0),
            )
            .delete(),
        ]);
    }

    #[test]
    fn ready_members() {
        let u = hold_from_now();
        let lost_now = MemberStatus {
            since: micro(at(NOW)),
            ..lost(0, u)
        };
        let held_now = |run: Option<&str>, container: &str| MemberStatus {
            state: MemberState::Held,
            run_id: run.map(str::to_owned),
            container_id: Some(container.into()),
            ..lost_now.clone()
        };
        let r = || Some(ready(0, "R", "c1"));
        run(vec![
            // 4
            Case::new("ready, pod deleted", r(), missing(), lost_now.clone())
                .msg(format!("pod deleted; held until {u}"))
                .create()
                .events(LOST)
                .next(HOLD),
            // 5
            Case::new(
                "ready, new run id in a new container",
                r(),
                running("Q", false, "c2"),
                held_now(Some("Q"), "c2"),
            )
            .msg(format!("new process (restarted); held until {u}"))
            .events(LOST)
            .next(HOLD),
            // The probe reached a restart's new process before the pod cache showed its
            // container, so the record paired the new run id with the old container id. The
            // cache catching up is no new process: the run id is the same. The record takes
            // the container id observed now.
            Case::new(
                "ready, same run id in another container: the same process",
                r(),
                running("R", true, "c2"),
                ready(0, "R", "c2"),
            ),
            Case::new(
                "ready, new run id, container id not changed",
                r(),
                running("Q", false, "c1"),
                held_now(Some("Q"), "c1"),
            )
            .msg("new process (restarted)")
            .events(LOST)
            .next(HOLD),
            Case::new(
                "ready, new run id already enabled: a new process, fenced",
                r(),
                running("Q", true, "c2"),
                held_now(Some("Q"), "c2"),
            )
            .msg("new process (restarted)")
            .fence("Q")
            .events(&[(MemberReason::InstanceLost, true), (MemberReason::HoldStarted, false), (MemberReason::Refenced, true)])
            .next(HOLD),
            // A Ready record without a run id cannot vouch for a fenced process: it may be a
            // new, empty one (an edited or restored status). Lost, never released.
            Case::new(
                "ready without a run id, fenced process: a loss, not a release",
                Some(MemberStatus {
                    run_id: None,
                    container_id: None,
                    ..ready(0, "R", "c1")
                }),
                running("Q", false, "c2"),
                held_now(Some("Q"), "c2"),
            )
            .msg("no run id")
            .events(LOST)
            .next(HOLD),
            // 6
            Case::new(
                "ready, new container, redis unreachable",
                r(),
                unreachable("c2"),
                held_now(None, "c2"),
            )
            .msg("new process (restarted)")
            .events(LOST)
            .next(HOLD),
            // 7
            Case::new(
                "ready, crash-looping",
                r(),
                not_running("CrashLoopBackOff"),
                lost_now.clone(),
            )
            .msg("container not running (CrashLoopBackOff)")
            .events(LOST)
            .next(HOLD),
            Case::new(
                "ready, killed",
                r(),
                not_running("exit code 137"),
                lost_now.clone(),
            )
            .msg("container not running (exit code 137)")
            .events(LOST)
            .next(HOLD),
            // 8: the failed pod goes, so the next reconcile sees it missing and replaces it.
            Case::new(
                "ready, pod evicted",
                r(),
                finished("Failed (Evicted)"),
                lost_now.clone(),
            )
            .msg("pod Failed (Evicted)")
            .delete()
            .events(LOST)
            .next(HOLD),
            Case::new(
                "ready, pod succeeded",
                r(),
                finished("succeeded"),
                lost_now.clone(),
            )
            .msg("pod succeeded")
            .delete()
            .events(LOST)
            .next(HOLD),
            // 9: a stopped process keeps its keys; no hold while its container runs.
            Case::new(
                "ready, same container, redis unreachable",
                r(),
                unreachable("c1"),
                ready(0, "R", "c1"),
            )
            .msg("not answering the operator (connection refused)"),
            // 10: the process may still serve until it is gone.
            Case::new(
                "ready, pod terminating, process still answering",
                r(),
                terminating(running("R", true, "c1")),
                ready(0, "R", "c1"),
            )
            .msg("pod terminating; its process may still serve, so the hold starts once it is known to be gone"),
            Case::new(
                "ready, pod terminating, process not answering",
                r(),
                terminating(unreachable("c1")),
                ready(0, "R", "c1"),
            )
            .msg("pod terminating and not answering the operator (connection refused); its process may still serve"),
            // 19: node lost, pod still reported running: no replacement, nothing released.
            Case::new(
                "ready, node not reporting",
                r(),
                node_lost("c1"),
                ready(0, "R", "c1"),
            )
            .msg("not answering the operator (timed out)"),
            // A crash between the status write and the release left it fenced: release again.
            Case::new(
                "ready, same process still fenced",
                r(),
                running("R", false, "c1"),
                ready(0, "R", "c1"),
            )
            .release("R"),
            Case::new(
                "ready, same process serving",
                r(),
                running("R", true, "c1"),
                ready(0, "R", "c1"),
            ),
            Case::new(
                "ready without a known container: filled in",
                Some(MemberStatus {
                    container_id: None,
                    ..ready(0, "R", "c1")
                }),
                running("R", true, "c1"),
                ready(0, "R", "c1"),
            ),
        ]);
    }

    #[test]
    fn held_members() {
        let later = at(NOW + 10);
        let h = |until| Some(held(0, "Q", "c2", until));
        let released = MemberStatus {
            since: micro(at(NOW)),
            ..ready(0, "Q", "c2")
        };
        let extended = |run: Option<&str>, container: &str, until| MemberStatus {
            run_id: run.map(str::to_owned),
            container_id: Some(container.into()),
            ..held(0, "Q", "c2", until)
        };
        let lost_extended = |until| MemberStatus {
            since: micro(at(NOW)),
            ..lost(0, until)
        };
        run(vec![
            // 11
            Case::new(
                "held, before its end",
                h(later),
                running("Q", false, "c2"),
                held(0, "Q", "c2", later),
            )
            .next(secs(10)),
            // Someone turned the client user on (ACL SETUSER, an edited ACL Secret): fenced
            // again at once and held in full from now.
            Case::new(
                "held, enabled by someone else before its end: fenced again, held in full",
                h(later),
                running("Q", true, "c2"),
                held(0, "Q", "c2", hold_from_now()),
            )
            .msg("found serving clients while it must be held; fenced again")
            .fence("Q")
            .events(&[(MemberReason::Refenced, true)])
            .next(HOLD),
            Case::new(
                "held, before its end, process not answering",
                h(later),
                unreachable("c2"),
                held(0, "Q", "c2", later),
            )
            .next(secs(10)),
            Case::new(
                "held, one microsecond before its end: not released",
                h(later),
                running("Q", false, "c2"),
                held(0, "Q", "c2", later),
            )
            .at(later
                .checked_sub(k8s_openapi::jiff::SignedDuration::from_micros(1))
                .unwrap())
            .next(Duration::from_micros(1)),
            // 12
            Case::new(
                "held, exactly at its end",
                h(at(NOW)),
                running("Q", false, "c2"),
                released.clone(),
            )
            .release("Q"),
            Case::new(
                "held, after its end",
                h(at(NOW - 5)),
                running("Q", false, "c2"),
                released.clone(),
            )
            .release("Q"),
            Case::new(
                "held, after its end, already enabled",
                h(at(NOW - 5)),
                running("Q", true, "c2"),
                released.clone(),
            ),
            Case::new(
                "held, after its end, process not answering: not released",
                h(at(NOW - 5)),
                unreachable("c2"),
                held(0, "Q", "c2", at(NOW - 5)),
            ),
            Case::new(
                "held, after its end, pod terminating: not released",
                h(at(NOW - 5)),
                terminating(unreachable("c2")),
                held(0, "Q", "c2", at(NOW - 5)),
            ),
            // 13: a further restart during the hold counts the hold again from now.
            Case::new(
                "held, restarted again",
                h(later),
                running("Q2", false, "c3"),
                extended(Some("Q2"), "c3", hold_from_now()),
            )
            .msg(format!(
                "restarted again during its hold; held until {}",
                hold_from_now()
            ))
            .events(EXTENDED)
            .next(HOLD),
            Case::new(
                "held, restarted again, new container not answering",
                h(later),
                unreachable("c3"),
                extended(None, "c3", hold_from_now()),
            )
            .msg("restarted again during its hold")
            .events(EXTENDED)
            .next(HOLD),
            Case::new(
                "held, restarted again: never earlier than the running hold",
                h(at(NOW + 100)),
                running("Q2", false, "c3"),
                // The hold counts from this loss (a later raise of maxLockTTL lengthens it from
                // here), and still ends no earlier than before.
                MemberStatus {
                    hold_started_at: micro(at(NOW)),
                    ..extended(Some("Q2"), "c3", at(NOW + 100))
                },
            )
            .msg("restarted again during its hold")
            .events(EXTENDED)
            .next(secs(100)),
            Case::new(
                "held, restarted right after its end: held again, not released",
                h(at(NOW - 5)),
                running("Q2", false, "c3"),
                extended(Some("Q2"), "c3", hold_from_now()),
            )
            .msg("restarted again during its hold")
            .events(EXTENDED)
            .next(HOLD),
            // 14
            Case::new(
                "held, pod deleted",
                h(later),
                missing(),
                lost_extended(hold_from_now()),
            )
            .msg(format!(
                "replacement lost during its hold; held until {}",
                hold_from_now()
            ))
            .create()
            .events(EXTENDED)
            .next(HOLD),
            Case::new(
                "held, container crashed",
                h(later),
                not_running("Error"),
                lost_extended(hold_from_now()),
            )
            .msg("replacement lost during its hold")
            .events(EXTENDED)
            .next(HOLD),
            Case::new(
                "held, pod evicted",
                h(later),
                finished("Failed (Evicted)"),
                lost_extended(hold_from_now()),
            )
            .msg("replacement lost during its hold")
            .delete()
            .events(EXTENDED)
            .next(HOLD),
            Case::new(
                "held, process lost after a long hold: never earlier than the running hold",
                h(at(NOW + 100)),
                missing(),
                MemberStatus {
                    hold_started_at: micro(at(NOW)),
                    ..lost_extended(at(NOW + 100))
                },
            )
            .msg("replacement lost during its hold")
            .create()
            .events(EXTENDED)
            .next(secs(100)),
            // A held process whose run id was not known yet: learnt, hold unchanged.
            Case::new(
                "held without run id, same container answers",
                Some(MemberStatus {
                    run_id: None,
                    ..held(0, "Q", "c2", later)
                }),
                running("Q", false, "c2"),
                held(0, "Q", "c2", later),
            )
            .next(secs(10)),
            Case::new(
                "held without run id, same container answers after the end",
                Some(MemberStatus {
                    run_id: None,
                    ..held(0, "Q", "c2", at(NOW - 5))
                }),
                running("Q", false, "c2"),
                released.clone(),
            )
            .release("Q"),
        ]);
    }

    #[test]
    fn lost_members() {
        let later = at(NOW + 10);
        let l = |until| Some(lost(0, until));
        run(vec![
            // 15: the replacement is fenced since its start; the hold keeps its end.
            Case::new(
                "lost, replacement up before the end",
                l(later),
                running("Q", false, "c2"),
                MemberStatus {
                    state: MemberState::Held,
                    run_id: Some("Q".into()),
                    container_id: Some("c2".into()),
                    since: micro(at(NOW)),
                    ..lost(0, later)
                },
            )
            .next(secs(10)),
            Case::new(
                "lost, replacement up but not answering before the end",
                l(later),
                unreachable("c2"),
                MemberStatus {
                    state: MemberState::Held,
                    container_id: Some("c2".into()),
                    since: micro(at(NOW)),
                    ..lost(0, later)
                },
            )
            .next(secs(10)),
            // 16
            Case::new(
                "lost, replacement up after the end",
                l(at(NOW - 1)),
                running("Q", false, "c2"),
                MemberStatus {
                    since: micro(at(NOW)),
                    ..ready(0, "Q", "c2")
                },
            )
            .release("Q"),
            Case::new(
                "lost, replacement up after the end, already enabled",
                l(at(NOW - 1)),
                running("Q", true, "c2"),
                MemberStatus {
                    since: micro(at(NOW)),
                    ..ready(0, "Q", "c2")
                },
            ),
            Case::new("lost, no pod", l(later), missing(), lost(0, later))
                .create()
                .next(secs(10)),
            Case::new(
                "lost, no pod after the end",
                l(at(NOW - 1)),
                missing(),
                lost(0, at(NOW - 1)),
            )
            .create(),
            Case::new(
                "lost, pod pending",
                l(later),
                not_running("ContainerCreating"),
                lost(0, later),
            )
            .next(secs(10)),
            Case::new(
                "lost, pod evicted",
                l(later),
                finished("Failed (Evicted)"),
                lost(0, later),
            )
            .delete()
            .next(secs(10)),
        ]);
    }

    /// 18: a pod without a record is unknown, and unknown means unsafe.
    #[test]
    fn unknown_processes() {
        let u = hold_from_now();
        let fresh = |state| MemberStatus {
            held_until: micro(u),
            hold_started_at: micro(at(NOW)),
            since: micro(at(NOW)),
            ..record(0, state)
        };
        const STARTED: &[(MemberReason, bool)] = &[(MemberReason::HoldStarted, false)];
        run(vec![
            Case::new(
                "no record, fenced process",
                None,
                running("Q", false, "c1"),
                MemberStatus {
                    run_id: Some("Q".into()),
                    container_id: Some("c1".into()),
                    ..fresh(MemberState::Held)
                },
            )
            .msg(format!(
                "unknown process (no record of this slot); held until {u}"
            ))
            .events(STARTED)
            .next(HOLD),
            Case::new(
                "no record, process not answering",
                None,
                unreachable("c1"),
                MemberStatus {
                    container_id: Some("c1".into()),
                    ..fresh(MemberState::Held)
                },
            )
            .msg("unknown process")
            .events(STARTED)
            .next(HOLD),
            Case::new(
                "no record, pod pending",
                None,
                not_running("pending (not started)"),
                fresh(MemberState::Lost),
            )
            .msg("unknown process")
            .events(STARTED)
            .next(HOLD),
            Case::new(
                "no record, pod failed",
                None,
                finished("Failed (Evicted)"),
                fresh(MemberState::Lost),
            )
            .msg("unknown process")
            .delete()
            .events(STARTED)
            .next(HOLD),
            // Someone released it; fencing it now would not undo what it served.
            Case::new(
                "no record, process already serving",
                None,
                running("Q", true, "c1"),
                MemberStatus {
                    since: micro(at(NOW)),
                    message: Some("adopted a process that already serves clients".into()),
                    ..ready(0, "Q", "c1")
                },
            ),
        ]);
    }

    /// 1
    #[test]
    fn new_cluster_starts_every_slot() {
        let p = plan(&input(3, &[], at(NOW)), &BTreeMap::new());
        let want: Vec<_> = (0..3)
            .map(|s| MemberStatus {
                since: micro(at(NOW)),
                ..starting(s)
            })
            .collect();
        assert_eq!(p.members, want);
        assert_eq!(p.create_pods, vec![0, 1, 2]);
        assert!(p.delete_pods.is_empty() && p.releases.is_empty());
        assert_eq!(
            reasons(&p),
            vec![
                (0, MemberReason::InstanceCreated),
                (1, MemberReason::InstanceCreated),
                (2, MemberReason::InstanceCreated)
            ]
        );
        assert_eq!(p.events[2].message, "creating locks-2");
        assert_eq!(p.next_hold_end, None);
    }

    /// 17: the hold on record is the hold; an operator coming back mid-hold neither shortens
    /// nor restarts it, and the plan depends on nothing but its inputs.
    #[test]
    fn operator_restart_mid_hold_keeps_the_hold() {
        let until = held_until(at(T0), HOLD);
        let members = vec![
            MemberStatus {
                message: Some(format!("new process (restarted); held until {until}")),
                ..held(0, "Q", "c2", until)
            },
            lost(1, until),
            ready(2, "R", "c1"),
        ];
        let obs = observed([
            (0, running("Q", false, "c2")),
            (1, missing()),
            (2, running("R", true, "c1")),
        ]);
        let now = at(T0 + 10);
        let p = plan(&input(3, &members, now), &obs);
        assert_eq!(
            p.members, members,
            "identical records: same since, same heldUntil"
        );
        assert_eq!(p.create_pods, vec![1]);
        assert!(p.delete_pods.is_empty() && p.releases.is_empty() && p.events.is_empty());
        assert_eq!(p.next_hold_end, Some(Duration::from_millis(21_300)));
        assert_eq!(plan(&input(3, &members, now), &obs), p, "idempotent");
        // Down for longer, still inside the hold: the same records.
        let p = plan(&input(3, &members, at(T0 + 31)), &obs);
        assert_eq!(p.members, members);
        assert_eq!(p.next_hold_end, Some(Duration::from_millis(300)));
        // At the recorded end, not before.
        let p = plan(&input(3, &members, until), &obs);
        assert_eq!(p.members[0].state, MemberState::Ready);
        assert_eq!(p.releases, vec![(0, "Q".to_owned())]);
        assert_eq!(p.members[1], members[1]);
        assert_eq!(p.next_hold_end, None);
    }

    /// 20
    #[test]
    fn scale_down_holds_removed_slots_until_their_hold_ends() {
        let members: Vec<_> = (0..5)
            .map(|s| ready(s, &format!("R{s}"), &format!("c{s}")))
            .collect();
        let serving = |s: i32| (s, running(&format!("R{s}"), true, &format!("c{s}")));

        // Pods still there: deleted, records untouched (their processes may still serve).
        let all_pods = observed((0..5).map(serving));
        let p = plan(&input(3, &members, at(NOW)), &all_pods);
        assert_eq!(p.members, members);
        assert_eq!(p.delete_pods, vec![3, 4]);
        assert!(p.create_pods.is_empty() && p.releases.is_empty() && p.events.is_empty());
        assert_eq!(p.next_hold_end, None);

        // Terminating, still answering: still untouched, still deleted.
        let mut going = all_pods.clone();
        going.insert(3, terminating(running("R3", true, "c3")));
        going.insert(4, terminating(unreachable("c4")));
        let p = plan(&input(3, &members, at(NOW)), &going);
        assert_eq!(p.members, members);
        assert_eq!(p.delete_pods, vec![3, 4]);

        // Pods gone: held from now.
        let remaining_pods = observed((0..3).map(serving));
        let p = plan(&input(3, &members, at(NOW)), &remaining_pods);
        let u = hold_from_now();
        assert_eq!(&p.members[..3], &members[..3]);
        for (m, slot) in p.members[3..].iter().zip(3..) {
            let want = MemberStatus {
                since: micro(at(NOW)),
                ..lost(slot, u)
            };
            assert_eq!(m.clone().tap_message(None), want.tap_message(None));
            let text = m.message.as_deref().unwrap();
            assert!(text.contains("removed by scale-down"), "{text}");
            assert!(text.contains(&u.to_string()), "{text}");
        }
        assert!(p.create_pods.is_empty() && p.delete_pods.is_empty() && p.releases.is_empty());
        assert!(p.events.is_empty());
        assert_eq!(p.next_hold_end, Some(HOLD));

        // Later, inside the hold: the records stand as written.
        let retired = p.members.clone();
        let p = plan(&input(3, &retired, at(NOW + 10)), &remaining_pods);
        assert_eq!(p.members, retired);
        assert_eq!(p.next_hold_end, Some(Duration::from_millis(21_300)));

        // Scaling back up within the hold: the slots are lost and held, not new.
        let p = plan(&input(5, &retired, at(NOW + 10)), &remaining_pods);
        assert_eq!(p.members, retired);
        assert_eq!(p.create_pods, vec![3, 4]);
        assert!(p.events.is_empty(), "no InstanceCreated: {:?}", p.events);
        let mut back = remaining_pods.clone();
        back.insert(3, running("N3", false, "d3"));
        let p = plan(&input(5, &retired, at(NOW + 20)), &back);
        assert_eq!(p.members[3].state, MemberState::Held);
        assert_eq!(p.members[3].held_until, micro(u));
        assert!(p.releases.is_empty());
        let p = plan(&input(5, &p.members, u), &back);
        assert_eq!(p.members[3].state, MemberState::Ready);
        assert_eq!(p.releases, vec![(3, "N3".to_owned())]);

        // Once the hold has run out, the records go.
        let p = plan(&input(3, &retired, u), &remaining_pods);
        assert_eq!(p.members, members[..3]);
        assert_eq!(p.next_hold_end, None);
        // And a later scale-up starts them fresh.
        let p = plan(&input(5, &p.members, u), &remaining_pods);
        assert_eq!(p.members[3].state, MemberState::Starting);
        assert_eq!(p.create_pods, vec![3, 4]);
    }

    /// Slots at or above N, one at a time.
    #[test]
    fn retired_slots() {
        let later = at(NOW + 10);
        /// (name, record, observation, kept record, pod deleted)
        type RetireCase = (
            &'static str,
            Option<MemberStatus>,
            SlotObservation,
            Option<MemberStatus>,
            bool,
        );
        let cases: Vec<RetireCase> = vec![
            (
                // Unknown history: it may have served, so the slot is held once it is gone.
                "no record, pod left over",
                None,
                running("X", true, "c1"),
                Some(MemberStatus {
                    name: "locks-1".into(),
                    slot: 1,
                    endpoint: None,
                    state: MemberState::Lost,
                    run_id: None,
                    container_id: None,
                    held_until: None,
                    hold_started_at: None,
                    since: Some(MicroTime(at(NOW))),
                    message: None,
                    pod_ip: None,
                    listener: None,
                    unstopped: None,
                    maintenance: None,
                }),
                true,
            ),
            ("no record, no pod", None, missing(), None, false),
            (
                "starting, no pod: never served, dropped",
                Some(starting(1)),
                missing(),
                None,
                false,
            ),
            (
                "starting, pod still there",
                Some(starting(1)),
                not_running("pending"),
                Some(starting(1)),
                true,
            ),
            (
                "held, pod gone: the running hold stays",
                Some(held(1, "Q", "c2", later)),
                missing(),
                Some(MemberStatus {
                    since: micro(at(NOW)),
                    ..lost(1, later)
                }),
                false,
            ),
            (
                "held, hold over, pod gone",
                Some(held(1, "Q", "c2", at(NOW))),
                missing(),
                None,
                false,
            ),
            (
                "lost, hold running",
                Some(lost(1, later)),
                missing(),
                Some(lost(1, later)),
                false,
            ),
            (
                "lost, hold over",
                Some(lost(1, at(NOW - 1))),
                missing(),
                None,
                false,
            ),
            (
                "ready, pod failed: kept until the pod is gone",
                Some(ready(1, "R", "c1")),
                finished("Failed (Evicted)"),
                Some(ready(1, "R", "c1")),
                true,
            ),
        ];
        for (name, prev, obs, want, delete) in cases {
            let members: Vec<_> = prev.into_iter().collect();
            let p = plan(
                &input(1, &members, at(NOW)),
                &observed([(0, running("R0", true, "c0")), (1, obs)]),
            );
            let got = p.members.iter().find(|m| m.slot == 1).cloned();
            let strip = |m: Option<MemberStatus>| m.map(|m| m.tap_message(None));
            assert_eq!(strip(got), strip(want.clone()), "{name}");
            assert_eq!(p.delete_pods, if delete { vec![1] } else { vec![] }, "{name}");
            assert!(
                p.create_pods.is_empty() && p.releases.is_empty() && p.events.is_empty(),
                "{name}"
            );
            let want_next = want
                .and_then(|m| m.held_until)
                .filter(|u| u.0 > at(NOW))
                .map(|u| remaining(at(NOW), u.0));
            assert_eq!(p.next_hold_end, want_next, "{name}");
        }
    }

    /// An evicted pod stays in phase Failed until someone deletes it, and a pod of the same
    /// name cannot be created meanwhile: without the delete the slot would stay Lost forever.
    #[test]
    fn evicted_pod_is_deleted_then_replaced_under_the_same_hold() {
        let u = hold_from_now();
        let members = [ready(0, "R", "c1")];
        let p = plan(
            &input(1, &members, at(NOW)),
            &observed([(0, finished("Failed (Evicted)"))]),
        );
        assert_eq!(p.members[0].state, MemberState::Lost);
        assert_eq!(p.members[0].held_until, micro(u));
        assert_eq!((p.delete_pods.clone(), p.create_pods.clone()), (vec![0], vec![]));
        // The pod is gone: a replacement is created; the hold keeps its end.
        let p = plan(&input(1, &p.members, at(NOW + 1)), &observed([]));
        assert_eq!((p.delete_pods.clone(), p.create_pods.clone()), (vec![], vec![0]));
        assert_eq!(p.members[0].held_until, micro(u));
        let p = plan(
            &input(1, &p.members, at(NOW + 5)),
            &observed([(0, running("Q", false, "c2"))]),
        );
        assert_eq!(p.members[0].state, MemberState::Held);
        assert_eq!(p.members[0].held_until, micro(u));
        assert!(p.releases.is_empty());
        let p = plan(
            &input(1, &p.members, u),
            &observed([(0, running("Q", false, "c2"))]),
        );
        assert_eq!(p.members[0].state, MemberState::Ready);
        assert_eq!(p.releases, vec![(0, "Q".to_owned())]);
    }

    /// 21
    #[test]
    fn scale_up_starts_new_slots() {
        let members: Vec<_> = (0..3).map(|s| ready(s, "R", &format!("c{s}"))).collect();
        let obs = observed((0..3).map(|s| (s, running("R", true, &format!("c{s}")))));
        let p = plan(&input(5, &members, at(NOW)), &obs);
        assert_eq!(&p.members[..3], &members[..]);
        for s in 3..5 {
            assert_eq!(
                p.members[s as usize],
                MemberStatus {
                    since: micro(at(NOW)),
                    ..starting(s)
                }
            );
        }
        assert_eq!(p.create_pods, vec![3, 4]);
        assert_eq!(
            reasons(&p),
            vec![
                (3, MemberReason::InstanceCreated),
                (4, MemberReason::InstanceCreated)
            ]
        );
        assert!(p.releases.is_empty() && p.delete_pods.is_empty());
        assert_eq!(p.next_hold_end, None);
    }

    /// 22: an unchanged cluster plans exactly its status back: no write, no action.
    #[test]
    fn steady_state_changes_nothing() {
        let members: Vec<_> = (0..5)
            .map(|s| MemberStatus {
                endpoint: Some(format!("locks-{s}.default.svc:6379")),
                ..ready(s, &format!("R{s}"), &format!("c{s}"))
            })
            .collect();
        let obs = observed((0..5).map(|s| (s, running(&format!("R{s}"), true, &format!("c{s}")))));
        let p = plan(&input(5, &members, at(NOW)), &obs);
        assert_eq!(
            p,
            Plan {
                members: members.clone(),
                ..Plan::default()
            }
        );
    }

    /// 23
    #[test]
    fn next_hold_end_is_the_earliest_running_hold() {
        let members = vec![
            held(0, "A", "a", at(NOW + 50)),
            lost(1, at(NOW + 20)),
            // Over, but not released (not answering): no hold to wait for.
            held(2, "C", "c", at(NOW - 5)),
            ready(3, "D", "d"),
            // Retired slot, still held.
            lost(4, at(NOW + 7)),
        ];
        let obs = observed([
            (0, running("A", false, "a")),
            (1, missing()),
            (2, unreachable("c")),
            (3, running("D", true, "d")),
        ]);
        let p = plan(&input(4, &members, at(NOW)), &obs);
        assert_eq!(p.next_hold_end, Some(secs(7)));
        let p = plan(&input(4, &members[..4], at(NOW)), &obs);
        assert_eq!(p.next_hold_end, Some(secs(20)));
        // A new loss shorter than every running hold wins.
        let mut obs = obs;
        obs.insert(3, missing());
        let p = plan(&input(4, &members[..2], at(NOW + 15)), &obs);
        assert_eq!(p.next_hold_end, Some(secs(5)));
        let p = plan(&input(4, &members[..4], at(NOW + 19)), &obs);
        assert_eq!(p.next_hold_end, Some(secs(1)));
    }

    /// heldUntil is rounded up to the microsecond status stores, `since` down.
    #[test]
    fn hold_end_rounds_up_to_microseconds() {
        let now = Timestamp::from_nanosecond(i128::from(NOW) * 1_000_000_000 + 500).unwrap();
        let members = [ready(0, "R", "c1")];
        let p = plan(&input(1, &members, now), &observed([(0, missing())]));
        let m = &p.members[0];
        let until = m.held_until.as_ref().unwrap().0;
        assert_eq!(
            until.as_nanosecond(),
            i128::from(NOW) * 1_000_000_000 + 31_300_000_000 + 1_000
        );
        assert!(until.duration_since(now) >= k8s_openapi::jiff::SignedDuration::try_from(HOLD).unwrap());
        assert_eq!(m.since, micro(at(NOW)));
        assert_eq!(p.next_hold_end, Some(HOLD + Duration::from_nanos(500)));
    }

    trait TapMessage {
        fn tap_message(self, message: Option<String>) -> Self;
    }

    impl TapMessage for MemberStatus {
        fn tap_message(self, message: Option<String>) -> Self {
            MemberStatus { message, ..self }
        }
    }

    /// A Held record without `heldUntil` (edited status) is not treated as expired: unknown
    /// means unsafe, so a full hold from now, persisted.
    #[test]
    fn held_without_an_end_gets_a_full_hold_from_now() {
        let mut m = held(0, "Q", "c1", at(NOW));
        m.held_until = None;
        let p = plan(
            &input(1, &[m], at(NOW)),
            &observed([(0, running("Q", false, "c1"))]),
        );
        let want = held_until(at(NOW), HOLD);
        assert_eq!(p.members[0].state, MemberState::Held);
        assert_eq!(p.members[0].held_until.as_ref().map(|t| t.0), Some(want));
        assert!(p.releases.is_empty());
        // Next reconcile, the persisted end stands.
        let p2 = plan(
            &input(1, &p.members, at(NOW + 5)),
            &observed([(0, running("Q", false, "c1"))]),
        );
        assert_eq!(p2.members[0].held_until.as_ref().map(|t| t.0), Some(want));
    }

    /// A retired slot whose process had no record is held once the pod is gone.
    #[test]
    fn unknown_retired_process_is_held_after_it_is_gone() {
        let p = plan(
            &input(0, &[], at(NOW)),
            &observed([(0, running("X", true, "c1"))]),
        );
        assert_eq!(p.delete_pods, vec![0]);
        let p = plan(&input(0, &p.members, at(NOW + 1)), &observed([(0, missing())]));
        assert_eq!(p.members[0].state, MemberState::Lost);
        assert_eq!(
            p.members[0].held_until.as_ref().map(|t| t.0),
            Some(held_until(at(NOW + 1), HOLD))
        );
        // Scaling up within that hold does not reuse the slot unheld.
        let p = plan(
            &input(1, &p.members, at(NOW + 2)),
            &observed([(0, running("Y", false, "c2"))]),
        );
        assert_eq!(p.members[0].state, MemberState::Held);
        assert!(p.releases.is_empty());
    }

    /// A releasable slot whose process does not answer yet asks for a quick look again.
    #[test]
    fn awaiting_process_only_when_release_waits_on_the_process() {
        let mut lost = held(0, "Q", "c1", at(NOW - 1));
        (lost.state, lost.run_id, lost.container_id) = (MemberState::Lost, None, None);
        let p = plan(
            &input(1, &[lost], at(NOW)),
            &observed([(0, not_running("ContainerCreating"))]),
        );
        assert!(p.awaiting_process, "hold over, replacement not running yet");
        let expired = held(0, "Q", "c1", at(NOW - 1));
        let running_hold = held(0, "Q", "c1", at(NOW + 10));
        let p = plan(&input(1, &[running_hold], at(NOW)), &observed([(0, missing())]));
        assert!(
            !p.awaiting_process,
            "hold still running: the hold end schedules the next look"
        );
        let p = plan(
            &input(1, &[expired], at(NOW)),
            &observed([(0, running("Q", false, "c1"))]),
        );
        assert!(!p.awaiting_process && p.releases.len() == 1, "released now");
        let p = plan(&input(1, &[], at(NOW)), &observed([]));
        assert!(p.awaiting_process, "a new slot is released as soon as it answers");
    }

    fn foreign() -> SlotObservation {
        SlotObservation {
            pod: PodState::Foreign {
                owner: "controlled by RedlockCluster locks (uid old)".into(),
            },
            ..Default::default()
        }
    }

    /// A pod of the slot's name that this cluster does not control (an earlier incarnation's
    /// pod awaiting garbage collection, an orphan): reported, nothing created, released or
    /// replaced, and the slot's hold starts in full once the name is free.
    #[test]
    fn name_taken_by_a_pod_of_another_owner() {
        const CONFLICT: &[(MemberReason, bool)] = &[(MemberReason::NameConflict, true)];
        let lost_no_end = |since| MemberStatus {
            state: MemberState::Lost,
            since,
            ..record(0, MemberState::Lost)
        };
        run(vec![
            Case::new(
                "no record, foreign pod: starting, reported",
                None,
                foreign(),
                MemberStatus {
                    since: micro(at(NOW)),
                    ..starting(0)
                },
            )
            .msg("pod name taken: pod locks-0 exists but is not controlled by this RedlockCluster")
            .events(CONFLICT),
            Case::new("starting, foreign pod", Some(starting(0)), foreign(), starting(0))
                .msg("uid old")
                .events(CONFLICT),
            Case::new(
                "ready, foreign pod: lost with no end yet",
                Some(ready(0, "R", "c1")),
                foreign(),
                lost_no_end(micro(at(NOW))),
            )
            .msg("held in full once it is gone")
            .events(CONFLICT),
            Case::new(
                "held, foreign pod: the hold restarts once it is gone",
                Some(held(0, "Q", "c2", at(NOW + 10))),
                foreign(),
                lost_no_end(micro(at(NOW))),
            )
            .msg("pod name taken")
            .events(CONFLICT),
        ]);
        // The name is free again: a full hold from then, and the pod is created.
        let taken = plan(
            &input(1, &[ready(0, "R", "c1")], at(NOW)),
            &observed([(0, foreign())]),
        );
        let later = at(NOW + 100);
        let freed = plan(&input(1, &taken.members, later), &observed([(0, missing())]));
        let m = &freed.members[0];
        assert_eq!(m.state, MemberState::Lost);
        assert_eq!(m.held_until.as_ref().unwrap().0, held_until(later, HOLD));
        assert_eq!(freed.create_pods, vec![0]);
        assert!(freed.releases.is_empty());
        // A retired slot's foreign pod is never deleted.
        let retired = plan(
            &input(0, &[ready(0, "R", "c1")], at(NOW)),
            &observed([(0, foreign())]),
        );
        assert!(retired.delete_pods.is_empty(), "{:?}", retired.delete_pods);
        assert_eq!(reasons(&retired), vec![(0, MemberReason::NameConflict)]);
    }

    /// A raised maxLockTTL lengthens holds already running, counted from when each started;
    /// a lower hold never shortens one.
    #[test]
    fn the_hold_in_force_lengthens_running_holds() {
        let started = at(NOW - 10);
        let until = held_until(started, HOLD);
        let h = MemberStatus {
            hold_started_at: micro(started),
            ..held(0, "Q", "c2", until)
        };
        for (hold, want) in [
            (
                Duration::from_secs(120),
                held_until(started, Duration::from_secs(120)),
            ),
            (HOLD, until),
            (Duration::from_secs(3), until),
        ] {
            let p = plan(
                &PlanInput {
                    hold,
                    ..input(1, std::slice::from_ref(&h), at(NOW))
                },
                &observed([(0, running("Q", false, "c2"))]),
            );
            assert_eq!(p.members[0].held_until.as_ref().unwrap().0, want, "{hold:?}");
            assert_eq!(p.members[0].hold_started_at.as_ref().unwrap().0, started);
            assert!(p.releases.is_empty() && p.events.is_empty());
        }
        // A Lost slot's hold too, and a retired slot's.
        let l = MemberStatus {
            hold_started_at: micro(started),
            ..lost(0, until)
        };
        let long = Duration::from_secs(120);
        for instances in [1, 0] {
            let p = plan(
                &PlanInput {
                    hold: long,
                    ..input(instances, std::slice::from_ref(&l), at(NOW))
                },
                &observed([(0, missing())]),
            );
            assert_eq!(
                p.members[0].held_until.as_ref().unwrap().0,
                held_until(started, long),
                "N={instances}"
            );
        }
    }

    /// A scale-down 3 → 2 while clients are still told the list of 3: the removed member is
    /// fenced and held first, never deleted; its pod goes only once the shorter list is out.
    #[test]
    fn removed_members_are_fenced_and_held_before_the_list_shrinks() {
        let members = [ready(0, "A", "c0"), ready(1, "B", "c1"), ready(2, "C", "c2")];
        let obs = observed([
            (0, running("A", true, "c0")),
            (1, running("B", true, "c1")),
            (2, running("C", true, "c2")),
        ]);
        let still_published = PlanInput {
            published: 3,
            ..input(2, &members, at(NOW))
        };
        let p = plan(&still_published, &obs);
        assert_eq!(p.fences, vec![(2, "C".to_owned())]);
        assert!(p.delete_pods.is_empty(), "{:?}", p.delete_pods);
        let m = &p.members[2];
        assert_eq!(m.state, MemberState::Held);
        // The fence is not proven yet: the hold starts once it is seen fenced.
        assert_eq!(m.held_until, None);
        // Not answering proves nothing either.
        let silent = observed([
            (0, running("A", true, "c0")),
            (1, running("B", true, "c1")),
            (2, unreachable("c2")),
        ]);
        let p = plan(
            &PlanInput {
                published: 3,
                ..input(2, &p.members, at(NOW))
            },
            &silent,
        );
        assert_eq!(p.members[2].held_until, None);
        // Seen fenced: the hold runs from then.
        let fenced = observed([
            (0, running("A", true, "c0")),
            (1, running("B", true, "c1")),
            (2, running("C", false, "c2")),
        ]);
        let p = plan(
            &PlanInput {
                published: 3,
                ..input(2, &p.members, at(NOW))
            },
            &fenced,
        );
        assert_eq!(p.members[2].held_until.as_ref().unwrap().0, hold_from_now());
        // Re-planned before the hold ends: same record, nothing more to do.
        let later = at(NOW + 40);
        let again = plan(
            &PlanInput {
                published: 3,
                ..input(2, &p.members, later)
            },
            &fenced,
        );
        assert_eq!(again.members[2].held_until, p.members[2].held_until);
        assert_eq!(again.members[2].state, MemberState::Held, "never released");
        assert!(again.releases.is_empty() && again.fences.is_empty() && again.delete_pods.is_empty());
        // Someone lets clients in again meanwhile: fenced again, and the hold starts over once
        // it is seen fenced.
        let reopened = plan(
            &PlanInput {
                published: 3,
                ..input(2, &p.members, at(NOW + 10))
            },
            &obs,
        );
        assert_eq!(reopened.fences, vec![(2, "C".to_owned())]);
        assert_eq!(reopened.members[2].held_until, None);
        // Once the shorter list is published, the pod goes.
        let published = plan(&input(2, &again.members, later), &fenced);
        assert_eq!(published.delete_pods, vec![2]);
    }

    /// A scale-up's new members are held in full, and then stay fenced until every client
    /// uses the new list (`confirmed`).
    #[test]
    fn new_members_stay_fenced_until_the_new_list_is_confirmed() {
        let until = at(NOW - 1);
        let members = [
            ready(0, "A", "c0"),
            ready(1, "B", "c1"),
            ready(2, "C", "c2"),
            held(3, "D", "c3", until),
        ];
        let obs = observed([
            (0, running("A", true, "c0")),
            (1, running("B", true, "c1")),
            (2, running("C", true, "c2")),
            (3, running("D", false, "c3")),
        ]);
        let unconfirmed = PlanInput {
            confirmed: 3,
            ..input(4, &members, at(NOW))
        };
        let p = plan(&unconfirmed, &obs);
        let m = p.members.iter().find(|m| m.slot == 3).unwrap();
        assert_eq!(m.state, MemberState::Held);
        assert!(
            m.message
                .as_deref()
                .unwrap()
                .contains("redlock.dev/clients-use-instances"),
            "{m:?}"
        );
        assert!(p.releases.is_empty());
        assert!(!p.awaiting_process, "no fast requeue while waiting for the user");
        let confirmed = plan(&input(4, &members, at(NOW)), &obs);
        assert_eq!(confirmed.releases, vec![(3, "D".to_owned())]);
    }

    // --- This process's own timing (docs/design.md §9.1) ---

    /// A hold recorded by another leader (whose clock ran 20 s behind, so its record ends 20 s
    /// early in real time) is timed again in full by this process: not released at its
    /// recorded end, but one full hold after this process first saw it.
    #[test]
    fn an_inherited_hold_is_timed_again_in_full() {
        let until = at(NOW - 5);
        let members = [held(0, "A", "c1", until)];
        let obs = observed([(0, running("A", false, "c1"))]);
        let fresh = ClusterTimers::default();
        let new_leader = PlanInput {
            timing: Timing {
                timers: &fresh,
                ..Timing::default()
            },
            ..input(1, &members, at(NOW))
        };
        let p = plan(&new_leader, &obs);
        assert!(p.releases.is_empty(), "{:?}", p.releases);
        let m = &p.members[0];
        assert_eq!(m.state, MemberState::Held);
        assert_eq!(m.held_until.as_ref().unwrap().0, hold_from_now());
        // The hold keeps its identity (its start), so the next reconcile finds its timer.
        assert_eq!(m.hold_started_at, started_for(until));
        assert!(
            m.message.as_deref().unwrap().contains("did not see it start"),
            "{m:?}"
        );
        assert_eq!(p.events.len(), 1);
        assert_eq!(p.events[0].reason, MemberReason::HoldExtended);

        // Timers kept as `reconcile` keeps them: released exactly one hold after first sight.
        let timers = fresh.next(hold_timer_keys(&p.members, HOLD), Reading::at(at(NOW)));
        let later = |now: Timestamp| PlanInput {
            timing: Timing {
                timers: &timers,
                ..Timing::default()
            },
            ..input(1, &p.members, now)
        };
        let before = plan(&later(at(NOW + 31)), &obs);
        assert!(before.releases.is_empty());
        assert!(before.events.is_empty(), "{:?}", before.events);
        let after = plan(&later(hold_from_now()), &obs);
        assert_eq!(after.releases, vec![(0, "A".to_owned())]);
    }

    /// The wall clock stepped 20 s forward after this process started the hold: the hold
    /// ends 20 s later on the wall clock, i.e. after a full hold of real time.
    #[test]
    fn a_forward_step_of_the_wall_clock_lengthens_running_holds() {
        let until = hold_from_now();
        let members = [held(0, "A", "c1", until)];
        let obs = observed([(0, running("A", false, "c1"))]);
        let base = input(1, &members, at(NOW + 25));
        let stepped = PlanInput {
            timing: Timing {
                skipped: secs(20),
                ..base.timing
            },
            ..input(1, &members, at(NOW + 25))
        };
        // Without the step the hold would end at `until` (< now + 25 s + step).
        let p = plan(&stepped, &obs);
        assert!(p.releases.is_empty());
        let want = until.checked_add(SignedDuration::from_secs(20)).unwrap();
        assert_eq!(p.members[0].held_until.as_ref().unwrap().0, want);
        assert!(p.members[0].message.as_deref().unwrap().contains("forward step"));
        assert_eq!(p.events[0].reason, MemberReason::HoldExtended);
        let end = PlanInput { now: want, ..stepped };
        assert_eq!(plan(&end, &obs).releases.len(), 1);
    }

    /// While the operator's clock may be too far off the API server's, a hold that has ended
    /// stays held and says why; the re-release of a `Ready` member left fenced waits too.
    #[test]
    fn releases_wait_while_the_clock_is_not_trusted() {
        let members = [held(0, "A", "c1", at(NOW - 1)), ready(1, "B", "c2")];
        let obs = observed([(0, running("A", false, "c1")), (1, running("B", false, "c2"))]);
        let base = input(2, &members, at(NOW));
        let blocked = PlanInput {
            timing: Timing {
                release_blocked: Some("clock off by 20 s"),
                ..base.timing
            },
            ..input(2, &members, at(NOW))
        };
        let p = plan(&blocked, &obs);
        assert!(p.releases.is_empty(), "{:?}", p.releases);
        assert_eq!(p.members[0].state, MemberState::Held);
        assert_eq!(
            p.members[0].message.as_deref(),
            Some("hold ended; release waits: clock off by 20 s")
        );
        assert_eq!(p.members[1].state, MemberState::Ready);
        let p = plan(&base, &obs);
        assert_eq!(p.releases, vec![(0, "A".to_owned()), (1, "B".to_owned())]);
    }

    /// A serving member whose clock jumped forward is fenced and held in full, with a
    /// ClockJump warning; a backward step is reported and changes nothing.
    #[test]
    fn a_member_clock_jump_fences_and_holds_a_serving_member() {
        let members = [ready(0, "A", "c1")];
        let jumped = SlotObservation {
            clock: Some(Verdict::JumpedForward { by: secs(60) }),
            ..running("A", true, "c1")
        };
        let p = plan(&input(1, &members, at(NOW)), &observed([(0, jumped)]));
        assert_eq!(p.fences, vec![(0, "A".to_owned())]);
        assert!(p.releases.is_empty());
        let m = &p.members[0];
        assert_eq!(m.state, MemberState::Held);
        assert_eq!(m.run_id.as_deref(), Some("A"));
        assert_eq!(m.held_until.as_ref().unwrap().0, hold_from_now());
        assert!(
            m.message
                .as_deref()
                .unwrap()
                .contains("clock jumped 60.000 s forward"),
            "{m:?}"
        );
        let reasons: Vec<_> = p.events.iter().map(|e| e.reason).collect();
        assert!(
            reasons.contains(&MemberReason::ClockJump) && p.events.iter().any(|e| e.warning),
            "{reasons:?}"
        );

        let back = SlotObservation {
            clock: Some(Verdict::SteppedBack { by: secs(60) }),
            ..running("A", true, "c1")
        };
        let p = plan(&input(1, &members, at(NOW)), &observed([(0, back)]));
        assert!(p.fences.is_empty());
        assert_eq!(p.members[0].state, MemberState::Ready);
        assert_eq!(p.events[0].reason, MemberReason::ClockStepBack);
    }

    // --- A process that outlived its pod (docs/design.md §9.5) ---

    fn zombie_answers(run: &str, enabled: bool) -> Option<Result<RedisInfo, String>> {
        Some(Ok(RedisInfo {
            run_id: run.into(),
            version: "7.0.15".into(),
            client_enabled: enabled,
            pod_uid: None,
            client_password_hashes: None,
        }))
    }

    /// Audit finding D: a scale-down 3 → 2 while slot 2's node is cut off, and its pod is
    /// force-deleted before the operator could fence it. Clients still told the list of 3
    /// reach the process where it runs: it is looked for there, fenced when found serving
    /// (the hold, and with it the shorter list, wait), and marked fenced when seen so.
    #[test]
    fn a_removed_members_process_that_outlives_its_pod_is_looked_for_and_fenced() {
        let members = [
            ready(0, "A", "c0"),
            ready(1, "B", "c1"),
            MemberStatus {
                pod_ip: Some("10.1.0.9".into()),
                ..ready(2, "C", "c2")
            },
        ];
        fn published(members: &[MemberStatus], now: Timestamp) -> PlanInput<'_> {
            PlanInput {
                published: 3,
                ..input(2, members, now)
            }
        }
        let vanished = |unstopped| {
            let mut o = observed([
                (0, running("A", true, "c0")),
                (1, running("B", true, "c1")),
                (2, missing()),
            ]);
            o.get_mut(&2).unwrap().unstopped = unstopped;
            o
        };
        // It does not answer the operator (the partition cuts the operator off too): the
        // fence is not proven, and the record keeps which process it was.
        let silent = observed([
            (0, running("A", true, "c0")),
            (1, running("B", true, "c1")),
            (2, unreachable("c2")),
        ]);
        let p = plan(&published(&members, at(NOW - 1)), &silent);
        assert_eq!(p.members[2].held_until, None);
        assert_eq!(p.members[2].run_id.as_deref(), Some("C"));
        // Then its pod is force-deleted.
        let p = plan(&published(&p.members, at(NOW)), &vanished(None));
        let m = &p.members[2];
        assert!(m.state.is_holding(), "{m:?}");
        assert_eq!(
            m.unstopped,
            Some(UnstoppedProcess {
                run_id: "C".into(),
                pod_ip: "10.1.0.9".into(),
                listener: None,
                fenced: false
            }),
            "{m:?}"
        );
        assert!(
            m.message.as_deref().unwrap().contains("never seen to stop"),
            "{m:?}"
        );

        // Found letting clients in where it ran: fenced there, the hold restarts.
        let later = at(NOW + 20);
        let p2 = plan(
            &published(&p.members, later),
            &vanished(zombie_answers("C", true)),
        );
        assert_eq!(p2.fences, vec![(2, "C".to_owned())]);
        assert!(
            p2.events
                .iter()
                .any(|e| e.reason == MemberReason::UnstoppedProcessFenced)
        );
        let m2 = &p2.members[2];
        assert!(
            m2.held_until.as_ref().unwrap().0 > m.held_until.as_ref().unwrap().0,
            "{m2:?}"
        );
        assert!(!m2.unstopped.as_ref().unwrap().fenced);
        // The shorter list waits for that hold.
        let limits = crate::resize::after_plan(
            crate::resize::Limits {
                published: 3,
                confirmed: 2,
                token: None,
            },
            2,
            &p2.members,
            &vanished(None),
            at(NOW + 40),
        );
        assert_eq!(limits.published, 3);

        // Seen fenced: it grants nothing, and is not looked for any more.
        let p3 = plan(
            &published(&p2.members, at(NOW + 21)),
            &vanished(zombie_answers("C", false)),
        );
        assert!(p3.fences.is_empty());
        assert!(p3.members[2].unstopped.as_ref().unwrap().fenced);
        assert_eq!(p3.members[2].held_until, m2.held_until);
    }

    #[test]
    fn a_pod_that_vanishes_while_its_process_runs_leaves_an_unstopped_process() {
        let members = [MemberStatus {
            pod_ip: Some("10.1.0.7".into()),
            ..ready(0, "A", "c1")
        }];
        let p = plan(&input(1, &members, at(NOW)), &observed([(0, missing())]));
        let m = &p.members[0];
        assert_eq!(m.state, MemberState::Lost);
        assert_eq!(
            m.unstopped,
            Some(UnstoppedProcess {
                run_id: "A".into(),
                pod_ip: "10.1.0.7".into(),
                listener: None,
                fenced: false
            })
        );
        assert!(
            m.message.as_deref().unwrap().contains("looked for at 10.1.0.7"),
            "{m:?}"
        );
        assert_eq!(p.create_pods, vec![0]);
        // A container seen stopped is a process seen to stop: nothing to look for.
        let stopped = SlotObservation {
            pod: PodState::NotRunning {
                reason: "Error".into(),
            },
            ..Default::default()
        };
        let p = plan(&input(1, &members, at(NOW)), &observed([(0, stopped)]));
        assert_eq!(p.members[0].unstopped, None);
        // A pod the control plane marked failed (its node deleted) without any kubelet
        // reporting its container stopped: not a process seen to stop either.
        let marked_failed = SlotObservation {
            stop_unconfirmed: true,
            ..finished("Failed (DeletionByPodGC)")
        };
        let p = plan(&input(1, &members, at(NOW)), &observed([(0, marked_failed)]));
        assert_eq!(
            p.members[0].unstopped.as_ref().map(|u| u.run_id.as_str()),
            Some("A")
        );
        // Finished with its container seen terminated: stopped.
        let p = plan(&input(1, &members, at(NOW)), &observed([(0, finished("Failed"))]));
        assert_eq!(p.members[0].unstopped, None);
    }

    /// The mode a process listens in is recorded with its address, and goes with it into the
    /// unstopped record: during a TLS toggle's rollout a process that outlives its pod listens
    /// in the mode its pod was built with, not the spec's.
    #[test]
    fn the_listener_is_recorded_with_the_address_and_kept_for_an_unstopped_process() {
        let tls = |secret: Option<&str>| SlotObservation {
            pod_ip: Some("10.1.0.7".parse().unwrap()),
            tls_secret: secret.map(str::to_owned),
            ..running("A", true, "c1")
        };
        let old_tls = Some(Listener {
            tls_secret: Some("old-tls".into()),
        });
        // A record without a listener (made before it was kept) gets the one of its address.
        let members = [MemberStatus {
            pod_ip: Some("10.1.0.7".into()),
            ..ready(0, "A", "c1")
        }];
        let p = plan(
            &input(1, &members, at(NOW)),
            &observed([(0, tls(Some("old-tls")))]),
        );
        assert_eq!(p.members[0].listener, old_tls);
        // A plain process: a listener without a Secret (not the same as unknown).
        let p_plain = plan(&input(1, &members, at(NOW)), &observed([(0, tls(None))]));
        assert_eq!(p_plain.members[0].listener, Some(Listener::default()));
        // Without an answer at an address, nothing is recorded about how it listens.
        let silent = SlotObservation {
            redis: None,
            ..tls(Some("old-tls"))
        };
        let p_silent = plan(&input(1, &members, at(NOW)), &observed([(0, silent)]));
        assert_eq!(p_silent.members[0].listener, None);
        // The pod vanishes: the process is looked for in the mode it was recorded in.
        let p = plan(&input(1, &p.members, at(NOW + 1)), &observed([(0, missing())]));
        let u = p.members[0].unstopped.as_ref().expect("looked for");
        assert_eq!(u.listener, old_tls);
    }

    fn with_unstopped(m: MemberStatus, fenced: bool) -> MemberStatus {
        MemberStatus {
            unstopped: Some(UnstoppedProcess {
                run_id: "A".into(),
                pod_ip: "10.1.0.7".into(),
                listener: None,
                fenced,
            }),
            ..m
        }
    }

    #[test]
    fn an_unstopped_process_found_serving_is_fenced_and_the_hold_restarts() {
        // The replacement B has served its hold; the old process A still answers at its
        // address and lets clients in.
        let members = [with_unstopped(held(0, "B", "c2", at(NOW - 1)), false)];
        let obs = SlotObservation {
            unstopped: zombie_answers("A", true),
            ..running("B", false, "c2")
        };
        let p = plan(&input(1, &members, at(NOW)), &observed([(0, obs)]));
        assert!(p.releases.is_empty(), "{:?}", p.releases);
        assert_eq!(p.fences, vec![(0, "A".to_owned())]);
        let m = &p.members[0];
        assert_eq!(m.held_until.as_ref().unwrap().0, hold_from_now());
        assert!(!m.unstopped.as_ref().unwrap().fenced);
        assert_eq!(p.events[0].reason, MemberReason::UnstoppedProcessFenced);

        // Seen fenced at the next probe: recorded, and the hold runs out without a warning.
        let obs = SlotObservation {
            unstopped: zombie_answers("A", false),
            ..running("B", false, "c2")
        };
        let p2 = plan(&input(1, &p.members, at(NOW + 1)), &observed([(0, obs.clone())]));
        assert!(p2.members[0].unstopped.as_ref().unwrap().fenced);
        let p3 = plan(&input(1, &p2.members, hold_from_now()), &observed([(0, obs)]));
        assert_eq!(p3.releases, vec![(0, "B".to_owned())]);
        assert!(
            p3.events
                .iter()
                .all(|e| e.reason != MemberReason::ReleaseAssumesProcessGone)
        );
        assert_eq!(p3.members[0].unstopped, None);
    }

    #[test]
    fn a_replacement_lost_in_turn_keeps_looking_for_the_earlier_process() {
        // Released relying on A being dead; then B, the replacement, is killed (its pod
        // stays): the new hold still looks for A, and finding it serving fences it.
        let members = [with_unstopped(ready(0, "B", "c2"), false)];
        let restarted = SlotObservation {
            unstopped: Some(Err("connect timed out".into())),
            ..running("C", false, "c3")
        };
        let p = plan(&input(1, &members, at(NOW)), &observed([(0, restarted)]));
        let m = &p.members[0];
        assert_eq!(m.state, MemberState::Held);
        assert_eq!(m.run_id.as_deref(), Some("C"));
        assert_eq!(m.unstopped.as_ref().map(|u| u.run_id.as_str()), Some("A"));
        assert!(
            m.message
                .as_deref()
                .unwrap()
                .contains("still looked for at 10.1.0.7"),
            "{m:?}"
        );
        let found = SlotObservation {
            unstopped: zombie_answers("A", true),
            ..running("C", false, "c3")
        };
        let p2 = plan(&input(1, &p.members, at(NOW + 1)), &observed([(0, found)]));
        assert_eq!(p2.fences, vec![(0, "A".to_owned())]);
        assert!(p2.releases.is_empty());

        // B's pod vanished unseen as well: B is looked for now, and A's end is told.
        let b_vanished = [MemberStatus {
            pod_ip: Some("10.1.0.8".into()),
            ..with_unstopped(ready(0, "B", "c2"), false)
        }];
        let p = plan(&input(1, &b_vanished, at(NOW)), &observed([(0, missing())]));
        assert_eq!(
            p.members[0].unstopped.as_ref().map(|u| u.run_id.as_str()),
            Some("B")
        );
        let e = p
            .events
            .iter()
            .find(|e| e.reason == MemberReason::ReleaseAssumesProcessGone)
            .expect("told");
        assert!(e.message.contains("process A"), "{}", e.message);

        // An earlier process already seen fenced is not looked for again.
        let members = [with_unstopped(ready(0, "B", "c2"), true)];
        let p = plan(
            &input(1, &members, at(NOW)),
            &observed([(0, running("C", false, "c3"))]),
        );
        assert_eq!(p.members[0].unstopped, None);
    }

    #[test]
    fn a_release_without_finding_the_unstopped_process_says_what_it_relies_on() {
        let members = [with_unstopped(held(0, "B", "c2", at(NOW - 1)), false)];
        let obs = SlotObservation {
            unstopped: Some(Err("connect timed out".into())),
            ..running("B", false, "c2")
        };
        let p = plan(&input(1, &members, at(NOW)), &observed([(0, obs)]));
        assert_eq!(p.releases, vec![(0, "B".to_owned())]);
        let e = p
            .events
            .iter()
            .find(|e| e.reason == MemberReason::ReleaseAssumesProcessGone)
            .expect("told");
        assert!(e.warning);
        assert!(
            e.message
                .contains("nothing answered at 10.1.0.7 (connect timed out)"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("relies on that process being dead"),
            "{}",
            e.message
        );
        // Before the hold ends it is only carried along.
        let members = [with_unstopped(held(0, "B", "c2", at(NOW + 5)), false)];
        let obs = SlotObservation {
            unstopped: Some(Err("connect timed out".into())),
            ..running("B", false, "c2")
        };
        let p = plan(&input(1, &members, at(NOW)), &observed([(0, obs)]));
        assert!(p.releases.is_empty() && p.events.is_empty());
        assert!(p.members[0].unstopped.is_some());
    }

    #[test]
    fn a_process_released_past_is_still_looked_for_and_fenced_with_its_slot_when_it_answers() {
        // Released relying on A being dead (nothing answered at its address): the record
        // keeps looking for it.
        let members = [with_unstopped(held(0, "B", "c2", at(NOW - 1)), false)];
        let unreachable = SlotObservation {
            unstopped: Some(Err("connect timed out".into())),
            ..running("B", false, "c2")
        };
        let p = plan(&input(1, &members, at(NOW)), &observed([(0, unreachable)]));
        assert_eq!(p.releases, vec![(0, "B".to_owned())]);
        let released = &p.members[0];
        assert_eq!(released.state, MemberState::Ready);
        assert!(!released.unstopped.as_ref().unwrap().fenced, "{released:?}");
        assert!(
            released
                .message
                .as_deref()
                .unwrap()
                .contains("still looked for at 10.1.0.7"),
            "{released:?}"
        );

        // Still nothing there: B serves on, A is looked for again.
        let quiet = SlotObservation {
            unstopped: Some(Err("connect timed out".into())),
            ..running("B", true, "c2")
        };
        let p2 = plan(&input(1, &p.members, at(NOW + 1)), &observed([(0, quiet)]));
        assert_eq!(p2.members[0].state, MemberState::Ready);
        assert!(p2.fences.is_empty() && p2.events.is_empty());
        assert!(p2.members[0].unstopped.is_some());

        // A answers and lets clients in: both are fenced, B is held in full from now.
        let back = SlotObservation {
            unstopped: zombie_answers("A", true),
            ..running("B", true, "c2")
        };
        let p3 = plan(&input(1, &p2.members, at(NOW + 2)), &observed([(0, back)]));
        assert_eq!(p3.fences, vec![(0, "A".to_owned()), (0, "B".to_owned())]);
        let m = &p3.members[0];
        assert_eq!(m.state, MemberState::Held);
        assert_eq!(m.run_id.as_deref(), Some("B"));
        assert_eq!(
            m.held_until.as_ref().unwrap().0,
            held_until(at(NOW + 2), input(1, &p2.members, at(NOW + 2)).hold)
        );
        assert!(!m.unstopped.as_ref().unwrap().fenced);
        assert!(
            p3.events
                .iter()
                .any(|e| e.reason == MemberReason::UnstoppedProcessFenced && e.warning)
        );

        // A seen fenced while B serves: it grants nothing, and is no longer looked for.
        let fenced = SlotObservation {
            unstopped: zombie_answers("A", false),
            ..running("B", true, "c2")
        };
        let p4 = plan(&input(1, &p2.members, at(NOW + 2)), &observed([(0, fenced)]));
        assert_eq!(p4.members[0].state, MemberState::Ready);
        assert_eq!(p4.members[0].unstopped, None);
        assert!(p4.fences.is_empty());
    }

    mod fenced_for_maintenance {
        use super::*;

        fn fenced(reason: &str) -> BTreeMap<i32, String> {
            [(0, reason.to_owned())].into()
        }

        fn plan_with(
            members: &[MemberStatus],
            request: &BTreeMap<i32, String>,
            obs: SlotObservation,
        ) -> Plan {
            plan(
                &PlanInput {
                    maintenance: request,
                    ..input(1, members, at(NOW))
                },
                &observed([(0, obs)]),
            )
        }

        #[test]
        fn a_serving_member_is_fenced_now_and_held_in_full() {
            let request = fenced("kernel upgrade");
            let p = plan_with(&[ready(0, "A", "c1")], &request, running("A", true, "c1"));
            let m = &p.members[0];
            assert_eq!(m.state, MemberState::Held);
            assert_eq!(m.maintenance.as_deref(), Some("kernel upgrade"));
            assert_eq!(m.held_until.as_ref().unwrap().0, hold_from_now());
            assert_eq!(m.run_id.as_deref(), Some("A"));
            assert_eq!(p.fences, vec![(0, "A".to_owned())]);
            assert!(p.releases.is_empty());
            assert!(
                p.events
                    .iter()
                    .any(|e| e.reason == MemberReason::FencedForMaintenance && e.warning)
            );
        }

        #[test]
        fn a_ready_member_left_fenced_by_a_crash_is_not_released_but_held() {
            let p = plan_with(&[ready(0, "A", "c1")], &fenced("x"), running("A", false, "c1"));
            assert_eq!(p.members[0].state, MemberState::Held);
            assert!(p.releases.is_empty());
            assert_eq!(p.fences, vec![(0, "A".to_owned())]);
        }

        #[test]
        fn an_unanswering_member_is_marked_but_not_counted_fenced_until_it_answers() {
            let r = MemberStatus {
                pod_ip: Some("10.0.0.1".into()),
                ..ready(0, "A", "c1")
            };
            let p = plan_with(&[r], &fenced("x"), unreachable("c1"));
            let m = &p.members[0];
            assert_eq!(m.state, MemberState::Ready, "nothing proves it is shut out");
            assert_eq!(m.maintenance.as_deref(), Some("x"));
            assert!(m.message.as_deref().unwrap().contains("not fenced yet"), "{m:?}");
            assert!(p.fences.is_empty() && p.releases.is_empty());
            // It answers at the next probe: fenced then, held in full from then.
            let later = plan_with(&p.members, &fenced("x"), running("A", true, "c1"));
            assert_eq!(later.fences, vec![(0, "A".to_owned())]);
            assert_eq!(later.members[0].state, MemberState::Held);
            assert_eq!(later.members[0].held_until.as_ref().unwrap().0, hold_from_now());
            // Or its pod is force-deleted first: its process is looked for, as for any member.
            let gone = plan_with(&p.members, &fenced("x"), missing());
            assert_eq!(gone.members[0].state, MemberState::Lost);
            assert_eq!(gone.members[0].unstopped.as_ref().unwrap().run_id, "A");
            assert_eq!(gone.members[0].maintenance.as_deref(), Some("x"));
        }

        #[test]
        fn a_process_still_looked_for_is_kept_when_the_member_is_fenced() {
            let mut r = ready(0, "B", "c2");
            r.unstopped = Some(UnstoppedProcess {
                run_id: "A".into(),
                pod_ip: "10.0.0.9".into(),
                listener: None,
                fenced: false,
            });
            let p = plan_with(&[r], &fenced("x"), running("B", true, "c2"));
            assert_eq!(p.members[0].state, MemberState::Held);
            assert_eq!(p.members[0].unstopped.as_ref().unwrap().run_id, "A");
        }

        #[test]
        fn a_fenced_member_that_does_not_answer_after_its_hold_is_not_awaited() {
            let mut h = held(0, "A", "c1", at(NOW - 1));
            h.maintenance = Some("x".into());
            let p = plan_with(std::slice::from_ref(&h), &fenced("x"), unreachable("c1"));
            assert!(!p.awaiting_process, "a 100 ms loop for the whole maintenance");
            let p = plan_with(&[h], &BTreeMap::new(), unreachable("c1"));
            assert!(p.awaiting_process);
        }

        #[test]
        fn a_removed_slot_loses_its_mark() {
            let mut h = held(1, "A", "c1", at(NOW + 10));
            h.maintenance = Some("x".into());
            let request: BTreeMap<i32, String> = [(1, "x".to_owned())].into();
            let p = plan(
                &PlanInput {
                    maintenance: &request,
                    ..input(1, std::slice::from_ref(&h), at(NOW))
                },
                &observed([(0, running("Z", true, "c0")), (1, missing())]),
            );
            let m = p.members.iter().find(|m| m.slot == 1).unwrap();
            assert_eq!(m.maintenance, None);
        }

        #[test]
        fn a_held_member_stays_held_after_its_hold_while_fenced() {
            let over = at(NOW - 1);
            let p = plan_with(
                &[held(0, "A", "c1", over)],
                &fenced("disk"),
                running("A", false, "c1"),
            );
            let m = &p.members[0];
            assert_eq!(m.state, MemberState::Held);
            assert!(p.releases.is_empty());
            assert!(
                m.message.as_deref().unwrap().contains("maintenance (disk)"),
                "{m:?}"
            );
            // Someone turns its client user on by hand: fenced again, held in full.
            let p = plan_with(
                &[held(0, "A", "c1", over)],
                &fenced("disk"),
                running("A", true, "c1"),
            );
            assert_eq!(p.fences, vec![(0, "A".to_owned())]);
            assert_eq!(p.members[0].held_until.as_ref().unwrap().0, hold_from_now());
        }

        #[test]
        fn a_restart_during_maintenance_restarts_the_hold_and_stays_fenced() {
            let mut h = held(0, "A", "c1", at(NOW + 10));
            h.maintenance = Some("x".into());
            let p = plan_with(&[h], &fenced("x"), running("B", false, "c2"));
            let m = &p.members[0];
            assert_eq!((m.state, m.run_id.as_deref()), (MemberState::Held, Some("B")));
            assert_eq!(m.maintenance.as_deref(), Some("x"));
            assert_eq!(m.held_until.as_ref().unwrap().0, hold_from_now());
        }

        #[test]
        fn unfencing_lets_the_hold_end_as_it_would_have() {
            let none = BTreeMap::new();
            // Hold still running: stays held, told when it serves again.
            let mut h = held(0, "A", "c1", at(NOW + 10));
            h.maintenance = Some("x".into());
            let p = plan_with(std::slice::from_ref(&h), &none, running("A", false, "c1"));
            assert_eq!(p.members[0].state, MemberState::Held);
            assert_eq!(p.members[0].maintenance, None);
            assert!(p.releases.is_empty());
            let e = p
                .events
                .iter()
                .find(|e| e.reason == MemberReason::Unfenced)
                .unwrap();
            assert!(e.message.contains("once its hold ends"), "{}", e.message);
            // Hold over: released at once.
            h.held_until = micro(at(NOW - 1));
            h.hold_started_at = started_for(at(NOW - 1));
            let p = plan_with(&[h], &none, running("A", false, "c1"));
            assert_eq!(p.members[0].state, MemberState::Ready);
            assert_eq!(p.releases, vec![(0, "A".to_owned())]);
            let e = p
                .events
                .iter()
                .find(|e| e.reason == MemberReason::Unfenced)
                .unwrap();
            assert!(e.message.ends_with("again now"), "{}", e.message);
        }

        #[test]
        fn starting_and_lost_members_are_marked_and_never_released_while_fenced() {
            let p = plan_with(&[starting(0)], &fenced("x"), running("A", false, "c1"));
            assert_eq!(p.members[0].state, MemberState::Held);
            assert_eq!(p.members[0].maintenance.as_deref(), Some("x"));
            let p = plan_with(&[lost(0, at(NOW - 1))], &fenced("x"), running("A", false, "c1"));
            assert_eq!(p.members[0].state, MemberState::Held);
            assert!(p.releases.is_empty());
        }
    }
}
