//! The decision of one reconcile, from what was read and observed: the status to persist, the
//! pod changes, fences, releases and events that follow, and when to look again. Pure; the
//! clock is an argument.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::children_report::ChildrenReport;
use crate::children::names::slot_name;
use crate::clock::Reading;
use crate::clock::timers::{ClusterTimers, TimerKey};
use crate::crd::model::Slot;
use crate::crd::reasons::MemberReason;
use crate::crd::{RedlockCluster, RedlockClusterStatus};
use crate::decide::observe::{PodState, SlotObservation};
use crate::decide::plan::{self, MemberEvent, Plan, PlanInput, Timing, plan};
use crate::decide::validate::Rejection;
use crate::decide::{resize, rollout, status};
use crate::hold::policy::{self, Change};
use crate::hold::{self, ledger, maintenance};

/// What one reconcile observed of a cluster: each slot's pod and probe, the TTL audit,
/// placement, and what clients are told (read by `crate::reconcile::observation`).
pub struct Observation {
    pub slots: std::collections::BTreeMap<Slot, SlotObservation>,
    /// `None` until the audit has swept a member once.
    pub ttl: Option<crate::hold::ttl_audit::Report>,
    /// When the next TTL audit period starts.
    pub next_audit: std::time::Duration,
    pub failure_domains: crate::crd::FailureDomains,
    /// The maxLockTTL the `<name>-endpoints` ConfigMap tells clients, if it exists (also one
    /// left by an earlier incarnation of the cluster: its clients were told that).
    pub published_ttl: Option<std::time::Duration>,
    /// The maxLockTTL that ConfigMap says holds used when it was written
    /// (`holdMaxLockTTLMillis`): longer than `published_ttl` while a lowering was pending.
    pub published_hold_ttl: Option<std::time::Duration>,
    /// What that ConfigMap and `<name>-client` tell clients (the lists and the
    /// confirmation), the second record of a resize.
    pub told: resize::Told,
    /// What to remember of each probed member's clock once this observation's verdicts are on
    /// record: kept before then, a jump found by a reconcile whose status write fails would
    /// be judged against the post-jump sample next time, and never reported.
    pub clock_tracks: Vec<(crate::clock::member::ClockKey, crate::clock::member::ClockTrack)>,
    /// What the `<name>-ledger` ConfigMap records of each slot's last identified process
    /// (`crate::hold::ledger`); `None` when it does not exist or does not read.
    pub ledger: Option<crate::hold::ledger::Ledger>,
}

/// Everything one reconcile will do, decided before anything is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The status to persist first (write-ahead).
    pub status: RedlockClusterStatus,
    /// Pod creations and deletions, fences, releases and member events, acted on only once
    /// `status` is on record.
    pub plan: Plan,
    /// Events about the cluster as a whole (the maxLockTTL in force).
    pub cluster_events: Vec<(Change, String)>,
    /// The hold in force.
    pub hold: Duration,
    /// When to look again (a release shortens it further, see `act`).
    pub requeue: Duration,
    /// The part of `requeue` that is a deadline (a hold's end, a lowering's `lowersAt`),
    /// counted from the decision: time spent writing and acting comes off it.
    pub deadline: Option<Duration>,
    /// Keys the TTL audit found breaking the policy, once it has swept a member.
    pub ttl_violations: Option<u64>,
    /// This process's timers for the deadlines in `status`, kept once it is on record.
    pub timers: ClusterTimers,
    /// The ledger to write (`crate::hold::ledger::desired`) when it differs from the one
    /// observed. No process is released before the ledger on the API server names it.
    pub ledger: Option<crate::hold::ledger::Ledger>,
}

