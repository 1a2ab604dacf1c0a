//! The operator's readiness gate on each instance pod ([`SERVING_CONDITION`]): `True` exactly
//! while the pod's process is released to lock clients, so a pod is Ready, and behind its
//! Services, only then. It replaces an exec readiness probe that logged in as a lock client
//! every period in every pod (a process per member per period, the largest CPU cost of a
//! node full of members); the startup probe still logs in once per container start, which
//! covers a restart the operator does not see (docs/design.md, "Readiness follows the fence").
//!
//! Pure: which pods' conditions to write once a reconcile's fences and releases are done.
//! Nothing is written while the gates already say what the records say, so steady state costs
//! no request.

use std::collections::BTreeMap;

use crate::crd::model::Slot;
use crate::crd::{MemberState, MemberStatus};
use crate::decide::observe::{PodState, ServingGate, SlotObservation};
use crate::decide::silences::HUNG_AFTER;
use crate::hold::release_ahead::Released;

pub use crate::children::names::SERVING_CONDITION;

/// One condition to write on one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GateWrite {
    pub slot: Slot,
    /// The pod the decision is about: the write is refused if the name now has a newer pod.
    pub pod_uid: String,
    pub serving: bool,
    /// The condition's reason (CamelCase) and message.
    pub reason: &'static str,
    pub message: String,
}

/// The gate writes that bring each pod's condition to its member's record.
///
/// `members`: the records on record now; `released`: the releases done in this reconcile
/// (before or after its status write), which the probe, taken before them, does not show yet.
///
/// A gate goes `True` only for the process the record releases, once that process is seen
/// (or just made) letting clients in. It goes `False` as soon as the record stops releasing
/// the pod's process (a hold, a maintenance fence, another process in the container). When
/// the probe got no answer and the container is the recorded one, the gate is left as it is:
/// a slow answer is not a reason to flap a Service (the record decides a loss, not a timeout).
/// Pods that are not running, are being deleted, or were built without the gate get nothing:
/// the kubelet already reports them not Ready. Nor does a gate not set yet get `False`.
pub(crate) fn writes(
    members: &[MemberStatus],
    observed: &BTreeMap<Slot, SlotObservation>,
    released: &[Released],
) -> Vec<GateWrite> {
    observed
        .iter()
        .filter_map(|(&slot, o)| {
            let current = match o.serving_gate {
                ServingGate::NotDeclared => return None,
                ServingGate::Unset => None,
                ServingGate::Set(serving) => Some(serving),
            };
            let PodState::Running {
                container_id,
                terminating: false,
                ..
            } = &o.pod
            else {
                return None;
            };
            let pod_uid = o.pod_uid.clone()?;
            let record = members.iter().find(|m| m.slot == slot);
            let (serving, reason, message) = desired(slot, record, container_id.as_deref(), o, released)?;
            // An unset gate keeps the pod not Ready already: a new pod's first write is its
            // release (one write per pod start, not two).
            let unchanged = current.unwrap_or(false) == serving;
            (!unchanged).then_some(GateWrite {
                slot,
                pod_uid,
                serving,
                reason,
                message,
            })
        })
        .collect()
}

