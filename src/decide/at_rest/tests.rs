//! Which clusters may rest, and what wakes them: every condition that keeps a cluster busy,
//! one at a time, from a steady cluster that rests.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::clock::member::Verdict;
use crate::crd::reasons::MemberReason;
use crate::crd::{ClockRecord, HoldPolicy, MemberStatus, RedlockClusterStatus};
use crate::decide::observe::Probe;
use crate::decide::plan::{MemberEvent, Plan};
use crate::fixtures::{cluster, running};

fn access() -> AdminAccess {
    AdminAccess {
        admin_user: "redlock-admin".into(),
        admin_password: "secret".into(),
        admin_fallback_password: None,
        client_user: "redlock-client".into(),
        port: 6379,
        timeout: Duration::from_millis(500),
        tls_ca: None,
    }
}

fn member(slot: i32) -> MemberStatus {
    serde_json::from_value(serde_json::json!({
        "name": format!("locks-{slot}"),
        "slot": slot,
        "state": "Ready",
        "runId": format!("r{slot}"),
    }))
    .unwrap()
}

fn observed(slot: i32) -> SlotObservation {
    let mut o = running(&format!("r{slot}"), true, &format!("c{slot}"));
    o.pod_ip = Some(format!("10.0.0.{}", slot + 1).parse().unwrap());
    o.clock = Some(Verdict::Steady);
    o
}

/// Three members serving, nothing planned: the state a cluster spends its life in.
struct Steady {
    plan: Plan,
    status: RedlockClusterStatus,
    observed: BTreeMap<Slot, SlotObservation>,
    quiet: bool,
    release_blocked: bool,
    clocks_compared: bool,
}

impl Steady {
    fn new() -> Self {
        Self {
            plan: Plan::default(),
            status: RedlockClusterStatus {
                published_instances: Some(3),
                confirmed_instances: Some(3),
                updated_instances: Some(3),
                ready_instances: Some(3),
                members: (0..3).map(member).collect(),
                ..Default::default()
            },
            observed: (0..3).map(|s| (Slot::new(s), observed(s))).collect(),
            quiet: true,
            release_blocked: false,
            clocks_compared: true,
        }
    }

    fn rest(&self) -> Result<Rest, &'static str> {
        rest_of(
            &cluster(serde_json::json!({"instances": 3})),
            &access(),
            &self.plan,
            &self.status,
            &Settled {
                instances: 3,
                observed: &self.observed,
                quiet: self.quiet,
                release_blocked: self.release_blocked,
                clocks_compared: self.clocks_compared,
                ttl: None,
            },
            Duration::from_secs(30),
        )
    }

    fn slot(&mut self, slot: i32) -> &mut SlotObservation {
        self.observed.get_mut(&Slot::new(slot)).unwrap()
    }
}

#[test]
fn a_steady_cluster_rests_until_its_resync_with_each_member_as_probed() {
    let rest = Steady::new().rest().expect("a steady cluster rests");
    assert_eq!(rest.until_reconcile, RESYNC);
    assert_eq!(rest.max_lock_ttl, Duration::from_secs(30));
    assert_eq!(rest.cluster.name, "locks");
    assert_eq!(rest.members.len(), 3);
    for (i, m) in rest.members.iter().enumerate() {
        assert_eq!(m.slot, Slot::new(i as i32));
        assert_eq!(m.ip.to_string(), format!("10.0.0.{}", i + 1));
        assert_eq!(m.seen.run_id, format!("r{i}"));
        assert!(m.seen.client_enabled);
        assert!(m.access.is_none(), "reached as the cluster's access says");
    }
}

#[test]
fn a_member_built_for_another_client_user_is_probed_as_its_pod_was_built() {
    let mut s = Steady::new();
    s.slot(1).client_user = Some("default".into());
    let rest = s.rest().unwrap();
    assert_eq!(rest.members[1].access.as_ref().unwrap().client_user, "default");
    assert!(rest.members[0].access.is_none());
}

