//! Processes that outlived their pods (docs/design.md §9.5): which are still looked for at
//! their last address, and what finding one serving or fenced there does to the record.

use super::holds::{hold_end, restart_hold};
use super::input::PlanInput;
use super::step::Step;
use crate::crd::reasons::MemberReason;
use crate::crd::{MemberStatus, UnstoppedProcess};
use crate::decide::observe::{KubeletAnswer, PodState, SlotObservation, UnstoppedSearch};

/// A released slot still looking for an earlier process that outlived its pod (§9.5) loses
/// its replacement in turn: the earlier process is still looked for by the new hold, else a
/// release after it would rely on that process being dead without looking. Only when the
/// replacement's own process vanished unseen too does the record keep the newer one (it ran
/// until now; the earlier one has not answered for at least a whole hold), and says so.
pub(super) fn carry_earlier_unstopped(prev: &MemberStatus, held: &mut MemberStatus, step: &mut Step) {
    let Some(earlier) = prev.unstopped.as_ref().filter(|u| !u.fenced) else {
        return;
    };
    match &held.unstopped {
        None => {
            held.unstopped = Some(earlier.clone());
            held.message = Some(format!(
                "{}; process {} (an earlier pod's, never seen to stop) is still looked for at {} before the slot is released",
                held.message.clone().unwrap_or_default(),
                earlier.run_id,
                earlier.pod_ip
            ));
        }
        Some(newer) if newer.run_id != earlier.run_id => step.tell(
            prev.slot,
            MemberReason::ReleaseAssumesProcessGone,
            format!(
                "{}: process {} (an earlier pod's, never seen to stop, not answering at {} for at least one hold) is no longer looked for: this slot's next process {} vanished unseen as well and is looked for at {} instead; a release relies on {} being dead",
                prev.name, earlier.run_id, earlier.pod_ip, newer.run_id, newer.pod_ip, earlier.run_id
            ),
            true,
        ),
        Some(_) => {}
    }
}

/// What looking for a removed member's unstopped process came to.
pub(super) enum LookedFor {
    /// Plan from this record (the process marked fenced if it was seen so).
    PlanFrom(MemberStatus),
    /// Found letting clients in: fenced there, and this record's hold restarts.
    Refenced(MemberStatus),
}

/// A removed member's process that its vanished pod left behind, not yet found fenced.
pub(super) fn removed_unstopped(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    obs: &SlotObservation,
    step: &mut Step,
) -> LookedFor {
    let Some(u) = prev.unstopped.as_ref().filter(|u| !u.fenced) else {
        return LookedFor::PlanFrom(prev.clone());
    };
    let found = match obs.unstopped.as_ref().map(|s| &s.answer) {
        Some(Ok(info)) if info.run_id == u.run_id => info.client_enabled,
        _ => return LookedFor::PlanFrom(prev.clone()),
    };
    if !found {
        let mut next = prev.clone();
        next.unstopped = Some(UnstoppedProcess {
            fenced: true,
            ..u.clone()
        });
        return LookedFor::PlanFrom(next);
    }
    let why = format!(
        "removed by scale-down: process {} at {} outlived its pod and still lets lock clients in; fenced, and the hold restarts before the shorter list is published",
        u.run_id, u.pod_ip
    );
    LookedFor::Refenced(refence_unstopped(input, prev, u, why, step))
}

/// A process that outlived its pod, found letting lock clients in where it ran: fenced there
/// (event `UnstoppedProcessFenced`, saying `why`), and the record's hold restarts. The record
/// keeps `unstopped` (not yet seen fenced: only those are looked for).
pub(super) fn refence_unstopped(
    input: &PlanInput<'_>,
    prev: &MemberStatus,
    u: &UnstoppedProcess,
    why: String,
    step: &mut Step,
) -> MemberStatus {
    step.fence_unstopped = Some(u.run_id.clone());
    step.tell(
        prev.slot,
        MemberReason::UnstoppedProcessFenced,
        format!("{}: {why}", prev.name),
        true,
    );
    let (until, _) = hold_end(input, prev);
    restart_hold(input, prev.clone(), until, &why)
}

