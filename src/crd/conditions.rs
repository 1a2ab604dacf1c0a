//! The conditions of `RedlockCluster.status`: their vocabulary (types and reasons, one enum
//! each, so the status writer, the events about changes and `kubectl redlock status` cannot
//! drift apart), and the merging of standard `metav1.Condition`s: `lastTransitionTime` moves
//! only when a condition's status really flips, so an unchanged cluster produces an identical
//! status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// A condition type of `RedlockCluster.status` (`as_str` is what the API carries, and what
/// `kubectl wait --for=condition=...` and users' scripts match: never rename one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionType {
    Available,
    Progressing,
    Degraded,
    SpecAccepted,
    TtlPolicy,
    OwnershipConflict,
    ChildrenApplied,
    Resizing,
    Maintenance,
    FailureIndependence,
    ClientPasswordRotation,
    AdminPasswordRotation,
    // What kstatus (Flux, Helm 4's `--wait`) and Argo CD's health check read
    // (`crate::decide::kstatus`).
    Ready,
    Reconciling,
    Stalled,
}

impl ConditionType {
    pub const ALL: [ConditionType; 15] = [
        Self::Available,
        Self::Progressing,
        Self::Degraded,
        Self::SpecAccepted,
        Self::TtlPolicy,
        Self::OwnershipConflict,
        Self::ChildrenApplied,
        Self::Resizing,
        Self::Maintenance,
        Self::FailureIndependence,
        Self::ClientPasswordRotation,
        Self::AdminPasswordRotation,
        Self::Ready,
        Self::Reconciling,
        Self::Stalled,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Available => "Available",
            Self::Progressing => "Progressing",
            Self::Degraded => "Degraded",
            Self::SpecAccepted => "SpecAccepted",
            Self::TtlPolicy => "TTLPolicy",
            Self::OwnershipConflict => "OwnershipConflict",
            Self::ChildrenApplied => "ChildrenApplied",
            Self::Resizing => "Resizing",
            Self::Maintenance => "Maintenance",
            Self::FailureIndependence => "FailureIndependence",
            Self::ClientPasswordRotation => "ClientPasswordRotation",
            Self::AdminPasswordRotation => "AdminPasswordRotation",
            Self::Ready => "Ready",
            Self::Reconciling => "Reconciling",
            Self::Stalled => "Stalled",
        }
    }

    /// The type a condition read back from the API names; `None` for one this operator does
    /// not write (another controller's, or a newer operator's).
    pub fn parse(type_: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == type_)
    }

    /// Whether `True` is the news that asks for a look (Kubernetes calls these conditions of
    /// "abnormal-true" polarity): the other types are good news when `True`.
    pub fn true_is_bad(self) -> bool {
        matches!(
            self,
            Self::Degraded
                | Self::OwnershipConflict
                | Self::Maintenance
                | Self::Progressing
                | Self::Resizing
                | Self::Reconciling
                | Self::Stalled
        )
    }
}

impl std::fmt::Display for ConditionType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a condition has its status (`reason` of the condition; `as_str` is what the API
/// carries). One list for all types: a few reasons serve two of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionReason {
    // Available
    QuorumServing,
    QuorumNotServing,
    // Progressing
    RollingUpdate,
    AllInstancesReady,
    HoldsRunning,
    InstancesStarting,
    // Degraded
    AllInstancesServing,
    QuorumLost,
    InstancesNotServing,
    // SpecAccepted
    SpecValid,
    SpecRejected,
    // TTLPolicy
    WithinMaxLockTtl,
    KeysExceedMaxLockTtl,
    // OwnershipConflict
    NoConflict,
    NameTaken,
    // ChildrenApplied
    Applied,
    ApplyFailed,
    // Resizing
    ScaleDown,
    ServerListSettled,
    // Resizing and ClientPasswordRotation
    AwaitingClientConfirmation,
    // Maintenance
    FenceRequestInvalid,
    NoMemberFenced,
    MembersFenced,
    // FailureIndependence
    IndependentFailureDomains,
    SharedFailureDomain,
    // ClientPasswordRotation and AdminPasswordRotation
    AddingPassword,
    RemovingOldPassword,
    AuthDisabled,
    Rotated,
    // Reconciling and Stalled (Ready takes the reason of what it follows from)
    Reconciled,
    NotStalled,
}