/// What `decide` needs besides the cluster and the clock.
pub struct Facts<'a> {
    pub rejections: &'a [Rejection],
    pub children: &'a ChildrenReport,
    pub observation: &'a Observation,
    pub probe_period: Duration,
    /// Deadlines this process has timed itself (docs/design.md §9.1).
    pub timers: &'a ClusterTimers,
    /// Why no process may be released now (the operator's clock), if so.
    pub release_blocked: Option<&'a str>,
    /// Processes this process fenced ahead of a status write that did not land
    /// (`crate::hold::fence_ahead::processes`): released by no rule until a write holds them.
    pub fenced_unrecorded: &'a [(crate::crd::model::Slot, String)],
    /// Releases this process decided and has not yet seen serving (`release_ahead::OwedReleases`).
    pub owed_releases: &'a [(crate::crd::model::Slot, String)],
    /// The Lease (`<namespace>/<name>`) this operator is elected with, `None` without election.
    pub lease: Option<&'a str>,
    /// The client password rotation's condition, if there is anything to say.
    /// The conditions of the password rotations (client, admin), those that have anything to say.
    pub password_rotation: Vec<crate::crd::conditions::Desired>,
    /// The cluster's spec hash (`resources::hash::spec_hash`), which pods of the spec carry.
    pub spec_hash: &'a str,
    /// Random, drawn for this reconcile: the unpredictable part of a new confirmation token
    /// (`resize::confirmation_token`).
    pub nonce: &'a str,
    /// Why the pods' readiness gates cannot be written (`crate::runtime::permissions`), if so: told in
    /// `ChildrenApplied`.
    pub gate_writes_refused: Option<&'a str>,
}

/// The decision's steps in their order, each feeding the next: the hold in force, the
/// published list's limits, the member plan, the pod changes, the status, when to look again.
pub fn decide(cluster: &RedlockCluster, facts: &Facts<'_>, clock: Reading) -> Decision {
    let now = clock.wall;
    let accepted = facts.rejections.is_empty();
    let obs = facts.observation;
    let none = RedlockClusterStatus::default();
    let previous = cluster.status.as_ref().unwrap_or(&none);
    let policy = hold_in_force(cluster, previous, facts, accepted, clock);
    let hold = policy::hold_of(&policy.policy);
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let limits = if accepted {
        resize::before_plan(cluster, obs.told, facts.nonce)
    } else {
        resize::while_rejected(cluster, obs.told)
    };
    let fence_request = maintenance::request(cluster, &previous.members);
    let gone_asserted = plan::asserted_gone(
        cluster
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(plan::PROCESSES_GONE))
            .map(String::as_str),
    );
    let instances = if accepted {
        cluster.spec.instances
    } else {
        limits.published
    };
    let mut plan = plan(
        &PlanInput {
            cluster: &name,
            instances,
            members: &previous.members,
            now,
            hold,
            published: limits.published,
            confirmed: limits.confirmed,
            timing: Timing {
                timers: facts.timers,
                skipped: clock.skipped,
                release_blocked: facts.release_blocked,
                fenced_unrecorded: facts.fenced_unrecorded,
                owed_releases: facts.owed_releases,
            },
            maintenance: &fence_request.slots,
            gone_asserted: &gone_asserted,
            ledger: obs.ledger.as_ref(),
        },
        &obs.slots,
    );
    let limits = if accepted {
        let before = limits.published;
        let after = resize::after_plan(limits, cluster.spec.instances, &plan.members, &obs.slots, now);
        plan.events
            .extend(shorter_list_assumptions(&plan.members, after.published..before));
        after
    } else {
        limits
    };
    let rollout = pod_changes(cluster, previous, facts, hold, &mut plan);
    let findings = status::Findings {
        rejections: facts.rejections.to_vec(),
        ttl: obs.ttl.clone(),
        max_lock_ttl: policy.policy.max_lock_ttl.to_string(),
        hold: Some(policy.policy.clone()),
        conflicts: conflicts(&name, facts),
        apply_problems: facts
            .children
            .problems
            .iter()
            .cloned()
            .chain(facts.gate_writes_refused.map(str::to_owned))
            .collect(),
        limits: Some(limits),
        rollout,
        failure_domains: Some(obs.failure_domains.clone()),
        maintenance: fence_request,
        password_rotation: facts.password_rotation.clone(),
    };
    let mut status = status::compute(cluster, plan.members.clone(), &obs.slots, &findings, now);
    // Who writes it: an operator elected with another Lease leaves the cluster alone while
    // this one is held (`crate::runtime::lease_owner`).
    status.lease = facts.lease.map(str::to_owned);
    let deadline = deadline(&plan, &policy.policy, now);
    let requeue = requeue(&plan, deadline, facts.probe_period, obs.next_audit);
    let lowering = policy.policy.lowers_at.is_some().then_some(TimerKey::Lowering);
    let timers = facts
        .timers
        .next(plan::hold_timer_keys(&plan.members, hold).chain(lowering), clock);
    let ledger = Some(ledger::desired(obs.ledger.as_ref(), &plan.members, instances))
        .filter(|l| Some(l) != obs.ledger.as_ref());
    Decision {
        status,
        ledger,
        plan,
        cluster_events: policy.changes,
        hold,
        requeue,
        deadline,
        ttl_violations: obs.ttl.as_ref().map(|r| r.violations),
        timers,
    }
}