/// The process of `prev` when its pod is gone (or failed) without the process having been
/// seen to stop, and without it having been seen fenced: it may still serve (§9.5).
pub(super) fn vanished_unfenced(prev: &MemberStatus, obs: &SlotObservation) -> Option<UnstoppedProcess> {
    if let Some(u) = &prev.unstopped {
        return Some(u.clone());
    }
    let seen_fenced = prev.state.is_holding() && prev.held_until.is_some();
    if seen_fenced || !(obs.pod == PodState::Missing || obs.stop_unconfirmed) {
        return None;
    }
    prev.process_record()
}

/// What shows that a process which outlived its pod can no longer grant a lock: the only
/// grounds a release of its slot may rest on (docs/design.md §9.5). A probe that timed out, or
/// an address that does not answer, is none of them: under load, or behind a partition that
/// cuts off the operator but not every client, a living process answers neither.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Gone {
    /// It answered and was seen fenced (it starts fenced again if restarted).
    Fenced,
    /// Every way of reaching its address refused the connection: nothing listens there.
    Refused(String),
    /// Its address answers as another process of the operator's (another run id, a pod UID
    /// in its title): that listener is not the one on record.
    Replaced { run_id: String },
    /// Its node's kubelet answered and runs no container of its pod.
    KubeletRunsNone { node: String },
    /// An admin asserted it (annotation [`PROCESSES_GONE`] names its run id).
    Asserted,
    /// Its node is tainted `node.kubernetes.io/out-of-service`: an admin asserts the node is
    /// shut down (what Kubernetes' non-graceful node shutdown asks of whoever sets it).
    OutOfService { node: String },
}

impl std::fmt::Display for Gone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gone::Fenced => f.write_str("it was seen fenced"),
            Gone::Refused(why) => write!(f, "its address refuses connections ({why})"),
            Gone::Replaced { run_id } => write!(f, "its address answers as process {run_id}"),
            Gone::KubeletRunsNone { node } => {
                write!(f, "the kubelet of node {node} runs no container of its pod")
            }
            Gone::Asserted => write!(f, "an admin asserted it (annotation {PROCESSES_GONE})"),
            Gone::OutOfService { node } => write!(
                f,
                "its node {node} is tainted node.kubernetes.io/out-of-service (an admin asserts it is shut down)"
            ),
        }
    }
}

/// Tells that `u`, a process of `prev`'s slot that outlived its pod, is proven unable to grant
/// a lock (`gone`), so it is no longer looked for (event `UnstoppedProcessGone`).
pub(super) fn tell_gone(prev: &MemberStatus, u: &UnstoppedProcess, gone: &Gone, step: &mut Step) {
    step.tell(
        prev.slot,
        MemberReason::UnstoppedProcessGone,
        format!(
            "{}: process {} (its pod vanished while it ran) can grant no lock any more: {gone}; it is no longer looked for",
            prev.name, u.run_id
        ),
        false,
    );
}

/// Annotation on a RedlockCluster: run ids (comma-separated) of processes that outlived their
/// pods and that an admin asserts are dead (their machine is powered off for good, say). The
/// operator cannot prove it for a node that never reports again; this is the admin's word.
pub(crate) const PROCESSES_GONE: &str = "redlock.dev/processes-gone";