impl ConditionReason {
    pub const ALL: [ConditionReason; 31] = [
        Self::QuorumServing,
        Self::QuorumNotServing,
        Self::RollingUpdate,
        Self::AllInstancesReady,
        Self::HoldsRunning,
        Self::InstancesStarting,
        Self::AllInstancesServing,
        Self::QuorumLost,
        Self::InstancesNotServing,
        Self::SpecValid,
        Self::SpecRejected,
        Self::WithinMaxLockTtl,
        Self::KeysExceedMaxLockTtl,
        Self::NoConflict,
        Self::NameTaken,
        Self::Applied,
        Self::ApplyFailed,
        Self::ScaleDown,
        Self::ServerListSettled,
        Self::AwaitingClientConfirmation,
        Self::FenceRequestInvalid,
        Self::NoMemberFenced,
        Self::MembersFenced,
        Self::IndependentFailureDomains,
        Self::SharedFailureDomain,
        Self::AddingPassword,
        Self::RemovingOldPassword,
        Self::AuthDisabled,
        Self::Rotated,
        Self::Reconciled,
        Self::NotStalled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::QuorumServing => "QuorumServing",
            Self::QuorumNotServing => "QuorumNotServing",
            Self::RollingUpdate => "RollingUpdate",
            Self::AllInstancesReady => "AllInstancesReady",
            Self::HoldsRunning => "HoldsRunning",
            Self::InstancesStarting => "InstancesStarting",
            Self::AllInstancesServing => "AllInstancesServing",
            Self::QuorumLost => "QuorumLost",
            Self::InstancesNotServing => "InstancesNotServing",
            Self::SpecValid => "SpecValid",
            Self::SpecRejected => "SpecRejected",
            Self::WithinMaxLockTtl => "WithinMaxLockTTL",
            Self::KeysExceedMaxLockTtl => "KeysExceedMaxLockTTL",
            Self::NoConflict => "NoConflict",
            Self::NameTaken => "NameTaken",
            Self::Applied => "Applied",
            Self::ApplyFailed => "ApplyFailed",
            Self::ScaleDown => "ScaleDown",
            Self::ServerListSettled => "ServerListSettled",
            Self::AwaitingClientConfirmation => "AwaitingClientConfirmation",
            Self::FenceRequestInvalid => "FenceRequestInvalid",
            Self::NoMemberFenced => "NoMemberFenced",
            Self::MembersFenced => "MembersFenced",
            Self::IndependentFailureDomains => "IndependentFailureDomains",
            Self::SharedFailureDomain => "SharedFailureDomain",
            Self::AddingPassword => "AddingPassword",
            Self::RemovingOldPassword => "RemovingOldPassword",
            Self::AuthDisabled => "AuthDisabled",
            Self::Rotated => "Rotated",
            Self::Reconciled => "Reconciled",
            Self::NotStalled => "NotStalled",
        }
    }
}

impl std::fmt::Display for ConditionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `status` of a condition as the API carries it.
pub(crate) fn status_str(status: bool) -> &'static str {
    if status { "True" } else { "False" }
}

/// A condition as computed by a reconcile, before the transition time is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub type_: ConditionType,
    pub status: bool,
    pub reason: ConditionReason,
    pub message: String,
}

/// Builds the new condition list: one entry per `desired`, in that order, each keeping the
/// old `lastTransitionTime` unless its status changed. `now` is truncated to seconds, the
/// precision the API server stores, so a later comparison sees exactly what was written.
pub(crate) fn merge(
    old: &[Condition],
    desired: &[Desired],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let now = Time(Timestamp::from_second(now.as_second()).expect("seconds of a valid timestamp are valid"));
    desired
        .iter()
        .map(|d| {
            let status = status_str(d.status).to_owned();
            let last_transition_time = old
                .iter()
                .find(|c| c.type_ == d.type_.as_str() && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: d.type_.as_str().to_owned(),
                status,
                reason: d.reason.as_str().to_owned(),
                message: d.message.clone(),
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    use ConditionReason::{QuorumNotServing as B, QuorumServing as A};

    fn desired(status: bool, reason: ConditionReason) -> Desired {
        Desired {
            type_: ConditionType::Available,
            status,
            reason,
            message: "m".into(),
        }
    }

    #[test]
    fn new_condition_starts_now_truncated_to_seconds() {
        let now = Timestamp::from_millisecond(10_500).unwrap();
        let c = merge(&[], &[desired(true, A)], Some(3), now);
        assert_eq!(c[0].last_transition_time, Time(at(10)));
        assert_eq!(c[0].status, "True");
        assert_eq!(c[0].observed_generation, Some(3));
    }

    #[test]
    fn unchanged_status_keeps_transition_time_even_if_reason_changes() {
        let first = merge(&[], &[desired(true, A)], Some(1), at(10));
        let second = merge(&first, &[desired(true, B)], Some(2), at(99));
        assert_eq!(second[0].last_transition_time, Time(at(10)));
        assert_eq!(second[0].reason, "QuorumNotServing");
    }

    #[test]
    fn flipped_status_moves_transition_time() {
        let first = merge(&[], &[desired(true, A)], Some(1), at(10));
        let second = merge(&first, &[desired(false, A)], Some(1), at(99));
        assert_eq!(second[0].last_transition_time, Time(at(99)));
    }

    #[test]
    fn same_input_twice_is_identical() {
        let first = merge(&[], &[desired(true, A)], Some(1), at(10));
        assert_eq!(merge(&first, &[desired(true, A)], Some(1), at(50)), first);
    }

    /// The strings users, `kubectl wait` and the tests match: a rename here is an API change.
    #[test]
    fn types_keep_their_api_names() {
        let names: Vec<_> = ConditionType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(
            names,
            [
                "Available",
                "Progressing",
                "Degraded",
                "SpecAccepted",
                "TTLPolicy",
                "OwnershipConflict",
                "ChildrenApplied",
                "Resizing",
                "Maintenance",
                "FailureIndependence",
                "ClientPasswordRotation",
                "AdminPasswordRotation",
                "Ready",
                "Reconciling",
                "Stalled",
            ]
        );
        for t in ConditionType::ALL {
            assert_eq!(ConditionType::parse(t.as_str()), Some(t));
        }
        assert_eq!(ConditionType::parse("Healthy"), None);
    }

    #[test]
    fn reasons_are_distinct_camel_case_words() {
        crate::crd::reasons::assert_distinct_camel_case(ConditionReason::ALL.map(ConditionReason::as_str));
        assert_eq!(ConditionReason::WithinMaxLockTtl.as_str(), "WithinMaxLockTTL");
    }
}
