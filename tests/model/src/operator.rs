//! Everything the model takes from the operator, in one place: the decision code it calls
//! and the types it builds that code's inputs from. A module of the operator that moves is
//! a change to this file only.

pub use redlock_operator::children::hash::spec_hash;
pub use redlock_operator::children::pod as pod_builder;
pub use redlock_operator::clock::Reading;
pub use redlock_operator::clock::member::Verdict;
pub use redlock_operator::clock::timers::ClusterTimers;
pub use redlock_operator::crd::model::Slot;
pub use redlock_operator::crd::{MemberState, MemberStatus, RedlockCluster, RedlockClusterStatus};
pub use redlock_operator::decide::observe::{
    KubeletAnswer, PodState, Probe, RedisInfo, SlotObservation, UnstoppedSearch,
};
pub use redlock_operator::decide::plan::still_owed;
pub use redlock_operator::decide::resize::Told;
pub use redlock_operator::decide::{ChildrenReport, Decision, Facts, Observation, decide};
pub use redlock_operator::hold::fence_ahead::{self, UnrecordedFence, UnrecordedFences};
pub use redlock_operator::hold::ledger::{self, Ledger};
pub use redlock_operator::hold::release_ahead::{self, Released, Unrecorded, UnrecordedRelease};
