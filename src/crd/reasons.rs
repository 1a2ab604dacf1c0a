//! The reasons of the events the operator publishes, about members (`MemberReason`) and about
//! the cluster as a whole (`ClusterReason`): one vocabulary, so that what counts as a loss (a
//! metric) or what tests look for cannot drift from what is published.

/// Why an event about one member was published (`kubectl describe rlc` shows `as_str`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberReason {
    InstanceCreated,
    InstanceLost,
    HoldStarted,
    HoldExtended,
    InstanceReleased,
    Refenced,
    FenceFailed,
    NameConflict,
    RollingReplacement,
    ClockJump,
    ClockStepBack,
    ClockDrift,
    UnstoppedProcessFenced,
    ReleaseAssumesProcessGone,
    UnstoppedProcessGone,
    ReleaseWaitsForProcessGone,
    ProcessTampered,
    PodChangeFailed,
    FencedForMaintenance,
    Unfenced,
    /// The kubelet cannot pull the member's image: it never starts until that is fixed.
    ImagePullFailed,
}

impl MemberReason {
    pub const ALL: [MemberReason; 21] = [
        Self::InstanceCreated,
        Self::InstanceLost,
        Self::HoldStarted,
        Self::HoldExtended,
        Self::InstanceReleased,
        Self::Refenced,
        Self::FenceFailed,
        Self::NameConflict,
        Self::RollingReplacement,
        Self::ClockJump,
        Self::ClockStepBack,
        Self::ClockDrift,
        Self::UnstoppedProcessFenced,
        Self::ReleaseAssumesProcessGone,
        Self::UnstoppedProcessGone,
        Self::ReleaseWaitsForProcessGone,
        Self::ProcessTampered,
        Self::PodChangeFailed,
        Self::FencedForMaintenance,
        Self::Unfenced,
        Self::ImagePullFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::InstanceCreated => "InstanceCreated",
            Self::InstanceLost => "InstanceLost",
            Self::HoldStarted => "HoldStarted",
            Self::HoldExtended => "HoldExtended",
            Self::InstanceReleased => "InstanceReleased",
            Self::Refenced => "Refenced",
            Self::FenceFailed => "FenceFailed",
            Self::NameConflict => "NameConflict",
            Self::RollingReplacement => "RollingReplacement",
            Self::ClockJump => "ClockJump",
            Self::ClockStepBack => "ClockStepBack",
            Self::ClockDrift => "ClockDrift",
            Self::UnstoppedProcessFenced => "UnstoppedProcessFenced",
            Self::ReleaseAssumesProcessGone => "ReleaseAssumesProcessGone",
            Self::UnstoppedProcessGone => "UnstoppedProcessGone",
            Self::ReleaseWaitsForProcessGone => "ReleaseWaitsForProcessGone",
            Self::ProcessTampered => "ProcessTampered",
            Self::PodChangeFailed => "PodChangeFailed",
            Self::FencedForMaintenance => "FencedForMaintenance",
            Self::Unfenced => "Unfenced",
            Self::ImagePullFailed => "ImagePullFailed",
        }
    }

    /// Whether the member lost its keys (or, after a clock jump, may as well have): counted by
    /// `redlock_instance_losses_total`.
    pub fn is_loss(self) -> bool {
        matches!(self, Self::InstanceLost | Self::ClockJump | Self::ProcessTampered)
    }
}

impl std::fmt::Display for MemberReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an event about the cluster as a whole was published (`kubectl describe rlc` shows
/// `as_str`): spec, TTL policy, children, endpoints, credentials, hold policy, client password
/// rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClusterReason {
    // Condition changes the user must act on (`reconcile::publish_condition_changes`).
    SpecRejected,
    SpecAccepted,
    TtlPolicyViolated,
    TtlPolicyRestored,
    OwnershipConflict,
    OwnershipConflictResolved,
    ChildApplyFailed,
    ChildrenApplied,
    /// A child edited outside the operator, put back (`apply::Applied::Restored`).
    ChildRestored,
    // Inputs and writes the reconcile cannot do without.
    EndpointsNotPublished,
    /// `<name>-ledger` refused: no process is released until it names it.
    LedgerNotWritten,
    TlsSecretInvalid,
    CredentialsMissing,
    CredentialsMismatch,
    CredentialsRestored,
    // Hold policy changes (`hold_policy::Change`).
    MaxLockTtlRaised,
    MaxLockTtlLowering,
    MaxLockTtlLowered,
    // Client password rotation steps (`password_rotation::Transition`).
    ClientPasswordRotationStarted,
    ClientPasswordPublished,
    ClientPasswordConfirmed,
    ClientPasswordRotated,
    // Admin password rotation steps (`admin_rotation::advance`).
    AdminPasswordRotationStarted,
    AdminPasswordSwitched,
    AdminPasswordRotated,
    // One leader per cluster across Leases (`crate::runtime::lease_owner`).
    LedByAnotherOperator,
    LeaseTakenOver,
}

