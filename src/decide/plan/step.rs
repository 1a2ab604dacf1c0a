//! What planning decides: one slot's [`Step`], and the whole [`Plan`] the slots' steps are
//! gathered into, with the events worth telling the user.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::crd::model::Slot;
use crate::crd::reasons::MemberReason;
use crate::crd::{MemberStatus, UnstoppedProcess};

/// Something worth telling the user about (becomes an event and a log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberEvent {
    pub slot: Slot,
    pub reason: MemberReason,
    pub message: String,
    pub warning: bool,
}

/// Everything one reconcile should do.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// Next member states, in slot order; written to status before any action.
    pub members: Vec<MemberStatus>,
    /// Slots whose pod must be created (every process starts fenced, so this is always safe).
    pub create_pods: Vec<Slot>,
    /// Of `create_pods`, those replacing a pod whose process was never seen to stop: that
    /// process's record, which the new pod carries (`children::pod::replacement`).
    pub predecessors: BTreeMap<Slot, UnstoppedProcess>,
    /// Slots whose pod must go (scale-down).
    pub delete_pods: Vec<Slot>,
    /// (slot, run id) to fence again with `ACL SETUSER <client> off` and `CLIENT KILL USER
    /// <client>`, after the status write: a process found serving clients while its record
    /// says it must be held.
    pub fences: Vec<(Slot, String)>,
    /// (slot, run id) to release with `ACL SETUSER <client> on`, after the status write.
    pub releases: Vec<(Slot, String)>,
    pub events: Vec<MemberEvent>,
    /// When the earliest running hold ends: reconcile again exactly then.
    pub next_hold_end: Option<Duration>,
    /// A slot waits for its process to answer (just started, or restarted by the kubelet
    /// after the hold ended): look again soon, not a probe period later.
    pub awaiting_process: bool,
}

/// What one slot's planning decided.
#[derive(Default)]
pub(super) struct Step {
    pub(super) member: Option<MemberStatus>,
    pub(super) create_pod: bool,
    pub(super) delete_pod: bool,
    pub(super) fence: Option<String>,
    /// A process of the slot that outlived its pod, fenced at its last address (a second
    /// fence of the slot: the current process may need one too).
    pub(super) fence_unstopped: Option<String>,
    pub(super) release: Option<String>,
    pub(super) events: Vec<MemberEvent>,
}

impl Step {
    /// Records `next` as the slot's record. A state that did not change keeps its `since`, so
    /// an unchanged cluster recomputes an identical status (no writes in steady state). `Lost`
    /// on a refusal and `Lost` with a hold are different states here: a loss confirmed after
    /// a refusal is `since` its confirmation.
    pub(super) fn record(&mut self, prev: Option<&MemberStatus>, next: MemberStatus) {
        self.member = Some(match prev {
            Some(prev) if prev.state == next.state && prev.lost_on_refusal() == next.lost_on_refusal() => {
                MemberStatus {
                    since: prev.since.clone(),
                    ..next
                }
            }
            _ => next,
        });
    }

    pub(super) fn tell(&mut self, slot: Slot, reason: MemberReason, message: String, warning: bool) {
        self.events.push(MemberEvent {
            slot,
            reason,
            message,
            warning,
        });
    }
}