#[test]
fn anything_pending_or_timed_keeps_the_cluster_busy() {
    type Change = fn(&mut Steady);
    let event = MemberEvent {
        slot: Slot::new(0),
        reason: MemberReason::InstanceReleased,
        message: String::new(),
        warning: false,
    };
    let cases: Vec<(&str, Change)> = vec![
        ("not quiet", |s| s.quiet = false),
        ("releases blocked", |s| s.release_blocked = true),
        ("a clock not compared with its record", |s| {
            s.clocks_compared = false
        }),
        ("a pod to create", |s| s.plan.create_pods.push(Slot::new(3))),
        ("a pod to delete", |s| s.plan.delete_pods.push(Slot::new(2))),
        ("a fence", |s| s.plan.fences.push((Slot::new(0), "r0".into()))),
        ("a release", |s| s.plan.releases.push((Slot::new(0), "r0".into()))),
        ("a process awaited", |s| s.plan.awaiting_process = true),
        ("a hold running", |s| {
            s.plan.next_hold_end = Some(Duration::from_secs(5))
        }),
        ("a lowering pending", |s| {
            s.status.hold = Some(HoldPolicy {
                max_lock_ttl: Duration::from_secs(30).into(),
                clock_drift_factor: 0.01,
                hold_margin: Duration::from_secs(1).into(),
                duration: Duration::from_secs(32).into(),
                published_max_lock_ttl: None,
                lowers_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    k8s_openapi::jiff::Timestamp::now(),
                )),
            })
        }),
        ("a resize published", |s| s.status.published_instances = Some(4)),
        ("a resize unconfirmed", |s| s.status.confirmed_instances = Some(2)),
        ("a rollout", |s| s.status.updated_instances = Some(2)),
        ("an unready member", |s| s.status.ready_instances = Some(2)),
        ("a member held", |s| {
            s.status.members[1].state = MemberState::Held;
        }),
        ("a member starting", |s| {
            s.status.members[1].state = MemberState::Starting;
        }),
        ("a member fenced for maintenance", |s| {
            s.status.members[1].maintenance = Some("drain".into());
        }),
        ("a member record missing", |s| {
            s.status.members.pop();
        }),
        ("a pod missing", |s| {
            s.observed.remove(&Slot::new(2));
        }),
        ("a pod beyond the spec", |s| {
            s.observed.insert(Slot::new(3), observed(3));
        }),
        ("a pod not ready", |s| {
            s.slot(0).pod = PodState::Running {
                container_id: None,
                ready: false,
                terminating: false,
            }
        }),
        ("a pod terminating", |s| {
            s.slot(0).pod = PodState::Running {
                container_id: None,
                ready: true,
                terminating: true,
            }
        }),
        ("a probe failed", |s| {
            s.slot(2).probe = Probe::Failed("refused".into())
        }),
        ("a foreign process", |s| {
            s.slot(2).probe = Probe::ForeignProcess("another pod's".into())
        }),
        ("a fenced process", |s| {
            if let Probe::Answered(i) = &mut s.slot(2).probe {
                i.client_enabled = false;
            }
        }),
        ("another process than on record", |s| {
            if let Probe::Answered(i) = &mut s.slot(2).probe {
                i.run_id = "r9".into();
            }
        }),
        ("a clock not judged", |s| s.slot(1).clock = None),
        ("a clock drifting", |s| {
            s.slot(1).clock = Some(Verdict::Drifting {
                ratio_ppm: 50_000,
                over: Duration::from_secs(30),
            })
        }),
        ("a clock stepped back", |s| {
            s.slot(1).clock = Some(Verdict::SteppedBack {
                by: Duration::from_secs(2),
            })
        }),
    ];
    for (what, change) in cases {
        let mut s = Steady::new();
        change(&mut s);
        assert!(s.rest().is_err(), "{what}: rested");
    }
    let mut with_event = Steady::new();
    with_event.plan.events.push(event);
    assert!(with_event.rest().is_err(), "an event: rested");
    let mut unstopped = Steady::new();
    unstopped.status.members[0].unstopped =
        Some(serde_json::from_value(serde_json::json!({"runId": "old", "podIP": "10.0.0.9"})).unwrap());
    assert!(unstopped.rest().is_err(), "an unstopped process: rested");
}

fn info(run: &str, enabled: bool) -> RedisInfo {
    RedisInfo {
        run_id: run.into(),
        version: "7.0.15".into(),
        client_enabled: enabled,
        pod_uid: Some("pod-1".into()),
        client_password_hashes: Some(vec!["#aa".into()]),
        admin_password_hashes: Some(vec!["#bb".into()]),
        deviations: Vec::new(),
    }
}