/// The maxLockTTL holds use from now on (`policy::next`). A pending lowering takes effect
/// no earlier than one hold of the value in force after this process first saw it pending
/// (another leader's clock cannot hasten it).
fn hold_in_force(
    cluster: &RedlockCluster,
    previous: &RedlockClusterStatus,
    facts: &Facts<'_>,
    accepted: bool,
    clock: Reading,
) -> policy::Update {
    let lowering_not_before = previous.hold.as_ref().and_then(|h| {
        h.lowers_at.as_ref()?;
        Some(
            facts
                .timers
                .earliest_end(TimerKey::Lowering, policy::hold_of(h), clock),
        )
    });
    // No record (a status wiped or restored without it): what `<name>-endpoints` says was in
    // force for holds, if that is longer than what clients are told.
    let recovered = match previous.hold {
        Some(_) => None,
        None => policy::recovered(
            &cluster.spec,
            facts.observation.published_ttl,
            facts.observation.published_hold_ttl,
        ),
    };
    policy::next(
        previous.hold.as_ref().or(recovered.as_ref()),
        &cluster.spec,
        accepted,
        facts.observation.published_ttl,
        clock.wall,
        lowering_not_before,
    )
}

/// Adjusts the plan's pod creates and deletes to what may change now: scaling paced, one
/// rolling replacement at a time, nothing for a rejected spec, no new pod before its config
/// is ours. Returns where the rollout stands.
fn pod_changes(
    cluster: &RedlockCluster,
    previous: &RedlockClusterStatus,
    facts: &Facts<'_>,
    hold: Duration,
    plan: &mut Plan,
) -> rollout::Rollout {
    let slots = &facts.observation.slots;
    let name = cluster.metadata.name.clone().unwrap_or_default();
    rollout::pace_scaling(
        cluster.spec.instances,
        &previous.members,
        &plan.members,
        slots,
        &mut plan.create_pods,
        &mut plan.delete_pods,
    );
    let rollout = rollout::decide(cluster.spec.instances, &plan.members, slots, facts.spec_hash);
    if !facts.rejections.is_empty() {
        // A rejected spec changes nothing that runs.
        plan.create_pods.clear();
        plan.delete_pods.clear();
    } else if let Some(slot) = rollout.replace {
        // The hold starts when the old process is observed gone, as for any other loss.
        plan.delete_pods.push(slot);
        plan.events.push(MemberEvent {
            slot,
            reason: MemberReason::RollingReplacement,
            message: format!(
                "{}: replacing for a spec change ({} left); the new process is held for {hold:?}",
                slot_name(&name, slot),
                rollout.outdated.len(),
            ),
            warning: false,
        });
    }
    if !facts.children.config_ready {
        // A new pod would mount an ACL file and config that are not (or not yet) ours.
        plan.create_pods.clear();
    }
    rollout
}

/// Objects in this cluster's names that are not its own: children and pods.
fn conflicts(name: &str, facts: &Facts<'_>) -> Vec<String> {
    let mut conflicts = facts.children.conflicts.clone();
    conflicts.extend(
        facts
            .observation
            .slots
            .iter()
            .filter_map(|(slot, o)| match &o.pod {
                PodState::Foreign { owner } => Some(format!("pod {} is {owner}", slot_name(name, *slot))),
                _ => None,
            }),
    );
    conflicts
}

/// The next deadline: when the next hold ends or a lowered maxLockTTL takes effect.
fn deadline(plan: &Plan, policy: &crate::crd::HoldPolicy, now: Timestamp) -> Option<Duration> {
    let lowers = policy
        .lowers_at
        .as_ref()
        .map(|at| hold::remaining(now, at.0).max(Duration::from_millis(1)));
    [plan.next_hold_end, lowers].into_iter().flatten().min()
}

