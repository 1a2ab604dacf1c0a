//! The planner's unit tests, one file per member state they exercise; here, what they share:
//! records and observations to plan from, the injected clock, and [`Case`], one slot's
//! record and observation in and what must come out (checked stable on a re-plan).

mod clock;
mod fence_seen;
mod fenced_unrecorded;
mod held;
mod maintenance;
mod name_taken;
mod ready;
mod refused;
mod removed;
mod starting;
mod tampered;
mod unstopped;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::SignedDuration;

use super::*;
use crate::clock::Reading;
use crate::clock::member::Verdict;
use crate::clock::timers::{ClusterTimers, TimerKey};
use crate::crd::model::Slot;
use crate::crd::reasons::MemberReason;
use crate::crd::{ClockRecord, Listener, UnstoppedProcess};
use crate::decide::observe::{KubeletAnswer, Probe, RedisInfo, UnstoppedSearch};
use crate::decide::plan::holds::hold_start;

/// No process asserted dead.
static NOTHING_ASSERTED: BTreeSet<String> = BTreeSet::new();

/// No slot fenced on purpose.
static NO_MAINTENANCE: BTreeMap<Slot, String> = BTreeMap::new();
use crate::hold::held_until;

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

use crate::fixtures::running;

/// A running container whose Redis does not answer (SIGSTOP, overload, network).
fn unreachable(container: &str) -> SlotObservation {
    SlotObservation {
        pod: PodState::Running {
            container_id: Some(container.into()),
            ready: false,
            terminating: false,
        },
        probe: Probe::Failed("connection refused".into()),
        ..Default::default()
    }
}

/// A node that stopped reporting: the kubelet's last word was "running", nothing answers.
fn node_lost(container: &str) -> SlotObservation {
    SlotObservation {
        probe: Probe::Failed("timed out".into()),
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

/// The planner as the reconcile runs it once `act` has written the ledger: unless `input`
/// brings a ledger of its own, one that names every process answering (`act` writes it as
/// soon as a process is identified, long before its hold ends). The ledger's own rules are
/// tested with [`super::plan`] itself.
fn plan(input: &PlanInput<'_>, observed: &BTreeMap<Slot, SlotObservation>) -> Plan {
    if input.ledger.is_some() {
        return super::plan(input, observed);
    }
    let ledger = crate::fixtures::ledger_naming_answering(observed);
    super::plan(
        &PlanInput {
            ledger: Some(&ledger),
            ..*input
        },
        observed,
    )
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
        gone_asserted: &NOTHING_ASSERTED,
        ledger: None,
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

/// `input` with the releases this process owes (decided, not yet seen serving).
fn with_owed<'a>(input: PlanInput<'a>, owed: &'a [(Slot, String)]) -> PlanInput<'a> {
    PlanInput {
        timing: Timing {
            owed_releases: owed,
            ..input.timing
        },
        ..input
    }
}

fn observed(slots: impl IntoIterator<Item = (i32, SlotObservation)>) -> BTreeMap<Slot, SlotObservation> {
    slots.into_iter().map(|(s, o)| (Slot::new(s), o)).collect()
}

fn reasons(p: &Plan) -> Vec<(i32, MemberReason)> {
    p.events.iter().map(|e| (e.slot.index(), e.reason)).collect()
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
    /// A release this operator process decided and has not seen serving
    /// (`Timing::owed_releases`).
    owed: Option<&'static str>,
    /// (reason, warning) in order.
    events: &'static [(MemberReason, bool)],
    next: Option<Duration>,
}

impl Case {
    fn new(name: &'static str, prev: Option<MemberStatus>, obs: SlotObservation, want: MemberStatus) -> Case {
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
            owed: None,
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
    fn owed(self, run: &'static str) -> Case {
        Case {
            owed: Some(run),
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
    let owed: Vec<(Slot, String)> = c.owed.map(|r| (Slot::new(0), r.to_owned())).into_iter().collect();
    let owed: &'static [(Slot, String)] = Vec::leak(owed);
    let members: &'static [MemberStatus] = Vec::leak(members);
    let p = plan(&with_owed(input(1, members, c.now), owed), &obs);

    assert_eq!(p.members.len(), 1, "{name}: one record");
    // Whether a probe saw the fence in place has a table of its own (`fence_seen`); these
    // cases are about state, holds and actions.
    let got = &MemberStatus {
        fence_seen_at: None,
        ..p.members[0].clone()
    };
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
        if c.create { vec![Slot::new(0)] } else { vec![] },
        "{name}: create"
    );
    assert_eq!(
        p.delete_pods,
        if c.delete { vec![Slot::new(0)] } else { vec![] },
        "{name}: delete"
    );
    assert_eq!(
        p.releases,
        c.release
            .map(|r| (Slot::new(0), r.to_owned()))
            .into_iter()
            .collect::<Vec<_>>(),
        "{name}: releases"
    );
    assert_eq!(
        p.fences,
        c.fence
            .map(|r| (Slot::new(0), r.to_owned()))
            .into_iter()
            .collect::<Vec<_>>(),
        "{name}: fences"
    );
    let events: Vec<_> = p.events.iter().map(|e| (e.reason, e.warning)).collect();
    assert_eq!(events, c.events, "{name}: events");
    for e in &p.events {
        assert_eq!(e.slot, Slot::new(0), "{name}: event slot");
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
    assert_eq!(
        plan(&with_owed(input(1, members, c.now), owed), &obs),
        p,
        "{name}: deterministic"
    );
    // Planning again from what was just written, with nothing changed, changes no state,
    // run id, hold or `since`, and tells nothing new. A fence did change something: the
    // process no longer lets clients in.
    let mut obs = obs;
    if !p.fences.is_empty() {
        for o in obs.values_mut() {
            if let Some(r) = o.probe.answered_mut() {
                r.client_enabled = false;
            }
        }
    }
    // What the reconcile owes then: the releases just decided (`OwedReleases::owe`).
    let again_members: &'static [MemberStatus] = Vec::leak(p.members.clone());
    let again_owed: &'static [(Slot, String)] = Vec::leak(p.releases.clone());
    let again = plan(&with_owed(input(1, again_members, c.now), again_owed), &obs);
    let strip = |m: &MemberStatus| MemberStatus {
        message: None,
        fence_seen_at: None,
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
