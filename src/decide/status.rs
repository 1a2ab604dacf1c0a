//! Pure computation of `RedlockCluster.status` from the spec and what was observed.
//! The reconciler writes the result only when it differs from the stored status.

use k8s_openapi::jiff::Timestamp;

use std::collections::BTreeMap;

use crate::children::endpoints::server_address;
use crate::crd::conditions::{self, ConditionReason, ConditionType, Desired};
use crate::crd::model::{Slot, quorum};
use crate::crd::{
    FailureDomains, HoldPolicy, MemberState, MemberStatus, RedlockCluster, RedlockClusterStatus,
};
use crate::decide::failure_domains;
use crate::decide::observe::{SlotObservation, serving_slots};
use crate::decide::rollout::Rollout;
use crate::decide::validate::Rejection;
use crate::hold::ttl_audit;

/// What the reconcile found besides member states: spec problems and the TTL audit.
#[derive(Debug, Clone, Default)]
pub(crate) struct Findings {
    pub rejections: Vec<Rejection>,
    /// `None` until the audit has swept a member once.
    pub ttl: Option<ttl_audit::Report>,
    /// The maxLockTTL in force (`status.hold`), as written back in messages.
    pub max_lock_ttl: String,
    /// The hold policy in force.
    pub hold: Option<HoldPolicy>,
    /// Child objects and pod names taken by objects another owner controls.
    pub conflicts: Vec<String>,
    /// Child objects whose apply failed for another reason.
    pub apply_problems: Vec<String>,
    /// The published server list and the slots that may serve (see `resize`).
    pub limits: Option<crate::decide::resize::Limits>,
    /// The rolling replacement's state.
    pub rollout: Rollout,
    /// Placement of the members; `None` leaves failure domains unreported.
    pub failure_domains: Option<FailureDomains>,
    /// Members the user fenced on purpose.
    pub maintenance: crate::hold::maintenance::Request,
    /// The password rotations' conditions, those there are (`password_rotation`,
    /// `admin_rotation`).
    pub password_rotation: Vec<Desired>,
}

/// The status to persist: the planned member states plus the counts and conditions that
/// follow from them and from the pods' readiness.
pub(crate) fn compute(
    cluster: &RedlockCluster,
    mut members: Vec<MemberStatus>,
    observed: &BTreeMap<Slot, SlotObservation>,
    findings: &Findings,
    now: Timestamp,
) -> RedlockClusterStatus {
    let old_conditions = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let instances = cluster.spec.instances;
    let quorum = quorum(instances);
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let ns = cluster.metadata.namespace.clone().unwrap_or_default();
    for m in &mut members {
        m.endpoint = m
            .slot
            .within(instances)
            .then(|| server_address(&name, &ns, m.slot));
    }
    let serving = serving_slots(&members, observed, instances);
    let ready = serving.len() as i32;
    let held = members
        .iter()
        .filter(|m| m.slot.within(instances))
        // A member `Lost` on a refusal is out of service but not held: no hold runs yet.
        .filter(|m| m.state.is_holding() && !m.lost_on_refusal())
        .count() as i32;
    let desired = desired_conditions(cluster, &members, &serving, held, findings, now);

    RedlockClusterStatus {
        observed_generation: cluster.metadata.generation,
        // Set by `decide` (the writer's Lease).
        lease: None,
        instances: Some(instances),
        ready_instances: Some(ready),
        held_instances: Some(held),
        quorum: Some(quorum),
        updated_instances: Some(instances - findings.rollout.outdated.len() as i32),
        hold: findings.hold.clone(),
        published_instances: findings.limits.as_ref().map(|l| l.published),
        confirmed_instances: findings.limits.as_ref().map(|l| l.confirmed),
        confirmation_token: findings.limits.as_ref().and_then(|l| l.token.clone()),
        failure_domains: findings.failure_domains.clone(),
        members,
        conditions: conditions::merge(old_conditions, &desired, cluster.metadata.generation, now),
    }
}