/// The run ids an admin asserts gone ([`PROCESSES_GONE`]), from the annotation's value.
pub(crate) fn asserted_gone(value: Option<&str>) -> std::collections::BTreeSet<String> {
    value
        .unwrap_or_default()
        .split([',', ' ', '\n'])
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Whether something positive shows that `u` can no longer grant a lock (see [`Gone`]), or
/// why nothing does. `search` is this reconcile's look for it; `asserted` the run ids an admin
/// asserts gone.
pub(crate) fn gone_evidence(
    u: &UnstoppedProcess,
    search: Option<&UnstoppedSearch>,
    asserted: &std::collections::BTreeSet<String>,
) -> Result<Gone, String> {
    if u.fenced {
        return Ok(Gone::Fenced);
    }
    if asserted.contains(&u.run_id) {
        return Ok(Gone::Asserted);
    }
    let Some(search) = search else {
        return Err(format!("{} was not looked at yet", u.pod_ip));
    };
    let serving = matches!(&search.answer, Ok(info) if info.run_id == u.run_id && info.client_enabled);
    if let (true, false, Some(node)) = (search.out_of_service, serving, &u.node) {
        return Ok(Gone::OutOfService { node: node.clone() });
    }
    let at_address = match &search.answer {
        Ok(info) if info.run_id == u.run_id && !info.client_enabled => return Ok(Gone::Fenced),
        // Letting clients in: the callers fence it; nothing here may release its slot.
        Ok(info) if info.run_id == u.run_id => {
            return Err(format!("it still lets lock clients in at {}", u.pod_ip));
        }
        Ok(info) if info.pod_uid.is_some() => {
            return Ok(Gone::Replaced {
                run_id: info.run_id.clone(),
            });
        }
        Ok(info) => format!(
            "{} answers as process {}, whose title names no pod",
            u.pod_ip, info.run_id
        ),
        Err(failure) if failure.refused => return Ok(Gone::Refused(failure.why.clone())),
        Err(failure) => format!("nothing answered at {} ({})", u.pod_ip, failure.why),
    };
    match (&search.kubelet, &u.node) {
        (KubeletAnswer::RunsNone, Some(node)) => Ok(Gone::KubeletRunsNone { node: node.clone() }),
        (KubeletAnswer::Runs, Some(node)) => Err(format!(
            "{at_address}, and the kubelet of node {node} still runs a container of its pod"
        )),
        (KubeletAnswer::Unknown(why), Some(node)) => Err(format!(
            "{at_address}, and the kubelet of node {node} could not tell ({why})"
        )),
        _ => Err(format!(
            "{at_address}, and its record names no node whose kubelet could be asked"
        )),
    }
}

/// A pod made to replace one whose process was never seen to stop carries that process's
/// record (`children::pod::UNSTOPPED_PREDECESSOR`), the second record of it: a status wiped,
/// or restored from before the pod was made, cannot vouch for the pod and would forget that
/// process, releasing the replacement after one hold while the old process may still grant
/// locks. Where the status cannot vouch, the pod's record is taken back, so that the slot is
/// released only on evidence that the old process is gone (and a serving one keeps it looked
/// for), as for any `unstopped` record.
pub(super) fn predecessor(obs: &SlotObservation) -> Option<&UnstoppedProcess> {
    obs.predecessor.as_ref().filter(|u| !u.fenced)
}

/// `prev` with the pod's [`predecessor`] taken back, when `prev` is about another pod (a
/// status restored from before this pod was made) and records no process of its own that
/// outlived a pod. A record about this pod, or one that has not learnt its pod yet (a
/// replacement before its process answered), is the authority: it may have seen the old
/// process gone.
pub(super) fn recalled(prev: &MemberStatus, obs: &SlotObservation) -> Option<MemberStatus> {
    let about_another_pod = matches!((&prev.pod_uid, &obs.pod_uid), (Some(a), Some(b)) if a != b);
    if !about_another_pod || prev.unstopped.is_some() {
        return None;
    }
    let u = predecessor(obs)?;
    let mut m = prev.clone();
    m.unstopped = Some(u.clone());
    Some(m)
}

/// What a record made without the status's word says of the pod's [`predecessor`].
pub(super) fn recalled_message(m: &MemberStatus, u: &UnstoppedProcess) -> String {
    format!(
        "{}; this pod replaced one whose process {} was never seen to stop (as the pod records it), so that process is looked for at {} (and fenced if found) before the slot is released",
        m.message.as_deref().unwrap_or("no record of this pod"),
        u.run_id,
        u.pod_ip
    )
}