fn record(offset: i64) -> ClockRecord {
    ClockRecord {
        run_id: "r0".into(),
        offset_low_millis: offset,
        offset_high_millis: offset + 1,
        read_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ),
    }
}

#[test]
fn a_probe_wakes_the_cluster_on_anything_a_reconcile_acts_on() {
    let seen = info("r0", true);
    let m = RestingMember {
        slot: Slot::new(0),
        ip: "10.0.0.1".parse().unwrap(),
        access: None,
        seen: Seen::of(&seen),
        clock_record: Some(record(0)),
    };
    let steady = Some(Verdict::Steady);
    assert_eq!(look(&m, &Ok(seen.clone()), steady.as_ref(), None), Look::Same);
    assert_eq!(
        look(&m, &Ok(seen.clone()), steady.as_ref(), Some(&record(0))),
        Look::Same,
        "the record a reconcile would keep is the one on record"
    );
    assert!(
        matches!(
            look(&m, &Ok(seen.clone()), steady.as_ref(), Some(&record(1))),
            Look::Changed(_)
        ),
        "a record due to be written again"
    );
    let changed = |probe: Result<RedisInfo, String>, clock: Option<Verdict>| {
        matches!(look(&m, &probe, clock.as_ref(), None), Look::Changed(_))
    };
    assert!(changed(Err("connection refused".into()), None), "no answer");
    assert!(changed(Ok(info("r1", true)), steady), "a new process");
    assert!(changed(Ok(info("r0", false)), steady), "fenced behind our back");
    let mut other = seen.clone();
    other.client_password_hashes = Some(vec!["#aa".into(), "#cc".into()]);
    assert!(changed(Ok(other), steady), "client passwords");
    let mut other = seen.clone();
    other.admin_password_hashes = None;
    assert!(changed(Ok(other), steady), "admin passwords");
    let mut other = seen.clone();
    other.pod_uid = Some("pod-2".into());
    assert!(changed(Ok(other), steady), "another pod's tag");
    let mut other = seen.clone();
    other.version = "8.0.2".into();
    assert!(changed(Ok(other), steady), "another version");
    let jumped = Verdict::JumpedForward {
        by: Duration::from_secs(60),
        unwatched_since: None,
    };
    assert!(changed(Ok(seen.clone()), Some(jumped)), "a clock jump");
    assert!(
        changed(
            Ok(seen.clone()),
            Some(Verdict::SteppedBack {
                by: Duration::from_secs(1)
            })
        ),
        "a clock stepped back"
    );
    assert!(changed(Ok(seen), None), "a clock not judged");
}

#[test]
fn only_the_current_rest_acts_and_a_reconcile_ends_any() {
    let rest = || std::sync::Arc::new(Steady::new().rest().unwrap());
    let resting = Resting::default();
    let first = resting.rest("uid-1", rest());
    assert_eq!(resting.while_current("uid-1", first, || 7), Some(7));
    // A reconcile ends it, and lets the cluster rest again: the first rest's watch is stale.
    resting.wake("uid-1");
    assert_eq!(resting.while_current("uid-1", first, || 7), None);
    let second = resting.rest("uid-1", rest());
    assert_ne!(first, second);
    assert!(!resting.wake_if("uid-1", first), "a stale watch wakes nothing");
    assert_eq!(resting.len(), 1);
    let other = resting.rest("uid-2", rest());
    assert!(resting.wake_if("uid-1", second));
    assert!(!resting.wake_if("uid-1", second), "woken once");
    assert_eq!(resting.while_current("uid-2", other, || ()), Some(()));
    assert_eq!(resting.len(), 1);
    // A cluster gone whose UID the controller does not know: found by namespace and name.
    assert_eq!(resting.wake_cluster("team", "other"), None);
    assert_eq!(resting.wake_cluster("team", "locks"), Some("uid-2".into()));
    assert!(resting.is_empty());
}

#[test]
fn each_member_rests_with_its_clock_record() {
    let mut s = Steady::new();
    s.status.members[1].clock = Some(record(5));
    let rest = s.rest().unwrap();
    assert_eq!(rest.members[1].clock_record, Some(record(5)));
    assert_eq!(rest.members[0].clock_record, None);
}