impl ClusterReason {
    pub const ALL: [ClusterReason; 27] = [
        Self::SpecRejected,
        Self::SpecAccepted,
        Self::TtlPolicyViolated,
        Self::TtlPolicyRestored,
        Self::OwnershipConflict,
        Self::OwnershipConflictResolved,
        Self::ChildApplyFailed,
        Self::ChildrenApplied,
        Self::ChildRestored,
        Self::EndpointsNotPublished,
        Self::LedgerNotWritten,
        Self::TlsSecretInvalid,
        Self::CredentialsMissing,
        Self::CredentialsMismatch,
        Self::CredentialsRestored,
        Self::MaxLockTtlRaised,
        Self::MaxLockTtlLowering,
        Self::MaxLockTtlLowered,
        Self::ClientPasswordRotationStarted,
        Self::ClientPasswordPublished,
        Self::ClientPasswordConfirmed,
        Self::ClientPasswordRotated,
        Self::AdminPasswordRotationStarted,
        Self::AdminPasswordSwitched,
        Self::AdminPasswordRotated,
        Self::LedByAnotherOperator,
        Self::LeaseTakenOver,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SpecRejected => "SpecRejected",
            Self::SpecAccepted => "SpecAccepted",
            Self::TtlPolicyViolated => "TTLPolicyViolated",
            Self::TtlPolicyRestored => "TTLPolicyRestored",
            Self::OwnershipConflict => "OwnershipConflict",
            Self::OwnershipConflictResolved => "OwnershipConflictResolved",
            Self::ChildApplyFailed => "ChildApplyFailed",
            Self::ChildrenApplied => "ChildrenApplied",
            Self::ChildRestored => "ChildRestored",
            Self::EndpointsNotPublished => "EndpointsNotPublished",
            Self::LedgerNotWritten => "LedgerNotWritten",
            Self::TlsSecretInvalid => "TLSSecretInvalid",
            Self::CredentialsMissing => "CredentialsMissing",
            Self::CredentialsMismatch => "CredentialsMismatch",
            Self::CredentialsRestored => "CredentialsRestored",
            Self::MaxLockTtlRaised => "MaxLockTTLRaised",
            Self::MaxLockTtlLowering => "MaxLockTTLLowering",
            Self::MaxLockTtlLowered => "MaxLockTTLLowered",
            Self::ClientPasswordRotationStarted => "ClientPasswordRotationStarted",
            Self::ClientPasswordPublished => "ClientPasswordPublished",
            Self::ClientPasswordConfirmed => "ClientPasswordConfirmed",
            Self::ClientPasswordRotated => "ClientPasswordRotated",
            Self::AdminPasswordRotationStarted => "AdminPasswordRotationStarted",
            Self::AdminPasswordSwitched => "AdminPasswordSwitched",
            Self::AdminPasswordRotated => "AdminPasswordRotated",
            Self::LedByAnotherOperator => "LedByAnotherOperator",
            Self::LeaseTakenOver => "LeaseTakenOver",
        }
    }
}

impl std::fmt::Display for ClusterReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Asserts that `names` (a vocabulary's `as_str`s) are distinct CamelCase words, as the API
/// wants a reason.
#[cfg(test)]
pub(crate) fn assert_distinct_camel_case(names: impl IntoIterator<Item = &'static str>) {
    let names: Vec<_> = names.into_iter().collect();
    let distinct: std::collections::BTreeSet<_> = names.iter().collect();
    assert_eq!(distinct.len(), names.len(), "{names:?}");
    for n in names {
        assert!(
            n.chars().next().unwrap().is_ascii_uppercase() && n.chars().all(|c| c.is_ascii_alphanumeric()),
            "{n}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_camel_case_words() {
        assert_distinct_camel_case(MemberReason::ALL.map(MemberReason::as_str));
        assert!(MemberReason::InstanceLost.is_loss() && MemberReason::ClockJump.is_loss());
        assert!(!MemberReason::HoldStarted.is_loss());
    }

    /// The strings are what the API, the integration tests and users' alerts see: pinned.
    #[test]
    fn cluster_reasons_are_pinned_distinct_camel_case_words() {
        assert_distinct_camel_case(ClusterReason::ALL.map(ClusterReason::as_str));
        let pinned = [
            "SpecRejected",
            "SpecAccepted",
            "TTLPolicyViolated",
            "TTLPolicyRestored",
            "OwnershipConflict",
            "OwnershipConflictResolved",
            "ChildApplyFailed",
            "ChildrenApplied",
            "ChildRestored",
            "EndpointsNotPublished",
            "LedgerNotWritten",
            "TLSSecretInvalid",
            "CredentialsMissing",
            "CredentialsMismatch",
            "CredentialsRestored",
            "MaxLockTTLRaised",
            "MaxLockTTLLowering",
            "MaxLockTTLLowered",
            "ClientPasswordRotationStarted",
            "ClientPasswordPublished",
            "ClientPasswordConfirmed",
            "ClientPasswordRotated",
            "AdminPasswordRotationStarted",
            "AdminPasswordSwitched",
            "AdminPasswordRotated",
            "LedByAnotherOperator",
            "LeaseTakenOver",
        ];
        assert_eq!(ClusterReason::ALL.map(ClusterReason::as_str), pinned);
        // Member and cluster events share the object's event stream: no reason means both.
        let members: std::collections::BTreeSet<_> = MemberReason::ALL.map(MemberReason::as_str).into();
        assert!(pinned.iter().all(|r| !members.contains(r)));
        assert_eq!(ClusterReason::TlsSecretInvalid.to_string(), "TLSSecretInvalid");
    }
}