/// Every condition this reconcile states, in the order `status.conditions` lists them.
fn desired_conditions(
    cluster: &RedlockCluster,
    members: &[MemberStatus],
    serving: &[Slot],
    held: i32,
    findings: &Findings,
    now: Timestamp,
) -> Vec<Desired> {
    let instances = cluster.spec.instances;
    let quorum = quorum(instances);
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let ready = serving.len() as i32;
    let active = members.iter().filter(|m| m.slot.within(instances));
    let mut desired = vec![
        available(ready, instances, quorum),
        progressing(&findings.rollout, &name, instances, ready, held, active, now),
        degraded(members, serving, instances, quorum),
        spec_accepted(&findings.rejections),
    ];
    desired.extend(ttl_policy(findings));
    desired.push(ownership_conflict(&findings.conflicts));
    if let Some(limits) = &findings.limits {
        desired.push(resizing(limits, instances, &name));
    }
    desired.push(children_applied(&findings.apply_problems));
    desired.push(crate::hold::maintenance::condition(
        &findings.maintenance,
        members,
    ));
    if let Some(d) = &findings.failure_domains {
        desired.push(failure_domains::condition(
            instances,
            cluster.spec.scheduling.spread,
            d,
        ));
    }
    desired.extend(findings.password_rotation.clone());
    let gitops = super::kstatus::conditions(&desired);
    desired.extend(gitops);
    desired
}

/// `Available`: a quorum of members serves clients.
fn available(ready: i32, instances: i32, quorum: i32) -> Desired {
    Desired {
        type_: ConditionType::Available,
        status: ready >= quorum,
        reason: if ready >= quorum {
            ConditionReason::QuorumServing
        } else {
            ConditionReason::QuorumNotServing
        },
        message: format!("{ready} of {instances} instances serve clients; a lock needs {quorum}"),
    }
}

/// `Progressing`: a rolling replacement, or members not serving yet (held or starting).
fn progressing<'a>(
    rollout: &Rollout,
    name: &str,
    instances: i32,
    ready: i32,
    held: i32,
    active: impl Iterator<Item = &'a MemberStatus>,
    now: Timestamp,
) -> Desired {
    if !rollout.outdated.is_empty() {
        let names: Vec<String> = rollout.outdated.iter().map(|s| format!("{name}-{s}")).collect();
        let mut message = format!(
            "rolling replacement for a spec change: {} of {instances} members left to replace ({})",
            rollout.outdated.len(),
            names.join(", ")
        );
        if let Some(slot) = rollout.replace {
            message.push_str(&format!("; replacing {name}-{slot} now"));
        }
        if let Some(w) = &rollout.waiting {
            message.push_str(&format!("; {w}"));
        }
        return Desired {
            type_: ConditionType::Progressing,
            status: true,
            reason: ConditionReason::RollingUpdate,
            message,
        };
    }
    if ready >= instances {
        return Desired {
            type_: ConditionType::Progressing,
            status: false,
            reason: ConditionReason::AllInstancesReady,
            message: format!("all {instances} instances serve clients"),
        };
    }
    let mut message = format!("{ready} of {instances} instances serve clients");
    if held > 0 {
        let next = active
            .filter_map(|m| m.held_until.as_ref().map(|t| t.0))
            .filter(|t| *t > now)
            .min();
        message.push_str(&format!(", {held} held after losing their keys"));
        if let Some(next) = next {
            message.push_str(&format!(" (next release at {next})"));
        }
    }
    Desired {
        type_: ConditionType::Progressing,
        status: true,
        reason: if held > 0 {
            ConditionReason::HoldsRunning
        } else {
            ConditionReason::InstancesStarting
        },
        message,
    }
}

