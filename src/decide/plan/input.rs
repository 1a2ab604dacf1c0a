//! What the planner is given besides the observations: the recorded members, the cluster's
//! size and lists, the clock, and this operator process's own timing of holds.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::clock::timers::ClusterTimers;
use crate::crd::MemberStatus;
use crate::crd::model::Slot;
use crate::hold::ledger::Ledger;

/// The planner's inputs besides the observations.
pub(crate) struct PlanInput<'a> {
    pub cluster: &'a str,
    pub instances: i32,
    /// Member states as persisted in status.
    pub members: &'a [MemberStatus],
    pub now: Timestamp,
    /// The hold in force (`status.hold.duration`): running holds are lengthened to it.
    pub hold: Duration,
    /// Servers in the list clients are told (`status.publishedInstances`): a removed slot
    /// still on it is fenced and held, never deleted.
    pub published: i32,
    /// Slots below this may be released (`status.confirmedInstances`).
    pub confirmed: i32,
    /// This process's own timing of running holds, and what may stop releases.
    pub timing: Timing<'a>,
    /// Slots fenced on purpose, with the reason given ([`crate::hold::maintenance`]).
    pub maintenance: &'a BTreeMap<Slot, String>,
    /// Run ids of processes that outlived their pods which an admin asserts are dead
    /// (annotation [`super::unstopped::PROCESSES_GONE`]).
    pub gone_asserted: &'a BTreeSet<String>,
    /// The `<name>-ledger` ConfigMap's record of each slot's last identified process
    /// ([`crate::hold::ledger`]), if it exists and reads.
    pub ledger: Option<&'a Ledger>,
}

/// What this operator process adds to the recorded deadlines (docs/design.md §9.1), and what
/// it knows that is not on record yet.
#[derive(Clone, Copy)]
pub(crate) struct Timing<'a> {
    /// Holds this process has timed itself: no hold ends before it has seen the hold run in
    /// full on its own clock.
    pub timers: &'a ClusterTimers,
    /// Forward steps of this process's wall clock so far.
    pub skipped: Duration,
    /// Why no process may be released now (the operator's clock cannot be trusted), if so.
    pub release_blocked: Option<&'a str>,
    /// Processes (slot, run id) this process fenced ahead of a status write that did not land
    /// (`crate::hold::fence_ahead`): none is released until a write that holds it is on record.
    pub fenced_unrecorded: &'a [(Slot, String)],
    /// Processes (slot, run id) whose release this process decided and has not yet seen
    /// serving (`crate::release_ahead::OwedReleases`): a `Ready` record of one found fenced is
    /// a release still to send. Any other `Ready` process found fenced was fenced outside this
    /// operator process, and is held in full before it is released.
    pub owed_releases: &'a [(Slot, String)],
}

static NO_TIMERS: ClusterTimers = ClusterTimers::new();

impl Default for Timing<'_> {
    fn default() -> Self {
        Self {
            timers: &NO_TIMERS,
            skipped: Duration::ZERO,
            release_blocked: None,
            fenced_unrecorded: &[],
            owed_releases: &[],
        }
    }
}

impl Timing<'_> {
    /// Whether this process fenced `run_id` of `slot` ahead of a status write that did not land.
    pub fn fenced_unrecorded(&self, slot: Slot, run_id: &str) -> bool {
        self.fenced_unrecorded
            .iter()
            .any(|(s, r)| *s == slot && r == run_id)
    }

    /// Whether this process decided the release of `run_id` of `slot` and has not seen it
    /// serving since.
    pub fn owes_release(&self, slot: Slot, run_id: &str) -> bool {
        self.owed_releases.iter().any(|(s, r)| *s == slot && r == run_id)
    }
}
