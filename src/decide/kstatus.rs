//! The three conditions GitOps tools read (docs/spec.md "Conditions"): `Ready`, and the
//! abnormal-true `Reconciling` and `Stalled` of kstatus (sigs.k8s.io/cli-utils, as Flux's
//! health checks and Helm 4's `--wait` compute it), which the Argo CD health check in
//! `examples/argocd/` reads too. Derived from the conditions the operator states anyway, so
//! they cannot disagree with them. Pure.
//!
//! kstatus calls a custom resource `InProgress` while `status.observedGeneration` lags
//! `metadata.generation` or `Reconciling` is `True`, `Failed` while `Stalled` is `True`, and
//! `Current` otherwise: without these, a RedlockCluster would count as done as soon as its
//! status was first written, before any member serves.

use crate::crd::conditions::{ConditionReason, ConditionType, Desired};

/// `Ready`, `Reconciling` and `Stalled`, from the other conditions this reconcile states:
///
/// - **Stalled** while the cluster cannot make progress without the user: its spec rejected
///   (`SpecAccepted=False`) or a name it needs taken (`OwnershipConflict=True`);
/// - **Ready** while a quorum serves (`Available=True`) and nothing is in progress
///   (`Progressing=False`) or stalled;
/// - **Reconciling** while neither: members starting or held, a rolling replacement.
pub(crate) fn conditions(stated: &[Desired]) -> [Desired; 3] {
    let find = |t: ConditionType| stated.iter().find(|d| d.type_ == t);
    let stalled_by = [
        find(ConditionType::SpecAccepted).filter(|d| !d.status),
        find(ConditionType::OwnershipConflict).filter(|d| d.status),
    ]
    .into_iter()
    .flatten()
    .next();
    let available = find(ConditionType::Available);
    let progressing = find(ConditionType::Progressing).filter(|d| d.status);
    // What keeps it from being Ready, in the order a user should look at it.
    let not_ready = stalled_by.or(available.filter(|d| !d.status)).or(progressing);
    let ready = match (not_ready, available) {
        (None, Some(a)) => Desired {
            type_: ConditionType::Ready,
            status: true,
            reason: a.reason,
            message: a.message.clone(),
        },
        (Some(why), _) => Desired {
            type_: ConditionType::Ready,
            status: false,
            reason: why.reason,
            message: format!("{}: {}", why.type_, why.message),
        },
        (None, None) => Desired {
            type_: ConditionType::Ready,
            status: false,
            reason: ConditionReason::InstancesStarting,
            message: "no member state yet".into(),
        },
    };
    let reconciling = match (stalled_by, &ready) {
        (None, r) if !r.status => Desired {
            type_: ConditionType::Reconciling,
            status: true,
            reason: r.reason,
            message: r.message.clone(),
        },
        _ => Desired {
            type_: ConditionType::Reconciling,
            status: false,
            reason: ConditionReason::Reconciled,
            message: if stalled_by.is_some() {
                "stalled: nothing proceeds until the user acts (see Stalled)".into()
            } else {
                "a quorum serves and nothing is in progress".into()
            },
        },
    };
    let stalled = match stalled_by {
        Some(why) => Desired {
            type_: ConditionType::Stalled,
            status: true,
            reason: why.reason,
            message: format!("{}: {}", why.type_, why.message),
        },
        None => Desired {
            type_: ConditionType::Stalled,
            status: false,
            reason: ConditionReason::NotStalled,
            message: "nothing waits for the user".into(),
        },
    };
    [ready, reconciling, stalled]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(type_: ConditionType, status: bool, reason: ConditionReason) -> Desired {
        Desired {
            type_,
            status,
            reason,
            message: format!("{type_} says so"),
        }
    }

    /// Each combination of the conditions they follow from, and the three that come out
    /// (Ready, Reconciling, Stalled).
    #[test]
    fn ready_reconciling_and_stalled_follow_from_the_stated_conditions() {
        use ConditionReason::*;
        use ConditionType::*;
        let accepted = c(SpecAccepted, true, SpecValid);
        let no_conflict = c(OwnershipConflict, false, NoConflict);
        let cases = [
            (
                "a quorum serves, nothing in progress",
                vec![
                    c(Available, true, QuorumServing),
                    c(Progressing, false, AllInstancesReady),
                ],
                (true, false, false),
                QuorumServing,
            ),
            (
                "a quorum serves while a member is held",
                vec![
                    c(Available, true, QuorumServing),
                    c(Progressing, true, HoldsRunning),
                ],
                (false, true, false),
                HoldsRunning,
            ),
            (
                "members starting, no quorum yet",
                vec![
                    c(Available, false, QuorumNotServing),
                    c(Progressing, true, InstancesStarting),
                ],
                (false, true, false),
                QuorumNotServing,
            ),
            (
                "a rolling replacement",
                vec![
                    c(Available, true, QuorumServing),
                    c(Progressing, true, RollingUpdate),
                ],
                (false, true, false),
                RollingUpdate,
            ),
            (
                "a rejected spec, while the old one serves",
                vec![
                    c(Available, true, QuorumServing),
                    c(Progressing, false, AllInstancesReady),
                    c(SpecAccepted, false, SpecRejected),
                ],
                (false, false, true),
                SpecRejected,
            ),
            (
                "a pod name taken",
                vec![
                    c(Available, false, QuorumNotServing),
                    c(Progressing, true, InstancesStarting),
                    c(OwnershipConflict, true, NameTaken),
                ],
                (false, false, true),
                NameTaken,
            ),
        ];
        for (name, mut stated, (ready, reconciling, stalled), reason) in cases {
            if !stated.iter().any(|d| d.type_ == SpecAccepted) {
                stated.push(accepted.clone());
            }
            if !stated.iter().any(|d| d.type_ == OwnershipConflict) {
                stated.push(no_conflict.clone());
            }
            let [r, g, s] = conditions(&stated);
            assert_eq!((r.type_, g.type_, s.type_), (Ready, Reconciling, Stalled));
            assert_eq!(
                (r.status, g.status, s.status),
                (ready, reconciling, stalled),
                "{name}"
            );
            assert_eq!(r.reason, reason, "{name}: Ready's reason");
            assert!(
                exactly_one_state(&r, &g, &s),
                "{name}: Ready, Reconciling and Stalled exclude each other"
            );
        }
    }

    fn exactly_one_state(r: &Desired, g: &Desired, s: &Desired) -> bool {
        [r.status, g.status, s.status].iter().filter(|b| **b).count() == 1
    }

    #[test]
    fn without_any_member_state_it_is_reconciling() {
        let [r, g, s] = conditions(&[]);
        assert!(!r.status && g.status && !s.status);
    }
}