/// `Resizing`: the published server list or the slots that may serve are still changing.
fn resizing(limits: &crate::decide::resize::Limits, instances: i32, name: &str) -> Desired {
    match crate::decide::resize::waiting_for(limits, instances, name) {
        Some((reason, message)) => Desired {
            type_: ConditionType::Resizing,
            status: true,
            reason,
            message,
        },
        None => Desired {
            type_: ConditionType::Resizing,
            status: false,
            reason: ConditionReason::ServerListSettled,
            message: format!("clients are told all {instances} servers, and every member may serve"),
        },
    }
}

/// `Degraded`: some slot does not serve. The message says which and how many more failures
/// the cluster survives; it changes only when a member's state does (no ticking values).
fn degraded(members: &[MemberStatus], serving: &[Slot], instances: i32, quorum: i32) -> Desired {
    let ready = serving.len() as i32;
    let down: Vec<String> = Slot::all(instances)
        .filter(|slot| !serving.contains(slot))
        .map(|slot| match members.iter().find(|m| m.slot == slot) {
            Some(m) => match (m.state, &m.held_until) {
                _ if m.maintenance.is_some() => format!(
                    "{} fenced for maintenance ({})",
                    m.name,
                    m.maintenance.as_deref().unwrap_or_default()
                ),
                (MemberState::Held | MemberState::Lost, Some(until))
                    if let Some(u) = m.unstopped.as_ref().filter(|u| !u.fenced) =>
                {
                    format!(
                        "{} {:?} until {}, then until process {} (its pod vanished while it ran) is proven unable to grant locks",
                        m.name, m.state, until.0, u.run_id
                    )
                }
                (MemberState::Held | MemberState::Lost, Some(until)) => {
                    format!("{} {:?} until {}", m.name, m.state, until.0)
                }
                (MemberState::Lost, None) if m.lost_on_refusal() => {
                    format!("{} Lost (refuses connections: presumed crashed)", m.name)
                }
                (MemberState::Ready, _) => format!("{} not ready", m.name),
                (state, _) => format!("{} {state:?}", m.name),
            },
            None => format!("slot {slot} not created"),
        })
        .collect();
    if down.is_empty() {
        return Desired {
            type_: ConditionType::Degraded,
            status: false,
            reason: ConditionReason::AllInstancesServing,
            message: format!(
                "all {instances} instances serve clients; {} can fail without losing quorum",
                instances - quorum
            ),
        };
    }
    let (reason, tolerance) = if ready < quorum {
        (
            ConditionReason::QuorumLost,
            "locks cannot be acquired until a quorum serves".to_owned(),
        )
    } else {
        (
            ConditionReason::InstancesNotServing,
            format!("{} more can fail without losing quorum", ready - quorum),
        )
    };
    Desired {
        type_: ConditionType::Degraded,
        status: true,
        reason,
        message: format!(
            "{ready} of {instances} instances serve clients ({}); {tolerance}",
            down.join(", ")
        ),
    }
}

fn spec_accepted(rejections: &[Rejection]) -> Desired {
    if rejections.is_empty() {
        return Desired {
            type_: ConditionType::SpecAccepted,
            status: true,
            reason: ConditionReason::SpecValid,
            message: "the spec is valid".into(),
        };
    }
    let problems: Vec<String> = rejections.iter().map(ToString::to_string).collect();
    Desired {
        type_: ConditionType::SpecAccepted,
        status: false,
        reason: ConditionReason::SpecRejected,
        message: format!(
            "{}. Running instances are kept as they are, and none is created or removed, until the spec is fixed",
            problems.join("; ")
        ),
    }
}

/// `OwnershipConflict`: True while a name the cluster needs is taken by an object it does not
/// control. Nothing of that name is overwritten, created or deleted meanwhile.
fn ownership_conflict(conflicts: &[String]) -> Desired {
    if conflicts.is_empty() {
        return Desired {
            type_: ConditionType::OwnershipConflict,
            status: false,
            reason: ConditionReason::NoConflict,
            message: "every child object and pod name is this cluster's own".into(),
        };
    }
    Desired {
        type_: ConditionType::OwnershipConflict,
        status: true,
        reason: ConditionReason::NameTaken,
        message: conflicts.join("; "),
    }
}

