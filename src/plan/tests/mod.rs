use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::SignedDuration;

use super::*;
use crate::clock::Reading;
use crate::crd::UnstoppedProcess;
use crate::hold::held_until;
use crate::hold_timers::{ClusterTimers, TimerKey};
use crate::member_clock::Verdict;
use crate::observe::RedisInfo;
use crate::reasons::MemberReason;

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

fn with_unstopped(m: MemberStatus, fenced: bool) -> MemberStatus {
    MemberStatus {
        unstopped: Some(UnstoppedProcess {
            run_id: "A".into(),
            pod_ip: "10.1.0.7".into(),
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

    fn plan_with(members: &[MemberStatus], request: &BTreeMap<i32, String>, obs: SlotObservation) -> Plan {
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