/// When to look again: exactly at the next `deadline`, soon while a process is awaited,
/// otherwise at the next probe or audit period.
fn requeue(
    plan: &Plan,
    deadline: Option<Duration>,
    probe_period: Duration,
    next_audit: Duration,
) -> Duration {
    let mut after = probe_period.min(next_audit);
    if let Some(deadline) = deadline {
        after = after.min(deadline);
    }
    if plan.awaiting_process || !plan.fences.is_empty() {
        after = after.min(Duration::from_millis(100));
    }
    after
}

/// The shorter list is published now although a removed member's process, whose pod vanished
/// while it ran, was never found (docs/design.md §9.5): clients of the longer list could still
/// reach it if it lives. Each such member gets the Warning a slot's release gets in that case.
fn shorter_list_assumptions(
    members: &[crate::crd::MemberStatus],
    removed: std::ops::Range<i32>,
) -> Vec<MemberEvent> {
    members
        .iter()
        .filter(|m| removed.contains(&m.slot.index()))
        .filter_map(|m| {
            let u = m.unstopped.as_ref().filter(|u| !u.fenced)?;
            Some(MemberEvent {
                slot: m.slot,
                reason: MemberReason::ReleaseAssumesProcessGone,
                message: format!(
                    "{}: the list of {} is published although process {} (this removed member's; its pod vanished while it ran) was never seen to stop; nothing answered for it at {} through its hold. This relies on that process being dead, as deleting its node, tainting it out-of-service or force-deleting its pod asserts: a client still using the longer list could otherwise reach it",
                    m.name, removed.start, u.run_id, u.pod_ip
                ),
                warning: true,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::crd::conditions::ConditionType;
    use crate::crd::model::Slot;
    use crate::crd::{FailureDomains, MemberState};
    use crate::decide::observe::SlotObservation;

    #[test]
    fn publishing_the_shorter_list_over_an_unfound_process_says_so() {
        use crate::crd::{MemberStatus, UnstoppedProcess};
        let removed = |slot: i32, fenced: bool| MemberStatus {
            unstopped: Some(UnstoppedProcess {
                run_id: format!("R{slot}"),
                pod_ip: format!("10.0.0.{slot}"),
                listener: None,
                fenced,
                ..Default::default()
            }),
            ..MemberStatus::new(format!("locks-{slot}"), slot, MemberState::Lost)
        };
        let members = [
            MemberStatus::new("locks-0".into(), 0, MemberState::Ready),
            removed(3, false),
            removed(4, true),
        ];
        let events = shorter_list_assumptions(&members, 3..5);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].slot, Slot::new(3));
        assert_eq!(events[0].reason, MemberReason::ReleaseAssumesProcessGone);
        assert!(events[0].warning);
        assert!(events[0].message.contains("process R3"), "{}", events[0].message);
        assert!(events[0].message.contains("list of 3"), "{}", events[0].message);
        // Nothing published this time (an empty range): nothing said.
        assert!(shorter_list_assumptions(&members, 5..5).is_empty());
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn cluster(spec: serde_json::Value) -> RedlockCluster {
        let mut c = crate::fixtures::cluster(spec);
        c.metadata.generation = Some(1);
        c
    }

    fn observation(slots: BTreeMap<Slot, SlotObservation>, published_ms: Option<u64>) -> Observation {
        Observation {
            ledger: Some(crate::fixtures::ledger_naming_answering(&slots)),
            slots,
            ttl: None,
            next_audit: Duration::from_secs(10),
            failure_domains: FailureDomains::default(),
            published_ttl: published_ms.map(Duration::from_millis),
            published_hold_ttl: None,
            told: Default::default(),
            clock_tracks: Vec::new(),
        }
    }

    fn running(run: &str, enabled: bool) -> SlotObservation {
        crate::fixtures::running(run, enabled, &format!("c-{run}"))
    }

    fn decide_at(
        c: &RedlockCluster,
        obs: &Observation,
        children: &ChildrenReport,
        rejections: &[Rejection],
        now: Timestamp,
    ) -> Decision {
        decide_refusing_gates(c, obs, children, rejections, now, None)
    }

    /// [`decide_at`], with the readiness gates' writes refused for `why`.
    fn decide_refusing_gates(
        c: &RedlockCluster,
        obs: &Observation,
        children: &ChildrenReport,
        rejections: &[Rejection],
        now: Timestamp,
        why: Option<&str>,
    ) -> Decision {
        decide(
            c,
            &Facts {
                rejections,
                children,
                observation: obs,
                probe_period: Duration::from_secs(1),
                timers: &TIMERS.with(|t| t.borrow().clone()),
                release_blocked: None,
                fenced_unrecorded: &[],
                owed_releases: &[],
                lease: None,
                password_rotation: Vec::new(),
                spec_hash: &crate::children::hash::spec_hash(&c.spec),
                nonce: "n0",
                gate_writes_refused: why,
            },
            Reading::at(now),
        )
    }

    thread_local! {
        /// The timers of the process these tests play: kept by `persist`, as `reconcile` does.
        static TIMERS: std::cell::RefCell<ClusterTimers> = std::cell::RefCell::default();
    }

    fn ready_children() -> ChildrenReport {
        ChildrenReport {
            config_ready: true,
            ..Default::default()
        }
    }

    /// Runs the cluster forward: the decision's status becomes the stored status.
    fn persist(c: &mut RedlockCluster, d: &Decision) {
        c.status = Some(d.status.clone());
        TIMERS.with(|t| *t.borrow_mut() = d.timers.clone());
    }

    #[test]
    fn a_new_cluster_holds_its_first_processes_in_full() {
        let mut c = cluster(
            serde_json::json!({"instances": 3, "maxLockTTL": "30s", "holdMargin": "0s", "clockDriftFactor": 0.0}),
        );
        let d = decide_at(
            &c,
            &observation(BTreeMap::new(), None),
            &ready_children(),
            &[],
            at(100),
        );
        assert_eq!(d.plan.create_pods, vec![0, 1, 2]);
        persist(&mut c, &d);
        let up = (0..3)
            .map(|s| (Slot::new(s), running(&format!("r{s}"), false)))
            .collect();
        let d = decide_at(
            &c,
            &observation(up, Some(30_000)),
            &ready_children(),
            &[],
            at(101),
        );
        assert!(d.plan.releases.is_empty(), "{:?}", d.plan.releases);
        for m in &d.status.members {
            assert_eq!(m.state, MemberState::Held, "{m:?}");
            assert_eq!(m.held_until.as_ref().unwrap().0, at(131));
        }
        assert_eq!(d.requeue, Duration::from_secs(1));
    }

    /// Safety-review 3, N10: readiness gates the operator may not write are told on the
    /// cluster, with the children's own problems.
    #[test]
    fn gates_that_cannot_be_written_are_told_in_children_applied() {
        let c = cluster(serde_json::json!({"instances": 1, "maxLockTTL": "30s"}));
        let obs = observation(BTreeMap::new(), None);
        let children = ready_children();
        let refused = "the operator may not patch pods/status (denied)";
        let applied = |why| {
            let d = decide_refusing_gates(&c, &obs, &children, &[], at(100), why);
            let found = d
                .status
                .conditions
                .iter()
                .find(|c| c.type_ == "ChildrenApplied")
                .cloned();
            found.map(|c| (c.status, c.message)).unwrap()
        };
        assert_eq!(applied(Some(refused)), ("False".into(), refused.into()));
        assert_eq!(applied(None).0, "True");
    }

    #[test]
    fn children_not_ready_create_no_pods_but_holds_and_status_go_on() {
        let c = cluster(serde_json::json!({"instances": 1, "maxLockTTL": "30s"}));
        let children = ChildrenReport {
            conflicts: vec![
                "Secret locks-acl exists and is controlled by RedlockCluster locks (uid u0)".into(),
            ],
            config_ready: false,
            ..Default::default()
        };
        let d = decide_at(&c, &observation(BTreeMap::new(), None), &children, &[], at(100));
        assert!(d.plan.create_pods.is_empty());
        let cond = d
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == ConditionType::OwnershipConflict.as_str())
            .unwrap();
        assert_eq!(cond.status, "True");
        assert!(cond.message.contains("locks-acl"), "{}", cond.message);
    }

    #[test]
    fn a_rejected_lowering_never_shortens_holds() {
        // In force 30s; one slot lost at 100. The user lowers to 3s in a rejected spec.
        let mut c = cluster(
            serde_json::json!({"instances": 1, "maxLockTTL": "30s", "holdMargin": "0s", "clockDriftFactor": 0.0}),
        );
        let d = decide_at(
            &c,
            &observation(
                BTreeMap::from([(Slot::new(0), running("a", false))]),
                Some(30_000),
            ),
            &ready_children(),
            &[],
            at(90),
        );
        persist(&mut c, &d);
        let d = decide_at(
            &c,
            &observation(
                BTreeMap::from([(Slot::new(0), running("a", false))]),
                Some(30_000),
            ),
            &ready_children(),
            &[],
            at(121),
        );
        assert_eq!(d.plan.releases, vec![(Slot::new(0), "a".into())]);
        persist(&mut c, &d);
        c.spec.max_lock_ttl = Duration::from_secs(3).into();
        let rejected = [Rejection {
            field: "spec.resources".into(),
            message: "request above limit".into(),
        }];
        let d = decide_at(
            &c,
            &observation(
                BTreeMap::from([(Slot::new(0), running("b", false))]),
                Some(30_000),
            ),
            &ready_children(),
            &rejected,
            at(200),
        );
        let m = &d.status.members[0];
        assert_eq!(m.state, MemberState::Held);
        assert_eq!(
            m.held_until.as_ref().unwrap().0,
            at(230),
            "the 30s in force, not 3s"
        );
        assert_eq!(
            d.status.hold.as_ref().unwrap().max_lock_ttl,
            Duration::from_secs(30)
        );
    }

    #[test]
    fn a_raise_lengthens_a_running_hold_from_its_start() {
        let mut c = cluster(
            serde_json::json!({"instances": 1, "maxLockTTL": "10s", "holdMargin": "0s", "clockDriftFactor": 0.0}),
        );
        let obs = |run: &str| {
            observation(
                BTreeMap::from([(Slot::new(0), running(run, false))]),
                Some(10_000),
            )
        };
        let d = decide_at(&c, &obs("a"), &ready_children(), &[], at(100));
        persist(&mut c, &d);
        assert_eq!(d.status.members[0].held_until.as_ref().unwrap().0, at(110));
        c.spec.max_lock_ttl = Duration::from_secs(60).into();
        let d = decide_at(&c, &obs("a"), &ready_children(), &[], at(105));
        assert_eq!(d.status.members[0].held_until.as_ref().unwrap().0, at(160));
        assert_eq!(
            d.cluster_events.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
            [Change::Raised]
        );
        assert!(d.plan.releases.is_empty());
    }

    #[test]
    fn a_pending_lowering_is_looked_at_when_it_takes_effect() {
        let mut c = cluster(
            serde_json::json!({"instances": 1, "maxLockTTL": "30s", "holdMargin": "0s", "clockDriftFactor": 0.0}),
        );
        let obs = |ms| observation(BTreeMap::from([(Slot::new(0), running("a", true))]), Some(ms));
        let d = decide_at(&c, &obs(30_000), &ready_children(), &[], at(100));
        persist(&mut c, &d);
        c.spec.max_lock_ttl = Duration::from_secs(3).into();
        let d = decide_at(&c, &obs(3_000), &ready_children(), &[], at(100));
        assert_eq!(
            d.status.hold.as_ref().unwrap().lowers_at.as_ref().unwrap().0,
            at(130)
        );
        let probe_far = decide(
            &c,
            &Facts {
                rejections: &[],
                children: &ready_children(),
                observation: &Observation {
                    next_audit: Duration::from_secs(600),
                    ..obs(3_000)
                },
                probe_period: Duration::from_secs(600),
                timers: &ClusterTimers::default(),
                release_blocked: None,
                fenced_unrecorded: &[],
                owed_releases: &[],
                lease: None,
                password_rotation: Vec::new(),
                spec_hash: &crate::children::hash::spec_hash(&c.spec),
                nonce: "n0",
                gate_writes_refused: None,
            },
            Reading::at(at(100)),
        );
        assert_eq!(probe_far.requeue, Duration::from_secs(30));
    }
}