/// `ChildrenApplied`: False while a child object could not be applied (quota, webhook, API
/// error). Holds, releases and status go on regardless; pods are created only once the
/// cluster's own ACL Secret and configuration are in place.
fn children_applied(problems: &[String]) -> Desired {
    if problems.is_empty() {
        return Desired {
            type_: ConditionType::ChildrenApplied,
            status: true,
            reason: ConditionReason::Applied,
            message: "every child object is applied".into(),
        };
    }
    Desired {
        type_: ConditionType::ChildrenApplied,
        status: false,
        reason: ConditionReason::ApplyFailed,
        message: problems.join("; "),
    }
}

/// `TTLPolicy`: absent until the audit has swept a member.
fn ttl_policy(findings: &Findings) -> Option<Desired> {
    let report = findings.ttl.as_ref()?;
    let ttl = &findings.max_lock_ttl;
    Some(if report.violations == 0 {
        Desired {
            type_: ConditionType::TtlPolicy,
            status: true,
            reason: ConditionReason::WithinMaxLockTtl,
            message: format!("no sampled key lacks an expiry or has a TTL above maxLockTTL {ttl}"),
        }
    } else {
        let example = report
            .example
            .as_ref()
            .map(|e| format!(", e.g. {:?} on {} ({})", e.key, e.member, e.finding))
            .unwrap_or_default();
        Desired {
            type_: ConditionType::TtlPolicy,
            status: false,
            reason: ConditionReason::KeysExceedMaxLockTtl,
            message: format!(
                "{} key(s) on {} member(s) have no expiry or a TTL above maxLockTTL {ttl}{example}. A lock held longer than maxLockTTL can be granted twice after an instance restarts: raise maxLockTTL or fix the client",
                report.violations, report.members_with_violations
            ),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::observe::PodState;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime};

    fn cluster(instances: i32, generation: i64) -> RedlockCluster {
        let mut c = crate::fixtures::cluster(serde_json::json!({"instances": instances}));
        c.metadata.generation = Some(generation);
        c
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn condition(s: &RedlockClusterStatus, type_: ConditionType) -> &Condition {
        s.conditions.iter().find(|c| c.type_ == type_.as_str()).unwrap()
    }

    fn member(slot: i32, state: MemberState, held_until: Option<i64>) -> MemberStatus {
        MemberStatus {
            held_until: held_until.map(|s| MicroTime(at(s))),
            since: Some(MicroTime(at(1))),
            ..MemberStatus::new(format!("locks-{slot}"), slot, state)
        }
    }

    fn running(ready: bool) -> SlotObservation {
        SlotObservation {
            pod: PodState::Running {
                container_id: None,
                ready,
                terminating: false,
            },
            ..Default::default()
        }
    }

    #[test]
    fn nothing_ready_is_progressing_and_unavailable() {
        let s = compute(
            &cluster(5, 1),
            vec![],
            &BTreeMap::new(),
            &Findings::default(),
            at(100),
        );
        assert_eq!(s.observed_generation, Some(1));
        assert_eq!(
            (s.instances, s.ready_instances, s.quorum, s.held_instances),
            (Some(5), Some(0), Some(3), Some(0))
        );
        assert_eq!(condition(&s, ConditionType::Available).status, "False");
        assert_eq!(condition(&s, ConditionType::Progressing).status, "True");
        assert_eq!(
            condition(&s, ConditionType::Progressing).reason,
            "InstancesStarting"
        );
    }

    #[test]
    fn ready_counts_released_members_whose_pod_is_ready() {
        let members = vec![
            member(0, MemberState::Ready, None),
            member(1, MemberState::Ready, None),
            member(2, MemberState::Held, Some(200)),
        ];
        let observed = BTreeMap::from([
            (Slot::new(0), running(true)),
            (Slot::new(1), running(false)),
            (Slot::new(2), running(false)),
        ]);
        let s = compute(&cluster(3, 1), members, &observed, &Findings::default(), at(100));
        assert_eq!((s.ready_instances, s.held_instances), (Some(1), Some(1)));
        assert_eq!(condition(&s, ConditionType::Available).status, "False");
        let p = condition(&s, ConditionType::Progressing);
        assert_eq!(p.reason, "HoldsRunning");
        assert!(p.message.contains("1 held"), "{}", p.message);
    }

    #[test]
    fn all_ready_is_available_and_done() {
        let members = (0..3).map(|i| member(i, MemberState::Ready, None)).collect();
        let observed = (0..3).map(|i| (Slot::new(i), running(true))).collect();
        let s = compute(&cluster(3, 1), members, &observed, &Findings::default(), at(100));
        assert_eq!(condition(&s, ConditionType::Available).status, "True");
        assert_eq!(condition(&s, ConditionType::Progressing).status, "False");
    }

    #[test]
    fn retired_slots_do_not_count() {
        let members = vec![
            member(0, MemberState::Ready, None),
            member(3, MemberState::Lost, Some(500)),
        ];
        let s = compute(
            &cluster(1, 1),
            members,
            &BTreeMap::from([(Slot::new(0), running(true))]),
            &Findings::default(),
            at(100),
        );
        assert_eq!((s.ready_instances, s.held_instances), (Some(1), Some(0)));
        assert_eq!(s.members.len(), 2);
    }

    #[test]
    fn members_carry_their_stable_endpoint() {
        let mut c = cluster(2, 1);
        c.metadata.namespace = Some("team".into());
        let members = vec![
            member(0, MemberState::Ready, None),
            member(5, MemberState::Lost, Some(500)),
        ];
        let s = compute(&c, members, &BTreeMap::new(), &Findings::default(), at(100));
        assert_eq!(s.members[0].endpoint.as_deref(), Some("locks-0.team.svc:6379"));
        assert_eq!(s.members[1].endpoint, None, "a retired slot has no address");
    }

    #[test]
    fn degraded_says_which_members_are_down_and_what_is_left() {
        let observed: BTreeMap<_, _> = (0..5).map(|i| (Slot::new(i), running(i != 4))).collect();
        let members = vec![
            member(0, MemberState::Ready, None),
            member(1, MemberState::Ready, None),
            member(2, MemberState::Ready, None),
            member(3, MemberState::Held, Some(200)),
            member(4, MemberState::Ready, None),
        ];
        let s = compute(&cluster(5, 1), members, &observed, &Findings::default(), at(100));
        let d = condition(&s, ConditionType::Degraded);
        assert_eq!(
            (d.status.as_str(), d.reason.as_str()),
            ("True", "InstancesNotServing")
        );
        assert!(
            d.message
                .starts_with("3 of 5 instances serve clients (locks-3 Held until"),
            "{}",
            d.message
        );
        assert!(d.message.contains("locks-4 not ready"), "{}", d.message);
        assert!(
            d.message.ends_with("0 more can fail without losing quorum"),
            "{}",
            d.message
        );

        let s = compute(
            &cluster(3, 1),
            vec![member(0, MemberState::Ready, None)],
            &observed,
            &Findings::default(),
            at(100),
        );
        let d = condition(&s, ConditionType::Degraded);
        assert_eq!(d.reason, "QuorumLost");
        assert!(d.message.contains("slot 1 not created"), "{}", d.message);

        // A member Lost on a refusal: not serving, not counted ready, and named as such,
        // though its pod still reads Ready (the kubelet has not noticed the crash yet).
        let refused = MemberStatus {
            refused_since: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(at(90))),
            ..member(1, MemberState::Lost, None)
        };
        let members = vec![
            member(0, MemberState::Ready, None),
            refused,
            member(2, MemberState::Ready, None),
        ];
        let s = compute(&cluster(3, 1), members, &observed, &Findings::default(), at(100));
        assert_eq!(s.ready_instances, Some(2));
        assert_eq!(s.held_instances, Some(0), "nothing is held on a refusal");
        let d = condition(&s, ConditionType::Degraded);
        assert!(
            d.message
                .contains("locks-1 Lost (refuses connections: presumed crashed)"),
            "{}",
            d.message
        );

        let members = (0..3).map(|i| member(i, MemberState::Ready, None)).collect();
        let s = compute(&cluster(3, 1), members, &observed, &Findings::default(), at(100));
        let d = condition(&s, ConditionType::Degraded);
        assert_eq!(
            (d.status.as_str(), d.reason.as_str()),
            ("False", "AllInstancesServing")
        );
        assert_eq!(
            d.message,
            "all 3 instances serve clients; 1 can fail without losing quorum"
        );
    }

    #[test]
    fn a_rejected_spec_is_a_false_condition_naming_the_field() {
        let findings = Findings {
            rejections: vec![Rejection {
                field: "spec.redisConfig.save".into(),
                message: "remove it".into(),
            }],
            ..Default::default()
        };
        let s = compute(&cluster(3, 2), vec![], &BTreeMap::new(), &findings, at(100));
        let c = condition(&s, ConditionType::SpecAccepted);
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "SpecRejected"));
        assert!(
            c.message.starts_with("spec.redisConfig.save: remove it."),
            "{}",
            c.message
        );
        assert_eq!(c.observed_generation, Some(2));
        let s = compute(
            &cluster(3, 2),
            vec![],
            &BTreeMap::new(),
            &Findings::default(),
            at(100),
        );
        assert_eq!(condition(&s, ConditionType::SpecAccepted).status, "True");
    }

    #[test]
    fn ttl_policy_appears_with_the_first_sweep_and_names_an_example() {
        let s = compute(
            &cluster(3, 1),
            vec![],
            &BTreeMap::new(),
            &Findings::default(),
            at(100),
        );
        assert!(
            s.conditions
                .iter()
                .all(|c| c.type_ != ConditionType::TtlPolicy.as_str())
        );
        let mut findings = Findings {
            ttl: Some(ttl_audit::Report {
                checked: 10,
                violations: 0,
                members_with_violations: 0,
                example: None,
            }),
            max_lock_ttl: "30s".into(),
            ..Default::default()
        };
        let s = compute(&cluster(3, 1), vec![], &BTreeMap::new(), &findings, at(100));
        assert_eq!(condition(&s, ConditionType::TtlPolicy).status, "True");
        findings.ttl = Some(ttl_audit::Report {
            checked: 10,
            violations: 2,
            members_with_violations: 1,
            example: Some(ttl_audit::Example {
                member: "locks-1".into(),
                key: "orders".into(),
                finding: ttl_audit::Finding::NoExpiry,
            }),
        });
        let s = compute(&cluster(3, 1), vec![], &BTreeMap::new(), &findings, at(100));
        let c = condition(&s, ConditionType::TtlPolicy);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "KeysExceedMaxLockTTL")
        );
        assert!(
            c.message.starts_with("2 key(s) on 1 member(s) have no expiry or a TTL above maxLockTTL 30s, e.g. \"orders\" on locks-1 (no expiry)"),
            "{}",
            c.message
        );
    }

    #[test]
    fn steady_state_recomputes_the_identical_status() {
        let mut c = cluster(3, 4);
        let members: Vec<_> = (0..3).map(|i| member(i, MemberState::Ready, None)).collect();
        let observed: BTreeMap<_, _> = (0..3).map(|i| (Slot::new(i), running(true))).collect();
        let first = compute(&c, members.clone(), &observed, &Findings::default(), at(100));
        c.status = Some(first.clone());
        assert_eq!(
            compute(&c, members, &observed, &Findings::default(), at(500)),
            first
        );
    }
}
