//! The reasons of the events the operator publishes about members: one vocabulary, so that
//! what counts as a loss (a metric) or what tests look for cannot drift from what is published.

/// Why an event about one member was published (`kubectl describe rlc` shows `as_str`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberReason {
    InstanceCreated,
    InstanceLost,
    HoldStarted,
    HoldExtended,
    InstanceReleased,
    Refenced,
    NameConflict,
    RollingReplacement,
    ClockJump,
    ClockStepBack,
    ClockDrift,
    UnstoppedProcessFenced,
    ReleaseAssumesProcessGone,
    PodChangeFailed,
    FencedForMaintenance,
    Unfenced,
}

impl MemberReason {
    pub const ALL: [MemberReason; 16] = [
        Self::InstanceCreated,
        Self::InstanceLost,
        Self::HoldStarted,
        Self::HoldExtended,
        Self::InstanceReleased,
        Self::Refenced,
        Self::NameConflict,
        Self::RollingReplacement,
        Self::ClockJump,
        Self::ClockStepBack,
        Self::ClockDrift,
        Self::UnstoppedProcessFenced,
        Self::ReleaseAssumesProcessGone,
        Self::PodChangeFailed,
        Self::FencedForMaintenance,
        Self::Unfenced,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::InstanceCreated => "InstanceCreated",
            Self::InstanceLost => "InstanceLost",
            Self::HoldStarted => "HoldStarted",
            Self::HoldExtended => "HoldExtended",
            Self::InstanceReleased => "InstanceReleased",
            Self::Refenced => "Refenced",
            Self::NameConflict => "NameConflict",
            Self::RollingReplacement => "RollingReplacement",
            Self::ClockJump => "ClockJump",
            Self::ClockStepBack => "ClockStepBack",
            Self::ClockDrift => "ClockDrift",
            Self::UnstoppedProcessFenced => "UnstoppedProcessFenced",
            Self::ReleaseAssumesProcessGone => "ReleaseAssumesProcessGone",
            Self::PodChangeFailed => "PodChangeFailed",
            Self::FencedForMaintenance => "FencedForMaintenance",
            Self::Unfenced => "Unfenced",
        }
    }

    /// Whether the member lost its keys (or, after a clock jump, may as well have): counted by
    /// `redlock_instance_losses_total`.
    pub fn is_loss(self) -> bool {
        matches!(self, Self::InstanceLost | Self::ClockJump)
    }
}

impl std::fmt::Display for MemberReason {
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
}