/// What the gate of `slot`'s running pod should say, or `None` to leave it.
fn desired(
    slot: Slot,
    record: Option<&MemberStatus>,
    container_id: Option<&str>,
    o: &SlotObservation,
    released: &[Released],
) -> Option<(bool, &'static str, String)> {
    let not_serving = |reason: &'static str, message: String| Some((false, reason, message));
    let Some(m) = record else {
        return not_serving("NotReleased", "no member record for the slot yet".into());
    };
    if let Some(why) = &m.maintenance {
        return not_serving("Fenced", format!("fenced for maintenance: {why}"));
    }
    if m.lost_on_refusal() {
        // Its address refuses the operator while the container runs: a crash the kubelet has
        // not reported yet, or a rule against the operator alone while clients are served.
        // The kubelet's own TCP readiness dial takes a crashed process's pod out within a
        // period; the operator's view alone must not take a serving one out.
        return None;
    }
    if m.state != MemberState::Ready {
        let message = match (&m.state, &m.held_until) {
            (MemberState::Held | MemberState::Lost, Some(until)) => {
                format!("held until {}", until.0)
            }
            _ => format!("member {:?}", m.state),
        };
        return not_serving("Held", message);
    }
    let Some(run_id) = m.run_id.as_deref() else {
        // A `Ready` record without a run id is planned as a loss (a hold) when it meets a
        // fenced process: never released on it.
        return not_serving("NotReleased", "no released process on record".into());
    };
    if m.container_id.is_some() && container_id.is_some() && m.container_id.as_deref() != container_id {
        return not_serving(
            "NotReleased",
            "the container runs another process than the released one".into(),
        );
    }
    let released_now = released.iter().any(|r| r.slot == slot && r.run_id == run_id);
    let serving = Some((
        true,
        "Released",
        format!("process {run_id} released to lock clients"),
    ));
    if released_now {
        return serving;
    }
    match o.probe.answered() {
        Some(info) if info.run_id == run_id && info.client_enabled => serving,
        Some(info) if info.run_id != run_id => not_serving(
            "NotReleased",
            format!("process {} runs, not the released {run_id}", info.run_id),
        ),
        Some(_) => not_serving("NotReleased", format!("process {run_id} is fenced")),
        // A hung process (safety review 3, N7) leaves its Services after a bounded silence:
        // routing only, no hold (its keys are presumed intact); its first answer reopens the
        // gate (the arm above).
        None if o.silent_for.is_some_and(|d| d >= HUNG_AFTER) => not_serving(
            "NotAnswering",
            format!(
                "process {run_id} has not answered the operator for {} s: out of its Services until it answers (keys presumed intact, no hold)",
                o.silent_for.unwrap_or_default().as_secs()
            ),
        ),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::observe::{Probe, RedisInfo};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use std::time::Duration;

    fn record(state: MemberState, run_id: Option<&str>, container: Option<&str>) -> MemberStatus {
        MemberStatus {
            run_id: run_id.map(Into::into),
            container_id: container.map(Into::into),
            held_until: state
                .is_holding()
                .then(|| MicroTime("2026-01-01T00:00:30Z".parse().unwrap())),
            ..MemberStatus::new("locks-0".into(), Slot::new(0), state)
        }
    }

    fn answered(run_id: &str, client_enabled: bool) -> Probe {
        Probe::Answered(RedisInfo {
            run_id: run_id.into(),
            version: "7.2.4".into(),
            client_enabled,
            pod_uid: Some("p1".into()),
            client_password_hashes: None,
            admin_password_hashes: None,
            deviations: Vec::new(),
        })
    }

    fn running(gate: ServingGate, container: &str, probe: Probe) -> SlotObservation {
        SlotObservation {
            pod: PodState::Running {
                container_id: Some(container.into()),
                ready: false,
                terminating: false,
            },
            pod_uid: Some("p1".into()),
            probe,
            serving_gate: gate,
            ..SlotObservation::default()
        }
    }

    fn one(o: SlotObservation) -> BTreeMap<Slot, SlotObservation> {
        BTreeMap::from([(Slot::new(0), o)])
    }

    fn released(run_id: &str) -> Released {
        Released {
            slot: Slot::new(0),
            run_id: run_id.into(),
            at: "2026-01-01T00:00:31Z".parse().unwrap(),
        }
    }

    /// The gate value written, if any.
    fn written(members: &[MemberStatus], o: SlotObservation, done: &[Released]) -> Option<bool> {
        let w = writes(members, &one(o), done);
        assert!(w.len() <= 1);
        w.first().map(|w| {
            assert_eq!((w.slot, w.pod_uid.as_str()), (Slot::new(0), "p1"));
            w.serving
        })
    }

    #[test]
    fn a_released_process_opens_the_gate_once() {
        let ready = [record(MemberState::Ready, Some("r1"), Some("c1"))];
        // Just released by this reconcile: the probe, taken before, still saw it fenced.
        let fenced = answered("r1", false);
        assert_eq!(
            written(
                &ready,
                running(ServingGate::Unset, "c1", fenced.clone()),
                &[released("r1")]
            ),
            Some(true)
        );
        assert_eq!(
            written(
                &ready,
                running(ServingGate::Set(false), "c1", fenced),
                &[released("r1")]
            ),
            Some(true)
        );
        // Seen serving: opened if closed, nothing written once open (steady state).
        assert_eq!(
            written(
                &ready,
                running(ServingGate::Set(false), "c1", answered("r1", true)),
                &[]
            ),
            Some(true)
        );
        assert_eq!(
            written(
                &ready,
                running(ServingGate::Set(true), "c1", answered("r1", true)),
                &[]
            ),
            None
        );
        // Another process's release does not count: r1 is still fenced, so the gate stays
        // closed (nothing to write) or is closed.
        let fenced = answered("r1", false);
        assert_eq!(
            written(
                &ready,
                running(ServingGate::Set(false), "c1", fenced.clone()),
                &[released("r0")]
            ),
            None
        );
        assert_eq!(
            written(
                &ready,
                running(ServingGate::Set(true), "c1", fenced),
                &[released("r0")]
            ),
            Some(false)
        );
    }

    #[test]
    fn a_hold_or_a_maintenance_fence_closes_the_gate() {
        for state in [MemberState::Held, MemberState::Lost, MemberState::Starting] {
            let members = [record(state, Some("r2"), Some("c2"))];
            for probe in [
                answered("r2", false),
                answered("r2", true),
                Probe::Failed("timeout".into()),
            ] {
                assert_eq!(
                    written(
                        &members,
                        running(ServingGate::Set(true), "c2", probe.clone()),
                        &[]
                    ),
                    Some(false)
                );
                // Unset keeps the pod not Ready as well as False does: nothing to write.
                assert_eq!(
                    written(&members, running(ServingGate::Unset, "c2", probe.clone()), &[]),
                    None
                );
                assert_eq!(
                    written(&members, running(ServingGate::Set(false), "c2", probe), &[]),
                    None
                );
            }
        }
        let mut fenced = record(MemberState::Ready, Some("r1"), Some("c1"));
        fenced.maintenance = Some("kernel upgrade".into());
        let w = writes(
            &[fenced],
            &one(running(ServingGate::Set(true), "c1", answered("r1", true))),
            &[released("r1")],
        );
        assert_eq!((w[0].serving, w[0].reason), (false, "Fenced"));
        assert!(w[0].message.contains("kernel upgrade"), "{}", w[0].message);
        // No record for the slot yet (a pod created before its first status write landed).
        assert_eq!(
            written(
                &[],
                running(ServingGate::Set(true), "c1", answered("r1", true)),
                &[]
            ),
            Some(false)
        );
        assert_eq!(
            written(&[], running(ServingGate::Unset, "c1", answered("r1", true)), &[]),
            None
        );
    }

    #[test]
    fn another_process_in_the_pod_closes_the_gate() {
        let ready = [record(MemberState::Ready, Some("r1"), Some("c1"))];
        // The container restarted (the record has not caught up): whatever the probe says.
        for probe in [
            answered("r9", true),
            Probe::Failed("connection reset".into()),
            Probe::NotProbed,
        ] {
            assert_eq!(
                written(&ready, running(ServingGate::Set(true), "c9", probe), &[]),
                Some(false)
            );
        }
        // Same container id, another run id answering: not the released process either.
        assert_eq!(
            written(
                &ready,
                running(ServingGate::Set(true), "c1", answered("r9", true)),
                &[]
            ),
            Some(false)
        );
        // The released process found fenced again (and not released now): closed.
        assert_eq!(
            written(
                &ready,
                running(ServingGate::Set(true), "c1", answered("r1", false)),
                &[]
            ),
            Some(false)
        );
        // A `Ready` record without a run id is never a release.
        let no_run_id = [record(MemberState::Ready, None, Some("c1"))];
        assert_eq!(
            written(
                &no_run_id,
                running(ServingGate::Set(true), "c1", answered("r1", true)),
                &[]
            ),
            Some(false)
        );
    }

    #[test]
    fn a_refusal_of_the_operator_alone_leaves_the_gate() {
        let mut refused = record(MemberState::Lost, Some("r1"), Some("c1"));
        refused.refused_since = Some(MicroTime("2026-01-01T00:00:10Z".parse().unwrap()));
        refused.held_until = None;
        assert!(refused.lost_on_refusal());
        for gate in [ServingGate::Set(true), ServingGate::Set(false)] {
            let o = running(gate, "c1", Probe::Refused("connection refused".into()));
            assert_eq!(written(std::slice::from_ref(&refused), o, &[]), None);
        }
        // Once the loss is seen (a hold runs), the gate closes.
        let mut lost = refused.clone();
        lost.held_until = Some(MicroTime("2026-01-01T00:00:40Z".parse().unwrap()));
        let o = running(
            ServingGate::Set(true),
            "c1",
            Probe::Refused("connection refused".into()),
        );
        assert_eq!(written(&[lost], o, &[]), Some(false));
    }

    #[test]
    fn no_answer_from_the_released_container_leaves_the_gate() {
        let ready = [record(MemberState::Ready, Some("r1"), Some("c1"))];
        for gate in [
            ServingGate::Unset,
            ServingGate::Set(true),
            ServingGate::Set(false),
        ] {
            for probe in [
                Probe::Failed("timeout".into()),
                Probe::NotProbed,
                Probe::Refused("refused".into()),
            ] {
                assert_eq!(written(&ready, running(gate, "c1", probe), &[]), None);
            }
        }
    }

    /// Safety review 3, N7: a released process that hangs leaves its Services once it has
    /// not answered for `HUNG_AFTER` (not before: one slow answer must not flap a Service),
    /// and its first answer puts it back. No hold, no loss: the record stays `Ready`.
    #[test]
    fn a_hung_released_process_leaves_its_services_after_a_bounded_silence() {
        let ready = [record(MemberState::Ready, Some("r1"), Some("c1"))];
        let silent = |for_: Duration| SlotObservation {
            silent_for: Some(for_),
            ..running(ServingGate::Set(true), "c1", Probe::Failed("timeout".into()))
        };
        assert_eq!(
            written(&ready, silent(HUNG_AFTER - Duration::from_millis(1)), &[]),
            None
        );
        assert_eq!(written(&ready, silent(HUNG_AFTER), &[]), Some(false));
        let closed = SlotObservation {
            serving_gate: ServingGate::Set(false),
            ..silent(HUNG_AFTER * 3)
        };
        assert_eq!(
            written(&ready, closed, &[]),
            None,
            "already out: nothing to write"
        );
        // It answers again, still released: back in.
        let back = running(ServingGate::Set(false), "c1", answered("r1", true));
        assert_eq!(written(&ready, back, &[]), Some(true));
    }

    #[test]
    fn pods_without_the_gate_not_running_or_terminating_get_nothing() {
        let held = [record(MemberState::Held, Some("r2"), Some("c2"))];
        let open = running(ServingGate::Set(true), "c2", answered("r2", false));
        let old = SlotObservation {
            serving_gate: ServingGate::NotDeclared,
            ..open.clone()
        };
        assert_eq!(written(&held, old, &[]), None);
        let terminating = SlotObservation {
            pod: PodState::Running {
                container_id: Some("c2".into()),
                ready: true,
                terminating: true,
            },
            ..open.clone()
        };
        assert_eq!(written(&held, terminating, &[]), None);
        for pod in [
            PodState::Missing,
            PodState::NotRunning {
                reason: "CrashLoopBackOff".into(),
            },
            PodState::Finished {
                reason: "failed".into(),
            },
            PodState::Foreign {
                owner: "no controller".into(),
            },
        ] {
            assert_eq!(written(&held, SlotObservation { pod, ..open.clone() }, &[]), None);
        }
        // Without a pod UID there is nothing to make the write conditional on.
        assert_eq!(
            written(
                &held,
                SlotObservation {
                    pod_uid: None,
                    ..open
                },
                &[]
            ),
            None
        );
    }

    #[test]
    fn each_slot_follows_its_own_record() {
        let mut members = vec![
            record(MemberState::Ready, Some("r0"), Some("c0")),
            record(MemberState::Held, Some("r1"), Some("c1")),
        ];
        members[1].slot = Slot::new(1);
        let observed = BTreeMap::from([
            (
                Slot::new(0),
                running(ServingGate::Unset, "c0", answered("r0", true)),
            ),
            (
                Slot::new(1),
                running(ServingGate::Set(true), "c1", answered("r1", false)),
            ),
        ]);
        let w = writes(&members, &observed, &[]);
        let got: Vec<(Slot, bool)> = w.iter().map(|w| (w.slot, w.serving)).collect();
        assert_eq!(got, vec![(Slot::new(0), true), (Slot::new(1), false)]);
        assert!(w[1].message.contains("held until"), "{}", w[1].message);
    }
}
